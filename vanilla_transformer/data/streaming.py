"""Token-budget batches (§5.1) from a corpus that is never loaded whole: line-aligned text files read side by side, or
a `datasets` corpus streamed. The stream is cut into buffers, each tokenized, cut into batches and shuffled: memory is
bounded by the buffer, and a position in the stream (a buffer's start and a count of batches) is small enough to save
in a checkpoint and exact to resume from.
"""

import json
import logging
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from itertools import chain, islice
from pathlib import Path

import numpy as np
from datasets import get_dataset_split_names, load_dataset
from torch.utils.data import IterableDataset, get_worker_info

from ..errors import DataError
from .batching import DEFAULT_BUFFER_PAIRS, length_sorted_batches
from .corpora import BUILTIN, MULTI30K, columns_error, find_split
from .multi30k import multi30k_dir
from .text import count_lines, decode_line
from .tokenized import EMPTY, KEPT, describe_drops, encode_pairs

logger = logging.getLogger(__name__)

# pairs tokenized per call: the tokenizer's `Encoding`s and Python lists cost ~14 kB a pair of 25 words a side
# (measured: 10k pairs raised the peak RSS by 145 MB, 2000 by 28 MB), and 2000 pairs per call amortize its overhead
TOKENIZE_PAIRS = 2_000
# the first rows of each kind of dropped pair that a report keeps (a list of them all would grow with the corpus)
REPORT_ROWS = 5
STATE_FORMAT = 1


@dataclass
class StreamReport:
    """`tokenized.FilterReport` for a pass of a stream: counts, and the first `REPORT_ROWS` rows (0-based) of each
    kind."""

    kept: int = 0
    empty: int = 0
    too_long: int = 0
    # kept, but most of a side is control or unassigned characters: a binary or wrongly decoded file, not text
    not_text: int = 0
    rows: dict[str, list[int]] = field(default_factory=lambda: {"empty": [], "too_long": [], "not_text": []})

    def count(self, kind: str, row: int) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.rows[kind]) < REPORT_ROWS:
            self.rows[kind].append(row)

    def __str__(self) -> str:
        return describe_drops(self.kept, {kind: (getattr(self, kind), rows) for kind, rows in self.rows.items()})


@dataclass
class _Buffer:
    """The kept pairs of one buffer: each side's ids end to end in one array (a ninth of a Python list's memory),
    pair `i` at `bounds[i]:bounds[i + 1]`."""

    source_ids: np.ndarray
    source_bounds: np.ndarray
    target_ids: np.ndarray
    target_bounds: np.ndarray

    def examples(self, pairs: np.ndarray) -> list[dict]:
        """The examples `DataCollatorForSeq2Seq` takes, for the pairs at `pairs`."""
        (sources, s), (targets, t) = (self.source_ids, self.source_bounds), (self.target_ids, self.target_bounds)
        return [
            {"input_ids": sources[s[i] : s[i + 1]].tolist(), "labels": targets[t[i] : t[i + 1]].tolist()}
            for i in pairs.tolist()
        ]


class _TextPairs:
    """Line N of two files, read side by side from byte offsets; `position()` is where the next pair begins."""

    def __init__(self, paths: tuple[Path, Path], start: dict):
        self.paths = paths
        self.row = start["row"]
        self.offsets = [start["source_offset"], start["target_offset"]]
        self.handles = [path.open("rb") for path in paths]
        for handle, offset in zip(self.handles, self.offsets, strict=True):
            handle.seek(offset)

    def __iter__(self) -> "_TextPairs":
        return self

    def __next__(self) -> tuple[str, str]:
        raws = [handle.readline() for handle in self.handles]
        if not raws[0] or not raws[1]:
            if raws[0] or raws[1]:
                ended, other = self.paths if not raws[0] else self.paths[::-1]
                raise DataError(
                    f"{ended} ends after {self.row} lines but {other} has more; the two sides of a parallel corpus "
                    f"must be line-aligned."
                )
            raise StopIteration
        self.row += 1
        self.offsets = [offset + len(raw) for offset, raw in zip(self.offsets, raws, strict=True)]
        return tuple(decode_line(raw, str(path), self.row) for raw, path in zip(raws, self.paths, strict=True))

    def position(self) -> dict:
        return {"row": self.row, "source_offset": self.offsets[0], "target_offset": self.offsets[1]}

    def close(self) -> None:
        for handle in self.handles:
            handle.close()


