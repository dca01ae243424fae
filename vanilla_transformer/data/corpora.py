"""Parallel corpora as `datasets.Dataset`s with one `translation` column (`{"en": ..., "de": ...}`), the layout of
transformers' translation examples and of `wmt14` on the Hub (the sources: `load_corpus`)."""

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import islice
from pathlib import Path

import datasets
import pyarrow as pa
from datasets import Dataset, NamedSplit, get_dataset_split_names, load_dataset

from ..errors import DataError
from .anki import SPLITS as ANKI_SPLITS
from .anki import check_tsv_file, load_anki
from .grammar import grammar_pairs
from .multi30k import MULTI30K, MULTI30K_ENV, holds_multi30k, multi30k_dir
from .staging import atomic_file
from .text import changed_since, check_text_file, count_lines, file_sha256, file_state, iter_lines

logger = logging.getLogger(__name__)

BUILTIN = "builtin"
# names that corpora give their validation split: the one a corpus has is used whichever of them is asked for
VALIDATION_NAMES = ("valid", "validation", "val", "dev")
# bumped whenever `load_text_files`'s Arrow files change; lines read and written at a time
TEXT_FORMAT, TEXT_BATCH_LINES = 2, 100_000
# The built-in corpus: one draw of distinct pairs, cut into fixed splits so that held-out pairs never occur in train.
BUILTIN_SPLITS = {"train": (0, 6000), "valid": (6000, 6300), "test": (6300, 6800)}


def load_text_files(data_dir: str | Path, split: str, source_lang: str, target_lang: str) -> Dataset:
    """`{data_dir}/{split}.{source_lang}` and `{split}.{target_lang}`, line N of one translating line N of the other.

    The pairs are written once, `TEXT_BATCH_LINES` at a time, into an Arrow file in the `datasets` cache and
    memory-mapped, so millions of lines cost no more memory than a few. The file is named for the two files' content,
    so an edited file is read again; a `.json` beside it records its state when written (`text.file_state`), so that
    an Arrow file cut short or rewritten since is written again, with a warning, instead of read."""
    paths = [Path(data_dir) / f"{split}.{lang}" for lang in (source_lang, target_lang)]
    for path in paths:
        check_text_file(path)
    key = [TEXT_FORMAT, source_lang, target_lang, *(corpus_sha256(str(path)) for path in paths)]
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]
    arrow = Path(datasets.config.HF_DATASETS_CACHE) / "vanilla_transformer" / "text" / f"{digest}.arrow"
    state = arrow.with_suffix(".json")
    if arrow.is_file():
        damage = _cache_damage(arrow, state)
        if damage is None:
            return Dataset.from_file(str(arrow), split=NamedSplit(split))
        logger.warning("the corpus cache %s (of %s) is damaged (%s): it is written again", arrow, paths[0], damage)
    counts = [count_lines(path) for path in paths]  # an Arrow file of these contents was line-aligned when written
    if counts[0] != counts[1]:
        raise DataError(
            f"{paths[0]} has {counts[0]} lines but {paths[1]} has {counts[1]}; the two sides of a parallel "
            f"corpus must be line-aligned."
        )
    _write_pairs_arrow(paths, (source_lang, target_lang), arrow)
    with atomic_file(state) as staging:  # last: an Arrow file without its record is written again
        staging.write_text(json.dumps(file_state(arrow)))
    return Dataset.from_file(str(arrow), split=NamedSplit(split))


def _cache_damage(arrow: Path, state: Path) -> str | None:
    """What is wrong with a cached Arrow file against the `text.file_state` recorded beside it, or None."""
    try:
        return changed_since(arrow, json.loads(state.read_text()))
    except (OSError, ValueError, TypeError) as error:  # no record (a killed write), or one that does not read
        return f"its record {state.name} does not read: {type(error).__name__}"


