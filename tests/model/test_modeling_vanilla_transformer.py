import copy
import json
import math
import os
import warnings
from pathlib import Path

import pytest
import torch
from conftest import BOS, EOS, PAD, VOCAB, random_batch, tiny_config, tiny_model
from safetensors import safe_open
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModel, AutoModelForSeq2SeqLM, DataCollatorForSeq2Seq
from transformers.cache_utils import EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
    sinusoidal_position_encoding,
)
from vanilla_transformer.model.generation_vanilla_transformer import CACHE_OUTPUT_NAME
from vanilla_transformer.release.folder_checks import CODE_FILES
from vanilla_transformer.release.remote_code import generate_without_package

ROOT = Path(__file__).resolve().parents[2]


def batch_inputs(batch: dict) -> dict:
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


def count_parameters(config: VanillaTransformerConfig) -> int:
    with torch.device("meta"):
        model = VanillaTransformerForConditionalGeneration(config)
    return sum(p.numel() for p in model.parameters())  # tied matrices are counted once


# --- sizes ---------------------------------------------------------------------------------------------------


def test_parameter_counts_match_the_paper():
    base = count_parameters(VanillaTransformerConfig(vocab_size=37000))
    big = count_parameters(VanillaTransformerConfig.from_preset("big", vocab_size=37000))
    assert 60e6 <= base <= 66e6, base  # paper: 65M
    assert 208e6 <= big <= 216e6, big  # paper: 213M
    body = base - 37000 * 512  # the 6+6 stacks without the shared embedding
    assert abs(body - 44.1e6) < 0.1e6, body


# --- §3.2.2 d_k and d_v (Table 3, rows A and B) -------------------------------------------------------------------


def test_table_3_row_b_parameter_counts_follow_d_k():
    # row (B) keeps h = 8 and d_v = 64 and shrinks d_k: each attention sub-layer loses 2·d_model·h·(64 - d_k)
    base = count_parameters(VanillaTransformerConfig(vocab_size=37000))
    for d_k in (16, 32):
        smaller = count_parameters(VanillaTransformerConfig(vocab_size=37000, qk_head_dim=d_k))
        attention_sublayers = 6 + 2 * 6  # encoder self-attention; decoder self- and encoder-decoder attention
        assert base - smaller == attention_sublayers * 2 * 512 * 8 * (64 - d_k)
    # row (A) at constant computation: h·d_k = d_model whatever h, so the size does not change
    for heads in (1, 4, 16, 32):
        config = VanillaTransformerConfig(
            vocab_size=37000, encoder_attention_heads=heads, decoder_attention_heads=heads
        )
        assert config.head_dims(heads) == (512 // heads,) * 2 and count_parameters(config) == base


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_d_k_and_d_v_of_their_own_match_the_formula(attn_implementation, tmp_path):
    config = tiny_config(qk_head_dim=5, v_head_dim=11)  # d_model 32, 4 heads: h·d_k = 20, h·d_v = 44
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(config).eval()
    model.set_attn_implementation(attn_implementation)
    attention = model.model.encoder.layers[0].self_attn
    assert (attention.q_proj.out_features, attention.v_proj.out_features, attention.out_proj.in_features) == (
        20,
        44,
        44,
    )
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        ours = attention(x)[0]
        q, k, v = (
            proj(x).view(2, 6, 4, -1).transpose(1, 2) for proj in (attention.q_proj, attention.k_proj, attention.v_proj)
        )
        heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(5), dim=-1) @ v  # (2, 4, 6, 11)
        expected = attention.out_proj(heads.transpose(1, 2).reshape(2, 6, 44))
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)
    # the whole model trains, decodes the same with and without a cache (static too), and saves and loads
    batch = random_batch()
    inputs = batch_inputs(batch)
    model(**inputs, labels=batch["decoder_input_ids"]).loss.backward()
    assert attention.q_proj.weight.grad.abs().sum() > 0
    cached = model.generate(**inputs, num_beams=2, max_new_tokens=6)
    for kwargs in ({"use_cache": False}, {"cache_implementation": "static"}):
        assert torch.equal(model.generate(**inputs, num_beams=2, max_new_tokens=6, **kwargs), cached), kwargs
    model.save_pretrained(tmp_path)
    loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert (loaded.config.qk_head_dim, loaded.config.v_head_dim) == (5, 11)
    assert torch.equal(loaded.generate(**inputs, num_beams=2, max_new_tokens=6), cached)


def test_configs_without_d_k_and_d_v_load_as_before():
    # both releases predate the fields: their config.json has neither, and every tensor keeps its shape
    for release in ("vanilla-transformer-multi30k-en-de", "vanilla-transformer-tatoeba-en-zh"):
        folder = ROOT / "model_cards" / release
        assert "qk_head_dim" not in json.loads((folder / "config.json").read_text())
        model, info = VanillaTransformerForConditionalGeneration.from_pretrained(folder, output_loading_info=True)
        assert not any(info.values()), info  # nothing missing, unexpected or mismatched
        config = model.config
        assert (config.qk_head_dim, config.v_head_dim) == (None, None)
        assert model.model.encoder.layers[0].self_attn.head_dim == config.d_model // config.encoder_attention_heads


