"""Grade a whole class in one command.

    python -m autograder.grade SUBMISSIONS [--out DIR] [--db URL] [--workers N] [--lessons 01_warmup ...]
    make grade SUBMISSIONS=path

``SUBMISSIONS`` is a folder of per-student folders, a zip of one, or a course folder after ``nbgrader collect``
(``autograder/grading/intake.py`` lists the layouts). The command builds a grading course in ``DIR/course`` from the
lesson sources, copies every notebook into it (the originals are only read, and their hashes are checked at the end),
then runs the real ``nbgrader autograde`` and ``generate_feedback`` for each student, several students at a time
(``--workers``, default: one per core), and finally ``nbgrader export``. It leaves:

* ``DIR/grades.csv``: student, folder, each lesson's status, score, maximum, autograded and manual points, points
  awaiting the instructor; total, maximum, flags (for an LMS); ``DIR/student_ids.csv``: student id -> folder;
* ``DIR/feedback/<student>/<lesson>.html``: what each student receives;
* ``DIR/report.html``: every student's scores and flags, with the score distribution;
* ``DIR/nbgrader_export.csv``: nbgrader's own export of the gradebook.

Safety: kernels start through ``autograder.sandbox`` (as root: bubblewrap namespaces, a uid and a control group of
their own per notebook, no network, a file system of read-only binds), cells are stopped after ``--timeout``
seconds and notebooks after ``--notebook-timeout``, output is capped, a dead kernel costs only the cells it did not
run (``autograder/grading/execute.py``), and suspicious code is flagged for a human (``autograder/grading/scan.py``).

Checked first: before any student, the model answers of every lesson are graded through the same pipeline
(``autograder/grading/canary.py``); unless they earn full marks, no student is graded and the command exits with
``EXIT_CANARY`` and says what broke.

Nothing lost: each (student, lesson) is recorded in ``DIR/state/`` as soon as it is graded; running the command
again grades only what is new, changed or unfinished (a batch killed halfway resumes) and rebuilds the outputs.

No silent zeros: a failure of the grader rather than the learner (``autograder/grading/outcome.py``) leaves that
score empty, is listed first in the report, is retried on the next run, and makes the command exit with status 4.
Manual grades given in formgrader (``make formgrader``) are folded in on the next run, and every feedback page whose
grades changed since it was written is generated again (``autograder/grading/marks.py``).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import html
import json
import logging
import multiprocessing as mp
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autograder import course, sandbox
from autograder.grading import (canary, cgroups, dburl, execute, feedback_page, findings, intake, marks, outcome,
                                page_safety, scan)

COURSE_ID = "mha-course"  # nbgrader's course row: PostgreSQL enforces the foreign key SQLite ignores
EXIT_LAYOUT, EXIT_INTEGRITY, EXIT_GRADING_ERROR, EXIT_SETUP, EXIT_CANARY = 2, 3, 4, 5, 6
EXIT_HELP = """exit status:
  0  every notebook graded (written answers may still await manual grading: see the report)
  2  the submissions' layout was not understood, or a bad option (the message says what to do)
  3  the original submissions changed during grading
  4  grading errors: the grader failed on some notebooks (not the learners); their scores are left empty and
     listed first in report.html; fix the cause and run the command again, which grades only those
  5  this machine cannot grade safely as set up (e.g. root without bubblewrap); nothing was graded
  6  the canary failed: the lessons' own model answers did not earn full marks here, so no student was graded;
     the message says what broke and how to fix it"""


KERNEL_MODULES = ("__init__.py", "hidden_cell.py", "sandbox.py")


class SetupError(RuntimeError):
    """This machine cannot grade safely as set up; the message says what to install or change."""


@dataclass
class Settings:
    out: str
    lessons: list
    db_url: str = ""
    workers: int = 1
    timeout: int = 60
    memory_mb: int = 2048
    max_output: int = 1_000_000
    notebook_timeout: int = 300
    isolation: str = field(default_factory=sandbox.isolation_level)

    def __post_init__(self):
        self.db_url = normalize_db_url(self.db_url)

    @property
    def course_root(self) -> Path:
        return Path(self.out) / "course"

    @property
    def gradebook_url(self) -> str:
        return self.db_url or f"sqlite:///{self.course_root / 'gradebook.db'}"

    def key(self) -> str:
        """Changes whenever grades made under the old settings would no longer be valid."""
        parts = [json.dumps([self.lessons, dburl.without_password(self.gradebook_url), self.timeout, self.memory_mb,
                             self.max_output, self.notebook_timeout, self.isolation])]
        parts += [(course.SOLUTIONS / f"{name}.py").read_text(encoding="utf-8") for name in self.lessons]
        parts += [p.read_text(encoding="utf-8") for p in sorted((course.ROOT / "autograder" / "checks").glob("*.py"))]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def normalize_db_url(url: str) -> str:
    """``postgresql://`` means psycopg 3 to SQLAlchemy 2.1; use the psycopg2 driver we install when that is absent."""
    if url.startswith(("postgresql://", "postgres://")):
        import importlib.util

        if importlib.util.find_spec("psycopg") is None:
            return "postgresql+psycopg2://" + url.split("://", 1)[1]
    return url


