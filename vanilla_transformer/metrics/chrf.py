"""chrF (Popović 2015) and chrF++ (Popović 2017) as sacreBLEU computes them, as a local `evaluate` metric with the
inputs and outputs of the Hub's `evaluate-metric/chrf`, plus the sacreBLEU signature string."""

import datasets
import evaluate
from sacrebleu.metrics import CHRF

_CITATION = """\
@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    url = "https://aclanthology.org/W15-3049",
    pages = "392--395",
}
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
Character n-gram F-score computed by the `sacrebleu` package; `word_order=2` adds word bigrams (chrF++).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): the translations to score, detokenized.
    references (`list` of `list` of `str`): one list of references per prediction, all lists of the same length
        (a plain `list` of `str` is taken as one reference per prediction).
    char_order (`int`): character n-gram order. Defaults to 6.
    word_order (`int`): word n-gram order; 2 gives chrF++. Defaults to 0.
    beta (`int`): weight of recall relative to precision. Defaults to 2.
    lowercase (`bool`): case-insensitive chrF. Defaults to `False`.
    whitespace (`bool`): keep whitespace in character n-grams. Defaults to `False`.
    eps_smoothing (`bool`): epsilon smoothing as chrF++.py, NLTK and Moses do; `False` uses the effective order
        as sacreBLEU does by default. Defaults to `False`.

Returns:
    'score', 'char_order', 'word_order', 'beta', and 'signature', e.g.
    'nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0'.

Examples:
    >>> chrf = vanilla_transformer.evaluation.load_metric("chrf")
    >>> predictions = ["The relationship between cats and dogs is not exactly friendly.",
    ...                "a good bookshop is just a genteel black hole that knows how to read."]
    >>> references = [["The relationship between dogs and cats is not exactly friendly."],
    ...               ["A good bookshop is just a genteel Black Hole that knows how to read."]]
    >>> round(chrf.compute(predictions=predictions, references=references)["score"], 2)
    84.64
"""


def _references_by_stream(references: list) -> list[list[str]]:
    """sacreBLEU takes references as streams (stream k = the k-th reference of every prediction), `evaluate` as one
    list per prediction: transpose, after checking that every prediction has as many references."""
    if references and isinstance(references[0], str):
        references = [[reference] for reference in references]
    counts = {len(per_prediction) for per_prediction in references}
    if len(counts) > 1:
        raise ValueError(
            f"chrF needs the same number of references for every prediction, got {sorted(counts)}; "
            f"pad with fewer references or drop the extra ones."
        )
    return [list(stream) for stream in zip(*references, strict=True)]


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class ChrF(evaluate.Metric):
    """chrF as sacreBLEU computes it; the class name gives `metric.name == "chr_f"`, as the Hub module's does."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            homepage="https://github.com/mjpost/sacreBLEU#chrf--chrf",
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
            codebase_urls=["https://github.com/mjpost/sacreBLEU#chrf--chrf"],
            reference_urls=["https://aclanthology.org/W15-3049", "https://github.com/m-popovic/chrF"],
        )

    def _compute(
        self,
        predictions: list[str],
        references: list,
        char_order: int = CHRF.CHAR_ORDER,
        word_order: int = CHRF.WORD_ORDER,
        beta: int = CHRF.BETA,
        lowercase: bool = False,
        whitespace: bool = False,
        eps_smoothing: bool = False,
    ) -> dict:
        chrf = CHRF(
            char_order=char_order,
            word_order=word_order,
            beta=beta,
            lowercase=lowercase,
            whitespace=whitespace,
            eps_smoothing=eps_smoothing,
        )
        score = chrf.corpus_score(predictions, _references_by_stream(references))
        return {
            "score": score.score,
            "char_order": score.char_order,
            "word_order": score.word_order,
            "beta": score.beta,
            "signature": chrf.get_signature().format(),
        }
