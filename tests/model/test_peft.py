"""PEFT LoRA on the model: adapters on every projection of the three attentions and of the feed-forward networks,
trained by their gradients, used by `forward` and by `generate` (greedy and the paper's beam search), saved as
safetensors, reloaded and merged exactly."""

import copy

import pytest
import torch
from conftest import BOS, EOS, VOCAB, random_batch, tiny_model
from peft import LoraConfig, PeftModel, get_peft_model  # the `test` extra installs peft
from peft.tuners.lora import LoraLayer
from safetensors.torch import load_file
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

from vanilla_transformer import VanillaTransformerForConditionalGeneration

# peft (0.21) reads `model.is_gradient_checkpointing`, which transformers 5.24 deprecated: not this package's warning
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

TARGETS = ["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"]
ATTENTION = ["q_proj", "k_proj", "v_proj", "out_proj"]


def lora_config(**overrides) -> LoraConfig:
    values = {"target_modules": TARGETS, "r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "task_type": "SEQ_2_SEQ_LM"}
    values.update(overrides)
    return LoraConfig(**values)


def expected_lora_modules(config) -> set[str]:
    """The names (relative to the transformers model) of the 32 linear layers of the tiny model that take LoRA."""
    names = set()
    for i in range(config.encoder_layers):
        names |= {f"model.encoder.layers.{i}.self_attn.{p}" for p in ATTENTION}
        names |= {f"model.encoder.layers.{i}.ffn.{p}" for p in ("fc1", "fc2")}
    for i in range(config.decoder_layers):
        names |= {f"model.decoder.layers.{i}.{a}.{p}" for a in ("self_attn", "encoder_attn") for p in ATTENTION}
        names |= {f"model.decoder.layers.{i}.ffn.{p}" for p in ("fc1", "fc2")}
    return names


def lora_parameters(peft_model) -> dict[str, torch.nn.Parameter]:
    return {name: p for name, p in peft_model.named_parameters() if "lora_A" in name or "lora_B" in name}


def randomize_lora_b(peft_model, std: float, seed: int = 0) -> None:
    """LoRA starts with B = 0 (the adapted model is the base model); give every B random values."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in lora_parameters(peft_model).items():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * std)


def logits(model, batch: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).logits


def with_labels(batch: dict) -> dict:
    labels = torch.cat([batch["decoder_input_ids"][:, 1:], torch.full_like(batch["decoder_input_ids"][:, :1], EOS)], 1)
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], "labels": labels}


@pytest.fixture
def base() -> VanillaTransformerForConditionalGeneration:
    return tiny_model(seed=0)


@pytest.fixture
def adapted(base):
    """(base model untouched, LoRA model built on a copy of it)."""
    return base, get_peft_model(copy.deepcopy(base), lora_config())


# --- where the adapters sit, and what trains --------------------------------------------------------------------


def test_adapters_wrap_every_projection_of_all_three_attentions_and_the_ffn(adapted):
    base, peft_model = adapted
    wrapped = {
        name.removeprefix("base_model.model.")
        for name, module in peft_model.named_modules()
        if isinstance(module, LoraLayer)
    }
    assert wrapped == expected_lora_modules(base.config)
    assert len(wrapped) == 2 * (4 + 2) + 2 * (8 + 2) == 32
    params = lora_parameters(peft_model)
    assert len(params) == 64
    assert sum("lora_A" in n for n in params) == sum("lora_B" in n for n in params) == 32
    trainable = {name for name, p in peft_model.named_parameters() if p.requires_grad}
    assert trainable == set(params)  # embeddings, lm_head, layer norms and base linears are frozen
    assert not isinstance(peft_model.base_model.model.lm_head, LoraLayer)
    # the tied output projection is still the embedding matrix
    inner = peft_model.get_base_model()
    assert inner.lm_head.weight is inner.model.shared.weight


@pytest.mark.parametrize("checkpointing", [False, True])
def test_every_lora_parameter_gets_a_gradient_and_the_base_none(adapted, checkpointing):
    _, peft_model = adapted
    if checkpointing:  # reentrant checkpointing with frozen embeddings is where adapters classically get no gradient
        inner = peft_model.get_base_model()  # transformers 5.24 renamed gradient to activation checkpointing
        enable = getattr(inner, "activation_checkpointing_enable", None) or inner.gradient_checkpointing_enable
        enable({"use_reentrant": True})  # the kwargs of torch.utils.checkpoint, under either name
        assert all(layer.gradient_checkpointing for layer in inner.model.encoder.layers)
    peft_model.train()
    batch = with_labels(random_batch())
    params = lora_parameters(peft_model)

    # first step of a fresh adapter: B = 0, so B gets the whole gradient and A none
    peft_model(**batch).loss.backward()
    for name, p in params.items():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        if "lora_B" in name:
            assert p.grad.abs().sum() > 0, name
        else:
            assert p.grad.abs().sum() == 0, name
    for name, p in peft_model.named_parameters():
        if name not in params:
            assert not p.requires_grad and p.grad is None, name

    # with B != 0 both factors of every adapter learn
    peft_model.zero_grad(set_to_none=True)
    randomize_lora_b(peft_model, std=0.02)
    loss = peft_model(**batch).loss
    assert torch.isfinite(loss)
    loss.backward()
    for name, p in params.items():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name
    for name, p in peft_model.named_parameters():
        if name not in params:
            assert p.grad is None, name


# --- the adapters take part in forward -----------------------------------------------------------------------------


@pytest.mark.parametrize("training", [True, False])
def test_adapters_change_the_logits_only_when_nonzero(adapted, training):
    base, peft_model = adapted
    base.train(training)
    peft_model.train(training)
    batch = random_batch()
    reference = logits(base, batch)
    assert (logits(peft_model, batch) - reference).abs().max() <= 1e-6  # B = 0: the base model exactly

    randomize_lora_b(peft_model, std=0.05)
    changed = logits(peft_model, batch)
    assert (changed - reference).abs().max() > 1e-4
    with peft_model.disable_adapter():
        assert (logits(peft_model, batch) - reference).abs().max() <= 1e-6
    # the cross-attention adapters alone change the output too (they are not bypassed by a cached projection)
    with torch.no_grad():
        for name, p in lora_parameters(peft_model).items():
            if "lora_B" in name and ".encoder_attn." not in name:
                p.zero_()
    assert (logits(peft_model, batch) - reference).abs().max() > 1e-4


# --- training with Seq2SeqTrainer ---------------------------------------------------------------------------------


def copy_task(num_pairs: int = 32, length: int = 6, seed: int = 0) -> list[dict]:
    """Copy the source: targets are the source ids followed by EOS."""
    generator = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(num_pairs):
        ids = torch.randint(3, VOCAB, (length,), generator=generator).tolist()
        pairs.append({"input_ids": ids, "labels": [*ids, EOS]})
    return pairs


def collate(features: list[dict]) -> dict:
    input_ids = torch.tensor([f["input_ids"] for f in features])
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "labels": torch.tensor([f["labels"] for f in features]),
    }


def test_seq2seq_trainer_lowers_the_loss_of_a_lora_model(adapted, tmp_path):
    base, peft_model = adapted
    frozen = {name: p.detach().clone() for name, p in base.named_parameters()}
    arguments = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        max_steps=30,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        logging_steps=5,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Seq2SeqTrainer(model=peft_model, args=arguments, train_dataset=copy_task(), data_collator=collate)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 6, trainer.state.log_history
    assert losses[-1] < 0.9 * losses[0], losses
    # only the adapters moved
    inner = peft_model.get_base_model()
    for name, module in inner.named_modules():
        if isinstance(module, LoraLayer):
            torch.testing.assert_close(module.base_layer.weight, frozen[f"{name}.weight"], rtol=0, atol=0)
    torch.testing.assert_close(inner.model.shared.weight, frozen["model.shared.weight"], rtol=0, atol=0)
    assert any(p.abs().sum() > 0 for n, p in lora_parameters(peft_model).items() if "lora_B" in n)


# --- saving, loading, merging -------------------------------------------------------------------------------------


def test_adapter_saves_as_safetensors_and_reloads_exactly(base, tmp_path):
    base.save_pretrained(tmp_path / "base")
    peft_model = get_peft_model(base, lora_config())
    randomize_lora_b(peft_model, std=0.05)
    peft_model.eval()
    peft_model.save_pretrained(tmp_path / "adapter")

    files = {p.name for p in (tmp_path / "adapter").iterdir()}
    assert "adapter_model.safetensors" in files and "adapter_config.json" in files, files
    assert not any(name.endswith((".bin", ".pt", ".pth")) for name in files), files
    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert len(saved) == 64 and all("lora_A" in k or "lora_B" in k for k in saved), sorted(saved)

    fresh = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path / "base")
    reloaded = PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    batch = random_batch()
    expected = logits(peft_model, batch)
    assert (logits(reloaded, batch) - expected).abs().max() <= 1e-6
    with reloaded.disable_adapter():
        assert (logits(reloaded, batch) - expected).abs().max() > 1e-4  # the reload did restore non-zero adapters


def test_merge_and_unload_equals_the_adapted_model(adapted):
    base, peft_model = adapted
    randomize_lora_b(peft_model, std=0.05)
    peft_model.eval()
    batch = random_batch()
    expected = logits(peft_model, batch)
    merged = copy.deepcopy(peft_model).merge_and_unload()
    assert type(merged) is VanillaTransformerForConditionalGeneration
    assert not any(isinstance(m, LoraLayer) for m in merged.modules())
    assert (logits(merged, batch) - expected).abs().max() <= 1e-5
    assert (logits(merged, batch) - logits(base, batch)).abs().max() > 1e-4


# --- generate ---------------------------------------------------------------------------------------------------


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generate_uses_the_adapters(adapted, num_beams, monkeypatch):
    base, peft_model = adapted
    paper_searches = []
    paper_beam_search = VanillaTransformerForConditionalGeneration._paper_beam_search

    def counting(self, *args, **kwargs):
        paper_searches.append(self)
        return paper_beam_search(self, *args, **kwargs)

    monkeypatch.setattr(VanillaTransformerForConditionalGeneration, "_paper_beam_search", counting)
    randomize_lora_b(peft_model, std=1.0)
    peft_model.eval()
    merged = copy.deepcopy(peft_model).merge_and_unload().eval()
    batch = random_batch(batch_size=4, src_len=9)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    kwargs = {"num_beams": num_beams, "max_new_tokens": 8}
    assert peft_model.generation_config.length_penalty_form == "gnmt"  # num_beams=4: the paper's beam search

    from_base = base.generate(**inputs, **kwargs)
    from_adapted = peft_model.generate(**inputs, **kwargs)
    from_merged = merged.generate(**inputs, **kwargs)
    with peft_model.disable_adapter():
        from_disabled = peft_model.generate(**inputs, **kwargs)

    # beam 4 ran the paper's beam search every time (not transformers' fallback), on the adapted model too
    assert len(paper_searches) == (4 if num_beams == 4 else 0)
    assert from_adapted[:, 0].eq(BOS).all()
    assert from_adapted.shape[1] <= 1 + 8
    assert not same(from_adapted, from_base), (from_adapted, from_base)
    assert same(from_adapted, from_merged), (from_adapted, from_merged)
    assert same(from_disabled, from_base), (from_disabled, from_base)


def test_adapters_fit_projections_whose_d_k_and_d_v_are_their_own():
    # Table 3, row (B): q_proj/k_proj map d_model to h·d_k, v_proj to h·d_v, out_proj h·d_v back to d_model
    base = tiny_model(seed=0, qk_head_dim=5, v_head_dim=11)
    peft_model = get_peft_model(copy.deepcopy(base), lora_config())
    randomize_lora_b(peft_model, std=0.05)
    batch = random_batch()
    peft_model(**with_labels(batch)).loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora_parameters(peft_model).values())
    peft_model.eval()
    merged = copy.deepcopy(peft_model).merge_and_unload()
    assert (logits(merged, batch) - logits(peft_model, batch)).abs().max() <= 1e-5
    assert (logits(merged, batch) - logits(base, batch)).abs().max() > 1e-4
