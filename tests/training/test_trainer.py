"""`VanillaTransformerTrainer` (token-budget batches, resume, crash-safe checkpoints, evaluation) and the §5.3
schedule and §5.4 loss it trains with."""

import logging
import math
import os
import time

import pytest
import torch
import torch.nn.functional as F
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainingArguments

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.data.corpora import load_builtin
from vanilla_transformer.data.tokenized import tokenize_pairs
from vanilla_transformer.training.checkpoints import list_checkpoints
from vanilla_transformer.training.optimization import (
    label_smoothed_loss,
    paper_learning_rate,
    paper_schedule,
    peak_learning_rate,
)
from vanilla_transformer.training.presets import get_training_preset
from vanilla_transformer.training.run import train
from vanilla_transformer.training.settings import TrainingSettings
from vanilla_transformer.training.trainer import VanillaTransformerTrainer


def test_schedule_follows_the_formula():
    d_model, warmup = 512, 4000
    # the paper's numbers: peak d^-0.5·warmup^-0.5 ≈ 7.0e-4 at step 4000
    assert peak_learning_rate(d_model, warmup) == pytest.approx(6.988e-4, rel=1e-3)
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=peak_learning_rate(d_model, warmup))
    scheduler = paper_schedule(optimizer, warmup)
    used = []
    for _ in range(12000):
        used.append(optimizer.param_groups[0]["lr"])  # the rate of the next update
        optimizer.step()
        scheduler.step()
    for step in (1, 2, 100, 3999, 4000, 4001, 8000, 12000):
        expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert used[step - 1] == pytest.approx(expected, rel=1e-9)
        assert paper_learning_rate(step, d_model, warmup) == pytest.approx(expected, rel=1e-12)
    assert max(used) == used[warmup - 1]


def test_label_smoothed_loss_matches_cross_entropy():
    logits = torch.randn(2, 5, 11)
    labels = torch.randint(0, 11, (2, 5))
    labels[1, 3:] = -100
    loss = label_smoothed_loss(0.1)({"logits": logits}, labels)
    expected = F.cross_entropy(logits.reshape(-1, 11), labels.reshape(-1), label_smoothing=0.1, ignore_index=-100)
    assert loss == pytest.approx(expected.item(), rel=1e-6)
    # divided by the tokens of the whole accumulated batch when the Trainer passes them
    assert label_smoothed_loss(0.1)({"logits": logits}, labels, num_items_in_batch=16) == pytest.approx(
        expected.item() * 8 / 16, rel=1e-6
    )


@pytest.fixture(scope="module")
def pairs(builtin_tokenizer):
    corpus = load_builtin("train").select(range(48))
    dataset, _ = tokenize_pairs(corpus, builtin_tokenizer, "en", "de", max_length=64)
    return dataset


def make_trainer(tokenizer, dataset, output_dir, *, max_tokens, accumulation=1, max_steps=1, optim="sgd", **args):
    torch.manual_seed(0)
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, dropout=0.0, max_position_embeddings=128,
    )  # fmt: skip
    model = VanillaTransformerForConditionalGeneration(config)
    arguments = Seq2SeqTrainingArguments(
        output_dir=str(output_dir),
        max_steps=max_steps,
        gradient_accumulation_steps=accumulation,
        learning_rate=0.5,
        optim=optim,
        weight_decay=0.0,
        max_grad_norm=0.0,
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        **{"save_strategy": "no", "logging_strategy": "no", **args},
    )
    return VanillaTransformerTrainer(
        model=model,
        args=arguments,
        train_dataset=dataset,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        compute_loss_func=label_smoothed_loss(0.1),
        max_tokens=max_tokens,
        warmup_steps=1,
    )


