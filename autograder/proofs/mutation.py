"""Mutation testing of the hidden tests: every catalogued learner bug, graded for real.

    python -m autograder.proofs.mutation [--lessons 01_warmup ...] [--workers 2] [--keep DIR]

Every bug of ``autograder.bugs.CATALOG`` is graded in a submission made from the completed student notebook with
its function replaced by the bug's source. Bugs are placed in rounds, like ``autograder/proofs/placements.py``: a round
replaces several graded functions of a lesson at once, each with one of its bugs (each bug, in catalog order, goes
to the first round it fits), so a lesson needs about as many submissions as its function with the most bugs, not
one per bug. Two functions whose tests share a cell (lesson 05's ``split_into_heads`` and ``merge_heads``) never
meet in a round, nor do two bugs whose diagnoses start alike.
Every mutant is graded in one run of the grading command itself (``autograder.grade.run``: the same pipeline,
sandbox and limits as ``make grade``), ``--workers`` notebooks at a time. The run's canary is the unmutated
control: it grades each lesson's model answers first, and the run stops unless they earn full marks
(``autograder/grading/run/canary.py``), so every point a mutant loses is its bugs' doing. A bug is *caught* when

* its function's tests lose points: exactly those listed in ``bug.tests``, no more, no fewer (a function's tests
  are every test cell a catalogued bug of that function breaks),
* its submission loses no point outside the tests of the functions its round replaced,
* the feedback page contains the bug's diagnosis, and
* (for bugs a visible check can see) the learner's visible self-check of a broken test fails as well, with that
  one bug in place.

A bug costing points in another function's tests would show up as a lost test outside its function's; what a
round cannot show is such a cost on exactly the tests the other bug of that round breaks anyway. The hidden tests
rule that out by construction (each runs its function with the reference in place of the learner's other
functions, ``autograder/checks/registry.py``), and ``tests/unit/checks/test_isolation.py`` checks that mechanism directly.

The same run grades the submissions of ``autograder/proofs/placements.py``: catalogued bugs placed in the cells a lesson
does not grade (pasted from an earlier lesson, or an ungraded exercise), which must lose no point, and probes, which
must lose exactly their own tests. Together they prove that only a bug's own tests lose points, wherever it sits.
And it grades the correct alternatives of ``autograder/alternatives/`` (``Fair``): round k puts the k-th
alternative of every answer cell in one submission, which must lose no point at all.

Prints the mutation score (caught / total) and the time taken.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder import bugs as catalog
from autograder import course
from autograder.course import answers, notebooks
from autograder.grading.reports import results
from autograder.proofs import placements


@dataclass(frozen=True)
class Mutant:
    id: str  # the submission's student id
    lesson: str  # "02_multi_head"
    bugs: tuple  # catalog.Bug objects, each of a different function

    def notebook(self):
        return answers.fill(self.lesson, {b.function: b.source for b in self.bugs})


@dataclass
class Verdict:
    bug: catalog.Bug
    mutant: str = ""
    total: tuple = (0.0, 0.0)
    lost: set = field(default_factory=set)
    diagnosis_shown: bool = False
    visible_failed: bool | None = None  # None: not applicable (bug.visible is False)
    problems: list = field(default_factory=list)

    @property
    def caught(self) -> bool:
        return not self.problems

    @property
    def name(self) -> str:
        return self.bug.id

    @property
    def submission(self) -> str:
        return self.mutant

    def line(self) -> str:
        return f"{self.bug.lesson} {self.bug.id:38} {self.total[0]:g}/{self.total[1]:g} ({self.mutant})"


@dataclass
class PlacementVerdict:
    placement: placements.Placement
    total: tuple = (0.0, 0.0)
    lost: set = field(default_factory=set)
    problems: list = field(default_factory=list)

    @property
    def caught(self) -> bool:
        return not self.problems

    @property
    def name(self) -> str:
        return self.placement.id

    @property
    def submission(self) -> str:
        return self.placement.id

    def line(self) -> str:
        placed = ", ".join(x.id for x in (*self.placement.bugs, *getattr(self.placement, "alternatives", ())))
        return f"{course.lesson_number(self.placement.lesson)} {self.placement.id:38} {self.total[0]:g}/{self.total[1]:g} ({placed})"


@dataclass(frozen=True)
class Fair:
    """A submission of correct alternatives, one per answer cell (``autograder/alternatives/``): full marks due."""

    id: str  # the submission's student id
    lesson: str
    alternatives: tuple  # alternatives.Alternative, each of a different cell

    tests = ()  # it must lose points on none
    bugs = ()

    def notebook(self):
        return answers.fill(self.lesson, {a.cell: a.source for a in self.alternatives})


def fair_rounds(lesson: str) -> list:
    """Round k: the k-th alternative of every answer cell that has k alternatives."""
    from autograder import alternatives

    by_cell: dict = {}
    for a in alternatives.of_lesson(lesson):
        by_cell.setdefault(a.cell, []).append(a)
    rounds = max(map(len, by_cell.values()), default=0)
    return [Fair(f"alternatives-{course.lesson_number(lesson)}-{k + 1}", lesson,
                 tuple(found[k] for found in by_cell.values() if k < len(found))) for k in range(rounds)]


def bugs_by_lesson() -> dict:
    """{lesson name: its catalogued bugs, in catalog order}."""
    found: dict = {}
    for b in catalog.CATALOG:
        found.setdefault(b.lesson, []).append(b)
    return found


def tests_of_functions(bug_list) -> dict:
    """{function: the grade_ids of its tests}: every test cell some catalogued bug of that function breaks."""
    tests: dict = {}
    for b in bug_list:
        tests.setdefault(b.function, set()).update(b.tests)
    return tests


def _diagnosis_key(bug) -> str:
    return " ".join(bug.diagnosis.split())[:60]


def mutants_for(lesson: str, bug_list) -> list:
    """The rounds of ``bug_list`` (the catalogued bugs of ``lesson``): each bug in the first round that has no bug
    of a function sharing a test cell with its function and no diagnosis starting like its own."""
    tests = tests_of_functions(bug_list)
    rounds: list = []
    for b in bug_list:
        for placed in rounds:
            if all(not (tests[b.function] & tests[o.function]) and _diagnosis_key(b) != _diagnosis_key(o)
                   for o in placed):
                placed.append(b)
                break
        else:
            rounds.append([b])
    return [Mutant(f"mutant-{course.lesson_number(lesson)}-{r + 1:02d}", lesson, tuple(placed)) for r, placed in enumerate(rounds)]


def _defines_only(source: str) -> bool:
    """True for a cell of function definitions and imports only (a lesson's given functions)."""
    try:
        statements = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(statements) and all(isinstance(s, (ast.FunctionDef, ast.Import, ast.ImportFrom)) for s in statements)


@contextlib.contextmanager
def answers_run_here(lesson: str, nb):
    """The namespace of a learner who ran the setup cell, the cells of given functions and every answer cell of
    ``nb``, in this process."""
    namespace = {"__name__": "__mutant__"}
    sys.path.insert(0, str(course.LESSONS))
    try:
        import matplotlib

        matplotlib.use("Agg")
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and (meta.get("grade_id") == "setup" or meta.get("solution")
                                             or _defines_only(cell.source)):
                exec(compile(cell.source, f"<{lesson}:{meta.get('grade_id')}>", "exec"), namespace)
        yield namespace
    finally:
        sys.path.remove(str(course.LESSONS))


def _visible_check_fails(lesson: str, bug) -> bool:
    """Run the lesson's visible self-checks on the mutant, in this process.

    Emulates a learner who runs the setup cell and every answer cell (the bug in its place), then every cell
    that calls one of the lesson's ``check_*`` self-checks: True when one of them raises an AssertionError.
    """
    nb = answers.fill(lesson, {bug.function: bug.source})
    with answers_run_here(lesson, nb) as namespace:
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


def misblamed(bug) -> list:
    """[(self-check, what it said)] for each of the lesson's visible self-checks of *another* function that fails
    with ``bug`` in place without naming the bug's function: a check must never blame a correct caller for its
    callee's mistake (``selfcheck_common.own``). Checks of the bug's own function, and cells that need cells other
    than the answers (a NameError here), are left out."""
    from autograder.checks import registry

    own = {t.visible_check for t in registry.tests_of(bug.lesson).values() if bug.function in (*t.uses, *t.together)}
    found = []
    nb = answers.fill(bug.lesson, {bug.function: bug.source})
    with answers_run_here(bug.lesson, nb) as namespace:
        for i, cell in enumerate(nb.cells):
            checks = re.findall(r"^\s*(check_\w+)\((\w+)", cell.source, re.M) if cell.cell_type == "code" else []
            if not checks or checks[0][0] in own or any(arg == bug.function for _, arg in checks):
                continue
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(cell.source, f"<{bug.lesson}:cell {i}>", "exec"), namespace)
            except (NotImplementedError, NameError):
                continue
            except Exception as exc:  # noqa: BLE001 - a self-check's verdict, or a crash inside one
                said = f"{type(exc).__name__}: {exc}"
                if f"`{bug.function}`" not in said and bug.function not in said:
                    found.append((checks[0][0], said[:300]))
    return found


