"""Lesson 07 graded for real, in one batch: a completed, an untouched, a correct backward pass written differently
(per-head loops, an explicit Jacobian) and a gradient check written differently (a loop over np.ndindex) get full
and zero marks; scores read from the gradebook. Grading trains for a few steps only (MHA_SHORT_TRAINING, set by the
grading command for every kernel), so a lesson 07 notebook grades quickly. Every catalogued bug of the lesson is
graded by tests/grading/test_mutations.py."""

import pytest

from autograder.course import answers
import lessons_class
from grading_helpers import lost

LESSON = "07_heads_that_learn"
POINTS = {"setup": 0, "softmax_jacobian_values": 1, "softmax_backward_values": 2, "gradient_check_values": 2,
          "attention_row_backward_values": 1, "attention_backward_values": 3, "mha_backward_values": 3,
          "positions_values": 2}
pytestmark = pytest.mark.grading

JACOBIAN_SOFTMAX_BACKWARD = """
def softmax_backward(weights, grad_weights, axis=-1):
    p = np.moveaxis(weights, axis, -1)
    g = np.moveaxis(grad_weights, axis, -1)
    jacobian = p[..., :, None] * np.eye(p.shape[-1], dtype=p.dtype) - p[..., :, None] * p[..., None, :]
    return np.moveaxis((jacobian @ g[..., None])[..., 0], -1, axis)
"""
LOOP_GRADIENT_CHECK = """
def gradient_check(f, inputs, grad, eps=1e-6):
    xs = [np.asarray(a, dtype=np.float64).copy() for a in inputs]
    errors = []
    for x, a in zip(xs, grad):
        n = np.empty_like(x)
        for idx in np.ndindex(x.shape):
            keep = x[idx]
            x[idx] = keep + eps
            up = f(*xs)
            x[idx] = keep - eps
            down = f(*xs)
            x[idx] = keep
            n[idx] = (up - down) / (2 * eps)
        a = np.asarray(a, dtype=np.float64)
        errors.append(np.abs(a - n).max() / max(np.abs(a).max(), np.abs(n).max(), 1e-12))
    return float(np.max(errors))  # a NaN anywhere stays NaN (Python's max would drop it)
"""


def submissions():
    return {
        "complete": answers.fill(LESSON),
        "untouched": answers.student_notebook(LESSON),
        "written_differently": answers.fill(LESSON, {"softmax_backward": JACOBIAN_SOFTMAX_BACKWARD,
                                                         "gradient_check": LOOP_GRADIENT_CHECK}),
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return lessons_class.results(tmp_path_factory, LESSON)


def test_the_lesson_has_the_tests_and_points_we_think(results):
    assert {gid: mx for gid, (_, mx) in results["complete"]["tests"].items()} == POINTS


def test_completed_and_differently_written_notebooks_get_full_marks(results):
    for student in ("complete", "written_differently"):
        assert results[student]["total"] == (14.0, 14.0), (student, results[student]["tests"],
                                                            results[student]["errors"])


def test_untouched_notebook_gets_zero_and_is_told_what_to_write(results):
    r = results["untouched"]
    assert r["total"] == (0.0, 14.0)
    assert lost(r) == set(POINTS) - {"setup"}
    assert "not implemented yet" in r["feedback"]
