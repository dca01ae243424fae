import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from datasets import Dataset

from vanilla_transformer.data.corpora import (
    BUILTIN_SPLITS,
    corpus_languages,
    corpus_sha256,
    load_builtin,
    load_corpus,
    load_text_files,
    local_corpus,
)
from vanilla_transformer.data.text import read_lines
from vanilla_transformer.data.tokenized import tokenize_pairs


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


def test_a_corpus_cache_cut_short_or_rewritten_is_written_again_with_a_warning(tmp_path, monkeypatch, caplog):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    write(tmp_path / "train.en", "one\ntwo\nthree\n")
    write(tmp_path / "train.de", "eins\nzwei\ndrei\n")
    expected = list(load_text_files(tmp_path, "train", "en", "de")["translation"])
    (arrow,) = (tmp_path / "cache").rglob("*.arrow")
    intact = arrow.read_bytes()
    other = tmp_path / "other"
    other.mkdir()
    write(other / "train.en", "uno\ndos\ntres\n")  # the same sizes: the same Arrow layout, other text
    write(other / "train.de", "eins\nzwei\ndrei\n")
    load_text_files(other, "train", "en", "de")
    (other_arrow,) = [path for path in (tmp_path / "cache").rglob("*.arrow") if path != arrow]
    assert len(other_arrow.read_bytes()) == len(intact)
    for damage, words in ((intact[: len(intact) // 2], "bytes"), (other_arrow.read_bytes(), "changed since")):
        arrow.write_bytes(damage)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert list(load_text_files(tmp_path, "train", "en", "de")["translation"]) == expected
        assert "is damaged" in caplog.text and words in caplog.text and "written again" in caplog.text
        assert arrow.read_bytes() == intact
    arrow.with_suffix(".json").write_text("{not json")  # a record that does not read: the file is written again
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert list(load_text_files(tmp_path, "train", "en", "de")["translation"]) == expected
    assert "does not read" in caplog.text and "written again" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # intact: read as it is, without a word
        load_text_files(tmp_path, "train", "en", "de")
    assert caplog.text == ""


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


TSV_LINE = "Hi.\t嗨。\tCC-BY 2.0 (France) Attribution: tatoeba.org #1 (a) & #2 (b)\n"


def test_a_tsv_file_needs_its_languages_unless_its_name_gives_the_direction(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "cmn.txt", TSV_LINE)
    for given in [(None, None), ("en", None), (None, "zh")]:
        with pytest.raises(ValueError) as refusal:
            corpus_languages("cmn.txt", *given)
        message = str(refusal.value)
        assert "\n" not in message and message.startswith("cmn.txt is a TSV file")
        assert "give --source-lang and --target-lang" in message and "en-zh.tsv" in message
    assert corpus_languages("cmn.txt", "en", "zh") == ("en", "zh")
    assert corpus_languages(str(tmp_path / "cmn.txt"), "zh", "en") == ("zh", "en")  # what is given counts
    # a file named for its direction: source, then target
    for name, direction in [("x.en-zh.tsv", ("en", "zh")), ("en-zh.tsv", ("en", "zh")),
                            ("tatoeba.zh-en.txt", ("zh", "en")), ("pairs_en-deu.tsv", ("en", "deu"))]:  # fmt: skip
        write(tmp_path / name, TSV_LINE)
        assert corpus_languages(name, None, None) == direction, name
    # only the end of the name counts, and only .tsv or .txt
    for name in ("en-zh.tsv.bak", "en-zh-pairs.tsv", "english-zh.tsv"):
        write(tmp_path / name, TSV_LINE)
        with pytest.raises(ValueError, match="give --source-lang and --target-lang"):
            corpus_languages(name, None, None)
    write(tmp_path / "notes.en-zh.csv", TSV_LINE)  # a file `datasets` reads, not a TSV of pairs
    with pytest.raises(ValueError, match="is one .csv file"):
        corpus_languages("notes.en-zh.csv", None, None)
    # every other corpus is en→de unless told: no file to name a direction
    (tmp_path / "folder.en-zh.tsv").mkdir()
    for corpus in ("builtin", "multi30k", "wmt14", "folder.en-zh.tsv", "missing.en-zh.tsv"):
        assert corpus_languages(corpus, None, None) == ("en", "de"), corpus
        assert corpus_languages(corpus, "de", None) == ("de", "de"), corpus
        assert corpus_languages(corpus, None, "fr") == ("en", "fr"), corpus


def test_a_corpus_digest_is_its_content_whatever_path_names_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    corpus = write(tmp_path / "data" / "cmn.txt", TSV_LINE)
    expected = hashlib.sha256(corpus.read_bytes()).hexdigest()
    copy = shutil.copy(corpus, tmp_path / "copy.tsv")
    (tmp_path / "link.tsv").symlink_to(corpus)
    os.mkdir(tmp_path / "elsewhere")
    monkeypatch.chdir(tmp_path / "elsewhere")
    for name in (str(corpus), "../data/cmn.txt", "../data/../data/cmn.txt", "../link.tsv", str(copy)):
        assert corpus_sha256(name) == expected, name
    assert local_corpus("../data/cmn.txt") == local_corpus("../link.tsv") == corpus.resolve()
    assert local_corpus(str(copy)) == Path(copy).resolve() and local_corpus("../data/cmn.txt").is_absolute()
    # relative to this directory, the same name is another file, or none
    write(tmp_path / "elsewhere" / "cmn.txt", TSV_LINE.replace("Hi.", "Hello."))
    assert corpus_sha256("cmn.txt") not in (None, expected)
    assert corpus_sha256("data/cmn.txt") is None and local_corpus("data/cmn.txt") is None
    # corpora known by name have no local content
    for name in ("builtin", "multi30k", "wmt14", "bentrevett/multi30k"):
        assert corpus_sha256(name) is None and local_corpus(name) is None, name
    # an edited file is other content
    write(corpus, TSV_LINE.replace("Hi.", "Hey."))
    assert corpus_sha256(str(corpus)) not in (None, expected)
    assert corpus_sha256(str(copy)) == expected


def test_a_folder_digest_covers_the_name_and_content_of_each_file(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    write(folder / "train.en", "A dog.\n")
    write(folder / "train.de", "Ein Hund.\n")
    first = corpus_sha256(str(folder))
    assert first is not None and first != corpus_sha256(str(folder / "train.en"))
    shutil.copytree(folder, tmp_path / "moved")
    assert corpus_sha256(str(tmp_path / "moved")) == first  # a moved copy is the same corpus
    (folder / "tok").mkdir()  # sub-folders are not read
    assert corpus_sha256(str(folder)) == first
    write(folder / "valid.en", "A cat.\n")
    assert corpus_sha256(str(folder)) != first
    (folder / "valid.en").unlink()
    (folder / "train.de").rename(folder / "train.fr")
    assert corpus_sha256(str(folder)) not in (None, first)


def test_pairs_that_are_mostly_control_characters_are_kept_counted_and_warned(builtin_tokenizer, caplog):
    pairs = [
        ("A dog runs.", "Ein Hund rennt."),
        ("\x01\x02\x03\x04\x05\x06", "Ein Hund."),  # a binary file's bytes, read as text
        ("A cat.", "\ue000\ue001\ue002 \U000e0001x"),  # private use and tag characters: a wrong decoding
        ("A man\x0c with a\ttab.", "Ein Mann \x07 mit Tab."),  # a stray control character is text still
    ]
    dataset = Dataset.from_dict({"translation": [{"en": en, "de": de} for en, de in pairs]})
    with caplog.at_level(logging.WARNING, logger="vanilla_transformer.data.corpora"):
        tokenized, report = tokenize_pairs(dataset, builtin_tokenizer, "en", "de", max_length=64)
    assert report.kept == len(tokenized) == 4 and report.not_text == [1, 2]
    assert "warning: 2 kept pairs are mostly control characters (rows [1, 2])" in str(report)
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings == [
        "2 of 4 kept pairs are mostly control characters (rows [1, 2]): is the corpus a text file in UTF-8?"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vanilla_transformer.data.corpora"):
        _, report = tokenize_pairs(load_builtin("valid"), builtin_tokenizer, "en", "de", max_length=64)
    assert report.kept == 300 and report.not_text == [] and "control" not in str(report)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_a_datasets_file_given_alone_is_refused_with_the_folder_that_works(tmp_path, capsys):
    from vanilla_transformer.cli.main import main

    rows = {"train": [{"en": "A dog.", "de": "Ein Hund."}], "valid": [{"en": "A cat.", "de": "Eine Katze."}]}
    for split, pairs in rows.items():
        lines = "".join(json.dumps({"translation": pair}) + "\n" for pair in pairs)
        (tmp_path / f"{split}.jsonl").write_text(lines, encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        main(["train", "--corpus", str(tmp_path / "train.jsonl"), "--output-dir", str(tmp_path / "run")])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert exited.value.code == 2 and "train.jsonl is one .jsonl file" in error and "valid.jsonl" in error, error
    # what the message says to do
    assert load_corpus(str(tmp_path), "valid")["translation"] == rows["valid"]
