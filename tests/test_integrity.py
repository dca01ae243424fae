"""Corrupt and foreign model folders: every fault is injected into a real saved folder, loaded through the command
lines (translate.py, evaluate_bleu.py) and the package (averaging), and must raise an error naming the file and the
problem. A pickle is never unpickled."""

import importlib.util
import inspect
import io
import json
import os
import pickle
import re
import runpy
import shutil
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_model

from vanilla_transformer.checkpoints import average_checkpoints
from vanilla_transformer.evaluation import evaluate_model_on_split
from vanilla_transformer.integrity import ModelFolderError, load_model_and_tokenizer, write_checksums

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_script", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def good_folder(tmp_path_factory, builtin_tokenizer) -> Path:
    """A folder as our tools write it: config, weights, checksum, tokenizer."""
    folder = tmp_path_factory.mktemp("good") / "model"
    tiny_model(vocab_size=len(builtin_tokenizer), max_position_embeddings=128).save_pretrained(folder)
    builtin_tokenizer.save_pretrained(folder)
    write_checksums(folder)
    return folder


def edit_config(folder: Path, change) -> None:
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))


def truncate(folder: Path) -> None:
    path = folder / "model.safetensors"
    os.truncate(path, path.stat().st_size // 2)


def flip_bit(offset_from_end: int):
    def flip(folder: Path) -> None:
        data = bytearray((folder / "model.safetensors").read_bytes())
        data[-offset_from_end] ^= 0x10  # a single bit, in the last tensor's bytes
        (folder / "model.safetensors").write_bytes(bytes(data))

    return flip


def flip_header_bit(folder: Path) -> None:
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[20] ^= 0x01  # inside the JSON header: a key or a number changes
    (folder / "model.safetensors").write_bytes(bytes(data))


def small_model_large_tokenizer(folder: Path) -> None:
    tiny_model().save_pretrained(folder)  # vocab_size 64, beside the 600-token tokenizer
    write_checksums(folder)


FAULTS = {
    "truncated safetensors": (truncate, "model.safetensors", r"is truncated: its header describes \d+ bytes"),
    "bit flip in tensor data": (flip_bit(100), "model.safetensors", "does not match its checksum in "),
    "bit flip in the header": (flip_header_bit, "model.safetensors", "not a valid safetensors file|corrupted header"),
    "config of another model": (
        lambda f: edit_config(f, lambda c: c.update(model_type="bert")),
        "config.json",
        "has model_type='bert' \\(expected 'vanilla_transformer'\\)",
    ),
    "config without model_type": (
        lambda f: edit_config(f, lambda c: c.pop("model_type")),
        "config.json",
        "has no model_type",
    ),
    "config missing fields": (
        lambda f: edit_config(f, lambda c: (c.pop("d_model"), c.pop("encoder_layers"))),
        "config.json",
        "lacks d_model, encoder_layers",
    ),
    "config not JSON": (
        lambda f: (f / "config.json").write_text('{"model_type": "vanilla_tra'),
        "config.json",
        "is not valid JSON",
    ),
    "tokenizer larger than the vocabulary": (
        small_model_large_tokenizer,
        "tokenizer.json",
        "has 600 tokens but the model's config.json has vocab_size=64",
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_faults_are_named_by_translate_and_evaluate(fault, good_folder, tmp_path):
    inject, file_name, message = FAULTS[fault]
    folder = tmp_path / "model"
    shutil.copytree(good_folder, folder)
    inject(folder)
    (tmp_path / "test.en").write_text("a man rides a bike .\n")
    (tmp_path / "test.de").write_text("ein Mann fährt Rad .\n")

    # the command prints the message, not a traceback
    with pytest.raises(SystemExit, match=f"^error: ModelFolderError: .*{message}") as raised:
        load_script("translate").main(["--model", str(folder), "--input", str(tmp_path / "test.en"), "--device", "cpu"])
    assert file_name in str(raised.value) and str(folder) in str(raised.value)
    with pytest.raises(ModelFolderError, match=message):
        evaluate_model_on_split(str(folder), "test", tmp_path, num_beams=1)


def test_the_intact_folder_loads_and_translates(good_folder, tmp_path, capsys):
    model, tokenizer = load_model_and_tokenizer(good_folder)
    assert model.config.vocab_size == len(tokenizer) == 600
    (tmp_path / "in.en").write_text("a dog runs .\n\n")
    load_script("translate").main(
        ["--model", str(good_folder), "--input", str(tmp_path / "in.en"), "--num-beams", "1", "--device", "cpu"]
    )
    assert capsys.readouterr().out.count("\n") == 2


class PickleTrap:
    """Unpickling this creates a folder: proof that someone unpickled the file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_pickle_is_named_and_never_unpickled(good_folder, tmp_path, monkeypatch):
    # the trap is live: unpickling a copy of it runs its code
    pickle.loads(pickle.dumps(PickleTrap(tmp_path / "trap-works")))
    assert (tmp_path / "trap-works").is_dir()

    marker = tmp_path / "unpickled"
    folder = tmp_path / "model"
    shutil.copytree(good_folder, folder)
    for name in ("model.safetensors", "model.safetensors.sha256"):
        (folder / name).unlink()
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(PickleTrap(marker)))
    (tmp_path / "test.en").write_text("a dog runs .\n")
    (tmp_path / "test.de").write_text("ein Hund rennt .\n")

    expected = r"pytorch_model.bin holds the weights as a pickle .* has no model.safetensors"
    with pytest.raises(SystemExit, match=f"^error: ModelFolderError: .*{expected}") as raised:
        load_script("translate").main(["--model", str(folder), "--input", str(tmp_path / "test.en"), "--device", "cpu"])
    assert "save_pretrained(folder) writes model.safetensors" in str(raised.value)  # the fix
    with pytest.raises(ModelFolderError, match=expected):
        evaluate_model_on_split(str(folder), "test", tmp_path, num_beams=1)
    monkeypatch.setattr(sys, "argv", ["evaluate_bleu.py", "--model", str(folder), "--split", "test",
                                      "--data-dir", str(tmp_path), "--num-beams", "1"])  # fmt: skip
    with pytest.raises(SystemExit, match=f"^error: ModelFolderError: .*{expected}"):
        runpy.run_path(str(ROOT / "scripts" / "evaluate_bleu.py"), run_name="__main__")
    assert not marker.exists()


def test_averaging_names_a_corrupt_checkpoint(tmp_path):
    for seed, step in enumerate((10, 20)):
        tiny_model(seed=seed).save_pretrained(tmp_path / f"checkpoint-{step}")
        write_checksums(tmp_path / f"checkpoint-{step}")
    flip_bit(40)(tmp_path / "checkpoint-10")
    with pytest.raises(ModelFolderError, match=r"checkpoint-10/model.safetensors does not match its checksum"):
        average_checkpoints(tmp_path, tmp_path / "final", last=2)
    assert not (tmp_path / "final").exists()
    truncate(tmp_path / "checkpoint-20")
    with pytest.raises(ModelFolderError, match=r"checkpoint-20/model.safetensors is truncated"):
        average_checkpoints(tmp_path, tmp_path / "final", last=1)


def test_resume_opens_the_trainers_pickles_only_with_weights_only():
    """The Trainer's own checkpoint files (optimizer.pt, scheduler.pt, rng_state.pth) are pickles; transformers opens
    them only with torch.load(weights_only=True), which refuses code. training_args.bin is written, never read."""
    from transformers import trainer

    source = inspect.getsource(trainer)
    calls = re.findall(r"torch\.load\((.*?)\)\n", source, flags=re.S)
    assert calls and all("weights_only=True" in call for call in calls), calls
    assert all("torch.save" in line for line in source.splitlines() if "TRAINING_ARGS_NAME)" in line)
    with pytest.raises(pickle.UnpicklingError):  # what weights_only=True does with the trap
        torch.load(io.BytesIO(pickle.dumps(PickleTrap(Path("/nonexistent/marker")))), weights_only=True)