# ---------------------------------------------------------------- the grading course

def _config_lines(s: Settings) -> str:
    lines = [
        "# Grading settings written by autograder/grade.py",
        "# the autograde pipeline itself is declared once, in autograder/nbgrader_config.py (loaded above)",
        f"c.Execute.timeout = {int(s.timeout)}",
        f"c.Execute.kernel_name = {sandbox.KERNEL_NAME!r}",
        "c.Execute.shutdown_kernel = 'immediate'  # every output is in; a graceful stop costs ~1 s per notebook",
        f"c.SafeExecute.max_output_bytes = {int(s.max_output) + 1000}",  # the kernel's own cap comes first
        f"c.SafeExecute.unresponsive_grace = {min(10, int(s.timeout))}",
        f"c.SafeExecute.isolation = {s.isolation!r}",
        f"c.SafeExecute.notebook_timeout = {int(s.notebook_timeout)}",
        "c.Autograde.create_student = False",
        f"c.CourseDirectory.course_id = {COURSE_ID!r}",
    ]
    if s.db_url:  # no password here: it comes from the environment when nbgrader loads this file
        lines += ["from autograder.grading.dburl import with_password",
                  f"c.CourseDirectory.db_url = with_password({dburl.without_password(s.db_url)!r})"]
    return "\n".join(lines) + "\n"


def _env(s: Settings) -> dict:
    env = course.nbgrader_env()
    env["JUPYTER_PATH"] = os.pathsep.join([str(Path(s.out) / "jupyter")] + [p for p in [env.get("JUPYTER_PATH")] if p])
    return env


def prepare_course(s: Settings, log) -> None:
    """Build (or reuse) DIR/course. Rebuilt, and every grade redone, when lessons, checks or settings change."""
    out = Path(s.out)
    marker = out / "course.json"
    key = s.key()
    if marker.exists() and json.loads(marker.read_text()).get("key") == key and \
            (s.course_root / "release").is_dir():
        return
    if marker.exists():
        log("lessons, hidden checks or settings changed since the last run: regrading everything")
        _keep_gradebook(s, log)
    shutil.rmtree(s.course_root, ignore_errors=True)
    shutil.rmtree(out / "state", ignore_errors=True)
    course.make_course(s.course_root, s.lessons, generate=False)
    config = s.course_root / "nbgrader_config.py"
    with config.open("a", encoding="utf-8") as fh:
        fh.write(_config_lines(s))
    os.chmod(config, 0o600)
    sandbox.install_kernelspec(out / "jupyter", memory_mb=s.memory_mb, max_output=s.max_output,
                               library=write_kernel_library(out / "kernel-library"), isolation=s.isolation)
    # build matplotlib's font cache once, as this user, so each sandboxed kernel can start from a copy of it
    subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=_env(s), capture_output=True)
    proc = course.nbgrader(["generate_assignment", "--force", "--log-level=WARN", "*"], s.course_root, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"nbgrader generate_assignment failed:\n{proc.stdout}\n{proc.stderr}")
    marker.write_text(json.dumps({"key": key, "lessons": s.lessons}) + "\n")


