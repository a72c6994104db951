"""The worker side of grading: nbgrader's steps for one (student, lesson) in a worker process, and the pool.

``run_tasks`` grades ``{student: {lesson: task}}`` over ``--workers`` processes (spawned: every function a worker
runs is a module-level function here), one student at a time in each. ``grade_one`` runs nbgrader's autograde
through the one pipeline of ``autograder/nbgrader_config.py`` (sandboxed execute, re-verification of the hidden
tests, nbgrader's own steps), then ``generate_feedback``, and records the result (``state``) whatever happens.

No silent zeros: a failure of the grader rather than the learner (``autograder/grading/outcome.py``) leaves that
score empty, is listed first in the report, is retried on the next run, and makes the command exit with status 4.
Manual grades given in formgrader (``make formgrader``) are folded in on the next run, and every feedback page whose
grades changed since it was written is generated again (``stale_feedback``, ``refresh_feedback``,
``autograder/grading/marks.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing as mp
import os
import re
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path

from autograder.grading import execute, findings, intake, items, marks, outcome, state, workspace
from autograder.grading.settings import COURSE_ID, Settings

_W: dict = {}


def _init_worker(settings: dict):
    s = Settings(**settings)
    os.environ.update(workspace.grading_env(s))
    os.umask(0o077)
    _W.update(settings=s)
    import warnings

    warnings.filterwarnings("ignore")  # nbgrader's SQLAlchemy warnings would scribble over the progress bar
    for name in ("traitlets", "nbgrader", "NbGraderApp"):
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = False
        logger.setLevel(logging.WARNING)
    from traitlets.config.loader import PyFileConfigLoader

    _W["config"] = PyFileConfigLoader("nbgrader_config.py", path=str(s.course_root)).load_config()


def _nbgrader_step(converter_cls, student: str, lesson: str) -> dict:
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.utils import capture_log

    config = _W["config"]
    coursedir = CourseDirectory(config=config)
    coursedir.root = str(_W["settings"].course_root)
    coursedir.assignment_id = lesson
    coursedir.student_id = student
    app = converter_cls(coursedir=coursedir, config=config)
    app.force = True
    return capture_log(app)


def _last_error(result: dict) -> str:
    """The most telling line of a failed nbgrader step: the last exception line of its log, else of its error."""
    for text in (result.get("log") or "", result.get("error") or ""):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        found = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", line)
                 and "NbGraderException" not in line]
        if found:
            return found[-1][:300]
    return "unknown error (see the nbgrader log)"


def grade_one(student: str, lesson: str, task: dict) -> dict:
    """autograde + generate_feedback for one (student, lesson), in this worker process; record the result."""
    import nbformat
    from nbgrader.api import Gradebook
    from nbgrader.converters import Autograde

    s = _W["settings"]
    root = s.course_root
    flags = list(task["flags"])
    started = time.monotonic()
    execute.sandbox_events.clear()
    execute.hidden_outcomes.clear()
    result = _nbgrader_step(Autograde, student, lesson)
    flags += [e for e in dict.fromkeys(execute.sandbox_events)]
    outcomes = dict(execute.hidden_outcomes)
    previous = state.read(s, student, lesson) or {}
    record = {"student": student, "lesson": lesson, "hash": task["hash"],
              "key": json.loads((Path(s.out) / "course.json").read_text())["key"], "graded": False,
              "status": outcome.GRADING_ERROR, "score": None, "max_score": None, "flags": flags, "seconds": 0.0,
              "graded_answers": previous.get("graded_answers", {}),
              "previous": {k: previous.get(k) for k in ("score", "status", "attempted")} if previous else None}
    autograded = root / "autograded" / student / lesson / f"{lesson}.ipynb"
    try:
        if not (result.get("success") and autograded.exists()):
            raise outcome.GradingError("nbgrader autograde failed: " + _last_error(result))
        nb = nbformat.read(autograded, as_version=4)
        problem = outcome.grading_error(nb)
        if problem:
            raise outcome.GradingError(problem)
        record["flags"] = findings.run_flags(nb) + flags
        record["answers"] = marks.written_answers(nb)
        released = nbformat.read(root / "release" / lesson / f"{lesson}.ipynb", as_version=4)
        with Gradebook(s.gradebook_url, COURSE_ID) as gb:
            record["flags"] += marks.review_regrade(gb, lesson, student, record["answers"],
                                                    previous.get("graded_answers", {}))
            record.update(items.record(gb, lesson, student, nb, released, outcomes))
        _write_feedback(s, student, lesson, record, previous.get("graded_answers", {}))
    except Exception as exc:  # noqa: BLE001 - whatever broke, it is the grader's failure, never a score
        reason = str(exc) if isinstance(exc, outcome.GradingError) else f"{type(exc).__name__}: {exc}"
        record.update(graded=False, status=outcome.GRADING_ERROR, score=None, reason=reason[:500])
        (Path(s.out) / "feedback" / student / f"{lesson}.html").unlink(missing_ok=True)  # of an older notebook
    record["seconds"] = round(time.monotonic() - started, 2)
    state.write(s, student, lesson, record)
    return record


def _write_feedback(s: Settings, student: str, lesson: str, record: dict, graded_answers: dict) -> None:
    """nbgrader's generate_feedback for one graded notebook, copied to DIR/feedback; its marks into ``record``."""
    from nbgrader.api import Gradebook
    from nbgrader.converters import GenerateFeedback

    with Gradebook(s.gradebook_url, COURSE_ID) as gb:
        current = marks.marks(gb, lesson, student)
        record["feedback_of"] = marks.fingerprint(gb, lesson, student)
    record["flags"] = [f for f in record["flags"] if not f.startswith("no feedback: ")]
    feedback = _nbgrader_step(GenerateFeedback, student, lesson)
    html_path = s.course_root / "feedback" / student / lesson / f"{lesson}.html"
    if feedback.get("success") and html_path.exists():
        dest = Path(s.out) / "feedback" / student / f"{lesson}.html"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(html_path, dest)
    else:
        record["flags"].append("no feedback: " + _last_error(feedback))
    record.update(graded=True, score=current["score"], max_score=current["max"],
                  status=outcome.PENDING if current["pending"] else outcome.GRADED,
                  graded_answers=marks.graded_answers(current, record.get("answers", {}), graded_answers))


