"""The Transformer of Vaswani et al. 2017, *Attention Is All You Need* (arXiv 1706.03762), as a transformers model.

Post-LayerNorm encoder-decoder (§3.1), scaled dot-product multi-head attention without biases (§3.2), ReLU
feed-forward (§3.3), embeddings scaled by √d_model and shared three ways (§3.4), interleaved sinusoidal positions
(§3.5), dropout on every sub-layer output and on the embedding sums (§5.4).

This file is shipped to the Hub as remote code beside the configuration and generation files; it imports only torch,
transformers and those two.
"""

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.utils import can_return_tuple, is_torchdynamo_compiling, logging
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_vanilla_transformer import VanillaTransformerConfig
from .generation_vanilla_transformer import (
    CACHE_OUTPUT_NAME,
    DECODER_CACHE_NAMES,
    VanillaTransformerGenerationMixin,
    apply_paper_generation_defaults,
)

logger = logging.get_logger(__name__)

REMOTE_AUTO_MAP = {
    "AutoConfig": "configuration_vanilla_transformer.VanillaTransformerConfig",
    "AutoModel": "modeling_vanilla_transformer.VanillaTransformerModel",
    "AutoModelForSeq2SeqLM": "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration",
}


def cache_renamed(forward: Callable) -> Callable:
    """transformers 5.24 renamed the decoder cache argument `past_key_values` to `cache`: from that release on, the old
    name warns as in transformers' own models (`@deprecate_kwarg`); before it, `generate` passes the old name."""
    if CACHE_OUTPUT_NAME == "cache":
        return deprecate_kwarg("past_key_values", version="6.0.0", new_name="cache")(forward)
    return forward


def one_decoder_cache(past_key_values: Cache | None, cache: Cache | None) -> Cache | None:
    """The decoder cache passed as `past_key_values` (transformers < 5.24) or as `cache` (5.24 and later)."""
    if past_key_values is not None and cache is not None:
        raise ValueError(
            "Both `past_key_values` and `cache` were given; they name the same decoder cache (transformers 5.24 "
            "renamed `past_key_values` to `cache`). Pass it once."
        )
    return cache if cache is not None else past_key_values


def shift_tokens_right(input_ids: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing: the decoder reads the target shifted right by one, starting from `decoder_start_token_id`."""
    shifted_input_ids = input_ids.new_zeros(input_ids.shape)
    shifted_input_ids[:, 1:] = input_ids[:, :-1].clone()
    shifted_input_ids[:, 0] = decoder_start_token_id
    # labels mark ignored positions with -100; the decoder must read them as padding
    shifted_input_ids.masked_fill_(shifted_input_ids == -100, pad_token_id)
    return shifted_input_ids


def sinusoidal_position_encoding(num_positions: int, dim: int, interleaved: bool = True) -> torch.Tensor:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    With `interleaved=False` the sines fill the first half of the dimensions and the cosines the second, as
    transformers' Marian lays them out (tensor2tensor and fairseq do too, but space their frequencies by
    log(10000)/(d/2 − 1), so their tables differ). Computed in float64 so that far positions keep float32 precision.
    """
    position = torch.arange(num_positions, dtype=torch.float64, device="cpu").unsqueeze(1)
    inverse_frequency = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64, device="cpu") / dim)
    angles = position * inverse_frequency  # (num_positions, dim / 2)
    if interleaved:
        table = torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(num_positions, dim)
    else:
        table = torch.cat((angles.sin(), angles.cos()), dim=-1)
    return table.float()


def check_shape(tensor: torch.Tensor | None, expected: tuple, name: str, allow_4d: bool = False) -> None:
    """Raise a `ValueError` naming the expected shape (masks may also be 4D, as prepared by the caller)."""
    if tensor is None or (allow_4d and tensor.dim() == 4):
        return
    if tensor.dim() != len(expected) or any(
        isinstance(size, int) and actual != size for actual, size in zip(tensor.shape, expected, strict=True)
    ):
        # formatted only here: under torch.compile with dynamic shapes, str() of a symbolic size breaks the graph
        names = ", ".join(str(size) for size in expected)
        raise ValueError(f"{name} must have shape ({names}), got {tuple(tensor.shape)}.")


