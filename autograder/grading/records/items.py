"""What each graded notebook's tests and written answers say about the learner, recorded with its state for the
instructor's insights.

``grade_one`` (``autograder/grading/run/worker.py``) calls ``record`` right after ``nbgrader autograde`` and keeps the
result in the (student, lesson) state record, so ``autograder/grading/reports/insights.py`` rebuilds every figure
from the state and the gradebook alone, after every run, without re-running anything:

* ``items``: per autograded cell (a hidden test), its score and maximum from the gradebook, how it ended
  (``passed``, ``bug`` with the catalogued bug's id, ``unnamed``: a wrong result no catalogued bug explains,
  ``unanswered``, ``interfered`` or ``not run``) and, for a failure no bug names, ``failure``: what it is, read from
  the graded notebook's error outputs (``failure_name``), and for an ``unnamed`` wrong result the verdict's
  ``signature`` (the wrong numbers at one fixed salt, ``checks.signature``: comparable across students and runs).
  The bug is what the hidden test decided in the grader (``execute.ExecutionReport.verdicts``), never anything the
  notebook printed;
* ``written``: per written answer (a manually graded answer cell), its points and whether it was answered; its
  mark is the instructor's, read from the gradebook when the insights are built (``written_marks``);
* ``attempted``: whether any answer cell differs from what was handed out ("not attempted" is the untouched
  notebook, kept apart from "attempted, wrong").

What was handed out is the released notebook with each find-the-bug exercise's given code in its cell
(``given_code.hand_out``), as the learner received it: an answer cell equal to it is not answered, so a test whose
graded functions are all left as handed out is ``unanswered``, never the given code's catalogued bug.
"""

from __future__ import annotations

import ast
import copy

from autograder.checks import registry
from autograder.checks.verdict import BUG, INTERFERED, NOT_RUN, PASSED, UNANSWERED, UNNAMED, Verdict
from autograder.grading.pipeline import execute
from autograder.grading.records.state import Item, Written
from autograder.publish import given_code

# a failure's name when the error outputs say nothing more
FAILURE_OF = {UNNAMED: "wrong result", NOT_RUN: "did not finish", INTERFERED: "interfered"}
# what the grader stops a kernel for (later cells are not run), and every error a failure is named after otherwise
STOPS = {"CellTimeoutError": "timeout", "KeyboardInterrupt": "timeout", execute.KERNEL_DIED: "kernel died",
         execute.NOTEBOOK_TIMEOUT: "notebook time limit"}
NAMED = {**STOPS, "MemoryError": "memory limit", "Tampered": "tampering"}


def _cells(nb) -> dict:
    """{grade_id: cell} of every cell with one."""
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")}


def answer_cells(nb) -> dict:
    """{grade_id: cell} of every answer cell (code to write, or a written answer)."""
    return {gid: c for gid, c in _cells(nb).items() if c.metadata["nbgrader"].get("solution")}


def handed_out(lesson: str, released):
    """The notebook the learner received: the release with the find-the-bug exercises' given code."""
    return given_code.hand_out(lesson, copy.deepcopy(released))


def untouched(nb, handed) -> set:
    """grade_ids of the answer cells of ``nb`` that are as they were handed out."""
    theirs = answer_cells(nb)
    return {gid for gid, cell in answer_cells(handed).items()
            if theirs.get(gid) is None or theirs[gid].source.strip() == cell.source.strip()}


def defined_in(handed) -> dict:
    """{name: grade_id} of the functions, classes and values each answer cell defines, as handed out."""
    names: dict = {}
    for gid, cell in answer_cells(handed).items():
        try:
            body = ast.parse(cell.source).body if cell.cell_type == "code" else []
        except SyntaxError:
            continue
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found = [target.id for target in targets if isinstance(target, ast.Name)]
            else:
                found = []
            for name in found:
                names.setdefault(name, gid)
    return names


