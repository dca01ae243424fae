"""Parallel corpora as `datasets.Dataset`s with one `translation` column (`{"en": ..., "de": ...}`), the layout of
transformers' translation examples and of `wmt14` on the Hub.

Five sources: Multi30k by name (`multi30k.py` downloads it once), line-aligned text files `{split}.{lang}` (the layout
of Multi30k), a tab-separated Anki/Tatoeba file of English and one other language (`anki.py`), any `datasets`
dataset by name or local folder, and the built-in English→German grammar corpus (`grammar.py`), the offline default.
"""

import hashlib
import logging
import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from datasets import Dataset, get_dataset_split_names, load_dataset

from .anki import SPLITS as ANKI_SPLITS
from .anki import load_anki
from .grammar import grammar_pairs
from .multi30k import multi30k_dir
from .text import read_lines

logger = logging.getLogger(__name__)

BUILTIN = "builtin"
MULTI30K = "multi30k"
# names that corpora give their validation split: the one a corpus has is used whichever of them is asked for
VALIDATION_NAMES = ("valid", "validation", "val", "dev")
# The built-in corpus: one draw of distinct pairs, cut into fixed splits so that held-out pairs never occur in train.
BUILTIN_SPLITS = {"train": (0, 6000), "valid": (6000, 6300), "test": (6300, 6800)}


def load_text_files(data_dir: str | Path, split: str, source_lang: str, target_lang: str) -> Dataset:
    """`{data_dir}/{split}.{source_lang}` and `{split}.{target_lang}`, line N of one translating line N of the other."""
    source_path = Path(data_dir) / f"{split}.{source_lang}"
    target_path = Path(data_dir) / f"{split}.{target_lang}"
    sources, targets = read_lines(source_path), read_lines(target_path)
    if len(sources) != len(targets):
        raise ValueError(
            f"{source_path} has {len(sources)} lines but {target_path} has {len(targets)}; the two sides of a "
            f"parallel corpus must be line-aligned."
        )
    pairs = [{source_lang: s, target_lang: t} for s, t in zip(sources, targets, strict=True)]
    return Dataset.from_dict({"translation": pairs})


def load_builtin(split: str, seed: int = 0) -> Dataset:
    """A split of the built-in English→German grammar corpus: `train` (6000 pairs), `valid` (300), `test` (500)."""
    if split not in BUILTIN_SPLITS:
        raise ValueError(f"the built-in corpus has splits {sorted(BUILTIN_SPLITS)}, not {split!r}.")
    start, stop = BUILTIN_SPLITS[split]
    pairs = grammar_pairs(max(stop for _, stop in BUILTIN_SPLITS.values()), seed=seed)[start:stop]
    return Dataset.from_dict({"translation": [{"en": en, "de": de} for en, de in pairs]})


