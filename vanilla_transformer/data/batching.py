"""Token-based batching (§5.1: "sentence pairs were batched together by approximate sequence length. Each training
batch contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target tokens")."""

import random
from collections.abc import Iterator, Sequence

from torch.utils.data import Sampler


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Batches of dataset indices whose *padded* size, `batch_size·max(source lengths) + batch_size·max(target
    lengths)`, stays within `max_tokens`.

    Pairs are sorted by source then target length (ties broken at random from `seed`), cut into
    batches greedily, and the batches are shuffled once per epoch with `seed + epoch`: the order depends only on
    `(seed, epoch)`, which makes resuming mid-epoch reproduce the uninterrupted run.
    """

    def __init__(
        self,
        source_lengths: Sequence[int],
        target_lengths: Sequence[int],
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
    ):
        if len(source_lengths) != len(target_lengths):
            raise ValueError(f"{len(source_lengths)} source lengths but {len(target_lengths)} target lengths.")
        longest = max((s + t for s, t in zip(source_lengths, target_lengths, strict=True)), default=0)
        if longest > max_tokens:
            raise ValueError(
                f"max_tokens={max_tokens} is smaller than the longest pair ({longest} source+target tokens); raise "
                f"--max-tokens or filter long pairs with --max-length."
            )
        self.source_lengths = list(source_lengths)
        self.target_lengths = list(target_lengths)
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.batches = self._make_batches()

    @classmethod
    def for_dataset(cls, dataset, max_tokens: int, seed: int = 0) -> "TokenBudgetBatchSampler":
        """The sampler of a tokenized dataset (`input_ids` and `labels` columns)."""
        return cls(
            [len(ids) for ids in dataset["input_ids"]], [len(ids) for ids in dataset["labels"]], max_tokens, seed=seed
        )

    def _make_batches(self) -> list[list[int]]:
        noise = random.Random(self.seed)
        order = sorted(
            range(len(self.source_lengths)),
            key=lambda i: (self.source_lengths[i], self.target_lengths[i], noise.random()),
        )
        batches, batch, longest_source, longest_target = [], [], 0, 0
        for index in order:
            source, target = (
                max(longest_source, self.source_lengths[index]),
                max(longest_target, self.target_lengths[index]),
            )
            if batch and (len(batch) + 1) * (source + target) > self.max_tokens:
                batches.append(batch)
                batch, source, target = [], self.source_lengths[index], self.target_lengths[index]
            batch.append(index)
            longest_source, longest_target = source, target
        if batch:
            batches.append(batch)
        return batches

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        batches = list(self.batches)
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(batches)
        return iter(batches)

    def __len__(self) -> int:
        return len(self.batches)

    def padding_share(self) -> float:
        """Padding tokens / all tokens in the padded batches."""
        real = padded = 0
        for batch in self.batches:
            sources = [self.source_lengths[i] for i in batch]
            targets = [self.target_lengths[i] for i in batch]
            real += sum(sources) + sum(targets)
            padded += len(batch) * (max(sources) + max(targets))
        return 1 - real / padded if padded else 0.0

    def tokens_per_batch(self) -> float:
        """Mean real (unpadded) source+target tokens per batch."""
        return (sum(self.source_lengths) + sum(self.target_lengths)) / max(len(self.batches), 1)


def accumulation_steps(tokens_per_update: int | None, tokens_per_batch: float) -> int:
    """Gradient accumulation steps for about `tokens_per_update` source+target tokens per optimizer update."""
    if not tokens_per_update:
        return 1
    return max(1, round(tokens_per_update / tokens_per_batch))
