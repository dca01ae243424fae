"""Files and folders written under a hidden name and renamed when complete, and what a killed writer leaves: its
hidden name carries the writer (host and process id), so a later command can tell a live writer's staging from a
dead one's and remove the latter. The caches here (text as Arrow, tokenized corpora) and the commands' outputs
(`files.outputs`) share these names."""

import logging
import os
import re
import shutil
import socket
from pathlib import Path

logger = logging.getLogger(__name__)

PARTIAL_SUFFIX = ".partial"
# `.<name>.<host>-<pid>.partial`, or `.<name>.<pid>.partial` as versions before the host was named wrote it
_PARTIAL = re.compile(rf"^\.(.+)\.(?:([A-Za-z0-9]+)-)?(\d+){re.escape(PARTIAL_SUFFIX)}$")


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


def partial_path(path: Path) -> Path:
    """Where this process writes `path` before renaming it into place: a hidden name beside it."""
    return path.with_name(f".{path.name}.{writer_tag()}{PARTIAL_SUFFIX}")


def remove_killed_partials(folder: Path) -> list[Path]:
    """Remove the `partial_path`s in `folder` whose writer ran on this host and is gone (a killed build of a cache
    entry, gigabytes at WMT's size); a live writer's, or one on another host sharing the disk, is kept. Returns what
    it removed, each logged."""
    if not folder.is_dir():
        return []
    host, removed = writer_tag().rsplit("-", 1)[0], []
    for path in folder.iterdir():
        match = _PARTIAL.match(path.name)
        if not match or (match.group(2) not in (None, host)) or process_alive(int(match.group(3))):
            continue
        remove_path(path)
        logger.warning("removed %s, left by a process that was killed while writing it", path)
        removed.append(path)
    return removed
