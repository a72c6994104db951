"""The instructor's side of grading a large class, with no kernel: a rerun that grades nothing, each output, formgrader.

    python bench/instructor_scale.py                            # 100 and 300 students x 8 lessons (`make bench`)
    python bench/instructor_scale.py --students 100 300 1500    # the figures of docs/speed.md (about 3 minutes)
    python bench/instructor_scale.py --students 300 --keep /tmp/class300   # keep the class folder and OUT to look at

For each class size a term is built as the grading command leaves it after grading a download once, then timed.
No kernel ever starts: the rerun stops with an error, before anything is graded, if it finds anything to grade.

The term, ``--students`` learners x the first ``--lessons`` lessons of the course (8: 01 to 08, both lessons with
written answers among them):

* the download: Canvas's "Download Submissions" layout (flat files ``<name>_<user id>_<submission id>_<file>``), one
  folder holding every lesson, the largest download a rerun reads. A learner's notebook is the lesson's model
  answers with a line of their own (no two are the same bytes) or, for a sixth, the notebook as handed out;
* what the command keeps of it, made by the command's own intake (``class_folder.collect``, ``term.take_in``:
  ``OUT/handed-in/``, ``OUT/term.json``, ``OUT/students.json``) and course (``workspace.prepare_course``: nbgrader's
  generate_assignment records every lesson's cells in the gradebook); each graded copy in ``course/submitted/`` and
  ``course/autograded/`` is a link to the hand-in (no outputs);
* the gradebook through nbgrader's own API, in one session: a student row per learner and, per notebook, the
  submission ``Gradebook.add_submission`` makes (a grade per graded cell, a comment per answer cell) with the scores
  ``nbgrader autograde`` saves: a third of the notebooks perfect, a third with a catalogued bug of the lesson
  costing its tests, a sixth with one failed test no bug names, a sixth as handed out (0, "No response."). The
  written answers of lessons 05 and 08: half of the answered ones marked by the instructor, the rest awaiting a
  manual grade;
* each notebook's state record (``state.write``) as ``worker.grade_one`` writes it: the hand-in's hash and the
  settings' key, the hidden tests' items, the written answers and their hashes, work fingerprints like
  ``bench/similarity_speed.py``'s (2 % of the learners hand in another's work), the gradebook's fingerprint its
  feedback page was written from; a small feedback page per notebook; ``reported.json`` as that run left it
  (``insights.remember_reported``); a Canvas gradebook export in ``OUT/lms-templates/``.

Timed: (1) ``grade.run`` on the same download, as ``make grade`` calls it, and each of its steps (``time.perf_counter``
around the functions): ``grades.csv``, ``report.html``, the insights, the similarity page and the Canvas import file
among them; (2) Moodle's import files (``lms_export.write`` alone), from that run's rows with a participant id per
lesson and a grading worksheet per lesson; (3) formgrader, served as ``make formgrader`` serves it (a Jupyter
server in ``OUT/course``), through the HTTP calls its pages make, each the median of three. The table gives seconds
at each size and the time per student at the largest class over the smallest (1.00: linear growth). Targets at
1,500 students: the rerun under 30 s, every formgrader call under 2 s. Each size runs in a process of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import http.client
import json
import os
import random
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autograder import bugs, course  # noqa: E402
from autograder.checks import verdict  # noqa: E402
from autograder.course import answers, notebooks  # noqa: E402
from autograder.grading.records import items, marks, outcome, state  # noqa: E402
from autograder.grading.records.settings import Settings  # noqa: E402

KINDS = ("perfect", "perfect", "bug", "bug", "unnamed", "untouched")
MARKER = "bench-learner-marker-0000000000"  # replaced by each learner's own line
TARGET_RERUN, TARGET_PAGE = 30.0, 2.0
COPIES = 0.02
WORDS = ("the", "head", "token", "reshape", "axis", "weights", "sum", "query", "key", "value", "scale", "mask",
         "rotation", "position", "relative", "angle", "dot", "product")


# ------------------------------------------------------------------------------------------------ building the term

def _canvas_name(i: int, lesson_index: int, lesson: str) -> tuple:
    """(file name in Canvas's download, student id the command gives it, Canvas user id)."""
    name, uid = f"learner{i:05d}", 100000 + i
    return f"{name}_{uid}_{500000 + 10 * i + lesson_index}_{lesson}.ipynb", f"{name}_{uid}", str(uid)


def _notebook_texts(lesson: str) -> tuple:
    """(the model answers' text with ``MARKER`` in an answer cell, the text of the notebook as handed out)."""
    nb = answers.fill(lesson)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            cell.source = cell.source.rstrip("\n") + f"\n# {MARKER}\n"
            break
    return notebooks.notebook_text(nb), notebooks.notebook_text(answers.fill(lesson, complete=False))


def write_download(root: Path, n: int, lessons: list) -> None:
    root.mkdir(parents=True)
    for k, lesson in enumerate(lessons):
        done, untouched = _notebook_texts(lesson)
        for i in range(n):
            name, sid, _ = _canvas_name(i, k, lesson)
            kind = KINDS[(i + k) % len(KINDS)]
            text = untouched if kind == "untouched" else done.replace(MARKER, f"handed in by {sid}")
            (root / name).write_text(text, encoding="utf-8")


@dataclasses.dataclass
class Cells:
    """One lesson's cells as the gradebook holds them."""

    notebook_id: str
    assignment_id: str
    tests: list  # [(cell id, grade_id, points)] of the autograded cells (the 0-point setup cell included)
    written: list  # [(cell id, grade_id, points)] of the written answers (graded answer cells)
    comments: list  # [(cell id, grade_id)] of every answer cell


def lesson_cells(gb, lesson: str) -> Cells:
    nb = gb.find_notebook(lesson, lesson)
    answer_ids = {c.name for c in nb.solution_cells}
    graded = [(c.id, c.name, float(c.max_score)) for c in sorted(nb.grade_cells, key=lambda c: c.name)]
    return Cells(nb.id, nb.assignment.id, [g for g in graded if g[1] not in answer_ids],
                 [g for g in graded if g[1] in answer_ids],
                 [(c.id, c.name) for c in sorted(nb.solution_cells, key=lambda c: c.name)])


def _grade(name, auto, manual, needs, points) -> SimpleNamespace:
    """A grade as ``marks.tally`` and ``marks.fingerprint_of`` read it from the gradebook (``Grade.score``: the manual
    score, else the automatic one)."""
    score = manual if manual is not None else auto if auto is not None else 0.0
    return SimpleNamespace(name=name, auto_score=auto, manual_score=manual, extra_credit=None,
                           needs_manual_grade=needs, max_score=points, score=score)


def _written_text(rng) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(60))


