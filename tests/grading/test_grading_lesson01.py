"""Lesson 01 graded for real: nbgrader autograde on a completed, an untouched and a buggy submission."""

import pytest

from autograder.course import answers
from autograder.bugs import by_id
import lessons_class
from grading_helpers import lost

LESSON = "01_warmup"
pytestmark = pytest.mark.grading


def submissions():
    return {
        "complete": answers.fill(LESSON),
        "untouched": answers.student_notebook(LESSON),
        "query_axis": answers.fill(LESSON, {
            "scaled_dot_product_attention": by_id("attention_softmax_query_axis").source}),
        "seq_len_scale": answers.fill(LESSON, {
            "scaled_dot_product_attention": by_id("attention_scaled_by_seq_len").source}),
        "overflow": answers.fill(LESSON, {"softmax": by_id("softmax_no_max_subtraction").source}),
        "hard_coded": answers.fill(LESSON, {
            "scaled_dot_product_attention": by_id("attention_hard_coded").source}),
        "pasted_given": answers.fill(LESSON, {"softmax": _given("07_heads_that_learn", "softmax")}),
    }


def _given(lesson: str, name: str) -> str:
    """A function as another lesson gives it, from that lesson's given cell."""
    import ast

    from autograder.course import notebooks

    cell = next(c for c in notebooks.read_source(notebooks.SOLUTIONS / f"{lesson}.py").cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "given")
    node = next(n for n in ast.parse(cell.source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.get_source_segment(cell.source, node) + "\n"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return lessons_class.results(tmp_path_factory, LESSON)


def test_completed_notebook_gets_full_marks(results):
    assert results["complete"]["total"] == (8.0, 8.0)
    assert lost(results["complete"]) == set()


def test_untouched_notebook_gets_zero(results):
    assert results["untouched"]["total"] == (0.0, 8.0)
    assert "not implemented yet" in results["untouched"]["feedback"]


def test_softmax_over_query_axis_loses_exactly_the_attention_points(results):
    r = results["query_axis"]
    assert r["total"] == (3.0, 8.0)
    assert lost(r) == {"attention_values", "attention_mask"}
    assert "softmax is taken over the query axis" in r["feedback"]
    assert "[attention_softmax_query_axis]" in r["feedback"]


def test_scaling_by_sequence_length_is_named(results):
    r = results["seq_len_scale"]
    assert r["total"] == (3.0, 8.0)
    assert "scaled by the sequence length" in r["feedback"]


def test_softmax_overflow_costs_only_the_stability_test(results):
    r = results["overflow"]
    assert lost(r) == {"softmax_stable"}, r["errors"]
    assert r["total"] == (7.0, 8.0)
    assert "overflows" in r["feedback"]


def test_values_hard_coded_for_the_visible_example_fail_the_hidden_tests(results):
    r = results["hard_coded"]
    assert lost(r) == {"attention_values", "attention_mask"}
    assert "[attention_hard_coded]" in r["feedback"]


def test_another_lesson_s_given_code_pasted_as_an_answer_keeps_its_points_and_is_flagged(results):
    """Lesson 07's given softmax, pasted into lesson 01 when lessons are released together: correct, so 8/8, and
    the report tells the instructor whose code it is (the model answers are never flagged)."""
    r = results["pasted_given"]
    assert r["total"] == (8.0, 8.0)
    assert "given code of another lesson: softmax is the code lesson 04_dk_scaling, 07_heads_that_learn, " \
           "08_todays_models, 09_small_gpt gives" in r["flags"], r["flags"]
    assert "given code of another lesson" not in results["complete"]["flags"]
