"""The canary: before grading anyone, grade the model answers of every lesson and refuse to go on unless they earn
full marks.

A grading environment can break in ways that look, from the grades alone, like a class of weak learners: kernels
that cannot import the course, a sandbox that cannot start a kernel, a machine too slow for ``--timeout``, hidden
checks that disagree with the model answers. The canary puts one completed notebook per lesson (the lesson's
student notebook with every answer cell filled from ``solutions/``, ``answers.fill``) through exactly the
pipeline the students go through: ``pool.run_tasks`` and ``Worker.grade_one``, in the same course folder and
gradebook, with the same kernelspec, sandbox uid, limits and preprocessors. Each lesson's canary is its own student
(``_canary-<lesson>``), so the lessons are graded in parallel over ``--workers``.

A lesson's pass is reused while nothing it depends on has changed (``fingerprint``: the lesson's model answer and
released notebook, the code that decides grades, the settings that reach nbgrader and the kernel, the kernel library
and kernelspec, Python's version and every installed package's); ``OUT/canary/passed.json`` keeps the fingerprint of each pass, and
the run says which lessons it reused. ``--fresh-canary`` (``Settings.reuse_canary = False``) grades them anyway.

The canary ids start with ``_``, which no real student id can (``student_ids.STUDENT_ID``). Their records live in
``OUT/canary/`` (never in ``OUT/state/``), and once checked they are removed from the gradebook and the course
folder, so they appear in no grade, report or export. A failing canary's graded notebook is kept as
``OUT/canary/<lesson>.ipynb`` for a human to read.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder import course
from autograder.course import answers
from autograder.grading.records import gradebook, outcome, state
from autograder.grading.records.settings import grade_deciding_sources
from autograder.grading.run import workspace
from autograder.grading.run import pool as pool_module

PASSED = "passed.json"  # in OUT/canary/: {lesson: fingerprint} of each pass
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_KERNEL_START = re.compile(r"kernel_info|Kernel didn't respond|Kernel died before|kernel start|start(ing)? the kernel"
                           r"|No such kernel|could not drop privileges|unshare|mount ", re.I)


class CanaryFailed(RuntimeError):
    """The model answers did not earn full marks; the message says what broke and how to fix it."""


@dataclass
class Checked:
    lessons: list  # the lessons whose model answers were graded: none when no notebook needed grading
    seconds: float
    reused: list = field(default_factory=list)  # the lessons whose earlier pass still holds (``fingerprint``)

    def summary(self) -> str:
        n, kept = len(self.lessons), len(self.reused)
        reused = (f"canary of {kept} lesson{'s' * (kept != 1)} reused: passed before with the same course, checks, "
                  "settings and packages")
        if not n:
            return reused if kept else "no canary needed: nothing to grade"
        passed = f"canary passed in {self.seconds:.1f} s (model answers of {n} lesson{'s' * (n != 1)}: full marks)"
        return passed + (f"; {reused}" if kept else "")


def fingerprint(s, lesson: str) -> str:
    """Changes whenever a pass of ``lesson``'s canary might no longer hold: its model answer and released notebook,
    the code that decides grades, the settings written for nbgrader and the kernel, the kernel library and
    kernelspec, Python's version and the installed packages."""
    from importlib import metadata

    digest = hashlib.sha256()
    released = s.course_root / "release" / lesson / f"{lesson}.ipynb"
    kernels = [workspace.kernel_library(s), Path(s.out) / "jupyter"]  # the modules kernels import; the kernelspec
    files = [course.SOLUTIONS / f"{lesson}.py", released, *grade_deciding_sources(),
             *sorted(p for folder in kernels for p in folder.rglob("*") if p.is_file())]
    packages = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    for part in [lesson, workspace.config_lines(s), json.dumps([s.memory_mb, s.max_output, s.isolation]),
                 sys.version, *packages]:
        digest.update(part.encode() + b"\0")
    for path in files:
        digest.update(str(path).encode() + b"\0" + _file_state(path) + b"\0")
    return digest.hexdigest()


def _file_state(path: Path) -> bytes:
    """A file's permission bits and bytes (a kernel library file the sandbox cannot read changes the outcome), or
    what stopped reading it: an unreadable file changes the fingerprint, so the canary runs and says what it finds,
    instead of the fingerprint stopping the run with a traceback."""
    try:
        return f"{path.stat().st_mode:o}".encode() + b"\0" + path.read_bytes()
    except FileNotFoundError:
        return b"(none)"
    except OSError as error:
        return f"(unreadable: {error.strerror})".encode()


