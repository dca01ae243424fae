"""One joint BPE vocabulary for source and target (§5.1: "a shared source-target vocabulary of about 37000 tokens"),
trained with `tokenizers` and saved as a `PreTrainedTokenizerFast` that `AutoTokenizer` loads.

The BPE works on bytes (GPT-2's byte-level alphabet), so every string round-trips exactly: no `<unk>`, no
normalization (lowercasing only when asked), and languages written without spaces (Chinese, Japanese) are split into
sub-words like any other.
"""

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ..errors import DataError

if TYPE_CHECKING:  # `datasets` is imported by whoever passes a Dataset; the command line starts without it
    from datasets import Dataset

# ids fixed to the model's defaults (`VanillaTransformerConfig`: pad 0, bos/decoder_start 1, eos 2)
SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
# the byte-level BPE holds its special tokens and the 256 byte symbols before it learns any merge
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + 256
# what `from_pretrained` records about the load itself in `init_kwargs`, which `save_pretrained` would write into
# `tokenizer_config.json` (transformers 5.x)
LOAD_TIME_KEYS = ("is_local", "local_files_only")
# bumped whenever what `tokenizer_fingerprint` digests changes (old fingerprints then no longer compare equal)
FINGERPRINT_VERSION = 1


def train_joint_bpe(
    texts: Iterable[str],
    vocab_size: int = 37000,
    min_frequency: int = 2,
    model_max_length: int = 1024,
    lowercase: bool = False,
) -> PreTrainedTokenizerFast:
    """Learn a byte-level BPE of `vocab_size` tokens (specials included) from the sentences of both languages.

    `lowercase=True` lowercases every text as it is encoded (the preprocessing of the Multi30k literature, scored on
    lowercased text), so `decode(encode(x)) == x.lower()`. Encoded inputs end with `</s>`; the decoder's `<s>` comes
    from `shift_tokens_right`. Text that spells a special token (`"</s>"`, `"<pad>"`) is encoded as text
    (`split_special_tokens=True`, saved with the tokenizer), so it can neither end nor pad a sentence.
    """
    specials = list(SPECIAL_TOKENS.values())
    if vocab_size < MIN_VOCAB_SIZE:
        raise DataError(
            f"vocab_size={vocab_size} cannot hold the {len(specials)} special tokens and the 256 byte symbols; "
            f"use at least {MIN_VOCAB_SIZE} (the paper: 37000 for WMT14 En-De, ~8000 suits Multi30k)."
        )
    tokenizer = Tokenizer(models.BPE())
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_non_empty(texts), trainer=trainer)
    eos = SPECIAL_TOKENS["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, tokenizer.token_to_id(eos))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
        split_special_tokens=True,
        **SPECIAL_TOKENS,
    )


def lowercases(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether `tokenizer` lowercases what it encodes (`train_joint_bpe(lowercase=True)`), so that its model's output
    is scored against lowercased references."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend is not None and '"Lowercase"' in backend.to_str()


def _non_empty(texts: Iterable[str]) -> Iterator[str]:
    count = 0
    for text in texts:
        if text:
            count += 1
            yield text
    if count == 0:
        raise DataError("the tokenizer's training text is empty; pass the sentences of both languages.")


def round_trip_failures(tokenizer: PreTrainedTokenizerFast, texts: Iterable[str]) -> list[tuple[int, str, str]]:
    """(line number, text, decoded text) for every line where `decode(encode(text)) != text` (`text.lower()` for a
    tokenizer that `lowercases`)."""
    failures = []
    lowercase = lowercases(tokenizer)
    for number, text in enumerate(texts, start=1):
        decoded = tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True)
        if decoded != (text.lower() if lowercase else text):
            failures.append((number, text, decoded))
    return failures


def load_tokenizer(name_or_path: str | Path, **kwargs) -> PreTrainedTokenizerBase:
    """`AutoTokenizer.from_pretrained`, minus what it records about this load (`LOAD_TIME_KEYS`), so that saving the
    tokenizer again (checkpoints, averaged models, releases) writes only the tokenizer's own settings."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(name_or_path), **kwargs)
    except Exception as error:  # tokenizers' parser raises a bare Exception for a tokenizer.json it cannot read
        where = "a folder here" if Path(name_or_path).expanduser().is_dir() else "no folder here"
        reason = " ".join(str(error).split())[:300]
        raise DataError(
            f"{name_or_path} ({where}) holds no tokenizer that loads ({type(error).__name__}: {reason}): give a folder "
            f"with tokenizer.json (`vanilla-transformer train-tokenizer`'s output, or a run's tokenizer/), or a Hub id "
            f"with the network reachable."
        ) from error
    for key in LOAD_TIME_KEYS:
        tokenizer.init_kwargs.pop(key, None)
    return tokenizer


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A SHA-256 hex digest of what gives the tokenizer's ids their meaning: the vocabulary (added tokens included),
    the special tokens and, for a `tokenizers` backend, its model's type and merges. Training records it in the
    model's config.json, so that a folder holding another run's tokenizer is refused when loaded.

    Settings that do not change what an id stands for (normalizer, pre-tokenizer, post-processor, `model_max_length`)
    and how the tokenizer was loaded are left out: the digest is the same in memory and saved and loaded again.
    """
    special = {}
    for name, value in sorted(tokenizer.special_tokens_map.items()):
        tokens = [str(token) for token in (value if isinstance(value, (list, tuple)) else [value])]
        special[name] = [[token, tokenizer.convert_tokens_to_ids(token)] for token in tokens]
    content = {
        "fingerprint_version": FINGERPRINT_VERSION,
        "vocab": sorted(tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0])),
        "special_tokens": special,
    }
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        model = json.loads(backend.to_str()).get("model", {})
        # merges are pairs ["a", "b"] in tokenizers >= 0.20, strings "a b" before
        merges = [merge.split(" ") if isinstance(merge, str) else list(merge) for merge in model.get("merges", [])]
        content["model"] = {"type": model.get("type"), "merges": merges}
    serialized = json.dumps(content, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(serialized.encode("utf-8")).hexdigest()


def tokenizer_sample(corpus: "Dataset", sample_pairs: int | None) -> "Dataset":
    """The pairs the BPE learns from: all of `corpus` up to `sample_pairs` pairs (None: no limit), else that many
    drawn with seed 0 and kept in corpus order (as sentencepiece's `input_sentence_size` does for WMT-sized corpora),
    so that the merges depend on the corpus alone."""
    if not sample_pairs or len(corpus) <= sample_pairs:
        return corpus
    rows = np.sort(np.random.default_rng(0).choice(len(corpus), size=sample_pairs, replace=False))
    return corpus.select(rows)


def side_texts(corpus: "Dataset", lang: str, batch_rows: int = 10_000) -> Iterator[str]:
    """The `lang` side of a `translation` corpus, read a batch of rows at a time (never the whole side at once)."""
    for batch in corpus.select_columns(["translation"]).iter(batch_size=batch_rows):
        yield from (pair[lang] for pair in batch["translation"])
