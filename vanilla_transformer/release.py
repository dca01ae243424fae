"""A Hub-ready release folder: the averaged model, its tokenizer and code files, measured test scores, and a model
card (`README.md` with YAML metadata and `model-index` results)."""

import json
import shutil
import tempfile
from pathlib import Path

from .checkpoints import staged_folder
from .data.corpora import read_lines
from .evaluation import evaluate_model_on_split, score_translations
from .hub import render_model_card

SMOKE_SENTENCES = 50  # the first N test2016 sentences, re-scored by a test against the card
REPRODUCE = (
    "python scripts/train.py --preset multi30k --output-dir outputs/multi30k",
    "python scripts/release.py --run-dir outputs/multi30k --output-dir model_cards/{name}",
)


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


def write_release(final_dir: str | Path, release_dir: str | Path, results: dict, training: dict) -> Path:
    """Copy the model folder, write `results.json` and the card (`model_cards/template.md`); the folder replaces
    `release_dir` only whole."""
    release = Path(release_dir)
    summaries = {split: _summary(scores) for split, scores in results.items()}
    card = render_model_card(
        release.name,
        summaries,
        training,
        dataset="multi30k",
        reproduce=[line.format(name=release.name) for line in REPRODUCE],
    )
    with staged_folder(release) as staging:
        for item in Path(final_dir).iterdir():
            if item.is_file():
                shutil.copy2(item, staging / item.name)
        (staging / "results.json").write_text(json.dumps({"results": summaries, "training": training}, indent=2) + "\n")
        card.save(staging / "README.md")
    return release
