"""Lesson 02 graded for real: one nbgrader course, one ``nbgrader autograde`` call, every submission below.

A completed notebook, an untouched one, one notebook per catalogued lesson-02 bug (each must lose exactly the
points of the function it breaks, with the bug named in the feedback), and one whose pieces are each right but
do not fit together (only the composition test may charge it).
"""

import time

import pytest

from autograder import bugs, submissions
from grading_helpers import grade, lost

LESSON = "02_multi_head"
FULL = 12.0
POINTS = {"split_heads_values": 2, "concat_heads_values": 2, "output_projection_values": 2, "mha_values": 3,
          "mha_mask": 2, "mha_composition": 1}
LESSON02_BUGS = [b for b in bugs.CATALOG if b.lesson == "02"]
# The bugs the course spec names for this lesson; each must be in the catalog and proven below.
REQUIRED = {
    "split_no_transpose", "split_strided_heads", "split_swaps_leading_axes", "concat_no_transpose",
    "concat_swaps_leading_axes", "output_W_O_transposed", "output_W_O_forgotten", "output_heads_averaged",
    "output_heads_summed", "mha_shared_projection", "mha_weights_transposed", "mha_mask_one_head",
    "mha_scaled_by_d_model", "mha_in_place",
}

# Each piece is right on its own, but the layer calls split_heads(..., n_heads=...) by keyword while the
# learner's split_heads names its argument `h`: only the learner's own pieces together break.
MISFIT = {
    "split_heads": """
        def split_heads(x, h):
            *lead, T, d_model = x.shape
            if d_model % h != 0:
                raise ValueError("h must divide d_model")
            return np.swapaxes(x.reshape(*lead, T, h, d_model // h), -3, -2)
    """,
    "multi_head_attention": """
        def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
            Q = split_heads(x @ W_Q, n_heads=n_heads)
            K = split_heads(x @ W_K, n_heads=n_heads)
            V = split_heads(x @ W_V, n_heads=n_heads)
            heads, weights = scaled_dot_product_attention(Q, K, V, mask)
            return output_projection(heads, W_O), weights
    """,
}

pytestmark = pytest.mark.grading


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    notebooks = {
        "complete": submissions.fill(LESSON),
        "untouched": submissions.student_notebook(LESSON),
        "misfit": submissions.fill(LESSON, MISFIT),
    }
    for b in LESSON02_BUGS:
        notebooks[b.id] = submissions.fill(LESSON, {b.function: b.source})
    start = time.perf_counter()
    out = grade(tmp_path_factory.mktemp("l02"), LESSON, notebooks)
    print(f"\nlesson 02: graded {len(notebooks)} submissions in {time.perf_counter() - start:.0f} s")
    for student, r in out.items():
        print(f"  {student:28s} {r['total'][0]:g}/{r['total'][1]:g}  lost {sorted(lost(r))}")
    return out


def test_every_required_bug_is_catalogued_with_its_function_tests():
    ids = {b.id for b in LESSON02_BUGS}
    assert REQUIRED <= ids, REQUIRED - ids
    for b in LESSON02_BUGS:
        assert b.tests and set(b.tests) <= set(POINTS), (b.id, b.tests)


def test_completed_notebook_gets_full_marks(results):
    r = results["complete"]
    assert r["total"] == (FULL, FULL), r["errors"]
    assert lost(r) == set()


def test_untouched_notebook_gets_zero(results):
    r = results["untouched"]
    assert r["total"] == (0.0, FULL)
    assert lost(r) == set(POINTS)
    assert "not implemented yet" in r["feedback"]


@pytest.mark.parametrize("bug_id", sorted(b.id for b in LESSON02_BUGS))
def test_bug_loses_exactly_its_functions_points_and_is_named(results, bug_id):
    b = bugs.by_id(bug_id)
    r = results[bug_id]
    assert lost(r) == set(b.tests), (lost(r), r["errors"])
    assert r["total"] == (FULL - sum(POINTS[t] for t in b.tests), FULL)
    if bug_id == "mha_in_place":
        # caught before any value is compared: the runner's own message names the in-place write
        assert "modified its input argument 2 in place" in r["feedback"]
    else:
        assert f"[{bug_id}]" in r["feedback"], r["errors"]
        assert b.diagnosis[:40] in r["feedback"]


def test_a_helper_bug_is_not_charged_again_by_the_composition_test(results):
    r = results["split_no_transpose"]
    assert "Composition not charged: split_heads" in r["feedback"]


def test_pieces_that_do_not_fit_together_lose_only_the_composition_point(results):
    r = results["misfit"]
    assert lost(r) == {"mha_composition"}, r["errors"]
    assert r["total"] == (FULL - 1, FULL)
    assert "each pass on their own" in r["feedback"]
