"""Scoring translations the two ways the README's Results report, with the keys of the Hub's `evaluate-metric`:
1. sacreBLEU and chrF of detokenized, cased output against the raw references, comparable across papers that print
   the same signature;
2. tokenized BLEU against the official lowercased, Moses-tokenized Multi30k references (`tok/`), the hypotheses
   preprocessed alike, as `multi-bleu.perl` scores: the Multi30k literature's number, not comparable with sacreBLEU.
"""

from collections.abc import Callable
from pathlib import Path

import numpy as np
import sacremoses
from sacrebleu.metrics import BLEU, CHRF
from transformers import EvalPrediction, PreTrainedTokenizerBase

from ..data.text import read_lines
from ..errors import DataError

# where labels, and predictions the Trainer pads to one array, hold no token (`DataCollatorForSeq2Seq`'s default)
IGNORED_LABEL_ID = -100


def _corpus_score(metric: BLEU | CHRF, keys: tuple[str, ...], hypotheses: list[str], references: list[str]) -> dict:
    score = metric.corpus_score(hypotheses, [references])
    return {key: getattr(score, key) for key in keys} | {"signature": metric.get_signature().format()}


def bleu_score(hypotheses: list[str], references: list[str], **options: object) -> dict:
    """sacreBLEU's corpus BLEU (`BLEU(**options)`) against one reference each, with its `signature`."""
    keys = ("score", "counts", "totals", "precisions", "bp", "sys_len", "ref_len")
    return _corpus_score(BLEU(**options), keys, hypotheses, references)


def chrf_score(hypotheses: list[str], references: list[str], **options: object) -> dict:
    """sacreBLEU's chrF (`CHRF(**options)`) against one reference each, with its `signature`."""
    return _corpus_score(CHRF(**options), ("score", "char_order", "word_order", "beta"), hypotheses, references)


def moses_tokenize(lines: list[str], lang: str) -> list[str]:
    """Lowercase, normalize punctuation and Moses-tokenize `lines` exactly as the official Multi30k `tok/` files were
    made (`lowercase.perl | normalize-punctuation.perl -l L | tokenizer.perl -l L`, Moses' default escaping, no `-a`).

    Two details make sacremoses match the Perl scripts on every line of every split in both languages:
    `perl_parity=True` (Perl maps `’` to `"`), and a trailing newline during normalization, because Perl reads each
    line with its newline and the German rule that moves a quote before a final period
    (`s/(\\.+)\\"(\\s*[^<])/\\"$1$2/`) needs a character after the quote.
    """
    normalizer = sacremoses.MosesPunctNormalizer(lang=lang, perl_parity=True)
    tokenizer = sacremoses.MosesTokenizer(lang=lang)
    return [
        tokenizer.tokenize(normalizer.normalize(line.lower() + "\n"), escape=True, return_str=True) for line in lines
    ]


def _check_line_counts(hypotheses: list[str], **references: list[str] | None) -> None:
    if not hypotheses:
        raise DataError("no hypotheses to score; expected one translation per reference line.")
    for name, lines in references.items():
        if lines is not None and len(lines) != len(hypotheses):
            raise DataError(
                f"{len(hypotheses)} hypotheses but {len(lines)} {name.replace('_', ' ')}: give one per reference line."
            )


def sacrebleu_options(lang: str, bleu_tokenize: str | None = None) -> dict:
    """The sacreBLEU options that score text in `lang`: its target language, from which sacreBLEU picks the tokenizer
    (to `13a` a sentence of Chinese, Japanese or Korean is one token, and BLEU 0), unless `bleu_tokenize` names one."""
    try:
        BLEU(trg_lang=lang, tokenize=bleu_tokenize)  # builds the tokenizer it picks
    except KeyError:
        raise DataError(
            f"bleu_tokenize={bleu_tokenize!r} is not a sacreBLEU tokenizer; use one of {', '.join(BLEU.TOKENIZERS)}."
        ) from None
    except RuntimeError as error:  # ja-mecab and ko-mecab without their MeCab package
        raise DataError(
            f'scoring {lang!r} text: {error} (pip install "sacrebleu[{lang}]"), or pick another tokenizer with '
            f"--bleu-tokenize (e.g. char)."
        ) from None
    return {"trg_lang": lang, "tokenize": bleu_tokenize}


