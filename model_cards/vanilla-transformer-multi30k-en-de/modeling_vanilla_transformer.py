"""The Transformer of Vaswani et al. 2017, *Attention Is All You Need* (arXiv 1706.03762), as a transformers model.

Post-LayerNorm encoder-decoder (§3.1), scaled dot-product multi-head attention without biases (§3.2), ReLU
feed-forward (§3.3), embeddings scaled by √d_model and shared three ways (§3.4), interleaved sinusoidal positions
(§3.5), dropout on every sub-layer output and on the embedding sums (§5.4).

This file is shipped to the Hub as remote code: it imports only torch, transformers and its configuration file.
"""

import copy
import functools
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import (
    EosTokenCriteria,
    GenerateBeamEncoderDecoderOutput,
    GenerationConfig,
    GenerationMixin,
    GenerationMode,
    LogitsProcessorList,
    MaxLengthCriteria,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.generation.logits_process import (
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    InfNanRemoveLogitsProcessor,
    LogitNormalization,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
)
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
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_vanilla_transformer import VanillaTransformerConfig

logger = logging.get_logger(__name__)

REMOTE_AUTO_MAP = {
    "AutoConfig": "configuration_vanilla_transformer.VanillaTransformerConfig",
    "AutoModel": "modeling_vanilla_transformer.VanillaTransformerModel",
    "AutoModelForSeq2SeqLM": "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration",
}

# transformers 5.24 renamed the decoder cache from `past_key_values` to `cache`: `generate()` passes `cache=` to
# `forward` and the output classes hold a `cache` field. The model takes either name, from either release, and
# returns the field of the installed one (the old name still reads there, with a deprecation warning).
DECODER_CACHE_NAMES = ("past_key_values", "cache")
CACHE_OUTPUT_NAME = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


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

    With `interleaved=False` the sines fill the first half of the dimensions and the cosines the second, as in
    tensor2tensor, fairseq and Marian. Computed in float64 so that far positions keep full float32 precision.
    """
    position = torch.arange(num_positions, dtype=torch.float64, device="cpu").unsqueeze(1)
    inverse_frequency = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64, device="cpu") / dim)
    angles = position * inverse_frequency  # (num_positions, dim / 2)
    if interleaved:
        table = torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(num_positions, dim)
    else:
        table = torch.cat((angles.sin(), angles.cos()), dim=-1)
    return table.float()


def check_token_ids(token_ids: torch.Tensor, vocab_size: int, name: str, ignore_index: int | None = None) -> None:
    """Raise a `ValueError` naming the offending id instead of an IndexError or a device-side assert."""
    if is_torchdynamo_compiling() or token_ids.numel() == 0:
        return
    if ignore_index is not None:
        token_ids = token_ids[token_ids != ignore_index]
        if token_ids.numel() == 0:
            return
    smallest, largest = (int(value) for value in torch.aminmax(token_ids))
    if largest >= vocab_size or smallest < 0:
        bad = largest if largest >= vocab_size else smallest
        allowed = f"[0, {vocab_size - 1}]" + (f" or {ignore_index}" if ignore_index is not None else "")
        raise ValueError(
            f"{name} contains token id {bad} (largest {largest}, smallest {smallest}) but vocab_size is "
            f"{vocab_size}: ids must lie in {allowed}. Use the tokenizer that matches this model, or call "
            f"model.resize_token_embeddings(...) after adding tokens."
        )


def check_shape(tensor: torch.Tensor | None, expected: tuple, name: str, allow_4d: bool = False) -> None:
    """Raise a `ValueError` naming the expected shape (masks may also be 4D, as prepared by the caller)."""
    if tensor is None or (allow_4d and tensor.dim() == 4):
        return
    names = ", ".join(str(size) for size in expected)
    if tensor.dim() != len(expected) or any(
        isinstance(size, int) and actual != size for actual, size in zip(tensor.shape, expected, strict=True)
    ):
        raise ValueError(f"{name} must have shape ({names}), got {tuple(tensor.shape)}.")


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

    def forward(self, seq_length: int, past_length: int | torch.Tensor = 0) -> torch.Tensor:
        table = self.weight
        end = past_length + seq_length
        if isinstance(end, int) and end > table.shape[0]:
            table = self.compute(end).to(device=table.device, dtype=table.dtype)
        position_ids = torch.arange(seq_length, device=table.device) + past_length
        return F.embedding(position_ids, table)  # (seq_length, d_model)


class VanillaTransformerLearnedPositionalEmbedding(nn.Embedding):
    """Learned positional embeddings (Table 3, row E): an option; they cannot extend past their table."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config.max_position_embeddings, config.d_model)

    def forward(self, seq_length: int, past_length: int | torch.Tensor = 0) -> torch.Tensor:
        end = past_length + seq_length
        if isinstance(end, int) and end > self.num_embeddings:
            raise ValueError(
                f"The sequence reaches position {end - 1}, but learned positions exist only for "
                f"max_position_embeddings={self.num_embeddings}; shorten the input or use "
                f"position_encoding='sinusoidal', which extends to any length."
            )
        return super().forward(torch.arange(seq_length, device=self.weight.device) + past_length)


def positional_encoding(config: VanillaTransformerConfig) -> nn.Module:
    if config.position_encoding == "learned":
        return VanillaTransformerLearnedPositionalEmbedding(config)
    return VanillaTransformerSinusoidalPositionalEncoding(config)


def concatenated_projection(*projections: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weight and bias of one linear layer that computes several of the same input side by side."""
    weight = torch.cat([projection.weight for projection in projections])
    bias = projections[0].bias
    if bias is not None:
        bias = torch.cat([projection.bias for projection in projections])
    return weight, bias


class ConcatenatedLinearFunction(torch.autograd.Function):
    """`F.linear` on concatenated weights (one matmul for several projections of the same input) that keeps only the
    separate weights for the backward pass: autograd through `torch.cat` would hold a concatenated copy of every
    projection until the backward pass, more memory than three separate matmuls need."""

    @staticmethod
    def forward(ctx, states: torch.Tensor, num_projections: int, *weights_and_biases: torch.Tensor) -> torch.Tensor:
        device_type = states.device.type
        if torch.is_autocast_enabled(device_type):
            # cast as autocast would cast F.linear's arguments, so that the backward pass runs in the same precision
            dtype = torch.get_autocast_dtype(device_type)
            states, weights_and_biases = states.to(dtype), [tensor.to(dtype) for tensor in weights_and_biases]
        weights, biases = weights_and_biases[:num_projections], weights_and_biases[num_projections:]
        ctx.save_for_backward(states, *weights)
        ctx.num_biases = len(biases)
        with torch.autocast(device_type, enabled=False):
            return F.linear(states, torch.cat(weights), torch.cat(biases) if biases else None)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        states, *weights = ctx.saved_tensors
        grad_states = grad_output @ torch.cat(weights) if ctx.needs_input_grad[0] else None
        flat_grad = grad_output.reshape(-1, grad_output.shape[-1])
        sizes = [weight.shape[0] for weight in weights]
        grad_weights = (flat_grad.T @ states.reshape(-1, states.shape[-1])).split(sizes)
        grad_biases = flat_grad.sum(0).split(sizes) if ctx.num_biases else ()
        return grad_states, None, *grad_weights, *grad_biases


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
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        # sdpa reads `is_causal` from the module; it must be False for encoder and cross-attention
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(config.d_model, config.d_model, bias=config.attention_bias)
        self.k_proj = nn.Linear(config.d_model, config.d_model, bias=config.attention_bias)
        self.v_proj = nn.Linear(config.d_model, config.d_model, bias=config.attention_bias)
        self.out_proj = nn.Linear(config.d_model, config.d_model, bias=config.attention_bias)

    @staticmethod
    def _project(states: torch.Tensor, *projections: nn.Linear) -> torch.Tensor:
        """`states` through several projections at once; their outputs side by side on the last axis."""
        if not torch.is_grad_enabled():
            return F.linear(states, *concatenated_projection(*projections))
        biases = [projection.bias for projection in projections if projection.bias is not None]
        return ConcatenatedLinearFunction.apply(
            states, len(projections), *[projection.weight for projection in projections], *biases
        )

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
        if not is_cross_attention:
            # queries, keys and values of one input: one matmul on the concatenated weights instead of three
            query_states, key_states, value_states = (
                self._project(hidden_states, self.q_proj, self.k_proj, self.v_proj)
                .view(*input_shape, 3, -1, self.head_dim)
                .unbind(-3)
            )
            query_states = query_states.transpose(1, 2)
        else:
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
            if is_cross_attention:
                key_states, value_states = (
                    self._project(key_value_states, self.k_proj, self.v_proj)
                    .view(*key_value_states.shape[:-1], 2, -1, self.head_dim)
                    .unbind(-3)
                )
            key_states = key_states.transpose(1, 2)  # (B, h, T_k, d_k)
            value_states = value_states.transpose(1, 2)
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


class VanillaTransformerEncoderLayer(GradientCheckpointingLayer):
    """Encoder layer, §3.1: self-attention then feed-forward, each wrapped as LayerNorm(x + Dropout(Sublayer(x))).

    With `normalize_before=True` the wrapping is x + Dropout(Sublayer(LayerNorm(x))) (pre-LN) instead.
    """

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__()
        self.normalize_before = config.normalize_before
        self.dropout = config.dropout
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
        residual = hidden_states
        if self.normalize_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states, attention_mask=attention_mask, **kwargs)
        hidden_states = residual + F.dropout(hidden_states, p=self.dropout, training=self.training)
        if not self.normalize_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)

        residual = hidden_states
        if self.normalize_before:
            hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.ffn(hidden_states)
        hidden_states = residual + F.dropout(hidden_states, p=self.dropout, training=self.training)
        if not self.normalize_before:
            hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states


class VanillaTransformerDecoderLayer(GradientCheckpointingLayer):
    """Decoder layer, §3.1: masked self-attention, encoder-decoder attention, feed-forward, each post-LN."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__()
        self.normalize_before = config.normalize_before
        self.dropout = config.dropout
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
        residual = hidden_states
        if self.normalize_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states, _ = self.self_attn(
            hidden_states, past_key_values=past_key_values, attention_mask=attention_mask, **kwargs
        )
        hidden_states = residual + F.dropout(hidden_states, p=self.dropout, training=self.training)
        if not self.normalize_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)

        if encoder_hidden_states is not None:
            residual = hidden_states
            if self.normalize_before:
                hidden_states = self.encoder_attn_layer_norm(hidden_states)
            hidden_states, _ = self.encoder_attn(
                hidden_states,
                key_value_states=encoder_hidden_states,
                attention_mask=encoder_attention_mask,
                past_key_values=past_key_values,
                **kwargs,
            )
            hidden_states = residual + F.dropout(hidden_states, p=self.dropout, training=self.training)
            if not self.normalize_before:
                hidden_states = self.encoder_attn_layer_norm(hidden_states)

        residual = hidden_states
        if self.normalize_before:
            hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.ffn(hidden_states)
        hidden_states = residual + F.dropout(hidden_states, p=self.dropout, training=self.training)
        if not self.normalize_before:
            hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states


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
        """Save as transformers does; a model marked for remote code gets an `auto_map` entry for every Auto class,
        not only for the class that was saved, so `AutoModel` and `AutoModelForSeq2SeqLM` both load the folder."""
        if self._auto_class is not None:
            self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **REMOTE_AUTO_MAP}
        return super().save_pretrained(save_directory, *args, **kwargs)

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


