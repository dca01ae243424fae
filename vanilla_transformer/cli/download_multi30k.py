"""Print the Multi30k folder, downloading the official files to the cache once.

Multi30k Task 1 (En→De): the folder is the one `evaluate --model` and `release` read when given no --data-dir.

    vanilla-transformer download-multi30k                  # $VANILLA_TRANSFORMER_MULTI30K, else the cache
    vanilla-transformer download-multi30k --data-dir ../shared/data/multi30k
"""

import argparse
import logging
import sys

from .arguments import DATA_DIR_HELP, existing_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the files are."""
    parser.add_argument("--data-dir", default=None, type=existing_dir, help=DATA_DIR_HELP)


def run(args: argparse.Namespace) -> None:
    """Resolve the folder with `vanilla_transformer.data.multi30k.multi30k_dir` and print it (alone on stdout, for
    `$(vanilla-transformer download-multi30k)`); progress goes to stderr."""
    # imported here: the module belongs to the data stage, and --help must not need it
    from ..data.multi30k import multi30k_dir

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    print(multi30k_dir(args.data_dir))
