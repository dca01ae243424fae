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
from vanilla_transformer.checkpoints import average_checkpoints, list_checkpoints
from vanilla_transformer.recipe import read_run_preset
from vanilla_transformer.release import adopt_best_length_penalty, evaluate_release, training_summary, write_release


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
    preset = read_run_preset(run / "preset.json") if (run / "preset.json").is_file() else {}
    final = run / "final"
    averaged = average_checkpoints(run, final, args.last or preset.get("average_last", 5))
    on_valid = {}
    if args.length_penalties:
        on_valid = adopt_best_length_penalty(final, args.data_dir, args.length_penalties)
    training = training_summary(run, preset, final, averaged, args.hardware, args.status, args.train_hours, on_valid)
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
