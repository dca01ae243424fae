import pytest
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig

from vanilla_transformer import PRESETS, VanillaTransformerConfig


def test_defaults_are_the_papers_base_model():
    config = AutoConfig.for_model("vanilla_transformer", vocab_size=37000)
    assert isinstance(config, VanillaTransformerConfig)
    assert (config.d_model, config.encoder_ffn_dim, config.decoder_ffn_dim) == (512, 2048, 2048)
    assert (config.encoder_layers, config.decoder_layers) == (6, 6)
    assert (config.encoder_attention_heads, config.decoder_attention_heads) == (8, 8)
    assert config.dropout == 0.1 and config.attention_dropout == 0.0 and config.activation_dropout == 0.0
    assert config.activation_function == "relu"
    assert config.scale_embedding and config.share_encoder_decoder_embeddings and config.tie_word_embeddings
    assert config.position_encoding == "sinusoidal"
    assert config.normalize_before is False and config.attention_bias is False
    assert config.hidden_size == 512 and config.num_attention_heads == 8 and config.num_hidden_layers == 6


def test_presets_follow_table_3():
    big = VanillaTransformerConfig.from_preset("big", vocab_size=37000)
    assert (big.d_model, big.encoder_ffn_dim, big.encoder_attention_heads, big.dropout) == (1024, 4096, 16, 0.3)
    assert big.d_model // big.encoder_attention_heads == 64  # d_k = d_v = 64 in both models
    small = VanillaTransformerConfig.from_preset("multi30k")
    assert small.d_model < 512 and small.encoder_layers < 6
    assert VanillaTransformerConfig.from_preset("base").to_dict() == VanillaTransformerConfig().to_dict()
    assert set(PRESETS) == {"base", "big", "multi30k"}
    with pytest.raises(ValueError, match="Unknown preset 'huge'"):
        VanillaTransformerConfig.from_preset("huge")


def test_round_trip_through_json(tmp_path):
    config = VanillaTransformerConfig(vocab_size=123, position_encoding="learned", normalize_before=True)
    config.save_pretrained(tmp_path)
    reloaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(reloaded, VanillaTransformerConfig)
    assert reloaded.to_diff_dict() == config.to_diff_dict()


def test_generation_parameters_are_not_config_fields():
    # transformers 5 keeps decoding settings in generation_config.json, never in config.json
    assert "num_beams" not in VanillaTransformerConfig().to_dict()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"d_model": 10, "encoder_attention_heads": 3}, r"d_model=10 is not divisible by encoder_attention_heads=3"),
        ({"decoder_attention_heads": 7}, r"d_model=512 is not divisible by decoder_attention_heads=7"),
        ({"d_model": 0}, r"d_model=0 must be a positive integer"),
        ({"encoder_layers": -1}, r"encoder_layers=-1 must be a positive integer"),
        ({"vocab_size": 0}, r"vocab_size=0 must be a positive integer"),
        ({"decoder_ffn_dim": 0}, r"decoder_ffn_dim=0 must be a positive integer"),
        ({"d_model": "512"}, r"Field 'd_model' expected int, got str"),
        ({"dropout": 1.0}, r"dropout=1.0 is a probability and must lie in \[0, 1\)"),
        ({"attention_dropout": -0.1}, r"attention_dropout=-0.1 is a probability"),
        ({"activation_function": "tanh"}, r"activation_function='tanh' is not supported"),
        ({"position_encoding": "rope"}, r"position_encoding='rope' is unknown"),
        ({"d_model": 15, "encoder_attention_heads": 5, "decoder_attention_heads": 5}, r"d_model=15 is odd"),
        ({"vocab_size": 100, "eos_token_id": 100}, r"eos_token_id=100 lies outside the vocabulary"),
        ({"vocab_size": 100, "pad_token_id": -1}, r"pad_token_id=-1 lies outside the vocabulary"),
        ({"vocab_size": 100, "decoder_start_token_id": 250}, r"decoder_start_token_id=250 lies outside"),
        ({"vocab_size": 100, "decoder_vocab_size": 50}, r"decoder_vocab_size=50 differs from vocab_size=100"),
        ({"init_std": -0.02}, r"init_std=-0.02 must be >= 0"),
        ({"qk_head_dim": 0}, r"qk_head_dim=0 must be a positive integer, or None for d_model / heads"),
        ({"v_head_dim": -64}, r"v_head_dim=-64 must be a positive integer"),
        (
            {"encoder_attention_heads": 3, "v_head_dim": 64},
            r"not divisible by encoder_attention_heads=3.*set qk_head_dim",
        ),
    ],
)
def test_invalid_values_name_field_value_and_fix(overrides, message):
    with pytest.raises(StrictDataclassError, match=message):
        VanillaTransformerConfig(**overrides)


def test_d_model_30_with_5_heads_is_valid():
    # 30 is even and divisible by 5: a legal (if odd-looking) configuration
    assert VanillaTransformerConfig(d_model=30, encoder_attention_heads=5, decoder_attention_heads=5).d_model == 30


def test_d_k_and_d_v_of_their_own_free_d_model_from_dividing_by_h():
    # §3.2.2 sizes d_k and d_v apart from d_model; only the derived sizes need d_model / h to be whole
    config = VanillaTransformerConfig(
        encoder_attention_heads=3, decoder_attention_heads=3, qk_head_dim=8, v_head_dim=10
    )
    assert config.head_dims(3) == (8, 10)
    assert VanillaTransformerConfig().head_dims(8) == (64, 64)  # the paper's base model


def test_separate_vocabularies_are_an_option():
    config = VanillaTransformerConfig(vocab_size=100, decoder_vocab_size=80, share_encoder_decoder_embeddings=False)
    assert (config.vocab_size, config.decoder_vocab_size) == (100, 80)
    message = r"eos_token_id=90 lies outside the vocabulary \(decoder_vocab_size=80\)"
    with pytest.raises(StrictDataclassError, match=message):
        VanillaTransformerConfig(
            vocab_size=100, decoder_vocab_size=80, share_encoder_decoder_embeddings=False, eos_token_id=90
        )
