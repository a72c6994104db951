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
    }


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
