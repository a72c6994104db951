"""A graded cell's score depends only on the functions it grades (kernel-free: the hidden tests run in this process).

Every hidden test passes on the model answers when every other function of the lesson raises (each is replaced
by its reference stand-in while the test runs); every function the learner writes or pastes has a stand-in; and
every graded cell whose visible self-check follows the hidden test declares that check, so it gives way when the
hidden test passes. The real grading path is proven by the mutation harness (``tests/grading/test_mutations.py``).
"""

import ast

import pytest

from autograder import course
from autograder.checks import registry
from autograder.course import answers, notebooks
from autograder.proofs import mutation, placements

LESSONS = course.lesson_names()


class Raises:
    """Stands in for a function a test must not run: any call fails the test."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.name} was called while a test that does not grade it ran")


def _run_isolated(lesson, test, namespace, stand_in_names):
    graded = set(test.uses) | set(test.together)
    saved = {n: namespace[n] for n in stand_in_names if n in namespace and n not in graded}
    namespace.update({n: Raises(n) for n in saved})
    try:
        registry.run_here(test.name, namespace)
    finally:
        namespace.update(saved)


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_hidden_test_passes_when_every_function_it_does_not_grade_raises(lesson):
    names = set(registry.stand_ins_of(lesson))
    with mutation.answers_run_here(lesson, answers.fill(lesson)) as namespace:
        for test in registry.tests_of(lesson).values():
            _run_isolated(lesson, test, namespace, names)


def test_without_stand_ins_a_pasted_function_reaches_the_graded_one(monkeypatch):
    """The check above can fail: with no stand-ins, GQA calls the (raising) pasted attention."""
    lesson = "06_going_further"
    monkeypatch.setattr(registry, "_BY_LESSON", {n: dict for n in registry._BY_LESSON})
    with mutation.answers_run_here(lesson, answers.fill(lesson)) as namespace:
        with pytest.raises(AssertionError, match="scaled_dot_product_attention was called"):
            _run_isolated(lesson, registry.find("06_going_further", "gqa_values"), namespace, ["scaled_dot_product_attention"])


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_function_of_the_answer_cells_has_a_stand_in(lesson):
    defined = set(placements.defining_cells(answers.model_answers(lesson)))
    missing = defined - set(registry.stand_ins_of(lesson))
    assert not missing, f"add a stand-in for {sorted(missing)} to autograder/checks/registry.py"


def _visible_calls(cell_source):
    """The names the visible part of a graded cell calls, or None if it is more than calls of a function."""
    visible = cell_source.split("### END HIDDEN TESTS", 1)[-1]
    names = set()
    for statement in ast.parse(visible).body:
        if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
                and isinstance(statement.value.func, ast.Name)):
            return None
        names.add(statement.value.func.id)
    return names


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_visible_self_check_after_a_hidden_test_is_declared(lesson):
    tests = registry.tests_of(lesson)
    for cell in notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id not in tests:
            continue
        calls = _visible_calls(cell.source)
        assert calls is not None and len(calls) <= 1, (
            f"{lesson}:{grade_id}: the self-check after the hidden test must be calls of one check function, so "
            "it can give way when the hidden test passes")
        declared = {tests[grade_id].visible_check} - {None}
        assert calls == declared, (f"{lesson}:{grade_id} calls {sorted(calls) or 'no self-check'} after its hidden "
                                   f"test; its @hidden_test declares visible_check={tests[grade_id].visible_check!r}")