def _write_pairs_arrow(paths: list[Path], languages: tuple[str, str], arrow: Path) -> None:
    """The pairs of two line-aligned files as one `translation` struct column in an Arrow stream file, written under
    a hidden name first so that a killed conversion is never taken for a complete one."""
    schema = pa.schema([("translation", pa.struct([(lang, pa.string()) for lang in languages]))])
    arrow.parent.mkdir(parents=True, exist_ok=True)
    with (
        atomic_file(arrow) as staging,  # removes what a killed conversion left: a corpus's text, at WMT's size
        paths[0].open("rb") as sources,
        paths[1].open("rb") as targets,
        pa.OSFile(str(staging), "wb") as sink,
    ):
        pairs = zip(iter_lines(sources, str(paths[0])), iter_lines(targets, str(paths[1])), strict=True)
        with pa.ipc.new_stream(sink, schema) as writer:
            while batch := list(islice(pairs, TEXT_BATCH_LINES)):
                sides = [pa.array(lines, pa.string()) for lines in zip(*batch, strict=True)]
                writer.write_batch(pa.record_batch([pa.StructArray.from_arrays(sides, names=languages)], schema=schema))


def load_builtin(split: str, seed: int = 0) -> Dataset:
    """A split of the built-in English→German grammar corpus: `train` (6000 pairs), `valid` (300), `test` (500)."""
    if split not in BUILTIN_SPLITS:
        raise DataError(f"the built-in corpus has splits {sorted(BUILTIN_SPLITS)}, not {split!r}.")
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
    """One split of a parallel corpus: `"builtin"` (the grammar corpus, the offline default); `"multi30k"` (the
    official files, `multi30k.multi30k_dir`; a folder of that name is `./multi30k`); a folder of `{split}.{lang}`
    files; an Anki/Tatoeba TSV file (`anki.load_anki`); or a `datasets` name or local dataset folder (e.g. `"wmt14"`
    with `dataset_config="de-en"`, `"bentrevett/multi30k"` whose columns are the languages, or `"json"` with
    `data_files`). The split is found by `find_split`."""
    if source == BUILTIN:
        if (source_lang, target_lang) != ("en", "de"):
            raise DataError(f"the built-in corpus is en→de, not {source_lang}→{target_lang}.")
        return load_builtin(split)
    if source == MULTI30K:
        source = str(multi30k_dir(languages=(source_lang, target_lang)))
    if Path(source).is_file():  # an Anki/Tatoeba TSV file (`anki.py`), split by its own rule
        split = find_split(split, list(ANKI_SPLITS), source)
        return load_anki(source, split, source_lang, target_lang)
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
    raise columns_error(source, dataset.column_names, translation_column, source_lang, target_lang)


def columns_error(name: str, columns: list[str], translation_column: str, source_lang: str, target_lang: str):
    """The error for a `datasets` corpus with neither a translation column nor one column per language."""
    return DataError(
        f"{name} has columns {columns}: neither a {translation_column!r} column nor one column per "
        f"language ({source_lang!r}, {target_lang!r}); pass --translation-column."
    )


# a TSV file named for its direction, e.g. en-zh.tsv or tatoeba.en-zh.txt: source, then target language
DIRECTION_IN_NAME = re.compile(r"(?:^|[._-])([a-z]{2,3})-([a-z]{2,3})\.(?:tsv|txt)$")


def corpus_languages(corpus: str, source_lang: str | None, target_lang: str | None) -> tuple[str, str]:
    """The source and target language of a run on `corpus`: those given; for a TSV file, whose columns name no
    language, both given or read from a file name such as `en-zh.tsv`; else en→de by default."""
    if source_lang and target_lang:
        return source_lang, target_lang
    path = Path(corpus).expanduser()
    if path.is_file():
        check_tsv_file(path)
        named = DIRECTION_IN_NAME.search(path.name)
        if named and not (source_lang or target_lang):
            return named.group(1), named.group(2)
        raise DataError(
            f"{corpus} is a TSV file of English and one other language, and nothing says which language or "
            f"direction: give --source-lang and --target-lang (e.g. --source-lang en --target-lang zh for Tatoeba's "
            f"cmn.txt), or name the file for its direction (en-zh.tsv)."
        )
    return source_lang or "en", target_lang or "de"