class VanillaTransformerEncoder(VanillaTransformerPreTrainedModel):
    """The encoder stack of §3.1: N identical layers over scaled embeddings plus positional encodings."""

    _can_record_outputs = {
        "hidden_states": VanillaTransformerEncoderLayer,
        "attentions": VanillaTransformerAttention,
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.dropout = config.dropout
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.embed_positions = positional_encoding(config)
        self.layers = nn.ModuleList(
            [VanillaTransformerEncoderLayer(config, layer_idx=i) for i in range(config.encoder_layers)]
        )
        # the paper (post-LN) ends each layer with a LayerNorm already; pre-LN needs one after the stack
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.normalize_before else None
        self.gradient_checkpointing = False
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
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds to the encoder.")
        if inputs_embeds is None:
            check_shape(input_ids, ("batch_size", "sequence_length"), "input_ids")
            check_token_ids(input_ids, self.embed_tokens.num_embeddings, "input_ids")
            inputs_embeds = self.embed_tokens(input_ids)
        check_shape(inputs_embeds, ("batch_size", "sequence_length", self.config.d_model), "inputs_embeds")
        batch_size, seq_length = inputs_embeds.shape[:2]
        if seq_length == 0:  # else a reshape deep inside attention fails with a message about ambiguous sizes
            raise ValueError(
                f"The source is empty (shape {tuple(inputs_embeds.shape[:2])}): give every sentence at least one "
                f"token; the tokenizer's encoding of an empty string is just </s>."
            )
        check_shape(attention_mask, (batch_size, seq_length), "attention_mask", allow_4d=True)

        # §3.4 and §3.5: scaled embeddings plus positions, then dropout on the sums (§5.4)
        hidden_states = inputs_embeds * self.embed_scale + self.embed_positions(seq_length).to(inputs_embeds.dtype)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)

        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask
        )
        for encoder_layer in self.layers:
            hidden_states = encoder_layer(hidden_states, attention_mask, **kwargs)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VanillaTransformerDecoder(VanillaTransformerPreTrainedModel):
    """The decoder stack of §3.1, masked so that position i attends only to positions < i+1 (§3.2.3)."""

    _can_record_outputs = {
        "hidden_states": VanillaTransformerDecoderLayer,
        "attentions": OutputRecorder(VanillaTransformerAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VanillaTransformerAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.dropout = config.dropout
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = nn.Embedding(config.decoder_vocab_size, config.d_model, config.pad_token_id)
        self.embed_positions = positional_encoding(config)
        self.layers = nn.ModuleList(
            [VanillaTransformerDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers)]
        )
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.normalize_before else None
        self.gradient_checkpointing = False
        self.post_init()

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
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of decoder_input_ids or decoder_inputs_embeds to the decoder.")
        if inputs_embeds is None:
            check_shape(input_ids, ("batch_size", "target_length"), "decoder_input_ids")
            check_token_ids(input_ids, self.embed_tokens.num_embeddings, "decoder_input_ids")
            inputs_embeds = self.embed_tokens(input_ids)
        check_shape(inputs_embeds, ("batch_size", "target_length", self.config.d_model), "decoder_inputs_embeds")
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
        causal_mask = create_causal_mask(self.config, inputs_embeds, attention_mask, self_attention_cache)
        encoder_attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )

        positions = self.embed_positions(seq_length, past_length).to(inputs_embeds.dtype)
        hidden_states = inputs_embeds * self.embed_scale + positions
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
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
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, **{CACHE_OUTPUT_NAME: past_key_values}
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
            past_key_values=past_key_values,
            cache=cache,
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


