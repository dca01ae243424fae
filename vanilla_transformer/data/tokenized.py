"""Tokenized corpora: token ids and lengths in memory-mapped Arrow tables, built once per corpus, tokenizer and length
limit (by `datasets.Dataset.map`, in several processes) and reused by every later run, resume and process. At WMT14's
size (4.5M pairs) Python lists would cost ~50 GB per process and minutes per start; each process here maps the same
files and reads only the rows of its batches.
"""

import hashlib
import json
import logging
import os
import shutil
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from datasets import Dataset, Features, List, Value, load_from_disk

from ..errors import DataError
from .batching import SOURCE_LENGTH, TARGET_LENGTH
from .staging import fresh_staging_folder, staging_path
from .text import changed_since, file_state

logger = logging.getLogger(__name__)

# bumped whenever what a cache folder holds, or how it is built, changes: old folders are then built anew
FORMAT_VERSION = 2
# rows of one `map` call; corpora below `PARALLEL_ROWS` pairs are tokenized in this process (workers cost a second)
MAP_BATCH_ROWS = 2000
PARALLEL_ROWS = 200_000
REPORT_FILE = "report.json"
# each file of the folder's dataset with its size, mtime and SHA-256 when built, checked on every open
FILES_RECORD = "files.json"
# the columns a model's batches are made of; the length columns feed the sampler
MODEL_COLUMNS = ("input_ids", "labels")
# what the map writes for each row: kept (0), an empty side (1), over the length limit (2)
KEPT, EMPTY, TOO_LONG = 0, 1, 2


@dataclass
class FilterReport:
    """What `tokenize_pairs` dropped, so that no pair disappears silently (rows: 0-based positions in the corpus)."""

    kept: int = 0
    empty: list[int] = field(default_factory=list)
    too_long: list[int] = field(default_factory=list)
    # kept, but most of a side is control or unassigned characters: a binary or wrongly decoded file, not text
    not_text: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        return describe_drops(
            self.kept, {kind: (len(rows), rows) for kind, rows in asdict(self).items() if kind != "kept"}
        )


def describe_drops(kept: int, dropped: dict[str, tuple[int, list[int]]]) -> str:
    """A report's text: `kept` and, for `empty`, `too_long` and `not_text`, the count and the first rows."""

    def counted(kind: str, what: str) -> str:
        count, rows = dropped[kind]
        return f"{count} {what}" + (f" (rows {rows[:5]}{'...' if count > len(rows[:5]) else ''})" if rows else "")

    text = f"kept {kept} pairs; dropped {counted('empty', 'with an empty side')} and "
    text += counted("too_long", "over the length limit")
    if dropped["not_text"][0]:
        text += f"; warning: {counted('not_text', 'kept pairs are mostly control characters')}"
    return text


def mostly_control_characters(text: str) -> bool:
    """Whether most of `text`'s non-space characters are of Unicode categories C* (control, format, private-use,
    unassigned): what a binary file, or one decoded with the wrong encoding, reads as."""
    if text.isprintable():  # no C* character at all (the common case, decided in C)
        return False
    visible = [character for character in text if not character.isspace()]
    control = sum(1 for character in visible if unicodedata.category(character).startswith("C"))
    return control * 2 > len(visible)


def tokenized_cache_root() -> Path:
    """Where tokenized corpora are kept: `$VANILLA_TRANSFORMER_TOKENIZED_CACHE`, else `tokenized/` in the `datasets`
    cache (`$HF_DATASETS_CACHE`, under `$HF_HOME`)."""
    import datasets

    folder = os.environ.get("VANILLA_TRANSFORMER_TOKENIZED_CACHE")
    return Path(folder) if folder else Path(datasets.config.HF_DATASETS_CACHE) / "vanilla_transformer" / "tokenized"


