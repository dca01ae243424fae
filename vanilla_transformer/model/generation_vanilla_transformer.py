"""The decoding of §6.1 of *Attention Is All You Need* as the default of `generate()`: beam size 4, the GNMT length
penalty with α = 0.6, a maximum output length of input length + 50, and early stopping.

[`VanillaTransformerGenerationMixin`] is mixed into the model as `WhisperGenerationMixin` is into Whisper. Its beam
search runs on the model's own `forward` and `EncoderDecoderCache`, as transformers' does; everything else (greedy
search, sampling, beam sampling, diverse and constrained beams, assisted decoding) is transformers' own.
This file is shipped to the Hub as remote code beside the modeling file: it imports only torch and transformers.
"""

import copy
import functools
import math

import torch
from torch.nn import functional as F
from transformers import (
    EosTokenCriteria,
    GenerationConfig,
    GenerationMixin,
    LogitsProcessorList,
    MaxLengthCriteria,
    MaxTimeCriteria,
    StoppingCriteria,
    StoppingCriteriaList,
    StopStringCriteria,
)
from transformers.generation import GenerateBeamEncoderDecoderOutput, GenerationMode, logits_process
from transformers.integrations import is_deepspeed_zero3_enabled
from transformers.integrations.fsdp import is_fsdp_managed_module
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput
from transformers.utils import logging

logger = logging.get_logger(__name__)

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

# transformers 5.24 renamed the decoder cache from `past_key_values` to `cache` (in `generate`'s model kwargs and in
# the output classes); the model takes either name and returns the field of the installed release.
DECODER_CACHE_NAMES = ("past_key_values", "cache")
CACHE_OUTPUT_NAME = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"

# Logits processors and stopping criteria that read only the tokens of a hypothesis (or the clock), never its row in
# the batch: with only these, sentences whose search is over leave the batch and the cache. Any other runs too, on
# the whole batch in transformers' row layout.
ROW_INDEPENDENT_LOGITS_PROCESSORS = (
    logits_process.ForcedBOSTokenLogitsProcessor,
    logits_process.ForcedEOSTokenLogitsProcessor,
    logits_process.InfNanRemoveLogitsProcessor,
    logits_process.LogitNormalization,
    logits_process.MinLengthLogitsProcessor,
    logits_process.MinNewTokensLengthLogitsProcessor,
    logits_process.NoBadWordsLogitsProcessor,
    logits_process.NoRepeatNGramLogitsProcessor,
    logits_process.RepetitionPenaltyLogitsProcessor,
    logits_process.SuppressTokensAtBeginLogitsProcessor,
    logits_process.SuppressTokensLogitsProcessor,
)
ROW_INDEPENDENT_STOPPING_CRITERIA = (EosTokenCriteria, MaxLengthCriteria, MaxTimeCriteria, StopStringCriteria)


def check_token_ids(token_ids: torch.Tensor, vocab_size: int, name: str, ignore_index: int | None = None) -> None:
    """Raise a `ValueError` naming the offending id instead of an IndexError or a device-side assert. Called where ids
    enter (`generate`'s inputs, the training collator), never in `forward`: reading the extremes on the host makes a
    GPU wait for every queued kernel."""
    if token_ids.numel() == 0:
        return
    if ignore_index is not None:
        token_ids = token_ids.masked_fill(token_ids == ignore_index, 0)
    smallest, largest = (int(value) for value in torch.aminmax(token_ids))
    if largest >= vocab_size or smallest < 0:
        bad = largest if largest >= vocab_size else smallest
        allowed = f"[0, {vocab_size - 1}]" + (f" or {ignore_index}" if ignore_index is not None else "")
        raise ValueError(
            f"{name} contains token id {bad} (largest {largest}, smallest {smallest}) but vocab_size is "
            f"{vocab_size}: ids must lie in {allowed}. Use the tokenizer that matches this model, or call "
            f"model.resize_token_embeddings(...) after adding tokens."
        )


