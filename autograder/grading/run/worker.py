"""A grading worker: nbgrader's steps for one (student, lesson), in the process that runs them.

A ``Worker`` is made once per process and run (``autograder/grading/run/pool.py`` makes one in each pool process, on
each Dask worker, or in the command's own process with one worker) from the run's ``Settings``. ``grade_one`` runs
nbgrader's autograde through the one pipeline of ``autograder/nbgrader_config.py`` (sandboxed execute, hidden tests
decided in the grader, nbgrader's own steps), reads what the execute step saw back from the graded notebook
(``execute.execution_report``), then runs ``generate_feedback``, and records the result (``state``) whatever
happens; the record is also its return value.

No silent zeros: a failure of the grader rather than the learner (``autograder/grading/records/outcome.py``) leaves that
score empty, is listed first in the report, is retried on the next run, and makes the command exit with status 4.
Manual grades given in formgrader (``make formgrader``) are folded in on the next run, and every feedback page whose
grades changed since it was written is generated again (``stale_feedback``, ``refresh_feedback``,
``autograder/grading/records/marks.py``).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from pathlib import Path

from autograder.grading.intake import class_roster
from autograder.grading.pipeline import costs, execute
from autograder.grading.records import findings, gradebook, items, marks, outcome, state
from autograder.grading.records.settings import Settings
from autograder.grading.run import feedback_files, workspace
from autograder.grading.similarity import evidence


class Worker:
    """The nbgrader configuration of one run, loaded once in this process, and the steps it grades with.

    Making one prepares the process as the run needs it (the grading environment, a private umask, quiet nbgrader
    loggers); a pool process is forked with the environment and folder of the run that started the pool."""

    def __init__(self, s: Settings):
        self.s = s
        os.environ.update(workspace.grading_env(s))
        os.umask(0o077)
        import warnings

        warnings.filterwarnings("ignore")  # nbgrader's SQLAlchemy warnings would scribble over the progress bar
        for name in ("traitlets", "nbgrader", "NbGraderApp"):
            logger = logging.getLogger(name)
            logger.handlers = []
            logger.propagate = False
            logger.setLevel(logging.WARNING)
        from traitlets.config.loader import PyFileConfigLoader

        config = PyFileConfigLoader("nbgrader_config.py", path=str(s.course_root)).load_config()
        # how this run's kernels start, not what they score: set here, never kept in the course's config
        config.SafeExecute.warm_kernels = s.warm_kernels
        config.SafeExecute.kernel_library = str(workspace.kernel_library(s))
        self.config = config

    def _nbgrader_step(self, converter_cls, student: str, lesson: str) -> dict:
        from nbgrader.coursedir import CourseDirectory
        from nbgrader.utils import capture_log

        coursedir = CourseDirectory(config=self.config)
        coursedir.root = str(self.s.course_root)
        coursedir.assignment_id = lesson
        coursedir.student_id = student
        app = converter_cls(coursedir=coursedir, config=self.config)
        app.force = True
        return capture_log(app)

    def grade_one(self, student: str, lesson: str, task: dict) -> state.Record:
        """autograde + generate_feedback for one (student, lesson); record the result, and return the record.

        The instructor's marks on the submission are taken first (``marks.before_regrade``, kept in a file until the
        regrade is done) and put back after autograde (``marks.carry``). The record keeps what grading it cost
        (``costs``: its own writing aside)."""
        ledger = costs.begin()
        with ledger.phase(costs.RECORDS):
            record = self._grade_one(student, lesson, task)
        record.costs = ledger.to_json()
        state.write(self.s, record)
        if record.graded:
            state.drop_carried(self.s, student, lesson)  # every mark is back in the gradebook
        return record

    def _grade_one(self, student: str, lesson: str, task: dict) -> state.Record:
        import nbformat
        from nbgrader.converters import Autograde

        s = self.s
        root = s.course_root
        started = time.monotonic()
        try:
            kept = marks.for_hand_in(self._marks_to_carry(student, lesson), task.get("by", ""))
        except Exception as exc:  # noqa: BLE001 - grading it now would put its marks at risk: the grader's failure
            record = new_record(s, student, lesson, task, state.read(s, student, lesson))
            record.reason = (f"the instructor's marks on this notebook could not be read before grading it again "
                             f"({type(exc).__name__}: {exc})"[:500] + "; it was not graded")
            return record
        with costs.phase(costs.NBGRADER):
            result = self._nbgrader_step(Autograde, student, lesson)
        record = new_record(s, student, lesson, task, kept["previous"])
        autograded = root / "autograded" / student / lesson / f"{lesson}.ipynb"
        try:
            if not (result.get("success") and autograded.exists()):
                raise outcome.GradingError("nbgrader autograde failed: " + last_error(result))
            nb = nbformat.read(autograded, as_version=4)
            seen = execute.execution_report(nb)
            record.flags += seen.sandbox_events
            problem = outcome.grading_error(nb)
            if problem:
                raise outcome.GradingError(problem)
            record.flags = findings.run_flags(nb) + findings.given_elsewhere(lesson, nb) + record.flags
            record.answers = marks.written_answers(nb)
            released = nbformat.read(root / "release" / lesson / f"{lesson}.ipynb", as_version=4)
            with gradebook.opened(s) as gb:
                record.reopened = marks.carry(gb, lesson, student, kept["marks"], record.answers)
                record.items, record.written, record.attempted = items.record(gb, lesson, student, nb, released,
                                                                              seen.verdicts)
            record.work = evidence.kept(nb, released, lesson)
            held = {gid: m["answer"] for gid, m in kept["marks"].items() if m.get("answer")}
            with costs.phase(costs.FEEDBACK):
                self._write_feedback(student, lesson, record, held, before=(kept["previous"] or {}).get("score"))
        except Exception as exc:  # noqa: BLE001 - whatever broke, it is the grader's failure, never a score
            reason = str(exc) if isinstance(exc, outcome.GradingError) else f"{type(exc).__name__}: {exc}"
            record.graded, record.status, record.score, record.reason = False, outcome.GRADING_ERROR, None, reason[:500]
            feedback_files.page_path(s.out, student, lesson).unlink(missing_ok=True)  # of an older notebook
        record.seconds = round(time.monotonic() - started, 2)
        return record

    def _marks_to_carry(self, student: str, lesson: str) -> dict:
        """The marks a regrade of (student, lesson) must put back: those waiting from a rebuild or an unfinished
        regrade, else the gradebook's, written down before nbgrader touches them."""
        kept = state.read_carried(self.s, student, lesson)
        if kept is None:
            with gradebook.opened(self.s) as gb:
                kept = marks.before_regrade(gb, lesson, student, state.read(self.s, student, lesson))
            if kept["marks"]:
                state.write_carried(self.s, student, lesson, kept)
        return kept

    def _write_feedback(self, student: str, lesson: str, record: state.Record, graded_answers: dict, before) -> None:
        """nbgrader's generate_feedback for one graded notebook, copied to DIR/feedback; its marks into ``record``.
        ``before``: the score the learner was last given, shown beside the new one when they differ."""
        from nbgrader.converters import GenerateFeedback

        s = self.s
        with gradebook.opened(s) as gb:
            current = marks.marks(gb, lesson, student)
            record.feedback_of = marks.fingerprint(gb, lesson, student)
        record.flags = [f for f in record.flags if not f.startswith("no feedback: ")]
        feedback = self._nbgrader_step(GenerateFeedback, student, lesson)
        html_path = s.course_root / "feedback" / student / lesson / f"{lesson}.html"
        if feedback.get("success") and html_path.exists():
            dest = feedback_files.page_path(s.out, student, lesson)
            dest.parent.mkdir(parents=True, exist_ok=True)
            page = html_path.read_text(encoding="utf-8")
            reopened = marks.still_pending(record.reopened, current)
            dest.write_text(feedback_files.with_changes(page, before, current["score"], reopened), encoding="utf-8")
        else:
            record.flags.append("no feedback: " + last_error(feedback))
        record.graded, record.score, record.max_score = True, current["score"], current["max"]
        record.status = outcome.PENDING if current["pending"] else outcome.GRADED
        record.graded_answers = marks.graded_answers(current, record.answers, graded_answers)

    def refresh_feedback(self, student: str, lesson: str) -> state.Record:
        """Generate the feedback of an already graded notebook again (its grades changed: manual grading)."""
        record = state.read(self.s, student, lesson)
        if record is None:
            raise FileNotFoundError(f"no record of {student}'s {lesson} to refresh its feedback from")
        record.previous = previous_of(record)
        self._write_feedback(student, lesson, record, record.graded_answers, before=record.score)
        record.refreshed = True
        state.write(self.s, record)
        return record

    def grade_student(self, student: str, tasks: dict) -> list:
        """Every task of one student, in lesson order: graded, or only its feedback refreshed."""
        return [self.refresh_feedback(student, lesson) if task.get("refresh") else self.grade_one(student, lesson, task)
                for lesson, task in sorted(tasks.items())]