@dataclass(frozen=True)
class CorpusIdentity:
    """A run's corpus, settled once when its settings are built (`corpus_identity`): its name, its languages, where
    its files lie (`location`, an input no output may touch), what a run records of it (`recorded`, a local corpus as
    its absolute path; `sha256`, its content) and how it differs from what a run recorded (`change_from`)."""

    name: str
    source_lang: str
    target_lang: str
    local: Path | None  # `local_corpus`
    location: str | None  # `corpus_location`

    @property
    def recorded(self) -> str:
        return str(self.local) if self.local is not None else self.name

    @cached_property
    def sha256(self) -> str | None:
        """`corpus_sha256`, read when first asked (a WMT-sized file is gigabytes)."""
        return corpus_sha256(self.name)

    def change_from(self, name: str | None, sha256: str | None) -> str | None:
        """How this corpus differs from one a run recorded as `name` with content `sha256`, or None: by content
        where both have a digest, else by name (`same_corpus`)."""
        if sha256 is not None and self.sha256 is not None:
            if sha256 == self.sha256:
                return None
            digests = f"(sha256 {sha256[:12]}…) -> {self.recorded!r} (sha256 {self.sha256[:12]}…)"
            return f"corpus: {name!r} {digests}, other content"
        if name is not None and same_corpus(self.recorded, name):
            return None
        return f"corpus: {name!r} -> {self.recorded!r}"


def corpus_identity(corpus: str, source_lang: str | None = None, target_lang: str | None = None) -> CorpusIdentity:
    """`corpus` with its languages (`corpus_languages`) and its place on this machine."""
    return CorpusIdentity(
        corpus, *corpus_languages(corpus, source_lang, target_lang), local_corpus(corpus), corpus_location(corpus)
    )


def local_corpus(corpus: str) -> Path | None:
    """The file or folder a corpus name means on this machine (absolute, links resolved), or None for the built-in
    corpus, `"multi30k"` and `datasets` names that are not local paths."""
    if corpus in (BUILTIN, MULTI30K):
        return None
    path = Path(corpus).expanduser()
    return path.resolve() if path.exists() else None


def same_corpus(name: str, other: str) -> bool:
    """Whether two corpus names (as preset.json records them) name one corpus: equal, the same file or folder written
    another way, or `"multi30k"` and a folder of its official files (as runs recorded it before it had a name)."""
    if name == other:
        return True
    if MULTI30K in (name, other):
        return holds_multi30k(str(other if name == MULTI30K else name))
    return Path(name).exists() and Path(other).exists() and Path(name).samefile(other)


def corpus_sha256(corpus: str) -> str | None:
    """A SHA-256 of a local corpus's content: of the file itself (what `sha256sum` prints), or of the name and
    content of each file directly in a folder; None for corpora known by name (`local_corpus`). Any name for the same
    data gives the same digest; an edited file gives another."""
    path = local_corpus(corpus)
    if path is None:
        return None
    if path.is_file():
        return _file_sha256(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.iterdir() if p.is_file()):
        digest.update(f"{file.name}\0{_file_sha256(file)}\0".encode())
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    stat = path.stat()
    return _cached_sha256(path, stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=256)
def _cached_sha256(path: Path, size: int, mtime_ns: int) -> str:
    """Read once per process for each (size, mtime): the settings checks and the record of a run both ask."""
    return file_sha256(path)


def find_split(split: str, available: list[str], source: str) -> str:
    """`split` if the corpus `source` has it, else its validation split when `split` is one of `VALIDATION_NAMES`
    (`"valid"` finds a dataset's `validation`); an error listing `available` otherwise."""
    if split in available:
        return split
    if split in VALIDATION_NAMES:
        for name in VALIDATION_NAMES:
            if name in available:
                return name
    raise DataError(f"{source} has no split {split!r}; its splits are {', '.join(available)}.")


def sides(dataset: Dataset, source_lang: str, target_lang: str) -> tuple[list[str], list[str]]:
    """The source and the target sentences of a `translation` dataset, in order."""
    pairs = dataset["translation"]
    return [pair[source_lang] for pair in pairs], [pair[target_lang] for pair in pairs]


def corpus_location(corpus: str) -> str | None:
    """Where a corpus name's files lie on this machine, as an input to keep outputs out of: its folder or file, or
    the folder named by $VANILLA_TRANSFORMER_MULTI30K; None for the built-in corpus and `datasets` names."""
    if corpus == MULTI30K:
        return os.environ.get(MULTI30K_ENV)
    return corpus if Path(corpus).expanduser().exists() else None