def _keep_gradebook(s: Settings, log) -> None:
    """Before a rebuild, keep the old SQLite gradebook (it may hold manual grades) beside the results."""
    old = s.course_root / "gradebook.db"
    if not s.db_url and old.exists():
        kept = Path(s.out) / "previous-gradebooks" / time.strftime("gradebook-%Y%m%d-%H%M%S.db")
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(old, kept)
        log(f"the previous gradebook (with any manual grades) is kept as {kept}")


def stage(s: Settings, roster: intake.Roster) -> dict:
    """Copy every gradable notebook into course/submitted; return {student: {lesson: flags}} still to grade.

    The flags (test cells edited, deleted or re-labelled; suspicious code) are read from the original. The copy
    gets the released nbgrader metadata back on every locked cell it still has: nbgrader would otherwise refuse the
    whole notebook ("inconsistent checksums") and the learner's honest work would score nothing; nbgrader then
    restores the cells' sources itself.
    """
    import nbformat

    todo = {}
    key = json.loads((Path(s.out) / "course.json").read_text())["key"]
    released = {lesson: nbformat.read(s.course_root / "release" / lesson / f"{lesson}.ipynb", as_version=4)
                for lesson in s.lessons}
    for student, entries in roster.entries.items():
        for lesson, entry in entries.items():
            dest = s.course_root / "submitted" / student / lesson / f"{lesson}.ipynb"
            if not entry.gradable:
                if dest.exists():
                    dest.unlink()
                continue
            digest = intake.file_hash(entry.path)
            state = _read_state(s, student, lesson)
            if state and state.get("graded") and state.get("hash") == digest and state.get("key") == key \
                    and dest.exists():  # done before; failed ones are tried again
                continue
            nb = nbformat.read(entry.path, as_version=4)
            flags = findings.structure_flags(nb, released[lesson])
            flags += ["suspicious code: " + f for f in scan.scan_notebook(nb)]
            course.write_notebook(findings.restore_locked_metadata(nb, released[lesson]), dest)
            stamp = entry.path.parent / "timestamp.txt"  # `nbgrader collect` keeps it: late penalties use it
            if stamp.is_file() and entry.path.parent.name == lesson:
                shutil.copyfile(stamp, dest.parent / "timestamp.txt")
            todo.setdefault(student, {})[lesson] = {"hash": digest, "flags": flags}
    return todo


def _state_path(s: Settings, student: str, lesson: str) -> Path:
    folder = canary.folder(s.out) if canary.is_canary(student) else Path(s.out) / "state"
    return folder / student / f"{lesson}.json"


def _read_state(s: Settings, student: str, lesson: str):
    path = _state_path(s, student, lesson)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_state(s: Settings, student: str, lesson: str, record: dict) -> None:
    path = _state_path(s, student, lesson)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)  # atomic: a killed run leaves either the old record or the new one


def ensure_students(s: Settings, students) -> None:
    """Create every student in the gradebook before going parallel (first use of a database must not race)."""
    from nbgrader.api import Gradebook

    with Gradebook(s.gradebook_url, COURSE_ID) as gb:
        for student in students:
            gb.update_or_create_student(student)