def _one(rng, i: int, k: int, lesson: str, cells: Cells, lesson_bugs: list, prints: dict, works: dict):
    """(grade rows, comment rows, record fields) of learner ``i``'s notebook of ``lesson``."""
    import insights_speed
    import similarity_speed

    kind = KINDS[(i + k) % len(KINDS)]
    tests = [t for t in cells.tests if t[2] > 0]
    bug = rng.choice(lesson_bugs) if kind == "bug" and lesson_bugs else None
    unnamed = rng.choice(tests)[1] if kind == "unnamed" or (kind == "bug" and bug is None) else None
    found, grades = {}, []
    for cell_id, gid, points in cells.tests:
        if not points:
            grades.append((cell_id, _grade(gid, 0.0, None, False, points)))
            continue
        result = insights_speed.result_of(kind, gid, bug, unnamed)
        score = points if result == verdict.PASSED else 0.0
        grades.append((cell_id, _grade(gid, score, None, False, points)))
        found[gid] = state.Item(score=score, max=points, result=result,
                                bug=bug.id if result == verdict.BUG else None,
                                failure=items.FAILURE_OF[verdict.UNNAMED] if result == verdict.UNNAMED else None,
                                signature=f"{rng.randrange(50):016x}" if result == verdict.UNNAMED else None)
    marked = i % 2 == 0  # the instructor marked half of the answered written answers so far
    texts = {gid: (_written_text(rng) if kind != "untouched" else "YOUR ANSWER HERE") for _, gid, _ in cells.written}
    written, graded_answers = {}, {}
    for cell_id, gid, points in cells.written:
        if kind == "untouched":  # the stub, unchanged: nbgrader's autograde gives it 0 and needs no manual grade
            grades.append((cell_id, _grade(gid, 0.0, None, False, points)))
        elif marked:
            grades.append((cell_id, _grade(gid, None, float(rng.randint(0, int(points))), False, points)))
            graded_answers[gid] = marks.answer_hash(texts[gid])
        else:
            grades.append((cell_id, _grade(gid, None, None, True, points)))
        written[gid] = state.Written(max=points, answered=kind != "untouched")
    comments = [SimpleNamespace(name=gid, auto_comment="No response." if kind == "untouched" else None,
                                manual_comment=None) for _, gid in cells.comments]
    if kind == "untouched":
        work = {"code": {}, "prints": {}, "answers": {}}
    elif works and rng.random() < COPIES:
        work = works[rng.choice(sorted(works))]  # another's work, handed in as their own
    else:
        work = similarity_speed._work(rng, lesson, prints)
        work["answers"] = {gid: texts[gid] for _, gid, _ in cells.written}
    if kind != "untouched":
        works[i] = work
    got = marks.tally([g for _, g in grades])
    record = {"status": outcome.PENDING if got["pending"] else outcome.GRADED, "score": got["score"],
              "max_score": got["max"], "items": found, "written": written, "attempted": kind != "untouched",
              "answers": {gid: marks.answer_hash(texts[gid]) for _, gid, _ in cells.written},
              "graded_answers": graded_answers, "work": work,
              "feedback_of": marks.fingerprint_of([g for _, g in grades], comments)}
    return grades, list(zip([c for c, _ in cells.comments], comments)), record


