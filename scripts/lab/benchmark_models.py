"""The models the speed benchmarks (`benchmark.py`, `gpu_speed.py`) run side by side, each built with the same sizes,
one step of each workload for each, and the timer: this model, transformers' `MarianMTModel` configured as the paper's
Transformer, a plain `torch.nn.Transformer`, and CTranslate2's engine on this model's export."""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import CompileConfig, GenerationConfig, MarianConfig, MarianMTModel

from vanilla_transformer.errors import VanillaTransformerError
from vanilla_transformer.model.configuration_vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.model.modeling_vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    sinusoidal_position_encoding,
)
from vanilla_transformer.training.optimization import paper_adam

PAD, BOS, EOS = 0, 1, 2
MODELS = ("vanilla", "marian", "torch")
# generation only: the vanilla model exported to CTranslate2 (`ctranslate2_engine`), weights in float32 or int8
CTRANSLATE2 = {"ctranslate2_float32": "float32", "ctranslate2_int8": "int8"}


@dataclass(frozen=True)
class Workloads:
    """The shapes measured; the defaults fit a 2-core CPU in a few minutes."""

    train_batch_size: int = 16
    train_source_length: int = 24
    train_target_length: int = 24
    generate_source_length: int = 24
    new_tokens: int = 32
    greedy_batch_sizes: tuple[int, ...] = (1, 32)
    beam_batch_size: int = 8
    num_beams: int = 4


def vanilla_config(preset: str = "base", vocab_size: int = 8000, **overrides) -> VanillaTransformerConfig:
    """The model under test: a preset (the paper's base by default) with a shared vocabulary of `vocab_size`."""
    return VanillaTransformerConfig.from_preset(
        preset,
        vocab_size=vocab_size,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
        **overrides,
    )


def marian_config(config: VanillaTransformerConfig) -> MarianConfig:
    """`MarianConfig` with the same dimensions, activation, dropouts, embedding scaling and sharing."""
    return MarianConfig(
        vocab_size=config.vocab_size,
        decoder_vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads,
        encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim,
        activation_function="relu",
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        max_position_embeddings=config.max_position_embeddings,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
        forced_eos_token_id=None,
    )


class TorchTransformerTranslator(nn.Module):
    """A plain `torch.nn.Transformer` translation model of the same sizes: shared scaled embeddings, sinusoidal
    positions, post-LN layers and a tied output projection. It has no incremental decoding cache, so greedy
    decoding re-runs the decoder over the whole prefix at every step, as `nn.Transformer` users do."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.d_model, padding_idx=PAD)
        self.register_buffer("positions", sinusoidal_position_encoding(config.max_position_embeddings, config.d_model))
        self.scale = math.sqrt(config.d_model)
        self.dropout = config.dropout
        self.transformer = nn.Transformer(
            d_model=config.d_model,
            nhead=config.encoder_attention_heads,
            num_encoder_layers=config.encoder_layers,
            num_decoder_layers=config.decoder_layers,
            dim_feedforward=config.encoder_ffn_dim,
            dropout=config.dropout,
            batch_first=True,
        )

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(ids) * self.scale + self.positions[: ids.shape[1]]
        return F.dropout(hidden, self.dropout, self.training)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.transformer.encoder(self._embed(input_ids), src_key_padding_mask=attention_mask == 0)

    def decode(self, decoder_input_ids: torch.Tensor, memory: torch.Tensor, attention_mask: torch.Tensor):
        length = decoder_input_ids.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(length, device=memory.device, dtype=memory.dtype)
        hidden = self.transformer.decoder(
            self._embed(decoder_input_ids),
            memory,
            tgt_mask=causal,
            tgt_is_causal=True,
            memory_key_padding_mask=attention_mask == 0,
        )
        return hidden @ self.embed.weight.T

    def forward(self, input_ids, attention_mask, decoder_input_ids, labels) -> torch.Tensor:
        logits = self.decode(decoder_input_ids, self.encode(input_ids, attention_mask), attention_mask)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)

    @torch.no_grad()
    def greedy(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, new_tokens: int) -> torch.Tensor:
        memory = self.encode(input_ids, attention_mask)
        output = torch.full((input_ids.shape[0], 1), BOS, dtype=torch.long, device=input_ids.device)
        for _ in range(new_tokens):
            logits = self.decode(output, memory, attention_mask)[:, -1]
            logits[:, EOS] = -math.inf  # the same number of tokens as the other models
            output = torch.cat((output, logits.argmax(-1, keepdim=True)), dim=1)
        return output


def build_benchmark_model(name: str, config: VanillaTransformerConfig, attn_implementation: str = "sdpa") -> nn.Module:
    torch.manual_seed(0)
    if name == "vanilla":
        config._attn_implementation = attn_implementation
        return VanillaTransformerForConditionalGeneration(config)
    if name == "marian":
        marian = marian_config(config)
        marian._attn_implementation = attn_implementation
        model = MarianMTModel(marian)
        # Marian's own generation defaults ban the pad token (bad_words_ids) at every step; neither other model
        # does, so compare the same search
        model.generation_config = GenerationConfig(
            pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=BOS, bos_token_id=BOS
        )
        return model
    if name == "torch":
        return TorchTransformerTranslator(config)
    raise VanillaTransformerError(f"unknown model {name!r}; choose from {MODELS}")


def random_batch(
    batch_size: int, source_length: int, target_length: int, vocab_size: int, seed: int = 0, device="cpu"
) -> dict[str, torch.Tensor]:
    """Random token ids with lengths between half and all of the given ones, padded on the right, on `device`;
    labels end with EOS and use -100 on padding."""
    generator = torch.Generator().manual_seed(seed)

    def side(length: int) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = torch.randint(max(length // 2, 1), length + 1, (batch_size,), generator=generator)
        lengths[0] = length  # the batch is as long as asked
        ids = torch.randint(EOS + 1, vocab_size, (batch_size, length), generator=generator)
        mask = torch.arange(length)[None, :] < lengths[:, None]
        ids[torch.arange(batch_size), lengths - 1] = EOS
        return ids.masked_fill(~mask, PAD), mask.long()

    input_ids, attention_mask = side(source_length)
    labels, label_mask = side(target_length)
    labels = labels.masked_fill(label_mask == 0, -100)
    decoder_input_ids = torch.cat((torch.full((batch_size, 1), BOS), labels[:, :-1].clamp(min=PAD)), dim=1)
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, labels=labels)
    return {name: tensor.to(device) for name, tensor in batch.items()}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(fn: Callable[[], None], device: torch.device, warmup: int = 1) -> float:
    """Seconds of one call, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def train_step_fn(name: str, model: nn.Module, batch: dict, dtype: torch.dtype) -> Callable[[], None]:
    """One forward + backward + Adam step on `batch` (mixed precision by autocast when `dtype` is not float32),
    with training's Adam (`paper_adam`)."""
    device = next(model.parameters()).device
    optimizer = paper_adam(model.parameters(), 1e-4, device)
    model.train()

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = model(**batch) if name == "torch" else model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def training_step(
    name: str, config: VanillaTransformerConfig, batch: dict, dtype: torch.dtype, compiled=False, attn="sdpa"
) -> Callable[[], None]:
    """`train_step_fn` of a new model `name` on the batch's device, through `torch.compile` when `compiled`."""
    model = build_benchmark_model(name, config, attn).to(batch["input_ids"].device)
    return train_step_fn(name, torch.compile(model) if compiled else model, batch, dtype)