def check_integer_ids(token_ids: torch.Tensor, name: str, embeds_name: str | None = None) -> None:
    """Raise a `ValueError` naming the dtype of token ids that are not int64 or int32 (floats, bools, or the integer
    types `F.embedding` does not take), instead of that raw error, or a cross-entropy that reads float labels as
    class probabilities. A dtype is known while tracing: under torch.compile this costs nothing and breaks no graph."""
    if token_ids.dtype not in (torch.int64, torch.int32):
        vectors = f" (or pass vectors as {embeds_name})" if embeds_name else ""
        raise ValueError(
            f"{name} must hold integer token ids (torch.long or torch.int), got dtype {token_ids.dtype}; convert "
            f"them with {name}.long(){vectors}."
        )


def positions_from_mask(attention_mask: torch.Tensor | None, seq_length: int) -> torch.Tensor | None:
    """The position of each of the last `seq_length` tokens: the number of unmasked tokens before it, as fairseq's
    `make_positions` counts, so that padding on either side leaves a sentence's positions (and translation) as they
    are alone. None without a 2D padding mask: positions are then the indices."""
    if attention_mask is None or attention_mask.dim() != 2:
        return None
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -seq_length:]


class VanillaTransformerSinusoidalPositionalEncoding(nn.Module):
    """Fixed positional encodings of §3.5, added to the scaled embeddings; positions start at 0.

    The first `max_position_embeddings` rows are precomputed; longer sequences compute the rows they need
    ("it may allow the model to extrapolate to sequence lengths longer than the ones encountered during
    training"), so positions never wrap.
    """

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.dim = config.d_model
        self.interleaved = config.position_encoding == "sinusoidal"
        # not persistent: the table is a function of the config, recomputed in `_init_weights` after loading
        self.register_buffer("weight", self.compute(config.max_position_embeddings), persistent=False)

    def compute(self, num_positions: int) -> torch.Tensor:
        return sinusoidal_position_encoding(num_positions, self.dim, self.interleaved)

    def forward(
        self, seq_length: int, past_length: int | torch.Tensor = 0, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The encodings of positions `past_length` … `past_length + seq_length - 1`, `(seq_length, d_model)`, or of
        `position_ids` (counted from the attention mask, none above those), `(batch_size, seq_length, d_model)`."""
        table = self.weight
        end = past_length + seq_length
        if isinstance(end, int) and end > table.shape[0]:
            table = self.compute(end).to(device=table.device, dtype=table.dtype)
        if position_ids is None:
            position_ids = torch.arange(seq_length, device=table.device) + past_length
        return F.embedding(position_ids, table)


class VanillaTransformerLearnedPositionalEmbedding(nn.Embedding):
    """Learned positional embeddings (Table 3, row E): an option; they cannot extend past their table."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config.max_position_embeddings, config.d_model)

    def forward(
        self, seq_length: int, past_length: int | torch.Tensor = 0, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        if position_ids is None:
            position_ids = torch.arange(seq_length, device=self.weight.device) + past_length
        end = past_length + seq_length
        if isinstance(end, int) and end > self.num_embeddings and not is_torchdynamo_compiling():
            end = int(position_ids.max()) + 1  # padding counts no position: the real end may lie lower
        if isinstance(end, int) and end > self.num_embeddings:
            raise ValueError(
                f"The sequence reaches position {end - 1}, but learned positions exist only for "
                f"max_position_embeddings={self.num_embeddings}; shorten the input or use "
                f"position_encoding='sinusoidal', which extends to any length."
            )
        return super().forward(position_ids)


def positional_encoding(config: VanillaTransformerConfig) -> nn.Module:
    if config.position_encoding == "learned":
        return VanillaTransformerLearnedPositionalEmbedding(config)
    return VanillaTransformerSinusoidalPositionalEncoding(config)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, §3.2.1: softmax(QKᵀ/√d_k)V; masked positions get the dtype's minimum."""
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, h, T_q, T_k)
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value).transpose(1, 2).contiguous()  # (B, T_q, h, d_k)
    return attn_output, attn_weights


