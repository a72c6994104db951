"""How fast a class is graded: serial `nbgrader autograde`, `python -m autograder.grade`, and the floor.

    python bench/grading_speed.py [--students 60] [--workers N] [--lessons 01_warmup ...]
    GRADING_BENCH_STUDENTS=12 make bench      # a quick run

A synthetic class (a third complete, a third with a catalogued bug, a third blank, for every available lesson) is
graded three ways, each in a fresh folder:

* serial:  `nbgrader autograde LESSON` once per lesson on a course folder made by `autograder.course.make_course`
           (nbgrader's own way: one submission after another, in-process kernels, no sandbox);
* command: `autograder.grade.run` with N workers: the canary, sandboxed kernels, autograde + feedback + export +
           report; once with warm kernels (forked from a server that imported ipykernel, numpy and matplotlib
           once: `autograder/kernel/warm_kernels.py`, the default as root) and once with every kernel started cold;
* floor:   executing the same notebooks nbgrader executes (the serial run's autograded notebooks, outputs
           cleared) with nbclient in N processes: kernel start-up and the code itself, no grading at all.

Every kernel of the three trains lesson 07's model for a few steps only, as grading kernels do.

It prints the wall-clock times and the ratios, whatever they are, and stops with an error if the warm and the
cold run gave different grades, or the command and serial nbgrader different autograded points. Then the cost of
one notebook, phase by phase, as CPU seconds of the grader and of the kernel, summed from the warm run's records
(``autograder/grading/pipeline/costs.py``): the limit (the learner's cells and the hidden tests, which any grader
must spend) beside the grader's overhead (kernel start and stop, nbgrader's steps, the feedback page, the records).
Targets on 2 cores: command / floor <= 0.5 with warm kernels (<= 1.3 cold), warm command <= 1.5x the limit spread
over the workers, and serial / command >= 1.7. Not a test: the figures depend on the machine and its load (printed
too).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autograder import bugs, course, grade
from autograder.grading.pipeline import costs
from autograder.grading.records import state
from autograder.course import (
    answers,  # noqa: E402
    notebooks,
)


def synthetic_class(root: Path, n_students: int, lessons) -> dict:
    """Write ``n_students`` folders of notebooks; returns {student: kind}."""
    kinds = {}
    for lesson in lessons:
        lesson_bugs = [b for b in bugs.CATALOG if b.lesson == lesson]
        for i in range(n_students):
            student = f"s{i:03d}"
            kind = ("complete", "buggy", "blank")[i % 3]
            if kind == "buggy" and not lesson_bugs:
                kind = "complete"
            if kind == "complete":
                nb = answers.fill(lesson)
            elif kind == "buggy":
                b = lesson_bugs[(i // 3) % len(lesson_bugs)]
                nb = answers.fill(lesson, {b.function: b.source})
            else:
                nb = answers.student_notebook(lesson)
            notebooks.write_notebook(nb, root / student / f"{lesson}.ipynb")
            kinds[student] = kind
    return kinds


def serial_nbgrader(base: Path, class_dir: Path, lessons) -> float:
    root = notebooks.make_course(base / "serial", lessons)
    for student_dir in class_dir.iterdir():
        for lesson in lessons:
            dest = root / "submitted" / student_dir.name / lesson / f"{lesson}.ipynb"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(student_dir / f"{lesson}.ipynb", dest)
    started = time.monotonic()
    for lesson in lessons:
        notebooks.nbgrader(["autograde", lesson, "--force", "--log-level=WARN"], root)  # stock nbgrader, unsandboxed
    return time.monotonic() - started


def serial_scores(base: Path, lessons) -> dict:
    """{(student, lesson): autograded points} of the serial run, from nbgrader's own gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{base / 'serial' / 'gradebook.db'}") as gb:
        return {(sub.student.id, lesson): round(sub.code_score, 6)
                for lesson in lessons for sub in gb.assignment_submissions(lesson)}


def command_scores(grades_csv: str, lessons) -> dict:
    """{(student, lesson): autograded points} of the command's grades.csv."""
    rows = list(csv.DictReader(io.StringIO(grades_csv)))
    return {(row["student"], lesson): round(float(row[f"{lesson} autograded"] or 0), 6)
            for row in rows for lesson in lessons}


def _execute_all(paths) -> int:
    import nbformat
    from nbclient import NotebookClient

    os.environ.update(notebooks.nbgrader_env())
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # the kernels' start-up warnings
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(Path(path).parent)}}).execute()
    return len(paths)


def floor(base: Path, workers: int) -> float:
    notebooks = sorted(str(p) for p in (base / "serial" / "autograded").rglob("*.ipynb"))
    shares = [notebooks[i::workers] for i in range(workers)]
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        assert sum(pool.map(_execute_all, shares)) == len(notebooks)
    return time.monotonic() - started


