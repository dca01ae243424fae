"""Token-based batching (§5.1: "sentence pairs were batched together by approximate sequence length. Each training
batch contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target tokens"), over
numpy arrays, so that a sampler over WMT14's 4.5M pairs costs tens of megabytes, not a Python list per sentence."""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc
from torch.utils.data import Sampler
from transformers import DataCollatorForSeq2Seq

from ..errors import DataError
from ..model.generation_vanilla_transformer import check_token_ids

# the columns `data.tokenized` writes beside the token ids
SOURCE_LENGTH, TARGET_LENGTH = "source_length", "target_length"


def longest_pair_problem(longest: int, max_tokens: int) -> str | None:
    """Why a corpus whose longest pair has `longest` source+target tokens fits no batch of `max_tokens` padded
    tokens (None when it fits). Pairs of at most max_tokens // 2 tokens a side fit a batch of one."""
    if longest <= max_tokens:
        return None
    shorter = f", or --max-length {max_tokens // 2} to drop longer pairs" if max_tokens > 1 else ""
    return (
        f"--max-tokens {max_tokens} is smaller than the longest training pair ({longest} source+target tokens), "
        f"which would fit no batch; give --max-tokens {longest} or more{shorter}."
    )


def length_sorted_batches(
    source_lengths: np.ndarray, target_lengths: np.ndarray, max_tokens: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """`(order, bounds)`: the pair indices sorted by source then target length, ties broken at random from `seed`,
    and batch `b` as `order[bounds[b]:bounds[b + 1]]`, cut greedily so that each one's *padded* size,
    `len(batch)·(max(source) + max(target))`, stays within `max_tokens`; a longer pair raises an error."""
    if source_lengths.shape != target_lengths.shape:
        raise DataError(f"{len(source_lengths)} source lengths but {len(target_lengths)} target lengths.")
    longest = int((source_lengths.astype(np.int64) + target_lengths).max(initial=0))
    if problem := longest_pair_problem(longest, max_tokens):
        raise DataError(problem)
    # a seeded shuffle, then two stable sorts (radix sorts on 16-bit keys): the same order on every machine
    order = np.random.default_rng(seed).permutation(len(source_lengths)).astype(np.int32)
    key = np.uint32 if longest >= 1 << 16 else np.uint16
    for lengths in (target_lengths, source_lengths):
        order = order[np.argsort(lengths[order].astype(key), kind="stable")]
    # one step per batch, not per pair: sorted by source length, a batch's longest source is its last pair's, and
    # both that and its running longest target only grow with the batch, so its padded size does too
    sources, targets = source_lengths[order], target_lengths[order]
    bounds, start = [0], 0
    while start < len(order):
        # no batch holds more pairs than fit at its first pair's width
        stop = min(len(order), start + max_tokens // max(int(sources[start] + targets[start]), 1))
        widths = sources[start:stop] + np.maximum.accumulate(targets[start:stop])
        fits = np.arange(1, stop - start + 1) * widths <= max_tokens
        start += int(fits.argmin()) if not fits.all() else stop - start
        bounds.append(start)
    return order, np.asarray(bounds if len(order) else [], dtype=np.int64)


def dataset_lengths(dataset) -> tuple[np.ndarray, np.ndarray]:
    """The source and target lengths of a tokenized dataset (its length columns, else its `input_ids` and `labels`
    lists), read from the Arrow table without turning a row into Python objects."""
    has_lengths = {SOURCE_LENGTH, TARGET_LENGTH} <= set(dataset.column_names)
    names = [SOURCE_LENGTH, TARGET_LENGTH] if has_lengths else ["input_ids", "labels"]
    # through an indices mapping (a `select`), only these two columns are taken, not the token ids beside them
    table = (
        dataset.select_columns(names).with_format("arrow")[:] if dataset._indices is not None else dataset.data.table
    )
    columns = [table.column(name) if has_lengths else pc.list_value_length(table.column(name)) for name in names]
    return tuple(np.asarray(column.to_numpy(), dtype=np.int32) for column in columns)


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Batches of dataset indices whose padded size stays within `max_tokens` (`length_sorted_batches`), shuffled
    each epoch with `seed + epoch`, so that resuming mid-epoch reproduces the uninterrupted run."""

    def __init__(self, source_lengths: Sequence[int], target_lengths: Sequence[int], max_tokens: int, seed: int = 0):
        # 32-bit lengths and indices: a sampler over WMT14's 4.5M pairs holds ~80 MB at its peak, not ~350
        self.source_lengths = np.asarray(source_lengths, dtype=np.int32)
        self.target_lengths = np.asarray(target_lengths, dtype=np.int32)
        self.order, self.bounds = length_sorted_batches(self.source_lengths, self.target_lengths, max_tokens, seed)
        self.seed, self.epoch = seed, 0

    @classmethod
    def for_dataset(cls, dataset, max_tokens: int, seed: int = 0) -> "TokenBudgetBatchSampler":
        return cls(*dataset_lengths(dataset), max_tokens, seed=seed)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        for batch in np.random.default_rng(self.seed + self.epoch).permutation(len(self)).tolist():
            yield self.order[self.bounds[batch] : self.bounds[batch + 1]].tolist()

    def __len__(self) -> int:
        return max(len(self.bounds) - 1, 0)

    def padding_share(self) -> float:
        """Padding tokens / all tokens in the padded batches."""
        if not len(self):
            return 0.0
        starts = self.bounds[:-1]
        sources, targets = self.source_lengths[self.order], self.target_lengths[self.order]
        widths = np.maximum.reduceat(sources, starts) + np.maximum.reduceat(targets, starts)
        padded = int((widths * np.diff(self.bounds)).sum())
        return 1 - int(sources.sum() + targets.sum()) / padded

    def tokens_per_batch(self) -> float:
        """Mean real (unpadded) source+target tokens per batch."""
        return int(self.source_lengths.sum() + self.target_lengths.sum()) / max(len(self), 1)


def accumulation_steps(tokens_per_update: int | None, tokens_per_batch: float) -> int:
    """Gradient accumulation steps for about `tokens_per_update` source+target tokens per optimizer update."""
    return max(1, round(tokens_per_update / tokens_per_batch)) if tokens_per_update else 1


@dataclass
class Seq2SeqCollator(DataCollatorForSeq2Seq):
    """transformers' `DataCollatorForSeq2Seq` (with `model` required) that also refuses token ids outside the model's
    vocabularies, on the host, since a check in the model's forward would make a GPU wait in every step."""

    def __call__(self, features: list[dict], return_tensors: str | None = None) -> dict:
        batch = super().__call__(features, return_tensors)
        config = self.model.config
        check_token_ids(batch["input_ids"], config.vocab_size, "input_ids")
        if "labels" in batch:
            check_token_ids(batch["labels"], config.decoder_vocab_size, "labels", ignore_index=self.label_pad_token_id)
        return batch