class _DatasetPairs:
    """The pairs of a streamed `datasets` split from a saved `state_dict` of the stream, read as
    `corpora.load_corpus` reads them."""

    def __init__(self, stream, start: dict, languages: tuple[str, str], translation_column: str, name: str):
        self.stream, self.row, self.start = stream, start["row"], start["stream"]
        self.languages, self.translation_column, self.name = languages, translation_column, name
        stream.load_state_dict(self.start)  # every `iter` of the stream starts from its loaded state
        self.examples = iter(stream)
        self.started = False

    def __iter__(self) -> "_DatasetPairs":
        return self

    def __next__(self) -> tuple[str, str]:
        self.started = True
        example = next(self.examples)
        self.row += 1
        source_lang, target_lang = self.languages
        if self.translation_column in example:
            example = example[self.translation_column]
        elif not {source_lang, target_lang} <= example.keys():
            raise columns_error(self.name, sorted(example), self.translation_column, source_lang, target_lang)
        return example[source_lang] or "", example[target_lang] or ""  # a missing (null) side is an empty one

    def position(self) -> dict:
        # the stream sets up its state when its iterator first runs: until then its state_dict is an older one
        return {"row": self.row, "stream": self.stream.state_dict() if self.started else self.start}

    def close(self) -> None:
        pass


def aligned_text_files(corpus: Path, split: str, source_lang: str, target_lang: str) -> tuple[Path, Path] | None:
    """The `{split}.{source_lang}` and `{split}.{target_lang}` files of a folder of text files (`find_split`), or None
    for a corpus that is no such folder. Their lines are counted first (~1 s a GB), since reading side by side would
    see a line lost in the middle of one side only at the end, after mistranslated pairs."""
    text_splits = sorted(path.stem for path in corpus.glob(f"*.{source_lang}")) if corpus.is_dir() else []
    if not text_splits:
        return None
    split = find_split(split, text_splits, str(corpus))
    paths = (corpus / f"{split}.{source_lang}", corpus / f"{split}.{target_lang}")
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist; expected one sentence per line in it.")
    counts = [count_lines(path) for path in paths]
    if counts[0] != counts[1]:
        raise DataError(
            f"{paths[0]} has {counts[0]} lines but {paths[1]} has {counts[1]}: the two sides of a parallel corpus "
            f"must be line-aligned, and pairs after a lost or added line would be mistranslations of each other; "
            f"repair the files (e.g. compare them with `wc -l`)."
        )
    return paths


def stream_problems(corpus: str, split: str, source_lang: str, target_lang: str) -> list[str]:
    """Why `corpus` cannot be streamed: the built-in corpus (made in memory), a TSV file (split by its own rule and
    read whole), and a folder whose `split` files are not line-aligned (`aligned_text_files`)."""
    if corpus == BUILTIN:
        return ["--streaming reads files or a datasets name; the built-in corpus is made in memory: leave it out."]
    path = Path(corpus).expanduser()
    if path.is_file():
        return [
            f"--streaming reads a folder of line-aligned split.lang files or a datasets name; {corpus} is a TSV file, "
            "split by its own rule and read whole: leave out --streaming."
        ]
    try:
        aligned_text_files(path, split, source_lang, target_lang)
    except (DataError, FileNotFoundError) as error:
        return [str(error)]
    return []