def cache_key(corpus: Dataset, tokenizer_fingerprint: str, source_lang: str, target_lang: str, max_length: int) -> str:
    """The name of a tokenized corpus's folder: a digest of the corpus's `datasets` fingerprint (its content and every
    `select` made of it), the tokenizer's fingerprint, the direction and the length limit."""
    parts = [FORMAT_VERSION, corpus._fingerprint, tokenizer_fingerprint, source_lang, target_lang, max_length]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def encode_pairs(tokenizer, sources: list[str], targets: list[str], max_length: int):
    """Each pair's status (`KEPT`, `EMPTY`, `TOO_LONG`), ids (none unless kept) and whether it is kept but mostly
    control characters: the filter of `tokenize_pairs`."""
    # text that spells a special token ("</s>", "<pad>") is text: it must not end or pad a sentence
    encoded = tokenizer(sources, text_target=targets, split_special_tokens=True, return_attention_mask=False)
    for source, target, source_ids, target_ids in zip(
        sources, targets, encoded["input_ids"], encoded["labels"], strict=True
    ):
        if not source.strip() or not target.strip():
            yield EMPTY, [], [], False
        elif len(source_ids) > max_length or len(target_ids) > max_length:
            yield TOO_LONG, [], [], False
        else:
            yield KEPT, source_ids, target_ids, mostly_control_characters(source) or mostly_control_characters(target)


def _encoder(tokenizer, source_lang: str, target_lang: str, max_length: int, id_type: str):
    """The batched `map` function: token ids, lengths and status of each pair; dropped pairs keep no ids."""

    def encode(batch: dict) -> dict:
        sources = [pair[source_lang] for pair in batch["translation"]]
        targets = [pair[target_lang] for pair in batch["translation"]]
        rows = {"input_ids": [], "labels": [], SOURCE_LENGTH: [], TARGET_LENGTH: [], "status": [], "not_text": []}
        for status, source_ids, target_ids, not_text in encode_pairs(tokenizer, sources, targets, max_length):
            rows["input_ids"].append(source_ids)
            rows["labels"].append(target_ids)
            rows[SOURCE_LENGTH].append(len(source_ids))
            rows[TARGET_LENGTH].append(len(target_ids))
            rows["status"].append(status)
            rows["not_text"].append(not_text)
        return rows

    features = Features(
        {
            "input_ids": List(Value(id_type)),
            "labels": List(Value(id_type)),
            SOURCE_LENGTH: Value("int32"),
            TARGET_LENGTH: Value("int32"),
            "status": Value("uint8"),
            "not_text": Value("bool"),
        }
    )
    return encode, features


def tokenize_pairs(
    dataset: Dataset,
    tokenizer,
    source_lang: str,
    target_lang: str,
    max_length: int,
    cache_root: str | Path | None = None,
    num_proc: int | None = None,
) -> tuple[Dataset, FilterReport]:
    """Tokenize both sides of a `translation` dataset into `input_ids` and `labels` (with `source_length` and
    `target_length` columns), dropping pairs with an empty side or more than `max_length` tokens on a side and
    counting each kind in the returned report.

    With `cache_root` the result is a folder there (`cache_key`), built once under a hidden name and renamed when
    complete, then opened memory-mapped by later calls. `num_proc` workers tokenize (default: up to 8 cores for
    corpora of `PARALLEL_ROWS` pairs or more)."""
    from .tokenization import tokenizer_fingerprint

    id_type = "uint16" if len(tokenizer) <= 1 << 16 else "int32"
    encode, features = _encoder(tokenizer, source_lang, target_lang, max_length, id_type)
    folder = None
    if cache_root is not None:
        key = cache_key(dataset, tokenizer_fingerprint(tokenizer), source_lang, target_lang, max_length)
        folder = Path(cache_root) / key
        if (folder / REPORT_FILE).is_file():
            opened = _open_cached(folder)
            if opened is not None:
                _warn_not_text(opened[1])
                return opened
    if num_proc is None:
        num_proc = min(os.cpu_count() or 1, 8) if len(dataset) >= PARALLEL_ROWS else None
    staging = None if folder is None else _staging_folder(folder)
    try:
        encoded = dataset.map(
            encode,
            batched=True,
            batch_size=MAP_BATCH_ROWS,
            remove_columns=dataset.column_names,
            features=features,
            num_proc=num_proc,
            cache_file_name=str(staging / "encoded.arrow") if staging else None,
            keep_in_memory=staging is None,
            desc="tokenizing",
        )
        status = np.asarray(encoded.data.table.column("status").to_numpy())
        not_text = np.asarray(encoded.data.table.column("not_text").to_numpy(zero_copy_only=False))
        kept_rows = np.flatnonzero(status == KEPT)
        report = FilterReport(
            kept=len(kept_rows),
            empty=np.flatnonzero(status == EMPTY).tolist(),
            too_long=np.flatnonzero(status == TOO_LONG).tolist(),
            not_text=np.flatnonzero(not_text).tolist(),
        )
        kept = encoded.select(kept_rows).remove_columns(["status", "not_text"])
        if staging is None:
            kept = kept.flatten_indices(keep_in_memory=True)
        else:
            # `datasets` saves an empty dataset as no shard at all, and cannot open that again: give it one
            kept.save_to_disk(str(staging / "dataset"), num_shards=None if len(kept) else 1)
            del encoded, kept
            for file in staging.glob("encoded*.arrow"):
                file.unlink()
            (staging / FILES_RECORD).write_text(json.dumps(_file_records(staging / "dataset")))
            (staging / REPORT_FILE).write_text(json.dumps(asdict(report)))  # last: the folder is complete
            try:
                os.replace(staging, folder)
            except OSError:
                if not (folder / REPORT_FILE).is_file():
                    raise
                shutil.rmtree(staging)  # another process finished the same folder first: its copy is as good
            kept = load_from_disk(str(folder / "dataset"))
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    _warn_not_text(report)
    return kept, report


