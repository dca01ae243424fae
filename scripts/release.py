"""Average a run's last checkpoints, score them on Multi30k test2016/test2017 with the paper's decoding, and write a
Hub-ready release folder with a model card.

    python scripts/release.py --run-dir outputs/multi30k --output-dir model_cards/vanilla-transformer-multi30k-en-de

With `--length-penalties 0.6,1.0,1.5`, valid is decoded with each length penalty α first, and the best one becomes
the release's default (§6.1 chose α on the development set); the card lists the BLEU of each.
"""

import argparse
import json
import os
import platform
from pathlib import Path

import torch

import vanilla_transformer  # noqa: F401  (registers the Auto classes)
from vanilla_transformer.checkpoints import average_checkpoints, checkpoint_step, list_checkpoints
from vanilla_transformer.hub import training_hyperparameters
from vanilla_transformer.release import evaluate_release, set_length_penalty, tune_length_penalty, write_release


def hardware() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"CPU ({platform.machine()}, {os.cpu_count()} cores)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--last", type=int, help="checkpoints to average (default: the run preset's average_last)")
    parser.add_argument("--data-dir", default="../shared/data/multi30k")
    parser.add_argument("--hardware", default=hardware(), help="what the run trained on, for the card")
    parser.add_argument(
        "--train-hours", type=float, help="training time for the card, e.g. the sum of train_runtime of resumed runs"
    )
    parser.add_argument("--status", default="final", help="a line for the card, e.g. 'training in progress'")
    parser.add_argument(
        "--length-penalties",
        type=lambda text: [float(value) for value in text.split(",")],
        help="comma-separated α values to try on valid; the best is the release's (default: the paper's 0.6)",
    )
    args = parser.parse_args()

    run = Path(args.run_dir)
    preset = json.loads((run / "preset.json").read_text()) if (run / "preset.json").is_file() else {}
    last = args.last or preset.get("average_last", 5)
    final = run / "final"
    averaged = average_checkpoints(run, final, last)
    state = json.loads((averaged[-1] / "trainer_state.json").read_text())
    config = json.loads((final / "config.json").read_text())
    tuning, on_valid = "", {}
    if args.length_penalties:
        on_valid = tune_length_penalty(final, args.data_dir, args.length_penalties)
        best = max(on_valid, key=on_valid.get)
        set_length_penalty(final, best)
        tuning = (
            f" Length penalty α={best}, the best on valid (BLEU (tok) "
            f"{', '.join(f'{alpha}: {bleu}' for alpha, bleu in on_valid.items())}); §6.1 chose its α on the "
            f"development set too."
        )
    # from the tokenizer to the last checkpoint, which overstates a run resumed after a pause: give --train-hours then
    hours = (
        args.train_hours
        or (averaged[-1].stat().st_mtime - (run / "tokenizer" / "tokenizer.json").stat().st_mtime) / 3600
    )
    parameters = sum(t.numel() for t in vanilla_transformer.VanillaTransformerForConditionalGeneration.from_pretrained(
        final).parameters())  # fmt: skip
    training = {
        "status": args.status,
        "summary": (
            f"{parameters:,} parameters; {state['global_step']} updates ({state['epoch']:.1f} epochs) in "
            f"{hours:.1f} h wall-clock on {args.hardware}; the average of checkpoints "
            f"{', '.join(str(checkpoint_step(p)) for p in averaged)}.{tuning}"
        ),
        "parameters": parameters,
        "updates": state["global_step"],
        "epochs": round(state["epoch"], 2),
        "wall_clock_hours": round(hours, 2),
        "hardware": args.hardware,
        "averaged_checkpoints": [p.name for p in averaged],
        "tokenized_bleu_on_valid_by_length_penalty": {str(alpha): bleu for alpha, bleu in on_valid.items()},
        "hyperparameters": training_hyperparameters(
            config, preset, json.loads((final / "generation_config.json").read_text())
        ),
    }
    results = evaluate_release(final, args.data_dir, ("test2016", "test2017"))
    # the options that change the released model, for the card's reproduce line
    release_flags = (f" --last {args.last}" if args.last else "") + (
        f" --length-penalties {','.join(map(str, args.length_penalties))}" if args.length_penalties else ""
    )
    write_release(final, args.output_dir, results, training, preset, release_flags)
    print(json.dumps(json.loads((Path(args.output_dir) / "results.json").read_text()), indent=2))
    print(f"checkpoints available: {[p.name for p in list_checkpoints(run)]}")


if __name__ == "__main__":
    main()