def _errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def failure_name(nb, cells: dict, gid: str, defined: dict, default: str, said: Verdict | None = None) -> str:
    """What the failure of the test cell ``gid`` is, for the instructor: what the grader stopped the kernel for
    (``timeout``, ``kernel died``, ``memory limit``...: the graded notebook's error outputs, ``cells`` by grade_id),
    else the error the learner's code raised (``NameError``, ``ValueError``...: the hidden test's verdict ``said``,
    or the cell's own error), and for a name left undefined the error of the answer cell that defines it
    (``SyntaxError``); ``default`` when nothing says more. No message is read: what the test decided is a field of
    its verdict."""
    errors = _errors(cells.get(gid, {}))
    if not errors:
        return default
    ename = str(errors[-1].get("ename", ""))
    undefined = None
    if ename == execute.NOT_RUN:  # the kernel was stopped in an earlier cell (the last stop of the notebook)
        ename = ([str(e["ename"]) for c in nb.cells for e in _errors(c) if e.get("ename") in STOPS] or [default])[-1]
    elif ename in (execute.WRONG_ANSWER, execute.HIDDEN_TEST_NOT_RUN):  # the grader's words: what did the code raise?
        if said is not None and said.raised and ename == execute.WRONG_ANSWER:
            ename, undefined = said.raised, said.undefined
        else:
            ename = default
    if ename == "NameError" and undefined:
        failed = _errors(cells.get(defined.get(undefined), {}))
        ename = str(failed[0].get("ename")) if failed else ename
    if ename == execute.KERNEL_DIED and any(e.startswith("memory limit")
                                            for e in execute.execution_report(nb).sandbox_events):
        return NAMED["MemoryError"]
    return NAMED.get(ename, ename)


def record(gb, lesson: str, student: str, nb, released, verdicts: dict) -> tuple:
    """(items: {grade_id: ``state.Item``}, written: {grade_id: ``state.Written``}, attempted) of one graded
    notebook, for its ``state.Record``."""
    handed = handed_out(lesson, released)
    left, defined = untouched(nb, handed), defined_in(handed)
    written = {gid for gid, c in answer_cells(handed).items() if c.metadata["nbgrader"].get("grade")}
    tests = registry.tests_of(lesson)
    cells = _cells(nb)
    submission = gb.find_submission_notebook(lesson, lesson, student)
    found, answers = {}, {}
    for grade in sorted(submission.grades, key=lambda g: g.name):
        maximum = float(grade.max_score or 0.0)
        if grade.name in written:
            answers[grade.name] = Written(max=maximum, answered=grade.name not in left)
            continue
        if grade.auto_score is None or not maximum:  # the zero-point setup cell
            continue
        score = float(grade.auto_score)
        said = verdicts.get(grade.name)
        result = PASSED if score >= maximum else said.result if said else NOT_RUN  # the gradebook's score decides
        if result == PASSED and score < maximum:  # the test passed but the learner's cell failed around it
            result = UNNAMED
        test = tests.get(grade.name)
        graded = {defined.get(n) for n in (*test.uses, *test.together)} if test else {None}
        if result != PASSED and None not in graded and graded <= left:  # its answer cells as handed out
            result = UNANSWERED
        failure = None
        if result not in (PASSED, BUG, UNANSWERED):
            failure = failure_name(nb, cells, grade.name, defined, FAILURE_OF.get(result, result), said)
        found[grade.name] = Item(score=score, max=maximum, result=result,
                                 bug=said.bug if result == BUG and said else None, failure=failure,
                                 signature=said.signature if result == UNNAMED and said else None)
    return found, answers, left != set(answer_cells(handed))


def written_marks(gb, lesson: str, student: str, written: dict) -> dict:
    """{grade_id: the instructor's mark, or None while it is pending} of the answered written answers of
    ``written`` (a record's), read from the gradebook."""
    if not any(w.answered for w in written.values()):
        return {}
    return marks_of_written(gb.find_submission_notebook(lesson, lesson, student).grades, written)


def marks_of_written(grades, written: dict) -> dict:
    """``written_marks`` from one submission's ``grades`` (nbgrader's, or ``marks.lesson_grades``')."""
    wanted = {gid for gid, w in written.items() if w.answered}
    return {g.name: None if g.needs_manual_grade else float(g.score or 0.0) for g in grades if g.name in wanted}
