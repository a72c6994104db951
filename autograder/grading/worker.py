"""The worker side of grading: nbgrader's steps for one (student, lesson) in a worker process, and the pool.

``run_tasks`` grades ``{student: {lesson: task}}`` over ``--workers`` processes (forked from a server process: every function a worker
runs is a module-level function here), one student at a time in each, or on the workers of a Dask cluster
(``--scheduler``, ``autograder/grading/cluster.py``), which run the same functions. ``grade_one`` runs nbgrader's autograde
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
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict
from pathlib import Path

from autograder.grading import execute, findings, intake, items, marks, outcome, state, workspace
from autograder.grading.settings import COURSE_ID, Settings

_W: dict = {}


def _init_worker(settings: dict, environ: dict | None = None, cwd: str | None = None):
    """Make this process a worker of the run under ``settings``. A pool's workers are forked from a server started
    once per process (``Pool``), so they get the environment and folder of the run that starts the pool here."""
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    if cwd is not None:
        os.chdir(cwd)
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

    config = PyFileConfigLoader("nbgrader_config.py", path=str(s.course_root)).load_config()
    # how this run's kernels start, not what they score: set here, never kept in the course's config
    config.SafeExecute.warm_kernels = s.warm_kernels
    config.SafeExecute.kernel_library = str(workspace.kernel_library(s))
    _W["config"] = config


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
    started = time.monotonic()
    execute.sandbox_events.clear()
    execute.hidden_outcomes.clear()
    result = _nbgrader_step(Autograde, student, lesson)
    outcomes = dict(execute.hidden_outcomes)
    previous = state.read(s, student, lesson) or {}
    record = _new_record(s, student, lesson, task, previous)
    record["flags"] += [e for e in dict.fromkeys(execute.sandbox_events)]
    flags = record["flags"]
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


def _new_record(s: Settings, student: str, lesson: str, task: dict, previous: dict) -> dict:
    """A notebook's record before it is graded: a grading error until grading succeeds."""
    return {"student": student, "lesson": lesson, "hash": task["hash"],
            "key": json.loads((Path(s.out) / "course.json").read_text())["key"], "graded": False,
            "status": outcome.GRADING_ERROR, "score": None, "max_score": None, "flags": list(task["flags"]),
            "seconds": 0.0, "graded_answers": previous.get("graded_answers", {}),
            "previous": {k: previous.get(k) for k in ("score", "status", "attempted")} if previous else None}


def grader_failed(student: str, tasks: dict, *, reason: str, s: Settings | None = None) -> list:
    """Record every notebook of ``tasks`` as a grading error with ``reason`` (the grader could not grade here);
    ``s``: the run's settings, in a process that is not a grading worker."""
    s = s or _W["settings"]
    records = []
    for lesson, task in sorted(tasks.items()):
        previous = state.read(s, student, lesson) or {}
        if task.get("refresh"):  # graded already: only its feedback waits, and keeps waiting
            records.append(previous)
            continue
        record = _new_record(s, student, lesson, task, previous)
        record["reason"] = reason[:500]
        state.write(s, student, lesson, record)
        records.append(record)
    return records


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


def _forkserver():
    """Workers forked from one server process that has imported the grading code and nbgrader once: a pool then
    starts in milliseconds instead of each worker paying those imports (seconds), which counts when one process
    grades many times (the tests). Forking a single-threaded server is safe where forking this process is not."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["autograder.grading.worker", "nbgrader.converters", "nbgrader.api"])
    return ctx


def pool_for(s: Settings):
    """Where the run grades: this machine's worker processes, or the Dask cluster of ``--scheduler``."""
    if s.scheduler:
        from autograder.grading import cluster

        return cluster.ClusterPool(s)
    return Pool(s)


WORKER_DIED = ("the grading worker process died while grading this student's notebooks, {times} (killed, or out of "
               "memory: is the notebook very large?); the other students are graded as usual. Check the submission, "
               "then run the same command again: it grades only what is left")


class Pool:
    """The worker processes of one run: started once, when first needed (each pays nbgrader's imports once), and
    shared by the canary, the students and the feedback refresh.

    A worker process that dies (killed, out of memory) breaks the pool, and every job the pool was running fails
    with it. The pool is then replaced, what the dead kernels left is removed, and those jobs run again, each
    alone: a job whose worker dies again when it runs alone is recorded as a grading error (``grader_failed``),
    never a score, and the rest of the class goes on."""

    def __init__(self, s: Settings):
        self.s = s
        self._executor = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def executor(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=self.s.workers, mp_context=_forkserver(),
                                                 initializer=_init_worker,
                                                 initargs=(asdict(self.s), dict(os.environ), os.getcwd()))
        return self._executor

    def _replace(self) -> None:
        """After a worker died: wait for the broken pool's processes to end, then remove the sandboxes of the
        kernels they started (no grader holds them any more); the next job starts a new pool."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self.s.isolation == "uid":
            execute.remove_stale_sandboxes()

    def completed(self, name: str, jobs: list):
        """Run ``<name>(*job)`` (a function of this module) for every job; yield the results as they finish. A
        job runs in at most ``workers`` processes at once, so a dying worker takes only the jobs it was running
        (and the others in flight) with it."""
        function = globals()[name]
        waiting, running, suspects = list(jobs), {}, []
        while waiting or running or suspects:
            if suspects and not running:
                job = suspects.pop(0)
                try:
                    result = self.executor().submit(function, *job).result()
                except BrokenProcessPool:  # it died again, alone: this job is the cause
                    self._replace()
                    result = grader_failed(*job, reason=WORKER_DIED.format(times="twice, the second time alone"),
                                           s=self.s)
                yield result
                continue
            while waiting and not suspects and len(running) < self.s.workers:
                job = waiting.pop(0)
                running[self.executor().submit(function, *job)] = job
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            if any(isinstance(f.exception(), BrokenProcessPool) for f in done):
                done, _ = wait(running)  # every job of a broken pool ends at once, with a result or with it
            for future in done:
                job = running.pop(future)
                if isinstance(future.exception(), BrokenProcessPool):
                    suspects.append(job)
                else:
                    yield future.result()
            if suspects and not running:
                self._replace()


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
    if s.workers <= 1 and not s.scheduler:
        _init_worker(asdict(s))
        for student in students:
            done += len(grade_student(student, todo[student]))
            bar.update()
    else:
        with pool_for(s) if pool is None else contextlib.nullcontext(pool) as lent:
            for records in lent.completed("grade_student", [(student, todo[student]) for student in students]):
                done += len(records)
                bar.update()
    bar.close()
    return done

