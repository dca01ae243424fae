"""Outputs never destroy inputs (issue 25, `vanilla_transformer/files/outputs.py`): every command that writes refuses an
output that is, holds or lies inside one of its inputs, replaces only folders a command of ours wrote (or any with
`--overwrite`), and writes under a hidden name beside the destination that is renamed into place only when complete.

The careless-user examples run the scripts in real subprocesses and check that nothing on disk changed: the whole
tree is hashed before and after."""

import errno
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import command_main, run_in_process, tiny_model

from vanilla_transformer.cli.main import main
from vanilla_transformer.data.staging import staging_leftovers, writer_tag
from vanilla_transformer.errors import OutputError
from vanilla_transformer.files.outputs import (
    MARKER_NAME,
    check_not_an_input,
    check_output_folder,
    read_marker,
    staged_file,
    staged_folder,
    write_marker,
)
from vanilla_transformer.training.checkpoints import average_checkpoints
from vanilla_transformer.training.presets import get_training_preset

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["A dog runs.", "Two men talk.", "A child plays in the snow."]
REFERENCES = ["Ein Hund rennt.", "Zwei Männer reden.", "Ein Kind spielt im Schnee."]


def tree_state(root: Path) -> dict[str, str]:
    """Every file, folder and link under `root`, hidden ones too, with a digest of its content (and its mode)."""
    state = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            state[name] = f"link -> {os.readlink(path)}"
        elif path.is_file():
            state[name] = f"{hashlib.sha256(path.read_bytes()).hexdigest()} {oct(path.stat().st_mode)}"
        else:
            state[name] = "folder"
    return state


def all_leftovers(root: Path) -> list[Path]:
    """Staged or replaced files and folders anywhere under `root`."""
    return [path for folder in [root, *root.rglob("*")] if folder.is_dir() for path in staging_leftovers(folder)]


def run_command(command: str, *argv: str, cwd: Path, stdin_path: Path | None = None) -> subprocess.CompletedProcess:
    """`vanilla-transformer COMMAND ARGV` in `cwd`, run in this process (`run_in_process`)."""
    return run_in_process(command_main(command), argv, cwd, stdin_path)


def assert_refused(done: subprocess.CompletedProcess, *expected: str) -> None:
    """The command stopped with a user error: status 2, one `error: ...` line naming each of `expected`."""
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ")
    for text in expected:
        assert text in line, line


@pytest.fixture
def run_dir(tmp_path, builtin_tokenizer) -> Path:
    """A Trainer run as `vanilla-transformer train` leaves it: three checkpoints with optimizer, scheduler and trainer
    state and the run's tokenizer, tokenizer/, preset.json and an averaged final/."""
    run = tmp_path / "run"
    builtin_tokenizer.save_pretrained(run / "tokenizer")
    (run / "preset.json").write_text(json.dumps(get_training_preset("demo").as_dict(), indent=2) + "\n")
    for seed, step in enumerate((10, 20, 30)):
        folder = run / f"checkpoint-{step}"
        tiny_model(seed=seed, vocab_size=len(builtin_tokenizer)).save_pretrained(folder)
        builtin_tokenizer.save_pretrained(folder)
        (folder / "optimizer.pt").write_bytes(os.urandom(256))
        (folder / "scheduler.pt").write_bytes(os.urandom(64))
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": step / 10}))
    average_checkpoints(run, run / "final", last=2)
    return run


@pytest.fixture
def model_folder(tmp_path, builtin_tokenizer) -> Path:
    folder = tmp_path / "model"
    tiny_model(vocab_size=len(builtin_tokenizer)).save_pretrained(folder)
    builtin_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """A Multi30k-shaped folder: test2016.{en,de} and the tokenized reference."""
    data = tmp_path / "data"
    (data / "tok").mkdir(parents=True)
    (data / "test2016.en").write_text("".join(f"{line}\n" for line in SOURCES))
    (data / "test2016.de").write_text("".join(f"{line}\n" for line in REFERENCES))
    (data / "tok" / "test2016.lc.norm.tok.de").write_text("".join(f"{line.lower()}\n" for line in REFERENCES))
    return data


# -- the careless-user examples: refused, status 2, nothing changed on disk -------------------------------------------