# §6.1: "we used beam search with a beam size of 4 and length penalty α = 0.6 [Wu et al. 2016] ... We set the maximum
# output length during inference to input length + 50, but terminate early when possible." A generation config gets
# each of these where it has no value of its own: a fresh model, or a folder whose generation_config.json lacks them.
PAPER_GENERATION_DEFAULTS = {
    "num_beams": 4,
    "length_penalty": 0.6,
    "early_stopping": True,
    "length_penalty_form": "gnmt",
    "max_new_tokens_over_input": 50,
}
# entries `GenerationConfig` does not define; for them `None` is a setting (no per-sentence limit), not "unset"
CUSTOM_GENERATION_ATTRIBUTES = ("length_penalty_form", "max_new_tokens_over_input")
LENGTH_PENALTY_FORMS = ("gnmt", "hf")
_UNSET = object()  # tells "not passed" from an explicit None

# Logits processors the paper's beam search applies, at the same point as transformers' beam search does. Each keeps
# every log-probability <= 0, so the summed log-probability of a hypothesis never rises as it grows (which makes the
# early stop exact), and each reads only the tokens of a hypothesis, never its row in the batch (rows move as
# finished sentences leave the batch). Any other processor is refused rather than silently dropped.
PAPER_BEAM_SEARCH_LOGITS_PROCESSORS = (
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    InfNanRemoveLogitsProcessor,
    LogitNormalization,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
)