def _staging_folder(folder: Path) -> Path:
    """A fresh, empty hidden folder to build `folder` in, after removing what killed builds left (gigabytes at WMT's
    size)."""
    try:
        return fresh_staging_folder(folder)
    except OSError as error:  # a read-only mount, a folder of someone else's: no disk to free
        raise DataError(
            f"the tokenized-corpus cache {folder.parent} cannot be written ({error.strerror}): set "
            f"VANILLA_TRANSFORMER_TOKENIZED_CACHE to a folder this user can write (the corpus is tokenized there "
            f"once and reused)."
        ) from error


def _file_records(folder: Path) -> dict[str, list]:
    """Each file under `folder` (relative path) with its `text.file_state`."""
    return {str(path.relative_to(folder)): file_state(path) for path in sorted(folder.rglob("*")) if path.is_file()}


def _damage(folder: Path) -> str | None:
    """What is wrong with a cached folder's dataset against its `FILES_RECORD` (`text.changed_since`), or None."""
    records = json.loads((folder / FILES_RECORD).read_text())
    damages = (changed_since(folder / "dataset" / name, state) for name, state in records.items())
    return next(filter(None, damages), None)


def _open_cached(folder: Path) -> tuple[Dataset, FilterReport] | None:
    """A complete cached folder opened memory-mapped once its files are checked (`_damage`); a damaged one is removed
    with a warning and None returned, for the caller to build it again."""
    try:
        report = FilterReport(**json.loads((folder / REPORT_FILE).read_text()))
        damage = _damage(folder)
        if damage is None:
            return load_from_disk(str(folder / "dataset")), report
    except (OSError, ValueError, TypeError, KeyError) as error:  # pyarrow's ArrowInvalid is a ValueError
        damage = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    logger.warning("the tokenized corpus %s is damaged (%s): it is built again", folder, damage)
    aside = staging_path(folder)  # renamed first: a process that opens the folder now finds it gone, not half
    try:
        os.rename(folder, aside)
    except OSError:
        return None  # another process moved it already
    shutil.rmtree(aside, ignore_errors=True)
    return None


def _warn_not_text(report: FilterReport) -> None:
    if report.not_text:
        logger.warning(
            "%d of %d kept pairs are mostly control characters (rows %s): is the corpus a text file in UTF-8?",
            len(report.not_text),
            report.kept,
            report.not_text[:5],
        )


def model_columns(dataset: Dataset) -> Dataset:
    """The columns a data collator is given (`MODEL_COLUMNS`)."""
    return dataset.select_columns([name for name in MODEL_COLUMNS if name in dataset.column_names])