def test_gradient_accumulation_gives_the_large_batch_update(builtin_tokenizer, pairs, tmp_path):
    dataset = pairs.select(range(8))
    lengths = [len(a) + len(b) for a, b in zip(dataset["input_ids"], dataset["labels"], strict=True)]
    whole = make_trainer(builtin_tokenizer, dataset, tmp_path / "a", max_tokens=8 * max(lengths))
    split = make_trainer(builtin_tokenizer, dataset, tmp_path / "b", max_tokens=4 * max(lengths) + 1, accumulation=2)
    assert len(whole.train_batch_sampler()) == 1 and len(split.train_batch_sampler()) == 2
    before = [p.detach().clone() for p in whole.model.parameters()]
    whole.train()
    split.train()
    # plain SGD: a loss scaled wrongly under accumulation would scale the update (Adam's first step would hide it)
    moved = 0.0
    for start, a, b in zip(before, whole.model.parameters(), split.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
        moved = max(moved, (a - start).abs().max().item())
    assert moved > 1e-3


def test_resume_reproduces_the_uninterrupted_run(builtin_tokenizer, pairs, tmp_path):
    budget = 400
    save = {"save_strategy": "steps", "save_steps": 3}
    straight = make_trainer(builtin_tokenizer, pairs, tmp_path / "straight", max_tokens=budget, max_steps=6,
                            optim="adamw_torch", **save)  # fmt: skip
    # the interruption falls inside the first epoch, and the run crosses into the second
    assert 3 < len(straight.train_batch_sampler()) < 6
    straight.train()
    interrupted = make_trainer(builtin_tokenizer, pairs, tmp_path / "resumed", max_tokens=budget, max_steps=3,
                               optim="adamw_torch", **save)  # fmt: skip
    interrupted.train()
    resumed = make_trainer(builtin_tokenizer, pairs, tmp_path / "resumed", max_tokens=budget, max_steps=6,
                           optim="adamw_torch", **save)  # fmt: skip
    warnings = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("transformers.trainer").addHandler(handler)
    try:
        resumed.train(resume_from_checkpoint=str(tmp_path / "resumed" / "checkpoint-3"))
    finally:
        logging.getLogger("transformers.trainer").removeHandler(handler)
    # the tied embeddings, stored once, are not reported missing
    assert not [message for message in warnings if "keys in the checkpoint" in message], warnings
    for a, b in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert resumed.state.global_step == 6
    assert math.isclose(resumed.lr_scheduler.get_last_lr()[0], straight.lr_scheduler.get_last_lr()[0])


def test_rotation_after_a_killed_rotation_keeps_the_newest_steps(builtin_tokenizer, pairs, tmp_path):
    save = {"save_strategy": "steps", "save_steps": 1}
    make_trainer(builtin_tokenizer, pairs, tmp_path, max_tokens=400, max_steps=3, save_total_limit=3, **save).train()
    # a kill in the middle of rotation's rmtree of checkpoint-1: part of its files gone, its folder modified after
    # checkpoint-3 was saved (the times of a real run, seconds apart)
    (tmp_path / "checkpoint-1" / "trainer_state.json").unlink()
    now = time.time()
    for step, age in ((1, 5), (2, 20), (3, 10)):
        os.utime(tmp_path / f"checkpoint-{step}", (now - age, now - age))
    resumed = make_trainer(builtin_tokenizer, pairs, tmp_path, max_tokens=400, max_steps=4, save_total_limit=2, **save)
    resumed.train(resume_from_checkpoint=True)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-3", "checkpoint-4"]


def test_evaluation_leaves_the_papers_generation_config_alone(builtin_tokenizer, pairs, tmp_path):
    trainer = make_trainer(builtin_tokenizer, pairs.select(range(8)), tmp_path, max_tokens=400,
                           predict_with_generate=True, generation_max_length=40)  # fmt: skip
    trainer.compute_metrics = lambda prediction: {"rows": len(prediction.predictions)}  # makes it generate
    before = trainer.model.generation_config.to_dict()
    metrics = trainer.evaluate(eval_dataset=pairs.select(range(8)))
    assert metrics["eval_rows"] == 8
    assert trainer.model.generation_config.to_dict() == before
    assert trainer.model.generation_config.max_length is None  # a saved max_length=20 would cut translations


def test_a_finished_run_started_again_trains_no_further(tmp_path):
    preset = get_training_preset("demo", max_steps=4, save_steps=2, eval_steps=4, average_last=2, max_length=16)
    options = {"eval_samples": 4, "report_to": "none", "progress": False, "threads": 1}
    train(TrainingSettings(preset, tmp_path, **options))
    before = (tmp_path / "final" / "model.safetensors").read_bytes()
    run = train(
        TrainingSettings(preset, tmp_path, **options)
    )  # transformers' loop alone would take a fifth step and save it
    assert [path.name for path in list_checkpoints(tmp_path)] == ["checkpoint-2", "checkpoint-4"]
    assert (tmp_path / "final" / "model.safetensors").read_bytes() == before
    assert run.log_history and run.train_seconds == 0.0