def gnmt_length_penalty(length: int | float | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """The length penalty of Wu et al. 2016 (GNMT) that §6.1 uses with α = 0.6: lp(Y) = ((5 + |Y|) / 6)^α.

    A finished hypothesis Y scores log P(Y|X) / lp(Y). transformers' `length_penalty` divides by |Y|^α instead, a
    different formula. Here |Y| counts the generated tokens, the closing EOS included and the decoder start token
    not, as tensor2tensor (the paper's code) and transformers count.
    """
    return ((5.0 + length) / 6.0) ** alpha


def apply_paper_generation_defaults(generation_config: GenerationConfig) -> GenerationConfig:
    """Give `generation_config`, in place, the decoding of §6.1 wherever it has no setting of its own."""
    changed = False
    for name, value in PAPER_GENERATION_DEFAULTS.items():
        if name in CUSTOM_GENERATION_ATTRIBUTES:
            unset = not hasattr(generation_config, name)
        else:
            unset = getattr(generation_config, name, None) is None
        if unset:
            setattr(generation_config, name, value)
            changed = True
    if changed:
        # a config flagged as derived from config.json drops unknown entries when it is loaded back
        generation_config._from_model_config = False
    return generation_config


class MaxLengthPerSentenceCriteria(StoppingCriteria):
    """Ends each sentence at its own maximum length (§6.1: input length + 50) in transformers' decoding loops.

    `max_lengths` holds one total length (decoder prompt included) per sentence; the rows the loop passes (beams,
    candidates or returned sequences) are grouped by sentence, as `generate` lays them out.
    """

    def __init__(self, max_lengths: torch.Tensor):
        self.max_lengths = max_lengths

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor | None, **kwargs) -> torch.BoolTensor:
        rows_per_sentence = input_ids.shape[0] // self.max_lengths.shape[0]
        max_lengths = self.max_lengths.to(input_ids.device).repeat_interleave(rows_per_sentence)
        return input_ids.shape[-1] >= max_lengths


