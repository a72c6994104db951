"""The proof that the originals were left untouched: a hash of every file under the submissions, taken before
grading and after (``tree_hashes``); links are recorded, never followed, and a file that cannot be read is recorded as
such."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from autograder.grading.intake.file_access import display


def _fingerprint(path: Path):
    """sha256 of a regular file; what a link points to or what a special file is; None for a folder."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISDIR(mode):
            return None
        if stat.S_ISLNK(mode):
            return "link:" + display(os.readlink(path))
        if not stat.S_ISREG(mode):
            return "special:" + stat.filemode(mode)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, "rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror or type(exc).__name__}"


def tree_hashes(path: Path) -> dict:
    """sha256 of every file under ``path`` (or of ``path`` itself), to prove the originals were left untouched.
    Links are recorded, not followed; a file that vanishes or cannot be read is recorded as such, never raised; the
    walk is a loop, so no depth of folders ends it."""
    path = Path(path)
    if not path.is_dir():
        return {display(path.name): _fingerprint(path)}
    hashes, pending = {}, [path]
    while pending:
        here = pending.pop()
        try:
            names = os.listdir(here)
        except OSError as exc:
            hashes[display(here.relative_to(path)) + "/"] = f"unreadable: {exc.strerror or type(exc).__name__}"
            continue
        for name in names:
            fingerprint = _fingerprint(here / name)
            if fingerprint is None:
                pending.append(here / name)
            else:
                hashes[display((here / name).relative_to(path))] = fingerprint
    return hashes
