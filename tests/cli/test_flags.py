"""Every flag checked where it is parsed (issue 25): a value no run can use stops the command at once with one line
naming the flag, the value and the fix, exit status 2 and no traceback; user errors found later (a file missing, a
run folder without checkpoints) end the same way, while `--debug` shows their traceback and a bug keeps its own.

Most cases run the parser in this process; a few run the real command line in a subprocess, as a user would."""

import argparse
import errno
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import command_main, run_in_process, tiny_model

from vanilla_transformer.cli.arguments import available_devices, device
from vanilla_transformer.cli.main import _run, _set_up, build_parser, main, user_error_message
from vanilla_transformer.errors import ModelFolderError, SettingsError, UsageError
from vanilla_transformer.training.presets import PRESET_FLAGS, get_training_preset
from vanilla_transformer.training.ranges import MAX_NUM_BEAMS, TRAINING_RANGES
from vanilla_transformer.training.settings import TrainingSettings

ROOT = Path(__file__).resolve().parents[2]
TRAINING_RANGES_FLAGS = {f"--{name.replace('_', '-')}" for name in TRAINING_RANGES}


@pytest.fixture
def paths(tmp_path: Path, monkeypatch) -> dict[str, str]:
    """A file, a folder, and paths that do not exist, with the working directory in `tmp_path`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("a line\n")
    (tmp_path / "folder").mkdir()
    return {  # in the order of replacement: UNDER_FILE holds FILE
        "UNDER_FILE": str(tmp_path / "notes.txt" / "sub"),
        "FILE": str(tmp_path / "notes.txt"),
        "DIR": str(tmp_path / "folder"),
        "MISSING": str(tmp_path / "missing"),
    }


def refusal(argv: list[str], capsys) -> str:
    """The `error:` line the command line ends with for `argv`, the parser's (after its usage) or that of the run's
    settings, once it has exited with status 2."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


