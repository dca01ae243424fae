"""Sentence pairs in the tab-separated format manythings.org publishes Tatoeba's sentences in for Anki (`cmn.txt`,
`deu.txt`, ...): English, the other language, and the attribution the CC-BY licence asks to keep with the data. And a
split of such a file, reproducible from the file alone, in which no sentence lies on two sides.

Tatoeba gives many sentences several translations (29,155 English-Mandarin pairs hold 27,663 distinct English
sentences), so a split by pair would train on test sentences. Pairs that share an English sentence or a translation
are joined into groups (connected components), each group goes to one split, ordered by the SHA-256 of its smallest
English sentence: the first groups make `test` until it holds `SPLIT_PAIRS["test"]` pairs, the next `valid`, the rest
`train`.
"""

import hashlib
from pathlib import Path

from datasets import Dataset

from ..errors import DataError
from .text import read_lines

# pairs in each held-out split (at least: a group is not cut); the rest is train
SPLIT_PAIRS = {"test": 1000, "valid": 1000}
SPLITS = ("train", "valid", "test")
ATTRIBUTION = "attribution"


def read_anki_pairs(path: str | Path) -> list[tuple[str, str, str]]:
    """The (English, other language, attribution) triples of an Anki TSV file, skipping empty lines; a malformed line
    raises an error naming it."""
    triples = []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) not in (2, 3) or not fields[0].strip() or not fields[1].strip():
            raise DataError(
                f"{path}, line {number}: expected 'English<TAB>translation<TAB>attribution' (the manythings.org "
                f"Anki format), got {len(fields)} field(s): {line[:80]!r}."
            )
        triples.append((fields[0].strip(), fields[1].strip(), fields[2].strip() if len(fields) == 3 else ""))
    if not triples:
        raise DataError(f"{path} holds no sentence pairs.")
    return triples


def split_indices(
    triples: list[tuple[str, str, str]], sizes: dict[str, int] = SPLIT_PAIRS, source: str | Path = "the file"
) -> dict[str, list[int]]:
    """The indices of `triples` (read from `source`) in each of `SPLITS` (see the module docstring for the rule), in
    file order."""
    parent = list(range(len(triples)))

    def root(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    first_with = {}
    for index, (english, other, _) in enumerate(triples):
        for key in (("en", english), ("other", other)):
            parent[root(index)] = root(first_with.setdefault(key, index))
    groups: dict[int, list[int]] = {}
    for index in range(len(triples)):
        groups.setdefault(root(index), []).append(index)

    def order(members: list[int]) -> str:
        return hashlib.sha256(min(triples[i][0] for i in members).encode("utf-8")).hexdigest()

    splits: dict[str, list[int]] = {name: [] for name in SPLITS}
    held_out = [name for name in ("test", "valid") if sizes.get(name)]
    for members in sorted(groups.values(), key=order):
        name = next((name for name in held_out if len(splits[name]) < sizes[name]), "train")
        splits[name].extend(members)
    if not splits["train"]:
        held = " and ".join(f"{sizes[name]:,} for {name}" for name in held_out)
        pairs = f"{len(triples):,} pair{'s' * (len(triples) != 1)}"
        raise DataError(
            f"{source} holds {pairs}, too few for the fixed split of an Anki TSV file ({held}, the rest for train; "
            f"any split of another size would hold other sentences): give a file of more than "
            f"{sum(sizes[name] for name in held_out):,} pairs, or write your own {{split}}.{{lang}} files into a "
            f"folder and pass that."
        )
    return {name: sorted(indices) for name, indices in splits.items()}


def load_anki(path: str | Path, split: str, source_lang: str = "en", target_lang: str = "zh") -> Dataset:
    """One split of an Anki TSV file as a `translation` dataset with an `attribution` column for the card's data
    statement. One language must be English (the first column); the other names the second, in either direction."""
    if split not in SPLITS:
        raise DataError(f"an Anki TSV file is split into {', '.join(SPLITS)}, not {split!r}.")
    if "en" not in (source_lang, target_lang) or source_lang == target_lang:
        raise DataError(
            f"{path} pairs English with one other language; give en as the source or the target language, not "
            f"{source_lang}→{target_lang}."
        )
    other = target_lang if source_lang == "en" else source_lang
    triples = read_anki_pairs(path)
    indices = split_indices(triples, source=path)[split]
    return Dataset.from_dict(
        {
            "translation": [{"en": triples[i][0], other: triples[i][1]} for i in indices],
            ATTRIBUTION: [triples[i][2] for i in indices],
        }
    )
