"""What a Dask scheduler and worker receive of the course with each task: this module, whole, and nothing else.

A ``dask worker`` started as docs/grading.md says (in the course folder, its venv active) runs the venv's Python but
does not have the course on ``sys.path``, and the scheduler, which reads every task it is given, has not either. So
the command sends them no function of the course to import: it sends this module's ``run`` by value
(``pool.ShippedWhole``, cloudpickle) with the course's path, its ``course_digest`` and the job, pickled in bytes that
only a worker opens. Before it opens them, a worker checks that the course at that path is the command's
(``unfit``) and puts it first on ``sys.path``; a worker that cannot grade this course returns why, in one line that
names it and says what to do, instead of a traceback. The command asks every worker first (``pool.preflight``) and
refuses a cluster with such a worker before anything is graded; a worker that joins later turns each of its jobs
into a grading error with that line.

Only the standard library here: this module is the one part of the course a Dask process has before it finds the
course.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import socket
import sys
from pathlib import Path

RESTART = "restart the workers (dask worker ...) in the course folder with its venv active"


def course_digest(root) -> str:
    """The SHA-256 of the course's grading code: every Python source under ``root/autograder``, by path and content.
    The command and every worker must agree on it, so no worker grades with other hidden checks."""
    package = Path(root) / "autograder"
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


# The code this process runs: the course as it was when this process imported it (a Dask worker does with its first
# task, right after ``unfit`` compared the files with the command's); a worker started long ago may hold older code.
LOADED = course_digest(Path(__file__).resolve().parents[3])


def unfit(root: str, digest: str) -> str | None:
    """Why this process cannot grade with the course at ``root`` whose code the command hashed to ``digest``, and
    what to do, in one line; None when it can."""
    package = Path(root) / "autograder"
    if not (package / "__init__.py").is_file():
        return (f"has no course at {root}: put this course at the same path on every worker (a shared file system "
                f"or the same image), then {RESTART}")
    try:
        found = course_digest(root)
    except OSError as exc:
        return f"cannot read the course at {root} ({exc}): run the worker as a user who can"
    if found != digest:
        return (f"has another version of the course at {root} (its grading code hashes to {found}, the command's "
                f"to {digest}): check out the same version on every machine, then {RESTART}")
    loaded = getattr(sys.modules.get("autograder"), "__file__", None)
    if loaded is not None and Path(loaded).resolve().parent != package.resolve():
        return (f"already runs the course from {Path(loaded).resolve().parents[1]}, not {root} as the "
                f"command does: {RESTART}")
    mine = sys.modules.get("autograder.grading.run.dask_entry")
    if mine is not None and mine.LOADED != digest:
        return f"still runs the course's code as it was when the worker started, which has changed since: {RESTART}"
    return None


def run(root: str, digest: str, payload: bytes):
    """A Dask task: ``("done", what the job returned)``, or ``("unfit", why this worker cannot grade, naming it)``.
    ``payload`` is the pickled ``(function, arguments)`` of the job; a function of the course, it is imported only
    once ``unfit`` has found the course."""
    problem = unfit(root, digest)
    if problem is None:
        if root not in sys.path:
            sys.path.insert(0, root)
        try:
            function, args = pickle.loads(payload)
        except ImportError as exc:  # the course is there, a package it needs is not: another Python than the venv's
            problem = (f"cannot import the grading code ({type(exc).__name__}: {exc}): start it with the course's "
                       f"venv active (source .venv/bin/activate)")
        else:
            return "done", function(*args)
    return "unfit", f"the Dask worker {worker_name()} {problem}"


def worker_name() -> str:
    """This Dask worker's address and machine, as the scheduler and the instructor know them."""
    try:
        from distributed import get_worker

        address = get_worker().address
    except (ImportError, ValueError):
        address = "(not a Dask worker)"
    return f"{address} on {socket.gethostname()} (pid {os.getpid()})"
