"""What a Dask worker is sent with each task (``autograder/grading/run/dask_entry.py``, shipped whole by
``pool.ShippedWhole``): it loads where the course is not importable, finds the course at the command's path, and
refuses, in one line that says what to do, a course that is missing or another version, or code older than the
course's files. The cluster itself is in tests/grading/test_cluster.py."""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys

from autograder import course
from autograder.grading.run import dask_entry, pool

ROOT = str(course.ROOT)
DIGEST = dask_entry.course_digest(ROOT)


def test_the_shipped_entry_finds_the_course_in_a_python_that_cannot_import_it():
    """A Python run in isolation (``-I``: no PYTHONPATH, no current folder on its path), like a ``dask worker`` or
    scheduler, loads the entry, which puts the course on its path and then runs a function of the course."""
    job = pickle.dumps((course.lesson_names, ()))
    shipped = pickle.dumps((pool.ShippedWhole(dask_entry.run), ROOT, DIGEST, job))
    script = ("import importlib.util, pickle, sys\n"
              "if importlib.util.find_spec('autograder'):\n    sys.exit('the course is on the path')\n"
              "entry, *args = pickle.loads(sys.stdin.buffer.read())\nprint(entry(*args))\n")
    proc = subprocess.run([sys.executable, "-I", "-c", script], input=shipped, capture_output=True, cwd="/",
                          timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().strip() == repr(("done", course.lesson_names()))


def test_the_course_of_this_process_is_fit():
    assert dask_entry.unfit(ROOT, DIGEST) is None


def test_no_course_at_the_path_is_refused_with_what_to_do(tmp_path):
    done, reason = dask_entry.run(str(tmp_path), DIGEST, b"never opened")
    assert done == "unfit"
    assert reason.startswith("the Dask worker (not a Dask worker) on ")
    assert reason.endswith(f"has no course at {tmp_path}: put this course at the same path on every worker (a shared "
                           "file system or the same image), then restart the workers (dask worker ...) in the course "
                           "folder with its venv active")


def test_another_version_of_the_course_is_refused(tmp_path):
    shutil.copytree(course.ROOT / "autograder", tmp_path / "autograder", ignore=shutil.ignore_patterns("__pycache__"))
    with (tmp_path / "autograder" / "checks" / "lesson01.py").open("a") as fh:
        fh.write("\n# another version\n")
    theirs = dask_entry.course_digest(tmp_path)
    assert theirs != DIGEST
    assert dask_entry.unfit(str(tmp_path), DIGEST) == (
        f"has another version of the course at {tmp_path} (its grading code hashes to {theirs}, the command's to "
        f"{DIGEST}): check out the same version on every machine, then restart the workers (dask worker ...) in the "
        "course folder with its venv active")


def test_code_loaded_before_the_course_changed_is_refused(monkeypatch):
    """A worker that imported the course before it was updated still runs the old code, though its files are new."""
    monkeypatch.setattr(dask_entry, "LOADED", "0" * 16)
    assert dask_entry.unfit(ROOT, DIGEST).startswith("still runs the course's code as it was when the worker started")


def test_a_worker_in_another_sandbox_says_which_and_what_to_do():
    """Weaker or stronger than the run's, a worker's sandbox is another one (a class is graded in one sandbox): the
    line names both, and the fix goes the right way."""
    weaker = pool._other_sandbox("none", "uid")
    assert "can isolate kernels only as 'none', not 'uid'" in weaker and "run the workers as root" in weaker
    stronger = pool._other_sandbox("uid", "userns")
    assert "isolates kernels as 'uid', not 'userns' as this run does" in stronger
    assert "run the workers as the command's user, or the command as root with bubblewrap" in stronger
