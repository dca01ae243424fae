"""Configuration of the Transformer of Vaswani et al. 2017, *Attention Is All You Need* (arXiv 1706.03762).

Every default is the paper's base model (Table 3, row "base"); every later practice (pre-LN, learned positions,
separate vocabularies, attention biases, attention/ReLU dropout) is a named option that defaults to the paper.
This file is shipped to the Hub as remote code: it imports only `transformers`.
"""

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

POSITION_ENCODINGS = ("sinusoidal", "sinusoidal_halves", "learned")
ACTIVATIONS = ("relu", "gelu", "gelu_new", "silu", "swish")
# the fields that size the network, each a positive integer
SIZE_FIELDS = (
    "vocab_size",
    "decoder_vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "max_position_embeddings",
)

# Table 3 of the paper, plus a small model for Multi30k (29k sentence pairs): the text-only "Transformer-tiny"
# of Wu et al. 2021, which scores 41.02 BLEU on test2016; a base-size model overfits this corpus.
PRESETS: dict[str, dict] = {
    "base": {},
    "big": {
        "d_model": 1024,
        "encoder_ffn_dim": 4096,
        "decoder_ffn_dim": 4096,
        "encoder_attention_heads": 16,
        "decoder_attention_heads": 16,
        "dropout": 0.3,
    },
    "multi30k": {
        "vocab_size": 8000,
        "d_model": 128,
        "encoder_layers": 4,
        "decoder_layers": 4,
        "encoder_ffn_dim": 256,
        "decoder_ffn_dim": 256,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
    },
}


