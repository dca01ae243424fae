"""The subcommands of `vanilla-transformer` (`vanilla_transformer/cli.py`), one module each.

A command module's docstring is its help (the first line: its summary in the command list), `add_arguments(parser)`
declares its flags, and `run(args)` does the work: arguments that do not go together raise `UsageError`, and an
expected failure ends with `sys.exit("error: ...")`. Each module imports what does the work (datasets, evaluate,
matplotlib, the trainer) inside `run`, so that `--help` stays quick.
"""

# --data-dir of the commands that read Multi30k: None is resolved by vanilla_transformer.data.multi30k.multi30k_dir
DATA_DIR_HELP = (
    "a folder of {split}.{lang} files and tok/; default: $VANILLA_TRANSFORMER_MULTI30K, else the official Multi30k "
    "files, downloaded once to the cache"
)


class UsageError(Exception):
    """Arguments that parse but do not go together: the command line prints its usage and this message and exits
    with status 2, as argparse's `parser.error` does."""
