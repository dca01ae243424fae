"""A Hub-ready release folder: the averaged model, its tokenizer and code files, measured test scores, and a model
card (`README.md` with YAML metadata and `model-index` results)."""

import json
import shutil
import tempfile
from pathlib import Path

from .checkpoints import staged_folder
from .data.corpora import read_lines
from .evaluation import evaluate_model_on_split, score_translations

SMOKE_SENTENCES = 50  # the first N test2016 sentences, re-scored by a test against the card


def evaluate_release(folder: str | Path, data_dir: str | Path, splits: tuple[str, ...], batch_size: int = 100) -> dict:
    """Scores of the folder on each split (paper decoding), plus those of the first `SMOKE_SENTENCES` translations of
    the first split."""
    first = splits[0]
    with tempfile.TemporaryDirectory() as scratch:
        results = {
            split: evaluate_model_on_split(
                str(folder), split, data_dir, batch_size=batch_size, output_hypotheses=Path(scratch) / f"{split}.hyp"
            )
            for split in splits
        }
        hypotheses = read_lines(Path(scratch) / f"{first}.hyp")[:SMOKE_SENTENCES]
    references = read_lines(Path(data_dir) / f"{first}.de")[:SMOKE_SENTENCES]
    results[f"{first}[:{SMOKE_SENTENCES}]"] = score_translations(hypotheses, references)
    return results


def _summary(scores: dict) -> dict:
    summary = {"sacrebleu": round(scores["bleu"]["score"], 2), "chrf": round(scores["chrf"]["score"], 2)}
    if scores.get("tokenized_bleu"):
        summary["tokenized_bleu"] = round(scores["tokenized_bleu"]["score"], 2)
    summary["signature"] = scores["bleu"]["signature"]
    return summary


def render_model_card(name: str, results: dict, training: dict) -> str:
    """The model card: metadata, intended use, data and its terms, hyperparameters, results, how to reproduce."""
    summaries = {split: _summary(scores) for split, scores in results.items()}
    index_entries = []
    for split in ("test2016", "test2017"):
        if split not in summaries:
            continue
        s = summaries[split]
        index_entries.append(
            f"""      - task: {{type: translation, name: Translation En-De}}
        dataset: {{type: multi30k, name: Multi30k Task 1 {split}, split: {split}, args: en-de}}
        metrics:
          - {{type: bleu, value: {s["tokenized_bleu"]}, name: BLEU (lowercased Moses-tokenized reference)}}
          - {{type: sacrebleu, value: {s["sacrebleu"]}, name: sacreBLEU}}
          - {{type: chrf, value: {s["chrf"]}, name: chrF}}"""
        )
    rows = "\n".join(
        f"| {split} | {s.get('tokenized_bleu', '–')} | {s['sacrebleu']} | {s['chrf']} |"
        for split, s in summaries.items()
    )
    hyper = "\n".join(f"| `{key}` | {value} |" for key, value in training["hyperparameters"].items())
    signature = next(iter(summaries.values()))["signature"]
    return f"""---
language: [en, de]
license: apache-2.0
library_name: transformers
pipeline_tag: translation
tags: [translation, transformer, attention-is-all-you-need, multi30k]
datasets: [multi30k]
metrics: [bleu, sacrebleu, chrf]
model-index:
  - name: {name}
    results:
{chr(10).join(index_entries)}
---

# {name}

The post-LayerNorm Transformer of *Attention Is All You Need* (Vaswani et al. 2017), small configuration, trained
from scratch on Multi30k Task 1 English→German with the paper's recipe (Adam β=(0.9, 0.98), ε=1e-9; the §5.3
learning-rate schedule; label smoothing 0.1; token-based batches; averaged checkpoints, §6.1) and decoding with the
paper's beam search (beam 4, GNMT length penalty α=0.6, at most input length + 50 tokens). Code:
[vanilla_transformer](https://github.com/) — the two code files in this folder make it loadable without it.

**Status: {training["status"]}**

```python
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{name}", trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained("{name}", trust_remote_code=True)
batch = tokenizer(["A man is riding a bike down the street."], return_tensors="pt")
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))  # the paper's decoding by default
```

## Intended use and limitations
For teaching and research on the original Transformer: a small, fully reproducible En→De model. Multi30k sentences
are short image descriptions (about 12 words); the model does not translate news, dialogue or long text well, knows
a vocabulary of 29,000 training captions, and has not been evaluated for bias. Not for production translation.

## Training data and its terms
[Multi30k](https://github.com/multi30k/dataset) Task 1 (Elliott et al. 2016): 29,000 training pairs, tuned on `valid`
(1,014), reported on `test2016` and `test2017` (1,000 each). Multi30k is partly derived from Flickr30K; its
maintainers provide it **solely for non-commercial research and educational purposes**, and the images are subject
to Flickr's terms. The weights are derived from that data; respect those terms when you use them.

## Results
Scored on all sentences of each split with the paper's decoding. "BLEU (tok)" is BLEU on the official lowercased
Moses-tokenized reference (`tok/*.lc.norm.tok.de`), our output lowercased and tokenized the same way: the metric
of the Multi30k literature (the best published text-only Transformer: 41.02 on test2016). sacreBLEU and chrF are
on the raw, cased references.

| split | BLEU (tok) | sacreBLEU | chrF |
|---|---|---|---|
{rows}

sacreBLEU signature: `{signature}`

## Training
{training["summary"]}

| hyperparameter | value |
|---|---|
{hyper}

Reproduce (resumes when interrupted), then average and release:

```bash
python scripts/train.py --preset multi30k --output-dir outputs/multi30k
python scripts/release.py --run-dir outputs/multi30k --output-dir model_cards/{name}
```

## Citation
```bibtex
@inproceedings{{vaswani2017attention,
  title = {{Attention Is All You Need}},
  author = {{Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and
            Gomez, Aidan N. and Kaiser, {{\\L}}ukasz and Polosukhin, Illia}},
  booktitle = {{Advances in Neural Information Processing Systems}},
  year = {{2017}}
}}
@inproceedings{{elliott2016multi30k,
  title = {{Multi30K: Multilingual English-German Image Descriptions}},
  author = {{Elliott, Desmond and Frank, Stella and Sima'an, Khalil and Specia, Lucia}},
  booktitle = {{Proceedings of the 5th Workshop on Vision and Language}},
  year = {{2016}}
}}
```
"""


def write_release(final_dir: str | Path, release_dir: str | Path, results: dict, training: dict) -> Path:
    """Copy the model folder, write `results.json` and the card; the folder replaces `release_dir` only whole."""
    release = Path(release_dir)
    with staged_folder(release) as staging:
        for item in Path(final_dir).iterdir():
            if item.is_file():
                shutil.copy2(item, staging / item.name)
        (staging / "results.json").write_text(
            json.dumps({"results": {k: _summary(v) for k, v in results.items()}, "training": training}, indent=2) + "\n"
        )
        (staging / "README.md").write_text(render_model_card(release.name, results, training))
    return release
