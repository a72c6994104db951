"""One synthetic class of lesson 01 with known bugs, graded once through the real command, for the insights tests
(tests/grading/test_insights.py and tests/browser/test_insights_page.py).

The bugs are drawn from the catalog (``autograder.bugs``, the first visible ones of each function, whatever they are
called) at fixed rates: the first attention bug in three students, the second in one, one softmax bug each in two of
them; two of them also have a softmax wrong in a way no bug explains: an uncatalogued result, and an error whose
message is a catalogued bug's own "diagnosis [id]" (a notebook cannot name a bug). Besides: a perfect student and
an untouched notebook. Six notebooks: the batch costs the command's fixed start-up and three notebooks per worker.
"""

from __future__ import annotations

from pathlib import Path

from autograder.course import answers
from autograder import bugs, grade
from autograder.course.notebooks import write_notebook
from autograder.checks import registry
from run_once import once

LESSON = "01_warmup"
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


def softmax_tests() -> list:
    return sorted(gid for gid, t in registry.tests_of(LESSON).items() if "softmax" in t.uses)


def notebooks() -> dict:
    nbs = {}
    for student, wrong in CLASS_BUGS.items():
        nbs[student] = answers.fill(LESSON, {b.function: b.source for b in wrong})
    attention = {ATTENTION_BUGS[0].function: ATTENTION_BUGS[0].source}
    nbs["attention_and_uncatalogued"] = answers.fill(LESSON, {**attention, "softmax": UNCATALOGUED_SOFTMAX})
    nbs["attention_and_forged"] = answers.fill(LESSON, {**attention, "softmax": _forging_softmax()})
    nbs[UNTOUCHED] = answers.fill(LESSON, complete=False)
    return nbs


def _grade(base: Path) -> dict:
    root, out = base / "class", base / "out"
    for student, nb in notebooks().items():
        write_notebook(nb, root / student / f"{LESSON}.ipynb")
    settings = grade.Settings(out=str(out), lessons=[LESSON], workers=2)
    result = grade.run(root, settings, progress=False, log=lambda *a: None)
    return {"out": str(out), "changed": result["changed"],
            "scores": {row["student"]: row["lessons"][LESSON]["score"] for row in result["rows"]}}


def graded_class(tmp_path_factory) -> dict:
    result = once(tmp_path_factory, "insights-class", _grade)
    return {**result, "out": Path(result["out"])}
