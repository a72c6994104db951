"""Lesson 09 graded for real, in the lessons' class (``tests/helpers/lessons_class.py``): a completed notebook, an
untouched one, and one whose functions are written as other learners write them (layer norm's backward pass through
each row's Jacobian, sampling by the Gumbel-max trick, generation in a while loop, K-composition by einsum) get full
and zero marks; scores read from the gradebook. Every catalogued bug of the lesson is graded by
tests/grading/test_mutations.py."""

import pytest

from autograder import alternatives
from autograder.course import answers
import lessons_class
from grading_helpers import lost

LESSON = "09_small_gpt"
POINTS = {"setup": 0, "layer_norm_values": 1, "layer_norm_backward_values": 2, "gelu_backward_values": 1,
          "mlp_backward_values": 2, "cross_entropy_values": 2, "embedding_backward_values": 1,
          "block_backward_values": 3, "sample_next_values": 2, "generate_values": 2, "ablate_head_values": 1,
          "k_composition_values": 2}
TOTAL = sum(POINTS.values())
DIFFERENT = ("layer_norm_backward_full_jacobian", "sample_next_gumbel_max", "generate_while_loop_checked",
             "k_composition_stacked_einsum", "block_backward_mlp_inline", "cross_entropy_logaddexp_reduce")
pytestmark = pytest.mark.grading


def submissions():
    chosen = {a.cell: a.source for a in alternatives.of_lesson(LESSON) if a.id in DIFFERENT}
    assert len(chosen) == len(DIFFERENT)
    return {
        "complete": answers.fill(LESSON),
        "untouched": answers.student_notebook(LESSON),
        "written_differently": answers.fill(LESSON, chosen),
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return lessons_class.results(tmp_path_factory, LESSON)


def test_the_lesson_has_the_tests_and_points_we_think(results):
    assert {gid: mx for gid, (_, mx) in results["complete"]["tests"].items()} == POINTS


def test_completed_and_differently_written_notebooks_get_full_marks(results):
    for student in ("complete", "written_differently"):
        r = results[student]
        assert tuple(r["total"]) == (TOTAL, TOTAL), (student, r["tests"], r["errors"])


def test_untouched_notebook_gets_zero_and_is_told_what_to_write(results):
    r = results["untouched"]
    assert tuple(r["total"]) == (0.0, TOTAL)
    assert lost(r) == set(POINTS) - {"setup"}
    assert "not implemented yet" in r["feedback"]
