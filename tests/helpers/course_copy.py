"""A copy of the course in another folder, as a second checkout would be: what the grading command reads
(``autograder/``, ``solutions/``, ``lessons/``), without byte-code. The tests run the copy's own command on it (the
copy first on PYTHONPATH)."""

from __future__ import annotations

import shutil
from pathlib import Path

from autograder import course


def copy_course(dest: Path) -> Path:
    for part in ("autograder", "lessons", "solutions"):
        shutil.copytree(course.ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    return dest
