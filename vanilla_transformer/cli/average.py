"""Average the last N checkpoints of a training run into one loadable model folder (§6.1).

The run folder holds the checkpoint-<step> folders that `vanilla-transformer train` writes.

    vanilla-transformer average --run-dir outputs/multi30k --last 10 --output-dir outputs/multi30k/final
"""

import argparse

from .arguments import add_overwrite_argument, existing_dir, output_dir, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run-dir", required=True, type=existing_dir, help="the folder holding checkpoint-<step> folders"
    )
    parser.add_argument(
        "--last", type=positive_int, default=5, help="how many of the newest checkpoints (paper: 5 base, 20 big)"
    )
    parser.add_argument("--output-dir", required=True, type=output_dir)
    add_overwrite_argument(parser)


def run(args: argparse.Namespace) -> None:
    from ..errors import ModelFolderError
    from ..files.outputs import folder_in_use
    from ..training.checkpoints import average_checkpoints

    try:
        averaged = average_checkpoints(args.run_dir, args.output_dir, args.last, overwrite=args.overwrite)
    except (FileNotFoundError, ModelFolderError) as error:
        if not folder_in_use(args.run_dir):
            raise
        # a checkpoint that went while it was read: the run keeps only its newest --average-last
        raise ModelFolderError(
            f"{error}. A run is training in {args.run_dir} now and deletes its oldest checkpoint as it saves a new "
            f"one: average again, or once the run has ended."
        ) from error
    print(f"averaged {', '.join(p.name for p in averaged)} into {args.output_dir}")
