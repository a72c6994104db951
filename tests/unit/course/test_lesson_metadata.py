"""The light ``# %%`` headers of ``solutions/`` build notebooks whose nbgrader metadata is unchanged.

``fixtures/lesson_metadata.json`` records, for every cell of every lesson, the metadata nbgrader sees: in the
instructor notebook read from the source (what ``generate_assignment`` and ``autograde`` are given) and in the
released student notebook in ``lessons/`` (without the checksums, which follow the cells' text). When a lesson
gains, loses or re-labels a cell on purpose, record the new metadata and review the diff:

    .venv/bin/python tests/unit/course/test_lesson_metadata.py --record
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from autograder import course  # noqa: E402
from autograder.course import notebooks

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "lesson_metadata.json"


def _cells(nb) -> list:
    """[cell id, cell metadata] for every cell, checksums left out."""
    cells = []
    for cell in nb.cells:
        meta = copy.deepcopy(dict(cell.metadata))
        if "nbgrader" in meta:
            meta["nbgrader"] = {k: v for k, v in dict(meta["nbgrader"]).items() if k != "checksum"}
        cells.append([cell.get("id"), meta])
    return cells


def current(lesson: str) -> dict:
    return {"instructor": _cells(notebooks.read_source(course.SOLUTIONS / f"{lesson}.py")),
            "released": _cells(nbformat.read(course.LESSONS / f"{lesson}.ipynb", as_version=4))}


def recorded() -> dict:
    """{lesson: {kind: cells}} from the fixture, whose keys are "lesson/kind"."""
    out = {}
    for key, cells in json.loads(FIXTURE.read_text(encoding="utf-8")).items():
        lesson, kind = key.split("/")
        out.setdefault(lesson, {})[kind] = cells
    return out


def test_every_lesson_is_recorded():
    assert sorted(recorded()) == course.lesson_names(), "run `python tests/unit/course/test_lesson_metadata.py --record`"


@pytest.mark.parametrize("lesson", course.lesson_names())
@pytest.mark.parametrize("kind", ["instructor", "released"])
def test_nbgrader_sees_the_recorded_metadata(lesson, kind):
    want = recorded()[lesson][kind]
    got = json.loads(json.dumps(current(lesson)[kind]))
    assert [c[0] for c in got] == [c[0] for c in want], "cells added, removed or re-ordered"
    for (cell_id, meta), (_, expected) in zip(got, want):
        assert meta == expected, f"{lesson} cell {cell_id}: metadata {meta} differs from the recorded {expected}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(__doc__)
    FIXTURE.parent.mkdir(exist_ok=True)
    lines = []  # one cell a line, so a change reads as a one-line diff
    for n in course.lesson_names():
        for kind, cells in current(n).items():
            rows = ",\n".join("   " + json.dumps(c, sort_keys=True) for c in cells)
            lines.append(f" {json.dumps(n + '/' + kind)}: [\n{rows}\n ]")
    FIXTURE.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
    print(f"wrote {FIXTURE}")
