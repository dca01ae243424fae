"""Translating text with a trained model (§6.1): `translate` batches sentences by length for `model.generate`, whose
defaults are the paper's decoding; `load_translator` puts our PyTorch model or its CTranslate2 export behind one call.
"""

import math
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch
from transformers import LogitsProcessor, LogitsProcessorList, PreTrainedModel, PreTrainedTokenizerBase

from ..errors import ExportError, VanillaTransformerError


class Hypothesis(NamedTuple):
    """A translation and its score: beam search's `sequences_scores` (log-probability over lp(|Y|), §6.1), None
    from greedy search, 0.0 for an empty source line (not decoded)."""

    text: str
    score: float | None


def translate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentences: list[str],
    batch_size: int = 64,
    **generate_kwargs,
) -> list[str]:
    """The best translation (`translate_nbest`) of each of `sentences`, in input order."""
    if generate_kwargs.get("num_return_sequences", 1) != 1:
        raise VanillaTransformerError(
            f"num_return_sequences={generate_kwargs['num_return_sequences']} is not supported: translate returns one "
            f"string per sentence; use translate_nbest for n-best lists."
        )
    return [best[0].text for best in translate_nbest(model, tokenizer, sentences, 1, batch_size, **generate_kwargs)]


def translate_nbest(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentences: list[str],
    num_return_sequences: int = 1,
    batch_size: int = 64,
    **generate_kwargs,
) -> list[list[Hypothesis]]:
    """The best `num_return_sequences` hypotheses of each of `sentences`, best first, by `model.generate`.

    Sentences are sorted by length, longest first (a batch too large for memory fails at once), and padded on the
    right, as the encoder's positions start at the first token. An empty line translates to "" without reaching the
    model (which would make up text); text that spells a special token is tokenized as text. Nothing is truncated.
    Non-finite scores (NaN or Inf weights, a float16 overflow) raise instead of returning garbage.
    """
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings, not one string; wrap it: translate(model, tok, [text]).")
    if batch_size < 1:
        raise VanillaTransformerError(f"batch_size={batch_size} must be >= 1.")
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else model.config.pad_token_id
    if pad_token_id is None:
        raise VanillaTransformerError(
            "Neither the tokenizer nor the model config defines a pad token id; set tokenizer.pad_token."
        )

    translations = [[Hypothesis("", 0.0)] for _ in sentences]
    todo = [index for index, sentence in enumerate(sentences) if sentence.strip()]
    if not todo:
        return translations
    encoded = tokenizer([sentences[index] for index in todo], add_special_tokens=True, split_special_tokens=True)
    token_ids = dict(zip(todo, encoded["input_ids"], strict=True))
    # learned positions end at max_position_embeddings: refuse longer sentences rather than let them be cut silently
    if getattr(model.config, "position_encoding", None) == "learned":
        limit = model.config.max_position_embeddings
        too_long = [index for index, ids in token_ids.items() if len(ids) > limit]
        if too_long:
            raise VanillaTransformerError(
                f"sentence {too_long[0]} (0-based) has {len(token_ids[too_long[0]])} tokens but this model's learned "
                f"positions end at max_position_embeddings={limit} ({len(too_long)} sentence(s) too long): split them."
            )
    todo.sort(key=lambda index: len(token_ids[index]), reverse=True)

    generation_config = generate_kwargs.get("generation_config") or model.generation_config
    num_beams, vocab_size = generate_kwargs.get("num_beams") or generation_config.num_beams or 1, len(tokenizer)
    if num_beams > vocab_size:  # generate() would stop with a ValueError deep in its beam search
        raise VanillaTransformerError(
            f"num_beams={num_beams} (--num-beams) is more beams than the model's {vocab_size} tokens: give "
            f"--num-beams {min(4, vocab_size)} (the paper's) or at most {vocab_size}."
        )
    if num_return_sequences > num_beams:
        raise VanillaTransformerError(
            f"num_return_sequences={num_return_sequences} (--num-return-sequences) needs as many beams, not "
            f"{num_beams}: give --num-beams {num_return_sequences} or more."
        )
    beam_search = num_beams > 1
    generate_kwargs = dict(generate_kwargs)
    if num_return_sequences > 1:
        generate_kwargs["num_return_sequences"] = num_return_sequences
    # beam search: the scores come with the sequences at no cost; otherwise a check joins the caller's processors
    if beam_search:
        generate_kwargs["return_dict_in_generate"] = True
    user_processors = list(generate_kwargs.get("logits_processor") or [])

    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(todo), batch_size):
                batch = todo[start : start + batch_size]
                rows = [token_ids[index] for index in batch]
                width = max(map(len, rows))
                padded = [ids + [pad_token_id] * (width - len(ids)) for ids in rows]
                mask = [[1] * len(ids) + [0] * (width - len(ids)) for ids in rows]
                if not beam_search:
                    check = _NonFiniteLogits()
                    generate_kwargs["logits_processor"] = LogitsProcessorList([*user_processors, check])
                output = model.generate(
                    input_ids=torch.tensor(padded, device=model.device),
                    attention_mask=torch.tensor(mask, device=model.device),
                    **generate_kwargs,
                )
                sequences = output if isinstance(output, torch.Tensor) else output.sequences
                scores = getattr(output, "sequences_scores", None)
                if beam_search:  # transformers' own variants (beam sampling, ...) may return no scores
                    non_finite = scores is not None and not bool(torch.isfinite(scores).all())
                else:
                    non_finite = check.found()
                if non_finite:
                    _raise_non_finite(model, [sentences[index] for index in batch])
                texts = tokenizer.batch_decode(sequences, skip_special_tokens=True)
                values = scores.tolist() if scores is not None else [None] * len(texts)
                for position, index in enumerate(batch):
                    span = slice(position * num_return_sequences, (position + 1) * num_return_sequences)
                    translations[index] = [Hypothesis(*pair) for pair in zip(texts[span], values[span], strict=True)]
    finally:
        model.train(was_training)
    return translations


