"""Mutation testing of the hidden tests: every catalogued learner bug, graded for real.

    python -m autograder.mutation [--lessons 01_warmup ...] [--workers 2] [--keep DIR]

For each bug in ``autograder.bugs.CATALOG`` a submission is made from the completed student notebook with that
one function replaced by the bug's source. Every mutant (one student per bug) and one unmutated control are
graded in one run of the grading command itself (``autograder.grade.run``: the same pipeline, sandbox and limits
as ``make grade``), ``--workers`` notebooks at a time. A bug is *caught* when

* its total is below full marks,
* exactly the tests listed in ``bug.tests`` lose points (no more, no fewer),
* the feedback page contains the bug's diagnosis, and
* (for bugs a visible check can see) the learner's visible self-check of a broken test fails as well.

Prints the mutation score (caught / total) and the time taken.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder import bugs as catalog
from autograder import course, answers
from autograder.grading import results

CONTROL = "control-complete"


@dataclass
class Verdict:
    bug: catalog.Bug
    total: tuple = (0.0, 0.0)
    lost: set = field(default_factory=set)
    diagnosis_shown: bool = False
    visible_failed: bool | None = None  # None: not applicable (bug.visible is False)
    problems: list = field(default_factory=list)

    @property
    def caught(self) -> bool:
        return not self.problems


def lesson_of(bug) -> str:
    for name in course.lesson_names():
        if name.startswith(bug.lesson + "_"):
            return name
    raise KeyError(f"bug {bug.id} names lesson {bug.lesson}, which has no source in solutions/")


def _visible_check_fails(lesson: str, bug) -> bool:
    """Run the lesson's visible self-checks on the mutant, in this process.

    Emulates a learner who runs the setup cell and every answer cell (the bug in its place), then every cell
    that calls one of the lesson's ``check_*`` self-checks: True when one of them raises an AssertionError.
    """
    nb = answers.fill(lesson, {bug.function: bug.source})
    namespace = {"__name__": "__mutant__"}
    sys.path.insert(0, str(course.LESSONS))
    try:
        import matplotlib

        matplotlib.use("Agg")
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and (meta.get("grade_id") == "setup" or meta.get("solution")):
                exec(compile(cell.source, f"<{lesson}:{meta['grade_id']}>", "exec"), namespace)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or not re.search(r"^\s*check_\w+\(", cell.source, re.M):
                continue
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(cell.source, f"<{lesson}:cell {i}>", "exec"), namespace)
            except NotImplementedError:
                continue
            except Exception:  # AssertionError from a self-check, or the mutant crashing inside one
                return True
        return False
    finally:
        sys.path.remove(str(course.LESSONS))


def judge(settings, lesson: str, bug_list) -> list:
    """Verdicts for ``bug_list`` from the grading command's run under ``settings``."""
    control = results.submission_total(settings, lesson, CONTROL)
    control_lost = {gid for gid, (s, m) in results.cell_scores(settings, lesson, CONTROL).items() if s < m}
    verdicts = []
    for b in bug_list:
        v = Verdict(b)
        if control_lost:
            v.problems.append(f"the unmutated control lost points on {sorted(control_lost)}, so nothing can be "
                              "concluded")
        v.total = results.submission_total(settings, lesson, b.id)
        scores = results.cell_scores(settings, lesson, b.id)
        v.lost = {gid for gid, (s, m) in scores.items() if s < m}
        if v.total[0] >= control[0]:
            v.problems.append("full marks: the hidden tests missed it")
        if v.lost != set(b.tests):
            v.problems.append(f"lost points on {sorted(v.lost)}, expected exactly {sorted(b.tests)}")
        feedback = results.feedback_text(settings, lesson, b.id)
        v.diagnosis_shown = b.diagnosis[:60] in " ".join(feedback.split())
        if not v.diagnosis_shown:
            v.problems.append("the feedback does not show the bug's diagnosis")
        if b.visible:
            v.visible_failed = _visible_check_fails(lesson, b)
            if not v.visible_failed:
                v.problems.append("the learner's visible self-check passes this bug")
        verdicts.append(v)
    return verdicts


def run(lessons=None, workers=2, keep=None) -> list:
    from autograder import grade

    by_lesson = {}
    for b in catalog.CATALOG:
        by_lesson.setdefault(lesson_of(b), []).append(b)
    if lessons:
        by_lesson = {k: v for k, v in by_lesson.items() if k in lessons}
    with tempfile.TemporaryDirectory(prefix="mha-mutants-") as tmp:
        workdir = Path(keep or tmp)
        klass = workdir / "class"
        for lesson, bug_list in by_lesson.items():
            course.write_notebook(answers.fill(lesson), klass / CONTROL / f"{lesson}.ipynb")
            for b in bug_list:
                course.write_notebook(answers.fill(lesson, {b.function: b.source}), klass / b.id / f"{lesson}.ipynb")
        settings = grade.Settings(out=str(workdir / "graded"), lessons=sorted(by_lesson), workers=max(1, workers))
        grade.run(klass, settings, progress=False, log=lambda *a: None)
        return [v for lesson, bug_list in sorted(by_lesson.items())
                for v in judge(settings, lesson, bug_list)]


def report(verdicts, seconds) -> str:
    lines = []
    for v in verdicts:
        mark = "caught" if v.caught else "MISSED"
        lines.append(f"{mark:7} {v.bug.lesson} {v.bug.id:38} {v.total[0]:g}/{v.total[1]:g}"
                     + ("" if v.caught else "  <- " + "; ".join(v.problems)))
    caught = sum(v.caught for v in verdicts)
    lines.append(f"mutation score: {caught}/{len(verdicts)} bugs caught, named and costed exactly, "
                 f"in {seconds:.1f} s")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lessons", nargs="*", help="lesson names (default: every lesson with bugs)")
    parser.add_argument("--workers", type=int, default=2, help="notebooks graded at once")
    parser.add_argument("--keep", help="grade in this folder and keep it (default: a temporary folder)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    verdicts = run(args.lessons, args.workers, args.keep)
    print(report(verdicts, time.perf_counter() - t0))
    return 0 if all(v.caught for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
