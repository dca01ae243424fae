"""The `vanilla-transformer` command line (also `python -m vanilla_transformer`): one command with a subcommand per
stage of the paper's pipeline, from data and tokenizer (§5.1) through training (§5) and decoding (§6.1) to release.

    vanilla-transformer demo                                   # the README's main job
    vanilla-transformer train --preset multi30k --output-dir outputs/multi30k
    vanilla-transformer translate --model outputs/multi30k/final --input test2016.en > hyp.de
    vanilla-transformer COMMAND --help                         # a command's flags

Each subcommand is a module of `vanilla_transformer.commands`; `scripts/<name>.py` in a checkout runs the same
command with the same flags (`run_script`).
"""

import argparse
import sys
from importlib import import_module
from types import ModuleType

from . import __version__
from .commands import UsageError

# subcommand names, in the order of the pipeline; each is the module vanilla_transformer.commands.<name with _>
COMMANDS = (
    "demo",
    "download-multi30k",
    "train-tokenizer",
    "train",
    "train-no-trainer",
    "average",
    "translate",
    "evaluate",
    "plot-attention",
    "release",
    "push",
    "benchmark",
)


def _command(name: str) -> ModuleType:
    return import_module(f"{__package__}.commands.{name.replace('-', '_')}")


def _set_up(parser: argparse.ArgumentParser, command: ModuleType) -> None:
    command.add_arguments(parser)
    # the parser travels with the arguments so that a UsageError prints this command's usage
    parser.set_defaults(_run=command.run, _parser=parser)


def _expected_errors() -> tuple[type[Exception], ...]:
    """Failures whose message names the problem and the fix (a damaged model folder, settings a run cannot finish,
    data that cannot be had): the command prints that message, not a traceback. Imported only when an exception
    is on its way out, so that `--help` stays quick."""
    from .data.multi30k import Multi30kUnavailable
    from .integrity import ModelFolderError
    from .settings_check import SettingsError

    return Multi30kUnavailable, ModelFolderError, SettingsError


def _run(parser: argparse.ArgumentParser, argv: list[str] | None) -> None:
    args = parser.parse_args(argv)
    try:
        args._run(args)
    except UsageError as error:
        args._parser.error(str(error))
    except _expected_errors() as error:
        sys.exit(f"error: {type(error).__name__}: {error}")


def build_parser() -> argparse.ArgumentParser:
    """The `vanilla-transformer` parser, one subparser per entry of `COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="vanilla-transformer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for name in COMMANDS:
        command = _command(name)
        subparser = subparsers.add_parser(
            name,
            help=command.__doc__.splitlines()[0],
            description=command.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _set_up(subparser, command)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer` with `argv` (default: the command line)."""
    _run(build_parser(), argv)


def run_script(name: str, argv: list[str] | None = None) -> None:
    """Run the subcommand `name` as a standalone program (`scripts/<name>.py`): its flags at the top level and the
    script's file name in its usage."""
    command = _command(name)
    parser = argparse.ArgumentParser(description=command.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _set_up(parser, command)
    _run(parser, argv)
