import pytest
from conftest import tiny_model

from vanilla_transformer.inference.plots import attention_maps, plot_attention, plot_learning_curves


def test_learning_curves_png(tmp_path):
    history = [{"step": s, "loss": 5.0 / s} for s in range(1, 20)] + [{"step": 10, "eval_loss": 1.0, "eval_bleu": 12.0}]
    path = plot_learning_curves(history, tmp_path / "curves.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="holds no losses"):
        plot_learning_curves([{"step": 1}], tmp_path / "none.png")


def test_attention_maps_are_distributions_and_plot(builtin_tokenizer, tmp_path):
    model = tiny_model(vocab_size=len(builtin_tokenizer))
    maps = attention_maps(model, builtin_tokenizer, "The dog sees a ball.", "Der Hund sieht einen Ball.")
    source_length = len(maps["source_tokens"])
    assert len(maps["encoder"]) == model.config.encoder_layers
    assert maps["encoder"][0].shape == (4, source_length, source_length)
    assert maps["cross"][1].shape == (4, len(maps["target_tokens"]), source_length)
    assert maps["cross"][1].sum(-1).allclose(maps["cross"][1].new_ones(1))
    assert model.config._attn_implementation != "eager"  # restored after the eager pass
    for kind in ("encoder", "cross"):
        path = plot_attention(maps, kind, layers=[0, 1], heads=[0, 3], path=tmp_path / f"{kind}.png")
        assert path.stat().st_size > 1000
    with pytest.raises(ValueError, match="layer 5 does not exist"):
        plot_attention(maps, "cross", layers=[5], heads=[0], path=tmp_path / "x.png")
