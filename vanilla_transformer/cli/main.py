"""The `vanilla-transformer` command line (also `python -m vanilla_transformer`): one command with a subcommand per
stage of the paper's pipeline, from data and tokenizer (§5.1) through training (§5) and decoding (§6.1) to release.

    vanilla-transformer demo                                   # the README's main job
    vanilla-transformer train --preset multi30k --output-dir outputs/multi30k
    vanilla-transformer translate --model outputs/multi30k/final --input test2016.en > hyp.de
    vanilla-transformer COMMAND --help                         # a command's flags

Each subcommand is a module of `vanilla_transformer.cli` (the flags' types are in `arguments`). The lab (Table 3, the
benchmarks, the GPU check) is not installed: its commands are `scripts/<name>.py` in a checkout (`run_script`).

Exit status: 0 done; 2 a user error, told in one line `error: ...` without a traceback (`--debug`, before or after
the command name, shows it): a flag's value, or any refusal of the package (`errors.VanillaTransformerError`: arguments
that do not go together, a missing or damaged file, settings no run can finish), or the operating system's refusal
of a path or a write (a file missing, no permission, a full disk); 1 anything else, a bug, with its traceback.
"""

import argparse
import errno
import os
import re
import sys
from importlib import import_module
from types import ModuleType

from .. import __version__
from ..errors import UsageError, VanillaTransformerError

# subcommand names, in the order of the pipeline; each is the module vanilla_transformer.cli.<name with _>
COMMANDS = (
    "demo",
    "download-multi30k",
    "train-tokenizer",
    "train",
    "average",
    "translate",
    "evaluate",
    "plot-attention",
    "release",
    "push",
    "export-ctranslate2",
)


DEBUG_HELP = "on an error, show its traceback too (for a bug report)"
# errors of the operating system about a path given: a file or folder missing, of the wrong kind, or not permitted
PATH_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
# a full disk or quota, a file-size limit, or a read-only file system: outputs are staged, so nothing was replaced
STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)
# how libraries that write files in Rust or C++ (safetensors, torch.save) report a full disk: no OSError reaches us
OS_ERROR_NUMBER = re.compile(r"\(os error (\d+)\)")
WRITE_FAILED = re.compile(r"file write failed|No space left on device")


def _set_up(parser: argparse.ArgumentParser, command: ModuleType) -> None:
    command.add_arguments(parser)
    # SUPPRESS: a command's parser sets `debug` only when given, and so never undoes a --debug before the command
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    # the parser travels with the arguments so that a UsageError prints this command's usage
    parser.set_defaults(_run=command.run, _parser=parser)


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and the exceptions it was raised from or while handling, outermost first."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _storage_error(error: BaseException) -> str | None:
    """The one line for a write refused for `STORAGE_ERRNOS` anywhere in `error`'s chain: an `OSError`, or the message
    of a library that writes in native code (safetensors' `(os error 28)`, torch.save's `file write failed`)."""
    for link in _chain(error):
        number = OS_ERROR_NUMBER.search(str(link))
        if isinstance(link, OSError) and link.errno in STORAGE_ERRNOS:
            # a copy's (shutil, os.rename) destination is `filename2`; `filename` is then its source
            written = link.filename2 or link.filename
            where = f" writing {written}" if written else ""
            cause, code = f"{link.strerror or link}{where}", link.errno
        elif number and int(number.group(1)) in STORAGE_ERRNOS:
            code = int(number.group(1))
            cause = os.strerror(code)
        elif not number and WRITE_FAILED.search(str(link)):
            cause, code = "a file could not be written (is the disk full?)", errno.ENOSPC
        else:
            continue
        if code == errno.EROFS:  # no space to free: another place is the only way
            fix = "the file system is mounted read-only; choose a writable folder (or point the cache elsewhere)"
        else:
            fix = "free space (or choose another disk)"
        return f"error: {cause}: {fix}; what was there is kept"
    return None


def user_error_message(error: BaseException) -> str | None:
    """The one line `error: ...` for a user error (the module docstring says which), or None for a bug."""
    if isinstance(error, VanillaTransformerError):
        return f"error: {error}"
    if message := _storage_error(error):
        return message
    if isinstance(error, PATH_ERRORS):
        return f"error: {error.filename}: {error.strerror}" if error.filename and error.strerror else f"error: {error}"
    return None


def _run(parser: argparse.ArgumentParser, argv: list[str] | None) -> None:
    """Parse `argv` and run the command: a user error ends it with one line (a `UsageError` with the command's usage
    too) and status 2, unless `--debug` asks for its traceback."""
    args = parser.parse_args(argv)
    try:
        args._run(args)
    except Exception as error:
        if getattr(args, "debug", False):
            raise
        if isinstance(error, UsageError):
            args._parser.error(str(error))
        message = user_error_message(error)
        if message is None:
            raise
        print(message, file=sys.stderr)
        sys.exit(2)  # argparse's status for a flag it refuses


def build_parser() -> argparse.ArgumentParser:
    """The `vanilla-transformer` parser, one subparser per entry of `COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="vanilla-transformer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for name in COMMANDS:
        command = import_module(f"{__package__}.{name.replace('-', '_')}")
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


def run_script(command: ModuleType, argv: list[str] | None = None) -> None:
    """Run `command` (a module with `add_arguments` and `run`, as each of `COMMANDS`; the lab's `scripts/*.py` are
    such modules) as a standalone program: its flags at the top level, a user error in one line."""
    parser = argparse.ArgumentParser(description=command.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _set_up(parser, command)
    _run(parser, argv)
