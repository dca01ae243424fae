"""The `vanilla-transformer` command line (also `python -m vanilla_transformer`): one command with a subcommand per
stage of the paper's pipeline, from data and tokenizer (§5.1) through training (§5) and decoding (§6.1) to release.

    vanilla-transformer demo                                   # the README's main job
    vanilla-transformer train --preset multi30k --output-dir outputs/multi30k
    vanilla-transformer translate --model outputs/multi30k/final --input test2016.en > hyp.de
    vanilla-transformer COMMAND --help                         # a command's flags

Each subcommand is a module of `vanilla_transformer.cli.arguments`; `scripts/<name>.py` in a checkout runs the same
command with the same flags (`run_script`).

Exit status: 0 done; 2 a user error (a flag's value, arguments that do not go together, a missing or damaged file,
settings no run can finish), told in one line `error: ...` without a traceback (`--debug`, before or after the
command name, shows it); 1 anything else, a bug, with its traceback.
"""

import argparse
import errno
import os
import pickle
import re
import sys
import traceback
from importlib import import_module
from types import ModuleType

from huggingface_hub.errors import StrictDataclassError

from .. import __version__
from .arguments import UsageError

# subcommand names, in the order of the pipeline; each is the module vanilla_transformer.cli.arguments.<name with _>
COMMANDS = (
    "demo",
    "download-multi30k",
    "train-tokenizer",
    "train",
    "train-no-trainer",
    "ablate",
    "average",
    "translate",
    "evaluate",
    "plot-attention",
    "release",
    "push",
    "export-ctranslate2",
    "benchmark",
    "benchmark-data",
)


def _command(name: str) -> ModuleType:
    return import_module(f"{__package__}.{name.replace('-', '_')}")


# the exit status of a user error, as argparse's for a flag it refuses
USER_ERROR_STATUS = 2
DEBUG_HELP = "on an error, show its traceback too (for a bug report)"
# errors of the operating system about a path given: a file or folder missing, of the wrong kind, or not permitted
PATH_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
# a full disk or quota, a file-size limit, or a read-only file system: outputs are staged, so the destination is as
# it was
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


def _expected_errors() -> tuple[type[Exception], ...]:
    """Failures whose message names the problem and the fix (a damaged model folder, settings a run cannot finish,
    data that cannot be had): the command prints that message, not a traceback. Imported only when an exception
    is on its way out, so that `--help` stays quick."""
    from ..data.multi30k import Multi30kUnavailable
    from ..files.loading import ModelFolderError
    from ..training.settings_check import SettingsError

    return Multi30kUnavailable, ModelFolderError, SettingsError


def _raised_by_this_package(error: BaseException) -> bool:
    """Whether the innermost frame of `error`'s traceback is this package's code: its own `raise` (or a builtin it
    called), not a library's."""
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and frame.tb_frame.f_globals.get("__name__", "").split(".")[0] == __package__.split(".")[0]


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and the exceptions it was raised from or while handling, outermost first."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _storage_error(error: BaseException) -> str | None:
    """The one line for a write that failed on a full disk, a quota or size limit or a read-only file system,
    wherever in `error`'s chain it shows: an `OSError`, or the message of a library that writes in native code
    (safetensors' `(os error 28)`, torch.save's `file write failed`, which gives no cause)."""
    for link in _chain(error):
        if isinstance(link, OSError) and link.errno in STORAGE_ERRNOS:
            where = f" writing {link.filename}" if link.filename else ""
            return f"error: {link.strerror or link}{where}: free space (or choose another disk); what was there is kept"
        number = OS_ERROR_NUMBER.search(str(link))
        if number and int(number.group(1)) in STORAGE_ERRNOS:
            cause = os.strerror(int(number.group(1)))
        elif not number and WRITE_FAILED.search(str(link)):
            cause = "a file could not be written (is the disk full?)"
        else:
            continue
        return f"error: {cause}: free space (or choose another disk); what was there is kept"
    return None


def _refused_pickle(error: BaseException) -> str | None:
    """The one line for a pickle that `torch.load(weights_only=True)` refused (a checkpoint's optimizer.pt or
    rng_state.pth holding objects other than tensors: code, perhaps hostile), naming the file it was reading."""
    if not (isinstance(error, pickle.UnpicklingError) and "weights_only" in str(error)):
        return None
    frame, path = error.__traceback__, None
    while frame is not None:  # the innermost torch.load names the file
        if frame.tb_frame.f_code.co_name == "load" and "torch" in frame.tb_frame.f_code.co_filename:
            candidate = frame.tb_frame.f_locals.get("f")
            path = candidate if isinstance(candidate, str | bytes) or hasattr(candidate, "__fspath__") else path
        frame = frame.tb_next
    name = f"{path} holds" if path is not None else "a checkpoint file holds"
    return (
        f"error: {name} pickled objects other than tensors, so it was refused and never run: if no run of yours "
        f"wrote it, delete that checkpoint and resume from an earlier one (or start a new --output-dir)"
    )


def user_error_message(error: BaseException) -> str | None:
    """The one line `error: ...` for an exception that tells the user what to change, or None for a bug.

    User errors: this package's own exception classes, a path error of the operating system (a file missing, a
    folder where a file belongs, no permission), a config that fails its `@strict` validation, and a `ValueError`
    raised by this package's code (its checks of
    files and settings). A `ValueError` from inside a library, or any other exception, is a bug: its traceback
    shows."""
    if isinstance(error, _expected_errors()):
        return f"error: {type(error).__name__}: {error}"
    if isinstance(error, PATH_ERRORS) and error.filename is not None and error.strerror:
        return f"error: {error.filename}: {error.strerror}"
    message = _storage_error(error) or _refused_pickle(error)
    if message:
        return message
    if isinstance(error, StrictDataclassError) and error.__cause__ is not None:
        from ..files.loading import config_error_message

        return f"error: invalid model configuration: {config_error_message(error)}"
    own_class = type(error).__module__.split(".")[0] == __package__.split(".")[0]
    if (
        own_class
        or isinstance(error, PATH_ERRORS)
        or (isinstance(error, ValueError) and _raised_by_this_package(error))
    ):
        return f"error: {error}"
    return None


def _run(parser: argparse.ArgumentParser, argv: list[str] | None) -> None:
    """Parse `argv` and run the command: a user error ends it with one line and status 2 (a `UsageError` with the
    command's usage too); under `--debug` it is raised as it is, with its traceback. Any other exception is a bug
    and raised with its traceback."""
    args = parser.parse_args(argv)
    debug = getattr(args, "debug", False)
    try:
        args._run(args)
    except SystemExit as stop:
        # a command's own `sys.exit("error: ...")` prints its message as before, with the user-error status
        if not isinstance(stop.code, str):
            raise
        if debug:
            traceback.print_exc()
            raise
        print(stop.code, file=sys.stderr)
        sys.exit(USER_ERROR_STATUS)
    except Exception as error:
        if debug:
            raise
        if isinstance(error, UsageError):
            args._parser.error(str(error))
        message = user_error_message(error)
        if message is None:
            raise
        print(message, file=sys.stderr)
        sys.exit(USER_ERROR_STATUS)


def build_parser() -> argparse.ArgumentParser:
    """The `vanilla-transformer` parser, one subparser per entry of `COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="vanilla-transformer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
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
