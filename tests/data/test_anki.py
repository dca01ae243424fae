"""Anki/Tatoeba TSV files: read with their attribution, split so that no sentence lies on two sides, the same way
from the same text whatever the line order."""

import hashlib
import random
from pathlib import Path

import pytest

from vanilla_transformer.data.anki import load_anki, read_anki_pairs, split_indices
from vanilla_transformer.data.corpora import load_corpus

ATTRIBUTION = "CC-BY 2.0 (France) Attribution: tatoeba.org #{} (a) & #{} (b)"
TATOEBA_SHA256 = "aa264a2447b26ab7c9d413f8321f9e2a779fd134b5118306b6e26a3499b3926e"


def write_tsv(path: Path, rows: list[tuple[str, str]]) -> Path:
    lines = [f"{en}\t{zh}\t{ATTRIBUTION.format(i, i + 1)}" for i, (en, zh) in enumerate(rows)]
    # a byte-order mark and an empty last line, as cmn.txt has
    path.write_text("\ufeff" + "\n".join(lines) + "\n\n", encoding="utf-8")
    return path


def rows(count: int) -> list[tuple[str, str]]:
    """Pairs with repeated sentences on both sides: sentence k has translations k and k+1, so the groups chain."""
    generator = random.Random(0)
    return [(f"sentence {k // 3}", f"翻译 {(k + generator.randint(0, 1)) // 2}") for k in range(count)]


def test_the_split_keeps_every_sentence_on_one_side_and_ignores_line_order(tmp_path):
    pairs = rows(600)
    triples = read_anki_pairs(write_tsv(tmp_path / "a.txt", pairs))
    assert triples[0][2] == ATTRIBUTION.format(0, 1) and len(triples) == 600  # BOM and empty last line gone
    splits = split_indices(triples, {"test": 50, "valid": 50})
    assert sorted(i for indices in splits.values() for i in indices) == list(range(600))
    assert len(splits["test"]) >= 50 and len(splits["valid"]) >= 50 and splits["train"]
    for side in (0, 1):
        sentences = {name: {triples[i][side] for i in indices} for name, indices in splits.items()}
        assert not sentences["train"] & sentences["valid"] and not sentences["train"] & sentences["test"]
        assert not sentences["valid"] & sentences["test"]
    shuffled = pairs[:]
    random.Random(1).shuffle(shuffled)
    again = read_anki_pairs(write_tsv(tmp_path / "b.txt", shuffled))
    again_splits = split_indices(again, {"test": 50, "valid": 50})
    for name in splits:
        assert {triples[i][:2] for i in splits[name]} == {again[i][:2] for i in again_splits[name]}


def test_both_directions_and_the_attribution_load_through_load_corpus(tmp_path):
    path = write_tsv(tmp_path / "cmn.txt", rows(3000))
    en_zh = load_corpus(str(path), "test", "en", "zh")
    zh_en = load_corpus(str(path), "test", "zh", "en")
    assert en_zh["translation"] == zh_en["translation"] and set(en_zh["translation"][0]) == {"en", "zh"}
    assert en_zh["attribution"][0].startswith("CC-BY 2.0 (France) Attribution: tatoeba.org #")
    assert len(load_corpus(str(path), "valid", "en", "zh")) >= 1000  # "valid" and "validation" alike
    assert len(load_corpus(str(path), "validation", "en", "zh")) == len(load_corpus(str(path), "valid", "en", "zh"))


def test_bad_files_and_language_pairs_are_named(tmp_path):
    broken = tmp_path / "broken.txt"
    broken.write_text("Hi.\t嗨。\tCC-BY\nno tab here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken.txt, line 2: expected 'English<TAB>translation<TAB>attribution'"):
        read_anki_pairs(broken)
    path = write_tsv(tmp_path / "cmn.txt", rows(3000))
    with pytest.raises(ValueError, match="give en as the source or the target language, not de→zh"):
        load_anki(path, "train", "de", "zh")
    with pytest.raises(ValueError, match="split into train, valid, test, not 'dev2'"):
        load_anki(path, "dev2", "en", "zh")
    small = write_tsv(tmp_path / "small.txt", rows(30))
    with pytest.raises(ValueError, match=r"small.txt holds 30 pairs, too few for the fixed split .* more than 2,000"):
        load_anki(small, "test", "en", "zh")  # evaluating its test split is refused naming the file, not training


def test_the_tatoeba_english_mandarin_file_splits_27155_1000_1000(tatoeba):
    assert hashlib.sha256(tatoeba.read_bytes()).hexdigest() == TATOEBA_SHA256
    triples = read_anki_pairs(tatoeba)
    splits = split_indices(triples)
    assert {name: len(indices) for name, indices in splits.items()} == {"train": 27155, "valid": 1000, "test": 1000}
    test = {triples[i][0] for i in splits["test"]} | {triples[i][1] for i in splits["test"]}
    assert not test & ({triples[i][0] for i in splits["train"]} | {triples[i][1] for i in splits["train"]})