def _passes(s) -> dict:
    """{lesson: fingerprint} of the canary passes recorded in ``OUT/canary/passed.json``."""
    try:
        passes = json.loads((state.canary_folder(s.out) / PASSED).read_text())
    except (OSError, ValueError):
        return {}
    return passes if isinstance(passes, dict) else {}


def run(s, log=print, pool=None) -> Checked:
    """Grade the model answers of ``s.lessons`` (those without a pass that still holds); raise ``CanaryFailed``
    unless every one earns full marks."""
    started = time.monotonic()
    prints = {lesson: fingerprint(s, lesson) for lesson in s.lessons}
    passes = _passes(s)
    reused = [lesson for lesson in s.lessons if s.reuse_canary and passes.get(lesson) == prints[lesson]]
    ids = {lesson: state.canary_id(lesson) for lesson in s.lessons if lesson not in reused}
    if not ids:
        log(f"canary: reused the passes of {', '.join(reused)} (nothing they depend on changed)")
        return Checked([], 0.0, reused)
    shutil.rmtree(state.canary_folder(s.out), ignore_errors=True)  # the records of the last canary
    remove(s, ids.values())  # what a killed run may have left
    for lesson, cid in ids.items():
        answers.write_submission(s.course_root, cid, lesson, answers.fill(lesson))
    workspace.ensure_students(s, ids.values())
    log(f"canary: grading the model answers of {len(ids)} lesson{'s' * (len(ids) != 1)} before any student")
    try:
        pool_module.run_tasks(s, {cid: {lesson: {"hash": "", "flags": []}} for lesson, cid in ids.items()},
                              progress=False, pool=pool)
        problems = {lesson: _problem(s, lesson, cid) for lesson, cid in ids.items()}
    finally:
        remove(s, ids.values())
    passed = {lesson: prints[lesson] for lesson, problem in problems.items() if not problem}
    _record(s, {**{lesson: fp for lesson, fp in passes.items() if lesson not in problems}, **passed})
    if len(passed) < len(problems):
        raise CanaryFailed("\n\n".join(p for p in problems.values() if p) + "\nNo student was graded; fix this, "
                           "then run the same command again.")
    return Checked(list(ids), round(time.monotonic() - started, 1), reused)


def _record(s, passes: dict) -> None:
    """Keep ``passes`` ({lesson: fingerprint}) for the next run (written whole, then renamed into place)."""
    path = state.canary_folder(s.out) / PASSED
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_text(json.dumps(passes, indent=1, sort_keys=True) + "\n")
    path.with_suffix(".tmp").replace(path)


def remove(s, ids) -> None:
    """Take the canary students out of the gradebook and the course folder (their records stay in OUT/canary)."""
    from nbgrader.api import MissingEntry

    ids = list(ids)
    with gradebook.opened(s) as gb:
        for cid in ids:
            try:
                gb.remove_student(cid)
            except MissingEntry:
                pass
    for cid in ids:
        for place in (s.course_root / "submitted", s.course_root / "autograded", s.course_root / "feedback",
                      Path(s.out) / "feedback"):
            shutil.rmtree(place / cid, ignore_errors=True)


# ---------------------------------------------------------------- what broke

def _problem(s, lesson: str, cid: str) -> str:
    """'' when the canary of ``lesson`` earned every autograded point, else the sentence and the first error."""
    from nbgrader.api import MissingEntry

    lost: list | None = None
    found: list = []
    total = 0.0
    try:
        with gradebook.opened(s) as gb:
            for nb in gb.find_submission(lesson, cid).notebooks:
                for g in nb.grades:
                    if g.auto_score is None:  # a written answer waiting for the instructor
                        continue
                    total += g.max_score
                    if g.auto_score < g.max_score:
                        found.append((g.name, g.max_score - g.auto_score))
        lost = found
    except MissingEntry:
        pass
    graded_nb = s.course_root / "autograded" / cid / lesson / f"{lesson}.ipynb"
    if lost == [] and graded_nb.exists():
        return ""
    keep = state.canary_folder(s.out) / f"{lesson}.ipynb"
    keep.parent.mkdir(parents=True, exist_ok=True)
    if graded_nb.exists():
        shutil.copyfile(graded_nb, keep)
        first = first_error(nbformat.read(graded_nb, as_version=4))
    else:
        record = state.read(s, cid, lesson)
        text = " | ".join(([record.reason] if record.reason else []) + record.flags if record else []) \
            or "nbgrader wrote no graded notebook"
        first = {"cell": "", "kind": "nbgrader", "ename": "", "evalue": text, "traceback": ""}
    points = (f"lost {sum(p for _, p in lost):g} of its {total:g} autograded points "
              f"({', '.join(name for name, _ in lost)})" if lost else "was not graded")
    where = f", in cell {first['cell']}" if first["cell"] else ""
    headline = f"{first['ename']}: {first['evalue']}" if first["ename"] else first["evalue"]
    tail = "".join(f"\n    {line}" for line in first["traceback"].splitlines())
    return (f"canary failed for {lesson}: the model answer {points}. {diagnose(s, lesson, first)}\n"
            f"First error{where}: {headline[:500]}{tail}" + (f"\n(graded notebook: {keep})" if keep.exists() else ""))


