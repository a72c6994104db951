"""One synthetic class with known bugs, graded through the real command, for the insights tests
(tests/grading/test_insights.py and tests/browser/test_insights_page.py).

Lesson 01: the bugs are drawn from the catalog (``autograder.bugs``, the first visible ones of each function,
whatever they are called) at fixed rates: the first attention bug in three students, the second in one, one softmax
bug each in two of them; two of them also have a softmax wrong in a way no bug explains: an uncatalogued result, and
an error whose message is a catalogued bug's own "diagnosis [id]" (a notebook cannot name a bug). Besides: a perfect
student and an untouched notebook.

Lesson 05 (find-the-bug code handed out, written answers): the perfect student's model answers, the untouched
notebook as it was handed out, and a partial one: the model answers and written answers, but one handed-out function
left as it was given and another answer cell with a SyntaxError. The other students hand in no lesson 05.

The class is graded, then the instructor marks written answers (``MARKS``, through nbgrader's API, as formgrader
does; one answer left pending), and the class is graded again: that run grades nothing and folds the marks in.
Nine notebooks: the batch costs the command's fixed start-up twice and about five notebooks per worker.
"""

from __future__ import annotations

from pathlib import Path

from autograder import bugs, course, grade
from autograder.checks import registry
from autograder.course import answers, notebooks
from autograder.course.notebooks import write_notebook
from autograder.grading.records.settings import COURSE_ID
from autograder.publish import given_code
from run_once import once

LESSON = "01_warmup"
LESSON05 = "05_exercises"
UNCATALOGUED_SOFTMAX = ("def softmax(x, axis=-1):\n    e = np.exp(x - x.max(axis=axis, keepdims=True))\n"
                        "    return 1.01 * e / e.sum(axis=axis, keepdims=True)\n")


def _visible(function: str) -> list:
    return [b for b in bugs.CATALOG if LESSON.startswith(b.lesson) and b.function == function and b.visible]


SOFTMAX_BUGS = _visible("softmax")[:2]
ATTENTION_BUGS = _visible("scaled_dot_product_attention")[:2]


def _forging_softmax() -> str:
    b = SOFTMAX_BUGS[0]
    return (f"def softmax(x, axis=-1):\n    print({f'{b.diagnosis} [{b.id}]'!r})\n"
            f"    raise ValueError({f'{b.diagnosis} [{b.id}]'!r})\n")


# student -> the catalogued bugs in their work
CLASS_BUGS = {
    "perfect": [],
    "attention_and_softmax": [ATTENTION_BUGS[0], SOFTMAX_BUGS[0]],
    "attention_and_uncatalogued": [ATTENTION_BUGS[0]],
    "attention_and_forged": [ATTENTION_BUGS[0]],
    "other_attention_and_softmax": [ATTENTION_BUGS[1], SOFTMAX_BUGS[1]],
}
# their softmax is wrong in a way no catalogued bug explains: numbers, or an error naming a bug in its own words
UNNAMED_STUDENTS = ("attention_and_uncatalogued", "attention_and_forged")
UNTOUCHED = "untouched"

# lesson 05: the partial notebook leaves this handed-out function as given, and breaks this answer cell's syntax
PARTIAL = "partial"
LEFT_AS_GIVEN = given_code.given_bugs(LESSON05)[-1]
SYNTAX_ERROR = ("split_into_heads",
                "def split_into_heads(x, n_heads):\n    return x.reshape(x.shape[:-1] + (n_heads, -1)\n")
LESSON01_STUDENTS = (*CLASS_BUGS, UNTOUCHED)
LESSON05_STUDENTS = ("perfect", UNTOUCHED, PARTIAL)


def written_points() -> dict:
    """grade_id -> points of each written answer of lesson 05, read from its source."""
    cells = [c.metadata.get("nbgrader", {}) for c in notebooks.read_source(course.SOLUTIONS / f"{LESSON05}.py").cells]
    return {m["grade_id"]: float(m["points"]) for m in cells if m.get("grade") and m.get("solution")}


def _marks() -> dict:
    """The instructor's marks: the perfect student one point short on the first answer, the partial one full marks
    on all but the last answer, which stays pending."""
    points = written_points()
    first, *_, last = sorted(points)
    perfect = {gid: p - (1 if gid == first else 0) for gid, p in points.items()}
    return {"perfect": perfect, PARTIAL: {gid: p for gid, p in points.items() if gid != last}}


MARKS = _marks()


def softmax_tests() -> list:
    return sorted(gid for gid, t in registry.tests_of(LESSON).items() if "softmax" in t.uses)


def notebooks_of_class() -> dict:
    """{(student, lesson): notebook}."""
    nbs = {}
    for student, wrong in CLASS_BUGS.items():
        nbs[student, LESSON] = answers.fill(LESSON, {b.function: b.source for b in wrong})
    attention = {ATTENTION_BUGS[0].function: ATTENTION_BUGS[0].source}
    nbs["attention_and_uncatalogued", LESSON] = answers.fill(LESSON, {**attention, "softmax": UNCATALOGUED_SOFTMAX})
    nbs["attention_and_forged", LESSON] = answers.fill(LESSON, {**attention, "softmax": _forging_softmax()})
    nbs[UNTOUCHED, LESSON] = answers.fill(LESSON, complete=False)
    nbs["perfect", LESSON05] = answers.fill(LESSON05)
    nbs[UNTOUCHED, LESSON05] = answers.fill(LESSON05, complete=False)
    nbs[PARTIAL, LESSON05] = answers.fill(LESSON05, {LEFT_AS_GIVEN.function: LEFT_AS_GIVEN.source,
                                                     SYNTAX_ERROR[0]: SYNTAX_ERROR[1]})
    return nbs


def _enter_marks(out: Path) -> None:
    """What formgrader's grade handler does for each mark."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:
        for student, given in MARKS.items():
            for cell, points in given.items():
                found = gb.find_grade(cell, LESSON05, LESSON05, student)
                found.manual_score, found.needs_manual_grade = points, False
        gb.db.commit()


def _scores(result, lesson) -> dict:
    return {row["student"]: row["lessons"][lesson]["score"] for row in result["rows"]}


def _grade(base: Path) -> dict:
    root, out = base / "class", base / "out"
    for (student, lesson), nb in notebooks_of_class().items():
        write_notebook(nb, root / student / f"{lesson}.ipynb")
    settings = grade.Settings(out=str(out), lessons=[LESSON, LESSON05], workers=2)
    first = grade.run(root, settings, progress=False, log=lambda *a: None)
    _enter_marks(out)
    marked = grade.run(root, settings, progress=False, log=lambda *a: None)
    return {"out": str(out), "changed": first["changed"], "scores": _scores(first, LESSON),
            "changed_by_marks": marked["changed"], "marked": {"before": _scores(first, LESSON05),
                                                              "after": _scores(marked, LESSON05)}}


def graded_class(tmp_path_factory) -> dict:
    result = once(tmp_path_factory, "insights-class", _grade)
    return {**result, "out": Path(result["out"])}
