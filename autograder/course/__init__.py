"""The course's sources: where they live, the lessons and their ids, the learner-side files, the header format.

A lesson is named by its id, the stem of its source ``solutions/NN_name.py`` (``01_warmup``): the nbgrader
assignment, the notebook, the folder of its grades. ``notebooks.py`` reads a source into a notebook and writes
nbgrader course folders; ``helper_cell.py`` builds the cell that carries a lesson's self-check files.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
LESSONS = ROOT / "lessons"
# learner-side modules, copied from solutions/ to lessons/: one self-check module per lesson and their shared part
SELFCHECK_FILES = ("selfcheck_common.py", "selfcheck_01.py", "selfcheck_02.py", "selfcheck_03.py", "selfcheck_04.py",
           "selfcheck_05.py", "selfcheck_06.py", "selfcheck_07.py", "selfcheck_08.py", "selfcheck_09.py")
# learner-side pages, copied from solutions/ to lessons/ (every lesson's opening cell links to the glossary)
PAGES = ("glossary.md",)
LESSON_PATTERN = re.compile(r"^\d\d_[a-z0-9_]+\.py$")


class SourceError(ValueError):
    """A lesson source cannot be built; the message names the file, the cell and the fix."""


LIGHT_KEYS = ("grade_id", "solution", "points", "locked")  # what a `# %%` header states
NBGRADER_CONSTANTS = {"schema_version": 3, "task": False}  # what every cell of this course has


def nbgrader_metadata(header: dict, where: str) -> dict:
    """nbgrader's full cell metadata from a light header (``grade_id``; ``solution``; ``points``; ``locked``).

    A cell with ``points`` is graded (a setup cell may have 0); ``solution`` defaults to false; ``locked`` to
    ``not solution``. A header may also spell out nbgrader's own keys (as nbgrader's toolbar writes them) if they
    agree with these rules.
    """
    if "grade_id" not in header:
        raise SourceError(f"{where}: nbgrader metadata lacks 'grade_id'")
    unknown = sorted(set(header) - set(LIGHT_KEYS) - {"grade", *NBGRADER_CONSTANTS})
    if unknown:
        raise SourceError(f"{where}: unknown nbgrader key(s) {unknown}; a header states only {list(LIGHT_KEYS)}")
    solution = header.get("solution", False)
    full = {**NBGRADER_CONSTANTS, "grade": "points" in header, "grade_id": header["grade_id"],
            "locked": header.get("locked", not solution), "solution": solution}
    if "points" in header:
        full["points"] = header["points"]
    for key, value in header.items():
        if full[key] != value or type(full[key]) is not type(value):
            raise SourceError(f"{where}: {key}={json.dumps(value)} contradicts the header's other keys "
                              f"({key}={json.dumps(full[key])} follows from them); a cell is graded when it has "
                              "points: state only grade_id, solution, points and locked")
    return full


def lesson_sources():
    return sorted(p for p in SOLUTIONS.iterdir() if LESSON_PATTERN.match(p.name))


def lesson_names():
    """Every lesson's id, in order: the stem of its source (``01_warmup``)."""
    return [p.stem for p in lesson_sources()]


def lessons_named(requested) -> list:
    """The ids of the lessons a command line names, by id (``01_warmup``) or number (``01``), in the order given."""
    chosen = []
    for name in requested:
        match = [lesson for lesson in lesson_names() if name in (lesson, lesson_number(lesson))]
        if not match:
            raise KeyError(f"unknown lesson {name!r}; available: {', '.join(lesson_names())}")
        chosen += [m for m in match if m not in chosen]
    return chosen


def lesson_number(lesson: str) -> str:
    """``01_warmup`` -> ``01``: what a lesson's code modules are named by (``checks/lesson01.py``,
    ``bugs/lesson01.py``, ``selfcheck_01.py``), as a Python name cannot begin with a digit."""
    return lesson[:2]


def lesson_numbered(number: str) -> str:
    """The id of the lesson numbered ``number`` (``01`` -> ``01_warmup``), or the module ``lesson01`` /
    ``autograder.checks.lesson01`` / ``selfcheck_01`` belongs to (or a part of one, split by concern: ``lesson09_model``):
    the one way back from a code module's name."""
    digits = re.search(r"(\d\d)(?:_[a-z]+)?$", number)
    found = [name for name in lesson_names() if digits and lesson_number(name) == digits.group(1)]
    if len(found) != 1:
        raise KeyError(f"no lesson numbered {number!r} in solutions/ (lessons: {', '.join(lesson_names())})")
    return found[0]


def provenance(name: str) -> dict:
    """Where a built notebook comes from, kept in its metadata (learners and their feedback pages never see it)."""
    return {"source": f"solutions/{name}.py", "built_by": "make lessons",
            "note": f"Generated: edit solutions/{name}.py, not this notebook, then run `make lessons`."}


def selfcheck_module(lesson: str) -> str:
    """The name of a lesson's self-check module (``selfcheck_01`` for ``01_warmup``): its setup cell imports it."""
    return f"selfcheck_{lesson_number(lesson)}"


def import_selfcheck(module: str):
    """A learner-side helper module imported from ``solutions/`` by name, as a lesson's setup cell imports it."""
    import importlib

    sys.path.insert(0, str(SOLUTIONS))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(SOLUTIONS))


_PY_BANNER = "# {}\n"


def copy_helpers(dest):
    _copy_with_banner(SELFCHECK_FILES, dest, _PY_BANNER)


def copy_pages(dest):
    _copy_with_banner(PAGES, dest, "<!-- {} -->\n")


def helper_text(name: str) -> str:
    """A self-check module as learners get it (in ``lessons/`` and inside each notebook's first code cell)."""
    return _with_banner(name, _PY_BANNER)


def _with_banner(name, comment) -> str:
    """A learner-side file of solutions/, opening with a comment that names its source."""
    banner = comment.format(f"Built from solutions/{name} by `make lessons`; edit that file, not this one.")
    return banner + (SOLUTIONS / name).read_text(encoding="utf-8")


def _copy_with_banner(names, dest, comment):
    """Copy learner-side files from solutions/ to ``dest``, each opening with a comment that names its source."""
    for name in names:
        (Path(dest) / name).write_text(_with_banner(name, comment), encoding="utf-8")


def remove_tree(path):
    shutil.rmtree(path, ignore_errors=True)
