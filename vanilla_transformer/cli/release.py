"""Release a run as a Hub-ready folder with a model card.

The run's last checkpoints are averaged (§6.1), and the average is scored with the paper's decoding (§6.1) on
Multi30k test2016 and test2017, or, for a run trained on an Anki/Tatoeba TSV file, on that file's own test split
(`data/anki.py`). With `--length-penalties 0.6,1.0,1.5`, valid is decoded with each length penalty α first, and the
best one becomes the release's default (§6.1 chose α on the development set); the card lists the BLEU of each.

    vanilla-transformer release --run-dir outputs/multi30k --output-dir model_cards/vanilla-transformer-multi30k-en-de
    vanilla-transformer release --run-dir outputs/en-zh --source-lang en --target-lang zh \\
        --length-penalties 0.6,1.0 --output-dir model_cards/vanilla-transformer-tatoeba-en-zh
"""

import argparse
import os
import platform
from pathlib import Path

from .arguments import (
    DATA_DIR_HELP,
    add_overwrite_argument,
    existing_dir,
    existing_file,
    float_list,
    non_negative_float,
    output_dir,
    positive_int,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", required=True, type=existing_dir)
    parser.add_argument("--output-dir", required=True, type=output_dir)
    parser.add_argument(
        "--last", type=positive_int, help="checkpoints to average (default: the run preset's average_last)"
    )
    parser.add_argument("--data-dir", type=existing_dir, help=DATA_DIR_HELP)
    parser.add_argument(
        "--corpus-file",
        type=existing_file,
        help="the Anki/Tatoeba TSV file the run trained on (default: the run's corpus when it is a file)",
    )
    parser.add_argument("--source-lang", help="the run's source language (default: en, or needed for a TSV file)")
    parser.add_argument("--target-lang", help="the run's target language (default: de, or needed for a TSV file)")
    # default None, resolved in run(): naming the GPU starts CUDA, which every other command's --help would pay for
    parser.add_argument(
        "--hardware", help="what the run trained on, for the card (default: this machine's GPU, else its CPU)"
    )
    parser.add_argument(
        "--train-hours",
        type=non_negative_float,
        help="training time for the card, e.g. the sum of train_runtime of resumed runs",
    )
    parser.add_argument("--status", default="final", help="a line for the card, e.g. 'training in progress'")
    parser.add_argument(
        "--length-penalties",
        type=float_list,
        help="comma-separated α values to try on valid; the best is the release's (default: the paper's 0.6)",
    )
    add_overwrite_argument(parser, "--output-dir (and the run's final/)")


def run(args: argparse.Namespace) -> None:
    from ..data.corpora import corpus_location
    from ..data.multi30k import MULTI30K_ENV
    from ..files.outputs import check_not_an_input, check_output_folder
    from ..release.build import (
        ReleaseData,
        adopt_best_length_penalty,
        evaluate_release,
        training_summary,
        write_release,
    )
    from ..training.checkpoints import average_checkpoints, list_checkpoints, run_inputs
    from ..training.run_folder import read_run_preset

    run_dir = Path(args.run_dir)
    final = run_dir / "final"
    preset = read_run_preset(run_dir / "preset.json") if (run_dir / "preset.json").is_file() else {}
    # before any work: the release folder destroys no input, and replaces only a release folder of ours
    inputs, holders = run_inputs(run_dir)
    inputs += [("the run's averaged model", final), ("--data-dir", args.data_dir or os.environ.get(MULTI30K_ENV))]
    trained_on = corpus_location(preset["corpus"]) if preset.get("corpus") else None
    inputs += [("--corpus-file", args.corpus_file), ("the run's corpus", trained_on)]
    check_not_an_input(args.output_dir, inputs, holders=holders)
    check_output_folder(args.output_dir, "release", args.overwrite)
    # scored on the test sets of what the run recorded it trained on, in its languages: never on other data
    data = ReleaseData.for_run(preset, args.data_dir, args.corpus_file, args.source_lang, args.target_lang)
    last = args.last or preset.get("average_last", 5)
    averaged = average_checkpoints(run_dir, final, last, overwrite=args.overwrite, command="release")
    on_valid = adopt_best_length_penalty(final, data, args.length_penalties) if args.length_penalties else {}
    machine = args.hardware
    if machine is None:
        import torch

        gpu = torch.cuda.is_available()
        machine = torch.cuda.get_device_name() if gpu else f"CPU ({platform.machine()}, {os.cpu_count()} cores)"
    training = training_summary(
        run_dir, preset, final, averaged, machine, args.status, args.train_hours, on_valid, data.valid_metric
    )
    results, examples = evaluate_release(final, data)
    # the options that change the released model, for the card's reproduce line
    release_flags = (f" --last {args.last}" if args.last else "") + (
        f" --length-penalties {','.join(map(str, args.length_penalties))}" if args.length_penalties else ""
    )
    release = write_release(
        final, args.output_dir, results, training, preset, release_flags, args.overwrite, data.record(), examples
    )
    print((release / "results.json").read_text(), end="")  # written with indent=2
    print(f"checkpoints available: {[p.name for p in list_checkpoints(run_dir)]}")
