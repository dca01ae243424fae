"""The training presets, their flags, the `preset.json` record of a run, and the settings refused before a run
starts."""

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from vanilla_transformer.cli.arguments import add_typed_preset_arguments
from vanilla_transformer.cli.main import main
from vanilla_transformer.data.grammar import grammar_pairs
from vanilla_transformer.errors import SettingsError
from vanilla_transformer.training.checkpoints import RESUME_FILES, list_checkpoints
from vanilla_transformer.training.presets import (
    PRESET_FLAGS,
    TRAINING_PRESETS,
    get_training_preset,
    preset_from_arguments,
)
from vanilla_transformer.training.run import train
from vanilla_transformer.training.run_folder import RunFolder, trainer_checkpoint_steps
from vanilla_transformer.training.settings import TrainingSettings

REPO = Path(__file__).resolve().parents[2]


def record_run(output: Path, preset, *, resume: bool = True, write: bool = True, **options) -> None:
    """Check (and with `write`, write) the record a run of `preset` with `options` keeps in `output`."""
    settings, folder = TrainingSettings(preset, output, resume=resume, **options), RunFolder.read(output)
    folder.check_continuation(settings)
    if write:
        folder.write_record(settings)


def check_settings(preset, output, *, resume: bool = True, **options) -> None:
    """The checks of a run of `preset` with `options` in `output`: its settings', then its folder's."""
    RunFolder.read(output).check(TrainingSettings(preset, output, resume=resume, **options))


def run_with(preset, output, **options):
    return train(TrainingSettings(preset, output, **options))


def test_presets_are_data_and_overridable():
    assert get_training_preset("multi30k", max_steps=10, warmup_steps=None).max_steps == 10
    assert get_training_preset("paper-base").warmup_steps == 4000
    assert {"paper-base", "paper-big", "multi30k", "demo"} <= set(TRAINING_PRESETS)
    with pytest.raises(ValueError, match="unknown training preset 'tiny'"):
        get_training_preset("tiny")


def test_a_run_continues_only_with_the_settings_it_recorded(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    run = tmp_path / "run"
    preset = get_training_preset("demo", corpus="corpus")
    record_run(run, preset, resume=True)
    (run / "checkpoint-100").mkdir()
    # longer, and the same corpus folder written another way: the same run
    record_run(run, get_training_preset("demo", corpus=str(tmp_path / "corpus"), max_steps=900), resume=True)
    assert json.loads((run / "preset.json").read_text())["max_steps"] == 900
    with pytest.raises(ValueError, match=r"other settings \(lr_factor: 0.5 -> 1.0; dropout: 0.1 -> 0.3\)"):
        record_run(run, get_training_preset("demo", corpus="corpus", dropout=0.3, lr_factor=1.0), resume=True)
    with pytest.raises(ValueError, match="holds checkpoint-100, past max_steps=50"):
        record_run(run, get_training_preset("demo", corpus="corpus", max_steps=50), resume=True)
    with pytest.raises(ValueError, match="already holds a run \\(checkpoint-100\\); starting over"):
        record_run(run, preset, resume=False)
    assert json.loads((run / "preset.json").read_text())["dropout"] == 0.1  # the record is left as it was
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint-100", "preset.json"]
    # a record written before a field existed holds that field's default
    record = json.loads((run / "preset.json").read_text())
    del record["lowercase"]
    (run / "preset.json").write_text(json.dumps(record))
    record_run(run, get_training_preset("demo", corpus="corpus", max_steps=900), resume=True)
    with pytest.raises(ValueError, match=r"lowercase: False -> True"):
        record_run(run, get_training_preset("demo", corpus="corpus", max_steps=900, lowercase=True), resume=True)


def test_training_refuses_to_mix_two_runs_in_one_folder(tmp_path):
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="already holds a run \\(tokenizer\\)"):
        run_with(get_training_preset("demo"), tmp_path, resume=False)
    (tmp_path / "preset.json").write_text(json.dumps(get_training_preset("demo", vocab_size=500).as_dict()))
    with pytest.raises(ValueError, match="vocab_size: 500 -> 1000"):
        run_with(get_training_preset("demo"), tmp_path)


