"""What finding similar work (``similarity.html``, ``similarity.csv``) costs for a large class.

    python bench/similarity_speed.py [--students 100 300 1500] [--lessons 8] [--copies 0.02]

The report (``autograder/grading/reports/similarity_page.py``) reads only the state records, so it is measured on
synthetic ones, written as the grading command writes them: ``--students`` students in each of ``--lessons``
lessons of the course, each answer cell of each notebook holding the model answer's fingerprints and some of its
own, drawn from a long-tailed vocabulary (most fingerprints are one student's, a few are everyone's, as in a real
class), a catalogued bug or a wrong-number signature now and then, and a written answer of its own; a share
``--copies`` of the students hand in another's work. The whole step is timed (reading every record, the search, the
page and the CSV) at each class size, with the peak resident memory the step added, so the growth with the class size is
printed beside the figures.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import multiprocessing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autograder import course  # noqa: E402
from autograder.checks import verdict  # noqa: E402
from autograder.course import answers  # noqa: E402
from autograder.grading.records import outcome, state  # noqa: E402
from autograder.grading.records.settings import Settings  # noqa: E402
from autograder.grading.reports import similarity_page  # noqa: E402
from autograder.grading.similarity import code_prints, evidence  # noqa: E402

OWN_PRINTS = 25  # fingerprints of its own per answer cell, beside the model answer's
VOCABULARY = 200_000  # distinct fingerprints a cell's learners draw theirs from, long-tailed


def _cells(lesson: str) -> dict:
    return {gid: code_prints.prints(src) for gid, src in answers.model_answers(lesson).items()}


def _work(rng, lesson: str, cells: dict) -> dict:
    code, prints = {}, {}
    for gid, model in cells.items():
        own = {int(rng.paretovariate(0.6)) % VOCABULARY * 7919 + hash(gid) % 1000 for _ in range(OWN_PRINTS)}
        prints[gid] = sorted(set(rng.sample(model, k=len(model) // 2)) | own)
        code[gid] = "\n".join(f"    line_{i} = x @ y  # {rng.random()}" for i in range(15))
    answers_text = {"written": " ".join(rng.choice(("the", "head", "token", "reshape", "axis", "weights", "sum",
                                                    "query", "key", "value", "scale", "mask")) for _ in range(60))}
    return {"code": code, "prints": prints, "answers": answers_text}


def _records(s: Settings, n: int, lessons: list, copies: float, seed: int) -> list:
    rng = random.Random(seed)
    rows = []
    students = [f"s{i:05d}" for i in range(n)]
    for lesson in lessons:
        cells = _cells(lesson)
        works = {}
        for st in students:
            if works and rng.random() < copies:
                works[st] = works[rng.choice(sorted(works))]
            else:
                works[st] = _work(rng, lesson, cells)
            tests = {f"test_{gid}": state.Item(1.0, 1.0, verdict.PASSED) for gid in cells}
            if rng.random() < 0.1:
                gid = rng.choice(sorted(tests))
                tests[gid] = state.Item(0.0, 1.0, verdict.UNNAMED, failure="wrong result",
                                        signature=f"{rng.randrange(50):016x}")
            state.write(s, state.Record(st, lesson, hash="", key="", graded=True, status=outcome.GRADED, items=tests,
                                        written={}, attempted=True, work=works[st]))
    for st in students:
        rows.append({"student": st, "lessons": {lesson: {"status": outcome.GRADED} for lesson in lessons}})
    return rows


def _rss(field: str) -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(field))


def _measure(n: int, lessons: list, copies: float) -> tuple:
    """(seconds, bytes of resident memory the report added at its peak, pairs listed) for a class of ``n``."""
    with tempfile.TemporaryDirectory() as tmp:
        s = Settings(out=tmp, lessons=lessons)
        rows = _records(s, n, lessons, copies, seed=n)
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # the peak resident size starts again from here
        before = _rss("VmRSS")
        started = time.perf_counter()
        _, _, found = similarity_page.write(s, rows)
        seconds = time.perf_counter() - started
        return seconds, _rss("VmHWM") - before, sum(len(lesson.pairs) for lesson in found)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, nargs="+", default=[100, 300, 1500])
    parser.add_argument("--lessons", type=int, default=8)
    parser.add_argument("--copies", type=float, default=0.02)
    args = parser.parse_args(argv)
    lessons = course.lesson_names()[:args.lessons]
    evidence.expected()  # the course's own fingerprints: once per process, as in the grading command
    print(f"similarity report: {len(lessons)} lessons, {args.copies:.0%} of the students copy")
    per_student = []
    for n in args.students:
        with multiprocessing.get_context("fork").Pool(1) as pool:  # a fresh process: its peak memory is this size's
            seconds, peak, listed = pool.apply(_measure, (n, lessons, args.copies))
        per_student.append(seconds / n)
        print(f"  {n:>5} students x {len(lessons)} lessons: {seconds:6.2f} s ({1000 * seconds / n:.1f} ms per student), "
              f"peak memory {peak / 2**20:.0f} MB (the records read, the index, the page), {listed} pairs listed")
    print(f"  time per student, largest class over smallest: {per_student[-1] / per_student[0]:.2f} "
          "(1.00: linear growth)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
