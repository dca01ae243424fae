import json
from pathlib import Path

import pytest
from datasets import Dataset

from vanilla_transformer.data.corpora import (
    BUILTIN_SPLITS,
    load_builtin,
    load_corpus,
    load_text_files,
    read_lines,
    tokenize_pairs,
)


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_multi30k_files_load_aligned(multi30k):
    valid = load_text_files(multi30k, "valid", "en", "de")
    assert len(valid) == 1014
    first = valid[0]["translation"]
    assert first["en"] == read_lines(multi30k / "valid.en")[0]
    assert first["de"] == read_lines(multi30k / "valid.de")[0]


def test_different_line_counts_name_both_files_and_counts(tmp_path):
    write(tmp_path / "train.en", "a\nb\nc\n")
    write(tmp_path / "train.de", "x\ny\n")
    with pytest.raises(ValueError) as error:
        load_text_files(tmp_path, "train", "en", "de")
    message = str(error.value)
    assert "train.en has 3 lines" in message and "train.de has 2" in message


def test_non_utf8_names_file_and_line(tmp_path):
    write(tmp_path / "train.en", "a\nb\n")
    write(tmp_path / "train.de", b"x\n" + "Gr\xfc\xdfe\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"train\.de, line 2: not UTF-8"):
        load_text_files(tmp_path, "train", "en", "de")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"test\.en does not exist"):
        load_text_files(tmp_path, "test", "en", "de")
    (tmp_path / "test.en").mkdir()
    with pytest.raises(IsADirectoryError, match=r"test\.en is a folder; expected a file"):
        load_text_files(tmp_path, "test", "en", "de")


def test_empty_and_over_long_pairs_are_dropped_and_counted(tmp_path, builtin_tokenizer):
    write(tmp_path / "train.en", "A dog.\n\nA cat sees a dog.\n" + "word " * 80 + "\nThe man.\n")
    write(tmp_path / "train.de", "Ein Hund.\nLeer.\n \nWort.\nDer Mann.\n")
    corpus = load_text_files(tmp_path, "train", "en", "de")
    dataset, report = tokenize_pairs(corpus, builtin_tokenizer, "en", "de", max_length=32)
    assert report.kept == len(dataset) == 2
    assert report.empty == [1, 2] and report.too_long == [3]
    assert "dropped 2 with an empty side" in str(report) and "1 over the length limit" in str(report)
    assert builtin_tokenizer.decode(dataset[1]["labels"], skip_special_tokens=True) == "Der Mann."


def test_builtin_splits_are_disjoint_and_sized():
    splits = {name: load_builtin(name) for name in BUILTIN_SPLITS}
    english = {name: {pair["en"] for pair in ds["translation"]} for name, ds in splits.items()}
    for name, (start, stop) in BUILTIN_SPLITS.items():
        assert len(english[name]) == stop - start
    assert not english["train"] & english["test"] and not english["train"] & english["valid"]
    assert load_corpus("builtin", "valid")["translation"] == splits["valid"]["translation"]


def test_datasets_builder_with_language_columns(tmp_path):
    rows = [{"en": "A dog.", "de": "Ein Hund."}, {"en": "A cat.", "de": "Eine Katze."}]
    path = write(tmp_path / "train.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    corpus = load_corpus("json", "train", data_files={"train": str(path)})
    assert corpus["translation"] == rows


def test_datasets_builder_without_language_columns_says_so(tmp_path):
    path = write(tmp_path / "train.jsonl", json.dumps({"source": "A", "target": "B"}) + "\n")
    with pytest.raises(ValueError, match="neither a 'translation' column nor one column per language"):
        load_corpus("json", "train", data_files={"train": str(path)})


def test_a_local_dataset_folder_is_loaded_by_datasets_and_its_validation_split_found(tmp_path):
    # a local copy of a Hub dataset (parquet files named by split), not a folder of {split}.{lang} text files
    rows = {"train": [{"en": "A dog.", "de": "Ein Hund."}], "validation": [{"en": "A cat.", "de": "Eine Katze."}]}
    for split, pairs in rows.items():
        Dataset.from_list([{"translation": pair} for pair in pairs]).to_parquet(tmp_path / f"{split}.parquet")
    assert load_corpus(str(tmp_path), "valid")["translation"] == rows["validation"]
    assert load_corpus(str(tmp_path), "train[:1]")["translation"] == rows["train"]
    with pytest.raises(ValueError, match="has no split 'test2016'; its splits are train, validation"):
        load_corpus(str(tmp_path), "test2016")


def test_a_datasets_builder_split_is_found_by_its_other_name(tmp_path):
    path = write(tmp_path / "dev.jsonl", json.dumps({"en": "A dog.", "de": "Ein Hund."}) + "\n")
    corpus = load_corpus("json", "validation", data_files={"train": str(path), "dev": str(path)})
    assert corpus["translation"] == [{"en": "A dog.", "de": "Ein Hund."}]


def test_a_text_folder_split_is_found_by_its_other_name_and_a_missing_one_listed(tmp_path):
    write(tmp_path / "val.en", "A dog.\n")
    write(tmp_path / "val.de", "Ein Hund.\n")
    assert load_corpus(str(tmp_path), "validation")["translation"] == [{"en": "A dog.", "de": "Ein Hund."}]
    with pytest.raises(ValueError, match="has no split 'train'; its splits are val"):
        load_corpus(str(tmp_path), "train")


def test_multi30k_by_name_reads_the_folder_multi30k_dir_finds(tmp_path, monkeypatch):
    write(tmp_path / "valid.en", "A dog.\n")
    write(tmp_path / "valid.de", "Ein Hund.\n")
    monkeypatch.setenv("VANILLA_TRANSFORMER_MULTI30K", str(tmp_path))
    assert load_corpus("multi30k", "valid")["translation"] == [{"en": "A dog.", "de": "Ein Hund."}]
