"""The data pipeline at the paper's scale: raw text to the first update, a restart, peak memory, cache size and the
loader's rate, on a synthetic WMT14-shaped corpus of N pairs (`scripts/lab/data_benchmark.py` says what is
counted and how the corpus is drawn).

    python scripts/benchmark_data.py --pairs 1000000,4500000 --workdir /tmp/data-bench
    python scripts/benchmark_data.py --pairs 100000 --workdir /tmp/data-bench --preset demo
"""

import argparse
import json
import sys
from pathlib import Path

from vanilla_transformer.cli.arguments import output_dir, output_file_in_existing_folder
from vanilla_transformer.cli.main import run_script


def _pair_counts(text: str) -> list[int]:
    try:
        counts = [int(part.replace("_", "")) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give pair counts separated by commas, e.g. 1000000,4500000"
        ) from None
    if any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: every pair count must be 1 or more")
    return counts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vanilla_transformer.training.presets import TRAINING_PRESETS

    parser.add_argument(
        "--pairs", type=_pair_counts, default=[1_000_000, 4_500_000], help="corpus sizes, e.g. 1000000,4500000"
    )
    parser.add_argument(
        "--workdir",
        type=output_dir,
        required=True,
        help="a new or empty folder for the corpora, runs, caches and logs (or one an earlier call made: its corpora "
        "are reused, the rest replaced)",
    )
    parser.add_argument("--preset", default="paper-base", choices=sorted(TRAINING_PRESETS))
    parser.add_argument(
        "--train-flags",
        default="",
        help="more flags for train, in one string (e.g. '--tokens-per-update 8192 --threads 2')",
    )
    parser.add_argument(
        "--output",
        default=None,
        type=output_file_in_existing_folder,
        help="the JSON report (default: benchmark-data.json in --workdir)",
    )


def run(args: argparse.Namespace) -> None:
    """Measure each corpus size in turn, writing the report after each."""
    from lab.benchmark import machine_description
    from lab.data_benchmark import benchmark_data, prepare_workdir

    from vanilla_transformer.files.outputs import check_output_file, write_text_atomic

    workdir = Path(args.workdir)
    output = Path(args.output) if args.output else workdir / "benchmark-data.json"
    check_output_file(output)  # a file given with --output is replaced once the new report is whole
    prepare_workdir(workdir)
    report = {"machine": machine_description("cpu"), "results": []}
    for pairs in args.pairs:
        result = benchmark_data(pairs, workdir, args.preset, tuple(args.train_flags.split()))
        report["results"].append(result)
        write_text_atomic(output, json.dumps(report, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    print(f"report written to {output}")


if __name__ == "__main__":
    run_script(sys.modules[__name__])
