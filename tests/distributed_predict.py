"""Run by tests/training/test_distributed.py, in one process or under torchrun: `VanillaTransformerTrainer.predict`
(generation) of a seeded tiny model on 7 random sources, eval batches of 2 per process; the main process writes the
predictions as JSON to the path given."""

import json
import os
import sys
from pathlib import Path

import torch
from datasets import Dataset
from transformers import Seq2SeqTrainingArguments

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import PAD, tiny_model  # noqa: E402

from vanilla_transformer.training.trainer import VanillaTransformerTrainer  # noqa: E402

PAIRS = 7


def collate(rows: list[dict]) -> dict[str, torch.Tensor]:
    """Right-pad sources with PAD and labels with -100."""
    width = max(len(row["input_ids"]) for row in rows)
    ids = torch.tensor([row["input_ids"] + [PAD] * (width - len(row["input_ids"])) for row in rows])
    return {
        "input_ids": ids,
        "attention_mask": (ids != PAD).long(),
        "labels": torch.tensor([r["labels"] for r in rows]),
    }


def predict(output_dir: str) -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)
    sources = [torch.randint(3, 64, (4 + i % 5,), generator=generator).tolist() + [2] for i in range(PAIRS)]
    dataset = Dataset.from_dict({"input_ids": sources, "labels": [[5, 2]] * PAIRS})
    args = Seq2SeqTrainingArguments(
        output_dir=output_dir,
        per_device_eval_batch_size=2,
        predict_with_generate=True,
        generation_max_length=12,
        generation_num_beams=1,
        report_to=[],
        use_cpu=True,
    )
    trainer = VanillaTransformerTrainer(
        model=tiny_model(), args=args, data_collator=collate, max_tokens=None, warmup_steps=1
    )
    return trainer.predict(dataset).predictions.tolist()


if __name__ == "__main__":
    predictions = predict(str(Path(sys.argv[1]).parent / "trainer"))
    if os.environ.get("RANK", "0") == "0":
        Path(sys.argv[1]).write_text(json.dumps(predictions))
