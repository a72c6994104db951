"""A folder's exact state, to prove a refused run left it as it was: every entry below it (and whether it exists at
all) with its kind, mode, modification time and, for a file, the SHA-256 of its bytes. A folder whose entries were
made and removed again has another modification time."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def snapshot(folder: Path) -> dict:
    folder = Path(folder)
    if not os.path.lexists(folder):
        return {}
    state = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(info.st_mode) else None
        state[path.relative_to(folder).as_posix()] = (stat.filemode(info.st_mode), info.st_mtime_ns, digest)
    return state
