"""Corrupt and foreign model folders: every fault is injected into a real saved folder, loaded through the command
lines (translate, evaluate) and the package (averaging), and must raise an error naming the file and the
problem. A pickle is never unpickled. Weights that cannot be right although their file is intact (NaN, Inf, flipped
exponent bits, tensors removed, added or reshaped) and a tokenizer that is not the model's are refused too, and
`translate` stops on a model that reaches it anyway."""

import inspect
import io
import json
import math
import os
import pickle
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import HUB_USER, tiny_model
from huggingface_hub import HfApi
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_transformer.cli.main import main
from vanilla_transformer.data.corpora import load_builtin
from vanilla_transformer.data.tokenization import tokenizer_fingerprint, train_joint_bpe
from vanilla_transformer.errors import ModelFolderError
from vanilla_transformer.files.loading import (
    bad_values,
    download_model,
    load_model_and_tokenizer,
    write_checksums,
)
from vanilla_transformer.inference.evaluation import evaluate_model_on_split
from vanilla_transformer.inference.translation import translate
from vanilla_transformer.release.folder_checks import find_pickles
from vanilla_transformer.training.checkpoints import average_checkpoints
from vanilla_transformer.training.presets import TRAINING_PRESETS

ROOT = Path(__file__).resolve().parents[2]


def command_error(capsys, run) -> str:
    """The `error: ...` line a command ends with (a user error: exit status 2, or a `sys.exit` message), not a
    traceback."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as raised:
        run()
    if isinstance(raised.value.code, str):
        return raised.value.code
    assert raised.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, lines
    return lines[0]


def good_model(tokenizer, seed: int = 0):
    """A tiny model for `tokenizer`, recording its fingerprint as `TrainingPreset.model_for` does."""
    return tiny_model(
        seed=seed,
        vocab_size=len(tokenizer),
        max_position_embeddings=128,
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
    )


@pytest.fixture(scope="module")
def good_folder(tmp_path_factory, builtin_tokenizer) -> Path:
    """A folder as our tools write it: config (with the tokenizer's fingerprint), weights, checksum, tokenizer."""
    folder = tmp_path_factory.mktemp("good") / "model"
    good_model(builtin_tokenizer).save_pretrained(folder)
    builtin_tokenizer.save_pretrained(folder)
    write_checksums(folder)
    return folder


@pytest.fixture(scope="module")
def other_tokenizer():
    """Another run's tokenizer: trained on other text (the German side only), smaller than the model's vocabulary
    and with the same special-token ids, so that only its fingerprint tells it apart."""
    pairs = load_builtin("train")["translation"]
    return train_joint_bpe([p["de"] for p in pairs], vocab_size=500)


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


def append_bytes(folder: Path) -> None:
    with (folder / "model.safetensors").open("ab") as handle:
        handle.write(b"\0" * 7)  # past the last tensor: safetensors says "not fully covered", as for a cut file


def cut_to(size: int):
    def cut(folder: Path) -> None:
        os.truncate(folder / "model.safetensors", size)

    return cut


def small_model_large_tokenizer(folder: Path) -> None:
    tiny_model().save_pretrained(folder)  # vocab_size 64, beside the 600-token tokenizer; records no fingerprint
    write_checksums(folder)


def resave_weights(folder: Path, change) -> None:
    """Rewrite model.safetensors with `change(tensors)` applied, and its checksum: a fault made before the checksum was
    written (by the process that saved the weights), which only the checks of the values can see."""
    tensors = load_file(folder / "model.safetensors")
    change(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    write_checksums(folder)


def set_value(name: str, value: float):
    def change(tensors: dict) -> None:
        tensors[name].view(-1)[7] = value

    return change


def tensor_data(path: Path) -> dict[str, tuple[int, int]]:
    """{name: (first byte, end byte)} of each tensor's data in a safetensors file."""
    data = path.read_bytes()
    header_length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + header_length])
    start = 8 + header_length
    return {
        name: (start + entry["data_offsets"][0], start + entry["data_offsets"][1])
        for name, entry in header.items()
        if name != "__metadata__"
    }