def first_error(nb) -> dict:
    """The first error output of a graded notebook: its cell, the kind of cell, ename, evalue, short traceback."""
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                meta = cell.metadata.get("nbgrader", {})
                kind = "answer" if meta.get("solution") else "test" if meta.get("grade") else "setup"
                lines = _ANSI.sub("", "\n".join(out.get("traceback") or [])).strip().splitlines()
                return {"cell": meta.get("grade_id") or f"#{i + 1}", "kind": kind, "ename": out.get("ename", ""),
                        "evalue": out.get("evalue", ""), "traceback": "\n".join(lines[-12:])}
    return {"cell": "", "kind": "", "ename": "", "evalue": "no cell shows an error", "traceback": ""}


def diagnose(s, lesson: str, first: dict) -> str:
    """One plain sentence: what broke, and the fix."""
    ename, evalue, kind = first["ename"], first["evalue"], first["kind"]
    text = f"{ename}: {evalue}"
    missing = re.search(r"No module named '([\w.]+)'", text)
    if missing and missing.group(1).split(".")[0] in outcome.COURSE_MODULES:
        return (f"Kernels cannot import the course's module {missing.group(1)}: the kernel library the command "
                f"copies to {workspace.kernel_library(s)} lacks it or cannot be read; delete {s.out}/course.json "
                "so the next run rebuilds the grading course, and check that the course itself is complete "
                "(make check-lessons).")
    if missing:
        return (f"A package the lessons need ({missing.group(1)}) is missing from the kernels' Python; install the "
                f"course's requirements (make venv) into that environment.")
    kernel_did_not_start = (kind == "nbgrader" and _KERNEL_START.search(evalue)) or (
        ename == "DeadKernelError" and kind == "setup")
    if kernel_did_not_start and s.memory_mb < 512:
        return (f"The grading kernel did not start: --memory-mb {s.memory_mb} is too small for Python and numpy to "
                f"load; raise it (the default is 2048).")
    if kernel_did_not_start:
        return ("The grading kernel did not start (or died before the model answer ran): the sandbox cannot run "
                "on this machine as it is; run the command once as a normal user to tell a sandbox problem from a "
                "broken Python environment, and see the error below.")
    if ename == "DeadKernelError":
        return (f"The kernel died while running a model answer: the sandbox's limits are too tight for it on this "
                f"machine; raise --memory-mb (now {s.memory_mb}).")
    if ename in ("CellTimeoutError", "KeyboardInterrupt", "TimeoutError") or "ignored the interrupt" in evalue:
        return (f"A model answer cell ran longer than --timeout {s.timeout} s: this machine is too slow or too busy "
                f"for that limit; raise --timeout or lower --workers.")
    if "MemoryError" in ename:
        return (f"A model answer ran out of memory under --memory-mb {s.memory_mb}: raise --memory-mb.")
    if kind == "test":
        return (f"The hidden checks and the model answers disagree: {lesson}'s hidden test {first['cell']} fails on "
                f"the model answer from solutions/{lesson}.py; make autograder/reference/, autograder/checks/ and "
                f"solutions/ agree (make test shows where).")
    if kind == "nbgrader":
        return ("nbgrader could not grade the model answer (see the error below): fix what it names, e.g. the "
                "gradebook or the course folder.")
    return (f"The model answer itself fails in the grading kernel ({ename} in a {kind or 'code'} cell): the kernels' "
            f"environment differs from the one the course was built for; reinstall it (make venv).")
