"""Sentence pairs in manythings.org's tab-separated Anki format of Tatoeba (`cmn.txt`: English, translation, the
attribution CC-BY asks to keep), and a split of such a file, reproducible from it alone, in which no sentence lies on
two sides (Tatoeba translates many sentences several times): pairs sharing a sentence form one group, and the groups,
ordered by the SHA-256 of their smallest English sentence, fill `test`, then `valid`, to `SPLIT_PAIRS`; the rest train.
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
# files `datasets` reads with a builder of its own: given alone, not an Anki/Tatoeba TSV file
DATA_FILE_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet", ".arrow")


def check_tsv_file(path: str | Path) -> None:
    """Refuse a corpus file that is not a TSV of pairs but one of the files `datasets` reads with a builder of its
    own (JSON lines, CSV, Parquet, Arrow), naming the layout it loads them from."""
    suffix = Path(path).suffix.lower()
    if suffix in DATA_FILE_SUFFIXES:
        raise DataError(
            f"{path} is one {suffix} file; a file given alone is read as an Anki/Tatoeba TSV file, and `datasets` "
            f"would read it as a train split only: put train{suffix} and valid{suffix} (and test{suffix}) in a "
            f"folder and give the folder (`datasets` finds the splits by their names)."
        )


def read_anki_pairs(path: str | Path) -> list[tuple[str, str, str]]:
    """The (English, other language, attribution) triples of an Anki TSV file, skipping empty lines."""
    check_tsv_file(path)
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
    """The indices of `triples` (read from `source`) in each of `SPLITS`, by the module docstring's rule."""
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
            f"{source} holds {pairs}, too few for the fixed split of an Anki TSV file ({held}, the rest for train): "
            f"give a file of more than {sum(sizes[name] for name in held_out):,} pairs, or a folder of your own "
            f"{{split}}.{{lang}} files."
        )
    return {name: sorted(indices) for name, indices in splits.items()}


def load_anki(path: str | Path, split: str, source_lang: str = "en", target_lang: str = "zh") -> Dataset:
    """One split of an Anki TSV file as a `translation` dataset with an `attribution` column for the card's data
    statement; one language is English (the first column), the other names the second."""
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
