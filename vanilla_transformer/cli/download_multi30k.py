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
    parser.add_argument("--data-dir", default=None, type=existing_dir, help=DATA_DIR_HELP)


def run(args: argparse.Namespace) -> None:
    from ..data.multi30k import multi30k_dir

    # the folder alone on stdout, for `$(vanilla-transformer download-multi30k)`; progress goes to stderr
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    print(multi30k_dir(args.data_dir))
