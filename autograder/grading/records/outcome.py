"""Tell the grader's failures from the learner's: a grading error never becomes a score.

Each (student, lesson) ends in one status:

* ``graded``: every mark is in;
* ``pending manual``: the autograded marks are in, written answers await the instructor (formgrader);
* ``grading error``: the grader failed, not the learner: the score is left empty (never 0), the pair is listed at
  the top of the report and retried on the next run, and the command exits with ``EXIT_GRADING_ERROR``;
* ``missing`` / ``malformed`` / ``refused``: no notebook by the lesson's close (``--close``), a file that is not one, or a link or special file
  (never followed, never opened): the learner's, scored 0 and flagged;
* ``not graded yet``: not reached by a run that was stopped; the next run grades it;
* ``not handed in``: no download of the term has held this lesson of this student yet, and the lesson is not closed
  (``autograder/grading/run/term.py``): no score, left out of the student's total, never 0.

``grading_error`` reads an autograded notebook and says whether its marks can be trusted. They cannot when:

* the kernel died, or stopped, before any learner cell ran (a locked cell before the first learner cell has a
  dead-kernel or not-run output, or the first learner cell was never run);
* the setup cell, or a locked cell before the first learner cell, raised an error (the kernel library cannot be
  imported, a disk failed).

No learner code can cause either: the graded copy runs the release's opening, its code cells up to and including the
setup cell, before any code cell of the learner's (``findings.restore_metadata`` moves the learner's cells placed
above the setup cell below it, flagged), nbgrader restores the opening's sources, and the kernel starts with nothing
of the notebook's but the notebook (its other files are not staged). The setup cell imports the hidden tests' module
first (every lesson's does: ``tests/unit/grading/records/test_outcome_rules.py``), so once it has run without error the kernel holds
the course's modules, and a hidden test that then cannot import them was broken by the notebook's own code: that
cell scores 0 and the notebook is flagged (``findings.run_flags``).

What the notebook itself caused is the learner's outcome, never a grading error: its cells, its metadata (a fake
locked cell, an unknown or repeated grade_id, changed metadata: ``findings.restore_metadata`` gives nbgrader the
released metadata only, and flags the rest), its files (a ``timestamp.txt`` that is not a time is ignored and
flagged: ``class_folder.submission_time``) and its imports.

The other grading errors (nbgrader's step failed on a notebook whose metadata is the release's, the kernel could not
start, a gradebook write failed) come from nbgrader's result, not the notebook (``autograder/grading/run/worker.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

from autograder import course
from autograder.grading.pipeline.execute import KERNEL_DIED, NOT_RUN

GRADED, PENDING, GRADING_ERROR, MISSING, MALFORMED, REFUSED, NOT_YET, NOT_HANDED_IN = (
    "graded", "pending manual", "grading error", "missing", "malformed", "refused", "not graded yet",
    "not handed in")
COURSE_MODULES = ("autograder", *(Path(h).stem for h in course.SELFCHECK_FILES))
SETUP = "setup"  # the grade_id of every lesson's setup cell, which imports the hidden tests' module first
_COURSE_IMPORT = re.compile(r"(?:No module named|cannot import name .* from) '(%s)(?:[.'\s]|$)" %
                            "|".join(COURSE_MODULES))


class GradingError(Exception):
    """The grader, not the learner, failed on this notebook; the message says what and how to fix it."""


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {}) or {}


def _errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _describe(out) -> str:
    return f"{out.get('ename', '')}: {out.get('evalue', '')}".strip()[:300]


def course_import_error(out) -> str | None:
    """The course module an error output failed to import, if any."""
    if out.get("ename") not in ("ModuleNotFoundError", "ImportError"):
        return None
    match = _COURSE_IMPORT.search(out.get("evalue", ""))
    return match.group(1) if match else None


def grading_error(nb) -> str | None:
    """Why the marks of this autograded notebook cannot be trusted (a grading error), or None."""
    learner_ran = False
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = _meta(cell)
        errors = _errors(cell)
        if not meta.get("locked"):  # the learner's cell: a solution cell or one without nbgrader metadata
            if not learner_ran and errors and errors[0].get("ename") == NOT_RUN:
                return "the kernel stopped before the first learner cell ran: " + _describe(errors[0])
            learner_ran = True
            continue
        gid = meta.get("grade_id", "?")
        if not errors or (learner_ran and gid != SETUP):
            continue
        out = errors[0]
        if out.get("ename") in (KERNEL_DIED, NOT_RUN):
            return f"the kernel died before the first learner cell ran (in locked cell {gid}): {_describe(out)}"
        module = course_import_error(out)
        where = f"the locked setup cell {gid} failed before any learner code ran"
        if module:
            return f"{where}: kernels cannot import the course's module {module!r} ({_describe(out)})"
        return f"{where}: {_describe(out)}"
    return None