def load_corpus(
    source: str,
    split: str,
    source_lang: str = "en",
    target_lang: str = "de",
    dataset_config: str | None = None,
    translation_column: str = "translation",
    data_files: str | list[str] | dict | None = None,
) -> Dataset:
    """One split of a parallel corpus from `"builtin"`; `"multi30k"` (the official files, `multi30k.multi30k_dir`:
    downloaded once, or the folder `$VANILLA_TRANSFORMER_MULTI30K`; a folder of that name is `./multi30k`); a folder
    of `{split}.{lang}` files; an Anki/Tatoeba TSV file (`anki.load_anki`: its own train/valid/test split, with an
    `attribution` column); or a `datasets` name or local dataset folder (e.g. `"wmt14"` with
    `dataset_config="de-en"`, or `"bentrevett/multi30k"`, whose columns are the languages; or a builder such as
    `"json"` with `data_files`).

    The split is looked up among those the corpus has: a validation split is found by any of `VALIDATION_NAMES`
    (`"valid"` loads a dataset's `validation`), and a split it lacks raises an error listing the ones it has."""
    if source == BUILTIN:
        if (source_lang, target_lang) != ("en", "de"):
            raise ValueError(f"the built-in corpus is en→de, not {source_lang}→{target_lang}.")
        return load_builtin(split)
    if source == MULTI30K:
        source = str(multi30k_dir(languages=(source_lang, target_lang)))
    if Path(source).is_file():  # an Anki/Tatoeba TSV file (`anki.py`), split by its own rule
        return load_anki(source, find_split(split, list(ANKI_SPLITS), source), source_lang, target_lang)
    folder = Path(source)
    text_splits = sorted(path.stem for path in folder.glob(f"*.{source_lang}")) if folder.is_dir() else []
    if text_splits:
        return load_text_files(folder, find_split(split, text_splits, source), source_lang, target_lang)
    name, bracket, rows = split.partition("[")  # keep a slice such as train[:1000] for `datasets`
    available = get_dataset_split_names(source, dataset_config, data_files=data_files)
    split = find_split(name, available, source) + bracket + rows
    dataset = load_dataset(source, dataset_config, split=split, data_files=data_files)
    if translation_column in dataset.column_names:
        dataset = dataset.select_columns([translation_column])
        if translation_column != "translation":  # `datasets` refuses to rename a column to its own name (wmt14's)
            dataset = dataset.rename_column(translation_column, "translation")
        return dataset
    if {source_lang, target_lang} <= set(dataset.column_names):
        return dataset.map(
            lambda row: {"translation": {source_lang: row[source_lang], target_lang: row[target_lang]}},
            remove_columns=dataset.column_names,
        )
    raise ValueError(
        f"{source} has columns {dataset.column_names}: neither a {translation_column!r} column nor one column per "
        f"language ({source_lang!r}, {target_lang!r}); pass --translation-column."
    )


# a TSV file named for its direction, e.g. en-zh.tsv or tatoeba.en-zh.txt: source, then target language
DIRECTION_IN_NAME = re.compile(r"(?:^|[._-])([a-z]{2,3})-([a-z]{2,3})\.(?:tsv|txt)$")


def corpus_languages(corpus: str, source_lang: str | None, target_lang: str | None) -> tuple[str, str]:
    """The source and target language of a run on `corpus`: those given; for a TSV file (English and one other
    language, which its columns do not name) both must be given, or read from a file name such as `en-zh.tsv`;
    any other corpus defaults to en→de. A TSV file without them raises, naming the flags."""
    if source_lang and target_lang:
        return source_lang, target_lang
    path = Path(corpus).expanduser()
    if path.is_file():
        named = DIRECTION_IN_NAME.search(path.name)
        if named and not (source_lang or target_lang):
            return named.group(1), named.group(2)
        raise ValueError(
            f"{corpus} is a TSV file of English and one other language, and nothing says which language or "
            f"direction: give --source-lang and --target-lang (e.g. --source-lang en --target-lang zh for Tatoeba's "
            f"cmn.txt), or name the file for its direction (en-zh.tsv)."
        )
    return source_lang or "en", target_lang or "de"


def local_corpus(corpus: str) -> Path | None:
    """The file or folder a corpus name means on this machine (absolute, links resolved), or None for the built-in
    corpus, `"multi30k"` and `datasets` names that are not local paths."""
    if corpus in (BUILTIN, MULTI30K):
        return None
    path = Path(corpus).expanduser()
    return path.resolve() if path.exists() else None


def corpus_sha256(corpus: str) -> str | None:
    """A SHA-256 of a local corpus's content: of the file itself (what `sha256sum` prints, and a release's card
    records for it), or for a folder of the name and content of each file directly in it (`{split}.{lang}`); None
    for corpora known by name (`local_corpus`). Two names for the same data (a relative and an absolute path, a moved
    copy) give the same digest; an edited file gives another."""
    path = local_corpus(corpus)
    if path is None:
        return None
    if path.is_file():
        stat = path.stat()
        return _file_sha256(path, stat.st_size, stat.st_mtime_ns)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.iterdir() if p.is_file()):
        stat = file.stat()
        digest.update(f"{file.name}\0{_file_sha256(file, stat.st_size, stat.st_mtime_ns)}\0".encode())
    return digest.hexdigest()


