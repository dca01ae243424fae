"""Check that a saved folder works as Hub remote code: load it in a fresh Python process in which
`vanilla_transformer` cannot be imported, as on the machine of someone who never installed this package."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

_SCRIPT = """
import builtins, json, sys
real_import = builtins.__import__
def guarded_import(name, *args, **kwargs):
    if name.split(".")[0] == "vanilla_transformer":
        raise ImportError("vanilla_transformer is blocked in this process")
    return real_import(name, *args, **kwargs)
builtins.__import__ = guarded_import
import torch
from transformers import AutoModel, AutoModelForSeq2SeqLM
folder, inputs_file, generate_kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
assert model.__module__.startswith("transformers_modules."), model.__module__
base = AutoModel.from_pretrained(folder, trust_remote_code=True)
assert type(base).__name__ == "VanillaTransformerModel", type(base)
print(json.dumps(model.generate(**torch.load(inputs_file), **generate_kwargs).tolist()))
"""


def generate_without_package(folder: str | Path, inputs: dict[str, torch.Tensor], **generate_kwargs) -> list:
    """Load `folder` with `trust_remote_code=True` (AutoModelForSeq2SeqLM and AutoModel) in a clean process and
    return what `generate(**inputs, **generate_kwargs)` produces there, as nested lists of token ids."""
    with tempfile.TemporaryDirectory() as scratch:
        inputs_file = Path(scratch) / "inputs.pt"
        torch.save(inputs, inputs_file)
        env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(Path(scratch) / "hf_home"), PYTHONPATH="")
        result = subprocess.run(
            [sys.executable, "-c", _SCRIPT, str(Path(folder).resolve()), str(inputs_file), json.dumps(generate_kwargs)],
            cwd=scratch,  # not the project root, whose `vanilla_transformer/` folder would be importable
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    if result.returncode != 0:
        raise RuntimeError(f"Loading {folder} as remote code failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