def _lost(settings, lesson: str, student: str) -> set:
    return {gid for gid, (s, m) in results.cell_scores(settings, lesson, student).items() if s < m}


def judge(settings, lesson: str, mutants) -> list:
    """Verdicts for the bugs of ``mutants`` from the grading command's run under ``settings``."""
    tests = tests_of_functions(bugs_by_lesson()[lesson])
    verdicts = []
    for m in mutants:
        total = results.submission_total(settings, lesson, m.id)
        lost = _lost(settings, lesson, m.id)
        feedback = " ".join(results.feedback_text(settings, lesson, m.id).split())
        outside = lost - set().union(*(tests[b.function] for b in m.bugs))
        for b in m.bugs:
            v = Verdict(b, m.id, total, lost & tests[b.function])
            if not v.lost:
                v.problems.append("its function's tests kept full marks: the hidden tests missed it")
            elif v.lost != set(b.tests):
                v.problems.append(f"lost points on {sorted(v.lost)}, expected exactly {sorted(b.tests)}")
            if outside:
                others = ", ".join(o.id for o in m.bugs if o is not b)
                v.problems.append(f"{m.id} lost points on {sorted(outside)}, outside the tests of its bugs' "
                                  f"functions ({b.id}{', ' + others if others else ''})")
            v.diagnosis_shown = _diagnosis_key(b) in feedback
            if not v.diagnosis_shown:
                v.problems.append("the feedback does not show the bug's diagnosis")
            if b.visible:
                v.visible_failed = _visible_check_fails(lesson, b)
                if not v.visible_failed:
                    v.problems.append("the learner's visible self-check passes this bug")
            verdicts.append(v)
    return verdicts