def flip_exponent_bits(names: tuple[str, ...], count: int = 64):
    """Flip the top exponent bit (bit 30) of `count` distinct float32 values, shared out among the tensors `names`,
    then drop the checksum: a folder copied without its .sha256 files, whose corruption only the values give away."""

    def flip(folder: Path) -> None:
        path = folder / "model.safetensors"
        spans, data = tensor_data(path), bytearray(path.read_bytes())
        generator = torch.Generator().manual_seed(0)
        for position, name in enumerate(names):
            start, end = spans[name]
            share = count // len(names) + (position < count % len(names))
            for value in torch.randperm((end - start) // 4, generator=generator)[:share].tolist():
                data[start + 4 * value + 3] ^= 0x40  # little-endian float32: bit 30 is bit 6 of the fourth byte
        path.write_bytes(bytes(data))
        (folder / "model.safetensors.sha256").unlink()

    return flip


def drop_tensors(prefix: str):
    def change(tensors: dict) -> None:
        for name in [name for name in tensors if name.startswith(prefix)]:
            del tensors[name]

    return change


def another_runs_tokenizer(folder: Path) -> None:
    pairs = load_builtin("train")["translation"]
    train_joint_bpe([p["de"] for p in pairs], vocab_size=500).save_pretrained(folder)


ENCODER_LAYER_1 = "model.encoder.layers.1."


FAULTS = {
    "truncated safetensors": (truncate, "model.safetensors", r"is truncated: its header describes \d+ bytes"),
    "bytes after the last tensor": (append_bytes, "model.safetensors", "is corrupted: 7 bytes follow the last tensor"),
    "no header": (cut_to(5), "model.safetensors", "is truncated: 5 bytes, too few for a safetensors header"),
    "header cut": (cut_to(40), "model.safetensors", r"is truncated or corrupted: its header length field says \d+"),
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
    "config of an impossible size": (
        lambda f: edit_config(f, lambda c: c.update(d_model=30)),
        "config.json",
        r"config.json describes no valid model \(d_model=30 is not divisible by encoder_attention_heads=4",
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
    "NaN weight": (
        lambda f: resave_weights(f, set_value("model.encoder.layers.0.ffn.fc1.weight", math.nan)),
        "model.safetensors",
        r"holds impossible weights in 1 tensor\(s\): model.encoder.layers.0.ffn.fc1.weight \(1 NaN of 2048 values\)",
    ),
    "Inf weight": (
        lambda f: resave_weights(f, set_value("model.decoder.layers.1.self_attn.v_proj.weight", -math.inf)),
        "model.safetensors",
        r"model.decoder.layers.1.self_attn.v_proj.weight \(1 Inf of 1024 values\)",
    ),
    "64 flipped exponent bits": (
        flip_exponent_bits(("model.encoder.layers.0.self_attn.q_proj.weight", "model.decoder.layers.0.ffn.fc2.weight")),
        "model.safetensors",
        r"holds impossible weights in 2 tensor\(s\): model.decoder.layers.0.ffn.fc2.weight \(32 of magnitude >= 2\^64 "
        r"of 2048 values\), model.encoder.layers.0.self_attn.q_proj.weight \(32 of magnitude >= 2\^64 of 1024 values\)",
    ),
    "exponent bits flipped in LayerNorm weights (1.0 becomes Inf)": (
        flip_exponent_bits(("model.encoder.layers.1.final_layer_norm.weight",), count=3),
        "model.safetensors",
        r"model.encoder.layers.1.final_layer_norm.weight \(3 Inf of 32 values\)",
    ),
    "an encoder layer removed": (
        lambda f: resave_weights(f, drop_tensors(ENCODER_LAYER_1)),
        "model.safetensors",
        r"lacks 12 tensor\(s\) of the model \(model.encoder.layers.1.ffn.fc1.bias, "
        r"model.encoder.layers.1.ffn.fc1.weight, .* and 7 more\) in model.safetensors: transformers would initialise "
        r"them at random",
    ),
    "an unexpected tensor": (
        lambda f: resave_weights(f, lambda t: t.update({"model.encoder.layers.2.ffn.fc1.weight": torch.zeros(64, 32)})),
        "model.safetensors",
        r"holds 1 tensor\(s\) that VanillaTransformerForConditionalGeneration with its config.json lacks "
        r"\(model.encoder.layers.2.ffn.fc1.weight\) in model.safetensors",
    ),
    "a tensor of the wrong shape": (
        lambda f: resave_weights(f, lambda t: t.update({"model.decoder.layers.0.ffn.fc1.weight": torch.zeros(48, 32)})),
        "model.safetensors",
        r"holds 1 tensor\(s\) whose shape does not match its config.json: model.decoder.layers.0.ffn.fc1.weight is "
        r"\[48, 32\] in model.safetensors, expected \[64, 32\]",
    ),
    "another run's tokenizer": (
        another_runs_tokenizer,
        "tokenizer.json",
        r"is not the one the model was trained with: its fingerprint is [0-9a-f]{16}… but .*config.json records "
        r"tokenizer_fingerprint=[0-9a-f]{16}…",
    ),
    "tokenizer.json missing": (
        lambda f: (f / "tokenizer.json").unlink(),
        "tokenizer.json",
        r"lacks tokenizer.json: a model folder needs the tokenizer saved with the model",
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_faults_are_named_by_translate_and_evaluate(fault, good_folder, tmp_path, capsys):
    inject, file_name, message = FAULTS[fault]
    folder = tmp_path / "model"
    shutil.copytree(good_folder, folder)
    inject(folder)
    (tmp_path / "test.en").write_text("a man rides a bike .\n")
    (tmp_path / "test.de").write_text("ein Mann fährt Rad .\n")

    # the command prints the message, not a traceback
    argv = ["--model", str(folder), "--input", str(tmp_path / "test.en"), "--device", "cpu"]
    error = command_error(capsys, lambda: main(["translate", *argv]))
    assert re.search(f"^error: .*{message}", error), error
    assert file_name in error and str(folder) in error
    with pytest.raises(ModelFolderError, match=message):
        evaluate_model_on_split(str(folder), "test", tmp_path, num_beams=1)


@pytest.mark.parametrize("removed", [("tokenizer_config.json",), ("tokenizer.json", "tokenizer_config.json")])
def test_missing_tokenizer_files_are_named(removed, good_folder, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(good_folder, folder)
    for name in removed:
        (folder / name).unlink()
    # transformers' own message speaks of sentencepiece and tiktoken, or loads without the special tokens
    with pytest.raises(ModelFolderError, match=f"{folder} lacks {' and '.join(removed)}: a model folder needs the "):
        load_model_and_tokenizer(folder)


def test_a_file_or_a_missing_path_given_as_the_model_folder_is_named(good_folder, tmp_path):
    """The package's loader, under every command (the command lines' --model refuses a file before it is reached)."""
    for path in (good_folder / "model.safetensors", good_folder / "config.json"):
        with pytest.raises(ModelFolderError, match=f"^{path} is a file, expected a model folder .* e.g. {good_folder}"):
            load_model_and_tokenizer(path)
    for missing in (tmp_path / "no-such-run" / "final", "./final"):
        with pytest.raises(ModelFolderError, match=f"^{Path(missing)} does not exist; pass a model folder"):
            load_model_and_tokenizer(missing)


def test_a_folder_without_a_fingerprint_falls_back_to_the_vocabulary_checks(
    builtin_tokenizer, other_tokenizer, tmp_path
):
    """Folders saved before training recorded the fingerprint still load; a foreign tokenizer that fits the
    vocabulary then goes unnoticed, one that does not is refused."""
    folder = tmp_path / "old"
    tiny_model(vocab_size=len(builtin_tokenizer), max_position_embeddings=128).save_pretrained(folder)
    other_tokenizer.save_pretrained(folder)
    edit_config(folder, lambda config: config.pop("tokenizer_fingerprint", None))  # as saved before it existed
    model, tokenizer = load_model_and_tokenizer(folder)
    assert model.config.tokenizer_fingerprint is None and len(tokenizer) == len(other_tokenizer) < 600


def test_training_records_the_fingerprint_that_the_loader_checks(builtin_tokenizer, other_tokenizer, tmp_path):
    model = TRAINING_PRESETS["demo"].model_for(builtin_tokenizer)
    assert model.config.tokenizer_fingerprint == tokenizer_fingerprint(builtin_tokenizer)
    model.save_pretrained(tmp_path)
    builtin_tokenizer.save_pretrained(tmp_path)
    recorded = json.loads((tmp_path / "config.json").read_text())["tokenizer_fingerprint"]
    assert recorded == tokenizer_fingerprint(AutoTokenizer.from_pretrained(tmp_path))
    assert load_model_and_tokenizer(tmp_path)[0].config.tokenizer_fingerprint == recorded
    other_tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ModelFolderError, match=f"Copy tokenizer.json and tokenizer_config.json .* into {tmp_path}"):
        load_model_and_tokenizer(tmp_path)


@pytest.mark.parametrize("value", [math.nan, math.inf])
@pytest.mark.parametrize("num_beams", [1, 4])
def test_translate_stops_on_non_finite_scores(value, num_beams, builtin_tokenizer, tmp_path):
    """A model loaded around the checks (plain from_pretrained) decodes NaN scores into empty lines; translate raises
    instead, naming the folder."""
    model = good_model(builtin_tokenizer)
    with torch.no_grad():
        model.model.encoder.layers[0].ffn.fc1.weight[3, 5] = value
    model.save_pretrained(tmp_path / "model")
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "model")
    with pytest.raises(ValueError, match=f"^{tmp_path / 'model'} produced non-finite scores .* re-train it"):
        translate(loaded, builtin_tokenizer, ["a man rides a bike .", "", "two dogs play ."], num_beams=num_beams)
    assert len(translate(good_model(builtin_tokenizer), builtin_tokenizer, ["a dog ."], num_beams=num_beams)) == 1


def test_a_hub_model_is_checked_as_a_folder_is_before_it_is_loaded(good_folder, tmp_path):
    """A Hub id is downloaded (over HTTP from the Hub stand-in of conftest.py) and goes through the same checks as a
    folder; a broken upload is named by its id, and nothing but the files loading reads is fetched."""
    api = HfApi()
    good, broken = f"{HUB_USER}/loading-good", f"{HUB_USER}/loading-nan"
    upload = tmp_path / "upload"
    shutil.copytree(good_folder, upload)
    torch.save({"a": 1}, upload / "training_args.bin")  # a pickle beside the weights is never downloaded
    for repo_id in (good, broken):
        api.create_repo(repo_id, exist_ok=True)
        api.upload_folder(repo_id=repo_id, folder_path=upload)
        resave_weights(upload, set_value("model.encoder.layers.0.ffn.fc1.weight", math.nan))
    model, tokenizer = load_model_and_tokenizer(good)
    reference, _ = load_model_and_tokenizer(good_folder)
    assert torch.equal(model.model.shared.weight, reference.model.shared.weight) and len(tokenizer) == 600
    assert not any(path.name.endswith(".bin") for path in download_model(good).rglob("*"))
    with pytest.raises(ModelFolderError, match=rf"^The Hub model {broken} cannot be loaded; ask its owner") as raised:
        load_model_and_tokenizer(broken)
    assert "model.encoder.layers.0.ffn.fc1.weight (1 NaN of 2048 values)" in str(raised.value)


def test_the_intact_folder_loads_and_translates(good_folder, tmp_path, capsys):
    model, tokenizer = load_model_and_tokenizer(good_folder)
    assert model.config.vocab_size == len(tokenizer) == 600
    (tmp_path / "in.en").write_text("a dog runs .\n\n")
    main(["translate", "--model", str(good_folder), "--input", str(tmp_path / "in.en"), "--num-beams", "1"])
    assert capsys.readouterr().out.count("\n") == 2


class PickleTrap:
    """Unpickling this creates a folder: proof that someone unpickled the file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_pickle_is_named_and_never_unpickled(good_folder, tmp_path, monkeypatch, capsys):
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
    argv = ["--model", str(folder), "--input", str(tmp_path / "test.en"), "--device", "cpu"]
    error = command_error(capsys, lambda: main(["translate", *argv]))
    assert re.search(f"^error: .*{expected}", error), error
    assert "save_pretrained(folder) writes model.safetensors" in error  # the fix
    with pytest.raises(ModelFolderError, match=expected):
        evaluate_model_on_split(str(folder), "test", tmp_path, num_beams=1)
    argv = ["--model", str(folder), "--split", "test", "--data-dir", str(tmp_path), "--num-beams", "1"]
    error = command_error(capsys, lambda: main(["evaluate", *argv]))
    assert re.search(f"^error: .*{expected}", error), error
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


def test_a_name_that_is_neither_a_folder_nor_a_reachable_hub_model_is_named(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelFolderError, match=r"^runs/final is not a folder here, and no Hub model of that id"):
        load_model_and_tokenizer("runs/final")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e5m2])
def test_bad_values_are_counted_in_every_float_type(dtype):
    # float8 has no aminmax kernel on the CPU: the check upcasts instead of failing (load and push both use it)
    tensor = torch.tensor([0.5, float("nan"), float("inf"), 1.0]).to(dtype)
    assert bad_values(tensor) == "1 NaN, 1 Inf of 4 values"
    assert bad_values(torch.tensor([0.5, -1.0]).to(dtype)) == ""


def test_pickles_are_found_by_content_as_well_as_by_name(tmp_path):
    torch.save({"a": 1}, tmp_path / "archive.dat")  # torch.save's zip format
    (tmp_path / "plain.json").write_bytes(pickle.dumps({"a": 1}, protocol=4))
    (tmp_path / "notes.txt").write_text("not a pickle")
    (tmp_path / "model.bin").write_bytes(b"")
    assert [p.name for p in find_pickles(tmp_path)] == ["archive.dat", "model.bin", "plain.json"]