def score_translations(
    hypotheses: list[str],
    references: list[str],
    tokenized_references: list[str] | None = None,
    lang: str = "de",
    lowercase: bool = False,
    bleu_tokenize: str | None = None,
) -> dict:
    """`{"num_sentences", "bleu", "chrf"}` of detokenized `hypotheses` in `lang` against one reference each and, given
    `tokenized_references`, `"tokenized_bleu"` (the module docstring's two ways)."""
    _check_line_counts(hypotheses, references=references, tokenized_references=tokenized_references)
    scores = {
        "num_sentences": len(hypotheses),
        "bleu": bleu_score(hypotheses, references, lowercase=lowercase, **sacrebleu_options(lang, bleu_tokenize)),
        "chrf": chrf_score(hypotheses, references, lowercase=lowercase),
    }
    if tokenized_references is not None:
        tokenized = moses_tokenize(hypotheses, lang)
        multi_bleu = bleu_score(tokenized, tokenized_references, tokenize="none", smooth_method="none", force=True)
        scores["tokenized_bleu"] = multi_bleu | {
            "preprocessing": (
                f"hypotheses: lowercase | normalize-punctuation -l {lang} | tokenizer -l {lang} "
                f"(sacremoses {sacremoses.__version__}, Moses escaping); references: as given"
            )
        }
    return scores


def compute_metrics_for_trainer(
    tokenizer: PreTrainedTokenizerBase, target_lang: str = "de", bleu_tokenize: str | None = None
) -> Callable[[EvalPrediction], dict[str, float]]:
    """A `compute_metrics` for `Seq2SeqTrainer(predict_with_generate=True)`: sacreBLEU and chrF of the generated
    translations against the decoded labels, and `gen_len`, the mean count of non-pad tokens (as transformers'
    `run_translation.py`)."""
    pad_token_id = tokenizer.pad_token_id
    if pad_token_id is None:
        raise DataError(f"{type(tokenizer).__name__} has no pad token; set one so that -100 can be replaced by it.")
    bleu_options = sacrebleu_options(target_lang, bleu_tokenize)

    def compute_metrics(eval_prediction: EvalPrediction) -> dict[str, float]:
        predictions = eval_prediction.predictions
        if isinstance(predictions, tuple):  # a model that returns more than logits: the generated ids come first
            predictions = predictions[0]
        predictions = np.where(predictions != IGNORED_LABEL_ID, predictions, pad_token_id)
        labels = np.where(eval_prediction.label_ids != IGNORED_LABEL_ID, eval_prediction.label_ids, pad_token_id)
        hypotheses = [text.strip() for text in tokenizer.batch_decode(predictions, skip_special_tokens=True)]
        references = [text.strip() for text in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        return {
            "bleu": bleu_score(hypotheses, references, **bleu_options)["score"],
            "chrf": chrf_score(hypotheses, references)["score"],
            "gen_len": float(np.mean(np.count_nonzero(predictions != pad_token_id, axis=1))),
        }

    return compute_metrics


def score_files(
    hypotheses_path: str | Path,
    references_path: str | Path,
    tokenized_references_path: str | Path | None = None,
    lang: str = "de",
    lowercase: bool = False,
    bleu_tokenize: str | None = None,
) -> dict:
    """`score_translations` of one-sentence-per-line files, with the paths in the result."""
    tokenized_references = read_lines(tokenized_references_path) if tokenized_references_path else None
    hypotheses, references = read_lines(hypotheses_path), read_lines(references_path)
    scores = score_translations(hypotheses, references, tokenized_references, lang, lowercase, bleu_tokenize)
    return {
        "hypotheses": str(hypotheses_path),
        "references": str(references_path),
        "tokenized_references": str(tokenized_references_path) if tokenized_references_path else None,
    } | scores