class VanillaTransformerIncrementalDecoder:
    """The decoder of a trained model run one target position at a time, for `generate` (greedy search and the
    paper's beam search): the same arithmetic as `VanillaTransformerDecoder.forward` with a cache, in fewer and
    larger operations.

    - The source side of every encoder-decoder attention (its keys and values) is projected once per sentence.
    - Each self-attention projects queries, keys and values with one matmul (the three weights concatenated once
      per `generate` call) and writes keys and values into buffers preallocated for `max_length` positions, so no
      step copies the past (a static cache).
    - A single new query may attend to every cached position, so self-attention needs no mask; the source padding
      mask is built once.
    - The output projection multiplies by a transposed copy of the embedding matrix made once per call, which BLAS
      runs faster for few rows than the `(vocab, d_model)` layout.

    Rows may be reordered or dropped between steps (`select_rows`) as beams move and sentences finish.
    """

    def __init__(
        self,
        model: "VanillaTransformerForConditionalGeneration",
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor | None,
        max_length: int,
    ):
        decoder = model.model.decoder
        config = model.config
        self.decoder = decoder
        self.layers = list(decoder.layers)
        self.normalize_before = config.normalize_before
        self.num_heads = config.decoder_attention_heads
        self.head_dim = config.d_model // self.num_heads
        self.embed_scale = decoder.embed_scale
        rows, source_length, _ = encoder_hidden_states.shape
        dtype, device = encoder_hidden_states.dtype, encoder_hidden_states.device

        self.self_qkv = [
            concatenated_projection(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)
            for layer in self.layers
        ]
        self.cross_keys, self.cross_values = [], []
        for layer in self.layers:
            keys, values = (
                VanillaTransformerAttention._project(
                    encoder_hidden_states, layer.encoder_attn.k_proj, layer.encoder_attn.v_proj
                )
                .view(rows, source_length, 2, self.num_heads, self.head_dim)
                .permute(2, 0, 3, 1, 4)
            )
            self.cross_keys.append(keys.contiguous())
            self.cross_values.append(values.contiguous())
        # True where a source position may be attended to; None when no sentence is padded
        self.cross_mask = None
        if encoder_attention_mask is not None and not bool(encoder_attention_mask.all()):
            self.cross_mask = encoder_attention_mask.bool()[:, None, None, :]
        shape = (len(self.layers), rows, self.num_heads, max_length, self.head_dim)
        self.keys = torch.empty(shape, dtype=dtype, device=device)
        self.values = torch.empty(shape, dtype=dtype, device=device)
        self.output_projection = model.lm_head.weight.t().contiguous()
        self.length = 0

    def select_rows(self, rows: torch.Tensor, same_sources: bool = False) -> None:
        """Keep the given rows, in that order (beam reordering and finished sentences leaving). `same_sources` says
        that every row keeps reading the same source sentence (beams of one sentence trading places), so only the
        target side moves."""
        if rows.shape[0] == self.keys.shape[1]:  # a permutation: copy only the filled positions
            self.keys[:, :, :, : self.length] = self.keys[:, rows, :, : self.length]
            self.values[:, :, :, : self.length] = self.values[:, rows, :, : self.length]
        else:
            self.keys = self.keys[:, rows]
            self.values = self.values[:, rows]
        if rows.shape[0] != self.cross_keys[0].shape[0] or not same_sources:
            self.cross_keys = [keys[rows] for keys in self.cross_keys]
            self.cross_values = [values[rows] for values in self.cross_values]
            if self.cross_mask is not None:
                self.cross_mask = self.cross_mask[rows]

    def _attend(self, query, keys, values, attention, mask=None) -> torch.Tensor:
        rows = query.shape[0]
        output = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=attention.scaling)
        return attention.out_proj(output.transpose(1, 2).reshape(rows, 1, -1))

    def _sublayer(self, hidden_states: torch.Tensor, norm: nn.LayerNorm, sublayer) -> torch.Tensor:
        """§3.1's residual wrapping (post-LN), or pre-LN when the config asks for it."""
        if self.normalize_before:
            return hidden_states + sublayer(norm(hidden_states))
        return norm(hidden_states + sublayer(hidden_states))

    def step(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Feed one token per row, `(rows,)`; return the next-token logits, `(rows, vocab)`."""
        rows, position = token_ids.shape[0], self.length
        if position == self.keys.shape[3]:
            raise ValueError(f"the decoding buffers hold {position} positions; pass a larger max_length")
        decoder = self.decoder
        positions = decoder.embed_positions(1, position).to(self.keys.dtype)
        hidden_states = decoder.embed_tokens(token_ids[:, None]) * self.embed_scale + positions
        for index, layer in enumerate(self.layers):

            def self_attention(x, index=index, layer=layer):
                weight, bias = self.self_qkv[index]
                query, key, value = F.linear(x, weight, bias).view(rows, 3, self.num_heads, 1, self.head_dim).unbind(1)
                self.keys[index, :, :, position] = key[:, :, 0]
                self.values[index, :, :, position] = value[:, :, 0]
                keys = self.keys[index, :, :, : position + 1]
                values = self.values[index, :, :, : position + 1]
                return self._attend(query, keys, values, layer.self_attn)

            def cross_attention(x, index=index, layer=layer):
                attention = layer.encoder_attn
                query = attention.q_proj(x).view(rows, 1, self.num_heads, self.head_dim).transpose(1, 2)
                return self._attend(query, self.cross_keys[index], self.cross_values[index], attention, self.cross_mask)

            hidden_states = self._sublayer(hidden_states, layer.self_attn_layer_norm, self_attention)
            hidden_states = self._sublayer(hidden_states, layer.encoder_attn_layer_norm, cross_attention)
            hidden_states = self._sublayer(hidden_states, layer.final_layer_norm, layer.ffn)
        if decoder.layer_norm is not None:
            hidden_states = decoder.layer_norm(hidden_states)
        self.length += 1
        return (hidden_states[:, 0] @ self.output_projection).float()


class VanillaTransformerForConditionalGeneration(VanillaTransformerPreTrainedModel, GenerationMixin):
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
            check_shape(labels, ("batch_size", "target_length"), "labels")
            check_token_ids(labels, self.config.decoder_vocab_size, "labels", ignore_index=-100)
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)

        outputs: Seq2SeqModelOutput = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            encoder_outputs=encoder_outputs,
            decoder_attention_mask=decoder_attention_mask,
            past_key_values=past_key_values,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)

        loss = None
        if labels is not None:
            # summed in float32, then divided by the target tokens of the (accumulated) batch
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum"
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

    @torch.no_grad()
    def generate(
        self,
        inputs: torch.Tensor | None = None,
        generation_config: GenerationConfig | None = None,
        **kwargs,
    ) -> GenerateBeamEncoderDecoderOutput | torch.LongTensor:
        r"""
        [`~GenerationMixin.generate`] with the paper's decoding (§6.1) as the default: beam size 4, the length
        penalty lp(Y) = ((5 + |Y|) / 6)^α of Wu et al. 2016 with α = 0.6, a maximum output length of input length
        + 50 for each sentence, and early stopping when no running hypothesis can still win.

        Two generation-config entries beside transformers' own select it; like any generation option they are set
        in `generation_config.json`, in a `GenerationConfig`, or as keyword arguments of this call:

            length_penalty_form (`str`, the model's default `"gnmt"`): with `num_beams > 1`, `"gnmt"` runs
                [`~VanillaTransformerForConditionalGeneration._paper_beam_search`], which divides by
                ((5 + |Y|) / 6)^α; `"hf"` runs transformers' beam search, which divides by |Y|^α. `num_beams=1`
                (greedy or sampling) always runs transformers' loops.
            max_new_tokens_over_input (`int` or `None`, the model's default 50): every sentence may generate at
                most (its number of non-padding source tokens, special tokens included) + this many tokens, in
                every decoding mode. An explicit `max_new_tokens` or `max_length` caps it further; `None` leaves
                only those (transformers' default is 20 new tokens).

        `generation_config.length_penalty` is α in either form. The paper's beam search supports
        `num_return_sequences <= num_beams`, `return_dict_in_generate=True` (with `sequences_scores`: the summed
        log-probability over lp(|Y|) of each returned hypothesis), `use_cache`, padded batches, a decoder prompt
        (`decoder_input_ids`), and the logits processors in `PAPER_BEAM_SEARCH_LOGITS_PROCESSORS` (min length,
        no-repeat n-grams, bad words, suppressed or forced tokens, repetition penalty). It raises a `ValueError`
        naming any other option it would ignore.
        """
        length_penalty_form = kwargs.pop("length_penalty_form", None)
        over_input = kwargs.pop("max_new_tokens_over_input", _UNSET)
        lean_decoding = kwargs.pop("lean_decoding", True)
        if kwargs.get("custom_generate") is not None:  # the caller brings its own decoding loop
            return super().generate(inputs, generation_config, **kwargs)

        # the generation config `generate` will use: the call's kwargs over `generation_config` over the model's
        resolved, _ = self._prepare_generation_config(generation_config, **kwargs)
        if length_penalty_form is None:
            length_penalty_form = getattr(resolved, "length_penalty_form", None) or "hf"
        if length_penalty_form not in LENGTH_PENALTY_FORMS:
            raise ValueError(
                f"length_penalty_form={length_penalty_form!r} is unknown; use 'gnmt' for the paper's ((5 + |Y|) / 6)^α "
                f"(§6.1, Wu et al. 2016) or 'hf' for transformers' |Y|^α."
            )
        if over_input is _UNSET:
            over_input = getattr(resolved, "max_new_tokens_over_input", None)
        if over_input is not None and (
            isinstance(over_input, bool) or not isinstance(over_input, int) or over_input < 0
        ):
            raise ValueError(
                f"max_new_tokens_over_input={over_input!r} must be an integer >= 0 (the paper: 50), or None for no "
                f"per-sentence limit."
            )
        paper_beam_search = length_penalty_form == "gnmt" and (resolved.num_beams or 1) > 1
        if paper_beam_search:
            self._check_paper_beam_search_options(resolved, kwargs)

        max_new_tokens_per_row = None
        source_lengths = self._source_lengths(inputs, kwargs) if over_input is not None else None
        if source_lengths is not None:
            max_new_tokens_per_row = source_lengths + over_input
            decoder_input_ids = kwargs.get("decoder_input_ids")
            prompt_length = decoder_input_ids.shape[-1] if decoder_input_ids is not None else 1
            if self.config.position_encoding == "learned":  # learned positions end at the table; sinusoids extend
                table_end = self.config.max_position_embeddings - prompt_length
                if bool((max_new_tokens_per_row > table_end).any()):
                    logger.warning_once(
                        f"the output limit (input length + {over_input} tokens) of some sentences is capped at "
                        f"max_position_embeddings={self.config.max_position_embeddings}, where this model's learned "
                        f"positions end; use position_encoding='sinusoidal' for outputs of any length."
                    )
                max_new_tokens_per_row = max_new_tokens_per_row.clamp(max=table_end)
            max_new_tokens_per_row = max_new_tokens_per_row.clamp(min=1)
            explicit_length = any(
                kwargs.get(name) is not None
                or getattr(generation_config, name, None) is not None
                or getattr(self.generation_config, name, None) is not None
                for name in ("max_new_tokens", "max_length")
            )
            if not explicit_length:  # else transformers' default (20 new tokens) would cut the longer sentences
                longest = int(max_new_tokens_per_row.max())
                if generation_config is None:
                    kwargs["max_new_tokens"] = longest
                else:
                    generation_config = copy.deepcopy(generation_config)
                    generation_config.max_new_tokens = longest
            if not paper_beam_search:
                criteria = MaxLengthPerSentenceCriteria(prompt_length + max_new_tokens_per_row)
                kwargs["stopping_criteria"] = StoppingCriteriaList([*(kwargs.get("stopping_criteria") or []), criteria])

        if paper_beam_search:
            # transformers prepares the inputs (encoder output, beams, cache, logits processors), then calls it
            kwargs["custom_generate"] = functools.partial(
                type(self)._paper_beam_search, max_new_tokens_per_row=max_new_tokens_per_row
            )
        elif lean_decoding and self._lean_greedy_applies(resolved, kwargs):
            kwargs["custom_generate"] = type(self)._lean_greedy_search
        return super().generate(inputs, generation_config, **kwargs)

    def _lean_greedy_applies(self, generation_config: GenerationConfig, kwargs: dict) -> bool:
        """Greedy search with nothing the incremental decoder cannot give (per-step outputs, a cache to return or
        continue, decoder padding, assisted decoding, other processes to keep in step)."""
        if generation_config.get_generation_mode() != GenerationMode.GREEDY_SEARCH or is_torchdynamo_compiling():
            return False
        if generation_config.use_cache is False or generation_config.return_dict_in_generate:
            return False
        if any(
            kwargs.get(name) is not None for name in (*DECODER_CACHE_NAMES, "decoder_inputs_embeds", "assistant_model")
        ):
            return False
        decoder_attention_mask = kwargs.get("decoder_attention_mask")
        return not kwargs.get("synced_gpus") and (decoder_attention_mask is None or bool(decoder_attention_mask.all()))

    def _lean_greedy_search(
        self,
        input_ids: torch.LongTensor,
        logits_processor: LogitsProcessorList,
        stopping_criteria: StoppingCriteriaList,
        generation_config: GenerationConfig,
        synced_gpus: bool = False,
        streamer=None,
        **model_kwargs,
    ) -> torch.LongTensor:
        """Greedy search exactly as transformers' `_sample` runs it (the same logits processors, stopping criteria,
        padding of finished rows and streamer), with the model step on a `VanillaTransformerIncrementalDecoder`
        instead of a full `forward` with a dynamic cache. `generate` picks it for greedy search unless
        `lean_decoding=False` or an option needs transformers' loop (see `_lean_greedy_applies`)."""
        pad_token_id = generation_config._pad_token_tensor
        has_eos_stopping_criteria = any(hasattr(criteria, "eos_token_id") for criteria in stopping_criteria)
        decoder = VanillaTransformerIncrementalDecoder(
            self,
            model_kwargs["encoder_outputs"][0],
            model_kwargs.get("attention_mask"),
            max(generation_config.max_length, input_ids.shape[1]),
        )
        for position in range(input_ids.shape[1] - 1):  # a decoder prompt longer than the start token
            decoder.step(input_ids[:, position])
        unfinished_sequences = torch.ones(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
        while True:
            next_token_scores = logits_processor(input_ids, decoder.step(input_ids[:, -1]))
            next_tokens = next_token_scores.argmax(dim=-1)
            if has_eos_stopping_criteria:
                next_tokens = next_tokens * unfinished_sequences + pad_token_id * (1 - unfinished_sequences)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            if streamer is not None:
                streamer.put(next_tokens.cpu())
            unfinished_sequences = unfinished_sequences & ~stopping_criteria(input_ids, next_token_scores)
            if unfinished_sequences.max() == 0:
                break
        if streamer is not None:
            streamer.end()
        return input_ids

    def _source_lengths(self, inputs: torch.Tensor | None, kwargs: dict) -> torch.Tensor | None:
        """The number of non-padding source tokens of each sentence, from whatever `generate` was given."""
        attention_mask = kwargs.get("attention_mask")
        if attention_mask is not None and attention_mask.dim() == 2:
            return attention_mask.long().sum(-1)
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        if input_ids is not None and input_ids.dim() == 2 and not input_ids.is_floating_point():
            if self.config.pad_token_id is None:
                return torch.full(input_ids.shape[:1], input_ids.shape[1], device=input_ids.device)
            return (input_ids != self.config.pad_token_id).long().sum(-1)
        hidden_states = kwargs.get("inputs_embeds")
        if hidden_states is None and kwargs.get("encoder_outputs") is not None:
            hidden_states = kwargs["encoder_outputs"][0]
        if hidden_states is not None:
            return torch.full(hidden_states.shape[:1], hidden_states.shape[1], device=hidden_states.device)
        return None

    def _check_paper_beam_search_options(self, generation_config: GenerationConfig, kwargs: dict) -> None:
        """Refuse, by name, every option the paper's beam search would otherwise ignore."""
        fix = "use length_penalty_form='hf' for transformers' beam search, or num_beams=1"
        problems = []
        if generation_config.do_sample:
            problems.append("do_sample=True (beam sampling)")
        if (getattr(generation_config, "num_beam_groups", None) or 1) > 1 or getattr(
            generation_config, "diversity_penalty", None
        ):
            problems.append("num_beam_groups > 1 or diversity_penalty (diverse beam search)")
        for name in ("constraints", "force_words_ids", "stop_strings", "max_time"):
            if getattr(generation_config, name, None):
                problems.append(f"{name}={getattr(generation_config, name)!r}")
        for name in ("output_scores", "output_logits", "output_attentions", "output_hidden_states", "low_memory"):
            if getattr(generation_config, name, None):
                problems.append(
                    f"{name}=True (the paper's beam search records no per-step outputs; with "
                    f"return_dict_in_generate=True it always returns sequences_scores)"
                    if name == "output_scores"
                    else f"{name}=True"
                )
        for name in (
            "assistant_model",
            "streamer",
            "prefix_allowed_tokens_fn",
            "negative_prompt_ids",
            "decoder_inputs_embeds",
            *DECODER_CACHE_NAMES,
        ):
            if kwargs.get(name) is not None:
                problems.append(
                    f"{name}=... (continuing a beam search from a cache)"
                    if name in DECODER_CACHE_NAMES
                    else f"{name}=..."
                )
        if kwargs.get("synced_gpus"):
            problems.append("synced_gpus=True")
        decoder_attention_mask = kwargs.get("decoder_attention_mask")
        if decoder_attention_mask is not None and not bool(decoder_attention_mask.all()):
            problems.append("a decoder_attention_mask with padding (pass equally long decoder prompts)")
        if problems:
            raise ValueError(
                f"The paper's beam search (length_penalty_form='gnmt', §6.1) does not support {'; '.join(problems)}. "
                f"To get them, {fix}."
            )

    def _paper_beam_search(
        self,
        input_ids: torch.LongTensor,
        logits_processor: LogitsProcessorList,
        stopping_criteria: StoppingCriteriaList,
        generation_config: GenerationConfig,
        max_new_tokens_per_row: torch.Tensor | None = None,
        **model_kwargs,
    ) -> GenerateBeamEncoderDecoderOutput | torch.LongTensor:
        r"""
        The beam search of §6.1, run by `generate` on the inputs it prepared (`num_beams` copies of each sentence).

        The hypothesis bookkeeping is transformers' (and fairseq's) beam search: at each step the best
        2 × num_beams continuations of all running hypotheses are taken by summed log-probability (log-softmax in
        float32, then the logits processors); those among the best num_beams that end with EOS, or reach their
        sentence's maximum length, join the sentence's num_beams finished hypotheses if they score better, and the
        best num_beams that did not end run on. Only the score of a finished hypothesis differs: its summed
        log-probability divided by the GNMT penalty lp(|Y|) = ((5 + |Y|) / 6)^α of Wu et al. 2016, with |Y| the
        generated tokens, EOS included (`gnmt_length_penalty`).

        Each sentence stops at its own maximum length (`max_new_tokens_per_row`, within `generation_config.max_length`)
        or, with `early_stopping=True`, as soon as it holds num_beams finished hypotheses and no running one can
        beat the worst of them: log-probabilities are <= 0 and lp grows with |Y|, so a running hypothesis with summed
        log-probability s can at best finish with s / lp(maximum length). The stop is therefore exact: it returns
        what decoding every sentence to its maximum length (`early_stopping=False`) returns, sooner. Finished
        sentences leave the batch and the cache.

        Returns the best `num_return_sequences` finished hypotheses of each sentence, decoder start token first and
        padding after EOS, or with `return_dict_in_generate=True` a `GenerateBeamEncoderDecoderOutput` that adds
        their scores as `sequences_scores`. With the cache on (the default), the decoder runs incrementally on a
        `VanillaTransformerIncrementalDecoder`.
        """
        for processor in logits_processor:
            if type(processor) not in PAPER_BEAM_SEARCH_LOGITS_PROCESSORS:
                raise ValueError(
                    f"The paper's beam search (length_penalty_form='gnmt', §6.1) does not apply "
                    f"{type(processor).__name__}; it applies only "
                    f"{[kind.__name__ for kind in PAPER_BEAM_SEARCH_LOGITS_PROCESSORS]}. "
                    f"Use length_penalty_form='hf' for transformers' beam search, or num_beams=1."
                )
        for criterion in stopping_criteria:  # EOS and the maximum length are handled below
            if type(criterion) not in (MaxLengthCriteria, EosTokenCriteria):
                raise ValueError(
                    f"The paper's beam search (length_penalty_form='gnmt', §6.1) does not apply the stopping "
                    f"criterion {type(criterion).__name__}; use length_penalty_form='hf' for transformers' beam "
                    f"search, or num_beams=1."
                )

        num_beams = generation_config.num_beams
        num_return_sequences = generation_config.num_return_sequences or 1
        alpha = generation_config.length_penalty
        early_stopping = generation_config.early_stopping is True
        device = self.device  # transformers >= 5.23 accepts inputs on the CPU for a model elsewhere
        input_ids = input_ids.to(device)
        eos_token_id = generation_config._eos_token_tensor
        eos_token_id = eos_token_id.to(device) if eos_token_id is not None else None
        pad_token_id = generation_config._pad_token_tensor
        fill_value = pad_token_id if pad_token_id is not None else (eos_token_id[0] if eos_token_id is not None else 0)
        batch_size = input_ids.shape[0] // num_beams
        prompt_length = input_ids.shape[1]
        num_candidates = max(2, 1 + (eos_token_id.numel() if eos_token_id is not None else 0)) * num_beams
        beams = torch.arange(num_beams, device=device)

        # per sentence: the total length (decoder prompt included) at which every hypothesis ends
        max_lengths = torch.full((batch_size,), generation_config.max_length, device=device)
        if max_new_tokens_per_row is not None:
            max_lengths = torch.minimum(max_lengths, prompt_length + max_new_tokens_per_row.to(device))
        max_lengths = max_lengths.clamp(min=prompt_length + 1)
        longest = int(max_lengths.max())
        max_penalty = gnmt_length_penalty((max_lengths - prompt_length).float(), alpha)

        # (batch_size, num_beams, longest): running hypotheses (first step: beam 0 only), then the finished ones
        sequences = torch.full((batch_size, num_beams, longest), int(fill_value), dtype=torch.long, device=device)
        sequences[:, :, :prompt_length] = input_ids.view(batch_size, num_beams, prompt_length)
        running_scores = torch.zeros((batch_size, num_beams), device=device)
        running_scores[:, 1:] = -math.inf
        finished = sequences.clone()
        finished_scores = torch.full((batch_size, num_beams), -math.inf, device=device)
        finished_lengths = torch.full((batch_size, num_beams), prompt_length, device=device)

        encoder_hidden_states = model_kwargs["encoder_outputs"][0]  # (batch_size * num_beams, source_length, d_model)
        encoder_attention_mask = model_kwargs.get("attention_mask")
        if encoder_attention_mask is not None:
            encoder_attention_mask = encoder_attention_mask.to(device)
        decoder = None
        if model_kwargs.get("use_cache", True):
            decoder = VanillaTransformerIncrementalDecoder(self, encoder_hidden_states, encoder_attention_mask, longest)
            for position in range(prompt_length - 1):
                decoder.step(input_ids[:, position])
        active = torch.arange(batch_size, device=device)  # sentences still searched, in the cache's row order
        cur_len = prompt_length
        while True:
            num_active = active.shape[0]
            running = sequences[active]
            if decoder is not None:
                logits = decoder.step(running[:, :, cur_len - 1].reshape(-1))
            else:
                logits = self(
                    encoder_outputs=BaseModelOutput(last_hidden_state=encoder_hidden_states),
                    attention_mask=encoder_attention_mask,
                    decoder_input_ids=running[:, :, :cur_len].reshape(num_active * num_beams, -1),
                    use_cache=False,
                ).logits[:, -1, :]
            log_probs = F.log_softmax(logits.float(), dim=-1)
            log_probs = logits_processor(running[:, :, :cur_len].reshape(num_active * num_beams, cur_len), log_probs)
            vocab_size = log_probs.shape[-1]
            log_probs = log_probs.view(num_active, num_beams, vocab_size) + running_scores[active][:, :, None]
            top_scores, top_indices = log_probs.view(num_active, -1).topk(num_candidates, dim=1)
            source_beams = top_indices // vocab_size
            candidates = running.gather(1, source_beams[:, :, None].expand(-1, -1, longest))
            candidates[:, :, cur_len] = top_indices % vocab_size
            cur_len += 1

            # candidates that end: with EOS, or at their sentence's maximum length; only the best num_beams may finish
            ends = (cur_len >= max_lengths[active])[:, None].expand(-1, num_candidates)
            if eos_token_id is not None:
                ends = ends | torch.isin(candidates[:, :, cur_len - 1], eos_token_id)
            may_finish = ends & (torch.arange(num_candidates, device=device) < num_beams)
            new_scores = top_scores / gnmt_length_penalty(cur_len - prompt_length, alpha)
            new_scores = new_scores.masked_fill(~may_finish, -math.inf)
            merged_scores, keep = torch.cat((finished_scores[active], new_scores), dim=1).topk(num_beams, dim=1)
            finished_scores[active] = merged_scores
            merged = torch.cat((finished[active], candidates), dim=1)
            finished[active] = merged.gather(1, keep[:, :, None].expand(-1, -1, longest))
            merged_lengths = torch.cat(
                (finished_lengths[active], torch.full_like(new_scores, cur_len, dtype=finished_lengths.dtype)), dim=1
            )
            finished_lengths[active] = merged_lengths.gather(1, keep)

            # the best num_beams candidates that did not end run on
            next_scores, next_indices = top_scores.masked_fill(ends, -math.inf).topk(num_beams, dim=1)
            sequences[active] = candidates.gather(1, next_indices[:, :, None].expand(-1, -1, longest))
            running_scores[active] = next_scores
            next_source_beams = source_beams.gather(1, next_indices)

            # a sentence is done at its maximum length, with no running hypothesis left, or when none can still win
            done = (cur_len >= max_lengths[active]) | (next_scores[:, 0] == -math.inf)
            if early_stopping:
                # lp at the longest remaining length bounds every future score (lp at the next length if α < 0)
                penalty = max_penalty[active].clamp(min=gnmt_length_penalty(cur_len + 1 - prompt_length, alpha))
                done |= next_scores[:, 0] / penalty <= finished_scores[active][:, -1]
            if bool(done.all()):
                break
            keep_rows = (~done).nonzero().squeeze(-1)
            if decoder is not None:  # the beams that run on, of the sentences that run on
                rows = (keep_rows[:, None] * num_beams + next_source_beams[keep_rows]).view(-1)
                decoder.select_rows(rows, same_sources=True)
            if keep_rows.shape[0] < num_active:
                active = active[keep_rows]
                if decoder is None:
                    rows = (keep_rows[:, None] * num_beams + beams).view(-1)
                    encoder_hidden_states = encoder_hidden_states[rows]
                    if encoder_attention_mask is not None:
                        encoder_attention_mask = encoder_attention_mask[rows]

        lengths = finished_lengths[:, :num_return_sequences]
        output = finished[:, :num_return_sequences, : int(lengths.max())].reshape(batch_size * num_return_sequences, -1)
        if not generation_config.return_dict_in_generate:
            return output
        return GenerateBeamEncoderDecoderOutput(
            sequences=output, sequences_scores=finished_scores[:, :num_return_sequences].reshape(-1)
        )


__all__ = [
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
]
