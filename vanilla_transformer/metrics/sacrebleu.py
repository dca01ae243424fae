"""sacreBLEU (Post 2018) as a local `evaluate` metric, with the inputs and outputs of the Hub's
`evaluate-metric/sacrebleu`, plus the signature string that makes a BLEU score reproducible."""

import datasets
import evaluate
from sacrebleu.metrics import BLEU

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    url = "https://www.aclweb.org/anthology/W18-6319",
    pages = "186--191",
}
"""

_DESCRIPTION = """\
Corpus BLEU computed by the `sacrebleu` package, which tokenizes detokenized text itself (13a by default, as
mteval-v13a.pl) so that scores are comparable across papers that report the same signature.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): the translations to score, detokenized.
    references (`list` of `list` of `str`): one list of references per prediction, all lists of the same length
        (a plain `list` of `str` is taken as one reference per prediction).
    smooth_method (`str`): `'exp'` (default), `'floor'`, `'add-k'` or `'none'`.
    smooth_value (`float`): the value for `'floor'` (default 0.1) or `'add-k'` (default 1).
    force (`bool`): score even if the predictions look tokenized. Defaults to `False`.
    lowercase (`bool`): case-insensitive BLEU. Defaults to `False`.
    tokenize (`str`): `'13a'` (default), `'none'`, `'intl'`, `'char'`, `'zh'`, `'ja-mecab'`, ...
    use_effective_order (`bool`): ignore n-gram orders without matches (for sentence-level BLEU). Defaults to `False`.
    trg_lang (`str`): the target language; without `tokenize`, sacreBLEU then picks its tokenizer as its command line
        does: `'zh'` for Chinese, `'ja-mecab'` for Japanese, `'ko-mecab'` for Korean, `'13a'` otherwise.

Returns:
    'score': BLEU, 'counts': matching n-grams, 'totals': hypothesis n-grams, 'precisions': n-gram precisions,
    'bp': brevity penalty, 'sys_len': hypothesis length, 'ref_len': reference length,
    'signature': the sacreBLEU signature, e.g. 'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0'.

Examples:
    >>> sacrebleu = vanilla_transformer.evaluation.load_metric("sacrebleu")
    >>> predictions = ["hello there general kenobi", "on our way to ankh morpork"]
    >>> references = [["hello there general kenobi", "hello there !"], ["goodbye ankh morpork", "ankh morpork"]]
    >>> round(sacrebleu.compute(predictions=predictions, references=references)["score"], 1)
    39.8
"""


def _references_by_stream(references: list) -> list[list[str]]:
    """sacreBLEU takes references as streams (stream k = the k-th reference of every prediction), `evaluate` as one
    list per prediction: transpose, after checking that every prediction has as many references."""
    if references and isinstance(references[0], str):
        references = [[reference] for reference in references]
    counts = {len(per_prediction) for per_prediction in references}
    if len(counts) > 1:
        raise ValueError(
            f"sacreBLEU needs the same number of references for every prediction, got {sorted(counts)}; "
            f"pad with fewer references or drop the extra ones."
        )
    return [list(stream) for stream in zip(*references, strict=True)]


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Sacrebleu(evaluate.Metric):
    """BLEU (Papineni et al. 2002) as sacreBLEU computes it; the class name gives `metric.name == "sacrebleu"`, as
    the Hub module's does."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            homepage="https://github.com/mjpost/sacreBLEU",
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Sequence(datasets.Value("string", id="sequence"), id="references"),
                    }
                ),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Value("string", id="sequence"),
                    }
                ),
            ],
            codebase_urls=["https://github.com/mjpost/sacreBLEU"],
            reference_urls=["https://aclanthology.org/W18-6319"],
        )

    def _compute(
        self,
        predictions: list[str],
        references: list,
        smooth_method: str = "exp",
        smooth_value: float | None = None,
        force: bool = False,
        lowercase: bool = False,
        tokenize: str | None = None,
        use_effective_order: bool = False,
        trg_lang: str = "",
    ) -> dict:
        bleu = BLEU(
            lowercase=lowercase,
            force=force,
            tokenize=tokenize,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            effective_order=use_effective_order,
            trg_lang=trg_lang,
        )
        score = bleu.corpus_score(predictions, _references_by_stream(references))
        return {
            "score": score.score,
            "counts": score.counts,
            "totals": score.totals,
            "precisions": score.precisions,
            "bp": score.bp,
            "sys_len": score.sys_len,
            "ref_len": score.ref_len,
            "signature": bleu.get_signature().format(),
        }
