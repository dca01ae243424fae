"""Safe output writing, the one place for it, so that outputs never destroy inputs (issue 25): an output is staged
under a hidden name and renamed into place when complete; one that is, holds or lies inside an input is refused before
any work; a non-empty folder is replaced only when its `MARKER_NAME` says a command wrote the same kind there, or with
`--overwrite`. A refusal raises `OutputError`, one line naming both paths and the fix."""

import errno
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from ..data.staging import atomic_file, atomic_folder
from ..errors import OutputError, VanillaTransformerError

logger = logging.getLogger(__name__)

MARKER_NAME = ".vanilla-transformer-output"
# what a marked folder holds; a folder is replaced only by a command writing the same kind
KINDS = {
    "model": "a model folder",
    "ctranslate2": "a CTranslate2 export",
    "release": "a release folder",
    "tokenizer": "a tokenizer folder",
    "training-run": "a training run",
    "benchmark-data": "benchmark-data's work folder",
    "gpu-speed": "a GPU check's report",
    "table3": "a Table 3 report",
}

PathLike = str | os.PathLike


def real_path(path: PathLike) -> Path:
    """`path` with `~` expanded, made absolute and every symlink resolved (also those of a path not yet there)."""
    return Path(os.path.realpath(Path(path).expanduser()))


def _same_path(first: PathLike, second: PathLike) -> bool:
    try:
        if os.path.exists(first) and os.path.exists(second):
            return os.path.samefile(first, second)  # also hard links and bind mounts
    except OSError:
        pass
    return real_path(first) == real_path(second)


def check_not_an_input(
    output: PathLike,
    inputs: Iterable[tuple[str, PathLike | None]],
    flag: str = "--output-dir",
    holders: Iterable[tuple[str, PathLike | None]] = (),
) -> None:
    """Raise `OutputError` when `output` is one of `inputs`, contains one or lies inside one.

    `inputs` and `holders` are `(label, path)` pairs (`None` paths skipped); an output may lie inside a holder but
    neither be nor contain it: a run folder holds its own `final/` next to the checkpoints averaged into it."""
    target = real_path(output)
    pairs = [(label, path, True) for label, path in holders if path is not None]
    pairs += [(label, path, False) for label, path in inputs if path is not None]
    # the closest relation first: `--output-dir RUN` is the run folder before it contains a checkpoint
    for label, path, _ in pairs:
        if _same_path(output, path):
            raise OutputError(
                f"{flag} {output} is {label} {path}: writing there would destroy that input; give {flag} another path."
            )
    for label, path, _ in pairs:
        if real_path(path).is_relative_to(target):
            raise OutputError(
                f"{flag} {output} contains {label} {path}: replacing it would delete that input; give {flag} a path "
                f"that does not hold it."
            )
    for label, path, may_hold in pairs:
        if not may_hold and target.is_relative_to(real_path(path)):
            raise OutputError(
                f"{flag} {output} lies inside {label} {path}: writing there would change that input; give {flag} a "
                f"path outside {path}."
            )


def check_output_file(
    destination: PathLike, inputs: Iterable[tuple[str, PathLike | None]] = (), flag: str = "--output"
) -> None:
    """Raise `OutputError` for a file output that is a folder or is or lies inside one of `inputs`."""
    if real_path(destination).is_dir():
        raise OutputError(f"{flag} {destination} is a folder: give the path of a file to write.")
    check_not_an_input(destination, inputs, flag)


def read_marker(folder: PathLike) -> dict | None:
    """The marker of a folder a command created (`MARKER_NAME`), or None when it has none or an unreadable one."""
    path = Path(folder) / MARKER_NAME
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return marker if isinstance(marker, dict) else None


def write_marker(folder: PathLike, kind: str, command: str) -> Path:
    """Write the marker that says `vanilla-transformer <command>` created `folder`, holding `kind`; returns it."""
    from .. import __version__

    if kind not in KINDS:
        raise VanillaTransformerError(f"kind={kind!r} is not a kind of output; use one of {', '.join(KINDS)}.")
    marker = {
        "kind": kind,
        "command": command,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "version": __version__,
    }
    path = Path(folder) / MARKER_NAME
    path.write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return path


def check_output_folder(
    destination: PathLike,
    kind: str,
    overwrite: bool = False,
    flag: str = "--output-dir",
    recognised_by: Iterable[str] = (),
    overwrite_does: str = "replace it",
) -> bool:
    """Raise `OutputError` unless a command writing `kind` may replace (or write into) `destination`: it does not
    exist, is empty, or holds a marker of the same kind or a file named in `recognised_by`; anything else only with
    `overwrite`. Returns whether something the command did not create will be replaced."""
    path = Path(destination)
    if not os.path.lexists(path):
        return False
    if not path.is_dir():
        if overwrite:
            return True
        raise OutputError(
            f"{flag} {destination} is a file, not a folder: give a folder path, or pass --overwrite to replace the "
            f"file."
        )
    if not any(path.iterdir()):
        return False
    marker = read_marker(path)
    if (marker and marker.get("kind") == kind) or any((path / name).exists() for name in recognised_by):
        return False
    if overwrite:
        return True
    if marker:
        held = KINDS.get(str(marker.get("kind")), f"a {marker.get('kind')!r} output")
        problem = f"holds {held} written by `vanilla-transformer {marker.get('command')}`, not {KINDS[kind]}"
    else:
        problem = f"is a non-empty folder that vanilla-transformer did not create (it has no {MARKER_NAME} marker)"
    raise OutputError(
        f"{flag} {destination} {problem}: give a new or empty folder, or pass --overwrite to {overwrite_does}."
    )