# (argv, the flag, the value as the message gives it, a part of the fix); FILE, DIR, MISSING and UNDER_FILE are paths
REFUSED = [
    # the examples of issue 25
    (
        ["train", "--output-dir", "o", "--per-device-batch-size", "0"],
        "--per-device-batch-size",
        "0",
        "leave the flag out",
    ),
    (["train", "--output-dir", "o", "--tokens-per-update", "0"], "--tokens-per-update", "0", "at least 1"),
    (["train", "--output-dir", "o", "--max-steps", "0"], "--max-steps", "0", "at least 1"),
    (["translate", "--model", "m", "--num-beams", "9000"], "--num-beams", "9000", f"to {MAX_NUM_BEAMS}"),
    (["translate", "--model", "m", "--num-beams", "0"], "--num-beams", "0", "1 (greedy)"),
    (["translate", "--model", "m", "--input", "DIR"], "--input", "DIR", "is a folder, not a file"),
    (["evaluate", "--hypotheses", "DIR", "--references", "FILE"], "--hypotheses", "DIR", "is a folder, not a file"),
    # every preset flag that counts or weighs something
    (["train", "--output-dir", "o", "--save-steps", "-3"], "--save-steps", "-3", "at least 1"),
    (["train", "--output-dir", "o", "--eval-steps", "0"], "--eval-steps", "0", "at least 1"),
    (["train", "--output-dir", "o", "--warmup-steps", "0"], "--warmup-steps", "0", "at least 1"),
    (["train", "--output-dir", "o", "--average-last", "0"], "--average-last", "0", "at least 1"),
    (["train", "--output-dir", "o", "--max-tokens", "0"], "--max-tokens", "0", "at least 1"),
    (["train", "--output-dir", "o", "--max-length", "0"], "--max-length", "0", "at least 1"),
    (["train", "--output-dir", "o", "--vocab-size", "259"], "--vocab-size", "259", "give 260 or more"),
    (["train", "--output-dir", "o", "--lr-factor", "0"], "--lr-factor", "0", "above 0"),
    (["train", "--output-dir", "o", "--lr-factor", "nan"], "--lr-factor", "nan is not a finite number", "above 0"),
    (["train", "--output-dir", "o", "--label-smoothing", "1.5"], "--label-smoothing", "1.5", "from 0 to 1"),
    (["train", "--output-dir", "o", "--dropout", "1"], "--dropout", "1", "below 1"),
    # the training options
    (["train", "--output-dir", "o", "--max-grad-norm", "-1"], "--max-grad-norm", "-1", "give 0 for no clipping"),
    (["train", "--output-dir", "o", "--eval-beams", "0"], "--eval-beams", "0", "1 (greedy)"),
    (["train", "--output-dir", "o", "--eval-samples", "0"], "--eval-samples", "0", "leave the flag out"),
    (["train", "--output-dir", "o", "--seed", "-1"], "--seed", "-1", "from 0 to 4294967295"),
    (["train", "--output-dir", "o", "--threads", "0"], "--threads", "0", "leave the flag out"),
    (
        ["train", "--output-dir", "o", "--log-steps", "x"],
        "--log-steps",
        "'x'",
        "not a whole number: the number of updates",
    ),
    (["train", "--output-dir", "FILE"], "--output-dir", "FILE", "is a file, not a folder"),
    (["demo", "--max-steps", "2"], "--max-steps", "2", "give 3 or more"),
    (["demo", "--output-dir", "UNDER_FILE"], "--output-dir", "UNDER_FILE", "is a file, so nothing can be created"),
    (["train-tokenizer", "--output-dir", "o", "--vocab-size", "100"], "--vocab-size", "100", "at least 260"),
    # decoding and scoring
    (["translate", "--model", "m", "--batch-size", "0"], "--batch-size", "0", "give 1 or more"),
    (["translate", "--model", "m", "--num-beams", "four"], "--num-beams", "'four'", "not a whole number"),
    (["translate", "--model", "m", "--input", "MISSING"], "--input", "no file MISSING", "check the path"),
    (["translate", "--model", "m", "--output", "DIR"], "--output", "DIR", "is a folder: give a file's path"),
    (["translate", "--model", "m", "--device", "cuda:99"], "--device", "'cuda:99'", "give one of cpu"),
    (["translate", "--model", "FILE"], "--model", "FILE", "is a file: give the model's folder"),
    (["translate", "--model", "./no-model"], "--model", "no folder ./no-model", "not a Hub id"),
    (["evaluate", "--model", "m", "--split", "valid", "--num-beams", "0"], "--num-beams", "0", "1 (greedy)"),
    (["evaluate", "--hypotheses", "FILE", "--references", "MISSING"], "--references", "no file MISSING", "check"),
    (["evaluate", "--model", "m", "--split", "valid", "--data-dir", "MISSING"], "--data-dir", "no folder MISSING", ""),
    (["evaluate", "--model", "m", "--output-hypotheses", "DIR"], "--output-hypotheses", "DIR", "is a folder"),
    (["plot-attention", "--model", "m", "--sentence", "s", "--layers", "0", "-1"], "--layers", "-1", "give 0 or more"),
    (["plot-attention", "--model", "m", "--sentence", "s", "--heads", "x"], "--heads", "'x'", "not a whole number"),
    # runs, releases and the Hub
    (["average", "--run-dir", "MISSING", "--output-dir", "o"], "--run-dir", "no folder MISSING", "check the path"),
    (["average", "--run-dir", "DIR", "--output-dir", "o", "--last", "0"], "--last", "0", "give 1 or more"),
    (["release", "--run-dir", "FILE", "--output-dir", "o"], "--run-dir", "FILE", "is a file, not a folder"),
    (["release", "--run-dir", "DIR", "--output-dir", "o", "--train-hours", "-1"], "--train-hours", "-1", "0 or more"),
    (
        ["release", "--run-dir", "DIR", "--output-dir", "o", "--length-penalties", "0.6,,1"],
        "--length-penalties",
        "'0.6,,1'",
        "separated by commas",
    ),  # fmt: skip
    (
        ["release", "--run-dir", "DIR", "--output-dir", "o", "--length-penalties", "0.6,inf"],
        "--length-penalties",
        "'0.6,inf'",
        "not a finite number",
    ),  # fmt: skip
    (["push", "MISSING", "--repo-id", "me/model"], "folder", "no folder MISSING", "check the path"),
    (["push", "DIR", "--repo-id", "model"], "--repo-id", "'model'", "namespace/name"),
    (["push", "DIR", "--repo-id", "me/my model"], "--repo-id", "'me/my model'", "namespace/name"),
    (["download-multi30k", "--data-dir", "FILE"], "--data-dir", "FILE", "is a file, not a folder"),
]