@pytest.mark.slow
def test_the_train_command_takes_a_flag_for_each_preset_flag_field():
    usage = subprocess.run(
        [sys.executable, "-m", "vanilla_transformer", "train", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    flagged = {field for field in get_training_preset("demo").as_dict() if f"--{field.replace('_', '-')} " in usage}
    assert flagged == set(PRESET_FLAGS)


def test_preset_flags_override_only_the_fields_given():
    parser = argparse.ArgumentParser()
    add_typed_preset_arguments(parser)
    args = parser.parse_args(["--preset", "multi30k", "--max-steps", "5", "--lr-factor", "0.25", "--corpus", "builtin"])
    expected = get_training_preset("multi30k", max_steps=5, lr_factor=0.25, corpus="builtin")
    assert preset_from_arguments(args) == expected != get_training_preset("multi30k")
    assert preset_from_arguments(parser.parse_args(["--preset", "multi30k", "--lowercase"])).lowercase is True
    assert preset_from_arguments(parser.parse_args(["--preset", "multi30k"])).lowercase is False


# Settings that no run can finish, as preset fields and options of the training functions, with what the refusal must
# say: the flags as typed and the fix. Each is refused before the corpus is loaded.
REFUSED = [
    pytest.param({"max_steps": 0}, {}, ["--max-steps 0", "at least 1"], id="max-steps-0"),
    pytest.param({"save_steps": 0}, {}, ["--save-steps 0", "at least 1"], id="save-steps-0"),
    pytest.param({"eval_steps": -5}, {}, ["--eval-steps -5", "at least 1"], id="eval-steps-negative"),
    pytest.param({"warmup_steps": 0}, {}, ["--warmup-steps 0", "at least 1"], id="warmup-steps-0"),
    pytest.param({"average_last": 0}, {}, ["--average-last 0", "at least 1"], id="average-last-0"),
    pytest.param({"max_tokens": 0}, {}, ["--max-tokens 0", "at least 1"], id="max-tokens-0"),
    pytest.param({"tokens_per_update": -1}, {}, ["--tokens-per-update -1", "at least 1"], id="tokens-per-update"),
    pytest.param({"max_length": 0}, {}, ["--max-length 0", "at least 1"], id="max-length-0"),
    pytest.param({"vocab_size": 259}, {}, ["--vocab-size 259", "give 260 or more"], id="vocab-size"),
    pytest.param({"lr_factor": 0.0}, {}, ["--lr-factor 0.0", "above 0"], id="lr-factor-0"),
    pytest.param({"lr_factor": math.nan}, {}, ["--lr-factor nan", "above 0"], id="lr-factor-nan"),
    pytest.param({"label_smoothing": 1.5}, {}, ["--label-smoothing 1.5", "from 0 to 1"], id="label-smoothing"),
    pytest.param({"dropout": 1.0}, {}, ["--dropout 1.0", "from 0 to below 1"], id="dropout-1"),
    pytest.param(
        {"max_length": 64, "model_overrides": (("position_encoding", "learned"), ("max_position_embeddings", 32))},
        {},
        ["--max-length 64", "learned positions end at max_position_embeddings=32", "give --max-length 32 or less"],
        id="max-length-past-learned-positions",
    ),
    pytest.param(
        {"model_overrides": (("d_model", 130),)},
        {},
        ["model_overrides {'d_model': 130}", "not divisible"],
        id="model-override",
    ),
    pytest.param({}, {"eval_samples": 0}, ["--eval-samples 0", "or leave the flag out"], id="eval-samples-0"),
    pytest.param({}, {"eval_beams": 0}, ["--eval-beams 0", "from 1 (greedy)"], id="eval-beams-0"),
    pytest.param({}, {"log_steps": 0}, ["--log-steps 0", "at least 1"], id="log-steps-0"),
    pytest.param({}, {"per_device_batch_size": 0}, ["--per-device-batch-size 0"], id="per-device-batch-size-0"),
    pytest.param({}, {"max_grad_norm": -1.0}, ["--max-grad-norm -1.0", "0 for no clipping"], id="max-grad-norm"),
    pytest.param({}, {"threads": -2}, ["--threads -2"], id="threads"),
]
# the checkpoints a Trainer run leaves (the newest `average_last` are averaged at the end): only train() averages
REFUSED_WHEN_AVERAGING = [
    pytest.param(
        {"max_steps": 60, "save_steps": 30},  # the demo preset averages 3: the command of issue 23
        [
            "--average-last 3",
            "--max-steps 60 with --save-steps 30 leaves 2 (checkpoint-30, checkpoint-60)",
            "give --average-last 2, --save-steps 20 or --max-steps 90",
        ],
        id="average-last-over-checkpoints",
    ),  # fmt: skip
    pytest.param(
        {"max_steps": 10, "save_steps": 30, "average_last": 2},
        [
            "--average-last 2",
            "--max-steps 10 with --save-steps 30 leaves 1 (checkpoint-10)",
            "give --average-last 1, --save-steps 5 or --max-steps 60",
        ],
        id="save-steps-past-max-steps",
    ),  # fmt: skip
]


def assert_refused(call, expected: list[str], output: Path) -> None:
    """`call()` raises a SettingsError naming every string of `expected`, at once and before writing anything."""
    start = time.perf_counter()
    with pytest.raises(SettingsError) as refusal:
        call()
    assert time.perf_counter() - start < 5  # nothing loaded, nothing trained
    for text in expected:
        assert text in str(refusal.value)
    assert not output.exists()  # no preset.json, tokenizer or checkpoint


@pytest.mark.parametrize(("fields", "options", "expected"), REFUSED)
def test_settings_no_run_can_finish_are_refused_before_loading(fields, options, expected, tmp_path):
    preset = get_training_preset("demo", **fields)
    assert_refused(lambda: run_with(preset, tmp_path / "run", **options), expected, tmp_path / "run")


def test_an_output_dir_that_is_a_file_is_refused_and_kept(tmp_path):
    output = tmp_path / "notes.txt"
    output.write_text("not a run\n")
    with pytest.raises(SettingsError, match=r"--output-dir \S*notes.txt is a file, not a folder"):
        run_with(get_training_preset("demo"), output)
    assert output.read_text() == "not a run\n"


@pytest.mark.parametrize(("fields", "expected"), REFUSED_WHEN_AVERAGING)
def test_averaging_more_checkpoints_than_the_run_leaves_is_refused(fields, expected, tmp_path):
    preset = get_training_preset("demo", **fields)
    assert_refused(lambda: train(TrainingSettings(preset, tmp_path / "run")), expected, tmp_path / "run")


def test_every_problem_comes_in_one_message(tmp_path):
    preset = get_training_preset("demo", max_steps=0, vocab_size=100)
    expected = ["cannot finish as asked:\n- ", "\n- --max-steps 0", "\n- --vocab-size 100", "\n- --eval-samples 0"]
    assert_refused(
        lambda: train(TrainingSettings(preset, tmp_path / "run", eval_samples=0)), expected, tmp_path / "run"
    )


def test_settings_at_the_edges_are_accepted(tmp_path):
    for fields in (
        {"max_steps": 60, "save_steps": 20, "average_last": 3},  # exactly average_last checkpoints
        {"max_steps": 50, "save_steps": 20, "average_last": 3},  # the third is the one saved at the last step
        {"max_steps": 10, "save_steps": 30, "eval_steps": 30, "average_last": 1},  # one checkpoint, at step 10
        {"max_steps": 10, "warmup_steps": 100, "average_last": 1, "tokens_per_update": 1, "vocab_size": 260},
        {"max_length": 32, "model_overrides": (("position_encoding", "learned"), ("max_position_embeddings", 32))},
    ):
        check_settings(get_training_preset("demo", **fields), tmp_path, resume=True)
    # batches of pairs leave the token budget unused
    check_settings(get_training_preset("demo", max_tokens=0), tmp_path, resume=True, per_device_batch_size=8)
    assert trainer_checkpoint_steps(50, 20) == [20, 40, 50] and trainer_checkpoint_steps(60, 20) == [20, 40, 60]


def test_a_resumed_run_counts_the_checkpoints_it_already_has(tmp_path):
    preset = get_training_preset("demo", max_steps=30, save_steps=10, average_last=3)
    record_run(tmp_path, preset, resume=True)
    for step in (10, 20):
        (tmp_path / f"checkpoint-{step}").mkdir()
        for name in RESUME_FILES:
            (tmp_path / f"checkpoint-{step}" / name).write_text("")
    check_settings(preset, tmp_path, resume=True)  # 10 and 20 kept, 30 written
    with pytest.raises(SettingsError) as refusal:
        check_settings(get_training_preset("demo", max_steps=30, save_steps=10, average_last=5), tmp_path,
                       resume=True)  # fmt: skip
    assert (
        "--average-last 5 averages the last 5 checkpoints at the end, but --max-steps 30 with --save-steps 10 leaves "
        f"3 (checkpoint-10, checkpoint-20, checkpoint-30; 2 of them already in {tmp_path}); give --average-last 3, "
        "--save-steps 3 or --max-steps 50."
    ) == str(refusal.value)
    # a finished run started again writes nothing more
    with pytest.raises(SettingsError, match="leaves 2 \\(checkpoint-10, checkpoint-20; 2 of them"):
        check_settings(get_training_preset("demo", max_steps=20, save_steps=10, average_last=3), tmp_path,
                       resume=True)  # fmt: skip


def test_data_no_batch_can_hold_is_refused_right_after_tokenizing(tmp_path):
    options = {"eval_samples": 4, "threads": 1}
    too_small = get_training_preset("demo", max_tokens=20, vocab_size=300)
    with pytest.raises(SettingsError, match=r"--max-tokens 20 is smaller than the longest training pair \((\d+) "):
        run_with(too_small, tmp_path, **options)
    too_short = get_training_preset("demo", max_length=1, vocab_size=300)
    with pytest.raises(SettingsError, match=r"--max-length 1 leaves no training pair: 6000 of the 6000 pairs"):
        run_with(too_short, tmp_path, **options)
    # nothing trained; the tokenizer stays, and a run with the suggested fix may continue in the folder
    assert sorted(path.name for path in tmp_path.iterdir()) == ["preset.json", "tokenizer"]
    check_settings(replace(too_small, max_tokens=3000), tmp_path, resume=True)


def test_edge_settings_train_and_leave_the_checkpoints_counted(tmp_path):
    """max_steps not a multiple of save_steps (the Trainer saves the last step too), validation only at the end,
    warmup past the end, a token budget that no pair fits but that batches of pairs leave unused, and learned
    positions that end exactly at max_length: all finish."""
    learned = (("position_encoding", "learned"), ("max_position_embeddings", 24), ("encoder_layers", 1),
               ("decoder_layers", 1))  # fmt: skip
    preset = get_training_preset("demo", max_steps=5, save_steps=2, eval_steps=100, average_last=3, warmup_steps=100,
                                 max_tokens=20, max_length=24, model_overrides=learned)  # fmt: skip
    run = train(
        TrainingSettings(
            preset, tmp_path, eval_samples=4, per_device_batch_size=4, report_to="none", progress=False, threads=1
        )
    )
    assert [int(path.name.split("-")[1]) for path in list_checkpoints(tmp_path)] == trainer_checkpoint_steps(5, 2)
    assert [entry["step"] for entry in run.log_history if "eval_bleu" in entry] == [5]
    assert (tmp_path / "final" / "model.safetensors").is_file()


# -- provenance: a run records what it trained with besides its preset (`run_record`), and resumes only with it -----

RUN_SETTING_CHANGES = [
    pytest.param(
        {"source_lang": "de", "target_lang": "en"},
        ["source_lang: 'en' -> 'de'", "target_lang: 'de' -> 'en'"],
        id="languages-swapped",
    ),
    pytest.param({"seed": 3}, ["seed: 0 -> 3"], id="seed"),
    pytest.param({"mixed_precision": "bf16"}, ["precision: 'fp32' -> 'bf16'"], id="precision"),
    pytest.param({"per_device_batch_size": 16}, ["per_device_batch_size: None -> 16"], id="batch-of-pairs"),
    pytest.param({"max_grad_norm": 1.0}, ["max_grad_norm: 0.0 -> 1.0"], id="clipping"),
]


@pytest.mark.parametrize(("changes", "expected"), RUN_SETTING_CHANGES)
def test_a_resume_is_refused_naming_each_run_setting_that_differs(changes, expected, tmp_path):
    run = tmp_path / "run"
    preset = get_training_preset("demo")
    record_run(run, preset, resume=True)
    recorded_run = json.loads((run / "preset.json").read_text())["run"]
    assert recorded_run == TrainingSettings(preset, run).run_record()
    assert recorded_run["corpus_sha256"] is None  # the built-in corpus has no file
    # before its first checkpoint a start trains from scratch: only what its tokenizer depends on must stay
    (run / "tokenizer").mkdir()
    (run / "tokenizer" / "tokenizer.json").write_text("{}")
    record_run(run, preset, resume=True, write=False, **changes)
    (run / "checkpoint-10").mkdir()
    recorded = (run / "preset.json").read_bytes()
    with pytest.raises(ValueError) as refusal:
        record_run(run, get_training_preset("demo", max_steps=900), resume=True, **changes)
    message = str(refusal.value)
    assert message.startswith(f"{run} holds a run trained with other settings (") and "\n" not in message
    for text in expected:
        assert text in message
    assert "only max_steps, save_steps, eval_steps, average_last may change" in message
    assert (run / "preset.json").read_bytes() == recorded
    # the settings it recorded continue it, for longer
    record_run(run, get_training_preset("demo", max_steps=900), resume=True)
    assert json.loads((run / "preset.json").read_text())["max_steps"] == 900


def test_every_differing_setting_is_named_in_one_refusal_and_old_records_are_checked_on_the_preset(tmp_path):
    run = tmp_path / "run"
    record_run(run, get_training_preset("demo"), resume=True, seed=1)
    (run / "checkpoint-10").mkdir()
    changed = {"seed": 2, "mixed_precision": "bf16", "target_lang": "fr"}
    with pytest.raises(ValueError) as refusal:
        record_run(run, get_training_preset("demo", dropout=0.3), resume=True, **changed)
    assert "(dropout: 0.1 -> 0.3; target_lang: 'de' -> 'fr'; seed: 1 -> 2; precision: 'fp32' -> 'bf16')" in str(
        refusal.value
    )
    # a record written before run settings were recorded: checked on its preset alone, then records them
    record = json.loads((run / "preset.json").read_text())
    del record["run"]
    (run / "preset.json").write_text(json.dumps(record))
    record_run(run, get_training_preset("demo"), resume=True, **changed)
    expected = TrainingSettings(get_training_preset("demo"), run, **changed).run_record()
    assert json.loads((run / "preset.json").read_text())["run"] == expected


def test_a_corpus_file_is_the_same_by_content_whatever_directory_or_path_names_it(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, text in ((first, "Hi.\tHallo.\n"), (second, "Bye.\tTschüss.\n")):
        (folder / "data").mkdir(parents=True)
        (folder / "data" / "pairs.tsv").write_text(text)
    trained_on = (first / "data" / "pairs.tsv").resolve()
    copy = shutil.copy(trained_on, tmp_path / "moved.tsv")
    run = tmp_path / "run"

    def start(corpus: str, write: bool = False) -> None:
        record_run(run, get_training_preset("demo", corpus=corpus), resume=True, write=write, source_lang="en",
                   target_lang="de")  # fmt: skip

    monkeypatch.chdir(first)
    start("data/pairs.tsv", write=True)
    record = json.loads((run / "preset.json").read_text())
    digest = hashlib.sha256(trained_on.read_bytes()).hexdigest()
    assert record["corpus"] == str(trained_on) and record["run"]["corpus_sha256"] == digest
    (run / "checkpoint-2").mkdir()
    recorded = (run / "preset.json").read_bytes()
    # the same relative name in another directory is another file
    monkeypatch.chdir(second)
    other = hashlib.sha256((second / "data" / "pairs.tsv").read_bytes()).hexdigest()
    with pytest.raises(ValueError) as refusal:
        start("data/pairs.tsv")
    assert (
        f"(corpus: '{trained_on}' (sha256 {digest[:12]}…) -> '{(second / 'data' / 'pairs.tsv').resolve()}' "
        f"(sha256 {other[:12]}…), other content)" in str(refusal.value)
    )
    # the file trained on, by its absolute path, another relative path, or moved: the same corpus
    for corpus in (str(trained_on), "../a/data/pairs.tsv", "../a/../a/data/pairs.tsv", str(copy)):
        start(corpus)
    assert (run / "preset.json").read_bytes() == recorded
    # the same file, edited since: other content, whatever names it
    trained_on.write_text("Hi.\tServus.\n")
    with pytest.raises(ValueError, match="other content"):
        start(str(trained_on))
    start(str(copy))


def run_cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m vanilla_transformer ARGV` in a fresh process, offline, as a user runs it."""
    environment = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "vanilla_transformer", *argv],
        cwd=cwd,
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def tree_digest(root: Path) -> dict[str, str]:
    """Every file and folder under `root`, hidden ones too, with a digest of each file's content."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
        for path in sorted(root.rglob("*"))
    }


def one_error_line(stderr: str) -> str:
    """The one `error: ...` line a user error ends with, without a traceback."""
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and stderr.strip().splitlines()[-1] == errors[0], stderr[-3000:]
    return errors[0]


# a TSV file named for its direction, which a run needs no language flags for; 2 updates of the demo preset
TSV_CORPUS = "pairs.en-de.tsv"
TSV_TRAIN = [
    *("train", "--preset", "demo", "--corpus", TSV_CORPUS, "--max-steps", "2", "--save-steps", "2"),
    *("--average-last", "1", "--eval-samples", "4", "--threads", "1", "--report-to", "none", "--output-dir", "RUN"),
]


@pytest.fixture(scope="module")
def tsv_run(tmp_path_factory) -> Path:
    """A folder holding `pairs.en-de.tsv` (2,500 distinct pairs in the Anki format: English, translation,
    attribution) and RUN, a run trained on it by `python -m vanilla_transformer train` in a fresh process, without
    language flags."""
    root = tmp_path_factory.mktemp("tsv-run")
    pairs = grammar_pairs(2500, seed=7)
    lines = [f"{en}\t{de}\tCC-BY 2.0 (France) Attribution: example.org #{i}\n" for i, (en, de) in enumerate(pairs)]
    (root / TSV_CORPUS).write_text("".join(lines), encoding="utf-8")
    done = run_cli(*TSV_TRAIN, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return root


@pytest.mark.slow
def test_a_run_on_a_tsv_file_records_the_direction_its_name_gives_and_refuses_it_swapped(tsv_run):
    record = json.loads((tsv_run / "RUN" / "preset.json").read_text())
    corpus = (tsv_run / TSV_CORPUS).resolve()
    assert record["corpus"] == str(corpus)
    assert record["run"]["corpus_sha256"] == hashlib.sha256(corpus.read_bytes()).hexdigest()
    assert (record["run"]["source_lang"], record["run"]["target_lang"]) == ("en", "de")
    assert (tsv_run / "RUN" / "checkpoint-2").is_dir() and (tsv_run / "RUN" / "final" / "config.json").is_file()
    before = tree_digest(tsv_run)
    done = run_cli(*TSV_TRAIN, "--source-lang", "de", "--target-lang", "en", cwd=tsv_run)
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_error_line(done.stderr)
    assert line.startswith("error: RUN holds a run trained with other settings (")
    assert "source_lang: 'en' -> 'de'" in line and "target_lang: 'de' -> 'en'" in line
    assert tree_digest(tsv_run) == before


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--seed", "3"], "(seed: 0 -> 3)"),
        (["--bf16"], "(precision: 'fp32' -> 'bf16')"),
        (["--max-grad-norm", "1.0"], "(max_grad_norm: 0.0 -> 1.0)"),
        (["--source-lang", "en", "--target-lang", "fr"], "(target_lang: 'de' -> 'fr')"),
    ],
    ids=["seed", "bf16", "clipping", "target-lang"],
)
def test_the_train_command_refuses_to_resume_a_run_with_other_settings(tsv_run, flags, expected, capsys, monkeypatch):
    monkeypatch.chdir(tsv_run)
    before = tree_digest(tsv_run)
    with pytest.raises(SystemExit) as exited:
        main([*TSV_TRAIN, *flags])
    assert exited.value.code == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"RUN holds a run trained with other settings {expected}. Resume it with the settings in " in line
    assert tree_digest(tsv_run) == before


@pytest.mark.slow
def test_a_resume_keeps_the_recorded_settings_of_the_flags_left_out(tsv_run, tmp_path, capsys, monkeypatch):
    """`train --output-dir RUN` alone continues RUN as it was started (its preset, corpus and languages were given as
    flags then), a flag given changes only its own setting, and one the run cannot take is refused, naming it."""
    shutil.copytree(tsv_run / "RUN", tmp_path / "RUN")
    monkeypatch.chdir(tmp_path)  # where the run's corpus, recorded by its absolute path, is not
    options = ["--eval-samples", "4", "--threads", "1", "--report-to", "none"]  # not recorded: they change no weight
    before = tree_digest(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["train", "--output-dir", "RUN", "--seed", "5", *options])
    assert exited.value.code == 2 and "(seed: 0 -> 5)" in one_error_line(capsys.readouterr().err)
    assert tree_digest(tmp_path) == before
    main(["train", "--output-dir", "RUN", "--max-steps", "3", *options])  # longer: a resumable field
    record = json.loads((tmp_path / "RUN" / "preset.json").read_text())
    recorded = json.loads((tsv_run / "RUN" / "preset.json").read_text())
    assert record == recorded | {"max_steps": 3}
    assert (tmp_path / "RUN" / "checkpoint-3").is_dir()


def test_a_tsv_file_not_named_for_its_direction_needs_the_language_flags(tsv_run, capsys, monkeypatch):
    monkeypatch.chdir(tsv_run)
    shutil.copy(TSV_CORPUS, "pairs.tsv")
    before = tree_digest(tsv_run)
    for languages in ([], ["--source-lang", "en"]):
        argv = [*TSV_TRAIN[:-1], "NEW", *languages]
        argv[argv.index(TSV_CORPUS)] = "pairs.tsv"
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        line = one_error_line(capsys.readouterr().err)
        assert line.startswith("error: pairs.tsv is a TSV file of English and one other language")
        assert "give --source-lang and --target-lang" in line
    assert tree_digest(tsv_run) == before and not (tsv_run / "NEW").exists()
    # with them, the file under this other name is the corpus RUN trained on: its resume passes the checks
    preset = get_training_preset("demo", corpus="pairs.tsv", max_steps=4, save_steps=2, average_last=1)
    check_settings(preset, "RUN", source_lang="en", target_lang="de")
    (tsv_run / "pairs.tsv").unlink()
