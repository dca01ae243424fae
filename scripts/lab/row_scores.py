"""A Table 3 row's scores as the paper reads the table (§6.2): dev perplexity per wordpiece, sacreBLEU and, where the
corpus has Multi30k's official `tok/` references, tokenized BLEU, each test sentence's BLEU statistics (for the
paired bootstrap), and the dev curve and training loss as the run logged them."""

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from vanilla_transformer.errors import DataError
from vanilla_transformer.training.presets import TrainingPreset

from .grid_records import GridSettings, plain


@torch.inference_mode()
def dev_perplexity(model, tokenizer, sources: list[str], targets: list[str], batch_size: int = 64) -> float:
    """Perplexity per target wordpiece (the closing </s> included) under teacher forcing, without label smoothing:
    exp of the summed cross-entropy over the target tokens."""
    total, tokens = 0.0, 0
    for start in range(0, len(sources), batch_size):
        batch = tokenizer(sources[start : start + batch_size], return_tensors="pt", padding=True).to(model.device)
        target = tokenizer(text_target=targets[start : start + batch_size], return_tensors="pt", padding=True)
        labels = target["input_ids"].masked_fill(target["attention_mask"] == 0, -100).to(model.device)
        # decoder inputs, not labels: the model's own (mean) loss is not needed beside this sum
        decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
        logits = model(**batch, decoder_input_ids=decoder_input_ids).logits
        total += float(F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="sum"))
        tokens += int((labels != -100).sum())
    mean = total / tokens
    return math.inf if mean > 700 else math.exp(mean)  # a diverged row's, where exp would overflow


def tokenized_references(corpus: str, split: str, source_lang: str, target_lang: str) -> list[str] | None:
    """The official lowercased, Moses-tokenized references of `split`, `tok/{split}.lc.norm.tok.{target_lang}`, where
    the corpus is a folder of Multi30k's layout that has them; None for any other corpus. The split is found as
    `load_corpus` finds it ("valid" also finds "validation")."""
    from vanilla_transformer.data.corpora import find_split
    from vanilla_transformer.data.multi30k import MULTI30K, multi30k_dir
    from vanilla_transformer.data.text import read_lines

    if corpus == MULTI30K:
        folder = multi30k_dir(languages=(source_lang, target_lang))
    elif Path(corpus).expanduser().is_dir():
        folder = Path(corpus).expanduser()
    else:
        return None
    try:
        split = find_split(split, sorted(path.stem for path in folder.glob(f"*.{source_lang}")), corpus)
    except DataError:
        return None
    path = folder / "tok" / f"{split}.lc.norm.tok.{target_lang}"
    return read_lines(path) if path.is_file() else None


def bleu_statistics(
    hypotheses: list[str], references: list[str], lang: str = "de", lowercase: bool = False
) -> list[list[int]]:
    """Each sentence's sufficient statistics of sacreBLEU's corpus BLEU as `score_translations` computes it:
    `[hypothesis length, reference length, 1- to 4-gram matches, 1- to 4-gram totals]`. Summed over any subset of the
    sentences they give its corpus BLEU (`bleu_from_statistics`), so the bootstrap needs no references."""
    from sacrebleu.metrics import BLEU

    from vanilla_transformer.inference.scoring import sacrebleu_options

    bleu = BLEU(lowercase=lowercase, **sacrebleu_options(lang))
    statistics = []
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        score = bleu.corpus_score([hypothesis], [[reference]])
        statistics.append([score.sys_len, score.ref_len, *score.counts, *score.totals])
    return statistics


def score_split(model, tokenizer, preset: TrainingPreset, split: str, settings: GridSettings) -> dict:
    """Translate `split` once with the model's generation config and score it (`score_translations`)."""
    from vanilla_transformer.data.corpora import load_corpus, sides
    from vanilla_transformer.data.tokenization import lowercases
    from vanilla_transformer.inference.scoring import score_translations
    from vanilla_transformer.inference.translation import translate

    source_lang, target_lang = settings.source_lang, settings.target_lang
    corpus = load_corpus(preset.corpus, split, source_lang, target_lang, preset.dataset_config)
    tokenized = tokenized_references(preset.corpus, split, source_lang, target_lang)
    if settings.eval_samples:
        corpus = corpus.select(range(min(settings.eval_samples, len(corpus))))
        tokenized = tokenized[: len(corpus)] if tokenized is not None else None
    sources, references = sides(corpus, source_lang, target_lang)
    hypotheses = translate(model, tokenizer, sources)
    lowercase = lowercases(tokenizer)  # a lowercasing model is scored case-insensitively, as `evaluate` does
    scores = score_translations(hypotheses, references, tokenized, lang=target_lang, lowercase=lowercase)
    return {
        "bleu": scores["bleu"]["score"],
        "signature": scores["bleu"]["signature"],
        "tokenized_bleu": scores["tokenized_bleu"]["score"] if tokenized is not None else None,
        "hypotheses": hypotheses,
        "statistics": bleu_statistics(hypotheses, references, target_lang, lowercase),
        "sources": sources,
        "references": references,
    }


def dev_curve(log_history: list[dict]) -> list[dict]:
    """The dev evaluations the run logged (greedy, `eval_steps` apart): step, dev BLEU and dev loss (None where not
    finite)."""
    return [
        {"step": entry["step"], "bleu": plain(entry["eval_bleu"]), "loss": plain(entry.get("eval_loss"))}
        for entry in log_history
        if "eval_bleu" in entry
    ]


def train_loss_curve(log_history: list[dict]) -> list[list]:
    """`[step, training loss]` of each logged training step (None where the loss was not finite)."""
    return [[entry["step"], plain(float(entry["loss"]))] for entry in log_history if "loss" in entry]
