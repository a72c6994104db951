"""What ``insights.html`` and ``misconceptions.csv`` add to the grading time of a class.

    python bench/insights_speed.py [--students 60] [--seconds-per-student 39] [--workers 2]
    python bench/insights_speed.py --out grading      # a folder a real `make grade` wrote

The build (``autograder/grading/reports/insights.py``) reads only the grade rows and the state records, so it is
measured alone on a synthetic class: the rows and the state records of ``--students`` students in every lesson of the
course (each lesson's real hidden tests; a third of the notebooks perfect, a third with a catalogued bug of that lesson
costing its tests, a sixth with a failure no bug names, a sixth untouched), and an empty feedback page for each,
as grading leaves them. It is compared with the grading time of the same class: ``--seconds-per-student`` (all
lessons of one student, on one worker; 39 s on a busy 2-core machine, docs/grading.md) times the students over
``--workers``. With ``--out``, both come from a real grading folder instead: the build is run on its state, and
the grading time is the sum of its records' seconds over ``--workers``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autograder import bugs, course  # noqa: E402
from autograder.checks import registry, verdict  # noqa: E402
from autograder.grading.records import items, outcome, state  # noqa: E402
from autograder.grading.records.settings import Settings  # noqa: E402
from autograder.grading.reports import insights  # noqa: E402


def result_of(kind: str, gid: str, bug, unnamed) -> str:
    """How hidden test ``gid`` ends for a synthetic notebook of ``kind`` ("untouched", "bug" with catalogued ``bug``,
    "unnamed" failing test ``unnamed``, else perfect)."""
    if kind == "untouched":
        return verdict.UNANSWERED
    if bug is not None and gid in bug.tests:
        return verdict.BUG
    return verdict.UNNAMED if gid == unnamed else verdict.PASSED


def _record(rng, student: str, lesson: str, tests: dict, kind: str) -> state.Record:
    lesson_bugs = [b for b in bugs.CATALOG if b.lesson == lesson and set(b.tests) <= set(tests)]
    bug = rng.choice(lesson_bugs) if kind == "bug" and lesson_bugs else None
    unnamed = rng.choice(sorted(tests)) if kind == "unnamed" else None
    found = {}
    for gid, points in tests.items():
        result = result_of(kind, gid, bug, unnamed)
        found[gid] = state.Item(score=points if result == verdict.PASSED else 0.0, max=points, result=result,
                                bug=bug.id if result == verdict.BUG else None,
                                failure=items.FAILURE_OF[verdict.UNNAMED] if result == verdict.UNNAMED else None)
    return state.Record(student, lesson, hash="", key="", graded=True, status=outcome.GRADED,
                        score=sum(v.score for v in found.values()), items=found, written={},
                        attempted=kind != "untouched")


def synthetic(out: Path, n_students: int, seed: int = 0):
    """Write the state records and feedback pages of a synthetic class; returns (settings, rows)."""
    rng = random.Random(seed)
    lessons = course.lesson_names()
    s = Settings(out=str(out), lessons=lessons)
    kinds = ("perfect", "perfect", "bug", "bug", "unnamed", "untouched")
    points = {lesson: {gid: float(rng.choice((1, 2, 3))) for gid in registry.tests_of(lesson)}
              for lesson in lessons}
    rows = []
    for i in range(n_students):
        student = f"s{i:03d}"
        row = {"student": student, "folder": student, "lessons": {}, "flags": [], "pending": 0.0}
        for lesson in lessons:
            tests = points[lesson]
            record = _record(rng, student, lesson, tests, kinds[(i + lessons.index(lesson)) % len(kinds)])
            state.write(s, record)
            page = out / "feedback" / student / f"{lesson}.html"
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text("<html><head></head><body>feedback</body></html>")
            maximum = sum(tests.values())
            row["lessons"][lesson] = {"status": outcome.GRADED, "score": record.score, "max": maximum,
                                      "auto": record.score, "manual": None, "pending": 0.0, "reason": ""}
        row["total"] = sum(c["score"] for c in row["lessons"].values())
        row["max_total"] = sum(c["max"] for c in row["lessons"].values())
        rows.append(row)
    return s, rows


def _real(out: Path):
    """(settings, rows, grading seconds) of a folder a real grading run wrote, read back as the command does."""
    from autograder.grading.intake import class_roster
    from autograder.grading.reports import results

    lessons = sorted({p.stem for p in (out / "state").glob("*/*.json")})
    s = Settings(out=str(out.resolve()), lessons=lessons)
    students = sorted(p.name for p in (out / "state").iterdir())
    entries = {st: {le: class_roster.Entry(st, le, out / "state" / st / f"{le}.json") for le in lessons}
               for st in students}
    roster = class_roster.Roster(root=out, entries=entries)
    seconds = sum(r.seconds for st in students for le in lessons if (r := state.read(s, st, le)))
    return s, results.read_rows(s, roster), seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=int(os.environ.get("INSIGHTS_BENCH_STUDENTS", 60)))
    parser.add_argument("--seconds-per-student", type=float, default=39.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, help="a grading folder written by `make grade` (else a synthetic class)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="insights-bench-") as tmp:
        if args.out:
            s, rows, graded_seconds = _real(args.out)
        else:
            s, rows = synthetic(Path(tmp), args.students)
            graded_seconds = args.seconds_per_student * args.students
        grading = graded_seconds / args.workers
        started = time.perf_counter()
        insights.write(s, rows, [])
        build = time.perf_counter() - started
        size = (Path(s.out) / "insights.html").stat().st_size
    print(f"insights build: {build:.2f} s for {len(rows)} students x {len(s.lessons)} lessons "
          f"(insights.html {size / 1024:.0f} KiB); grading the same class: {grading:.0f} s on {args.workers} workers "
          f"-> the build adds {100 * build / grading:.2f} % (target < 5 %); load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