def refresh_feedback(student: str, lesson: str) -> dict:
    """Generate the feedback of an already graded notebook again (its grades changed: manual grading)."""
    s = _W["settings"]
    record = state.read(s, student, lesson)
    _write_feedback(s, student, lesson, record, record.get("graded_answers", {}))
    record["refreshed"] = True
    state.write(s, student, lesson, record)
    return record


def grade_student(student: str, tasks: dict) -> list:
    return [refresh_feedback(student, lesson) if task.get("refresh") else grade_one(student, lesson, task)
            for lesson, task in sorted(tasks.items())]


def stale_feedback(s: Settings, roster: intake.Roster, todo: dict) -> dict:
    """{student: {lesson: {"refresh": True}}} for graded notebooks whose grades changed since their feedback."""
    from nbgrader.api import Gradebook, MissingEntry

    stale = {}
    with Gradebook(s.gradebook_url, COURSE_ID) as gb:
        for student in roster.students:
            for lesson in s.lessons:
                record = state.read(s, student, lesson)
                if not record or not record.get("graded") or lesson in todo.get(student, {}):
                    continue
                try:
                    changed = marks.fingerprint(gb, lesson, student) != record.get("feedback_of")
                except MissingEntry:
                    continue
                if changed:
                    stale.setdefault(student, {})[lesson] = {"refresh": True}
    return stale


class Pool:
    """The worker processes of one run: started once, when first needed (each pays nbgrader's imports once), and
    shared by the canary, the students and the feedback refresh. A pool broken by a dying worker is replaced."""

    def __init__(self, s: Settings):
        self.s = s
        self._executor = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def executor(self) -> ProcessPoolExecutor:
        if self._executor is not None and getattr(self._executor, "_broken", False):
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=self.s.workers, mp_context=mp.get_context("spawn"),
                                                 initializer=_init_worker, initargs=(asdict(self.s),))
        return self._executor


def run_tasks(s: Settings, todo: dict, *, progress=True, pool: Pool | None = None) -> int:
    """Grade {student: [lessons]} over ``s.workers`` processes (``pool``'s, or a pool of this call's own); returns
    how many notebooks were graded."""
    from tqdm import tqdm

    if not todo:
        return 0
    students = sorted(todo)
    bar = tqdm(total=len(students), unit="student", desc="grading", disable=not progress, file=sys.stderr,
               dynamic_ncols=True)
    done = 0
    if s.workers <= 1:
        _init_worker(asdict(s))
        for student in students:
            done += len(grade_student(student, todo[student]))
            bar.update()
    else:
        with Pool(s) if pool is None else contextlib.nullcontext(pool) as lent:
            executor = lent.executor()
            futures = {executor.submit(grade_student, student, todo[student]): student for student in students}
            for future in as_completed(futures):
                done += len(future.result())
                bar.update()
    bar.close()
    return done