def write_kernel_library(dest: Path) -> Path:
    """The only course modules a graded kernel can import, copied where the sandbox binds them read-only: what the
    hidden cells call (``autograder/hidden_cell.py``), the launcher's last step (``autograder/sandbox.py``) and the
    learner's helper module. No reference, hidden test or bug catalog: those stay with the grader. (Copies, made
    world-readable: the course itself may sit in a folder, or have files, that the sandbox uid cannot read.)"""
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "autograder").mkdir(parents=True)
    for module in KERNEL_MODULES:
        shutil.copyfile(course.ROOT / "autograder" / module, dest / "autograder" / module)
    for helper in course.HELPERS:
        shutil.copyfile(course.LESSONS / helper, dest / helper)
    for path in [dest, *dest.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return dest


# ---------------------------------------------------------------- worker side

_W: dict = {}


def _init_worker(settings: dict):
    s = Settings(**settings)
    os.environ.update(_env(s))
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
    result = _nbgrader_step(Autograde, student, lesson)
    flags += [e for e in dict.fromkeys(execute.sandbox_events)]
    previous = _read_state(s, student, lesson) or {}
    record = {"student": student, "lesson": lesson, "hash": task["hash"],
              "key": json.loads((Path(s.out) / "course.json").read_text())["key"], "graded": False,
              "status": outcome.GRADING_ERROR, "score": None, "max_score": None, "flags": flags, "seconds": 0.0,
              "graded_answers": previous.get("graded_answers", {})}
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
        with Gradebook(s.gradebook_url, COURSE_ID) as gb:
            record["flags"] += marks.review_regrade(gb, lesson, student, record["answers"],
                                                    previous.get("graded_answers", {}))
        _write_feedback(s, student, lesson, record, previous.get("graded_answers", {}))
    except Exception as exc:  # noqa: BLE001 - whatever broke, it is the grader's failure, never a score
        reason = str(exc) if isinstance(exc, outcome.GradingError) else f"{type(exc).__name__}: {exc}"
        record.update(graded=False, status=outcome.GRADING_ERROR, score=None, reason=reason[:500])
        (Path(s.out) / "feedback" / student / f"{lesson}.html").unlink(missing_ok=True)  # of an older notebook
    record["seconds"] = round(time.monotonic() - started, 2)
    _write_state(s, student, lesson, record)
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
    record = _read_state(s, student, lesson)
    _write_feedback(s, student, lesson, record, record.get("graded_answers", {}))
    record["refreshed"] = True
    _write_state(s, student, lesson, record)
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
                state = _read_state(s, student, lesson)
                if not state or not state.get("graded") or lesson in todo.get(student, {}):
                    continue
                try:
                    changed = marks.fingerprint(gb, lesson, student) != state.get("feedback_of")
                except MissingEntry:
                    continue
                if changed:
                    stale.setdefault(student, {})[lesson] = {"refresh": True}
    return stale


# ---------------------------------------------------------------- results

def lesson_maxima(s: Settings) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(s.gradebook_url, COURSE_ID) as gb:
        return {lesson: float(gb.find_assignment(lesson).max_score) for lesson in s.lessons}


def _lesson_result(gb, s: Settings, roster: intake.Roster, student: str, lesson: str, maximum: float):
    """(one lesson's marks and status, flags) of one student, from intake, the state record and the gradebook."""
    from nbgrader.api import MissingEntry

    entry = roster.entries[student][lesson]
    cell = {"status": outcome.NOT_YET, "score": None, "max": maximum, "auto": None, "manual": None, "pending": 0.0,
            "reason": ""}
    flags = []
    if entry.status != "ok":
        flags.append(f"{lesson}: {entry.status}: {entry.note}")
    if not entry.gradable:  # the learner's: no notebook, or not a notebook
        cell.update(status=entry.status, score=0.0, auto=0.0)
        return cell, flags
    state = _read_state(s, student, lesson)
    if state is None:
        flags.append(f"{lesson}: not graded yet (run the command again)")
        return cell, flags
    flags += [f"{lesson}: {flag}" for flag in state["flags"]]
    if not state.get("graded"):
        reason = state.get("reason") or "; ".join(state["flags"][:1]) or "unknown"
        cell.update(status=outcome.GRADING_ERROR, reason=reason)
        flags.insert(0, f"{lesson}: grading error (not the learner's; score left empty, retried next run): {reason}")
        return cell, flags
    try:
        got = marks.marks(gb, lesson, student)
    except MissingEntry:
        cell.update(status=outcome.GRADING_ERROR, reason="missing from the gradebook")
        flags.insert(0, f"{lesson}: grading error: missing from the gradebook")
        return cell, flags
    cell.update(score=got["score"], auto=got["auto"], manual=got["manual"] if got["manual_cells"] else None,
                pending=got["pending"], status=outcome.PENDING if got["pending"] else outcome.GRADED)
    if got["pending"]:
        flags.append(f"{lesson}: {_fmt(got['pending'])} points of written answers awaiting the instructor "
                     f"({', '.join(got['pending_cells'])}; grade them in formgrader, then run again)")
    return cell, flags


def results(s: Settings, roster: intake.Roster) -> list:
    """One row per student: marks read back from the gradebook, status and flags from intake and the state."""
    from nbgrader.api import Gradebook

    maxima = lesson_maxima(s)
    rows = []
    with Gradebook(s.gradebook_url, COURSE_ID) as gb:
        for student in roster.students:
            row = {"student": student, "folder": roster.folders.get(student, student), "lessons": {}, "flags": []}
            for lesson in s.lessons:
                row["lessons"][lesson], flags = _lesson_result(gb, s, roster, student, lesson, maxima[lesson])
                row["flags"] += flags
            scores = [c["score"] for c in row["lessons"].values()]
            row["total"] = None if None in scores else sum(scores)
            row["max_total"] = sum(maxima.values())
            row["pending"] = sum(c["pending"] for c in row["lessons"].values())
            rows.append(row)
    return rows


def grading_errors(rows: list) -> list:
    """(student, lesson, reason) of every grading error."""
    return [(r["student"], lesson, c["reason"]) for r in rows for lesson, c in r["lessons"].items()
            if c["status"] == outcome.GRADING_ERROR]


def _fmt(x) -> str:
    return "" if x is None else f"{x:g}"


def percent(row: dict):
    """Total over the points that are marked (pending written answers left out); None if a score is unknown."""
    marked = row["max_total"] - row["pending"]
    if row["total"] is None or marked <= 0:
        return None
    return 100 * row["total"] / marked


def write_csv(s: Settings, rows: list) -> Path:
    path = Path(s.out) / "grades.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        header = ["student", "folder"]
        for lesson in s.lessons:
            header += [f"{lesson} {col}" for col in ("status", "score", "max", "autograded", "manual", "pending")]
        writer.writerow(header + ["total", "max total", "pending", "percent", "flags"])
        for row in rows:
            cells = [row["student"], row["folder"]]
            for lesson in s.lessons:
                c = row["lessons"][lesson]
                cells += [c["status"], _fmt(c["score"]), _fmt(c["max"]), _fmt(c["auto"]), _fmt(c["manual"]),
                          _fmt(c["pending"])]
            pct = percent(row)
            writer.writerow(cells + [_fmt(row["total"]), _fmt(row["max_total"]), _fmt(row["pending"]),
                                     "" if pct is None else f"{pct:.1f}", " | ".join(row["flags"])])
    return path


def write_student_ids(s: Settings, roster: intake.Roster) -> Path:
    path = Path(s.out) / "student_ids.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", "folder"])
        for student in roster.students:
            writer.writerow([student, roster.folders.get(student, student)])
    return path


