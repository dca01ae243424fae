import shutil
from dataclasses import replace

import pytest
from datasets import Dataset

from vanilla_transformer.cli.main import main
from vanilla_transformer.data.batching import TokenBudgetBatchSampler
from vanilla_transformer.data.corpora import load_builtin
from vanilla_transformer.data.tokenization import (
    load_tokenizer,
    tokenizer_fingerprint,
    tokenizer_sample,
    train_joint_bpe,
)
from vanilla_transformer.errors import SettingsError
from vanilla_transformer.training.presets import get_training_preset
from vanilla_transformer.training.run import build_tokenizer, train
from vanilla_transformer.training.run_folder import RunFolder
from vanilla_transformer.training.settings import TrainingSettings


def test_the_bpe_sample_is_seeded_distinct_in_corpus_order_and_whole_when_small():
    corpus = load_builtin("valid").map(lambda row, index: {"row": index}, with_indices=True)
    first, second = tokenizer_sample(corpus, 40), tokenizer_sample(corpus, 40)
    rows = first["row"]
    assert rows == second["row"] and len(set(rows)) == 40 and rows == sorted(rows)
    assert rows != list(range(40))  # drawn from the whole corpus, not its head
    assert tokenizer_sample(corpus, 300) is corpus and tokenizer_sample(corpus, None) is corpus


def test_a_given_tokenizer_is_kept_in_the_run_and_another_refused_on_resume(tmp_path, builtin_tokenizer):
    preset = get_training_preset("demo")
    corpus = load_builtin("valid")
    builtin_tokenizer.save_pretrained(tmp_path / "given")

    def given(path):
        return TrainingSettings(preset, tmp_path / "run", tokenizer_path=path)

    tokenizer = build_tokenizer(given(tmp_path / "given"), RunFolder.read(tmp_path / "run"), corpus)
    assert tokenizer_fingerprint(load_tokenizer(tmp_path / "run" / "tokenizer")) == tokenizer_fingerprint(tokenizer)
    assert tokenizer_fingerprint(tokenizer) == tokenizer_fingerprint(builtin_tokenizer)
    # the same tokenizer again is fine; the run's own is used without --tokenizer
    build_tokenizer(given(tmp_path / "given"), RunFolder.read(tmp_path / "run"), corpus)
    build_tokenizer(given(None), RunFolder.read(tmp_path / "run"), corpus)
    other = train_joint_bpe([pair["en"] for pair in corpus["translation"]], vocab_size=300)
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(SettingsError, match=r"--tokenizer .*other is not the tokenizer the run in .*run was started"):
        build_tokenizer(given(tmp_path / "other"), RunFolder.read(tmp_path / "run"), corpus)
    # the run records where its tokenizer came from; a resume keeps that origin even once the folder is gone
    settings = given(tmp_path / "given")
    RunFolder.read(tmp_path / "run").write_record(settings)
    recorded = RunFolder.read(tmp_path / "run")
    assert recorded.record["run"]["tokenizer_path"] == str((tmp_path / "given").resolve())
    shutil.rmtree(tmp_path / "given")
    resumed = TrainingSettings(preset, tmp_path / "run", tokenizer_path=recorded.record["run"]["tokenizer_path"])
    assert tokenizer_fingerprint(build_tokenizer(resumed, recorded, corpus)) == tokenizer_fingerprint(builtin_tokenizer)


def test_a_resumed_run_opens_the_tokenized_corpus_instead_of_tokenizing_again(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("VANILLA_TRANSFORMER_TOKENIZED_CACHE", str(cache))
    options = {"eval_samples": 4, "log_steps": 1, "threads": 1, "report_to": "none", "progress": False}
    preset = get_training_preset("demo", max_steps=1, save_steps=1, eval_steps=1000, average_last=1, max_tokens=1024)
    train(TrainingSettings(preset, tmp_path / "run", **options))
    folders = sorted(path.name for path in cache.iterdir())
    assert len(folders) == 2  # train and valid

    def fail(*args, **kwargs):
        raise AssertionError("tokenized again instead of opening the cache")

    monkeypatch.setattr(Dataset, "map", fail)
    run = train(TrainingSettings(replace(preset, max_steps=2), tmp_path / "run", **options))
    assert [entry["step"] for entry in run.log_history if "loss" in entry] == [1, 2]  # resumed, one more update
    assert sorted(path.name for path in cache.iterdir()) == folders


def test_train_sorts_the_corpus_into_batches_once(tmp_path, monkeypatch):
    built = []
    for_dataset = TokenBudgetBatchSampler.for_dataset.__func__
    monkeypatch.setattr(
        TokenBudgetBatchSampler,
        "for_dataset",
        classmethod(lambda cls, *a, **k: built.append(1) or for_dataset(cls, *a, **k)),
    )
    preset = get_training_preset("demo", max_steps=1, save_steps=1, eval_steps=1000, average_last=1)
    train(TrainingSettings(preset, tmp_path / "run", eval_samples=4, threads=1, report_to="none", progress=False))
    assert len(built) == 1  # sized the update and fed the Trainer's loader


@pytest.mark.parametrize("given", ["runs/tokenizer", "empty", "not-json"])
def test_a_tokenizer_that_does_not_load_is_named_in_one_line(given, tmp_path, monkeypatch, capsys):
    """`--tokenizer` naming a folder that is not there (which transformers would look up on the Hub), an empty
    folder, or one whose tokenizer.json is not JSON: one line naming it and the fix, not a traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "not-json").mkdir()
    (tmp_path / "not-json" / "tokenizer.json").write_text("not json")
    flags = ["--max-steps", "1", "--save-steps", "1", "--average-last", "1", "--eval-samples", "2"]
    with pytest.raises(SystemExit) as exited:
        main(["train", "--preset", "demo", *flags, "--report-to", "none", "--output-dir", "run", "--tokenizer", given])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err, err[-2000:]
    line = [line for line in err.splitlines() if line.startswith("error:")][-1]
    assert line.startswith(f"error: {given} (") and "holds no tokenizer that loads" in line
    assert "give a folder with tokenizer.json" in line