@contextmanager
def _parents_made(path: Path) -> Iterator[None]:
    """Make the folders above `path`; on leaving, remove those of them a failed write left empty."""
    created = [parent for parent in path.parents if not parent.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield
    finally:
        for folder in created:
            try:
                folder.rmdir()
            except OSError:
                break


@contextmanager
def staged_folder(
    destination: PathLike, kind: str, command: str, overwrite: bool = False, flag: str = "--output-dir"
) -> Iterator[Path]:
    """A hidden folder (`data.staging.atomic_folder`) that replaces `destination`, marked as `kind` written by
    `command`, only when the block completes; a destination the command may not replace is refused before the block
    runs, and checked again before it is replaced: it may have changed while the work ran."""
    check_output_folder(destination, kind, overwrite, flag)
    destination = real_path(destination)
    with _parents_made(destination), atomic_folder(destination) as staging:
        yield staging
        write_marker(staging, kind, command)
        if check_output_folder(destination, kind, overwrite, flag):
            logger.warning("--overwrite: replacing %s, which vanilla-transformer did not write", destination)


@contextmanager
def staged_file(destination: PathLike, flag: str = "--output", suffix: str = "") -> Iterator[Path]:
    """A hidden path (`data.staging.atomic_file`) for the block to write that replaces `destination` only when the
    block completes. A device or pipe (`/dev/stdout`) is written directly. `suffix` ends the hidden name, for writers
    that choose the format by it (`.png`)."""
    check_output_file(destination, flag=flag)
    path = real_path(destination)  # a symlink keeps pointing at the new file
    if path.exists() and not path.is_file():
        yield path
        return
    with _parents_made(path), atomic_file(path, suffix) as staging:
        yield staging


def write_text_atomic(path: PathLike, text: str, flag: str = "--output") -> Path:
    """Write `text` (UTF-8, `\\n` line ends) to `path` through `staged_file`; returns the path."""
    with staged_file(path, flag) as staging:
        staging.write_text(text, encoding="utf-8", newline="\n")
    return Path(path)


@contextmanager
def hold_lock(folder: PathLike, flag: str = "--output-dir") -> Iterator[None]:
    """Hold an exclusive `flock` on `folder` itself while the block runs (released by the kernel however the process
    ends; no file added); a folder another process holds raises `OutputError`. Without `flock` (Windows), a no-op."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise OutputError(
                f"{flag} {folder} is in use: another run is training in it; wait for it to end, or give {flag} "
                f"another folder."
            ) from None
        yield
    finally:
        os.close(descriptor)  # releases the lock


def folder_in_use(folder: PathLike) -> bool:
    """Whether another process holds `folder`'s lock (`hold_lock`): a run is training in it now."""
    try:
        with hold_lock(folder):
            return False
    except OutputError:
        return True


PARTIAL_SUFFIX = ".partial"


class ChunkedFile:
    """Lines appended to a file chunk by chunk (`chunked_output`); `done` is how many input lines the chunks written
    so far (this run's and a continued run's) answer."""

    def __init__(self, handle, record: Path | None, identity: dict, done: int) -> None:
        self.handle, self.record, self.identity, self.done = handle, record, identity, done

    def write(self, lines: list[str], inputs: int) -> None:
        """Append `lines`, which answer the next `inputs` input lines, and make them durable before saying so."""
        self.handle.write("".join(line + "\n" for line in lines))
        self.handle.flush()
        self.done += inputs
        if self.record is not None:
            os.fsync(self.handle.fileno())
            state = {"identity": self.identity, "inputs": self.done, "bytes": self.handle.tell()}
            with atomic_file(self.record) as staging:
                staging.write_text(json.dumps(state))


@contextmanager
def chunked_output(destination: str, identity: dict | None) -> Iterator[ChunkedFile]:
    """A file written chunk by chunk, for outputs too large to hold: '-' is stdout; a path is written as
    `<path>.partial`, each chunk flushed and synced with a record beside it (`.partial.json`: how many input lines
    and bytes are done), and renamed to the path when the block completes, so that an existing file stays whole until
    then. A killed run leaves `<path>.partial` with every finished chunk; the same command with the same `identity`
    (the input, the model, the decoding) continues after them. A `.partial` file of other work, or of input that
    cannot be identified (a pipe: `identity` None), is refused, not replaced."""
    if destination == "-":
        yield ChunkedFile(sys.stdout, None, {}, 0)
        return
    path = real_path(destination)
    if path.exists() and not path.is_file():  # a device or a pipe (/dev/stdout): written directly
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            yield ChunkedFile(handle, None, {}, 0)
        return
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    record = partial.with_name(partial.name + ".json")
    done, size = 0, 0
    if os.path.lexists(partial):
        try:
            state = json.loads(record.read_text())
            done, size = int(state["inputs"]), int(state["bytes"])
        except (OSError, ValueError, TypeError, KeyError):  # no record, or one that does not read as ours
            state = None
        if state is None or identity is None or state.get("identity") != identity:
            raise OutputError(
                f"{partial} holds part of an earlier run's output for other input, model or decoding (its record "
                f"{record.name} says which): finish that run with its own command, or move or delete {partial}."
            )
        logger.info("continuing %s after the %d input lines its earlier run finished", partial, done)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(partial, "r+" if done else "w", encoding="utf-8", newline="\n") as handle:
        handle.seek(size)
        handle.truncate()  # a chunk the kill cut short
        yield ChunkedFile(handle, record, identity or {}, done)
    if path.is_file():  # the file replaced keeps its permissions, as `staged_file` keeps them
        shutil.copymode(path, partial)
    os.replace(partial, path)
    record.unlink(missing_ok=True)
