"""Lesson 04 graded for real: one course, one `nbgrader autograde` over a completed, an untouched and one
submission per catalogued bug of the lesson, plus experiments that are right in a different way (another
seed, another way of drawing) and wrong in ways the catalog does not list; scores read from the gradebook."""

import pytest

from autograder import bugs
from autograder.bugs import by_id
from autograder.course import answers
import lessons_class
from grading_helpers import lost

LESSON = "04_dk_scaling"
POINTS = {"setup": 0, "std_experiment": 3, "head_scores": 3}
LESSON_BUGS = [b for b in bugs.CATALOG if b.lesson == LESSON]
pytestmark = pytest.mark.grading

# A correct experiment written differently from the model answer: a loop over d_k-wide rows, einsum, and the
# unbiased (ddof=1) standard deviation; it must pass because the test allows for sampling error.
OTHER_CORRECT_EXPERIMENT = """
def dot_product_std(d_k, n_samples, scaled, rng):
    pairs = rng.normal(0.0, 1.0, size=(2, n_samples, d_k))
    dots = np.einsum("nd,nd->n", pairs[0], pairs[1])
    if scaled:
        dots = dots / d_k ** 0.5
    return np.std(dots, ddof=1)
"""
# Wrong, but not in the catalog: uniform entries on [-1, 1] have variance 1/3, not 1.
UNIFORM_EXPERIMENT = """
def dot_product_std(d_k, n_samples, scaled, rng):
    q = rng.uniform(-1, 1, size=(n_samples, d_k))
    k = rng.uniform(-1, 1, size=(n_samples, d_k))
    dots = (q * k).sum(axis=1)
    return float(dots.std() / (math.sqrt(d_k) if scaled else 1.0))
"""
NP_SQRT_SCORES = """
def multi_head_scores(x, W_Q, W_K, n_heads):
    d_head = x.shape[-1] // n_heads
    Q = split_heads(x @ W_Q, n_heads)
    K = split_heads(x @ W_K, n_heads)
    return Q @ np.swapaxes(K, -1, -2) / np.sqrt(d_head)
"""


def submissions():
    return {
        "complete": answers.fill(LESSON),
        "untouched": answers.student_notebook(LESSON),
        "other_correct_experiment": answers.fill(LESSON, {"dot_product_std": OTHER_CORRECT_EXPERIMENT}),
        "uniform_experiment": answers.fill(LESSON, {"dot_product_std": UNIFORM_EXPERIMENT}),
        "np_sqrt_scores": answers.fill(LESSON, {"multi_head_scores": NP_SQRT_SCORES}),
        "theory_formula": answers.fill(LESSON, {"dot_product_std": by_id("std_experiment_theory_formula").source}),
    }
    # every catalogued bug is graded by tests/grading/test_mutations.py (autograder.proofs.mutation), in one batch


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return lessons_class.results(tmp_path_factory, LESSON)


def test_the_lesson_has_the_tests_and_points_we_think(results):
    assert {gid: mx for gid, (_, mx) in results["complete"]["tests"].items()} == POINTS


def test_completed_notebook_gets_full_marks(results):
    assert results["complete"]["total"] == (6.0, 6.0)
    assert lost(results["complete"]) == set(), results["complete"]["errors"]


def test_untouched_notebook_gets_zero(results):
    assert results["untouched"]["total"] == (0.0, 6.0)
    assert "not implemented yet" in results["untouched"]["feedback"]


def test_a_correct_experiment_written_differently_passes(results):
    r = results["other_correct_experiment"]
    assert r["total"] == (6.0, 6.0), r["errors"]


def test_an_experiment_with_the_wrong_distribution_fails_with_a_reason(results):
    r = results["uniform_experiment"]
    assert lost(r) == {"std_experiment"}
    assert r["total"] == (3.0, 6.0)
    feedback = " ".join(r["feedback"].split())
    assert "check how q and k are drawn" in feedback  # no catalogued bug fits: the generic reason
    assert "d_k=32, scaled=False: got" in feedback and "expected about 5.657" in feedback  # sqrt(32), measured 1/3 of it


def test_np_sqrt_promoting_float32_loses_the_scores_points_with_the_reason(results):
    r = results["np_sqrt_scores"]
    assert lost(r) == {"head_scores"}
    assert "a numpy float64 turns float32 scores into float64" in " ".join(r["feedback"].split())


def test_the_required_bugs_are_catalogued():
    ids = {b.id for b in LESSON_BUGS}
    assert {"scores_no_scaling", "scores_scaled_by_d_k", "scores_scaled_by_d_model",
            "scores_scaled_by_seq_len"} <= ids




def test_the_theory_formula_in_place_of_the_experiment_loses_the_experiment_points(results):
    """sqrt(d_k), or 1 when scaled, with no experiment: right at every n_samples the other checks use, wrong where a
    few samples make theory the wrong answer."""
    r = results["theory_formula"]
    assert lost(r) == {"std_experiment"}, r["errors"]
    assert r["total"] == (3.0, 6.0)
    assert "[std_experiment_theory_formula]" in r["feedback"]