def distribution(rows: list) -> list:
    """Lines of a text histogram of total scores in 10% bands (of the marked points), with mean/median/min/max."""
    known = [p for p in map(percent, rows) if p is not None]
    unknown = len(rows) - len(known)
    if not known:
        return ["no student has a complete score" if rows else "no students"]
    bands = [0] * 10
    for p in known:
        bands[min(int(p // 10), 9)] += 1
    width = max(bands) or 1
    lines = [f"{10 * i:3d}-{10 * i + 10:3d}% | {'#' * round(30 * n / width):<30} {n}" for i, n in
             reversed(list(enumerate(bands)))]
    lines.append(f"mean {statistics.mean(known):.1f}%, median {statistics.median(known):.1f}%, "
                 f"min {min(known):.1f}%, max {max(known):.1f}%, {len(rows)} students, "
                 f"{sum(1 for r in rows if r['flags'])} flagged"
                 + (f", {unknown} left out (a grading error or a lesson not graded yet)" if unknown else ""))
    if any(r["pending"] for r in rows):
        lines.append("percentages leave out the written answers still awaiting the instructor")
    return lines


def _cell_text(c: dict) -> str:
    if c["status"] == outcome.GRADING_ERROR:
        return "grading error"
    if c["status"] == outcome.NOT_YET:
        return "not graded yet"
    text = f"{_fmt(c['score'])} / {_fmt(c['max'])}"
    if c["status"] in (outcome.MISSING, outcome.MALFORMED):
        return f"{text} ({c['status']})"
    if c["pending"]:
        return f"{text} ({_fmt(c['auto'])} autograded; {_fmt(c['pending'])} awaiting the instructor)"
    if c["manual"] is not None:
        return f"{text} ({_fmt(c['auto'])} autograded + {_fmt(c['manual'])} manual)"
    return text


def write_report(s: Settings, rows: list, notes: list) -> Path:
    esc = html.escape
    head = "".join(f"<th>{esc(lesson)}</th>" for lesson in s.lessons)
    body = []
    for r in rows:
        cells = []
        for lesson in s.lessons:
            c = r["lessons"][lesson]
            fb = Path(s.out) / "feedback" / r["student"] / f"{lesson}.html"
            text = esc(_cell_text(c))
            style = ' class="error"' if c["status"] == outcome.GRADING_ERROR else ""
            cells.append(f'<td{style}><a href="feedback/{esc(r["student"])}/{esc(lesson)}.html">{text}</a></td>'
                         if fb.exists() else f"<td{style}>{text}</td>")
        flags = "".join(f"<li>{esc(f)}</li>" for f in r["flags"])
        pct = percent(r)
        total = "unknown" if r["total"] is None else f"{_fmt(r['total'])} / {_fmt(r['max_total'])}"
        total += "" if pct is None else f" ({pct:.0f}%)"
        total += f"<br>{_fmt(r['pending'])} awaiting the instructor" if r["pending"] else ""
        name = esc(r["student"]) + ("" if r["folder"] == r["student"] else f"<br><small>{esc(r['folder'])}</small>")
        body.append(f"<tr><td>{name}</td>{''.join(cells)}<td>{total}</td><td><ul>{flags}</ul></td></tr>")
    errors = grading_errors(rows)
    error_block = ""
    if errors:
        items = "".join(f"<li>{esc(st)} {esc(le)}: {esc(why)}</li>" for st, le, why in errors)
        error_block = (f'<div class="error"><h2>{len(errors)} grading errors: the grader failed, not the learners'
                       "</h2><p>These scores are left empty (not 0). Fix the cause and run the command again: it "
                       f"grades only these.</p><ul>{items}</ul></div>")
    pending = sum(r["pending"] for r in rows)
    pending_note = (f"<p><b>Written answers awaiting the instructor:</b> {_fmt(pending)} points in all. Grade them "
                    "with <code>make formgrader OUT=...</code>, then run the grading command again: it folds the "
                    "manual scores in and regenerates those students' feedback.</p>" if pending else "")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Grading report</title>
<style>body{{font-family:sans-serif}} table{{border-collapse:collapse}} td,th{{border:1px solid #999;padding:4px;
vertical-align:top}} ul{{margin:0;padding-left:1.2em}} pre{{background:#f4f4f4;padding:8px}}
.error{{color:#b00000;border-color:#b00000}} div.error{{border:2px solid #b00000;padding:4px 12px}}</style></head><body>
<h1>Grading report</h1>
{error_block}
<p>{len(rows)} students, lessons: {esc(', '.join(s.lessons))}. Flags mark what a human should look at; a flagged
score is never higher than the work earns (hidden tests and nbgrader decide it).</p>
{pending_note}
{''.join(f'<p><b>{esc(n)}</b></p>' for n in notes)}
<h2>Score distribution (total)</h2><pre>{esc(chr(10).join(distribution(rows)))}</pre>
<h2>Students</h2><table><tr><th>student</th>{head}<th>total</th><th>flags</th></tr>
{''.join(body)}</table></body></html>
"""
    path = Path(s.out) / "report.html"
    path.write_text(page_safety.protect(page), encoding="utf-8")  # no script runs in it, whatever a name holds
    return path


# ---------------------------------------------------------------- the command

def run(submissions, s: Settings, *, progress=True, log=print) -> dict:
    """Grade everything; returns {"rows", "csv", "report", "graded", "integrity", "notes"}."""
    old_umask = os.umask(0o077)  # nothing in the workspace is readable by the sandbox uid or other users
    old_url = os.environ.get(dburl.ENV)
    try:
        return _run(submissions, s, progress=progress, log=log)
    finally:
        os.umask(old_umask)
        if old_url is None:  # the password set for this run's nbgrader steps does not outlive it
            os.environ.pop(dburl.ENV, None)
        else:
            os.environ[dburl.ENV] = old_url


def preflight(s: Settings) -> None:
    """As root, kernels must be isolated: refuse to grade without bubblewrap rather than run them as root."""
    if os.geteuid() == 0 and s.isolation != "uid":
        raise SetupError("grading as root needs bubblewrap to isolate each kernel (Debian/Ubuntu: "
                           "`apt-get install bubblewrap`); without it a notebook would run as root")


ISOLATION_NOTES = {
    "uid": "",
    "userns": ("Kernels ran in bubblewrap's namespaces as the user who ran this command (not root): no network, "
               "no other process or file of the machine, but no separate uid and no control group (memory in "
               "tmpfs and the CPU share are not bounded). Grade as root for the full sandbox."),
    "none": ("Kernels ran as the user who ran this command, without bubblewrap: they were limited (memory, "
             "time, output) but could read and write that user's files and reach the network; the originals' "
             "hashes were checked. Install bubblewrap, or grade as root, for the full sandbox."),
}


def _run(submissions, s: Settings, *, progress=True, log=print) -> dict:
    os.environ["PATH"] = course.nbgrader_env()["PATH"]  # nbgrader runs `alembic` from this venv
    if dburl.has_password(s.db_url):  # for the course's nbgrader_config.py, which holds no password
        os.environ[dburl.ENV] = s.db_url
    out = Path(s.out)
    out.mkdir(parents=True, exist_ok=True)
    original = Path(submissions)
    if original.exists() and (out.resolve() == original.resolve() or original.resolve() in out.resolve().parents):
        raise intake.LayoutError(f"the output folder {out} is inside the submissions {original}; put --out elsewhere")
    before = intake.tree_hashes(original)
    roster = intake.collect(original, s.lessons, out)
    preflight(s)
    if s.isolation == "uid":
        execute.remove_stale_sandboxes()  # of an earlier run that was killed
    prepare_course(s, log)
    checked = canary.check(s, log)  # raises CanaryFailed, before any student is touched
    todo = stage(s, roster)
    ensure_students(s, roster.students)
    graded = run_tasks(s, todo, progress=progress)
    refreshed = run_tasks(s, stale_feedback(s, roster, todo), progress=False)  # manual grades came in
    notes = []
    try:  # what `nbgrader export` runs, in this process (a subprocess costs seconds of start-up)
        from nbgrader.api import Gradebook
        from nbgrader.plugins.export import CsvExportPlugin

        with Gradebook(s.gradebook_url, COURSE_ID) as gb:
            CsvExportPlugin(to=str(out / "nbgrader_export.csv")).export(gb)
    except Exception as exc:  # noqa: BLE001 - the CSV and report below do not depend on it
        notes.append(f"nbgrader export failed: {type(exc).__name__}: {exc}")
    rows = results(s, roster)
    feedback_page.write_notices(out, roster)  # a missing or unreadable notebook still gets a page saying so
    if ISOLATION_NOTES[s.isolation]:
        notes.append(ISOLATION_NOTES[s.isolation])
    if s.isolation == "uid" and not cgroups.available():
        notes.append("No writable cgroup file system: each kernel's address space, processes and CPU time were "
                     "limited, but memory held in tmpfs files or IPC objects and its CPU share were not.")
    after = intake.tree_hashes(original)
    integrity = before == after
    if not integrity:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        notes.append("THE ORIGINAL SUBMISSIONS CHANGED DURING GRADING: " + ", ".join(changed[:20]))
    csv_path = write_csv(s, rows)
    write_student_ids(s, roster)
    report = write_report(s, rows, notes)
    return {"rows": rows, "csv": csv_path, "report": report, "graded": graded, "integrity": integrity,
            "notes": notes, "refreshed": refreshed, "errors": grading_errors(rows), "canary": checked}


def run_tasks(s: Settings, todo: dict, *, progress=True) -> int:
    """Grade {student: [lessons]} over ``s.workers`` processes; returns how many notebooks were graded."""
    from tqdm import tqdm

    if not todo:
        return 0
    students = sorted(todo)
    bar = tqdm(total=len(students), unit="student", desc="grading", disable=not progress, file=sys.stderr,
               dynamic_ncols=True)
    done = 0
    settings = asdict(s)
    if s.workers <= 1:
        _init_worker(settings)
        for student in students:
            done += len(grade_student(student, todo[student]))
            bar.update()
    else:
        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(s.workers, len(students)), mp_context=ctx,
                                 initializer=_init_worker, initargs=(settings,)) as pool:
            futures = {pool.submit(grade_student, student, todo[student]): student for student in students}
            for future in as_completed(futures):
                done += len(future.result())
                bar.update()
    bar.close()
    return done


def _resolve_lessons(requested) -> list:
    available = course.lesson_names()
    if not requested:
        return available
    chosen = []
    for name in requested:
        match = [lesson for lesson in available if lesson == name or lesson.split("_", 1)[0] == name]
        if not match:
            raise SystemExit(f"unknown lesson {name!r}; available: {', '.join(available)}")
        chosen += [m for m in match if m not in chosen]
    return chosen


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.grade", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=intake.LAYOUT_HELP.format(lessons="01_warmup") + "\n\n" + EXIT_HELP)
    parser.add_argument("submissions", help="folder of per-student folders, a zip of one, or a collected course")
    parser.add_argument("--out", default="grading", help="grading workspace and results (default: ./grading)")
    parser.add_argument("--db", default=os.environ.get(dburl.ENV, ""),
                        help=f"gradebook URL without a password, e.g. postgresql://grader@host/gradebook (default: "
                             f"${dburl.ENV}, else SQLite in OUT/course/gradebook.db); the password goes in "
                             f"PGPASSWORD or ~/.pgpass, or the whole URL in ${dburl.ENV}, never on the command line")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="students graded at once")
    parser.add_argument("--lessons", nargs="+", help="lessons to grade (names or numbers; default: all)")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per cell before it is stopped")
    parser.add_argument("--memory-mb", type=int, default=2048, help="address-space limit of each kernel")
    parser.add_argument("--max-output", type=int, default=1_000_000, help="bytes of output kept per cell")
    parser.add_argument("--notebook-timeout", type=int, default=300,
                        help="seconds a whole notebook may run before its kernel is stopped")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.db and args.db != os.environ.get(dburl.ENV) and dburl.has_password(args.db):
        print(f"error: --db holds a password, which other users can read in the process list and which stays in "
              f"your shell history; give --db {dburl.without_password(args.db)} and put the password in "
              f"PGPASSWORD or ~/.pgpass (or the whole URL in {dburl.ENV})", file=sys.stderr)
        return EXIT_LAYOUT
    s = Settings(out=str(Path(args.out).resolve()), lessons=_resolve_lessons(args.lessons), db_url=args.db,
                 workers=max(1, args.workers), timeout=args.timeout, memory_mb=args.memory_mb,
                 max_output=args.max_output, notebook_timeout=args.notebook_timeout)
    started = time.monotonic()
    try:
        result = run(args.submissions, s, progress=not args.quiet)
    except intake.LayoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_LAYOUT
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SETUP
    except canary.CanaryFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CANARY
    rows = result["rows"]
    print(f"graded {result['graded']} notebooks in {time.monotonic() - started:.1f} s "
          f"({s.workers} workers); {len(rows)} students; {result['canary'].summary()}")
    if result["refreshed"]:
        print(f"feedback regenerated for {result['refreshed']} notebooks whose grades changed (manual grading)")
    print("\n".join(distribution(rows)))
    for note in result["notes"]:
        print("note:", note)
    print(f"grades:   {result['csv']}\nreport:   {result['report']}\nfeedback: {Path(s.out) / 'feedback'}")
    if not result["integrity"]:
        return EXIT_INTEGRITY
    if result["errors"]:
        print(f"GRADING ERRORS: the grader failed on {len(result['errors'])} notebooks (not the learners); their "
              "scores are left empty. Fix the cause and run the command again; it grades only these:",
              file=sys.stderr)
        for student, lesson, reason in result["errors"]:
            print(f"  {student} {lesson}: {reason}", file=sys.stderr)
        return EXIT_GRADING_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
