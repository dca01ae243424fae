"""Text files of one sentence per line, read and written so that line N of one file stays line N of another: the
layout of parallel corpora (`{split}.{lang}`) and of `translate`'s input and output."""

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import DataError


def check_text_file(path: Path) -> None:
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder; expected a file of one sentence per line, named split.lang.")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; expected one sentence per line in a file named split.lang.")


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file without their line ends, by `iter_lines`' rules."""
    path = Path(path)
    check_text_file(path)
    with path.open("rb") as handle:
        return list(iter_lines(handle, str(path)))


def iter_lines(handle: BinaryIO, name: str) -> Iterator[str]:
    """The lines of an open binary stream one at a time; `name` is what error messages call it. Lines end at `\n`
    only: Unicode line separators and control characters stay inside their line (`str.splitlines` would split there
    and misalign a parallel corpus). A `\r` before the `\n` and a byte-order mark on line 1 are dropped."""
    for number, raw in enumerate(handle, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DataError(
                f"{name}, line {number}: not UTF-8 ({error.reason} at byte {error.start}); convert the file, "
                f"e.g. `iconv -f latin1 -t utf-8 {Path(name).name}`."
            ) from None
        if number == 1:
            line = line.removeprefix("\ufeff")
        yield line.removesuffix("\n").removesuffix("\r")


def file_sha256(path: str | Path) -> str:
    """A file's SHA-256 as `sha256sum` prints it, read in blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def file_state(path: Path) -> list:
    """What a cache records of one of its files when it writes it: size, mtime in ns and SHA-256."""
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns, file_sha256(path)]


def changed_since(path: Path, state: list) -> str | None:
    """How `path` differs from the `file_state` recorded for it, or None; it is hashed only when its mtime moved, so
    that an intact cache of gigabytes opens without reading it (the trade-off is in docs/reliability.md)."""
    size, mtime_ns, sha256 = state
    if not path.is_file():
        return f"{path.name} is missing"
    stat = path.stat()
    if stat.st_size != size:
        return f"{path.name} is {stat.st_size} bytes, {size} when built"
    if stat.st_mtime_ns != mtime_ns and file_sha256(path) != sha256:
        return f"{path.name} was changed since it was built"
    return None


def count_lines(path: str | Path) -> int:
    """The number of lines `read_lines` would return, counted in constant memory without decoding (~1 s a GB)."""
    lines, last = 0, b"\n"
    with Path(path).open("rb") as handle:
        while chunk := handle.read(1 << 24):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


def write_lines(path: str | Path, lines: list[str]) -> None:
    """Write one line per item to `path` (UTF-8, `\n` line ends); line breaks inside an item become spaces, so that
    line N of the output stays line N of the input."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    text = "".join(line.replace("\r\n", " ").replace("\n", " ").replace("\r", " ") + "\n" for line in lines)
    Path(path).write_text(text, encoding="utf-8", newline="\n")
