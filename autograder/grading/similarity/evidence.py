"""What each graded notebook offers as evidence of shared work, and what weighs nothing because it was expected.

``kept`` makes what a graded notebook's record keeps (``state.Record.work``, written by ``worker.grade_one``): the
learner's own code cells (those changed from what was handed out: ``items.untouched``), their fingerprints
(``code_prints``) and the text of the written answers. ``Work`` is one (student, lesson) as the search reads it:
that, with what the hidden tests found (``state.Item``: a catalogued bug, or a wrong result no bug explains and
its ``signature``, the digest of the wrong numbers on the grader's fixed inputs) and the record's flags.

``expected`` is what any learner may hold without having seen another's work: the model answers of every lesson
(published with the course), every cell a lesson hands out (the stubs, the given code, the find-the-bug exercises'
code). Their fingerprints weigh nothing.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from autograder.checks.verdict import BUG, UNNAMED
from autograder.grading.records import items
from autograder.grading.similarity import code_prints

MAX_KEPT = 20_000  # characters of each answer cell a record keeps, to show beside another's
GIVEN_CODE_FLAG = "given code of another lesson"  # how ``findings.given_elsewhere`` flags begin


def kept(nb, released, lesson: str) -> dict | None:
    """{"code": {grade_id: source}, "prints": {grade_id: fingerprints}, "answers": {grade_id: text}} of the answer
    cells of the graded notebook ``nb`` that differ from what was handed out (``items.handed_out``); None when they
    cannot be read: the notebook is graded all the same, and the similarity page counts it as left out."""
    try:
        return _kept(nb, released, lesson)
    except Exception:  # noqa: BLE001 - evidence for the instructor never costs a grade
        return None


def _kept(nb, released, lesson: str) -> dict:
    handed = items.handed_out(lesson, released)
    left = items.untouched(nb, handed)
    code, prints, answers = {}, {}, {}
    for gid, cell in items.answer_cells(nb).items():
        if gid in left or gid not in items.answer_cells(handed):
            continue
        if cell.cell_type == "code" and not cell.metadata["nbgrader"].get("grade"):
            code[gid] = cell.source[:MAX_KEPT]
            prints[gid] = code_prints.prints(cell.source)
        elif cell.metadata["nbgrader"].get("grade"):
            answers[gid] = cell.source[:MAX_KEPT]
    return {"code": code, "prints": prints, "answers": answers}


@dataclass
class Work:
    """One graded (student, lesson), as the search for similar work reads it."""

    student: str
    lesson: str
    code: dict = field(default_factory=dict)  # grade_id -> the learner's source
    prints: dict = field(default_factory=dict)  # grade_id -> set of fingerprints
    answers: dict = field(default_factory=dict)  # grade_id -> written answer text
    wrong: dict = field(default_factory=dict)  # test grade_id -> signature of a wrong result no bug explains
    bugs: dict = field(default_factory=dict)  # test grade_id -> catalogued bug id
    given: list = field(default_factory=list)  # flags: another lesson's given code as an answer


def from_record(record) -> Work | None:
    """The ``Work`` of a state record, or None for a record that keeps no work (graded by an older grader)."""
    if record.work is None or record.items is None:
        return None
    work = Work(record.student, record.lesson, code=dict(record.work.get("code", {})),
                prints={gid: set(p) for gid, p in record.work.get("prints", {}).items()},
                answers=dict(record.work.get("answers", {})))
    for gid, item in record.items.items():
        if item.result == BUG and item.bug:
            work.bugs[gid] = item.bug
        elif item.result == UNNAMED and item.signature:
            work.wrong[gid] = item.signature
    work.given = [f for f in record.flags if f.startswith(GIVEN_CODE_FLAG)]
    return work


def normalised(text: str) -> str:
    """A written answer without case, spacing, punctuation or markdown: two copies of one answer are equal."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


@functools.lru_cache(maxsize=None)
def expected() -> frozenset:
    """Fingerprints of every model answer and every cell handed out, in every lesson."""
    from autograder import course
    from autograder.course import answers

    found = set()
    for lesson in course.lesson_names():
        for source in answers.model_answers(lesson).values():
            found.update(code_prints.prints(source))
        for cell in items.handed_out(lesson, answers.student_notebook(lesson)).cells:
            if cell.cell_type == "code":
                found.update(code_prints.prints(cell.source))
    return frozenset(found)


@functools.lru_cache(maxsize=None)
def model_written(lesson: str) -> dict:
    """{grade_id: the published model answer} of each written answer of ``lesson`` (docs/written-answers.md)."""
    from autograder.publish import answer_key

    found = {}
    for gid, _, _, text in answer_key.written_answers(lesson):
        found[gid] = re.split(r"\*\*Rubric", text)[0].replace("**Model answer.**", "").strip()
    return found