@pytest.mark.parametrize(
    ("output", "expected"),
    [("run", "is --run-dir"), ("run/checkpoint-20", "is checkpoint"), ("notes", "vanilla-transformer did not create")],
)
def test_average_refuses_outputs_that_would_destroy_inputs(run_dir, tmp_path, output, expected):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "thesis.tex").write_text("months of work\n")
    before = tree_state(tmp_path)
    done = run_command("average", "--run-dir", "run", "--last", "2", "--output-dir", output, cwd=tmp_path)
    assert_refused(done, expected, "--output-dir")
    if output == "notes":
        assert "--overwrite" in done.stderr
    assert tree_state(tmp_path) == before


def test_average_keeps_out_of_every_part_of_the_run(run_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = tree_state(tmp_path)
    for output, expected in [
        ("run/checkpoint-30/averaged", "lies inside checkpoint run/checkpoint-30"),
        ("run/tokenizer", "is the run's tokenizer run/tokenizer"),
        (".", "contains --run-dir run"),
    ]:
        with pytest.raises(SystemExit) as exited:
            main(["average", "--run-dir", "run", "--last", "2", "--output-dir", output])
        assert exited.value.code == 2
        assert expected in capsys.readouterr().err
    with pytest.raises(OutputError, match="is the run's preset run/preset.json"):  # argparse refuses a file already
        average_checkpoints("run", "run/preset.json", last=2)
    assert tree_state(tmp_path) == before


def test_release_into_its_run_folder_is_refused(run_dir, tmp_path):
    before = tree_state(tmp_path)
    done = run_command("release", "--run-dir", "run", "--output-dir", "run", "--hardware", "CPU", cwd=tmp_path)
    assert_refused(done, "--output-dir run is --run-dir run")
    assert tree_state(tmp_path) == before


def test_release_refuses_the_runs_final_and_a_strangers_folder(run_dir, tmp_path, capsys):
    (tmp_path / "cards").mkdir()
    (tmp_path / "cards" / "README.md").write_text("someone else's card\n")
    before = tree_state(tmp_path)
    for output, expected in [
        (run_dir / "final", "is the run's averaged model"),
        (tmp_path / "cards", "did not create"),
    ]:
        with pytest.raises(SystemExit) as exited:
            main(["release", "--run-dir", str(run_dir), "--output-dir", str(output), "--hardware", "CPU"])
        assert exited.value.code == 2
        assert expected in capsys.readouterr().err
    assert tree_state(tmp_path) == before


def test_release_of_a_run_on_a_tsv_file_asks_for_its_languages_and_keeps_out_of_the_file(run_dir, tmp_path, capsys):
    (tmp_path / "data").mkdir()
    corpus = tmp_path / "data" / "cmn.txt"
    corpus.write_text("Hi.\t嗨。\tCC-BY 2.0 (France) Attribution: tatoeba.org #1 (a) & #2 (b)\n")
    preset = json.loads((run_dir / "preset.json").read_text()) | {"corpus": str(corpus)}
    (run_dir / "preset.json").write_text(json.dumps(preset))
    before = tree_state(tmp_path)
    for argv, expected in [
        ([], "nothing says which language or direction: give --source-lang and --target-lang"),
        (
            ["--source-lang", "en", "--target-lang", "zh", "--output-dir", str(corpus.parent)],
            "contains the run's corpus",
        ),
    ]:
        with pytest.raises(SystemExit) as exited:
            main(["release", "--run-dir", str(run_dir), "--output-dir", str(tmp_path / "out"), *argv])
        assert exited.value.code == 2
        assert expected in capsys.readouterr().err
    assert tree_state(tmp_path) == before


def test_evaluate_refuses_to_write_hypotheses_over_the_reference(model_folder, data_dir, tmp_path):
    before = tree_state(tmp_path)
    done = run_command(
        "evaluate",
        *("--model", "model", "--split", "test2016", "--data-dir", "data", "--num-beams", "1"),
        *("--output-hypotheses", "data/test2016.de"),
        cwd=tmp_path,
    )
    assert_refused(done, "--output-hypotheses data/test2016.de is the reference file")
    assert tree_state(tmp_path) == before


def test_evaluate_sees_through_symlinks_and_keeps_out_of_the_data_and_model(model_folder, data_dir, tmp_path):
    from vanilla_transformer.inference.evaluation import evaluate_model_on_split

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "hyp.de").symlink_to(data_dir / "tok" / "test2016.lc.norm.tok.de")
    before = tree_state(tmp_path)
    for output, expected in [
        (tmp_path / "elsewhere" / "hyp.de", "is the tokenized reference file"),
        (data_dir / "test2016.hyp", "lies inside the data folder"),
        (model_folder / "config.json", "lies inside the model folder"),
        (tmp_path, "is a folder"),
    ]:
        with pytest.raises(OutputError, match=expected):
            evaluate_model_on_split(str(model_folder), "test2016", data_dir, num_beams=1, output_hypotheses=output)
    assert tree_state(tmp_path) == before