def judge_placements(settings, lesson: str, placement_list) -> list:
    """Verdicts for ``placement_list``: each loses points on exactly its ``tests`` (none for a placed bug)."""
    verdicts = []
    for p in placement_list:
        v = PlacementVerdict(p, results.submission_total(settings, lesson, p.id), _lost(settings, lesson, p.id))
        if v.lost != set(p.tests):
            v.problems.append(f"lost points on {sorted(v.lost)}, expected exactly {sorted(p.tests) or 'none'}")
        verdicts.append(v)
    return verdicts


def run(lessons=None, workers=2, keep=None) -> list:
    from autograder import grade

    by_lesson = bugs_by_lesson()
    if lessons:
        by_lesson = {k: v for k, v in by_lesson.items() if k in lessons}
    with tempfile.TemporaryDirectory(prefix="mha-mutants-") as tmp:
        workdir = Path(keep or tmp)
        klass = workdir / "class"
        mutants = {lesson: mutants_for(lesson, bug_list) for lesson, bug_list in by_lesson.items()}
        placed = {lesson: [*placements.for_lesson(lesson), *fair_rounds(lesson)] for lesson in by_lesson}
        for lesson in by_lesson:
            for m in (*mutants[lesson], *placed[lesson]):
                notebooks.write_notebook(m.notebook(), klass / m.id / f"{lesson}.ipynb")
        settings = grade.Settings(out=str(workdir / "graded"), lessons=sorted(by_lesson), workers=max(1, workers))
        outcome = grade.run(klass, settings, progress=False, log=lambda *a: None)
        verdicts = [v for lesson in sorted(by_lesson)
                    for v in (*judge(settings, lesson, mutants[lesson]),
                              *judge_placements(settings, lesson, placed[lesson]))]
        failed = {student: reason for student, _, reason in outcome["errors"]}
        for v in verdicts:  # a grader failure proves nothing either way
            if v.submission in failed:
                v.problems.insert(0, f"{v.submission} was not graded (grading error: {failed[v.submission]})")
        return verdicts


def report(verdicts, seconds) -> str:
    lines = []
    for v in verdicts:
        mark = ("caught" if isinstance(v, Verdict) else "fair") if v.caught else "MISSED"
        lines.append(f"{mark:7} {v.line()}" + ("" if v.caught else "  <- " + "; ".join(v.problems)))
    bugs = [v for v in verdicts if isinstance(v, Verdict)]
    placed = [v for v in verdicts if isinstance(v, PlacementVerdict)]
    lines.append(f"mutation score: {sum(v.caught for v in bugs)}/{len(bugs)} bugs caught, named and costed "
                 f"exactly; {sum(v.caught for v in placed)}/{len(placed)} placements and probes cost exactly their "
                 f"own tests; in {seconds:.1f} s")
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