def command(base: Path, class_dir: Path, lessons, workers: int, *, warm: bool) -> tuple:
    """Wall-clock seconds of the grading command, of its canary (part of them), its grades.csv, and the costs of
    its students' notebooks (each record's ``costs``, ``autograder/grading/pipeline/costs.py``)."""
    out = base / ("command-warm" if warm else "command-cold")
    settings = grade.Settings(out=str(out), lessons=list(lessons), workers=workers, warm_kernels=warm)
    started = time.monotonic()
    outcome = grade.run(class_dir, settings, progress=False, log=lambda *a: None)
    elapsed = time.monotonic() - started
    assert outcome["graded"] == len(list(class_dir.iterdir())) * len(lessons), outcome["graded"]
    ledgers = [state.Record.from_json(json.loads(p.read_text())).costs for p in (out / "state").rglob("*.json")]
    return elapsed, outcome["canary"].seconds, (out / "grades.csv").read_text(), ledgers


def breakdown(ledgers: list, workers: int, wall: float) -> None:
    """Print each phase's CPU seconds per notebook, the grader's and the kernel's, and the limit beside the rest."""
    n = len(ledgers)
    total = costs.summed(ledgers)
    kernel_known = all(row["kernel"] is not None for row in total.values())
    print(f"cost per notebook, CPU seconds ({n} notebooks of the warm run; "
          + ("kernel: its processes' /proc times)" if kernel_known else "the kernel's CPU could not be read: "
             "grading without a uid of its own)"))
    print(f"  {'phase':24} {'grader':>8} {'kernel':>8} {'wall':>8}")
    for name, row in total.items():
        kernel = f"{row['kernel'] / n:8.3f}" if row["kernel"] is not None else f"{'-':>8}"
        print(f"  {name:24} {row['grader'] / n:8.3f} {kernel} {row['wall'] / n:8.3f}")
    cpu = {name: row["grader"] + (row["kernel"] or 0.0) for name, row in total.items()}
    limit = sum(cpu[name] for name in costs.OWN_WORK) / n
    overhead = sum(cpu[name] for name in costs.PHASES if name not in costs.OWN_WORK) / n
    print(f"  the limit (learner's cells + hidden tests): {limit:.3f} s per notebook; the grader's overhead: "
          f"{overhead:.3f} s ({overhead / limit:.2f}x the limit)")
    best = limit * n / workers
    print(f"  warm wall / the limit on {workers} workers ({best:.1f} s) = {wall / best:.2f}  (target <= 1.5)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=int(os.environ.get("GRADING_BENCH_STUDENTS", 60)),
                        help="class size (default 60, or $GRADING_BENCH_STUDENTS)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--lessons", nargs="+", default=None)
    args = parser.parse_args(argv)
    os.environ.update(notebooks.nbgrader_env())
    os.environ["MHA_SHORT_TRAINING"] = "1"  # every kernel of all three, as grading kernels: lesson 07 trains briefly
    lessons = args.lessons or course.lesson_names()
    base = Path(tempfile.mkdtemp(prefix="grading-bench-"))
    try:
        synthetic_class(base / "class", args.students, lessons)
        n = args.students * len(lessons)
        load = os.getloadavg()[0]
        print(f"{args.students} students x {len(lessons)} lessons = {n} notebooks, {args.workers} workers, "
              f"{os.cpu_count()} cores, load average {load:.1f} at start")
        t_serial = serial_nbgrader(base, base / "class", lessons)
        print(f"serial nbgrader autograde : {t_serial:7.1f} s  ({t_serial / n:.2f} s per notebook)")
        t_command, t_canary, warm_grades, ledgers = command(base, base / "class", lessons, args.workers, warm=True)
        print(f"autograder.grade, warm    : {t_command:7.1f} s  (autograde + feedback + export + report, and the "
              f"canary: {t_canary:.1f} s)")
        t_cold, t_cold_canary, cold_grades, _ = command(base, base / "class", lessons, args.workers, warm=False)
        print(f"autograder.grade, cold    : {t_cold:7.1f} s  (canary: {t_cold_canary:.1f} s)")
        if warm_grades != cold_grades:
            differ = sorted(set(warm_grades.splitlines()) ^ set(cold_grades.splitlines()))
            raise SystemExit("warm and cold kernels gave different grades:\n" + "\n".join(differ[:20]))
        t_floor = floor(base, args.workers)
        print(f"floor (nbclient, {args.workers} procs)  : {t_floor:7.1f} s")
        print(f"warm / floor     = {t_command / t_floor:.2f}  (target <= 0.5)")
        print(f"cold / floor     = {t_cold / t_floor:.2f}  (target <= 1.3)")
        print(f"serial / warm    = {t_serial / t_command:.2f}  (target >= 1.7)")
        print(f"grades.csv of the warm and the cold run: identical ({warm_grades.count(chr(10)) - 1} students)")
        serial, warm = serial_scores(base, lessons), command_scores(warm_grades, lessons)
        if serial != warm:
            differ = sorted(k for k in serial.keys() | warm.keys() if serial.get(k) != warm.get(k))
            raise SystemExit(f"serial nbgrader and the command gave different autograded points: {differ[:20]}")
        print(f"autograded points of serial nbgrader and of the command: identical ({len(serial)} notebooks)")
        breakdown(ledgers, args.workers, t_command)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
