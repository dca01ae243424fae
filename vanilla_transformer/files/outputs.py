"""Safe output writing, the one place for it: outputs never destroy inputs (issue 25).

1. **Staged, then renamed.** A file or folder is written under a hidden name beside its destination,
   `.<name>-<host>-<pid>-<random>.staged`, and renamed into place only when complete (`staged_file`, `staged_folder`);
   on an error the destination is untouched. The host and pid let the next run remove what a killed one left
   (`remove_abandoned_staging`), never what a live one is writing.
2. **Never an input.** An output that is, contains or lies inside one of the command's inputs is refused before any
   work (`check_not_an_input`), symlinks and hard links seen through.
3. **Never a stranger's folder.** A folder a command creates holds a JSON marker, `MARKER_NAME` (kind, command,
   created, version); a non-empty destination folder is replaced only when its marker has the same `kind`, or with
   `--overwrite` (`check_output_folder`). A training run's folder is known by its `preset.json` instead, and locked
   while it runs (`hold_lock`).

A refusal raises `OutputError`, one line naming both paths and the fix.
"""

import errno
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ..data.staging import process_alive, remove_path, writer_tag
from ..errors import OutputError, VanillaTransformerError

logger = logging.getLogger(__name__)

MARKER_NAME = ".vanilla-transformer-output"
# the end of the hidden names of staged files and folders, and of a replaced folder waiting to be deleted
STAGED_SUFFIX = ".staged"
REPLACED_SUFFIX = ".replaced"
# what a marked folder holds; a folder is replaced only by a command writing the same kind
KINDS = {
    "model": "a model folder",
    "ctranslate2": "a CTranslate2 export",
    "release": "a release folder",
    "tokenizer": "a tokenizer folder",
    "training-run": "a training run",
    "benchmark-data": "benchmark-data's work folder",
    "gpu-speed": "a GPU check's report",
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
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
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
        f"{flag} {destination} {problem}; writing there could destroy what it holds: give a new or empty folder, or "
        f"pass --overwrite to {overwrite_does}."
    )


def _default_mode(folder: bool) -> int:
    """What `open` or `mkdir` would give under the umask (`mkstemp` and `mkdtemp` give 0600 and 0700)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return (0o777 if folder else 0o666) & ~umask


def fsync_tree(folder: str | Path) -> None:
    """Flush every file under `folder`, then the folders, to disk, so that a rename that follows cannot publish data
    still only in the page cache."""
    folder = Path(folder)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            _fsync_file(path)
    for path in [*sorted(p for p in folder.rglob("*") if p.is_dir()), folder]:
        fsync_directory(path)


def _fsync_file(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def fsync_directory(folder: str | Path) -> None:
    """Flush a folder's entries (names created, renamed or removed in it) to disk, where the platform allows it."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:  # Windows cannot open folders; NTFS journals renames itself
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove_abandoned_staging(destination: PathLike) -> list[Path]:
    """Remove the hidden staged and replaced copies of `destination` that a killed command left: those whose writer
    (`data.staging.writer_tag`) ran on this host and is gone, and those of older versions that named none. Returns
    what it removed."""
    destination = Path(destination)
    folder = destination.parent
    if not folder.is_dir():
        return []
    host = writer_tag().rsplit("-", 1)[0]
    pattern = re.compile(
        rf"^\.{re.escape(destination.name)}-(?:([A-Za-z0-9]+)-(\d+)-)?[0-9a-z_]+"
        rf"({re.escape(STAGED_SUFFIX)}|{re.escape(REPLACED_SUFFIX)})(\.\w+)?$"
    )
    removed = []
    for path in folder.iterdir():
        match = pattern.match(path.name)
        if not match:
            continue
        writer_host, pid = match.group(1), match.group(2)
        if writer_host is not None and (writer_host != host or process_alive(int(pid))):
            continue
        remove_path(path)
        logger.warning("removed %s, left by a run that was killed while writing %s", path, destination)
        removed.append(path)
    return removed


def _missing_parents(path: Path) -> list[Path]:
    """The folders above `path` that do not exist yet, innermost first: those a write creates and, failing, removes."""
    return [parent for parent in path.parents if not parent.exists()]


