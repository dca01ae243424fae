"""Atomic writes, the one scheme of every output and cache: written under `.<name>.<host>-<pid>.partial` beside the
destination, flushed, and moved into place with `os.replace` when complete, so a reader sees the old whole or the new
whole; the name carries its writer, so a later command removes what a killed writer left and never what a live one,
or one on another host sharing the disk, is writing."""

import logging
import os
import re
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)

STAGING_SUFFIX = ".partial"
# `.<name>.<host>-<pid>[.replaced].partial[.png]`, or `.<name>.<pid>.partial` as versions before the host was named
# wrote it; `.replaced`: a folder's old copy, renamed aside until the new one is in place
_STAGED = re.compile(rf"^\.(.+)\.(?:([A-Za-z0-9]+)-)?(\d+)(\.replaced)?{re.escape(STAGING_SUFFIX)}(\.\w+)?$")


def writer_tag() -> str:
    """This process as a staging name carries it: host and process id."""
    host = re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:24] or "host"
    return f"{host}-{os.getpid()}"


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def remove_path(path: Path) -> None:
    """Remove a file, a link (not what it points to) or a folder with all it holds, whichever `path` is."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def staging_path(destination: Path, suffix: str = "", replaced: bool = False) -> Path:
    """Where this process writes `destination` before moving it into place (`replaced`: where a folder's old copy
    waits); `suffix` ends the name, for writers that choose the format by it (`.png`)."""
    middle = ".replaced" if replaced else ""
    return destination.with_name(f".{destination.name}.{writer_tag()}{middle}{STAGING_SUFFIX}{suffix}")


def staging_leftovers(folder: Path) -> list[Path]:
    """The staged files and folders in `folder`, whoever writes them."""
    return sorted(path for path in folder.iterdir() if _STAGED.match(path.name)) if folder.is_dir() else []


def remove_killed_staging(folder: Path) -> list[Path]:
    """Remove the `staging_path`s in `folder` whose writer ran on this host and is gone (a killed build, gigabytes at
    WMT's size); returns what it removed, each logged."""
    host, removed = writer_tag().rsplit("-", 1)[0], []
    for path in staging_leftovers(folder):
        match = _STAGED.match(path.name)
        if match.group(2) not in (None, host) or process_alive(int(match.group(3))):
            continue
        remove_path(path)
        logger.warning("removed %s, left by a process that was killed while writing it", path)
        removed.append(path)
    return removed


def fresh_staging_folder(destination: Path) -> Path:
    """An empty `staging_path` folder for `destination` (its parents made), after removing what killed writers left
    beside it."""
    remove_killed_staging(destination.parent)
    staging = staging_path(destination)
    remove_path(staging)
    staging.mkdir(parents=True)
    return staging


def fsync_tree(folder: Path) -> None:
    """Flush every file under `folder`, then the folders, to disk, so that a rename that follows cannot publish data
    still only in the page cache."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            fsync_file(path)
    for path in [*sorted(p for p in folder.rglob("*") if p.is_dir()), folder]:
        fsync_directory(path)


def fsync_file(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def fsync_directory(folder: Path) -> None:
    """Flush a folder's entries (names created, renamed or removed in it) to disk, where the platform allows it."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:  # Windows cannot open folders; NTFS journals renames itself
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@contextmanager
def atomic_file(destination: Path, suffix: str = "") -> Iterator[Path]:
    """A hidden path for the block to write that replaces `destination` (keeping its permissions) when the block
    completes; on an error the destination is untouched."""
    remove_killed_staging(destination.parent)
    staging = staging_path(destination, suffix)
    try:
        yield staging
        fsync_file(staging)
        if destination.is_file():
            shutil.copymode(destination, staging)
        os.replace(staging, destination)
        fsync_directory(destination.parent)
    finally:
        if os.path.lexists(staging):  # not unlink(missing_ok=True): on a read-only mount that raises EROFS
            staging.unlink()


@contextmanager
def atomic_folder(destination: Path) -> Iterator[Path]:
    """A fresh hidden folder for the block to fill that replaces `destination` only when the block completes: the old
    folder is renamed aside first and deleted once the new one is in place (put back if that rename fails)."""
    staging, aside = fresh_staging_folder(destination), staging_path(destination, replaced=True)
    try:
        yield staging
        fsync_tree(staging)  # the bytes reach the disk before the name does
        moved = os.path.lexists(destination)
        if moved:
            os.rename(destination, aside)
        try:
            os.rename(staging, destination)
        except BaseException:
            if moved:
                os.rename(aside, destination)
            raise
        fsync_directory(destination.parent)
        remove_path(aside)
    finally:
        remove_path(staging)