def test_translate_refuses_to_write_over_its_input(model_folder, tmp_path):
    (tmp_path / "input.en").write_text("".join(f"{line}\n" for line in SOURCES))
    before = tree_state(tmp_path)
    done = run_command("translate", "--model", "model", "--input", "input.en", "--output", "input.en", cwd=tmp_path)
    assert_refused(done, "--output input.en is --input input.en")
    # the same file as stdin (`< input.en`), and a file inside the model folder
    done = run_command(
        "translate", "--model", "model", "--output", "input.en", cwd=tmp_path, stdin_path=tmp_path / "input.en"
    )
    assert_refused(done, "--output input.en is stdin")
    done = run_command("translate", "--model", "model", "--input", "input.en", "--output", "model/out.de", cwd=tmp_path)
    assert_refused(done, "lies inside --model model")
    assert tree_state(tmp_path) == before


# -- a failure while writing leaves the old output whole and nothing staged --------------------------------------------


def half_then_full_disk(write_lines):
    """A `write_lines` that writes half of the lines, then fails as a full disk does."""

    def failing(path, lines, stream=None):
        write_lines(path, lines[: len(lines) // 2])
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    return failing


def test_translate_that_fails_mid_write_keeps_the_old_output(model_folder, tmp_path, monkeypatch, capsys):
    from vanilla_transformer.files.outputs import ChunkedFile

    (tmp_path / "input.en").write_text("".join(f"{line}\n" for line in SOURCES * 2))
    output = tmp_path / "out" / "hyp.de"
    output.parent.mkdir()
    output.write_text("yesterday's translations\n")
    output.chmod(0o640)
    argv = ["translate", "--model", str(model_folder), "--input", str(tmp_path / "input.en"), "--output", str(output)]
    argv += ["--device", "cpu", "--num-beams", "1", "--chunk-lines", str(len(SOURCES))]
    write = ChunkedFile.write

    def second_chunk_fills_the_disk(self, lines, inputs):
        if self.done:  # the first chunk is written; half of the second, then the disk is full
            self.handle.write("".join(line + "\n" for line in lines[: len(lines) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device", str(self.handle.name))
        write(self, lines, inputs)

    with monkeypatch.context() as patched:
        patched.setattr(ChunkedFile, "write", second_chunk_fills_the_disk)
        with pytest.raises(SystemExit) as exited:  # one line, status 2: a full disk is the user's to fix
            main(argv)
    assert exited.value.code == 2
    assert "error: No space left on device" in capsys.readouterr().err
    assert output.read_text() == "yesterday's translations\n"
    assert all_leftovers(tmp_path) == []
    assert len(output.with_name("hyp.de.partial").read_text().splitlines()) > len(SOURCES)  # a half chunk too

    main(argv)  # complete, after the first chunk: the half chunk is cut, the old file replaced, its permissions kept
    assert len(output.read_text().splitlines()) == len(SOURCES) * 2
    assert oct(output.stat().st_mode & 0o777) == oct(0o640)
    assert all_leftovers(tmp_path) == []


def test_evaluate_that_fails_mid_write_keeps_the_old_hypotheses(model_folder, data_dir, tmp_path, monkeypatch):
    import vanilla_transformer.inference.evaluation as evaluation

    output = tmp_path / "hyp.de"
    output.write_text("the hypotheses of last week\n")
    with monkeypatch.context() as patched:
        patched.setattr(evaluation, "write_lines", half_then_full_disk(evaluation.write_lines))
        with pytest.raises(OSError, match="No space left"):
            evaluation.evaluate_model_on_split(str(model_folder), "test2016", data_dir, num_beams=1,
                                               output_hypotheses=output)  # fmt: skip
    assert output.read_text() == "the hypotheses of last week\n"
    assert all_leftovers(tmp_path) == []
    scores = evaluation.evaluate_model_on_split(
        str(model_folder), "test2016", data_dir, num_beams=1, output_hypotheses=output
    )
    assert len(output.read_text().splitlines()) == len(SOURCES) == scores["num_sentences"]


def test_averaging_that_fails_mid_write_keeps_the_old_average(run_dir, tmp_path, monkeypatch):
    import vanilla_transformer.training.checkpoints as checkpoints

    before = tree_state(tmp_path)

    def half_written_checksums(folder):
        (Path(folder) / "model.safetensors.sha256").write_text("0123")
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(checkpoints, "write_checksums", half_written_checksums)
    with pytest.raises(OSError, match="Input/output error"):
        average_checkpoints(run_dir, run_dir / "final", last=3)
    assert tree_state(tmp_path) == before
    assert all_leftovers(tmp_path) == []


# -- re-running into a command's own output, --overwrite, and the marker ----------------------------------------------


def test_average_replaces_its_own_output_and_marks_it(run_dir, tmp_path, capsys):
    output = tmp_path / "averaged"
    main(["average", "--run-dir", str(run_dir), "--last", "2", "--output-dir", str(output)])
    first = (output / "model.safetensors").read_bytes()
    marker = read_marker(output)
    assert marker["kind"] == "model" and marker["command"] == "average" and marker["created"].endswith("+00:00")
    assert json.loads((output / MARKER_NAME).read_text()) == marker
    main(["average", "--run-dir", str(run_dir), "--last", "3", "--output-dir", str(output)])
    assert (output / "model.safetensors").read_bytes() != first
    assert "averaged checkpoint-10, checkpoint-20, checkpoint-30" in capsys.readouterr().out
    assert all_leftovers(tmp_path) == []
    # train's final/ is a model folder too: `average --output-dir RUN/final` (the README's line) replaces it
    main(["average", "--run-dir", str(run_dir), "--last", "3", "--output-dir", str(run_dir / "final")])


def test_overwrite_replaces_a_strangers_folder_and_says_so(run_dir, tmp_path, capsys, caplog):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "thesis.tex").write_text("months of work\n")
    argv = ["average", "--run-dir", str(run_dir), "--last", "2", "--output-dir", str(notes)]
    with pytest.raises(SystemExit):
        main(argv)
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert (notes / "thesis.tex").is_file()
    main([*argv, "--overwrite"])
    assert not (notes / "thesis.tex").exists() and (notes / "model.safetensors").is_file()
    assert any("--overwrite: replacing" in record.getMessage() for record in caplog.records)
    assert all_leftovers(tmp_path) == []


def test_train_tokenizer_replaces_only_its_own_folder(tmp_path, capsys):
    output = tmp_path / "tok"
    argv = ["train-tokenizer", "--corpus", "builtin", "--vocab-size", "400", "--output-dir", str(output)]
    main(argv)
    assert read_marker(output)["kind"] == "tokenizer" and (output / "tokenizer.json").is_file()
    main(argv)  # again into its own output
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "vocab.txt").write_text("mine\n")
    before = tree_state(tmp_path)
    with pytest.raises(SystemExit):
        main([*argv[:-1], str(stranger)])
    assert "--output-dir" in capsys.readouterr().err and tree_state(tmp_path) == before
    main([*argv[:-1], str(stranger), "--overwrite"])
    assert (stranger / "tokenizer.json").is_file() and not (stranger / "vocab.txt").exists()
    assert all_leftovers(tmp_path) == []


def test_plot_attention_writes_beside_and_never_into_the_model(model_folder, tmp_path, capsys):
    before = tree_state(tmp_path)
    with pytest.raises(SystemExit):
        main(
            ["plot-attention", "--model", str(model_folder), "--sentence", "A dog.", "--output-dir", str(model_folder)]
        )
    assert "lies inside --model" in capsys.readouterr().err and tree_state(tmp_path) == before
    figures = tmp_path / "figures"
    for _ in range(2):  # the second run replaces the figures of the first
        main(["plot-attention", "--model", str(model_folder), "--sentence", "A dog.", "--output-dir", str(figures)])
    assert sorted(path.name for path in figures.iterdir()) == ["attention-cross.png", "attention-encoder.png"]
    assert all_leftovers(tmp_path) == []


def test_training_refuses_a_strangers_folder_but_resumes_its_own_runs(tmp_path):
    from vanilla_transformer.training.run import train
    from vanilla_transformer.training.run_folder import RunFolder
    from vanilla_transformer.training.settings import TrainingSettings

    preset = get_training_preset("demo")
    stranger = tmp_path / "photos"
    stranger.mkdir()
    (stranger / "holiday.jpg").write_bytes(b"\xff\xd8 a photo")
    before = tree_state(tmp_path)
    with pytest.raises(OutputError, match=r"photos is a non-empty folder .* pass --overwrite"):
        train(TrainingSettings(preset, stranger))
    assert tree_state(tmp_path) == before
    RunFolder.read(stranger).check(TrainingSettings(preset, stranger, overwrite=True))  # allowed, and said

    run = tmp_path / "run"  # new, empty, or a run of ours: its preset.json, or a training-run marker
    RunFolder.read(run).check(TrainingSettings(preset, run))
    run.mkdir()
    RunFolder.read(run).check(TrainingSettings(preset, run))
    RunFolder.read(run).write_record(TrainingSettings(preset, run))
    (run / "checkpoint-5").mkdir()
    RunFolder.read(run).check(TrainingSettings(preset, run))
    (run / "preset.json").unlink()
    write_marker(run, "training-run", "train")
    RunFolder.read(run).check(TrainingSettings(preset, run))
    (run / MARKER_NAME).unlink()
    with pytest.raises(OutputError, match="pass --overwrite to train there"):
        RunFolder.read(run).check(TrainingSettings(preset, run))


# -- averaging refuses checkpoints of different runs ------------------------------------------------------------------


def test_averaging_refuses_checkpoints_of_another_tokenizer(run_dir, tmp_path, builtin_tokenizer):
    # the same vocabulary size and tokens, two of them with each other's ids
    path = run_dir / "checkpoint-30" / "tokenizer.json"
    tokenizer = json.loads(path.read_text())
    vocab = tokenizer["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[-2:]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    path.write_text(json.dumps(tokenizer))
    before = tree_state(tmp_path)
    with pytest.raises(ValueError, match=r"checkpoint-30's tokenizer.json names another tokenizer than .*tokenizer"):
        average_checkpoints(run_dir, tmp_path / "averaged", last=2)
    # a checkpoint whose config records another tokenizer's fingerprint
    builtin_tokenizer.save_pretrained(run_dir / "checkpoint-30")
    config = json.loads((run_dir / "checkpoint-20" / "config.json").read_text())
    (run_dir / "checkpoint-20" / "config.json").write_text(json.dumps(config | {"tokenizer_fingerprint": "f00d"}))
    with pytest.raises(ValueError, match=r"checkpoint-20's config.json's tokenizer_fingerprint names another"):
        average_checkpoints(run_dir, tmp_path / "averaged", last=2)
    assert not (tmp_path / "averaged").exists()
    assert before.keys() == tree_state(tmp_path).keys()


def test_averaging_refuses_checkpoints_of_two_runs_by_their_records(run_dir, tmp_path):
    # issue 55: a checkpoint of a run with another seed, copied beside this run's, was averaged in without a word
    record = json.loads((run_dir / "preset.json").read_text()) | {"run": {"seed": 0, "precision": "fp32"}}
    (run_dir / "checkpoint-20" / "preset.json").write_text(
        json.dumps(record | {"run": {"seed": 1, "precision": "fp32"}})
    )
    (run_dir / "checkpoint-30" / "preset.json").write_text(json.dumps(record | {"max_steps": 900}))  # a longer resume
    with pytest.raises(ValueError, match=r"checkpoint-20 and checkpoint-30 .* differ in preset.json run.seed: 1 vs 0"):
        average_checkpoints(run_dir, tmp_path / "averaged", last=2)
    (run_dir / "checkpoint-20" / "preset.json").write_text(json.dumps(record))
    average_checkpoints(run_dir, tmp_path / "averaged", last=2)  # one run's, trained longer: averaged
    (run_dir / "checkpoint-10" / "preset.json").unlink(missing_ok=True)  # saved before records were copied: no check
    average_checkpoints(run_dir, tmp_path / "averaged-3", last=3)


# -- the building blocks -----------------------------------------------------------------------------------------------


def test_check_not_an_input_follows_links_and_sees_hard_links(tmp_path):
    source = tmp_path / "data" / "test.en"
    source.parent.mkdir()
    source.write_text("a\n")
    (tmp_path / "alias").symlink_to(tmp_path / "data")
    os.link(source, tmp_path / "hard.en")
    inputs = [("--input", source)]
    with pytest.raises(OutputError, match=r"^--output \S*alias/test.en is --input \S*data/test.en: .* another path\.$"):
        check_not_an_input(tmp_path / "alias" / "test.en", inputs, "--output")
    with pytest.raises(OutputError, match="is --input"):
        check_not_an_input(tmp_path / "hard.en", inputs, "--output")
    with pytest.raises(OutputError, match="contains --input"):
        check_not_an_input(tmp_path / "alias", inputs, "--output")
    with pytest.raises(OutputError, match="lies inside --data-dir"):
        check_not_an_input(tmp_path / "alias" / "new.txt", [("--data-dir", tmp_path / "data")], "--output")
    # a holder may hold outputs, but neither be nor lie inside one
    check_not_an_input(tmp_path / "data" / "final", [], holders=[("--run-dir", tmp_path / "data")])
    with pytest.raises(OutputError, match="is --run-dir"):
        check_not_an_input(tmp_path / "alias", [], holders=[("--run-dir", tmp_path / "data")])
    check_not_an_input(tmp_path / "out.txt", [*inputs, ("--model", None)], "--output")


def test_check_output_folder_knows_its_own_kind(tmp_path):
    folder = tmp_path / "folder"
    assert check_output_folder(folder, "model") is False  # missing
    folder.mkdir()
    assert check_output_folder(folder, "model") is False  # empty
    (folder / "data.bin").write_bytes(b"x")
    with pytest.raises(OutputError, match="no .vanilla-transformer-output marker"):
        check_output_folder(folder, "model")
    assert check_output_folder(folder, "model", overwrite=True) is True
    write_marker(folder, "release", "release")
    with pytest.raises(OutputError, match=r"holds a release folder written by `vanilla-transformer release`, not a mo"):
        check_output_folder(folder, "model")
    assert check_output_folder(folder, "release") is False
    (folder / MARKER_NAME).write_text("not json")  # an unreadable marker is no marker
    with pytest.raises(OutputError):
        check_output_folder(folder, "release")


def test_staged_folder_publishes_whole_or_not_at_all(tmp_path):
    destination = tmp_path / "out"
    with staged_folder(destination, "model", "average") as staging:
        (staging / "a.txt").write_text("first\n")
        assert not destination.exists() and staging.parent == tmp_path and staging.name.startswith(".out.")
    assert (destination / "a.txt").read_text() == "first\n" and read_marker(destination)["command"] == "average"
    assert oct(destination.stat().st_mode & 0o777) == oct(0o777 & ~current_umask())
    with pytest.raises(RuntimeError, match="half way"), staged_folder(destination, "model", "average") as staging:
        (staging / "b.txt").write_text("second\n")
        raise RuntimeError("half way")
    assert sorted(p.name for p in destination.iterdir()) == [MARKER_NAME, "a.txt"]
    with staged_folder(destination, "model", "average") as staging:
        (staging / "b.txt").write_text("second\n")
    assert sorted(p.name for p in destination.iterdir()) == [MARKER_NAME, "b.txt"]
    assert staging_leftovers(tmp_path) == []


def test_staged_file_replaces_atomically_and_keeps_links(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old\n")
    (tmp_path / "link.txt").symlink_to(target)
    with pytest.raises(RuntimeError), staged_file(tmp_path / "link.txt") as staging:
        staging.write_text("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old\n" and staging_leftovers(tmp_path) == []
    with staged_file(tmp_path / "link.txt") as staging:
        staging.write_text("new\n")
        assert target.read_text() == "old\n"
    assert (tmp_path / "link.txt").is_symlink() and target.read_text() == "new\n"
    with pytest.raises(OutputError, match="is a folder"), staged_file(tmp_path):
        pass
    with staged_file(os.devnull) as path:  # a device is written directly, never replaced
        assert str(path) == os.devnull
    assert Path(os.devnull).exists() and not Path(os.devnull).is_file()


def current_umask() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


# -- round two (issue 36): the export joins the rule, killed writes leave nothing for good, refusals change nothing --


def test_the_export_refuses_its_own_model_as_output_with_or_without_overwrite(
    model_folder, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link").symlink_to("model")
    before = tree_state(tmp_path)
    done = run_command("export-ctranslate2", "model", "model", "--overwrite", cwd=tmp_path)
    assert_refused(done, "OUTPUT_DIR model is MODEL_DIR model")
    for output, relation in [
        ("model", "is MODEL_DIR model"),
        ("link", "is MODEL_DIR model"),
        ("model/ct2", "lies inside MODEL_DIR model"),
        (".", "contains MODEL_DIR model"),
    ]:
        for overwrite in ([], ["--overwrite"]):
            with pytest.raises(SystemExit) as exited:
                main(["export-ctranslate2", "model", output, *overwrite])
            assert exited.value.code == 2
            assert f"error: OUTPUT_DIR {output} {relation}" in capsys.readouterr().err
    assert tree_state(tmp_path) == before


def test_the_pytorch_engine_names_a_ctranslate2_export_and_the_flag_to_use(model_folder, tmp_path, capsys):
    from vanilla_transformer.inference.ctranslate2_engine import export_ctranslate2

    export_ctranslate2(model_folder, tmp_path / "export")
    (tmp_path / "input.en").write_text("A dog runs.\n")
    with pytest.raises(SystemExit) as exited:
        main(["translate", "--model", str(tmp_path / "export"), "--input", str(tmp_path / "input.en")])
    error = capsys.readouterr().err
    assert exited.value.code == 2 and "export is a CTranslate2 export" in error and "--engine ctranslate2" in error
    # the loader behind every command names it, not only translate's
    with pytest.raises(SystemExit) as exited:
        main(["plot-attention", "--model", str(tmp_path / "export"), "--sentence", "A dog.", "--output-dir", "figs"])
    assert exited.value.code == 2 and "export is a CTranslate2 export" in capsys.readouterr().err


KILLED_WRITER = """
import os, signal, sys
from vanilla_transformer.files.outputs import staged_folder
with staged_folder(sys.argv[1], "model", "average", overwrite=True) as staging:
    (staging / "model.safetensors").write_bytes(b"half")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_staging_left_by_a_killed_command_is_removed_by_the_next_one(run_dir, tmp_path):
    output = tmp_path / "averaged"
    done = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(output)], capture_output=True, check=False)
    assert done.returncode == -9
    [killed] = staging_leftovers(tmp_path)
    assert not output.exists() and (killed / "model.safetensors").read_bytes() == b"half"
    # what a live writer (this process) or one on another machine (a shared disk) is writing stays
    live = tmp_path / f".other.{writer_tag()}.partial"
    elsewhere = tmp_path / ".averaged.otherhost-1.partial"
    older = tmp_path / ".averaged.999999.partial"  # the hidden name of versions that named no host
    for folder in (live, elsewhere, older):
        folder.mkdir()
    average_checkpoints(run_dir, output, last=2)
    assert (output / "model.safetensors").is_file()
    assert staging_leftovers(tmp_path) == sorted([live, elsewhere])


def test_refusals_of_plot_attention_leave_no_folder_behind(model_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    before = tree_state(tmp_path)
    figures = ["--output-dir", "figures/new"]
    for argv, expected in [
        (["--sentence", "A dog.", "--layers", "9"], "--layers 9 --heads 0: the model has layers 0..1"),
        (["--sentence", "A dog.", "--heads", "0", "4"], "and heads 0..3"),
        (["--sentence", "  "], "--sentence is empty"),
    ]:
        with pytest.raises(SystemExit) as exited:
            main(["plot-attention", "--model", "model", *argv, *figures])
        assert exited.value.code == 2 and expected in capsys.readouterr().err
    assert tree_state(tmp_path) == before


def test_a_write_that_fails_removes_the_folders_it_created_and_only_those(tmp_path):
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError), staged_file(tmp_path / "kept" / "a" / "b" / "out.txt") as staging:
        staging.write_text("half")
        raise RuntimeError("the writer failed")
    with pytest.raises(RuntimeError), staged_folder(tmp_path / "kept" / "c" / "model", "model", "average"):
        raise RuntimeError("the writer failed")
    assert tree_state(tmp_path) == {"kept": "folder"}
