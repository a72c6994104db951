"""Reading what students handed in without trusting it: a symbolic link is never followed and a special file (fifo,
device, socket) never opened (``kind_of``, ``list_folder``), a file is read once and never past its limit
(``read_regular``), a notebook within ``size_limits.NotebookLimits`` before nbformat parses it (``read_notebook``),
and every file name is shown as text anyone can read (``display``)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import nbformat

from autograder.grading.intake.size_limits import (MAX_NOTEBOOK_BYTES, NotebookLimits, OverLimit, in_mb, over_limit,
                                                   over_shape)


def display(name) -> str:
    """A file name as text anyone can read: bytes that are not UTF-8 as ``\\xe9``, unprintable characters (line
    breaks, terminal escapes, direction marks) as ``\\n``, ``\\x1b``, ``\\u202e``."""
    text = os.fsencode(str(name)).decode("utf-8", "backslashreplace")
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def is_hidden(name: str) -> bool:
    return name.startswith((".", "__MACOSX"))


def kind_of(mode: int) -> str:
    """'dir', 'file', or what a file that is neither is (never followed, never opened)."""
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    kinds = {stat.S_ISFIFO: "a fifo", stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device",
             stat.S_ISSOCK: "a socket"}
    return "a special file (" + next((k for test, k in kinds.items() if test(mode)), "unknown type") + ")"


def list_folder(folder: Path) -> tuple:
    """(the notebooks under ``folder``, {path: what it is} of the links and special files refused there), from
    ``lstat`` alone: no link is followed, no special file opened; hidden folders and checkpoints are skipped."""
    notebooks, refused, pending = [], {}, [folder]
    while pending:
        here = pending.pop()
        try:
            with os.scandir(here) as it:
                found = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            refused[Path(here)] = f"a folder that could not be read ({exc.strerror or type(exc).__name__})"
            continue
        for item in found:
            if is_hidden(item.name):
                continue
            try:
                kind = kind_of(item.stat(follow_symlinks=False).st_mode)
            except OSError:  # gone since it was listed
                continue
            path = Path(item.path)
            if kind == "dir":
                pending.append(path)
            elif kind != "file":
                refused[path] = kind
            elif item.name.endswith(".ipynb"):
                notebooks.append(path)
    return sorted(notebooks), refused


def read_regular(path, max_bytes: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of a regular file, read once; a link is not followed and a fifo or device not waited on. A file
    larger than ``max_bytes`` raises ``OverLimit`` from its size alone, and no more than ``max_bytes`` + 1 bytes are
    ever read (a file growing while it is read is caught too)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{display(Path(path).name)} is {kind_of(info.st_mode)}, not a file")
        size = info.st_size
        data = b"" if size > max_bytes else fh.read(max_bytes + 1)
        if size > max_bytes or len(data) > max_bytes:
            raise OverLimit(f"notebook over {in_mb(max_bytes)}: {display(Path(path).name)} is "
                            f"{in_mb(max(size, len(data)))}{'' if size > max_bytes else ' or more'}; clear its outputs "
                            "(Edit > Clear Outputs of All Cells), save and submit again")
        return data


def read_notebook(path, limits: "NotebookLimits | None" = None):
    """The bytes of a notebook file and the notebook parsed from them, within ``limits``: the file size is checked
    before anything is read, cells and stored outputs before nbformat reads it. Raises ``OverLimit`` past a limit,
    ``OSError`` for a file that is not a regular file, and whatever parsing raises for one that is not a notebook."""
    limits = limits or NotebookLimits()
    data = read_regular(path, limits.max_bytes)
    return data, parse_notebook(data, path, limits)


def parse_notebook(data: bytes, path, limits: "NotebookLimits | None" = None):
    """The notebook of ``data``, the bytes ``read_regular`` read from ``path`` (named in the messages), within
    ``limits``: cells and stored outputs are checked before nbformat reads it (``read_notebook``: both at once). A
    caller that only needs the bytes (their hash says the notebook was graded already) reads them alone and never
    pays for the parse."""
    limits = limits or NotebookLimits()
    problem = over_shape(data, display(Path(path).name), limits)
    if problem:
        raise OverLimit(problem)
    raw = json.loads(data.decode("utf-8"))
    problem = over_limit(raw, display(Path(path).name), limits)
    if problem:
        raise OverLimit(problem)
    return nbformat.reads(data.decode("utf-8"), as_version=4)


def is_plain_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def is_plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()
