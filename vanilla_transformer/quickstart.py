"""The README's main job: the paper's base model end to end through the transformers API."""

import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM

from .remote_code import generate_without_package


def run(output_dir: str, vocab_size: int = 37000) -> None:
    """Build the base model, generate, save to `output_dir`, reload it without this package and compare."""
    torch.manual_seed(0)
    config = AutoConfig.for_model("vanilla_transformer", vocab_size=vocab_size)
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    parameters = sum(p.numel() for p in model.parameters())
    print(
        f"{type(model).__name__}: {parameters / 1e6:.1f}M parameters (paper: 65M), "
        f"attention={model.config._attn_implementation}"
    )

    input_ids = torch.randint(4, vocab_size, (2, 12))
    mask = torch.ones_like(input_ids)
    mask[1, 8:] = 0
    inputs = {"input_ids": input_ids, "attention_mask": mask}
    decoding = {"num_beams": 4, "max_new_tokens": 8}
    start = time.perf_counter()
    generated = model.generate(**inputs, **decoding).tolist()
    print(f"beam-4 generation by the untrained model in {time.perf_counter() - start:.2f}s: {generated}")

    output = Path(output_dir)
    model.save_pretrained(output)
    print(f"saved {sorted(p.name for p in output.iterdir())} to {output}")

    remote = generate_without_package(output, inputs, **decoding)
    if remote != generated:
        raise RuntimeError(f"the folder reloaded as remote code generated {remote}, not {generated}")
    print("reloaded with trust_remote_code=True in a process without vanilla_transformer: identical output")