@lru_cache(maxsize=256)
def _file_sha256(path: Path, size: int, mtime_ns: int) -> str:
    """A file's SHA-256, read once per process for each (size, mtime): the settings checks and the record of a run
    both ask for the corpus's digest."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_split(split: str, available: list[str], source: str) -> str:
    """`split` if the corpus `source` has it, else the validation split it has when `split` is one of
    `VALIDATION_NAMES`; an error listing `available` otherwise."""
    if split in available:
        return split
    if split in VALIDATION_NAMES:
        for name in VALIDATION_NAMES:
            if name in available:
                return name
    raise ValueError(f"{source} has no split {split!r}; its splits are {', '.join(available)}.")


@dataclass
class FilterReport:
    """What `tokenize_pairs` dropped, so that no pair disappears silently."""

    kept: int = 0
    empty: list[int] = field(default_factory=list)
    too_long: list[int] = field(default_factory=list)
    # kept, but most of a side is control or unassigned characters: a binary or wrongly decoded file, not text
    not_text: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        def first(rows: list[int]) -> str:
            return f" (rows {rows[:5]}{'...' if len(rows) > 5 else ''})" if rows else ""

        text = (
            f"kept {self.kept} pairs; dropped {len(self.empty)} with an empty side{first(self.empty)} and "
            f"{len(self.too_long)} over the length limit{first(self.too_long)}"
        )
        if self.not_text:
            text += f"; warning: {len(self.not_text)} kept pairs are mostly control characters{first(self.not_text)}"
        return text


def mostly_control_characters(text: str) -> bool:
    """Whether most of `text`'s non-space characters are control, format, private-use or unassigned ones (Unicode
    categories C*): what a binary file, or one decoded with the wrong encoding, reads as."""
    visible = [character for character in text if not character.isspace()]
    control = sum(1 for character in visible if unicodedata.category(character).startswith("C"))
    return control * 2 > len(visible)


def sides(dataset: Dataset, source_lang: str, target_lang: str) -> tuple[list[str], list[str]]:
    """The source and the target sentences of a `translation` dataset, in order."""
    pairs = dataset["translation"]
    return [pair[source_lang] for pair in pairs], [pair[target_lang] for pair in pairs]


def tokenize_pairs(
    dataset: Dataset, tokenizer, source_lang: str, target_lang: str, max_length: int
) -> tuple[Dataset, FilterReport]:
    """Tokenize both sides (`input_ids`, `attention_mask`, `labels`) and drop pairs with an empty side or with more
    than `max_length` tokens on a side, counting each kind in the returned report."""
    sources, targets = sides(dataset, source_lang, target_lang)
    # text that spells a special token ("</s>", "<pad>") is text: it must not end or pad a sentence
    encoded = tokenizer(sources, text_target=targets, split_special_tokens=True)
    report = FilterReport()
    keep = []
    for row, (source, target) in enumerate(zip(sources, targets, strict=True)):
        if not source.strip() or not target.strip():
            report.empty.append(row)
        elif len(encoded["input_ids"][row]) > max_length or len(encoded["labels"][row]) > max_length:
            report.too_long.append(row)
        else:
            keep.append(row)
            if mostly_control_characters(source) or mostly_control_characters(target):
                report.not_text.append(row)
    report.kept = len(keep)
    if report.not_text:
        logger.warning(
            "%d of %d kept pairs are mostly control characters (rows %s): is the corpus a text file in UTF-8?",
            len(report.not_text),
            report.kept,
            report.not_text[:5],
        )
    columns = {name: [encoded[name][row] for row in keep] for name in ("input_ids", "attention_mask", "labels")}
    return Dataset.from_dict(columns), report