# --- §3.5 positional encodings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("pos", "i"), [(0, 0), (1, 0), (1, 3), (7, 10), (50, 255), (1000, 1), (4097, 100)])
def test_sinusoidal_formula(pos, i):
    d_model = 512
    table = sinusoidal_position_encoding(pos + 1, d_model)
    angle = pos / 10000 ** (2 * i / d_model)
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    halves = sinusoidal_position_encoding(pos + 1, d_model, interleaved=False)
    assert halves[pos, i].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert halves[pos, d_model // 2 + i].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_first_hidden_state_is_scaled_embedding_plus_positions(model, batch):
    out = model(**batch, output_hidden_states=True)
    embeddings = model.model.shared(batch["input_ids"]) * math.sqrt(model.config.d_model)
    positions = sinusoidal_position_encoding(batch["input_ids"].shape[1], model.config.d_model)
    real = batch["attention_mask"].bool()  # padding takes no position of its own
    torch.testing.assert_close(out.encoder_hidden_states[0][real], (embeddings + positions)[real], rtol=0, atol=1e-6)
    assert len(out.encoder_hidden_states) == model.config.encoder_layers + 1
    assert len(out.decoder_hidden_states) == model.config.decoder_layers + 1


def test_sequences_longer_than_the_table_extend_it():
    model = tiny_model(max_position_embeddings=8)
    encoder = model.get_encoder()
    ids = torch.randint(3, VOCAB, (1, 20))
    hidden = encoder(ids, output_hidden_states=True).hidden_states[0]
    expected = model.model.shared(ids) * math.sqrt(32) + sinusoidal_position_encoding(20, 32)
    torch.testing.assert_close(hidden, expected, rtol=0, atol=1e-6)
    # generation past the table keeps going with fresh positions rather than wrapping
    out = model.generate(ids[:, :5], max_new_tokens=15, min_new_tokens=15, do_sample=False)
    assert out.shape[1] == 16


def test_learned_positions_reject_too_long_input():
    model = tiny_model(position_encoding="learned", max_position_embeddings=8)
    assert isinstance(model.model.encoder.embed_positions, nn.Embedding)
    with pytest.raises(ValueError, match="max_position_embeddings=8"):
        model(input_ids=torch.ones(1, 9, dtype=torch.long), decoder_input_ids=torch.ones(1, 2, dtype=torch.long))


# --- equivalence with torch.nn.Transformer ---------------------------------------------------------------------


class PaperReference(nn.Module):
    """The paper's model around torch.nn.Transformer(norm_first=False) with no final LayerNorms (§3.1)."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        d, heads = config.d_model, config.encoder_attention_heads
        self.d_model = d
        self.embedding = nn.Embedding(config.vocab_size, d)
        kwargs = {"dropout": 0.0, "activation": "relu", "layer_norm_eps": config.layer_norm_eps, "batch_first": True}
        encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, heads, config.encoder_ffn_dim, norm_first=False, **kwargs),
            config.encoder_layers,
            norm=None,
            enable_nested_tensor=False,
        )
        decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(d, heads, config.decoder_ffn_dim, norm_first=False, **kwargs),
            config.decoder_layers,
            norm=None,
        )
        self.transformer = nn.Transformer(
            d, heads, custom_encoder=encoder, custom_decoder=decoder, batch_first=True, norm_first=False
        )

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        def embed(ids):
            return self.embedding(ids) * math.sqrt(self.d_model) + sinusoidal_position_encoding(
                ids.shape[1], self.d_model
            )

        target_length = decoder_input_ids.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(target_length)
        padding = attention_mask == 0
        hidden = self.transformer(
            embed(input_ids),
            embed(decoder_input_ids),
            tgt_mask=causal,
            src_key_padding_mask=padding,
            memory_key_padding_mask=padding,
            tgt_is_causal=True,
        )
        return hidden @ self.embedding.weight.T


def copy_into_reference(model: VanillaTransformerForConditionalGeneration, reference: PaperReference) -> None:
    def copy_attention(ours, theirs):
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.in_proj_bias.zero_()  # the equations of §3.2.2 have no biases
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.zero_()

    def copy_norm(ours, theirs):
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)

    def copy_ffn(ours, layer):
        layer.linear1.weight.copy_(ours.fc1.weight)
        layer.linear1.bias.copy_(ours.fc1.bias)
        layer.linear2.weight.copy_(ours.fc2.weight)
        layer.linear2.bias.copy_(ours.fc2.bias)

    with torch.no_grad():
        reference.embedding.weight.copy_(model.model.shared.weight)
        for ours, theirs in zip(model.model.encoder.layers, reference.transformer.encoder.layers, strict=True):
            copy_attention(ours.self_attn, theirs.self_attn)
            copy_norm(ours.self_attn_layer_norm, theirs.norm1)
            copy_ffn(ours.ffn, theirs)
            copy_norm(ours.final_layer_norm, theirs.norm2)
        for ours, theirs in zip(model.model.decoder.layers, reference.transformer.decoder.layers, strict=True):
            copy_attention(ours.self_attn, theirs.self_attn)
            copy_norm(ours.self_attn_layer_norm, theirs.norm1)
            copy_attention(ours.encoder_attn, theirs.multihead_attn)
            copy_norm(ours.encoder_attn_layer_norm, theirs.norm2)
            copy_ffn(ours.ffn, theirs)
            copy_norm(ours.final_layer_norm, theirs.norm3)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_matches_torch_nn_transformer(attn_implementation):
    config = tiny_config(encoder_layers=3, decoder_layers=2)
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(config).eval()
    model.set_attn_implementation(attn_implementation)
    with torch.no_grad():  # non-trivial LayerNorm parameters, so that copying them is checked too
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
    reference = PaperReference(config).eval()
    copy_into_reference(model, reference)
    batch = random_batch(batch_size=4, src_len=11, tgt_len=9, seed=3)
    with torch.no_grad():
        ours = model(**batch).logits
        theirs = reference(**batch)
    error = (ours - theirs).abs().max().item()
    assert error < 1e-5, error


# --- masking ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_decoder_is_causal(attn_implementation, batch):
    model = tiny_model()
    model.set_attn_implementation(attn_implementation)
    logits = model(**batch).logits
    changed = dict(batch, decoder_input_ids=batch["decoder_input_ids"].clone())
    changed["decoder_input_ids"][:, 4:] = (changed["decoder_input_ids"][:, 4:] + 7) % VOCAB
    changed_logits = model(**changed).logits
    torch.testing.assert_close(changed_logits[:, :4], logits[:, :4], rtol=0, atol=1e-6)
    assert (changed_logits[:, 4:] - logits[:, 4:]).abs().max() > 1e-3


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_padding_invariance(attn_implementation):
    model = tiny_model()
    model.set_attn_implementation(attn_implementation)
    short_src, short_tgt = torch.randint(3, VOCAB, (1, 5)), torch.randint(3, VOCAB, (1, 4))
    alone = model(input_ids=short_src, decoder_input_ids=short_tgt).logits
    long_src, long_tgt = torch.randint(3, VOCAB, (1, 9)), torch.randint(3, VOCAB, (1, 8))
    input_ids = torch.cat([long_src, torch.cat([short_src, torch.full((1, 4), PAD)], 1)])
    decoder_input_ids = torch.cat([long_tgt, torch.cat([short_tgt, torch.full((1, 4), PAD)], 1)])
    attention_mask = (torch.arange(9) < torch.tensor([[9], [5]])).long()
    decoder_attention_mask = (torch.arange(8) < torch.tensor([[8], [4]])).long()
    batched = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        decoder_input_ids=decoder_input_ids,
        decoder_attention_mask=decoder_attention_mask,
    ).logits
    torch.testing.assert_close(batched[1:, :4], alone, rtol=0, atol=1e-5)


def test_eager_and_sdpa_agree(batch):
    eager = tiny_model()
    eager.set_attn_implementation("eager")
    sdpa = tiny_model()
    assert sdpa.config._attn_implementation == "sdpa"  # the default
    batch = dict(batch, decoder_attention_mask=torch.ones_like(batch["decoder_input_ids"]))
    batch["decoder_attention_mask"][2, 5:] = 0
    error = (eager(**batch).logits - sdpa(**batch).logits).abs().max().item()
    assert error < 1e-5, error


@pytest.mark.slow
def test_flex_attention_agrees_with_eager(batch):
    flex = tiny_model()
    flex.set_attn_implementation("flex_attention")
    eager = tiny_model()
    eager.set_attn_implementation("eager")
    with torch.no_grad():  # torch's flex attention has no backward on the CPU
        error = (flex(**batch).logits - eager(**batch).logits).abs().max().item()
    assert error < 1e-5, error


def test_flash_attention_is_declared():
    assert VanillaTransformerForConditionalGeneration._supports_flash_attn
    assert VanillaTransformerForConditionalGeneration._supports_sdpa
    assert VanillaTransformerForConditionalGeneration._supports_flex_attn


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fully_padded_row_stays_finite(attn_implementation, dtype, batch):
    model = tiny_model().to(dtype)
    model.set_attn_implementation(attn_implementation)
    batch["attention_mask"][1] = 0
    out = model(**batch, output_hidden_states=True)
    assert torch.isfinite(out.logits).all()
    assert all(torch.isfinite(h).all() for h in out.encoder_hidden_states)


# --- generation and the KV cache -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "generate_kwargs",
    [
        {"do_sample": False, "num_beams": 1},
        {"do_sample": False, "num_beams": 4, "num_return_sequences": 2},
        {"do_sample": True, "num_beams": 1, "top_k": 10},
    ],
    ids=["greedy", "beam", "sample"],
)
def test_generate_with_and_without_cache(generate_kwargs, batch):
    model = tiny_model()
    common = {"max_new_tokens": 10, "min_new_tokens": 10, **generate_kwargs}
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    torch.manual_seed(1)
    cached = model.generate(**inputs, use_cache=True, **common)
    torch.manual_seed(1)
    uncached = model.generate(**inputs, use_cache=False, **common)
    assert torch.equal(cached, uncached)
    assert cached.shape[1] == 11


def test_static_cache_and_continuing_from_a_cache_match_dynamic_decoding(batch):
    model = tiny_model()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    dynamic = model.generate(**inputs, max_new_tokens=8, min_new_tokens=8, num_beams=1)
    static = model.generate(**inputs, max_new_tokens=8, min_new_tokens=8, cache_implementation="static", num_beams=1)
    assert torch.equal(static, dynamic)
    first = model.generate(**inputs, max_new_tokens=4, min_new_tokens=4, return_dict_in_generate=True, num_beams=1)
    continued = model.generate(
        **inputs,
        decoder_input_ids=first.sequences,
        **{CACHE_OUTPUT_NAME: getattr(first, CACHE_OUTPUT_NAME)},
        max_new_tokens=4,
        min_new_tokens=4,
        num_beams=1,
    )
    assert torch.equal(continued, dynamic)


def test_cross_attention_keys_and_values_are_computed_once(batch, monkeypatch):
    model = tiny_model()
    calls = []
    model.model.decoder.layers[0].encoder_attn.k_proj.register_forward_hook(lambda *args: calls.append(1))
    out = model.generate(
        batch["input_ids"],
        attention_mask=batch["attention_mask"],
        max_new_tokens=6,
        min_new_tokens=6,
        num_beams=1,
        return_dict_in_generate=True,
    )
    assert len(calls) == 1
    cache = getattr(out, CACHE_OUTPUT_NAME)
    assert isinstance(cache, EncoderDecoderCache)
    assert cache.self_attention_cache.get_seq_length() == 6
    assert cache.cross_attention_cache.get_seq_length() == batch["input_ids"].shape[1]
    # greedy search without per-step outputs and the paper's beam search project it once too
    for num_beams in (1, 4):
        calls.clear()
        model.generate(**batch_inputs(batch), num_beams=num_beams, max_new_tokens=6, min_new_tokens=6)
        assert len(calls) == 1


def test_the_decoder_cache_goes_by_either_name(batch):
    """transformers 5.24 renamed `past_key_values` to `cache`: both names reach the same argument, and outputs carry
    the installed release's field. From 5.24 on the old name warns as in transformers' own models (FutureWarning);
    before it, `generate` passes the old name, taken without a word, and passing both is an error."""
    assert CACHE_OUTPUT_NAME in Seq2SeqLMOutput.__dataclass_fields__
    renamed = CACHE_OUTPUT_NAME == "cache"
    model = tiny_model().eval()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    first_steps = batch["decoder_input_ids"][:, :3]
    with torch.no_grad():
        full = model(**inputs, decoder_input_ids=batch["decoder_input_ids"][:, :4]).logits[:, 3]
        for name in ("past_key_values", "cache"):
            prefix = model(**inputs, decoder_input_ids=first_steps, use_cache=True)
            step = {name: getattr(prefix, CACHE_OUTPUT_NAME)}
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                logits = model(**inputs, decoder_input_ids=batch["decoder_input_ids"][:, 3:4], **step).logits[:, 0]
            torch.testing.assert_close(logits, full, rtol=0, atol=1e-5)
            deprecated = [w for w in caught if "`past_key_values` is deprecated" in str(w.message)]
            assert len(deprecated) == (1 if renamed and name == "past_key_values" else 0), name
        cache = getattr(model(**inputs, decoder_input_ids=first_steps, use_cache=True), CACHE_OUTPUT_NAME)
        if renamed:
            with pytest.warns(FutureWarning, match="Both `past_key_values` and `cache` are set"):
                model(**inputs, decoder_input_ids=batch["decoder_input_ids"][:, 3:4], past_key_values=None, cache=cache)
        else:
            with pytest.raises(ValueError, match="Both `past_key_values` and `cache`.*Pass it once"):
                model(**inputs, decoder_input_ids=first_steps, past_key_values=cache, cache=cache)


def test_attention_outputs(batch):
    model = tiny_model()
    model.set_attn_implementation("eager")
    out = model(**batch, output_attentions=True)
    b, s = batch["input_ids"].shape
    t = batch["decoder_input_ids"].shape[1]
    assert [a.shape for a in out.encoder_attentions] == [(b, 4, s, s)] * 2
    assert [a.shape for a in out.decoder_attentions] == [(b, 4, t, t)] * 2
    assert [a.shape for a in out.cross_attentions] == [(b, 4, t, s)] * 2
    # padded source positions receive no attention; future target positions receive none either
    assert out.encoder_attentions[0][2, :, :, s - 4 :].abs().max() == 0
    assert torch.triu(out.decoder_attentions[0][0, 0], diagonal=1).abs().max() == 0
    torch.testing.assert_close(out.cross_attentions[1].sum(-1), torch.ones(b, 4, t))


# --- training --------------------------------------------------------------------------------------------------


def test_loss_ignores_minus_100_and_uses_unshifted_labels(batch):
    model = tiny_model()
    labels = torch.randint(3, VOCAB, (3, 7))
    labels[0, 5:] = -100
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    assert decoder_input_ids[0, 0] == model.config.decoder_start_token_id
    assert decoder_input_ids[0, 6] == PAD  # -100 becomes padding in the decoder input
    logits = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=decoder_input_ids
    ).logits
    expected = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)


def test_gradient_accumulation_with_num_items_in_batch_matches_one_large_batch():
    batch = random_batch(batch_size=4, seed=5)
    labels = torch.randint(3, VOCAB, (4, 7))
    labels[0, 2:] = -100  # uneven token counts between the two halves
    full_model = tiny_model()
    full_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss.backward()
    accumulated_model = tiny_model()
    num_items = (labels != -100).sum()
    for half in (slice(0, 2), slice(2, 4)):
        accumulated_model(
            input_ids=batch["input_ids"][half],
            attention_mask=batch["attention_mask"][half],
            labels=labels[half],
            num_items_in_batch=num_items,
        ).loss.backward()
    for (name, full), accumulated in zip(full_model.named_parameters(), accumulated_model.parameters(), strict=True):
        torch.testing.assert_close(accumulated.grad, full.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_gradient_checkpointing_gives_the_same_gradients(batch):
    labels = torch.randint(3, VOCAB, (3, 7))
    grads, layer_forwards = [], []
    for checkpointing in (False, True):
        model = tiny_model().train()
        if checkpointing:
            # transformers 5.24 renamed it activation_checkpointing_enable; 5.15 has only the old name
            enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
            enable()
        calls = []
        for layer in (*model.model.encoder.layers, *model.model.decoder.layers):
            layer.ffn.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        layer_forwards.append(len(calls))
    # checkpointing keeps no activations inside a layer, so backward runs each layer's sublayers a second time
    assert layer_forwards[1] == 2 * layer_forwards[0] > 0
    for plain, checkpointed in zip(*grads, strict=True):
        torch.testing.assert_close(checkpointed, plain)


def test_collator_and_seq2seq_trainer_with_label_smoothing(tmp_path):
    from datasets import Dataset
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model = tiny_model(dropout=0.1).train()
    rows = [{"input_ids": [5 + i % 7, 9, 11, EOS], "labels": [6 + i % 5, 8, EOS][: 2 + i % 2]} for i in range(16)]

    class Tok:  # the collator needs only pad_token_id and padding_side from a tokenizer
        pad_token_id = PAD
        padding_side = "right"

        def pad(self, features, **kwargs):
            width = max(len(f["input_ids"]) for f in features)
            ids = [f["input_ids"] + [PAD] * (width - len(f["input_ids"])) for f in features]
            mask = [[1] * len(f["input_ids"]) + [0] * (width - len(f["input_ids"])) for f in features]
            out = {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}
            if "labels" in features[0]:
                out["labels"] = torch.tensor([f["labels"] for f in features])
            return out

    collator = DataCollatorForSeq2Seq(Tok(), model=model, label_pad_token_id=-100)
    features = collator([rows[0], rows[1]])
    assert torch.equal(features["decoder_input_ids"], model.prepare_decoder_input_ids_from_labels(features["labels"]))

    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        label_smoothing_factor=0.1,
        learning_rate=1e-2,
        max_steps=6,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), data_collator=collator)
    # with label smoothing the Trainer pops the labels: the batch must carry decoder_input_ids from the collator
    inputs = collator(rows[:4])
    loss, _ = trainer.compute_loss(model.eval(), dict(inputs), return_outputs=True)
    logits = model(**{k: v for k, v in inputs.items() if k != "labels"}).logits
    smoothed = nn.functional.cross_entropy(
        logits.reshape(-1, VOCAB), inputs["labels"].reshape(-1), ignore_index=-100, label_smoothing=0.1
    )
    torch.testing.assert_close(loss, smoothed)
    model.train()
    result = trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 6 and math.isfinite(result.training_loss)
    assert losses[-1] < losses[0]


# --- embeddings ------------------------------------------------------------------------------------------------


def test_one_shared_matrix_stored_once(tmp_path, model):
    shared = model.model.shared.weight
    assert model.model.encoder.embed_tokens.weight is shared
    assert model.model.decoder.embed_tokens.weight is shared
    assert model.lm_head.weight is shared
    assert model.lm_head.bias is None
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        keys = list(f.keys())
    assert [k for k in keys if "embed" in k or "shared" in k or "lm_head" in k] == ["model.shared.weight"]


def test_no_attention_biases_by_default(model):
    attention = model.model.decoder.layers[0].encoder_attn
    assert all(p.bias is None for p in (attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj))
    with_bias = tiny_model(attention_bias=True).model.encoder.layers[0].self_attn
    assert with_bias.q_proj.bias is not None and with_bias.out_proj.bias is not None


def test_resize_token_embeddings_keeps_the_tying(tmp_path, model):
    model.resize_token_embeddings(VOCAB + 6)
    assert model.config.vocab_size == model.config.decoder_vocab_size == VOCAB + 6
    for weight in (model.model.encoder.embed_tokens.weight, model.model.decoder.embed_tokens.weight):
        assert weight is model.model.shared.weight
    assert model.lm_head.weight is model.model.shared.weight
    assert model(input_ids=torch.tensor([[VOCAB + 5]]), decoder_input_ids=torch.tensor([[BOS]])).logits.shape[-1] == (
        VOCAB + 6
    )
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert reloaded.lm_head.weight is reloaded.model.shared.weight
    torch.testing.assert_close(reloaded.model.shared.weight, model.model.shared.weight, rtol=0, atol=0)


def test_separate_vocabularies(tmp_path):
    model = tiny_model(share_encoder_decoder_embeddings=False, decoder_vocab_size=40)
    assert not hasattr(model.model, "shared")
    assert model.model.encoder.embed_tokens.weight is not model.model.decoder.embed_tokens.weight
    assert model.lm_head.weight is model.model.decoder.embed_tokens.weight  # target embedding = output projection
    batch = random_batch()
    batch["decoder_input_ids"] %= 40
    assert model(**batch).logits.shape[-1] == 40
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits, rtol=0, atol=0)


def test_untied_output_projection(tmp_path, batch):
    model = tiny_model(tie_word_embeddings=False)
    weights = [model.model.encoder.embed_tokens.weight, model.model.decoder.embed_tokens.weight, model.lm_head.weight]
    assert len({id(w) for w in weights}) == 3  # transformers ties all declared pairs or none
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert torch.equal(reloaded(**batch).logits, model(**batch).logits)


def test_pre_layer_norm_option_adds_final_layer_norms(batch):
    post, pre = tiny_model(), tiny_model(normalize_before=True)
    assert post.model.encoder.layer_norm is None and post.model.decoder.layer_norm is None
    assert isinstance(pre.model.encoder.layer_norm, nn.LayerNorm)
    assert isinstance(pre.model.decoder.layer_norm, nn.LayerNorm)
    assert not torch.allclose(pre(**batch).logits, post(**batch).logits)
    labels = torch.randint(3, VOCAB, (3, 7))
    pre(input_ids=batch["input_ids"], labels=labels).loss.backward()
    assert pre.model.encoder.layer_norm.weight.grad is not None


def test_initialization_follows_tensor2tensor():
    model = VanillaTransformerForConditionalGeneration(VanillaTransformerConfig(vocab_size=1000))
    std = model.model.shared.weight[1:].std().item()
    assert abs(std - 512**-0.5) < 0.002, std  # so that embeddings × √d_model have unit variance
    assert model.model.shared.weight[PAD].abs().max() == 0
    fc1 = model.model.encoder.layers[0].ffn.fc1.weight
    assert fc1.abs().max() <= math.sqrt(6 / (512 + 2048)) + 1e-6  # Glorot-uniform bound


# --- save, load and remote code --------------------------------------------------------------------------------


def test_save_and_load_are_bit_exact(tmp_path, model, batch):
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert isinstance(reloaded, VanillaTransformerForConditionalGeneration)
    for (name, ours), theirs in zip(model.state_dict().items(), reloaded.state_dict().values(), strict=True):
        assert torch.equal(ours, theirs), name
    assert torch.equal(reloaded(**batch).logits, model(**batch).logits)
    base = AutoModel.from_pretrained(tmp_path)
    assert isinstance(base, VanillaTransformerModel)
    assert torch.equal(base.shared.weight, model.model.shared.weight)


def test_saved_folder_has_code_and_auto_map(tmp_path, model):
    model.save_pretrained(tmp_path)
    names = set(os.listdir(tmp_path))
    assert {"config.json", "generation_config.json", "model.safetensors"} <= names
    assert set(CODE_FILES) <= names
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in names)
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "configuration_vanilla_transformer.VanillaTransformerConfig",
        "AutoModel": "modeling_vanilla_transformer.VanillaTransformerModel",
        "AutoModelForSeq2SeqLM": "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration",
    }


def test_remote_code_loads_without_the_package(tmp_path, model, batch):
    model.save_pretrained(tmp_path)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    expected = model.generate(**inputs, num_beams=4, max_new_tokens=8).tolist()
    assert generate_without_package(tmp_path, inputs, num_beams=4, max_new_tokens=8) == expected


# --- no host syncs -------------------------------------------------------------------------------------------

# the ops whose result the host must wait for: `.item()`, `int(t)`, `bool(t)` (all `_local_scalar_dense`) and the
# ones whose output size depends on values (boolean-mask indexing runs `nonzero`); on a GPU each one stops the host
# until every queued kernel has run
HOST_READS = {"_local_scalar_dense", "nonzero", "nonzero_static", "masked_select", "unique", "_unique2", "item"}


class HostReads(TorchDispatchMode):
    """Records every op in `HOST_READS` that runs inside the `with` block."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        # a boolean mask as an index (`t[t != -100]`) runs `nonzero` inside the kernel, out of this mode's sight
        masks = name in ("index", "index_put", "index_put_", "_index_put_impl_") and any(
            isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in args[1]
        )
        if name in HOST_READS or masks:
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_the_host_read_counter_sees_reads():
    values = torch.tensor([[3, -100, 5]])
    with HostReads() as reads:
        int(values.max()), bool((values == 0).any()), values[values != -100]  # noqa: B018
    assert reads.ops == ["aten._local_scalar_dense.default", "aten._local_scalar_dense.default", "aten.index.Tensor"]


@pytest.mark.parametrize(
    "overrides",
    [{}, {"position_encoding": "learned"}, {"normalize_before": True, "share_encoder_decoder_embeddings": False}],
    ids=["paper", "learned-positions", "pre-LN-separate-vocabularies"],
)
def test_neither_a_training_step_nor_a_decoding_step_waits_for_the_device(overrides):
    """transformers' models check inputs at the edges, not in `forward`: a check that reads a value on the host
    (`int(ids.max())`) makes a GPU wait for every kernel queued before it, in every step. The counter above proves
    the forward, the backward and one cached decoding step read nothing."""
    model, batch = tiny_model(**overrides).train(), random_batch()
    labels = batch["decoder_input_ids"].masked_fill(batch["decoder_input_ids"] == 7, -100)
    with HostReads() as reads:
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss.backward()
    assert reads.ops == []

    model.eval()
    with torch.no_grad():
        first = model(**batch_inputs(batch), decoder_input_ids=batch["decoder_input_ids"][:, :3], use_cache=True)
        with HostReads() as reads:
            model(
                encoder_outputs=(first.encoder_last_hidden_state,),
                attention_mask=batch["attention_mask"],
                decoder_input_ids=batch["decoder_input_ids"][:, 3:4],
                cache=first.past_key_values,
                use_cache=True,
            )
    assert reads.ops == []


# --- bad input -------------------------------------------------------------------------------------------------


def test_token_ids_outside_the_vocabulary_are_refused_where_they_enter_generate(model):
    """`generate` checks its ids once, at the start; the training collator checks each batch
    (`tests/data/test_batching.py`); `forward` checks none (see the host-read test above)."""
    with pytest.raises(ValueError, match=rf"input_ids contains token id 70 \(largest 70.*vocab_size is {VOCAB}"):
        model.generate(torch.tensor([[5, 70, 3]]), max_new_tokens=2)
    with pytest.raises(ValueError, match=r"input_ids contains token id -4 .*vocab_size is 64"):
        model.generate(input_ids=torch.tensor([[5, -4, 3]]), max_new_tokens=2)
    with pytest.raises(ValueError, match=r"decoder_input_ids contains token id 64 .*vocab_size is 64"):
        model.generate(torch.tensor([[5, 6]]), decoder_input_ids=torch.tensor([[1, 64]]), max_new_tokens=2)
    separate = tiny_model(share_encoder_decoder_embeddings=False, decoder_vocab_size=40)
    with pytest.raises(ValueError, match=r"decoder_input_ids contains token id 50 .*vocab_size is 40"):
        separate.generate(torch.tensor([[5, 60]]), decoder_input_ids=torch.tensor([[1, 50]]), max_new_tokens=2)


def test_wrong_shapes_name_the_expected_shape(model):
    ids = torch.tensor([[5, 6, 7]])
    target = torch.tensor([[BOS, 5]])
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch_size, sequence_length\), got \(3,\)"):
        model(input_ids=ids[0], decoder_input_ids=target)
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(1, 3\), got \(1, 4\)"):
        model(input_ids=ids, attention_mask=torch.ones(1, 4), decoder_input_ids=target)
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(1, 3\), got \(3,\)"):
        model(input_ids=ids, attention_mask=torch.ones(3), decoder_input_ids=target)
    with pytest.raises(ValueError, match=r"decoder_attention_mask must have shape \(1, 2\), got \(1, 5\)"):
        model(input_ids=ids, decoder_input_ids=target, decoder_attention_mask=torch.ones(1, 5))
    with pytest.raises(ValueError, match=r"decoder_input_ids must have shape \(batch_size, target_length\)"):
        model(input_ids=ids, decoder_input_ids=target[None])
    with pytest.raises(ValueError, match=r"labels must have shape \(batch_size, target_length\)"):
        model(input_ids=ids, labels=target[0])
    with pytest.raises(ValueError, match=r"inputs_embeds must have shape \(batch_size, sequence_length, 32\)"):
        model(inputs_embeds=torch.zeros(1, 3, 16), decoder_input_ids=target)


