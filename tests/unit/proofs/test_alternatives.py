"""Any correct solution earns full marks, however written: every catalogued alternative (``autograder/alternatives/``:
einsum, loops, ``moveaxis``, input checks that raise, reuse of the lesson's other functions, float64 inside) passes
every hidden test of its lesson, in place of the model answer, at every grading salt; and every graded answer cell
has at least two. The same alternatives graded through the grading command: ``tests/grading/test_mutations.py``
(``mutation.fair_rounds``).
"""

from __future__ import annotations

import re

import pytest

from autograder import alternatives, course
from autograder.checks import registry
from autograder.course import answers
from autograder.proofs import salt_sweep

QUICK_SALTS = range(1)  # the inner loop; the slow test below takes 200
ALL_SALTS = range(200)


def graded_cells(lesson: str) -> list:
    """The answer cells of ``lesson`` that define a function some hidden test grades (paste cells, whose functions
    only stand in, and written answers are not among them)."""
    graded = {n for t in registry.tests_of(lesson).values() for n in (*t.uses, *t.together)}
    return sorted(cell for cell, source in answers.model_answers(lesson).items()
                  if set(re.findall(r"^def (\w+)", source, re.M)) & graded)


def test_every_graded_answer_cell_has_two_correct_alternatives():
    missing = {}
    for lesson in course.lesson_names():
        for cell in graded_cells(lesson):
            found = [a for a in alternatives.of_lesson(lesson) if a.cell == cell]
            if len(found) < 2:
                missing[f"{lesson}:{cell}"] = len(found)
    assert missing == {}


def test_each_alternative_replaces_a_real_answer_cell_and_differs_from_the_model_answer():
    ids = [a.id for a in alternatives.CATALOG]
    assert len(ids) == len(set(ids))
    models = {lesson: answers.model_answers(lesson) for lesson in {a.lesson for a in alternatives.CATALOG}}
    for a in alternatives.CATALOG:
        model = models[a.lesson]
        assert a.cell in model, a.id
        assert a.source.split() != model[a.cell].split(), a.id


def _unfair(lesson, salts) -> list:
    return [(f.alternative.id, f.examples[0]) for f in salt_sweep.fairness(alternatives.of_lesson(lesson), salts)
            if not f.perfect]


@pytest.mark.parametrize("lesson", course.lesson_names())
def test_every_alternative_earns_full_marks(lesson):
    assert _unfair(lesson, QUICK_SALTS) == []


@pytest.mark.slow
@pytest.mark.parametrize("lesson", course.lesson_names())
def test_every_alternative_earns_full_marks_at_every_one_of_200_salts(lesson):
    assert _unfair(lesson, ALL_SALTS) == []


def test_the_sweep_can_fail_an_alternative_that_is_not_correct():
    """The check above can fail: a softmax that divides by a numpy scalar of another dtype is caught."""
    wrong = alternatives.Alternative("wrong", "01_warmup", "softmax", "not correct",
                                     "def softmax(x, axis=-1):\n    return np.exp(x) / np.float64(3.0)\n")
    (rate,) = salt_sweep.fairness([wrong], range(2))
    assert rate.passed == 0 and rate.examples
