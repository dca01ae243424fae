import errno
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset

from vanilla_transformer.data.batching import TokenBudgetBatchSampler, dataset_lengths
from vanilla_transformer.data.corpora import load_builtin, load_text_files
from vanilla_transformer.data.tokenized import model_columns, tokenize_pairs


def write_corpus(folder: Path, pairs: list[tuple[str, str]], split: str = "train") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for side, lang in enumerate(("en", "de")):
        (folder / f"{split}.{lang}").write_text("".join(pair[side] + "\n" for pair in pairs), encoding="utf-8")
    return folder


def refuse_map(monkeypatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError("tokenized again instead of opening the cache")

    monkeypatch.setattr(Dataset, "map", fail)


def test_a_corpus_is_tokenized_once_and_then_opened_memory_mapped(tmp_path, builtin_tokenizer, monkeypatch):
    corpus = load_builtin("valid")
    built, report = tokenize_pairs(corpus, builtin_tokenizer, "en", "de", 12, tmp_path)
    assert len(list(tmp_path.iterdir())) == 1 and report.too_long  # one folder; max_length 12 drops some pairs
    refuse_map(monkeypatch)
    opened, again = tokenize_pairs(corpus, builtin_tokenizer, "en", "de", 12, tmp_path)
    assert again == report
    assert opened.cache_files and all(Path(file["filename"]).is_relative_to(tmp_path) for file in opened.cache_files)
    assert opened[:] == built[:]
    # the same as tokenizing in memory, in this process
    monkeypatch.undo()
    fresh, fresh_report = tokenize_pairs(corpus, builtin_tokenizer, "en", "de", 12)
    assert fresh[:] == opened[:] and fresh_report == report
    assert fresh.cache_files == []


def test_the_cache_is_keyed_by_corpus_content_tokenizer_and_length_limit(tmp_path, builtin_tokenizer):
    from vanilla_transformer.data.tokenization import train_joint_bpe

    pairs = [(pair["en"], pair["de"]) for pair in load_builtin("valid")["translation"][:50]]
    folder = write_corpus(tmp_path / "corpus", pairs)
    cache = tmp_path / "cache"

    def tokenize(tokenizer=builtin_tokenizer, max_length=64):
        return tokenize_pairs(load_text_files(folder, "train", "en", "de"), tokenizer, "en", "de", max_length, cache)

    first, _ = tokenize()
    tokenize()
    assert len(list(cache.iterdir())) == 1
    tokenize(max_length=20)
    other = train_joint_bpe([en for en, _ in pairs] + [de for _, de in pairs], vocab_size=300)
    tokenize(tokenizer=other)
    assert len(list(cache.iterdir())) == 3
    write_corpus(folder, [("Edited.", "Geändert.")] + pairs[1:])  # same path, new content
    edited, _ = tokenize()
    assert len(list(cache.iterdir())) == 4
    assert edited["input_ids"][0] != first["input_ids"][0] and edited["input_ids"][1:] == first["input_ids"][1:]


def test_a_killed_build_is_never_reused(tmp_path, builtin_tokenizer, monkeypatch):
    corpus = load_builtin("valid")
    original = Dataset.save_to_disk

    def killed(self, *args, **kwargs):
        original(self, *args, **kwargs)
        raise KeyboardInterrupt  # after the rows are written, before the report that completes the folder

    monkeypatch.setattr(Dataset, "save_to_disk", killed)
    with pytest.raises(KeyboardInterrupt):
        tokenize_pairs(corpus, builtin_tokenizer, "en", "de", 64, tmp_path)
    assert list(tmp_path.iterdir()) == []  # the staging folder is removed
    monkeypatch.undo()
    # a folder a killed process left under its hidden name (e.g. SIGKILL) is not what a later run opens
    (tmp_path / ".0123abcd.999.partial").mkdir()
    dataset, report = tokenize_pairs(corpus, builtin_tokenizer, "en", "de", 64, tmp_path)
    assert len(dataset) == report.kept == len(corpus)


def test_columns_hold_ids_in_16_bits_and_lengths_that_match_them(tmp_path, builtin_tokenizer):
    dataset, _ = tokenize_pairs(load_builtin("valid"), builtin_tokenizer, "en", "de", 64, tmp_path)
    assert dataset.features["input_ids"].feature.dtype == "uint16"  # a 600-token vocabulary fits
    sources, targets = dataset_lengths(dataset)
    assert sources.tolist() == [len(ids) for ids in dataset["input_ids"]]
    assert targets.tolist() == [len(ids) for ids in dataset["labels"]]
    assert model_columns(dataset).column_names == ["input_ids", "labels"]
    # lengths through an indices mapping (a select) are the selected rows'
    picked = dataset.select([5, 1])
    assert [lengths.tolist() for lengths in dataset_lengths(picked)] == [
        sources[[5, 1]].tolist(),
        targets[[5, 1]].tolist(),
    ]
    sampler = TokenBudgetBatchSampler.for_dataset(dataset, max_tokens=200)
    assert sorted(i for batch in sampler for i in batch) == list(range(len(dataset)))


def test_worker_processes_give_the_same_rows_and_report(tmp_path, builtin_tokenizer):
    pairs = [(pair["en"], pair["de"]) for pair in load_builtin("train")["translation"][:3000]]
    pairs[7] = ("", "leer")
    corpus = load_text_files(write_corpus(tmp_path / "corpus", pairs), "train", "en", "de")
    alone, alone_report = tokenize_pairs(corpus, builtin_tokenizer, "en", "de", 14, tmp_path / "one", num_proc=1)
    workers, workers_report = tokenize_pairs(corpus, builtin_tokenizer, "en", "de", 14, tmp_path / "two", num_proc=2)
    assert workers_report == alone_report and alone_report.empty == [7] and alone_report.too_long
    assert workers[:] == alone[:]
    assert np.array_equal(dataset_lengths(workers)[0], dataset_lengths(alone)[0])


LEAVE_PARTIALS = """
import sys
import errno
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from vanilla_transformer.data.staging import staging_path
tokenized, arrow = staging_path(Path(sys.argv[1])), staging_path(Path(sys.argv[2]))
tokenized.mkdir(parents=True)
(tokenized / "encoded.arrow").write_bytes(b"half a corpus")
arrow.parent.mkdir(parents=True)
arrow.write_bytes(b"half a corpus")
"""


@pytest.mark.slow
def test_what_a_killed_cache_build_left_is_removed_by_the_next_command(tmp_path):
    from vanilla_transformer.data.staging import staging_path

    pairs = [(pair["en"], pair["de"]) for pair in load_builtin("valid")["translation"]]
    corpus = write_corpus(tmp_path / "corpus", pairs[:250])
    write_corpus(corpus, pairs[250:], split="valid")
    tokenized, datasets_cache = tmp_path / "tokenized", tmp_path / "datasets"
    env = dict(os.environ, VANILLA_TRANSFORMER_TOKENIZED_CACHE=str(tokenized), HF_DATASETS_CACHE=str(datasets_cache))
    text = datasets_cache / "vanilla_transformer" / "text"
    # a process that dies while writing both caches (as a SIGKILL leaves them), and one that is still writing
    subprocess.run([sys.executable, "-c", LEAVE_PARTIALS, str(tokenized / "a"), str(text / "b.arrow")], check=True)
    killed = sorted(tokenized.iterdir()) + sorted(text.iterdir())
    live = staging_path(tokenized / "c")
    live.mkdir()
    argv = ["train", "--preset", "demo", "--corpus", str(corpus), "--valid-split", "valid", "--average-last", "1"]
    argv += ["--max-steps", "1", "--eval-samples", "4", "--threads", "1", "--report-to", "none"]
    argv += ["--output-dir", str(tmp_path / "run")]
    done = subprocess.run([sys.executable, "-m", "vanilla_transformer", *argv], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(killed) == 2 and not any(path.exists() for path in killed) and live.is_dir()
    assert "left by a process that was killed while writing it" in done.stderr


def damage_cases(dataset: Path) -> list[tuple[str, Callable[[], None]]]:
    """Ways a cached folder's dataset gets damaged, each with the part of the warning that names it."""
    arrow = next(dataset.glob("*.arrow"))

    def flip_a_byte() -> None:  # the same size, still Arrow: ids changed
        data = bytearray(arrow.read_bytes())
        data[len(data) // 2] ^= 0xFF
        arrow.write_bytes(bytes(data))

    return [
        ("was changed since it was built", flip_a_byte),
        ("bytes, ", lambda: arrow.write_bytes(arrow.read_bytes()[:-100])),  # cut short
        ("bytes, ", lambda: arrow.write_bytes(os.urandom(1000))),
        ("state.json is missing", lambda: (dataset / "state.json").unlink()),
        ("JSONDecodeError", lambda: (dataset.parent / "report.json").write_text("{half")),
        ("TypeError", lambda: (dataset.parent / "report.json").write_text('{"kept": 1, "other": 2}')),
    ]


def test_a_damaged_cache_folder_is_built_again_with_a_warning(tmp_path, builtin_tokenizer, caplog):
    corpus = load_builtin("valid")
    built, report = tokenize_pairs(corpus, builtin_tokenizer, "en", "de", 64, tmp_path)
    rows = built[:]  # read now: the table is a map of the file the damage changes
    [folder] = list(tmp_path.iterdir())
    for expected, damage in damage_cases(folder / "dataset"):
        caplog.clear()
        damage()
        again, again_report = tokenize_pairs(corpus, builtin_tokenizer, "en", "de", 64, tmp_path)
        assert f"the tokenized corpus {folder} is damaged" in caplog.text and expected in caplog.text, expected
        assert again[:] == rows and again_report == report
        assert [path.name for path in tmp_path.iterdir()] == [folder.name]  # nothing set aside is left


def test_a_cache_that_cannot_be_written_is_named_with_its_fix(tmp_path, builtin_tokenizer, monkeypatch):
    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(
        ValueError, match=r"tokenized-corpus cache .* cannot be written \(Read-only file system\): set "
    ):
        tokenize_pairs(load_builtin("valid"), builtin_tokenizer, "en", "de", 64, tmp_path)


@pytest.mark.slow
def test_training_on_a_tampered_cache_builds_it_again(tmp_path):
    pairs = [(pair["en"], pair["de"]) for pair in load_builtin("valid")["translation"]]
    corpus = write_corpus(tmp_path / "corpus", pairs[:250])
    write_corpus(corpus, pairs[250:], split="valid")
    env = dict(os.environ, VANILLA_TRANSFORMER_TOKENIZED_CACHE=str(tmp_path / "tokenized"))
    argv = ["train", "--preset", "demo", "--corpus", str(corpus), "--valid-split", "valid", "--average-last", "1"]
    argv += ["--max-steps", "1", "--eval-samples", "4", "--threads", "1", "--report-to", "none"]
    for run in ("first", "second"):
        command = [sys.executable, "-m", "vanilla_transformer", *argv, "--output-dir", str(tmp_path / run)]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        for dataset in (tmp_path / "tokenized").glob("*/dataset"):  # target ids flipped, the file still Arrow
            damage_cases(dataset)[0][1]()
    assert done.stderr.count("is damaged") == 2 and "was changed since it was built" in done.stderr