class _NonFiniteLogits(LogitsProcessor):
    """Notes whether any step's scores held NaN or +Inf (-Inf is how logits processors forbid a token): a running
    maximum (NaN wins every comparison), with no device-to-host copy until `found` reads it after `generate`."""

    def __init__(self) -> None:
        self.top: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        top = scores.amax()
        self.top = top if self.top is None else torch.maximum(self.top, top)
        return scores

    def found(self) -> bool:
        return self.top is not None and not bool(self.top < math.inf)


def _raise_non_finite(model: PreTrainedModel, batch: list[str]) -> None:
    source = model.name_or_path or "the model (built in memory, not loaded from a folder)"
    half = model.dtype in (torch.float16, torch.bfloat16)
    overflow = f" or overflow in {model.dtype} (run it in float32)" if half else ""
    raise VanillaTransformerError(
        f"{source} produced non-finite scores (NaN or Inf) on the batch starting with {batch[0][:80]!r}: its weights "
        f"hold NaN, Inf or huge values{overflow}; restore the model folder or re-train it (load_model_and_tokenizer "
        f"names the tensor at fault)."
    )


ENGINES = ("pytorch", "ctranslate2")
DTYPES = ("float32", "bfloat16", "float16")


class Translator(NamedTuple):
    """A loaded model behind one call: `translate(sentences, batch_size=..., num_beams=..., length_penalty=...)`
    returns one string per sentence; `nbest(sentences, num_return_sequences, ...)` each sentence's `Hypothesis`
    list (None: the engine gives none); `length_penalty` is the model's own α (§6.1)."""

    translate: Callable[..., list[str]]
    tokenizer: PreTrainedTokenizerBase
    length_penalty: float
    device: str
    nbest: Callable[..., list[list[Hypothesis]]] | None = None


def load_translator(
    source: str, engine: str = "pytorch", device: str | None = None, dtype: str | None = None
) -> Translator:
    """Load `source` for translation by `engine`: "pytorch", a model folder or Hub id with its weights in `dtype`
    (default: as saved), or "ctranslate2", an `export-ctranslate2` folder, whose weights were typed when exporting."""
    if engine not in ENGINES:
        raise VanillaTransformerError(f"engine={engine!r} is unknown; use one of {', '.join(ENGINES)}.")
    if dtype is not None and dtype not in DTYPES:
        raise VanillaTransformerError(f"dtype={dtype!r} is unknown; use one of {', '.join(DTYPES)}.")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if engine == "ctranslate2":
        from .ctranslate2_engine import load_ctranslate2, translate_with_ctranslate2

        if dtype is not None:
            raise ExportError(
                f"--dtype {dtype} does not apply to a CTranslate2 export: its weight type is chosen when exporting "
                f"(export-ctranslate2 --quantization)."
            )

        translator, tokenizer, info = load_ctranslate2(source, device, threads=torch.get_num_threads())
        run = partial(translate_with_ctranslate2, translator, tokenizer, info=info)
        return Translator(run, tokenizer, info["decoding"]["length_penalty"], device)

    from ..files.loading import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(source, device, getattr(torch, dtype) if dtype else None)

    def run_pytorch(sentences: list[str], batch_size: int = 64, **decoding) -> list[str]:
        decoding = {k: v for k, v in decoding.items() if v is not None}
        return translate(model, tokenizer, sentences, batch_size, **decoding)

    def nbest_pytorch(sentences: list[str], num_return_sequences: int, batch_size: int = 64, **decoding):
        decoding = {k: v for k, v in decoding.items() if v is not None}
        return translate_nbest(model, tokenizer, sentences, num_return_sequences, batch_size, **decoding)

    return Translator(run_pytorch, tokenizer, model.generation_config.length_penalty, device, nbest_pytorch)
