import random

import pytest
import torch
from conftest import VOCAB, tiny_model

from vanilla_transformer.data.batching import Seq2SeqCollator, TokenBudgetBatchSampler, accumulation_steps


def lengths(n: int = 500, seed: int = 0) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    sources = [rng.randint(3, 40) for _ in range(n)]
    return sources, [max(2, s + rng.randint(-5, 8)) for s in sources]


def test_no_batch_over_budget_and_every_pair_once():
    sources, targets = lengths()
    sampler = TokenBudgetBatchSampler(sources, targets, max_tokens=600)
    batches = list(sampler)
    for batch in batches:
        assert len(batch) * (max(sources[i] for i in batch) + max(targets[i] for i in batch)) <= 600
    assert sorted(i for batch in batches for i in batch) == list(range(len(sources)))
    # length sorting keeps padding small, and the sampler reports it
    assert 0 < sampler.padding_share() < 0.15
    assert sampler.tokens_per_batch() == pytest.approx((sum(sources) + sum(targets)) / len(batches))


def test_order_depends_only_on_seed_and_epoch():
    sources, targets = lengths()
    first, second = (TokenBudgetBatchSampler(sources, targets, 600, seed=3) for _ in range(2))
    first.set_epoch(1)
    second.set_epoch(1)
    assert list(first) == list(second)
    second.set_epoch(2)
    assert list(first) != list(second)


def test_pair_longer_than_budget_is_an_error():
    with pytest.raises(ValueError, match="smaller than the longest training pair"):
        TokenBudgetBatchSampler([10, 50], [10, 60], max_tokens=100)


def test_accumulation_steps_reach_the_tokens_per_update():
    assert accumulation_steps(50000, 6000) == 8
    assert accumulation_steps(None, 6000) == 1
    assert accumulation_steps(4096, 3900) == 1


def test_the_collator_refuses_token_ids_outside_the_model_s_vocabularies(builtin_tokenizer):
    model = tiny_model(share_encoder_decoder_embeddings=False, decoder_vocab_size=40)
    collate = Seq2SeqCollator(builtin_tokenizer, model=model, label_pad_token_id=-100)
    batch = collate([{"input_ids": [5, 63, 2], "labels": [39, 2]}, {"input_ids": [6, 2], "labels": [7, 8, 2]}])
    assert batch["labels"].tolist() == [[39, 2, -100], [7, 8, 2]]  # padded with -100, which is no token id
    assert batch["decoder_input_ids"].shape == (2, 3) and (batch["input_ids"] < VOCAB).all()
    with pytest.raises(ValueError, match=r"input_ids contains token id 64 \(largest 64, smallest 2\) but vocab_size"):
        collate([{"input_ids": [5, 64, 2], "labels": [7, 2]}])
    with pytest.raises(ValueError, match=r"labels contains token id 40 .* is 40: ids must lie in \[0, 39\] or -100"):
        collate([{"input_ids": [5, 2], "labels": [40, 2]}])
    with pytest.raises(ValueError, match=r"labels contains token id -3 "):
        collate([{"input_ids": [5, 2], "labels": [-3, 2]}])
    assert torch.equal(collate([{"input_ids": [5, 2], "labels": [7, 2]}])["input_ids"], torch.tensor([[5, 2]]))
