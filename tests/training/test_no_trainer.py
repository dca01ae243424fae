"""The accelerate loop's streamed training (`--streaming`): resumed exactly from the stream position its checkpoints
hold, and refused where it cannot run."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from vanilla_transformer.data.corpora import load_builtin
from vanilla_transformer.data.tokenization import save_tokenizer
from vanilla_transformer.errors import SettingsError
from vanilla_transformer.training.no_trainer import train_no_trainer
from vanilla_transformer.training.presets import get_training_preset
from vanilla_transformer.training.settings import TrainingSettings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stream_corpus(tmp_path_factory, builtin_tokenizer) -> tuple[Path, Path]:
    """A folder of line-aligned train/valid files from the built-in corpus, and a tokenizer folder for it."""
    folder = tmp_path_factory.mktemp("stream-corpus")
    for split, rows in (("train", 120), ("valid", 20)):
        pairs = load_builtin("train" if split == "train" else "valid")["translation"][:rows]
        for lang in ("en", "de"):
            (folder / f"{split}.{lang}").write_text("".join(pair[lang] + "\n" for pair in pairs), encoding="utf-8")
    save_tokenizer(builtin_tokenizer, folder.parent / "stream-tokenizer")
    return folder, folder.parent / "stream-tokenizer"


def streamed_run(corpus: Path, tokenizer: Path, output: Path, max_steps: int):
    # 120 pairs in buffers of 50 (~6 batches an epoch): updates 1-9 cross buffer boundaries and the end of an epoch
    preset = get_training_preset(
        "demo", corpus=str(corpus), valid_split="valid", max_steps=max_steps, save_steps=3, eval_steps=1000,
        max_tokens=600, tokens_per_update=600, average_last=5, dropout=0.0,
    )  # fmt: skip
    settings = TrainingSettings(preset, output, eval_samples=4, threads=1, streaming=True, stream_buffer_pairs=50,
                                tokenizer_path=tokenizer, log_steps=1)  # fmt: skip
    return train_no_trainer(settings)


def test_a_stopped_stream_resumes_to_the_weights_of_an_uninterrupted_run(stream_corpus, tmp_path):
    corpus, tokenizer = stream_corpus
    straight = streamed_run(corpus, tokenizer, tmp_path / "straight", max_steps=9)
    streamed_run(corpus, tokenizer, tmp_path / "resumed", max_steps=3)  # stops after the checkpoint of update 3
    state = json.loads((tmp_path / "resumed" / "checkpoint-3" / "stream_state_0.json").read_text())
    assert state["taken"] > 0 or state["buffer"] > 0
    resumed = streamed_run(corpus, tokenizer, tmp_path / "resumed", max_steps=9)
    assert resumed.losses == pytest.approx(straight.losses, rel=1e-6)
    # an epoch ended inside the run: the stream went round (the position of update 9 is in epoch 1)
    assert json.loads((tmp_path / "straight" / "checkpoint-9" / "stream_state_0.json").read_text())["epoch"] >= 1
    first, second = (load_file(run.final_dir / "model.safetensors") for run in (straight, resumed))
    assert first.keys() == second.keys() and all(first[name].equal(second[name]) for name in first)


def test_streaming_without_a_tokenizer_or_with_batches_of_pairs_is_refused(stream_corpus, tmp_path):
    corpus, tokenizer = stream_corpus
    preset = get_training_preset("demo", corpus=str(corpus), valid_split="valid", max_steps=2)
    with pytest.raises(SettingsError, match=r"- --streaming never reads the whole corpus.*\n- --streaming cuts"):
        train_no_trainer(TrainingSettings(preset, tmp_path / "run", streaming=True, per_device_batch_size=8))
    assert not (tmp_path / "run").exists()
    for corpus in ("builtin", str(tmp_path / "en-de.tsv")):
        (tmp_path / "en-de.tsv").write_text("Hello.\tHallo.\n")
        preset = get_training_preset("demo", corpus=corpus, max_steps=2)
        with pytest.raises(SettingsError, match=r"--streaming reads .*: leave"):
            train_no_trainer(TrainingSettings(preset, tmp_path / "run", streaming=True, tokenizer_path=tokenizer))
        assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_stream_buffer_pairs_without_streaming_is_a_usage_error(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "vanilla_transformer", "train-no-trainer", "--preset", "demo", "--output-dir",
         str(tmp_path / "run"), "--stream-buffer-pairs", "100"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 2 and "--stream-buffer-pairs sizes the buffer of --streaming" in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_stream_whose_side_lost_a_line_is_refused_before_an_update(stream_corpus, tmp_path, capsys):
    from vanilla_transformer.cli.main import main

    corpus, tokenizer = stream_corpus
    broken = tmp_path / "broken"
    shutil.copytree(corpus, broken)
    lines = (broken / "train.de").read_text(encoding="utf-8").splitlines(keepends=True)
    (broken / "train.de").write_text("".join(lines[:60] + lines[61:]), encoding="utf-8")
    argv = ["train-no-trainer", "--preset", "demo", "--corpus", str(broken), "--valid-split", "valid", "--streaming"]
    argv += ["--tokenizer", str(tokenizer), "--max-steps", "2", "--threads", "1", "--output-dir", str(tmp_path / "run")]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    error = capsys.readouterr().err
    assert exited.value.code == 2 and "train.en has 120 lines but" in error and "train.de has 119" in error
    assert not (tmp_path / "run").exists()  # refused with the settings: no record, no tokenizer to trip a retry