def test_usage_example_from_the_guide_runs_as_written(tmp_path, monkeypatch):
    guide = (ROOT / "docs" / "guide.md").read_text()
    example = guide.split("<!-- usage-example -->")[1].split("```python")[1].split("```")[0]
    namespace = {"input_ids": torch.randint(4, 1000, (2, 6)), "mask": torch.ones(2, 6, dtype=torch.long)}
    monkeypatch.chdir(tmp_path)  # the example saves to ./out
    exec(compile(example, "docs/guide.md", "exec"), namespace)
    assert (tmp_path / "out" / "model.safetensors").exists()
    assert namespace["out"].shape[0] == 2


def test_device_map_auto_splits_on_layer_boundaries(tmp_path, model, batch):
    assert set(model._no_split_modules) == {"VanillaTransformerEncoderLayer", "VanillaTransformerDecoderLayer"}
    model.save_pretrained(tmp_path)
    placed = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, device_map="auto").eval()
    assert placed.lm_head.weight is placed.model.shared.weight
    torch.testing.assert_close(placed(**batch).logits, model(**batch).logits, rtol=0, atol=0)


def test_deepcopy_keeps_backends_apart():
    # set_attn_implementation edits the config in place; each model must own its config
    model = tiny_model()
    other = copy.deepcopy(model)
    other.set_attn_implementation("eager")
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize(
    "overrides",
    [{}, {"normalize_before": True}, {"attention_bias": True}, {"position_encoding": "learned"}],
    ids=["paper", "pre-LN", "attention-bias", "learned-positions"],
)
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_cached_steps_match_the_full_forward(batch, overrides, attn_implementation):
    """Decoding one position at a time with an `EncoderDecoderCache` gives the logits of the full forward within
    1e-5 at every position, also after rows are reordered (`reorder_cache`, beams moving) and dropped
    (`batch_select_indices`, sentences finishing), as the paper's beam search does between steps."""
    model = tiny_model(**overrides).eval()
    model.set_attn_implementation(attn_implementation)
    # two hypotheses ("beams") per source sentence: rows 2i and 2i + 1 read source i
    input_ids = batch["input_ids"].repeat_interleave(2, dim=0)
    attention_mask = batch["attention_mask"].repeat_interleave(2, dim=0)
    targets = torch.stack((batch["decoder_input_ids"], batch["decoder_input_ids"].roll(1, dims=0)), dim=1)
    decoder_input_ids = targets.flatten(0, 1)
    with torch.no_grad():
        reference = model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids
        ).logits
        encoder_outputs = model.get_encoder()(input_ids, attention_mask=attention_mask)
        cache = None
        rows = torch.arange(input_ids.shape[0])  # the row of `reference` each cache row continues
        for position in range(decoder_input_ids.shape[1]):
            out = model(
                encoder_outputs=encoder_outputs,
                attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids[rows, position : position + 1],
                **{CACHE_OUTPUT_NAME: cache},
                use_cache=True,
            )
            cache = getattr(out, CACHE_OUTPUT_NAME)
            torch.testing.assert_close(out.logits[:, 0], reference[rows, position], rtol=1e-5, atol=1e-5)
            if position == 1:  # beams trade places within their sentence: only the target side moves
                order = torch.arange(rows.shape[0]).view(-1, 2).flip(1).flatten()
                cache.self_attention_cache.reorder_cache(order)
                rows = rows[order]
            if position == 2:  # sentences 1 and 3 finish and leave
                keep = torch.tensor([0, 1, 4, 5])
                cache.batch_select_indices(keep)
                rows = rows[keep]
                encoder_outputs = BaseModelOutput(last_hidden_state=encoder_outputs[0][keep])
                attention_mask = attention_mask[keep]


