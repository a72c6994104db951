"""Grading works from any folder: the course, its venv and the submissions under a folder only root may enter.

A fresh clone in a ``mktemp -d`` folder (mode 0700) or in root's home is where a new user starts. The sandbox
uid cannot enter such a folder, so the kernels must get what they need some other way (bubblewrap binds the
Python installation and a world-readable copy of the kernel library at their own places). This test copies the
course into a 0700 folder under /tmp (which the kernel sees as its own throw-away tmpfs), makes its ``.venv`` a
symlink to a venv made in that folder too, puts the class there as well, and runs the grading command from the
copy, as a user would.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from course_copy import copy_course

from autograder.bugs import by_id
from autograder.course import answers, notebooks

LESSON = "01_warmup"
pytestmark = [pytest.mark.grading]


def _venv_under(folder: Path) -> Path:
    """A venv inside ``folder`` that reaches the packages of the venv running the tests (a .pth file): the
    kernels' Python then lives under the private folder, as in a fresh clone that made its own .venv."""
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    real = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "course-packages.pth").write_text("\n".join(real) + "\n")
    (venv / "share").symlink_to(Path(sys.prefix) / "share")  # Jupyter's data files (nbconvert's templates)
    return venv


def test_a_course_under_a_private_folder_with_a_symlinked_venv_grades_everyone_correctly(tmp_path):
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    os.chmod(private, 0o700)
    copy = copy_course(private / "course")
    (copy / ".venv").symlink_to(_venv_under(private), target_is_directory=True)
    for path in copy.rglob("*.py"):  # as a clone made with umask 077 leaves them
        os.chmod(path, 0o600)
    klass = private / "class"
    notebooks.write_notebook(answers.fill(LESSON), klass / "ada" / f"{LESSON}.ipynb")
    notebooks.write_notebook(answers.fill(LESSON, {"softmax": by_id("softmax_no_max_subtraction").source}),
                          klass / "bob" / f"{LESSON}.ipynb")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JUPYTER_PATH")}
    tools = Path(sys.executable).parent  # nbgrader runs `alembic`, installed beside the tests' interpreter
    env.update(PYTHONPATH=str(copy), PATH=os.pathsep.join([str(copy / ".venv" / "bin"), str(tools), env.get("PATH", "")]))
    proc = subprocess.run([str(copy / ".venv" / "bin" / "python"), "-m", "autograder.grade", str(klass),
                           "--out", str(private / "grading"), "--lessons", "01", "--workers", "2", "--quiet"],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with (private / "grading" / "grades.csv").open() as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    assert {s: rows[s][f"{LESSON} score"] for s in rows} == {"ada": "8", "bob": "7"}, rows
    assert rows["ada"]["flags"] == "" and rows["bob"]["flags"] == ""