@pytest.mark.parametrize(("argv", "flag", "value", "fix"), REFUSED, ids=[f"{case[0][0]}{case[1]}" for case in REFUSED])
def test_a_value_no_run_can_use_is_refused_in_one_line(argv, flag, value, fix, paths, capsys):
    def real(text: str) -> str:
        for name, path in paths.items():
            text = text.replace(name, path)
        return text

    line = refusal([real(part) for part in argv], capsys)
    if argv[0].startswith("train") and flag in TRAINING_RANGES_FLAGS and "not a" not in fix:  # checked once, later
        assert line.startswith("error: ")
    else:
        assert line.startswith(f"vanilla-transformer {argv[0]}: error: argument {flag}: ")
    assert real(value) in line and real(fix) in line
    assert not Path("o").exists()  # nothing made


def test_values_at_the_edges_are_accepted(paths):
    parse = build_parser().parse_args
    train = ["--dropout", "0", "--label-smoothing", "1", "--seed", "0", "--max-grad-norm", "0", "--max-steps", "1"]
    args = parse(["train", "--output-dir", "new/run", *train, "--vocab-size", "260", "--lr-factor", "1e-3"])
    assert (args.dropout, args.label_smoothing, args.max_steps, args.vocab_size) == (0.0, 1.0, 1, 260)
    args = parse(["translate", "--model", paths["DIR"], "--num-beams", str(MAX_NUM_BEAMS), "--device", "cpu"])
    assert (args.num_beams, args.input, args.output) == (MAX_NUM_BEAMS, "-", "-")  # '-': stdin and stdout
    args = parse(["translate", "--model", "someone/model", "--input", paths["FILE"], "--output", "new/out.de"])
    assert args.model == "someone/model" and args.output == "new/out.de"
    args = parse(["release", "--run-dir", paths["DIR"], "--output-dir", paths["DIR"], "--length-penalties", "0.6, 1"])
    assert args.length_penalties == [0.6, 1.0]
    assert parse(["demo", "--max-steps", "3"]).max_steps == 3
    assert parse(["plot-attention", "--model", "m", "--sentence", "s", "--layers", "0", "3"]).layers == [0, 3]


def test_every_number_and_path_flag_is_checked():
    """No command keeps a bare int or float, and every flag that names a file or folder has a check."""
    path_flags = {"model", "input", "output", "hypotheses", "references", "tokenized_references", "output_hypotheses",
                  "folder"}  # fmt: skip
    subparsers = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    unchecked = [
        f"{name} {action.option_strings or action.dest}"
        for name, parser in subparsers.choices.items()
        for action in parser._actions
        if action.type in (int, float)
        or ((action.dest in path_flags or action.dest.endswith("_dir")) and action.type is None)
    ]
    assert unchecked == []
    multi30k = get_training_preset("multi30k")  # every numeric field set
    numeric = {field for field in PRESET_FLAGS if type(getattr(multi30k, field)) in (int, float)}
    assert numeric <= set(TRAINING_RANGES)  # a new preset field needs its rule


def test_devices_are_those_of_this_machine():
    import torch

    devices = available_devices()
    assert devices[0] == "cpu" and device("cpu") == "cpu"
    assert ("cuda" in devices) == torch.cuda.is_available()
    assert all(device(name) == name for name in devices)
    with pytest.raises(argparse.ArgumentTypeError, match="give one of cpu"):
        device("cuda:99")