# --- transformers' internals this file needs: one function each, so that a change in transformers is mended here ---


def resolved_generation_config(
    model: GenerationMixin, generation_config: GenerationConfig | None, kwargs: dict
) -> GenerationConfig:
    """The generation config `generate` will run with: the call's kwargs over `generation_config` over the model's
    (transformers' internal `GenerationMixin._prepare_generation_config`; no public method resolves it)."""
    resolved, _ = model._prepare_generation_config(generation_config, **kwargs)
    return resolved


def transformers_would_compile(model: GenerationMixin, cache, generation_config: GenerationConfig) -> bool:
    """Whether transformers' own decoding loops would compile the step for this cache and config (its internal
    `GenerationMixin._valid_auto_compile_criteria`), so that the paper's beam search compiles exactly when they do.
    The cache is passed under both names releases have read it by (`past_key_values` before 5.24, `cache` from it)."""
    return model._valid_auto_compile_criteria({"cache": cache, "past_key_values": cache}, generation_config)


def special_token_tensors(generation_config: GenerationConfig) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The EOS ids and the pad id as tensors on the model's device, as `generate` prepared them on the config it
    passes to a decoding loop (the internal `_eos_token_tensor` and `_pad_token_tensor`)."""
    return generation_config._eos_token_tensor, generation_config._pad_token_tensor


def mark_as_not_from_model_config(generation_config: GenerationConfig) -> None:
    """Keep entries transformers does not define when the config is saved and loaded back: a config flagged as derived
    from config.json (the internal `_from_model_config`) drops them."""
    generation_config._from_model_config = False


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
        mark_as_not_from_model_config(generation_config)
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


def paper_options(
    resolved: GenerationConfig, length_penalty_form: str | None, over_input: object
) -> tuple[str, int | None]:
    """The call's `length_penalty_form` and `max_new_tokens_over_input`, else the generation config's, checked."""
    if length_penalty_form is None:
        length_penalty_form = getattr(resolved, "length_penalty_form", None) or "hf"
    if length_penalty_form not in LENGTH_PENALTY_FORMS:
        raise ValueError(
            f"length_penalty_form={length_penalty_form!r} is unknown; use 'gnmt' for the paper's ((5 + |Y|) / 6)^α "
            f"(§6.1, Wu et al. 2016) or 'hf' for transformers' |Y|^α."
        )
    if over_input is _UNSET:
        over_input = getattr(resolved, "max_new_tokens_over_input", None)
    if over_input is not None and (isinstance(over_input, bool) or not isinstance(over_input, int) or over_input < 0):
        raise ValueError(
            f"max_new_tokens_over_input={over_input!r} must be an integer >= 0 (the paper: 50), or None for no "
            f"per-sentence limit."
        )
    return length_penalty_form, over_input


class VanillaTransformerGenerationMixin(GenerationMixin):
    """`generate()` with the paper's decoding (§6.1) as its default (see `generate`)."""

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

            length_penalty_form (`str`, the model's default `"gnmt"`): with beam search, `"gnmt"` runs
                [`~VanillaTransformerGenerationMixin._paper_beam_search`], which divides by ((5 + |Y|) / 6)^α;
                `"hf"` runs transformers' beam search, which divides by |Y|^α.
            max_new_tokens_over_input (`int` or `None`, the model's default 50): every sentence may generate at
                most (its number of non-padding source tokens, special tokens included) + this many tokens, in
                every decoding mode. An explicit `max_new_tokens` or `max_length` caps it further; `None` leaves
                only those (transformers' default is 20 new tokens).

        `generation_config.length_penalty` is α in either form. The paper's beam search takes every option of
        transformers' beam search (logits processors, stopping criteria, `num_return_sequences`, a decoder prompt,
        static caches and `compile_config`, `return_dict_in_generate` with `output_scores`, `output_logits`,
        `output_attentions`, `output_hidden_states`) and returns the same fields. What it does not implement (beam
        sampling, diverse and constrained beam search, assisted decoding, a streamer, `decoder_inputs_embeds`) runs in
        transformers' own implementation, with its |Y|^α length penalty and one warning.
        """
        length_penalty_form = kwargs.pop("length_penalty_form", None)
        over_input = kwargs.pop("max_new_tokens_over_input", _UNSET)
        if kwargs.get("custom_generate") is not None:  # the caller brings its own decoding loop
            return super().generate(inputs, generation_config, **kwargs)

        # the generation config `generate` will use: the call's kwargs over `generation_config` over the model's
        resolved = resolved_generation_config(self, generation_config, kwargs)
        length_penalty_form, over_input = paper_options(resolved, length_penalty_form, over_input)
        vocab_size = self.config.decoder_vocab_size
        if (resolved.num_beams or 1) > vocab_size:
            raise ValueError(
                f"num_beams={resolved.num_beams} is more beams than the model's vocabulary of {vocab_size} tokens "
                f"offers continuations at the first step; give at most {vocab_size} (the paper: 4)."
            )
        paper_beam_search = False
        if length_penalty_form == "gnmt" and (resolved.num_beams or 1) > 1:
            unsupported = self._unsupported_by_paper_beam_search(resolved, kwargs)
            if unsupported:
                logger.warning_once(
                    f"The paper's beam search (length_penalty_form='gnmt') does not implement {unsupported}; "
                    f"transformers' implementation runs instead, which divides a finished hypothesis' "
                    f"log-probability by |Y|^α (length_penalty_form='hf'), not by the GNMT ((5 + |Y|) / 6)^α of §6.1."
                )
            paper_beam_search = not unsupported

        source_ids = inputs if inputs is not None else kwargs.get("input_ids")
        if source_ids is not None and not isinstance(source_ids, torch.Tensor):
            raise TypeError(
                f"input_ids is a {type(source_ids).__name__}, not a tensor of token ids of shape (batch, length): pass "
                f"tokenizer(sentences, return_tensors='pt', padding=True)['input_ids'], or torch.tensor(ids)."
            )
        for name, ids, size in (
            ("input_ids", source_ids, self.config.vocab_size),
            ("decoder_input_ids", kwargs.get("decoder_input_ids"), vocab_size),
        ):
            if isinstance(ids, torch.Tensor) and not ids.is_floating_point():  # checked once here, not every step
                check_token_ids(ids, size, name)

        max_new_tokens_per_row = None
        if isinstance(source_ids, torch.Tensor) and source_ids.dim() == 2 and source_ids.shape[0] == 0:
            raise ValueError(
                f"input_ids holds no sentences (shape {tuple(source_ids.shape)}): there is nothing to translate; "
                f"pass at least one."
            )
        kwargs = self._with_source_padding_mask(inputs, kwargs)
        source_lengths = self._source_lengths(inputs, kwargs)
        if source_lengths is not None and bool((source_lengths == 0).any()):
            rows = (source_lengths == 0).nonzero().flatten().tolist()
            raise ValueError(
                f"Source rows {rows} are all padding: there is nothing to translate, and a model would invent a "
                f"sentence. Leave them out, or give each at least one token (the tokenizer encodes an empty line as "
                f"just </s>)."
            )
        if source_lengths is not None and over_input is not None:
            max_new_tokens_per_row, generation_config = self._limit_each_sentence(
                source_lengths + over_input, over_input, generation_config, kwargs, paper_beam_search
            )

        if "static" in (resolved.cache_implementation or ""):
            inputs, kwargs = self._pad_source_to_static_length(inputs, kwargs)
        if paper_beam_search:
            # transformers prepares the inputs (encoder output, beams, cache, logits processors), then calls it; it
            # passes a callable none of its own loop arguments, so `synced_gpus` is bound here
            kwargs["custom_generate"] = functools.partial(
                type(self)._paper_beam_search,
                max_new_tokens_per_row=max_new_tokens_per_row,
                sync_processes=self._synced_gpus(kwargs.pop("synced_gpus", None)),
            )
        return super().generate(inputs, generation_config, **kwargs)

    def _limit_each_sentence(
        self,
        max_new_tokens_per_row: torch.Tensor,
        over_input: int,
        generation_config: GenerationConfig | None,
        kwargs: dict,
        paper_beam_search: bool,
    ) -> tuple[torch.Tensor, GenerationConfig | None]:
        """§6.1's output limit, input length + `over_input` tokens for each sentence: capped where learned positions
        end, made the call's `max_new_tokens` for the longest sentence unless the caller set a length, and enforced
        per sentence by a stopping criterion (added to `kwargs`) or by the paper's beam search itself."""
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
        asked = kwargs.get("max_new_tokens", getattr(generation_config, "max_new_tokens", None))
        # one host read of the longest limit, only where it is used: the warning below, or the call's max_new_tokens
        longest = int(max_new_tokens_per_row.max()) if asked is not None or not explicit_length else None
        if asked is not None and asked > longest:  # the caller asked for more than the paper's limit gives any sentence
            logger.warning_once(
                f"max_new_tokens={asked}, but the paper's limit of input length + {over_input} tokens (§6.1) still "
                f"applies to each sentence ({longest} at most here); pass max_new_tokens_over_input=None to lift it."
            )
        if not explicit_length:  # else transformers' default (20 new tokens) would cut the longer sentences
            if generation_config is None:
                kwargs["max_new_tokens"] = longest
            else:
                generation_config = copy.deepcopy(generation_config)
                generation_config.max_new_tokens = longest
        if not paper_beam_search:
            criteria = MaxLengthPerSentenceCriteria(prompt_length + max_new_tokens_per_row)
            kwargs["stopping_criteria"] = StoppingCriteriaList([*(kwargs.get("stopping_criteria") or []), criteria])
        return max_new_tokens_per_row, generation_config

    @staticmethod
    def _unsupported_by_paper_beam_search(generation_config: GenerationConfig, kwargs: dict) -> str:
        """What of this beam-search request the paper's beam search leaves to transformers ("" when nothing)."""
        mode = generation_config.get_generation_mode(kwargs.get("assistant_model"))
        if mode != GenerationMode.BEAM_SEARCH:
            return mode.value.replace("_", " ")
        for name in ("streamer", "decoder_inputs_embeds"):
            if kwargs.get(name):
                return f"{name}=..."
        return ""

    def _pad_source_to_static_length(
        self, inputs: torch.Tensor | None, kwargs: dict
    ) -> tuple[torch.Tensor | None, dict]:
        """Right-pad the source (masked) to the longest source this model has decoded with a static cache.

        transformers sizes a static cross-attention cache to the source, so every shorter source would compile the
        decoding step anew; padding keeps one shape. It changes no output: padded positions are masked out of every
        attention, and the per-sentence length limits were taken from the unpadded source.
        """
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        pad_token_id = self.config.pad_token_id
        if input_ids is None or input_ids.dim() != 2 or input_ids.is_floating_point() or pad_token_id is None:
            return inputs, kwargs
        length = max(input_ids.shape[1], getattr(self, "_static_source_length", 0))
        self._static_source_length = length
        missing = length - input_ids.shape[1]
        if missing == 0:
            return inputs, kwargs
        attention_mask = kwargs.get("attention_mask")
        if attention_mask is None:  # as `generate` would infer it
            attention_mask = input_ids.ne(pad_token_id).long()
        kwargs = {**kwargs, "attention_mask": F.pad(attention_mask, (0, missing), value=0)}
        input_ids = F.pad(input_ids, (0, missing), value=pad_token_id)
        if inputs is not None:
            return input_ids, kwargs
        return None, {**kwargs, "input_ids": input_ids}

    def _synced_gpus(self, synced_gpus: bool | None) -> bool:
        """`synced_gpus` as `generate` resolves it: by default, on for FSDP and DeepSpeed ZeRO-3 on several processes,
        whose forwards gather the weights from every process, so that all must run the same number of them."""
        if synced_gpus is not None:
            return synced_gpus
        if not torch.distributed.is_available() or not torch.distributed.is_initialized():
            return False
        return torch.distributed.get_world_size() > 1 and (is_deepspeed_zero3_enabled() or is_fsdp_managed_module(self))

    def _with_source_padding_mask(self, inputs: torch.Tensor | None, kwargs: dict) -> dict:
        """`kwargs` with the source's padding mask derived from the pad id where none was given, by the rule
        transformers' `generate` applies to decoder-only models (pad id in the input, and not an EOS id): for an
        encoder-decoder it derives none, and every pad token would then be read as a word."""
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        pad_token_id = self.generation_config.pad_token_id
        if kwargs.get("attention_mask") is not None or input_ids is None or pad_token_id is None:
            return kwargs
        if input_ids.dim() != 2 or input_ids.is_floating_point() or not bool((input_ids == pad_token_id).any()):
            return kwargs
        eos_token_id = self.generation_config.eos_token_id
        if pad_token_id in (eos_token_id if isinstance(eos_token_id, list) else [eos_token_id]):
            return kwargs
        return {**kwargs, "attention_mask": input_ids.ne(pad_token_id).long()}

    def _source_lengths(self, inputs: torch.Tensor | None, kwargs: dict) -> torch.Tensor | None:
        """The number of non-padding source tokens of each sentence, from whatever `generate` was given (None for an
        empty source, which the encoder refuses by name)."""
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        if input_ids is not None and input_ids.dim() == 2 and input_ids.shape[1] == 0:
            return None
        attention_mask = kwargs.get("attention_mask")
        if attention_mask is not None and attention_mask.dim() == 2:
            return attention_mask.long().sum(-1)
        if input_ids is not None and input_ids.dim() == 2 and not input_ids.is_floating_point():
            # no mask, even derived (`_with_source_padding_mask`): the model reads every token
            return torch.full(input_ids.shape[:1], input_ids.shape[1], device=input_ids.device)
        hidden_states = kwargs.get("inputs_embeds")
        if hidden_states is None and kwargs.get("encoder_outputs") is not None:
            hidden_states = kwargs["encoder_outputs"][0]
        if hidden_states is not None:
            return torch.full(hidden_states.shape[:1], hidden_states.shape[1], device=hidden_states.device)
        return None

    def _paper_beam_search(
        self,
        input_ids: torch.LongTensor,
        logits_processor: LogitsProcessorList,
        stopping_criteria: StoppingCriteriaList,
        generation_config: GenerationConfig,
        synced_gpus: bool = False,
        max_new_tokens_per_row: torch.Tensor | None = None,
        sync_processes: bool | None = None,
        **model_kwargs,
    ) -> GenerateBeamEncoderDecoderOutput | torch.LongTensor:
        r"""
        The beam search of §6.1, run by `generate` on the inputs it prepared (`num_beams` copies of each sentence,
        the encoder output, the cache).

        The hypothesis bookkeeping is transformers' (and fairseq's) beam search: at each step the best
        2 × num_beams continuations of all running hypotheses are taken by summed log-probability (log-softmax in
        float32, then the logits processors); those among the best num_beams that meet a stopping criterion (EOS,
        their sentence's maximum length, ...) join the sentence's num_beams finished hypotheses if they score
        better, and the best num_beams that did not end run on. Only the score of a finished hypothesis differs:
        its summed log-probability divided by the GNMT penalty lp(|Y|) = ((5 + |Y|) / 6)^α of Wu et al. 2016, with
        |Y| the generated tokens, EOS included (`gnmt_length_penalty`).

        Each sentence stops at its own maximum length (`max_new_tokens_per_row`, within `generation_config.max_length`)
        or, with `early_stopping=True`, as soon as it holds num_beams finished hypotheses and no running one can
        beat the worst of them: with log-probabilities <= 0 (true after every logits processor transformers adds
        to beam search, unless a sequence bias is positive) a running hypothesis with summed log-probability s can
        at best finish with s / lp(maximum length). The stop is then exact: it returns what decoding every sentence
        to its maximum length (`early_stopping=False`) returns, sooner.

        The decoder runs on the model's `forward`, with the cache `generate` prepared (dynamic or static, compiled
        as transformers compiles its own loops); the self-attention cache follows the beams (`reorder_cache`), the
        cross-attention cache, equal for all beams of a sentence, stays. With a dynamic cache, no per-step outputs
        and only row-independent processors and criteria, sentences whose search is over leave the batch.

        Returns the best `num_return_sequences` finished hypotheses of each sentence, decoder start token first and
        padding after EOS, or with `return_dict_in_generate=True` a `GenerateBeamEncoderDecoderOutput` with their
        `sequences_scores` (summed log-probability over lp(|Y|)), `beam_indices`, and, when asked, per step the
        processed `scores`, the raw `logits`, attentions and hidden states, as transformers' beam search returns.
        """
        num_beams = generation_config.num_beams
        num_return_sequences = generation_config.num_return_sequences or 1
        alpha = generation_config.length_penalty
        early_stopping = generation_config.early_stopping is True
        return_dict = generation_config.return_dict_in_generate
        output_scores = return_dict and generation_config.output_scores
        output_logits = return_dict and generation_config.output_logits
        output_attentions = return_dict and generation_config.output_attentions
        output_hidden_states = return_dict and generation_config.output_hidden_states
        device = self.device  # transformers >= 5.23 accepts inputs on the CPU for a model elsewhere
        input_ids = input_ids.to(device)
        eos_token_id, pad_token_id = special_token_tensors(generation_config)
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

        # (batch_size, num_beams, longest): running hypotheses (first step: beam 0 only), then the finished ones;
        # beam_indices[..., t] is the row (sentence * num_beams + beam) whose hypothesis step t extended
        sequences = torch.full((batch_size, num_beams, longest), int(fill_value), dtype=torch.long, device=device)
        sequences[:, :, :prompt_length] = input_ids.view(batch_size, num_beams, prompt_length)
        running_scores = torch.zeros((batch_size, num_beams), device=device)
        running_scores[:, 1:] = -math.inf
        steps = longest - prompt_length
        beam_indices = torch.full((batch_size, num_beams, steps), -1, dtype=torch.int32, device=device)
        finished, finished_beam_indices = sequences.clone(), beam_indices.clone()
        finished_scores = torch.full((batch_size, num_beams), -math.inf, device=device)
        finished_lengths = torch.full((batch_size, num_beams), prompt_length, device=device)

        cache = next((model_kwargs[name] for name in DECODER_CACHE_NAMES if model_kwargs.get(name) is not None), None)
        use_cache = model_kwargs.get("use_cache", True) and cache is not None
        encoder_outputs = model_kwargs["encoder_outputs"]
        encoder_hidden_states = encoder_outputs[0]
        attention_mask = model_kwargs.get("attention_mask")
        decoder_attention_mask = model_kwargs.get("decoder_attention_mask")
        step_forward = self.__call__
        if use_cache and transformers_would_compile(self, cache, generation_config):
            step_forward = self.get_compiled_call(generation_config.compile_config)
        record = output_scores or output_logits or output_attentions or output_hidden_states
        prune = not (record or (use_cache and cache.is_compileable)) and all(
            type(item) in ROW_INDEPENDENT_LOGITS_PROCESSORS for item in logits_processor
        )
        prune &= all(type(item) in ROW_INDEPENDENT_STOPPING_CRITERIA for item in stopping_criteria)
        all_scores = () if output_scores else None
        raw_logits = () if output_logits else None
        decoder_attentions = () if output_attentions else None
        cross_attentions = () if output_attentions else None
        decoder_hidden_states = () if output_hidden_states else None

        active = torch.arange(batch_size, device=device)  # sentences still searched, in the cache's row order
        done_sentences = torch.zeros(batch_size, dtype=torch.bool, device=device)
        cur_len = prompt_length
        past_length = cache.get_seq_length() if use_cache else 0
        this_process_done = False
        while True:
            if sync_processes:  # FSDP or ZeRO-3: every process runs as many forwards as the slowest one needs
                still_running = torch.tensor(0.0 if this_process_done else 1.0, device=device)
                torch.distributed.all_reduce(still_running)
                if still_running.item() == 0.0:
                    break
            num_active = active.shape[0]
            running = sequences[active]
            flat_running = running[:, :, :cur_len].reshape(num_active * num_beams, cur_len)
            if this_process_done:  # a forward for the other processes' sake, its result unused
                self(
                    encoder_outputs=(encoder_hidden_states,),
                    attention_mask=attention_mask,
                    decoder_input_ids=flat_running,
                )
                continue
            # the first call fills the cross-attention cache, uncompiled, as transformers' loops do
            outputs = (step_forward if past_length > 0 else self.__call__)(
                encoder_outputs=BaseModelOutput(last_hidden_state=encoder_hidden_states),
                attention_mask=attention_mask,
                # contiguous: a view into `running` would have strides that change with the maximum length
                decoder_input_ids=(flat_running[:, past_length:] if use_cache else flat_running).contiguous(),
                decoder_attention_mask=decoder_attention_mask,
                **{CACHE_OUTPUT_NAME: cache if use_cache else None},
                use_cache=use_cache,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=True,
            )
            past_length = cur_len
            logits = outputs.logits[:, -1, :].to(dtype=torch.float32, copy=True)
            log_probs = logits_processor(flat_running, F.log_softmax(logits, dim=-1))
            if record:
                all_scores = all_scores + (log_probs.clone(),) if output_scores else None
                raw_logits = raw_logits + (logits,) if output_logits else None
                if output_attentions:
                    decoder_attentions += (outputs.decoder_attentions,)
                    cross_attentions += (outputs.cross_attentions,)
                if output_hidden_states:
                    decoder_hidden_states += (outputs.decoder_hidden_states,)
            del outputs

            vocab_size = log_probs.shape[-1]
            log_probs = log_probs.view(num_active, num_beams, vocab_size) + running_scores[active][:, :, None]
            top_scores, top_indices = log_probs.view(num_active, -1).topk(num_candidates, dim=1)
            source_beams = top_indices // vocab_size
            candidates = running.gather(1, source_beams[:, :, None].expand(-1, -1, longest))
            candidates[:, :, cur_len] = top_indices % vocab_size
            candidate_beam_indices = beam_indices[active].gather(1, source_beams[:, :, None].expand(-1, -1, steps))
            candidate_beam_indices[:, :, cur_len - prompt_length] = active[:, None] * num_beams + source_beams
            cur_len += 1

            # candidates that end: at their sentence's maximum length, or by a stopping criterion (EOS, ...);
            # only the best num_beams may finish
            flat_candidates = candidates[:, :, :cur_len].reshape(num_active * num_candidates, cur_len)
            ends = stopping_criteria(flat_candidates, all_scores)
            ends = ends.view(num_active, num_candidates) | (cur_len >= max_lengths[active])[:, None]
            may_finish = ends & (torch.arange(num_candidates, device=device) < num_beams)
            new_scores = top_scores / gnmt_length_penalty(cur_len - prompt_length, alpha)
            new_scores = new_scores.masked_fill(~may_finish | done_sentences[active][:, None], -math.inf)
            merged_scores, keep = torch.cat((finished_scores[active], new_scores), dim=1).topk(num_beams, dim=1)
            finished_scores[active] = merged_scores
            finished[active] = torch.cat((finished[active], candidates), dim=1).gather(
                1, keep[:, :, None].expand(-1, -1, longest)
            )
            merged_beam_indices = torch.cat((finished_beam_indices[active], candidate_beam_indices), dim=1)
            finished_beam_indices[active] = merged_beam_indices.gather(1, keep[:, :, None].expand(-1, -1, steps))
            merged_lengths = torch.cat(
                (finished_lengths[active], torch.full_like(new_scores, cur_len, dtype=finished_lengths.dtype)), dim=1
            )
            finished_lengths[active] = merged_lengths.gather(1, keep)

            # the best num_beams candidates that did not end run on
            next_scores, next_indices = top_scores.masked_fill(ends, -math.inf).topk(num_beams, dim=1)
            sequences[active] = candidates.gather(1, next_indices[:, :, None].expand(-1, -1, longest))
            beam_indices[active] = candidate_beam_indices.gather(1, next_indices[:, :, None].expand(-1, -1, steps))
            running_scores[active] = next_scores
            next_source_beams = source_beams.gather(1, next_indices)

            # a sentence is done at its maximum length, with no running hypothesis left, or when none can still win
            done = (cur_len >= max_lengths[active]) | (next_scores[:, 0] == -math.inf)
            if early_stopping:
                # lp at the longest remaining length bounds every future score (lp at the next length if α < 0)
                penalty = max_penalty[active].clamp(min=gnmt_length_penalty(cur_len + 1 - prompt_length, alpha))
                done |= next_scores[:, 0] / penalty <= finished_scores[active][:, -1]
            done_sentences[active] |= done
            if bool(done_sentences.all()):
                this_process_done = True
                if sync_processes:
                    continue
                break
            keep_rows = (~done).nonzero().squeeze(-1) if prune else torch.arange(num_active, device=device)
            rows = (keep_rows[:, None] * num_beams + next_source_beams[keep_rows]).view(-1)
            if use_cache and keep_rows.shape[0] == num_active:
                # beams move within their sentence, whose cross-attention keys and values all its beams share
                cache.self_attention_cache.reorder_cache(rows)
            elif keep_rows.shape[0] < num_active:
                active = active[keep_rows]
                same_source = (keep_rows[:, None] * num_beams + beams).view(-1)
                if use_cache:
                    cache.self_attention_cache.batch_select_indices(rows)
                    cache.cross_attention_cache.batch_select_indices(same_source)
                encoder_hidden_states = encoder_hidden_states[same_source]
                if attention_mask is not None:
                    attention_mask = attention_mask[same_source]
                if decoder_attention_mask is not None:
                    decoder_attention_mask = decoder_attention_mask[same_source]
            if decoder_attention_mask is not None:
                decoder_attention_mask = F.pad(decoder_attention_mask, (0, 1), value=1)

        lengths = finished_lengths[:, :num_return_sequences]
        output = finished[:, :num_return_sequences, : int(lengths.max())].reshape(batch_size * num_return_sequences, -1)
        if not return_dict:
            return output
        return GenerateBeamEncoderDecoderOutput(
            sequences=output,
            sequences_scores=finished_scores[:, :num_return_sequences].reshape(-1),
            scores=all_scores,
            logits=raw_logits,
            beam_indices=finished_beam_indices[:, :num_return_sequences, : int(lengths.max()) - prompt_length].reshape(
                batch_size * num_return_sequences, -1
            ),
            encoder_attentions=encoder_outputs.get("attentions") if output_attentions else None,
            encoder_hidden_states=encoder_outputs.get("hidden_states") if output_hidden_states else None,
            decoder_attentions=decoder_attentions,
            cross_attentions=cross_attentions,
            decoder_hidden_states=decoder_hidden_states,
            **{CACHE_OUTPUT_NAME: cache if use_cache else None},
        )


__all__ = ["VanillaTransformerGenerationMixin", "gnmt_length_penalty"]