class StreamingTokenBatches(IterableDataset):
    """An endless stream of token-budget batches (§5.1) from a folder of line-aligned `{split}.{lang}` files (or
    `"multi30k"`), or a `datasets` corpus streamed with `load_dataset(..., streaming=True)`.

    Each item is a list of `{"input_ids", "labels"}` examples whose padded size is at most `max_tokens`, for
    `DataLoader(stream, batch_size=None, collate_fn=collator)` with `num_workers=0`. Buffer `b` of epoch `e` holds the
    next `buffer_pairs` pairs, tokenized and filtered as `tokenized.tokenize_pairs` does (drops counted in `report`),
    cut by `length_sorted_batches` and shuffled, both seeded from `(seed, e, b)`; the stream restarts at its end.
    Pairs never move between buffers, so a corpus ordered by source is best shuffled once on disk
    (`paste a.en a.de | shuf`).

    Process `rank` takes batch `i` of each buffer when `i % world_size == rank`; every process reads and tokenizes
    the whole stream. `load_state_dict(state_dict())` continues exactly after the last batch yielded (re-reading that
    position's buffer and skipping the batches taken).
    """

    def __init__(
        self,
        corpus: str | Path,
        tokenizer,
        split: str = "train",
        source_lang: str = "en",
        target_lang: str = "de",
        *,
        max_tokens: int,
        max_length: int,
        buffer_pairs: int = DEFAULT_BUFFER_PAIRS,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        dataset_config: str | None = None,
        translation_column: str = "translation",
        data_files: str | list[str] | dict | None = None,
    ):
        from .tokenization import tokenizer_fingerprint

        if max_tokens < 2 * max_length:
            raise DataError(
                f"max_tokens={max_tokens} is smaller than a pair of max_length={max_length} tokens a side "
                f"({2 * max_length}): such a pair would fit no batch; raise --max-tokens or lower --max-length."
            )
        if buffer_pairs < 1 or seed < 0 or not 0 <= rank < world_size:
            raise DataError(
                f"buffer_pairs={buffer_pairs}, seed={seed}, rank={rank}, world_size={world_size}: expected "
                f"buffer_pairs ≥ 1, seed ≥ 0 and 0 ≤ rank < world_size."
            )
        self.tokenizer = tokenizer
        self.source_lang, self.target_lang = source_lang, target_lang
        self.max_tokens, self.max_length, self.buffer_pairs = max_tokens, max_length, buffer_pairs
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.translation_column = translation_column
        # ids fit 16 bits for vocabularies up to 65536 (the paper's are 37000 and 32000): half the memory of int32
        self.id_type = np.uint16 if len(tokenizer) <= 1 << 16 else np.int32
        if corpus == BUILTIN:
            raise DataError(
                "the built-in corpus is generated in memory (6800 pairs), not read from a file: train on it without "
                "streaming."
            )
        if corpus == MULTI30K:  # its official files (`corpora.load_corpus`), downloaded once
            corpus = multi30k_dir(languages=(source_lang, target_lang))
        corpus_path = Path(corpus).expanduser()
        if corpus_path.is_file():
            raise DataError(
                f"{corpus} is a file: streaming reads a folder of line-aligned {split}.{source_lang} and "
                f"{split}.{target_lang} files, or a `datasets` corpus; load a TSV file whole (corpora.load_corpus)."
            )
        self.paths = aligned_text_files(corpus_path, split, source_lang, target_lang)
        if self.paths is not None:
            split = self.paths[0].stem
            self.stream = None
            identity = {"files": {path.name: path.stat().st_size for path in self.paths}}
            start = {"row": 0, "source_offset": 0, "target_offset": 0}
        else:
            available = get_dataset_split_names(str(corpus), dataset_config, data_files=data_files)
            split = find_split(split, available, str(corpus))
            self.stream = load_dataset(str(corpus), dataset_config, split=split, data_files=data_files, streaming=True)
            identity = {"dataset": str(corpus), "config": dataset_config, "data_files": data_files}
            start = {"row": 0, "stream": self.stream.state_dict()}
        self.corpus_name = str(corpus)
        settings = {
            **identity,
            "split": split,
            "languages": [source_lang, target_lang],
            "tokenizer": tokenizer_fingerprint(tokenizer),
            "max_tokens": max_tokens,
            "max_length": max_length,
            "buffer_pairs": buffer_pairs,
            "seed": seed,
            "rank": rank,
            "world_size": world_size,
        }
        # what a saved position is valid for, after the JSON round trip a saved state has had (tuples become lists)
        self.settings = _json_copy(settings)
        self._pass_start = start
        # the position after the last batch yielded: the buffer it is in (epoch, index, where it begins) and how many
        # of its batches this process has taken; the pass's counts before that buffer, to count the pass on resume
        self._position = {
            "epoch": 0,
            "buffer": 0,
            "start": start,
            "taken": 0,
            "report": asdict(StreamReport()),
            "pass_batches": 0,
        }
        self.epoch = 0  # the epoch of the last batch yielded
        self.report = StreamReport()  # the current pass's, up to the buffer last read
        self._warned_small_buffer = False

    def state_dict(self) -> dict:
        """The position after the last batch yielded, JSON-serializable (each process saves its own): the buffer
        (`epoch`, `buffer`, its `start` in the files or stream), how many of its batches were `taken`, the pass's
        `report` and `pass_batches` before it, and the `settings` it is valid for."""
        return _json_copy({"format": STATE_FORMAT, "settings": self.settings, **self._position})

    def load_state_dict(self, state: dict) -> None:
        """Continue the next iteration at `state`; a state saved with other `settings` raises an error."""
        if state.get("format") != STATE_FORMAT:
            raise DataError(f"a stream state of format {state.get('format')!r}; this version reads {STATE_FORMAT}.")
        saved = state["settings"]
        differences = [
            f"{key}: saved {saved.get(key)!r}, now {self.settings.get(key)!r}"
            for key in sorted(saved.keys() | self.settings.keys())
            if saved.get(key) != self.settings.get(key)
        ]
        if differences:
            raise DataError(
                f"the saved stream position belongs to another corpus or settings ({'; '.join(differences)}); resume "
                f"with the run's own corpus and settings, on the same rank, or start the stream afresh."
            )
        self._position = _json_copy({key: state[key] for key in self._position})
        self.epoch = state["epoch"]
        self.report = StreamReport(**_json_copy(state["report"]))

    def _pairs(self, start: dict) -> "_TextPairs | _DatasetPairs":
        if self.paths is not None:
            return _TextPairs(self.paths, start)
        languages = (self.source_lang, self.target_lang)
        return _DatasetPairs(self.stream, start, languages, self.translation_column, self.corpus_name)

    def __iter__(self) -> Iterator[list[dict]]:
        if get_worker_info() is not None:
            raise RuntimeError(
                "StreamingTokenBatches runs in a DataLoader worker: its state_dict would not see the batches the "
                "worker yields, and each worker would repeat the stream; use num_workers=0."
            )
        position = _json_copy(self._position)  # the report below grows as the buffer is read
        epoch, buffer, taken = position["epoch"], position["buffer"], position["taken"]
        report, pass_batches = StreamReport(**position["report"]), position["pass_batches"]
        pairs = self._pairs(position["start"])
        try:
            while True:
                start, before = pairs.position(), asdict(report)
                self.report = report
                kept = self._read_buffer(pairs, report)
                if kept is None:  # the stream has ended: check the pass, start the next
                    self._end_pass(epoch, report, pass_batches)
                    pairs.close()
                    epoch, buffer, taken, report, pass_batches = epoch + 1, 0, 0, StreamReport(), 0
                    pairs = self._pairs(self._pass_start)
                    continue
                end, mine = pairs.position(), self._batches(kept, epoch, buffer)
                if end["row"] - start["row"] == self.buffer_pairs:
                    self._check_buffer_size(kept)
                for index in range(taken, len(mine)):
                    if index + 1 < len(mine):
                        self._position = {"epoch": epoch, "buffer": buffer, "start": start, "taken": index + 1}
                        self._position.update(report=before, pass_batches=pass_batches)
                    else:  # the buffer's last: the position is the next buffer's start, which saves re-reading this
                        self._position = {"epoch": epoch, "buffer": buffer + 1, "start": end, "taken": 0}
                        self._position.update(report=asdict(report), pass_batches=pass_batches + len(mine))
                    self.epoch = epoch
                    yield kept.examples(mine[index])
                buffer, taken, pass_batches = buffer + 1, 0, pass_batches + len(mine)
        finally:
            pairs.close()

    def _read_buffer(self, pairs: Iterator[tuple[str, str]], report: StreamReport) -> _Buffer | None:
        """The next `buffer_pairs` pairs tokenized, the dropped ones counted in `report`; None at the stream's end."""
        first_row = pairs.position()["row"]
        pieces, read = [], 0
        while read < self.buffer_pairs:
            chunk = list(islice(pairs, min(TOKENIZE_PAIRS, self.buffer_pairs - read)))
            if not chunk:
                break
            pieces.append(self._encode(chunk, first_row + read, report))
            read += len(chunk)
        if not read:
            return None
        sides = []
        for side in (0, 1):
            ids = np.concatenate([piece[side][0] for piece in pieces])
            lengths = np.concatenate([piece[side][1] for piece in pieces])
            sides += [ids, np.concatenate([[0], np.cumsum(lengths)])]
        return _Buffer(*sides)

    def _check_buffer_size(self, kept: _Buffer) -> None:
        """Warn (once) of a full buffer that holds fewer tokens than one batch: every batch is then the whole buffer,
        a fraction of `max_tokens` (a buffer of one pair makes an update of one pair)."""
        tokens = int(kept.source_bounds[-1] + kept.target_bounds[-1])
        if tokens < self.max_tokens and not self._warned_small_buffer:
            self._warned_small_buffer = True
            per_pair = tokens / max(len(kept.source_bounds) - 1, 1)
            logger.warning(
                "a stream buffer of %d pairs holds %d tokens, less than one batch of max_tokens=%d: every batch is "
                "the whole buffer; raise --stream-buffer-pairs to %d or more (a hundred batches' worth), or leave it "
                "out (%s)",
                self.buffer_pairs,
                tokens,
                self.max_tokens,
                math.ceil(100 * self.max_tokens / max(per_pair, 1)),
                f"{DEFAULT_BUFFER_PAIRS:,}",
            )

    def _encode(self, chunk: list[tuple[str, str]], first_row: int, report: StreamReport) -> tuple:
        """The ids and lengths of a chunk's kept pairs, each side's ids end to end: `((ids, lengths), (ids,
        lengths))`; drops are counted in `report` at their row."""
        kept = ([], [])
        sources, targets = (list(side) for side in zip(*chunk, strict=True))
        pairs = encode_pairs(self.tokenizer, sources, targets, self.max_length)
        for row, (status, source_ids, target_ids, not_text) in enumerate(pairs, start=first_row):
            if status != KEPT:
                report.count("empty" if status == EMPTY else "too_long", row)
                continue
            report.kept += 1
            kept[0].append(source_ids)
            kept[1].append(target_ids)
            if not_text:
                report.count("not_text", row)
        return tuple(
            (
                np.fromiter(chain.from_iterable(side), dtype=self.id_type, count=sum(map(len, side))),
                np.fromiter(map(len, side), dtype=np.int64, count=len(side)),
            )
            for side in kept
        )

    def _batches(self, kept: _Buffer, epoch: int, buffer: int) -> list[np.ndarray]:
        """This process's batches of a buffer (pair indices into `kept`): cut by length, shuffled, every
        `world_size`-th from `rank`; the tie-breaking and the shuffle are seeded from `(seed, epoch, buffer)`."""
        ties, shuffle = np.random.SeedSequence([self.seed, epoch, buffer]).generate_state(2)
        source_lengths, target_lengths = np.diff(kept.source_bounds), np.diff(kept.target_bounds)
        order, bounds = length_sorted_batches(source_lengths, target_lengths, self.max_tokens, int(ties))
        count = max(len(bounds) - 1, 0)
        batches = np.random.default_rng(int(shuffle)).permutation(count)[self.rank :: self.world_size]
        return [order[bounds[b] : bounds[b + 1]] for b in batches.tolist()]

    def _end_pass(self, epoch: int, report: StreamReport, pass_batches: int) -> None:
        """Log a finished pass's report; a pass that gave this process no batch would repeat forever, so it raises."""
        if not report.kept:
            raise DataError(
                f"{self.corpus_name} ({self.settings['split']}) has no usable pair: {report} "
                f"(max_length={self.max_length}); check the files, the languages and --max-length."
            )
        if not pass_batches:
            raise DataError(
                f"{self.corpus_name}: a whole pass gave rank {self.rank} of {self.world_size} no batch ({report}; each "
                f"buffer of {self.buffer_pairs} pairs makes fewer batches than there are processes): lower "
                f"--max-tokens, raise buffer_pairs or use fewer processes."
            )
        log = logger.warning if report.not_text else logger.info
        log("%s, epoch %d: %s; %d batches for rank %d", self.corpus_name, epoch, report, pass_batches, self.rank)


def _json_copy(value):
    """A deep copy of `value` as a JSON round trip leaves it (tuples become lists)."""
    return json.loads(json.dumps(value, default=str))
