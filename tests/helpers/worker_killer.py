"""Kill grading workers the way the out-of-memory killer does (SIGKILL), while they grade a given student: for the
tests of a worker that dies mid-notebook (tests/grading/test_grade_command.py, tests/grading/test_cluster.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path


def kernel_launchers(out: Path) -> dict:
    """{pid: (its parent, the grading worker; the student whose notebook it runs)} for every kernel launcher
    running a notebook of the workspace ``out``: ``python -m autograder.kernel.launcher``, or the bubblewrap it became for a
    kernel started cold. An orphaned launcher's parent is init (1), never to be killed."""
    out = Path(out).resolve()
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(f"/proc/{pid}/cwd")
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        where = Path(cwd).relative_to(out / "course" / "autograded").parts if cwd.startswith(
            str(out / "course" / "autograded") + os.sep) else ()
        launcher = b"autograder.kernel.launcher" in cmd or cmd[0].endswith(b"/bwrap")
        if launcher and b"--start-warm-server" not in cmd and where:
            found[int(pid)] = (parent, where[0])
    return {pid: v for pid, v in found.items() if v[0] not in found}  # not the bubblewrap a launcher started


class WorkerKiller(threading.Thread):
    """While running, SIGKILL the grading worker whose kernel launcher runs a notebook of ``student`` in workspace
    ``out``, at most ``times[student]`` times (None: every time); ``kills`` counts them per student."""

    def __init__(self, out: Path, times: dict):
        super().__init__(daemon=True)
        self.out, self.times = out, times
        self.kills = {student: 0 for student in times}
        self._seen, self._done = set(), threading.Event()

    def run(self):
        while not self._done.is_set():
            for pid, (grading_worker, student) in kernel_launchers(self.out).items():
                if pid in self._seen or grading_worker <= 1 or student not in self.times:
                    continue
                self._seen.add(pid)  # each launcher once: once orphaned, its parent is init
                if self.times[student] is None or self.kills[student] < self.times[student]:
                    os.kill(grading_worker, signal.SIGKILL)
                    self.kills[student] += 1
            time.sleep(0.02)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self.join()
