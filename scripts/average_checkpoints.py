"""Average the last N checkpoints of a training run into one loadable model folder (§6.1).

python scripts/average_checkpoints.py --run-dir outputs/multi30k --last 10 --output-dir outputs/multi30k/final
"""

import argparse

import vanilla_transformer  # noqa: F401  (registers the Auto classes)
from vanilla_transformer.checkpoints import average_checkpoints


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True, help="the folder holding checkpoint-<step> folders")
    parser.add_argument(
        "--last", type=int, default=5, help="how many of the newest checkpoints (paper: 5 base, 20 big)"
    )
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args()
    averaged = average_checkpoints(args.run_dir, args.output_dir, args.last)
    print(f"averaged {', '.join(p.name for p in averaged)} into {args.output_dir}")


if __name__ == "__main__":
    main()
