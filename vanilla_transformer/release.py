"""A Hub-ready release folder: the averaged model, its tokenizer and code files, measured test scores, and a model
card (`README.md` with YAML metadata and `model-index` results)."""

import json
import shutil
import tempfile
from pathlib import Path

from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

from .checkpoints import checkpoint_step
from .data.corpora import read_lines
from .data.multi30k import multi30k_dir
from .evaluation import evaluate_model_on_split, score_translations
from .hub import render_model_card, training_hyperparameters
from .outputs import check_not_an_input, check_output_folder, staged_file, staged_folder
from .presets import PRESET_FLAGS, TRAINING_PRESETS, same_setting
from .tokenization import lowercases

SMOKE_SENTENCES = 50  # the first N test2016 sentences, re-scored by a test against the card


def train_command(run_preset: dict, output_dir: str) -> str:
    """The `vanilla-transformer train` line that trains a run with this `preset.json`: the named preset it differs
    least from, and a flag for each field it changed. A change no flag can make (the model preset or its overrides)
    raises."""

    run_preset = json.loads(json.dumps(run_preset))  # compare as preset.json holds them: lists, not tuples

    def changed(name: str) -> list[str]:
        preset = json.loads(json.dumps(TRAINING_PRESETS[name].as_dict()))
        return [field for field in preset if not same_setting(field, run_preset.get(field), preset[field])]

    name = min(TRAINING_PRESETS, key=lambda name: len(changed(name)))
    unflagged = [field for field in changed(name) if field not in PRESET_FLAGS]
    if unflagged:
        raise ValueError(
            f"the run's preset differs from {name!r} in {unflagged}, which `vanilla-transformer train` has no flag "
            f"for; add the run as a named preset in vanilla_transformer/presets.py to release it with a reproducible "
            f"command."
        )

    def flag(field: str) -> str:
        name, value = field.replace("_", "-"), run_preset[field]
        if isinstance(value, bool):
            return f" --{name}" if value else f" --no-{name}"
        return f" --{name} {value}"

    flags = "".join(flag(field) for field in changed(name))
    return f"vanilla-transformer train --preset {name}{flags} --output-dir {output_dir}"


def tune_length_penalty(
    folder: str | Path, data_dir: str | Path | None, alphas: list[float], split: str = "valid", batch_size: int = 100
) -> dict[float, float]:
    """BLEU on `split` for each length penalty α, the folder's other decoding settings kept: the paper chose its
    α = 0.6 "after experimentation on the development set" (§6.1), and a release on other data may do the same. The
    BLEU is the tokenized one where the split has the official tokenized reference, sacreBLEU otherwise.
    `data_dir=None` is Multi30k (`multi30k_dir()`)."""
    data_dir = multi30k_dir(data_dir)
    scores = {}
    for alpha in alphas:
        result = evaluate_model_on_split(str(folder), split, data_dir, batch_size=batch_size, length_penalty=alpha)
        scores[alpha] = round((result.get("tokenized_bleu") or result["bleu"])["score"], 2)
    return scores


def set_length_penalty(folder: str | Path, alpha: float) -> None:
    """Make `alpha` the default length penalty of the model folder's `generation_config.json` (replaced whole)."""
    generation = GenerationConfig.from_pretrained(folder)
    generation.length_penalty = alpha
    with tempfile.TemporaryDirectory() as scratch, staged_file(Path(folder) / "generation_config.json") as staging:
        generation.save_pretrained(scratch)  # validates the config, and writes it as transformers does
        shutil.copyfile(Path(scratch) / "generation_config.json", staging)


def adopt_best_length_penalty(
    folder: str | Path, data_dir: str | Path | None, alphas: list[float]
) -> dict[float, float]:
    """Tune α on valid (`tune_length_penalty`; `data_dir=None` is Multi30k) and make the best one the folder's
    default; on a tie the α listed first wins. Returns every α's score, for the card."""
    on_valid = tune_length_penalty(folder, data_dir, alphas)
    best = max(on_valid, key=on_valid.get)
    set_length_penalty(folder, best)
    return on_valid