class VanillaTransformerAttention(nn.Module):
    """Multi-head attention, §3.2.2: Concat(head_1, …, head_h)W^O with head_i = Attention(QW_i^Q, KW_i^K, VW_i^V).

    Used three ways (§3.2.3): encoder self-attention, masked decoder self-attention, and encoder-decoder
    attention whose keys and values come from the encoder output (computed once per sequence when caching).
    """

    def __init__(
        self,
        config: VanillaTransformerConfig,
        num_heads: int,
        is_causal: bool = False,
        layer_idx: int | None = None,
    ):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim, self.value_head_dim = config.head_dims(num_heads)  # d_k, d_v
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        # sdpa reads `is_causal` from the module; it must be False for encoder and cross-attention
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(config.d_model, num_heads * self.head_dim, bias=config.attention_bias)
        self.k_proj = nn.Linear(config.d_model, num_heads * self.head_dim, bias=config.attention_bias)
        self.v_proj = nn.Linear(config.d_model, num_heads * self.value_head_dim, bias=config.attention_bias)
        self.out_proj = nn.Linear(num_heads * self.value_head_dim, config.d_model, bias=config.attention_bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        is_cross_attention = key_value_states is not None
        input_shape = hidden_states.shape[:-1]
        query_states = self.q_proj(hidden_states).view(*input_shape, -1, self.head_dim).transpose(1, 2)

        cache = None
        is_updated = False
        if past_key_values is not None:
            if isinstance(past_key_values, EncoderDecoderCache):
                is_updated = past_key_values.is_updated.get(self.layer_idx)
                cache = (
                    past_key_values.cross_attention_cache
                    if is_cross_attention
                    else past_key_values.self_attention_cache
                )
            else:
                cache = past_key_values

        if is_cross_attention and cache is not None and is_updated:
            # the encoder output does not change while decoding: reuse its projected keys and values
            key_states = cache.layers[self.layer_idx].keys
            value_states = cache.layers[self.layer_idx].values
        else:
            key_value_states = key_value_states if is_cross_attention else hidden_states
            length = key_value_states.shape[:-1]  # (B, T_k)
            key_states = self.k_proj(key_value_states).view(*length, -1, self.head_dim).transpose(1, 2)
            value_states = self.v_proj(key_value_states).view(*length, -1, self.value_head_dim).transpose(1, 2)
            if cache is not None:
                key_states, value_states = cache.update(key_states, value_states, self.layer_idx)
                if is_cross_attention and isinstance(past_key_values, EncoderDecoderCache):
                    past_key_values.is_updated[self.layer_idx] = True

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.dropout,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.out_proj(attn_output), attn_weights


class VanillaTransformerFeedForward(nn.Module):
    """Position-wise feed-forward network, §3.3: FFN(x) = max(0, xW₁ + b₁)W₂ + b₂."""

    def __init__(self, config: VanillaTransformerConfig, ffn_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, config.d_model)
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = F.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)