def test_beams_past_the_vocabulary_are_refused_once_it_is_known(tmp_path):
    model = tiny_model()  # 64 tokens
    with pytest.raises(ValueError, match=r"^num_beams=65 is more beams than the model's vocabulary of 64 tokens"):
        model.generate(input_ids=torch.tensor([[5, 6, 2]]), num_beams=65)
    # training knows its vocabulary from the preset
    with pytest.raises(SettingsError, match=r"--eval-beams 1001 is more beams than the vocabulary's 1000 tokens"):
        TrainingSettings(get_training_preset("demo"), tmp_path / "run", eval_beams=1001)


# --- user errors after parsing, and bugs ------------------------------------------------------------------------------


def command_that(fails) -> types.ModuleType:
    """A command module whose run calls `fails()`."""
    module = types.ModuleType("failing", "A command that fails.")
    module.add_arguments = lambda parser: None
    module.run = lambda args: fails()
    return module


def run_command(fails, argv: list[str], capsys) -> tuple[object, str]:
    """Exit status and stderr of running `command_that(fails)` as a script with `argv`."""
    parser = argparse.ArgumentParser(prog="failing")
    _set_up(parser, command_that(fails))
    with pytest.raises(SystemExit) as exited:
        _run(parser, argv)
    return exited.value.code, capsys.readouterr().err


def raise_folder_error():
    raise ModelFolderError("the folder is not ready")


def raise_usage_error():
    raise UsageError("--a needs --b")


def test_user_errors_end_with_one_line_and_status_2(capsys):
    code, err = run_command(lambda: get_training_preset("nope"), [], capsys)  # a ValueError of this package
    assert code == 2 and err.startswith("error: unknown training preset 'nope'") and err.count("\n") == 1
    code, err = run_command(lambda: open("no/such/file"), [], capsys)  # an OS error about a path
    assert (code, err) == (2, "error: no/such/file: No such file or directory\n")
    if Path("/dev/full").exists():  # a full disk (Linux's /dev/full refuses every write with ENOSPC)
        code, err = run_command(lambda: Path("/dev/full").write_text("x"), [], capsys)
        assert code == 2 and err.startswith("error: No space left on device") and err.count("\n") == 1
    # a copy that fills the disk names its destination (`filename2`), not the file copied (`filename`)
    full = OSError(errno.ENOSPC, "No space left on device", "/site-packages/code.py", None, "/out/code.py")
    assert user_error_message(full).startswith("error: No space left on device writing /out/code.py: free space")
    code, err = run_command(raise_folder_error, [], capsys)  # any refusal of the family, whatever its stage
    assert (code, err) == (2, "error: the folder is not ready\n")
    code, err = run_command(raise_usage_error, [], capsys)
    assert code == 2 and err.startswith("usage: failing") and err.endswith("failing: error: --a needs --b\n")


def test_debug_shows_the_traceback_of_a_user_error(capsys):
    with pytest.raises(ValueError, match="unknown training preset"):
        run_command(lambda: get_training_preset("nope"), ["--debug"], capsys)
    with pytest.raises(UsageError):
        run_command(raise_usage_error, ["--debug"], capsys)


def test_bugs_keep_their_traceback():
    assert user_error_message(RuntimeError("a bug")) is None
    assert user_error_message(KeyError("x")) is None
    for bug in (lambda: json.loads("{"), lambda: int("x")):  # ValueErrors raised outside this package
        with pytest.raises(ValueError) as raised:
            bug()
        assert user_error_message(raised.value) is None
    # what tells a refusal from a bug is its class, not where it was raised: a plain ValueError is a bug anywhere
    assert user_error_message(ValueError("raised by the package")) is None
    assert user_error_message(SettingsError("--max-steps 0 is below 1")) == "error: --max-steps 0 is below 1"


def test_debug_goes_before_or_after_the_command_name():
    parse = build_parser().parse_args
    assert parse(["--debug", "demo"]).debug and parse(["demo", "--debug"]).debug and not parse(["demo"]).debug


