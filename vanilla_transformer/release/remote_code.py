"""Check that a saved folder works as Hub remote code: load it in a fresh Python process in which
`vanilla_transformer` cannot be imported, as on the machine of someone who never installed this package."""

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

# First lines of every clean process: `vanilla_transformer` is installed (editable) in the development environment,
# so a finder placed before all others refuses it, for `import` and `importlib` alike; the process checks that.
_BLOCK_PACKAGE = """
import importlib.abc, sys
class BlockPackage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "vanilla_transformer":
            raise ImportError("vanilla_transformer is blocked in this process")
sys.meta_path.insert(0, BlockPackage())
try:
    import vanilla_transformer
except ImportError:
    pass
else:
    raise SystemExit("vanilla_transformer is importable in the clean process")
"""

# Loads each model of the JSON request with the Auto classes as remote code, then generates from the tensors saved in
# `inputs_file` (ids only), or from the tokenized `sentences` (ids and texts).
_SCRIPT = (
    _BLOCK_PACKAGE
    + """
import json
import torch
from transformers import AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer
request = json.loads(sys.argv[1])
results = []
for source, revision in request["models"]:
    model = AutoModelForSeq2SeqLM.from_pretrained(source, revision=revision, trust_remote_code=True).eval()
    assert model.__module__.startswith("transformers_modules."), model.__module__
    base = AutoModel.from_pretrained(source, revision=revision, trust_remote_code=True)
    assert type(base).__name__ == "VanillaTransformerModel", type(base)
    if "inputs_file" in request:
        results.append(model.generate(**torch.load(request["inputs_file"]), **request["generate_kwargs"]).tolist())
        continue
    tokenizer = AutoTokenizer.from_pretrained(source, revision=revision, trust_remote_code=True)
    batch = tokenizer(request["sentences"], return_tensors="pt", padding=True)
    ids = model.generate(**batch, **request["generate_kwargs"])
    results.append({"ids": ids.tolist(), "texts": tokenizer.batch_decode(ids, skip_special_tokens=True)})
print(json.dumps(results))
"""
)


def _run_clean(request: dict, scratch: str, offline: bool) -> list:
    """Run `_SCRIPT` on `request` in a fresh interpreter, as on a new machine: an empty Hub cache, an empty
    PYTHONPATH, and a working folder other than the project root (whose `vanilla_transformer/` is importable)."""
    env = dict(os.environ, PYTHONPATH="", HF_HOME=str(Path(scratch) / "hf_home"), HF_HUB_OFFLINE=str(int(offline)))
    # as many threads as this process uses: on a busy machine torch's default (one per core) only makes them wait
    env["OMP_NUM_THREADS"] = str(torch.get_num_threads())
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(request)],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"Loading as remote code in a clean process failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def translate_without_package(
    sentences: list[str], models: Sequence[str | Path | tuple[str, str | None]], **generate_kwargs
) -> list[dict]:
    """Load each of `models` with `trust_remote_code=True` (`AutoTokenizer`, `AutoModelForSeq2SeqLM`, `AutoModel`)
    in one clean process and translate `sentences` with each: `[{"ids", "texts"}]`, in the order of `models`.

    A model is a saved folder (loaded offline), a Hub repo id, or a `(repo id, revision)` pair; repos are downloaded
    into an empty cache through this process's `HF_ENDPOINT` and `HF_TOKEN`.
    """
    pairs = [(str(model), None) if isinstance(model, str | Path) else (str(model[0]), model[1]) for model in models]
    request = {"sentences": sentences, "models": pairs, "generate_kwargs": generate_kwargs}
    with tempfile.TemporaryDirectory() as scratch:
        return _run_clean(request, scratch, offline=all(Path(source).is_dir() for source, _ in pairs))


def generate_without_package(folder: str | Path, inputs: dict[str, torch.Tensor], **generate_kwargs) -> list:
    """Load `folder` with `trust_remote_code=True` (AutoModelForSeq2SeqLM and AutoModel) in a clean process and
    return what `generate(**inputs, **generate_kwargs)` produces there, as nested lists of token ids."""
    with tempfile.TemporaryDirectory() as scratch:
        inputs_file = Path(scratch) / "inputs.pt"
        torch.save(inputs, inputs_file)
        models = [(str(Path(folder).resolve()), None)]
        request = {"models": models, "inputs_file": str(inputs_file), "generate_kwargs": generate_kwargs}
        return _run_clean(request, scratch, offline=True)[0]