class VanillaTransformerLayer(GradientCheckpointingLayer):
    """What the layers of §3.1 share: each sub-layer is wrapped as LayerNorm(x + Dropout(Sublayer(x))) (§3.1, with the
    dropout of §5.4), or, with `normalize_before=True` (pre-LN), as x + Dropout(Sublayer(LayerNorm(x)))."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.normalize_before = config.normalize_before
        self.dropout = config.dropout

    def residual(
        self, sublayer: nn.Module, layer_norm: nn.LayerNorm, hidden_states: torch.Tensor, **kwargs
    ) -> torch.Tensor:
        output = sublayer(layer_norm(hidden_states) if self.normalize_before else hidden_states, **kwargs)
        if isinstance(output, tuple):  # attention returns its weights too; the output recorders capture them
            output = output[0]
        hidden_states = hidden_states + F.dropout(output, p=self.dropout, training=self.training)
        return hidden_states if self.normalize_before else layer_norm(hidden_states)


class VanillaTransformerEncoderLayer(VanillaTransformerLayer):
    """Encoder layer, §3.1: self-attention, then the feed-forward network."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__(config)
        self.self_attn = VanillaTransformerAttention(config, config.encoder_attention_heads, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = VanillaTransformerFeedForward(config, config.encoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        hidden_states = self.residual(
            self.self_attn, self.self_attn_layer_norm, hidden_states, attention_mask=attention_mask, **kwargs
        )
        return self.residual(self.ffn, self.final_layer_norm, hidden_states)


class VanillaTransformerDecoderLayer(VanillaTransformerLayer):
    """Decoder layer, §3.1: masked self-attention, encoder-decoder attention, then the feed-forward network."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__(config)
        heads = config.decoder_attention_heads
        self.self_attn = VanillaTransformerAttention(config, heads, is_causal=True, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.encoder_attn = VanillaTransformerAttention(config, heads, layer_idx=layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = VanillaTransformerFeedForward(config, config.decoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = True,
        **kwargs,
    ) -> torch.Tensor:
        hidden_states = self.residual(
            self.self_attn,
            self.self_attn_layer_norm,
            hidden_states,
            past_key_values=past_key_values,
            attention_mask=attention_mask,
            **kwargs,
        )
        if encoder_hidden_states is not None:
            hidden_states = self.residual(
                self.encoder_attn,
                self.encoder_attn_layer_norm,
                hidden_states,
                key_value_states=encoder_hidden_states,
                attention_mask=encoder_attention_mask,
                past_key_values=past_key_values,
                **kwargs,
            )
        return self.residual(self.ffn, self.final_layer_norm, hidden_states)


@contextmanager
def own_class(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block, `model` is of its own class again where FSDP2's `fully_shard` gave it one of torch's making
    (`FSDP<Name>`, defined in a torch module), which transformers would otherwise save as the model's: config.json's
    `architectures` and `auto_map` would name it, and torch's files would be copied as the model's remote code."""
    fsdp_class = type(model)
    model.__class__ = next(c for c in fsdp_class.__mro__ if not c.__module__.startswith("torch.distributed."))
    try:
        yield model
    finally:
        model.__class__ = fsdp_class


class VanillaTransformerPreTrainedModel(PreTrainedModel):
    config: VanillaTransformerConfig
    config_class = VanillaTransformerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VanillaTransformerEncoderLayer", "VanillaTransformerDecoderLayer"]
    _skip_keys_device_placement = list(DECODER_CACHE_NAMES)
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save as transformers does, with `auto_map` entries for every Auto class (`add_remote_auto_map`)."""
        self.add_remote_auto_map()
        with own_class(self):
            return super().save_pretrained(save_directory, *args, **kwargs)

    def add_remote_auto_map(self) -> None:
        """A model marked for remote code gets an `auto_map` entry for every Auto class, not only for the class that
        was saved, so `AutoModel` and `AutoModelForSeq2SeqLM` both load the saved folder. Any other entry is kept."""
        if self._auto_class is not None:
            self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **REMOTE_AUTO_MAP}

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """The paper does not say; by default follow tensor2tensor/fairseq: embeddings N(0, d_model^-0.5), so that
        after the √d_model scaling of §3.4 they have unit variance, and Glorot-uniform projections. A float
        `init_std` draws every weight from N(0, init_std) instead, as Bart does."""
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            if std is None:
                init.xavier_uniform_(module.weight)
            else:
                init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=self.config.d_model**-0.5 if std is None else std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, VanillaTransformerSinusoidalPositionalEncoding):
            init.copy_(module.weight, module.compute(module.weight.shape[0]))


class VanillaTransformerStack(VanillaTransformerPreTrainedModel):
    """What the encoder and decoder stacks of §3.1 share: token embeddings scaled by √d_model (§3.4) plus positional
    encodings (§3.5) with dropout on the sums (§5.4), N identical layers, and, for pre-LN only, a final LayerNorm."""

    def __init__(self, config: VanillaTransformerConfig, vocab_size: int, layers: list[nn.Module]):
        super().__init__(config)
        self.dropout = config.dropout
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = nn.Embedding(vocab_size, config.d_model, config.pad_token_id)
        self.embed_positions = positional_encoding(config)
        self.layers = nn.ModuleList(layers)
        # the paper (post-LN) ends each layer with a LayerNorm already; pre-LN needs one after the stack
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.normalize_before else None
        self.gradient_checkpointing = False

    def input_embeddings(
        self, input_ids: torch.LongTensor | None, inputs_embeds: torch.Tensor | None, names: tuple[str, str, str]
    ) -> torch.Tensor:
        """The token embeddings of `input_ids`, or `inputs_embeds` as given, their shapes checked; `names` are the
        user-facing names of the ids, the embeddings and the sequence dimension."""
        ids_name, embeds_name, length_name = names
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"Pass exactly one of {ids_name} or {embeds_name} to the {type(self).__name__}.")
        if inputs_embeds is None:
            check_integer_ids(input_ids, ids_name, embeds_name)
            check_shape(input_ids, ("batch_size", length_name), ids_name)
            inputs_embeds = self.embed_tokens(input_ids)
        check_shape(inputs_embeds, ("batch_size", length_name, self.config.d_model), embeds_name)
        return inputs_embeds

    def add_positions(self, inputs_embeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """§3.4 and §3.5: scaled embeddings plus positions, then dropout on the sums (§5.4)."""
        hidden_states = inputs_embeds * self.embed_scale + positions.to(inputs_embeds.dtype)
        return F.dropout(hidden_states, p=self.dropout, training=self.training)

    def final_layer_norm(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(hidden_states) if self.layer_norm is not None else hidden_states


class VanillaTransformerEncoder(VanillaTransformerStack):
    """The encoder stack of §3.1: N identical layers over scaled embeddings plus positional encodings."""

    _can_record_outputs = {
        "hidden_states": VanillaTransformerEncoderLayer,
        "attentions": VanillaTransformerAttention,
    }

    def __init__(self, config: VanillaTransformerConfig):
        layers = [VanillaTransformerEncoderLayer(config, layer_idx=i) for i in range(config.encoder_layers)]
        super().__init__(config, config.vocab_size, layers)
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        names = ("input_ids", "inputs_embeds", "sequence_length")
        inputs_embeds = self.input_embeddings(input_ids, inputs_embeds, names)
        batch_size, seq_length = inputs_embeds.shape[:2]
        if seq_length == 0:  # else a reshape deep inside attention fails with a message about ambiguous sizes
            raise ValueError(
                f"The source is empty (shape {tuple(inputs_embeds.shape[:2])}): give every sentence at least one "
                f"token; the tokenizer's encoding of an empty string is just </s>."
            )
        check_shape(attention_mask, (batch_size, seq_length), "attention_mask", allow_4d=True)

        positions = self.embed_positions(seq_length, position_ids=positions_from_mask(attention_mask, seq_length))
        hidden_states = self.add_positions(inputs_embeds, positions)

        # a given mask is always built: transformers would skip one without padding, but finding that out reads
        # `mask.all()` on the host, a device sync in every forward
        attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            allow_is_bidirectional_skip=attention_mask is None,
        )
        for encoder_layer in self.layers:
            hidden_states = encoder_layer(hidden_states, attention_mask, **kwargs)
        return BaseModelOutput(last_hidden_state=self.final_layer_norm(hidden_states))


class VanillaTransformerDecoder(VanillaTransformerStack):
    """The decoder stack of §3.1, masked so that position i attends only to positions < i+1 (§3.2.3)."""

    _can_record_outputs = {
        "hidden_states": VanillaTransformerDecoderLayer,
        "attentions": OutputRecorder(VanillaTransformerAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VanillaTransformerAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: VanillaTransformerConfig):
        layers = [VanillaTransformerDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers)]
        super().__init__(config, config.decoder_vocab_size, layers)
        self.post_init()

    @cache_renamed
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        inputs_embeds = self.input_embeddings(
            input_ids, inputs_embeds, ("decoder_input_ids", "decoder_inputs_embeds", "target_length")
        )
        batch_size, seq_length = inputs_embeds.shape[:2]

        past_key_values = one_decoder_cache(past_key_values, cache)
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        mask_length = past_length + seq_length if isinstance(past_length, int) else "past_length + target_length"
        check_shape(attention_mask, (batch_size, mask_length), "decoder_attention_mask", allow_4d=True)
        if encoder_hidden_states is not None:
            check_shape(
                encoder_attention_mask,
                (batch_size, encoder_hidden_states.shape[1]),
                "attention_mask (the encoder's padding mask)",
                allow_4d=True,
            )
        self_attention_cache = (
            past_key_values.self_attention_cache
            if isinstance(past_key_values, EncoderDecoderCache)
            else past_key_values
        )
        # positional, as the cache argument is `past_key_values` before transformers 5.24 and `cache` from it
        # given masks are always built, as in the encoder: no host read of `mask.all()` to skip them
        causal_mask = create_causal_mask(
            self.config,
            inputs_embeds,
            attention_mask,
            self_attention_cache,
            allow_is_causal_skip=attention_mask is None,
        )
        encoder_attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
            allow_is_bidirectional_skip=encoder_attention_mask is None,
        )

        position_ids = positions_from_mask(attention_mask, seq_length)
        hidden_states = self.add_positions(inputs_embeds, self.embed_positions(seq_length, past_length, position_ids))
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,  # positional, for reentrant gradient checkpointing
                encoder_attention_mask=encoder_attention_mask,
                past_key_values=past_key_values,
                use_cache=use_cache,
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=self.final_layer_norm(hidden_states), **{CACHE_OUTPUT_NAME: past_key_values}
        )


class VanillaTransformerModel(VanillaTransformerPreTrainedModel):
    """The encoder-decoder of Figure 1 without the output projection; returns the decoder's last hidden states."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        if config.share_encoder_decoder_embeddings:
            # §3.4: one matrix for source and target embeddings (a shared source-target BPE vocabulary)
            self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
            self._tied_weights_keys = {
                "encoder.embed_tokens.weight": "shared.weight",
                "decoder.embed_tokens.weight": "shared.weight",
            }
        else:
            self._tied_weights_keys = None
        self.encoder = VanillaTransformerEncoder(config)
        self.decoder = VanillaTransformerDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        if self.config.share_encoder_decoder_embeddings:
            self.shared = value
            self.decoder.embed_tokens = value
        self.encoder.embed_tokens = value

    @cache_renamed
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        r"""
        Args:
            input_ids: source token ids, `(batch_size, source_length)`.
            attention_mask: 1 for source tokens, 0 for padding, `(batch_size, source_length)`; used by encoder
                self-attention and by encoder-decoder attention.
            decoder_input_ids: target ids shifted right (see `shift_tokens_right`), `(batch_size, target_length)`.
            decoder_attention_mask: 1 for target tokens, 0 for padding; the causal mask is always applied.
            encoder_outputs: a precomputed encoder output, reused across decoding steps.
            past_key_values: an `EncoderDecoderCache` of the decoder's self- and cross-attention keys and values.
            cache: the same, under the name transformers uses from 5.24 on; pass one of the two.
        """
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs[0],
            encoder_attention_mask=attention_mask,
            **{CACHE_OUTPUT_NAME: one_decoder_cache(past_key_values, cache)},
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_OUTPUT_NAME: getattr(decoder_outputs, CACHE_OUTPUT_NAME)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class VanillaTransformerForConditionalGeneration(VanillaTransformerGenerationMixin, VanillaTransformerPreTrainedModel):
    """The full model of Figure 1: encoder-decoder plus the pre-softmax linear projection tied to the embeddings
    (§3.4), trained with cross-entropy on the next target token. `generate` decodes as §6.1 does by default."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.model = VanillaTransformerModel(config)
        if config.share_encoder_decoder_embeddings:
            self._tied_weights_keys = {"lm_head.weight": "model.shared.weight"}
        else:
            self._tied_weights_keys = {"lm_head.weight": "model.decoder.embed_tokens.weight"}
        # §3.4: logits = h·Eᵀ, with no bias (unlike Marian's `final_logits_bias`)
        self.lm_head = nn.Linear(config.d_model, config.decoder_vocab_size, bias=False)
        self.post_init()
        if getattr(self, "generation_config", None) is not None:
            apply_paper_generation_defaults(self.generation_config)  # §6.1 decoding unless told otherwise

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if module is self.lm_head:
            # an untied output projection is initialized like an embedding, so that the logits start at unit scale
            std = self.config.init_std
            init.normal_(module.weight, mean=0.0, std=self.config.d_model**-0.5 if std is None else std)
        else:
            super()._init_weights(module)

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if self.config.share_encoder_decoder_embeddings:
            self.config.decoder_vocab_size = self.config.vocab_size
        return embeddings

    @cache_renamed
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        r"""
        Args:
            labels: target ids `(batch_size, target_length)`, -100 where no loss is wanted. They are **not**
                shifted inside the loss: `labels[:, i]` is the target of `logits[:, i]`. Without
                `decoder_input_ids`, the decoder reads `shift_tokens_right(labels)`.
            kwargs: `num_items_in_batch` (passed by `Trainer`) divides the summed loss by the number of target
                tokens in the whole accumulated batch, so gradient accumulation gives the large-batch gradient.

        See [`VanillaTransformerModel.forward`] for the other arguments.
        """
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        if labels is not None:
            check_integer_ids(labels, "labels")
            check_shape(labels, ("batch_size", "target_length"), "labels")
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)

        outputs: Seq2SeqModelOutput = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            encoder_outputs=encoder_outputs,
            decoder_attention_mask=decoder_attention_mask,
            **{CACHE_OUTPUT_NAME: one_decoder_cache(past_key_values, cache)},
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)

        loss = None
        if labels is not None:
            # summed in float32, then divided by the target tokens of the (accumulated) batch; cross_entropy takes
            # int64 targets only, int32 labels as they are (a no-op for int64)
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]),
                labels.reshape(-1).long(),
                ignore_index=-100,
                reduction="sum",
            )
            if num_items_in_batch is None:
                num_items_in_batch = (labels != -100).sum()
            if isinstance(num_items_in_batch, torch.Tensor):
                num_items_in_batch = num_items_in_batch.to(loss.device)
            loss = loss / num_items_in_batch

        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **{CACHE_OUTPUT_NAME: getattr(outputs, CACHE_OUTPUT_NAME)},
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def adjust_generation_fn(self, *args, **kwargs) -> None:
        """Load the generation config as transformers does, then fill in the paper's decoding (§6.1) where the
        loaded config says nothing (a checkpoint without generation_config.json, or one saved before it existed)."""
        super().adjust_generation_fn(*args, **kwargs)
        apply_paper_generation_defaults(self.generation_config)


__all__ = [
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
]