def _remove_if_empty(folders: list[Path]) -> None:
    """Remove each of `folders` (innermost first) that is empty: the folders a failed write created, and only them."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def _replace_folder(staging: Path, destination: Path) -> None:
    """Move `staging` to `destination`: the old destination is renamed aside first and deleted only once the new
    folder is in place; if the second rename fails, it is put back."""
    replaced = None
    if os.path.lexists(destination):
        replaced = destination.with_name(f".{destination.name}-{writer_tag()}-{uuid.uuid4().hex[:8]}{REPLACED_SUFFIX}")
        os.rename(destination, replaced)
    try:
        os.rename(staging, destination)
    except BaseException:
        if replaced is not None:
            os.rename(replaced, destination)
        raise
    fsync_directory(destination.parent)
    if replaced is not None:
        remove_path(replaced)


def begin_staged_folder(destination: PathLike, name: str | None = None) -> Path:
    """Create the hidden folder beside `destination` that `publish_staged_folder` later moves into place, after
    removing what killed runs left; `name` fixes its name (the processes of a distributed run must agree on it)."""
    destination = real_path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_staging(destination)
    if name is None:
        prefix = f".{destination.name}-{writer_tag()}-"
        return Path(tempfile.mkdtemp(prefix=prefix, suffix=STAGED_SUFFIX, dir=destination.parent))
    staging = destination.parent / name
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    return staging


def publish_staged_folder(
    staging: PathLike,
    destination: PathLike,
    kind: str,
    command: str,
    overwrite: bool = False,
    flag: str = "--output-dir",
) -> Path:
    """Mark the complete `staging` folder, flush it to disk and move it to `destination`, checked again first: it may
    have changed while the work ran."""
    staging, destination = Path(staging), real_path(destination)
    write_marker(staging, kind, command)
    staging.chmod(_default_mode(folder=True))
    fsync_tree(staging)  # the bytes reach the disk before the name does
    if check_output_folder(destination, kind, overwrite, flag):
        logger.warning("--overwrite: replacing %s, which vanilla-transformer did not write", destination)
    _replace_folder(staging, destination)
    return destination


@contextmanager
def staged_folder(
    destination: PathLike, kind: str, command: str, overwrite: bool = False, flag: str = "--output-dir"
) -> Iterator[Path]:
    """A hidden scratch folder that replaces `destination`, marked as `kind` written by `command`, only when the
    block completes; a destination the command may not replace is refused before the block runs."""
    check_output_folder(destination, kind, overwrite, flag)
    created = _missing_parents(real_path(destination))
    staging = begin_staged_folder(destination)
    try:
        yield staging
        publish_staged_folder(staging, destination, kind, command, overwrite, flag)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_if_empty(created)  # stops at the first folder not empty: after a success, the one holding the output


@contextmanager
def staged_file(destination: PathLike, flag: str = "--output", suffix: str = "") -> Iterator[Path]:
    """A hidden path for the block to write that replaces `destination` (keeping its permissions) only when the block
    completes. A device or pipe (`/dev/stdout`) is written directly. `suffix` ends the hidden name, for writers that
    choose the format by it (`.png`)."""
    path = real_path(destination)  # a symlink keeps pointing at the new file
    if path.is_dir():
        raise OutputError(f"{flag} {destination} is a folder: give the path of a file to write.")
    if path.exists() and not path.is_file():
        yield path
        return
    created = _missing_parents(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_staging(path)
    prefix = f".{path.name}-{writer_tag()}-"
    descriptor, name = tempfile.mkstemp(prefix=prefix, suffix=STAGED_SUFFIX + suffix, dir=path.parent)
    os.close(descriptor)
    staging = Path(name)
    try:
        yield staging
        _fsync_file(staging)
        if path.is_file():
            shutil.copymode(path, staging)
        else:
            staging.chmod(_default_mode(folder=False))
        os.replace(staging, path)
        fsync_directory(path.parent)
    finally:
        staging.unlink(missing_ok=True)
        _remove_if_empty(created)  # stops at the first folder not empty: after a success, the one holding the output


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
                f"{flag} {folder} is in use: another run is training in it now. Wait for that run to end (or stop "
                f"it), or give {flag} another folder."
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


def staged_leftovers(folder: PathLike) -> list[Path]:
    """The hidden staged or replaced files and folders an interrupted write left in `folder`."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    marks = (STAGED_SUFFIX, REPLACED_SUFFIX)
    return sorted(p for p in folder.iterdir() if p.name.startswith(".") and any(mark in p.name for mark in marks))
