"""Run an expensive fixture once per test session, also under pytest-xdist (``make test`` uses ``-n 2``).

Module-scoped fixtures run once per xdist worker: a grading batch would then run twice. ``once`` makes the first
worker compute it into the session's shared temporary folder, under a file lock, and the others read its result.
"""

from __future__ import annotations

import fcntl
import json
import os


def once(tmp_path_factory, name: str, compute):
    """``compute(folder) -> JSON-able result``, computed once per session; returns the result."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, shared by its workers
    folder = base / f"once-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    with open(base / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / "result.json"
        if done.exists():
            return json.loads(done.read_text())
        result = compute(folder)
        done.write_text(json.dumps(result))
        return result
