"""The subcommands of `vanilla-transformer` (`vanilla_transformer/cli.py`), one module each.

A command module's docstring is its help (the first line: its summary in the command list), `add_arguments(parser)`
declares its flags, and `run(args)` does the work: arguments that do not go together raise `UsageError`, and an
expected failure ends with `sys.exit("error: ...")`. Each module imports what does the work (datasets, evaluate,
matplotlib, the trainer) inside `run`, so that `--help` stays quick.
"""

import argparse

# --data-dir of the commands that read Multi30k: None is resolved by vanilla_transformer.data.multi30k.multi30k_dir
DATA_DIR_HELP = (
    "a folder of {split}.{lang} files and tok/; default: $VANILLA_TRANSFORMER_MULTI30K, else the official Multi30k "
    "files, downloaded once to the cache"
)


class UsageError(Exception):
    """Arguments that parse but do not go together: the command line prints its usage and this message and exits
    with status 2, as argparse's `parser.error` does."""


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags `train` and `train-no-trainer` share: `--preset` with one flag per preset field, the output folder,
    the languages, and the options both training functions take."""
    from ..recipe import add_preset_arguments

    add_preset_arguments(parser)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--source-lang", default="en")
    parser.add_argument("--target-lang", default="de")
    parser.add_argument("--per-device-batch-size", type=int, help="batches of this many pairs instead of tokens")
    parser.add_argument("--max-grad-norm", type=float, default=0.0, help="clip gradients to this norm (0: never)")
    parser.add_argument("--eval-beams", type=int, default=1, help="beams for validation BLEU during training")
    parser.add_argument("--eval-samples", type=int, help="validate on the first N valid pairs only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-resume", action="store_true", help="never resume: stop with an error if --output-dir already holds a run"
    )
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--log-steps", type=int, default=50)