@pytest.mark.parametrize("num_beams", [1, 4])
def test_cached_decoding_generates_what_uncached_decoding_generates(batch, num_beams):
    """Greedy search and the paper's beam search give the same tokens with the cache as without, with EOS, padding,
    minimum lengths and (beam search) sentences leaving the batch as they finish."""
    model = tiny_model().eval()
    inputs = batch_inputs(batch)
    for options in ({"max_new_tokens": 12}, {"max_new_tokens": 9, "min_new_tokens": 5}):
        cached = model.generate(**inputs, num_beams=num_beams, **options)
        assert torch.equal(cached, model.generate(**inputs, num_beams=num_beams, use_cache=False, **options))
    # EOS made likely, so that sentences finish at different steps and finished rows are padded or leave the batch
    with torch.no_grad():
        model.lm_head.weight[EOS] *= 6
    cached = model.generate(**inputs, num_beams=num_beams, max_new_tokens=12)
    assert torch.equal(cached, model.generate(**inputs, num_beams=num_beams, max_new_tokens=12, use_cache=False))
    assert (cached[:, 1:-1] == EOS).any()


# -- torch.compile under token batching ----------------------------------------------------------------------------


@pytest.fixture
def fresh_dynamo():
    """Dynamo remembers, per function, which sizes it saw change: each test counts its compiles from a clean state."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.slow
def test_compiled_training_compiles_twice_for_every_batch_shape_token_batching_makes(builtin_tokenizer, fresh_dynamo):
    """Token batches vary in size and length: compiled, the model is traced once for the first shape and once with
    dynamic sizes after the second (torch's automatic dynamic shapes), then never again, and never breaks its graph
    (one frame each time; a size turned into text while tracing, as an eagerly built error message was, breaks it)."""
    from torch._dynamo.testing import CompileCounter

    from vanilla_transformer.data.batching import TokenBudgetBatchSampler
    from vanilla_transformer.data.corpora import load_builtin
    from vanilla_transformer.data.tokenized import tokenize_pairs

    pairs, _ = tokenize_pairs(load_builtin("valid"), builtin_tokenizer, "en", "de", max_length=64)
    batches = list(TokenBudgetBatchSampler.for_dataset(pairs, max_tokens=400))
    collator = DataCollatorForSeq2Seq(builtin_tokenizer, label_pad_token_id=-100)
    model = tiny_model(vocab_size=len(builtin_tokenizer), dropout=0.1).train()
    counter = CompileCounter()
    compiled = torch.compile(model, backend=counter)
    shapes, frames = set(), []
    for batch in batches[:12]:
        inputs = collator([{key: pairs[i][key] for key in ("input_ids", "labels")} for i in batch])
        shapes.add((*inputs["input_ids"].shape, inputs["labels"].shape[1]))
        compiled(**inputs).loss.backward()
        frames.append(counter.frame_count)
    assert len(shapes) >= 8
    assert frames[0] == 1 and frames[-1] == 2, frames


@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.slow
def test_compiled_decoding_stops_recompiling_after_the_second_batch_shape(num_beams, fresh_dynamo):
    from torch._dynamo.testing import CompileCounter

    model = tiny_model().eval()
    counter = CompileCounter()
    model.forward = torch.compile(model.forward, backend=counter)
    generator = torch.Generator().manual_seed(0)
    frames = []
    for batch_size, length in [(8, 12), (6, 17), (11, 9), (4, 23), (7, 14), (9, 5)]:
        input_ids = torch.randint(3, VOCAB, (batch_size, length), generator=generator)
        attention_mask = torch.ones_like(input_ids)
        attention_mask[0, -2:] = 0
        model.generate(
            input_ids=input_ids, attention_mask=attention_mask, num_beams=num_beams, max_new_tokens=6, min_new_tokens=6
        )
        frames.append(counter.frame_count)
    # the first step (no cache yet), the second (cross-attention cache being filled) and the rest: three graphs for
    # the first shape, three dynamic ones after the second, none after
    assert frames == [3] + [6] * 5, frames


@pytest.mark.parametrize(("preset", "expected"), [("base", 63_045_632), ("big", 214_171_648)])
def test_the_paper_models_parameter_counts_are_the_ones_docs_paper_gives(preset, expected):
    # 37,000 tokens, one matrix shared three ways, no attention biases: 63.0M and 214.2M against Table 3's 65M and 213M
    with torch.device("meta"):
        model = VanillaTransformerForConditionalGeneration(
            VanillaTransformerConfig.from_preset(preset, vocab_size=37000)
        )
    assert sum(parameter.numel() for parameter in model.parameters()) == expected