def test_main_maps_a_run_time_user_error_to_status_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["average", "--run-dir", str(tmp_path), "--output-dir", str(tmp_path / "avg")])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith("error: ") and "checkpoints" in err and err.count("\n") == 1


# --- the real command line ------------------------------------------------------------------------------------------


def cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m vanilla_transformer ARGV` in `cwd`, in this process."""
    return run_in_process(main, argv, cwd)


def real_cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m vanilla_transformer ARGV` in `cwd`, a process of its own, offline."""
    return subprocess.run(
        [sys.executable, "-m", "vanilla_transformer", *argv],
        cwd=cwd,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def assert_one_line_error(done: subprocess.CompletedProcess, *parts: str) -> None:
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "error: " in last and all(part in last for part in parts), done.stderr


def test_the_command_line_refuses_flags_before_any_work(tmp_path):
    done = cli("train", "--output-dir", "run", "--per-device-batch-size", "0", cwd=tmp_path)
    assert_one_line_error(done, "--per-device-batch-size 0 is out of range", "at least 1, or leave the flag out")
    assert not (tmp_path / "run").exists()
    (tmp_path / "sentences").mkdir()
    done = cli("translate", "--model", "someone/model", "--input", "sentences", "--num-beams", "4", cwd=tmp_path)
    assert_one_line_error(done, "argument --input: sentences is a folder, not a file")


@pytest.mark.slow
def test_the_command_line_and_lab_scripts_end_a_user_error_in_one_line_or_debug_it(tmp_path):
    (tmp_path / "run").mkdir()  # a run folder without checkpoints
    argv = ["--run-dir", "run", "--output-dir", "averaged", "--last", "2"]
    assert_one_line_error(cli("average", *argv, cwd=tmp_path), "has 0 checkpoints", "lower --last")
    # the lab's scripts end theirs the same way
    assert_one_line_error(run_in_process(command_main("gpu_speed"), ["--device", "tpu"], tmp_path), "not a device")
    done = real_cli("--debug", "average", *argv, cwd=tmp_path)  # the interpreter prints the traceback
    assert done.returncode == 1 and "Traceback (most recent call last)" in done.stderr
    assert "ModelFolderError: " in done.stderr and "has 0 checkpoints" in done.stderr
    with pytest.raises(ValueError, match="has 0 checkpoints"):  # the flag after the command, the same
        cli("average", *argv, "--debug", cwd=tmp_path)


def test_a_full_disk_reported_by_a_native_writer_is_a_user_error():
    from vanilla_transformer.cli.main import user_error_message

    # safetensors (Rust) and torch.save (C++) raise no OSError: their messages, anywhere in the chain, tell
    safetensors = RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert user_error_message(safetensors).startswith("error: No space left on device: free space")
    try:
        try:
            raise RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file "
                               "data/0: file write failed")  # fmt: skip
        except RuntimeError as cause:
            raise RuntimeError("saving the optimizer failed") from cause
    except RuntimeError as error:
        assert user_error_message(error) == (
            "error: a file could not be written (is the disk full?): free space (or choose another disk); what was "
            "there is kept"
        )
    assert user_error_message(RuntimeError("I/O error: entity not found (os error 2)")) is None  # a bug, not a disk
    # a read-only mount has no space to free: the fix is another place
    read_only = OSError(errno.EROFS, "Read-only file system", "/cache/x")
    assert user_error_message(read_only) == (
        "error: Read-only file system writing /cache/x: the file system is mounted read-only; choose a writable "
        "folder (or point the cache elsewhere); what was there is kept"
    )


def test_vocab_size_beside_a_given_tokenizer_is_refused_not_ignored(tmp_path, builtin_tokenizer, capsys):
    builtin_tokenizer.save_pretrained(tmp_path / "tokenizer")
    argv = ["train", "--tokenizer", str(tmp_path / "tokenizer"), "--vocab-size", "500"]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--output-dir", str(tmp_path / "run")])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert exited.value.code == 2 and "--vocab-size 500 sizes the BPE a run learns" in error
    assert not (tmp_path / "run").exists()
