"""Local `evaluate` metric modules, loaded by path so that they work without the Hugging Face Hub.

`evaluate.load("sacrebleu")` and `evaluate.load("chrf")` download the metric scripts `evaluate-metric/sacrebleu`
and `evaluate-metric/chrf` from the Hub and fail offline. `sacrebleu.py` and `chrf.py` here take the same inputs and
return the same keys, plus the sacreBLEU signature, and compute everything with the `sacrebleu` package. Load them
with `vanilla_transformer.evaluation.load_metric("sacrebleu")`, or `evaluate.load(<path to the .py file>)`.

Each file is self-contained (it imports only `sacrebleu`, `datasets` and `evaluate`) because `evaluate.load` copies
the script alone into its modules cache before importing it.
"""