@strict
class VanillaTransformerConfig(PreTrainedConfig):
    r"""
    Configuration of [`VanillaTransformerModel`] and [`VanillaTransformerForConditionalGeneration`].

    The defaults build the paper's base model: N=6 encoder and decoder layers, d_model=512, d_ff=2048, h=8,
    P_drop=0.1, post-LayerNorm residual blocks (§3.1), no attention biases (§3.2.2), ReLU feed-forward (§3.3),
    embeddings scaled by √d_model and shared by encoder, decoder and pre-softmax projection (§3.4), and
    interleaved sinusoidal positions (§3.5). `VanillaTransformerConfig.from_preset("big")` gives Table 3's big model.

    Args:
        vocab_size: size of the shared source/target vocabulary (the paper: ~37,000 BPE tokens).
        decoder_vocab_size: target vocabulary size when `share_encoder_decoder_embeddings=False`; defaults to
            `vocab_size`. Must equal `vocab_size` when the embeddings are shared.
        d_model, encoder_layers, decoder_layers, encoder_attention_heads, decoder_attention_heads,
        encoder_ffn_dim, decoder_ffn_dim: the sizes of §3.1–§3.3 (d_model, N, h, d_ff).
        qk_head_dim: d_k of §3.2.2, the size of each head's queries and keys; None is the paper's d_model / h (64 in
            the base model). Table 3, row (B), varies it alone. (The name is transformers' own for a key size that
            differs from the value size, as in DeepSeek-V3.)
        v_head_dim: d_v of §3.2.2, the size of each head's values; None is d_model / h. W^O maps the h·d_v
            concatenated values back to d_model.
        dropout: P_drop of §5.4, applied to each sub-layer output before the residual add and to the sums of
            embeddings and positional encodings.
        attention_dropout: dropout on the attention weights (a tensor2tensor addition; the paper has none).
        activation_dropout: dropout after the ReLU (a tensor2tensor addition; the paper has none).
        activation_function: the feed-forward non-linearity; the paper uses `"relu"` (§3.3).
        scale_embedding: multiply embeddings by √d_model (§3.4).
        max_position_embeddings: rows of the precomputed sinusoidal table (longer inputs compute the rows they
            need) or the number of learned positions (a hard limit).
        position_encoding: `"sinusoidal"` (§3.5, sin and cos interleaved: PE(pos, 2i) = sin, PE(pos, 2i+1) = cos),
            `"sinusoidal_halves"` (sin in the first half of the dimensions, cos in the second, as transformers'
            Marian lays it out; tensor2tensor's and fairseq's frequencies differ), or `"learned"` (Table 3, row E).
        normalize_before: False is the paper's post-LN `LayerNorm(x + Dropout(Sublayer(x)))`; True is pre-LN
            `x + Dropout(Sublayer(LayerNorm(x)))` with a final LayerNorm after each stack.
        attention_bias: add biases to W^Q, W^K, W^V and W^O (the equations of §3.2.2 have none).
        share_encoder_decoder_embeddings: one embedding matrix for source and target (§3.4, shared BPE vocabulary).
        tie_word_embeddings: tie the target embedding to the pre-softmax projection (§3.4). transformers ties all
            declared pairs or none, so False leaves source embedding, target embedding and projection as three
            separate matrices, whatever `share_encoder_decoder_embeddings` says.
        init_std: None initializes as tensor2tensor and fairseq do (embeddings N(0, d_model^-0.5), projections
            Glorot-uniform; the paper does not say); a float initializes every weight from N(0, init_std) as Bart.
        layer_norm_eps: LayerNorm epsilon (the paper does not say; tensor2tensor uses 1e-6).
        tokenizer_fingerprint: a digest of the tokenizer the model was trained with (vocabulary and special tokens),
            recorded by training so that a folder holding another tokenizer is refused when loaded; None when not
            recorded.
    """

    model_type = "vanilla_transformer"
    keys_to_ignore_at_inference = ["past_key_values", "cache"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    vocab_size: int = 37000
    decoder_vocab_size: int | None = None
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    qk_head_dim: int | None = None
    v_head_dim: int | None = None
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    activation_dropout: float | int = 0.0
    activation_function: str = "relu"
    scale_embedding: bool = True
    max_position_embeddings: int = 1024
    position_encoding: str = "sinusoidal"
    normalize_before: bool = False
    attention_bias: bool = False
    share_encoder_decoder_embeddings: bool = True
    tie_word_embeddings: bool = True
    init_std: float | None = None
    layer_norm_eps: float = 1e-6
    tokenizer_fingerprint: str | None = None
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = 1
    use_cache: bool = True
    is_encoder_decoder: bool = True

    def __post_init__(self, **kwargs):
        if self.decoder_vocab_size is None:
            self.decoder_vocab_size = self.vocab_size
        super().__post_init__(**kwargs)

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "VanillaTransformerConfig":
        """The paper's `base` or `big` model (Table 3), or the small `multi30k` model, with any field overridden."""
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}; choose one of {sorted(PRESETS)}.")
        return cls(**{**PRESETS[name], **overrides})

    def validate_architecture(self) -> None:
        """Part of `@strict` validation (at creation, loading and saving): a `ValueError` that names the field, its
        value and the fix for any inconsistent size or option."""
        super().validate_architecture()
        for name in SIZE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name}={value!r} must be a positive integer; set it to a size > 0.")
        for name in ("qk_head_dim", "v_head_dim"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"{name}={value!r} must be a positive integer, or None for d_model / heads.")
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            heads = getattr(self, name)
            if self.d_model % heads and (self.qk_head_dim is None or self.v_head_dim is None):
                raise ValueError(
                    f"d_model={self.d_model} is not divisible by {name}={heads}; choose a number of heads that "
                    f"divides d_model (the paper: d_model=512 with 8 heads of d_k=64), or set qk_head_dim and "
                    f"v_head_dim (d_k and d_v) yourself."
                )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name}={value!r} is a probability and must lie in [0, 1); the paper uses 0.1.")
        if self.activation_function not in ACTIVATIONS:
            raise ValueError(
                f"activation_function={self.activation_function!r} is not supported; choose one of {ACTIVATIONS} "
                f"(the paper: 'relu')."
            )
        if self.position_encoding not in POSITION_ENCODINGS:
            raise ValueError(
                f"position_encoding={self.position_encoding!r} is unknown; choose one of {POSITION_ENCODINGS} "
                f"(the paper: 'sinusoidal')."
            )
        if self.position_encoding != "learned" and self.d_model % 2:
            raise ValueError(
                f"d_model={self.d_model} is odd, but sinusoidal positions pair a sine and a cosine per frequency; "
                f"use an even d_model or position_encoding='learned'."
            )
        if self.init_std is not None and self.init_std < 0:
            raise ValueError(f"init_std={self.init_std!r} must be >= 0, or None for the tensor2tensor scheme.")
        if self.share_encoder_decoder_embeddings:
            if self.decoder_vocab_size != self.vocab_size:
                raise ValueError(
                    f"decoder_vocab_size={self.decoder_vocab_size} differs from vocab_size={self.vocab_size}, but "
                    f"share_encoder_decoder_embeddings=True needs one vocabulary; set "
                    f"share_encoder_decoder_embeddings=False for separate vocabularies."
                )

    def head_dims(self, num_heads: int) -> tuple[int, int]:
        """(d_k, d_v) of a stack with `num_heads` heads (§3.2.2): the fields if set, else d_model / h."""
        return self.qk_head_dim or self.d_model // num_heads, self.v_head_dim or self.d_model // num_heads

    def validate_token_ids(self) -> None:
        """Part of `@strict` validation: special token ids must lie in the vocabulary they index. transformers only
        warns (configs on the Hub store `pad_token_id=-1`); ours are written by this package, so an id outside is an
        error that names the field."""
        sizes = {
            "vocab_size": self.vocab_size,
            "decoder_vocab_size": self.decoder_vocab_size,
            "min(vocab_size, decoder_vocab_size)": min(self.vocab_size, self.decoder_vocab_size),
        }
        for name, limit_name in (
            ("pad_token_id", "min(vocab_size, decoder_vocab_size)"),
            ("bos_token_id", "decoder_vocab_size"),
            ("eos_token_id", "decoder_vocab_size"),
            ("decoder_start_token_id", "decoder_vocab_size"),
        ):
            value = getattr(self, name)
            for token_id in value if isinstance(value, list) else [value]:
                if token_id is not None and not 0 <= token_id < sizes[limit_name]:
                    raise ValueError(
                        f"{name}={token_id} lies outside the vocabulary ({limit_name}={sizes[limit_name]}); use an "
                        f"id in [0, {sizes[limit_name] - 1}] or enlarge the vocabulary."
                    )


__all__ = ["PRESETS", "VanillaTransformerConfig"]