def generate_fn(
    name: str, model: nn.Module, inputs: dict, new_tokens: int, num_beams: int, compiled: bool = False
) -> Callable[[], None]:
    """One `generate` call of exactly `new_tokens` tokens; `compiled`: with a static cache and a compiled step."""
    model.eval()
    if name == "torch":
        if num_beams > 1:
            raise VanillaTransformerError("nn.Transformer has no beam search")
        return lambda: model.greedy(inputs["input_ids"], inputs["attention_mask"], new_tokens)
    options = {"num_beams": num_beams, "max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False}
    if num_beams > 1:
        options.update(length_penalty=0.6, early_stopping=True)
    if compiled:
        compile_config = CompileConfig(fullgraph=True, dynamic=False)
        compile_config._compile_all_devices = True  # transformers compiles on accelerators only, unless told
        options.update(cache_implementation="static", compile_config=compile_config)
    return lambda: model.generate(**inputs, **options)


def ctranslate2_fns(
    model: VanillaTransformerForConditionalGeneration,
    folder: str,
    device: torch.device,
    kinds: dict[str, str] = CTRANSLATE2,
) -> dict[str, Callable[[dict, int, int], Callable[[], None]]]:
    """For each CTranslate2 row (`kinds`: name → compute type), a function of (inputs, new tokens, beams) that
    returns one `translate_batch` call decoding exactly what `generate_fn` does: the same sources, threads, number of
    tokens and length penalty."""
    import ctranslate2
    from ctranslate2.converters.converter import Converter

    from vanilla_transformer.inference.ctranslate2_engine import MIN_POSITIONS, model_spec

    vocabulary = ["<pad>", "<s>", "</s>", *(f"t{i}" for i in range(EOS + 1, model.config.vocab_size))]

    class ModelConverter(Converter):  # ctranslate2's converter: validation, quantization, saving
        def _load(self):
            return model_spec(model, vocabulary, vocabulary, MIN_POSITIONS)

    fns = {}
    for name, quantization in kinds.items():
        ModelConverter().convert(f"{folder}/{name}", quantization=quantization, force=True)
        translator = ctranslate2.Translator(
            f"{folder}/{name}", device=device.type, intra_threads=torch.get_num_threads(), compute_type=quantization
        )

        def translate_fn(inputs: dict, new_tokens: int, num_beams: int, translator=translator) -> Callable[[], None]:
            sources = [
                [vocabulary[i] for i in row[mask.bool()].tolist()]
                for row, mask in zip(inputs["input_ids"], inputs["attention_mask"], strict=True)
            ]
            options = {"beam_size": num_beams, "length_penalty": 0.6 if num_beams > 1 else 0.0}
            return lambda: translator.translate_batch(
                sources, min_decoding_length=new_tokens, max_decoding_length=new_tokens, **options
            )

        fns[name] = translate_fn
    return fns