def last_error(result: dict) -> str:
    """The most telling line of a failed nbgrader step: the last exception line of its log, else of its error."""
    for text in (result.get("log") or "", result.get("error") or ""):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        found = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", line)
                 and "NbGraderException" not in line]
        if found:
            return found[-1][:300]
    return "unknown error (see the nbgrader log)"


def previous_of(record: state.Record) -> dict:
    """What a new record keeps of the one it replaces: its score, status and attempted (the report shows changes)."""
    return {"score": record.score, "status": record.status, "attempted": record.attempted}


def new_record(s: Settings, student: str, lesson: str, task: dict, previous) -> state.Record:
    """A notebook's record before it is graded: a grading error until grading succeeds. ``previous``: the record
    it replaces (a ``state.Record``), or what ``marks.before_regrade`` kept of it (a dict), or None."""
    if isinstance(previous, state.Record):
        previous = {**previous_of(previous), "graded_answers": previous.graded_answers}
    return state.Record(student, lesson, task["hash"], s.key, by=task.get("by", ""), flags=list(task["flags"]),
                        graded_answers=(previous or {}).get("graded_answers") or {},
                        previous={k: previous.get(k) for k in ("score", "status", "attempted")} if previous else None)


def grader_failed(s: Settings, student: str, tasks: dict, *, reason: str) -> list:
    """Record every notebook of ``tasks`` as a grading error with ``reason`` (the grader could not grade here)."""
    records = []
    for lesson, task in sorted(tasks.items()):
        previous = state.read(s, student, lesson)
        if task.get("refresh"):  # graded already: only its feedback waits, and keeps waiting
            if previous is not None:
                records.append(previous)
            continue
        record = new_record(s, student, lesson, task, previous)
        record.reason = reason[:500]
        state.write(s, record)
        records.append(record)
    return records


def stale_feedback(s: Settings, roster: class_roster.Roster, todo: dict) -> dict:
    """{student: {lesson: {"refresh": True}}} for graded notebooks whose grades changed since their feedback was
    written, or whose page is gone (a run that graded other lessons removed it). The gradebook's marks are read a
    lesson at a time (``marks.lesson_fingerprints``): a rerun of a large class reads them in a few queries."""
    with gradebook.opened(s) as gb:
        prints = {lesson: marks.lesson_fingerprints(gb, lesson) for lesson in s.lessons}
    stale: dict = {}
    for student in roster.students:
        for lesson in s.lessons:
            record = state.read(s, student, lesson)
            if not record or not record.graded or lesson in todo.get(student, {}) or student not in prints[lesson]:
                continue
            if (prints[lesson][student] != record.feedback_of
                    or not feedback_files.page_path(s.out, student, lesson).exists()):  # removed earlier
                stale.setdefault(student, {})[lesson] = {"refresh": True}
    return stale
