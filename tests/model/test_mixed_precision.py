"""Numerics under mixed precision on the CPU: fp16 and bf16 forward and backward, with fully padded rows and
sequences longer than the position table, stay finite, and the label-smoothed loss of §5.4 stays within a stated
tolerance of the fp32 loss."""

import pytest
import torch
from conftest import PAD, VOCAB, tiny_model

from vanilla_transformer.training.optimization import label_smoothed_loss

# relative difference from the fp32 loss; measured at most 2.5e-5 (fp16) and 2.4e-4 (bf16: 8 mantissa bits) over
# three batches, both attention backends, half-precision weights and autocast; the bounds leave 20x room
LOSS_TOLERANCE = {torch.float16: 1e-3, torch.bfloat16: 5e-3}


def hard_batch(seed: int = 0) -> dict:
    """Source and target rows longer than max_position_embeddings=16, one source row and one target row that are
    nothing but padding, and labels that ignore the padded target positions."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, VOCAB, (4, 40), generator=generator)
    labels = torch.randint(3, VOCAB, (4, 30), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1] = 0  # an empty source
    attention_mask[2, 7:] = 0
    decoder_attention_mask = torch.ones_like(labels)
    decoder_attention_mask[3] = 0  # an empty target
    decoder_attention_mask[2, 5:] = 0
    return {
        "input_ids": input_ids.masked_fill(attention_mask == 0, PAD),
        "attention_mask": attention_mask,
        "decoder_input_ids": torch.cat([torch.ones_like(labels[:, :1]), labels[:, :-1]], 1),
        "decoder_attention_mask": decoder_attention_mask,
        "labels": labels.masked_fill(decoder_attention_mask == 0, -100),
    }


def forward_backward(model, batch: dict, autocast_dtype: torch.dtype | None = None):
    model.zero_grad()
    labels = batch["labels"]
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.autocast("cpu", dtype=autocast_dtype, enabled=autocast_dtype is not None):
        outputs = model(**inputs, output_hidden_states=True)
        loss = label_smoothed_loss(0.1)(outputs, labels)
    loss.backward()
    return outputs, loss


def assert_finite(model, outputs, loss) -> None:
    assert torch.isfinite(loss), loss
    assert torch.isfinite(outputs.logits).all()
    for hidden in (*outputs.encoder_hidden_states, *outputs.decoder_hidden_states):
        assert torch.isfinite(hidden).all()
    gradients = [p.grad for p in model.parameters() if p.grad is not None]
    assert gradients and all(torch.isfinite(g).all() for g in gradients)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_precision_weights_stay_finite_and_match_the_fp32_loss(dtype, attn_implementation):
    batch = hard_batch()
    reference = tiny_model(max_position_embeddings=16).train()
    reference.set_attn_implementation(attn_implementation)
    reference_outputs, reference_loss = forward_backward(reference, batch)
    assert_finite(reference, reference_outputs, reference_loss)

    half = tiny_model(max_position_embeddings=16).to(dtype).train()  # the same weights, rounded
    half.set_attn_implementation(attn_implementation)
    outputs, loss = forward_backward(half, batch)
    assert outputs.logits.dtype == dtype
    assert_finite(half, outputs, loss)
    assert loss.item() == pytest.approx(reference_loss.item(), rel=LOSS_TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_autocast_stays_finite_and_matches_the_fp32_loss(dtype):
    batch = hard_batch(seed=1)
    model = tiny_model(max_position_embeddings=16, dropout=0.0).train()
    reference_outputs, reference_loss = forward_backward(model, batch)
    outputs, loss = forward_backward(model, batch, autocast_dtype=dtype)
    assert outputs.logits.dtype == dtype  # the matmuls did run in half precision
    assert_finite(model, outputs, loss)
    assert loss.item() == pytest.approx(reference_loss.item(), rel=LOSS_TOLERANCE[dtype])


def test_large_logits_do_not_overflow_the_loss_in_fp16():
    """fp16 tops out at 65504: the loss upcasts the logits before the softmax, so logits near that limit are fine."""
    logits = torch.full((2, 3, VOCAB), 6e4, dtype=torch.float16)
    logits[..., 5] = 6.5e4
    labels = torch.tensor([[5, 5, -100], [5, 7, 5]])
    loss = label_smoothed_loss(0.1)({"logits": logits}, labels)
    assert torch.isfinite(loss) and loss.dtype == torch.float32


def test_the_release_translates_in_bf16_as_in_fp32():
    # bf16 weights run the matmuls on the CPU's AMX units; on all of test2016 BLEU moved +0.04 (docs/speed.md)
    from pathlib import Path

    from vanilla_transformer.data.corpora import load_builtin
    from vanilla_transformer.files.loading import load_model_and_tokenizer
    from vanilla_transformer.inference.scoring import score_translations
    from vanilla_transformer.inference.translation import load_translator

    release = Path(__file__).resolve().parents[2] / "model_cards" / "vanilla-transformer-multi30k-en-de"
    pairs = load_builtin("test")["translation"][:100]
    sources, references = [p["en"] for p in pairs], [p["de"] for p in pairs]
    bf16 = load_translator(str(release), "pytorch", "cpu", dtype="bfloat16").translate(sources)
    fp32 = load_translator(str(release), "pytorch", "cpu").translate(sources)
    bleu = [score_translations(h, references)["bleu"]["score"] for h in (fp32, bf16)]
    model, _ = load_model_and_tokenizer(release, "cpu", torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert abs(bleu[0] - bleu[1]) <= 1.0, bleu
    assert sum(a == b for a, b in zip(fp32, bf16, strict=True)) >= 80


def test_a_dtype_for_a_ctranslate2_export_or_an_unknown_one_is_refused(tmp_path):
    from vanilla_transformer.errors import ExportError
    from vanilla_transformer.inference.translation import load_translator

    with pytest.raises(ValueError, match="dtype='int4' is unknown; use one of float32, bfloat16, float16"):
        load_translator(str(tmp_path), "pytorch", "cpu", dtype="int4")
    with pytest.raises(ExportError, match="--dtype bfloat16 does not apply to a CTranslate2 export"):
        load_translator(str(tmp_path), "ctranslate2", "cpu", dtype="bfloat16")