def _canvas_export(path: Path, lessons: list, maxima: dict, n: int) -> None:
    """Canvas's gradebook export (Grades > Export) of the class: every assignment column empty."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                         *[f"{lesson} ({7000 + k})" for k, lesson in enumerate(lessons)], "Current Score",
                         "Final Score"])
        writer.writerow(["    Points Possible", "", "", "", "", *[f"{maxima[le]:g}" for le in lessons],
                         "(read only)", "(read only)"])
        for i in range(n):
            _, sid, uid = _canvas_name(i, 0, lessons[0])
            writer.writerow([f"Learner {i:05d}", uid, sid, sid, "Section 1", *[""] * len(lessons), "", ""])


def build(base: Path, n: int, lessons: list, log) -> tuple:
    """The download and OUT of a class of ``n`` graded once; returns (download, OUT, seconds of each part)."""
    from nbgrader.api import Comment, Grade, Student, SubmittedAssignment, SubmittedNotebook, new_uuid
    from sqlalchemy import insert

    from autograder.grading.intake import class_folder, student_ids
    from autograder.grading.records import gradebook
    from autograder.grading.reports import insights, results
    from autograder.grading.run import term, workspace
    from autograder.grading.similarity import code_prints

    parts = {}
    download, out = base / "download", (base / "out").resolve()
    started = time.perf_counter()
    write_download(download, n, lessons)
    parts["download written"] = time.perf_counter() - started
    s = Settings(out=str(out), lessons=lessons)
    os.environ["PATH"] = notebooks.nbgrader_env()["PATH"]
    old_umask = os.umask(0o077)
    try:
        started = time.perf_counter()
        out.mkdir(parents=True)
        roster = class_folder.collect(download, lessons, out, known={}, limits=s.notebook_limits, earlier={})
        roster.keep_lessons(lessons)
        student_ids.remember(out, roster)
        now = term.load(out)
        term.take_in(out, now, roster, lessons, s.notebook_limits)
        term.save(out, now)
        whole = term.roster(out, now, roster)
        parts["intake (the first run's)"] = time.perf_counter() - started
        started = time.perf_counter()
        workspace.prepare_course(s, lambda *_: None)
        parts["course (prepare_course)"] = time.perf_counter() - started
        started = time.perf_counter()
        rng = random.Random(n)
        sids = [_canvas_name(i, 0, lessons[0])[1] for i in range(n)]
        assert sids == whole.students, "the command read the download as other students than the bench wrote"
        with gradebook.opened(s) as gb:
            gb.db.execute(insert(Student), [{"id": sid} for sid in sids])
            maxima = {}
            for k, lesson in enumerate(lessons):
                cells = lesson_cells(gb, lesson)
                maxima[lesson] = sum(p for _, _, p in cells.tests + cells.written)
                names = {gid for _, gid, _ in cells.tests}
                lesson_bugs = [b for b in bugs.CATALOG if b.lesson == lesson and b.tests and set(b.tests) <= names]
                prints = {gid: code_prints.prints(src) for gid, src in answers.model_answers(lesson).items()}
                subs, nbs, grade_rows, comment_rows, works = [], [], [], [], {}
                for i, sid in enumerate(sids):
                    sub_id, nb_id = new_uuid(), new_uuid()
                    subs.append({"id": sub_id, "assignment_id": cells.assignment_id, "student_id": sid})
                    nbs.append({"id": nb_id, "assignment_id": sub_id, "notebook_id": cells.notebook_id,
                                "flagged": False})
                    grades, comments, fields = _one(rng, i, k, lesson, cells, lesson_bugs, prints, works)
                    grade_rows += [{"id": new_uuid(), "notebook_id": nb_id, "cell_id": cell_id,
                                    "auto_score": g.auto_score, "manual_score": g.manual_score,
                                    "extra_credit": None, "needs_manual_grade": g.needs_manual_grade}
                                   for cell_id, g in grades]
                    comment_rows += [{"id": new_uuid(), "notebook_id": nb_id, "cell_id": cell_id,
                                      "auto_comment": c.auto_comment, "manual_comment": None}
                                     for cell_id, c in comments]
                    kept = now.entries[sid][lesson]
                    state.write(s, state.Record(sid, lesson, hash=kept["hash"], key=s.key,
                                                by=whole.entries[sid][lesson].by, graded=True, seconds=2.0,
                                                **fields))
                    page = out / "feedback" / sid / f"{lesson}.html"
                    page.parent.mkdir(parents=True, exist_ok=True)
                    page.write_text(f"<html><head></head><body>{lesson}: feedback of {sid}</body></html>")
                    handed = out / "handed-in" / sid / f"{lesson}.ipynb"
                    for folder in ("submitted", "autograded"):
                        graded = s.course_root / folder / sid / lesson / f"{lesson}.ipynb"
                        graded.parent.mkdir(parents=True, exist_ok=True)
                        os.link(handed, graded)
                for model, rows in ((SubmittedAssignment, subs), (SubmittedNotebook, nbs), (Grade, grade_rows),
                                    (Comment, comment_rows)):
                    gb.db.execute(insert(model), rows)
                gb.db.commit()
        parts["gradebook, records, pages"] = time.perf_counter() - started
        started = time.perf_counter()
        s = dataclasses.replace(s, lessons=now.lessons)
        insights.remember_reported(s, results.read_rows(s, whole))  # what the first run's outputs said
        _canvas_export(out / "lms-templates" / "canvas-gradebook.csv", lessons, maxima, n)
        parts["reported.json, Canvas export"] = time.perf_counter() - started
    finally:
        os.umask(old_umask)
    log(f"  built {n} students x {len(lessons)} lessons: " + ", ".join(f"{k} {v:.1f} s" for k, v in parts.items()))
    return download, out, parts


# ------------------------------------------------------------------------------------------------ the rerun, timed

class NothingToGrade(AssertionError):
    """The rerun found something to grade: the synthetic term is not what the command would have left."""


# (module, function, label): the steps of ``grade.run`` timed on their own, in the order it calls them
STEPS = [
    ("autograder.grading.records.dbcheck", "check", "gradebook and OUT checked (dbcheck.check)"),
    ("autograder.grading.run.term", "load", "term.json and hand-in records read (term.load)"),
    ("autograder.grading.intake.class_folder", "collect", "download read (class_folder.collect)"),
    ("autograder.grading.intake.student_ids", "remember", "students.json (student_ids.remember)"),
    ("autograder.grading.run.term", "take_in", "hand-ins taken in (term.take_in)"),
    ("autograder.grading.run.term", "save", "term.json written (term.save)"),
    ("autograder.grading.run.term", "roster", "term's roster (term.roster)"),
    ("autograder.grading.reports.insights", "reported", "last run's scores read (insights.reported)"),
    ("autograder.grading.run.workspace", "prepare_course", "course checked (workspace.prepare_course)"),
    ("autograder.grading.run.workspace", "stage", "what to grade (workspace.stage)"),
    ("autograder.grading.run.worker", "stale_feedback", "marks since the pages (worker.stale_feedback)"),
    ("autograder.grading.run.workspace", "ensure_students", "students in the gradebook (ensure_students)"),
    ("autograder.grading.reports.report", "write_nbgrader_export", "nbgrader_export.csv"),
    ("autograder.grading.reports.results", "read_rows", "grades read back (results.read_rows)"),
    ("autograder.grading.run.feedback_files", "write_notices", "notice pages (feedback_files.write_notices)"),
    ("autograder.grading.intake.integrity", "tree_hashes", "download hashed twice (integrity.tree_hashes)"),
    ("autograder.grading.reports.report", "write_csv", "grades.csv (report.write_csv)"),
    ("autograder.grading.reports.report", "write_student_ids", "student_ids.csv"),
    ("autograder.grading.reports.lms_export", "write", "Canvas import file (lms_export.write)"),
    ("autograder.grading.reports.insights", "changes", "what changed (insights.changes)"),
    ("autograder.grading.reports.insights", "write", "insights.html, misconceptions.csv (insights.write)"),
    ("autograder.grading.reports.similarity_page", "write", "similarity.html, .csv (similarity_page.write)"),
    ("autograder.grading.reports.report", "write_report", "report.html (report.write_report)"),
    ("autograder.grading.reports.insights", "remember_reported", "reported.json (remember_reported)"),
]


@contextlib.contextmanager
def timed_steps(seconds: dict):
    """Time each function of ``STEPS`` (summed over its calls) while the block runs, and refuse any grading: the
    rerun stops with ``NothingToGrade`` if ``stage`` or ``stale_feedback`` finds a notebook to grade or a page to
    make again (before the canary or any kernel could start)."""
    import importlib

    saved = []

    def wrap(module, name, label, check=None):
        original = getattr(module, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                result = original(*args, **kwargs)
            finally:
                seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - started
            if check is not None:
                check(result)
            return result

        saved.append((module, name, original))
        setattr(module, name, timed)

    def nothing(what):
        def check(found):
            if found:
                first = [f"{st} {le}" for st, lessons in list(found.items())[:3] for le in lessons]
                raise NothingToGrade(f"the rerun would {what} {sum(len(v) for v in found.values())} notebooks "
                                     f"(e.g. {', '.join(first)}): the synthetic term is not what the command leaves")
        return check

    for module_name, name, label in STEPS:
        check = {"stage": nothing("grade"), "stale_feedback": nothing("refresh the feedback of")}.get(name)
        wrap(importlib.import_module(module_name), name, label, check)
    try:
        yield
    finally:
        for module, name, original in reversed(saved):
            setattr(module, name, original)


def rerun(download: Path, out: Path) -> tuple:
    """``grade.run`` as ``make grade SUBMISSIONS=download OUT=out`` calls it; (seconds, {step: seconds}, result)."""
    from autograder import grade

    s = Settings(out=str(out), lessons=course.lesson_names(), class_decides_lessons=True,
                 workers=os.cpu_count() or 1)
    if json.loads((out / "course.json").read_text())["key"] != s.key:
        raise NothingToGrade("a file grading runs was edited while the class was built (Settings.key changed): the "
                             "rerun would grade every notebook again; run the bench again")
    seconds: dict = {}
    with timed_steps(seconds):
        started = time.perf_counter()
        result = grade.run(download, s, progress=False, log=lambda *_: None)
        total = time.perf_counter() - started
    if result["graded"] or result["refreshed"] or result["changed"] or result["errors"]:
        raise NothingToGrade(f"the rerun graded {result['graded']}, refreshed {result['refreshed']} and changed "
                             f"{len(result['changed'])} notebooks, with {len(result['errors'])} grading errors")
    return total, seconds, result


def moodle(base: Path, out: Path, rows: list, lessons: list) -> float:
    """``lms_export.write`` of Moodle's import files alone: the rows with a participant id per lesson (Moodle's ids
    belong to one assignment), a grading worksheet per lesson in ``lms-templates/``."""
    import copy
    import csv

    from autograder.grading.reports import lms_export

    folder = base / "moodle-out"
    rows = copy.deepcopy(rows)
    for i, row in enumerate(rows):
        for k, lesson in enumerate(lessons):
            row["lessons"][lesson]["lms_id"] = str((k + 1) * 1_000_000 + i)
    for k, lesson in enumerate(lessons):
        path = folder / "lms-templates" / f"grading-worksheet-{lesson}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        maximum = rows[0]["lessons"][lesson]["max"]
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum grade",
                             "Grade can be changed", "Last modified (submission)", "Last modified (grade)",
                             "Feedback comments"])
            for i, row in enumerate(rows):
                writer.writerow([f"Participant {(k + 1) * 1_000_000 + i}", row["folder"], "", "Submitted for grading",
                                 "", f"{maximum:.2f}", "Yes", "Monday, 5 October 2026, 10:00 AM", "-", ""])
    s = Settings(out=str(folder), lessons=lessons)
    started = time.perf_counter()
    notes = lms_export.write(s, rows)
    seconds = time.perf_counter() - started
    written = sorted(p.name for p in (folder / lms_export.FOLDER).glob("moodle-*.csv"))
    if len(written) != len(lessons):
        raise AssertionError(f"Moodle's files were not all written: {written}; {notes}")
    return seconds


# ------------------------------------------------------------------------------------------------ formgrader

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Formgrader:
    """nbgrader's formgrader as ``make formgrader`` serves it: a Jupyter server started in ``OUT/course`` (the course's
    nbgrader_config.py), with Jupyter's folders of its own under ``home``."""

    def __init__(self, course_root: Path, home: Path):
        self.port, self.token = _free_port(), secrets.token_hex(16)
        env = notebooks.nbgrader_env()
        for var, sub in {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data", "JUPYTER_RUNTIME_DIR": "runtime",
                         "IPYTHONDIR": "ipython"}.items():
            (home / sub).mkdir(parents=True, exist_ok=True)
            env[var] = str(home / sub)
        for var in ("MPLBACKEND", "JUPYTER_PATH"):
            env.pop(var, None)
        cmd = [sys.executable, "-m", "jupyter_server", "--ServerApp.root_dir=.", "--no-browser", "--ip=127.0.0.1",
               f"--port={self.port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        self.log = open(home / "server.log", "wb")
        self.proc = subprocess.Popen(cmd, cwd=course_root, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while True:
            try:
                if self.get("/api/status")[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Jupyter server did not start:\n{(home / 'server.log').read_text()[-3000:]}")
            time.sleep(0.3)

    def get(self, path: str, method: str = "GET", body=None) -> tuple:
        """(status, body) of one request; a redirect is not followed (``next`` answers with one)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        try:
            headers = {"Authorization": f"token {self.token}"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def timed(self, path: str, method: str = "GET", body=None, repeat: int = 3, ok=(200,)) -> float:
        """The median seconds of ``repeat`` calls."""
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            status, data = self.get(path, method, body)
            times.append(time.perf_counter() - started)
            if status not in ok:
                raise RuntimeError(f"{method} {path}: HTTP {status}: {data[:300]!r}")
        return statistics.median(times)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


FORMGRADER_LESSON = "05_exercises"  # the lesson with the most written answers


def formgrader_times(out: Path, home: Path, students: list, lessons: list) -> dict:
    """{call: median seconds} of the HTTP calls formgrader's pages make, on lesson 05's submissions (else the last
    lesson's)."""
    lesson = FORMGRADER_LESSON if FORMGRADER_LESSON in lessons else lessons[-1]
    server = Formgrader(out / "course", home)
    try:
        server.timed("/formgrader/api/assignments", repeat=1)  # the server's gradebook and config, made once
        found = {}
        listed = json.loads(server.get(f"/formgrader/api/submitted_notebooks/{lesson}/{lesson}")[1])
        if len(listed) != len(students):
            raise AssertionError(f"formgrader lists {len(listed)} submissions of {lesson}, not {len(students)}")
        waiting = [x for x in listed if x["needs_manual_grade"]]
        one = sorted(waiting or listed, key=lambda x: x["index"])[len(waiting or listed) // 2]
        sid, student = one["id"], one["student"]
        grades = json.loads(server.get(f"/formgrader/api/grades?submission_id={sid}")[1])
        answer = next(g for g in grades if g["needs_manual_grade"] or g["cell_type"] == "markdown")
        calls = [
            ("Manage Assignments, Gradebook: /formgrader/api/assignments", "/formgrader/api/assignments"),
            (f"Manage Submissions: /formgrader/api/submissions/{lesson}", f"/formgrader/api/submissions/{lesson}"),
            (f"Gradebook, a lesson: /formgrader/api/notebooks/{lesson}", f"/formgrader/api/notebooks/{lesson}"),
            ("Gradebook, its notebook (Manual Grading): /formgrader/api/submitted_notebooks/<lesson>/<notebook>",
             f"/formgrader/api/submitted_notebooks/{lesson}/{lesson}"),
            ("Manage Students: /formgrader/api/students", "/formgrader/api/students"),
            ("a student: /formgrader/api/student_submissions/<student>",
             f"/formgrader/api/student_submissions/{urllib.parse.quote(student)}"),
            ("a student's lesson: /formgrader/api/student_notebook_submissions/<student>/<lesson>",
             f"/formgrader/api/student_notebook_submissions/{urllib.parse.quote(student)}/{lesson}"),
            ("a submission's page: /formgrader/submissions/<id>/", f"/formgrader/submissions/{sid}/"),
            ("  its grades: /formgrader/api/grades?submission_id=<id>", f"/formgrader/api/grades?submission_id={sid}"),
            ("  its comments: /formgrader/api/comments?submission_id=<id>",
             f"/formgrader/api/comments?submission_id={sid}"),
        ]
        for label, path in calls:
            found[label] = server.timed(path)
        found["Next: /formgrader/submissions/<id>/next (a redirect)"] = server.timed(
            f"/formgrader/submissions/{sid}/next?index={one['index']}", ok=(302,))
        found["a score saved: PUT /formgrader/api/grade/<grade id>"] = server.timed(
            f"/formgrader/api/grade/{answer['id']}", method="PUT",
            body={"manual_score": 1.0, "extra_credit": 0.0}, ok=(200,))
        server.get(f"/formgrader/api/grade/{answer['id']}", method="PUT",  # as it was: the class stays as built
                   body={"manual_score": answer["manual_score"], "extra_credit": answer["extra_credit"]})
        return found
    finally:
        server.stop()


# ------------------------------------------------------------------------------------------------ one size

def measure(n: int, lessons: list, keep: Path | None, with_formgrader: bool) -> dict:
    base = Path(tempfile.mkdtemp(prefix=f"instructor-scale-{n}-", dir=keep))
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731 - progress, apart from the JSON
    try:
        download, out, parts = build(base, n, lessons, log)
        load = os.getloadavg()[0]
        total, steps, result = rerun(download, out)
        log(f"  rerun, grading nothing: {total:.1f} s")
        figures = {"rerun that grades nothing (grade.run, all of it)": total}
        figures.update({f"  {label}": steps.get(label, 0.0) for _, _, label in STEPS})
        figures["  the rest of grade.run"] = total - sum(steps.values())
        figures[f"Moodle import files, alone (lms_export.write, {len(lessons)} worksheets)"] = moodle(
            base, out, result["rows"], lessons)
        if with_formgrader:
            fg = formgrader_times(out, base / "jupyter-home", [r["student"] for r in result["rows"]], lessons)
            figures.update({f"formgrader: {k}": v for k, v in fg.items()})
            log(f"  formgrader: slowest call {max(fg.values()):.2f} s")
        return {"n": n, "figures": figures, "build": parts, "load": load, "load_after": os.getloadavg()[0]}
    finally:
        if keep is None:
            shutil.rmtree(base, ignore_errors=True)
        else:
            log(f"  kept: {base}")


# ------------------------------------------------------------------------------------------------ the table

SMALL = 0.05  # seconds: a figure this small at the smallest class is mostly fixed cost, and its ratio says nothing


def table(results: list) -> list:
    """The figures, one line per item: seconds at each class size, and the time per student at the largest class
    over the smallest (left out where the smallest figure is under ``SMALL``)."""
    sizes = [r["n"] for r in results]
    width = max(len(item) for item in results[0]["figures"]) + 2
    head = f"{'item':<{width}}" + "".join(f"{f'{n} st.':>10}" for n in sizes)
    if len(sizes) > 1:
        head += f"{'ratio':>8}"
    lines = [head]
    for item in results[0]["figures"]:
        values = [r["figures"].get(item) for r in results]
        line = f"{item:<{width}}" + "".join(f"{v:>8.2f} s" if v is not None else f"{'':>10}" for v in values)
        if len(sizes) > 1 and values[0] is not None and values[-1] is not None:
            line += f"{(values[-1] / sizes[-1]) / (values[0] / sizes[0]):>8.2f}" if values[0] >= SMALL else \
                f"{'-':>8}"
        lines.append(line)
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, nargs="+", default=[100, 300])
    parser.add_argument("--lessons", type=int, default=8, help="the first N lessons of the course (default 8)")
    parser.add_argument("--no-formgrader", action="store_true", help="leave formgrader's calls out")
    parser.add_argument("--keep", type=Path, help="build each class in a folder under this one and keep it")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, in this process: JSON on stdout
    args = parser.parse_args(argv)
    lessons = course.lesson_names()[:args.lessons]
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    if args.one:
        print(json.dumps(measure(args.one, lessons, args.keep, not args.no_formgrader)))
        return 0
    print(f"the instructor's side, no kernel: {len(lessons)} lessons ({lessons[0]} to {lessons[-1]}), "
          f"{os.cpu_count()} cores; each size built, then timed in a process of its own", flush=True)
    results = []
    for n in args.students:
        cmd = [sys.executable, __file__, "--one", str(n), "--lessons", str(args.lessons)]
        cmd += ["--no-formgrader"] if args.no_formgrader else []
        cmd += ["--keep", str(args.keep)] if args.keep else []
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=notebooks.nbgrader_env())
        if proc.returncode != 0:
            print(f"error: the class of {n} students failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print("\n".join(table(results)))
    print("load average while timed: " + ", ".join(f"{r['n']} students {r['load']:.1f}-{r['load_after']:.1f}"
                                                   for r in results))
    print(f"ratio: time per student at {results[-1]['n']} students over {results[0]['n']} (1.00: linear growth; a "
          f"list of the class grows linearly, one page of one student or submission should not grow at all; - where "
          f"the smallest figure is under {SMALL} s)")
    last = results[-1]
    rerun_s = last["figures"]["rerun that grades nothing (grade.run, all of it)"]
    pages = {k: v for k, v in last["figures"].items() if k.startswith("formgrader: ")}
    print(f"at {last['n']} students: the rerun {rerun_s:.1f} s (target at 1,500: under {TARGET_RERUN:.0f} s)"
          + (f"; slowest formgrader call {max(pages.values()):.2f} s (target at 1,500: under {TARGET_PAGE:.0f} s)"
             if pages else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