def training_summary(
    run_dir: str | Path,
    run_preset: dict,
    final_dir: str | Path,
    averaged: list[Path],
    hardware: str,
    status: str,
    train_hours: float | None = None,
    on_valid: dict[float, float] | None = None,
) -> dict:
    """The card's account of how the averaged model in `final_dir` was trained: parameters, updates, epochs, time,
    hardware, the averaged checkpoints, the length penalties tried on valid, and the hyperparameters (from the config
    and `run_preset`, the run's `preset.json`, which the caller has read already).

    Without `train_hours` the time runs from the tokenizer's file to the last averaged checkpoint, which overstates a
    run resumed after a pause: give the sum of its stretches then."""
    run, final = Path(run_dir), Path(final_dir)
    state = json.loads((averaged[-1] / "trainer_state.json").read_text())
    config = json.loads((final / "config.json").read_text())
    generation = json.loads((final / "generation_config.json").read_text())
    hours = (
        train_hours or (averaged[-1].stat().st_mtime - (run / "tokenizer" / "tokenizer.json").stat().st_mtime) / 3600
    )
    model = AutoModelForSeq2SeqLM.from_pretrained(final)
    parameters = sum(tensor.numel() for tensor in model.parameters())
    tuning = ""
    if on_valid:
        tuning = (
            f" Length penalty α={generation['length_penalty']}, the best on valid (BLEU (tok) "
            f"{', '.join(f'{alpha}: {bleu}' for alpha, bleu in on_valid.items())}); §6.1 chose its α on the "
            f"development set too."
        )
    return {
        "status": status,
        "summary": (
            f"{parameters:,} parameters; {state['global_step']} updates ({state['epoch']:.1f} epochs) in "
            f"{hours:.1f} h wall-clock on {hardware}; the average of checkpoints "
            f"{', '.join(str(checkpoint_step(path)) for path in averaged)}.{tuning}"
        ),
        "parameters": parameters,
        "updates": state["global_step"],
        "epochs": round(state["epoch"], 2),
        "wall_clock_hours": round(hours, 2),
        "hardware": hardware,
        "averaged_checkpoints": [path.name for path in averaged],
        "tokenized_bleu_on_valid_by_length_penalty": {str(alpha): bleu for alpha, bleu in (on_valid or {}).items()},
        "hyperparameters": training_hyperparameters(config, run_preset, generation),
    }


def evaluate_release(
    folder: str | Path, data_dir: str | Path | None, splits: tuple[str, ...], batch_size: int = 100
) -> dict:
    """Scores of the folder on each split (paper decoding), plus those of the first `SMOKE_SENTENCES` translations of
    the first split. `data_dir=None` is Multi30k (`multi30k_dir()`)."""
    data_dir = multi30k_dir(data_dir)
    first = splits[0]
    with tempfile.TemporaryDirectory() as scratch:
        results = {
            split: evaluate_model_on_split(
                str(folder), split, data_dir, batch_size=batch_size, output_hypotheses=Path(scratch) / f"{split}.hyp"
            )
            for split in splits
        }
        hypotheses = read_lines(Path(scratch) / f"{first}.hyp")[:SMOKE_SENTENCES]
    references = read_lines(data_dir / f"{first}.de")[:SMOKE_SENTENCES]
    lowercase = lowercases(AutoTokenizer.from_pretrained(folder))
    results[f"{first}[:{SMOKE_SENTENCES}]"] = score_translations(hypotheses, references, lowercase=lowercase)
    return results


def _summary(scores: dict) -> dict:
    summary = {"sacrebleu": round(scores["bleu"]["score"], 2), "chrf": round(scores["chrf"]["score"], 2)}
    if scores.get("tokenized_bleu"):
        summary["tokenized_bleu"] = round(scores["tokenized_bleu"]["score"], 2)
    summary["signature"] = scores["bleu"]["signature"]
    return summary


def write_release(
    final_dir: str | Path,
    release_dir: str | Path,
    results: dict,
    training: dict,
    run_preset: dict,
    release_flags: str = "",
    overwrite: bool = False,
) -> Path:
    """Copy the model folder, write `results.json` and the card (`templates/model_card.md`, with the commands that
    reproduce the run from its `preset.json`, and the release with `release_flags`, the options of
    `vanilla-transformer release` it used); the folder replaces `release_dir` only whole. A `release_dir` that is,
    holds or lies inside the model folder is refused, as is a non-empty one that is not a release folder a command
    wrote, unless `overwrite` (`outputs.check_output_folder`)."""
    release = Path(release_dir)
    check_not_an_input(release, [("the averaged model", final_dir)])
    check_output_folder(release, "release", overwrite)
    summaries = {split: _summary(scores) for split, scores in results.items()}
    run_dir = f"outputs/{release.name}"
    card = render_model_card(
        release.name,
        summaries,
        training,
        dataset="multi30k",
        reproduce=[
            train_command(run_preset, run_dir),
            f"vanilla-transformer release --run-dir {run_dir} --output-dir {release.name}" + release_flags,
        ],
    )
    with staged_folder(release, "release", "release", overwrite) as staging:
        for item in Path(final_dir).iterdir():
            if item.is_file() and not item.name.startswith("."):  # not the model folder's marker
                shutil.copy2(item, staging / item.name)
        (staging / "results.json").write_text(json.dumps({"results": summaries, "training": training}, indent=2) + "\n")
        card.save(staging / "README.md")
    return release
