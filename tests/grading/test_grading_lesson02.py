"""Lesson 02 graded for real: one nbgrader course, one ``nbgrader autograde`` call, every submission below.

A completed notebook, an untouched one, one notebook per catalogued lesson-02 bug (each must lose exactly the
points of the function it breaks, with the bug named in the feedback), and one whose pieces are each right but
do not fit together (only the composition test may charge it).
"""

import pytest

from autograder import bugs, course, reference
from autograder.course import answers
from autograder.checks import lesson02 as hidden
from autograder.checks.verdict import WrongAnswer
import lessons_class
from grading_helpers import lost

LESSON = "02_multi_head"
FULL = 12.0
POINTS = {"split_heads_values": 2, "concat_heads_values": 2, "output_projection_values": 2, "mha_values": 3,
          "mha_mask": 2, "mha_composition": 1}
LESSON02_BUGS = [b for b in bugs.CATALOG if b.lesson == LESSON]
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

GRADED = {"split_heads": ("split_heads_values",), "concat_heads": ("concat_heads_values",),
          "output_projection": ("output_projection_values",),
          "multi_head_attention": ("mha_values", "mha_mask")}


def _selfcheck():
    return course.import_selfcheck(course.selfcheck_module(LESSON))


SelfCheckFailed = course.import_selfcheck("selfcheck_common").SelfCheckFailed


# ------------------------------------------------------------------ fast: the checks on their own, no kernel
def test_reference_passes_every_hidden_check():
    for function, tests in GRADED.items():
        for test in tests:
            getattr(hidden, test)(getattr(reference, function))
    hidden.mha_composition(reference.multi_head_attention, split_heads=reference.split_heads,
                           concat_heads=reference.concat_heads, output_projection=reference.output_projection)


@pytest.mark.parametrize("bug_id", sorted(b.id for b in LESSON02_BUGS))
def test_hidden_checks_fail_exactly_the_bugs_tests(bug_id):
    b = bugs.by_id(bug_id)
    for test in GRADED[b.function]:
        if test in b.tests:
            with pytest.raises(WrongAnswer):
                getattr(hidden, test)(b.make())
        else:
            getattr(hidden, test)(b.make())


def test_visible_self_checks_pass_the_reference():
    sc = _selfcheck()
    sc.check_split_heads(reference.split_heads)
    sc.check_concat_heads(reference.concat_heads)
    sc.check_round_trip(reference.split_heads, reference.concat_heads)
    sc.check_output_projection(reference.output_projection)
    sc.check_multi_head_attention(reference.multi_head_attention)
    sc.check_mha_mask(reference.multi_head_attention)


@pytest.mark.parametrize("bug_id", sorted(b.id for b in LESSON02_BUGS))
def test_visible_self_checks_catch_every_bug(bug_id):
    sc = _selfcheck()
    b = bugs.by_id(bug_id)
    checks = {"split_heads": [sc.check_split_heads], "concat_heads": [sc.check_concat_heads],
              "output_projection": [sc.check_output_projection],
              "multi_head_attention": [sc.check_multi_head_attention, sc.check_mha_mask]}[b.function]
    failures = []
    for check in checks:
        try:
            check(b.make())
        except SelfCheckFailed as exc:
            failures.append(str(exc))
    assert failures, f"no visible self-check notices {bug_id}"


def test_split_self_check_names_the_strided_and_no_transpose_layouts():
    sc = _selfcheck()
    with pytest.raises(SelfCheckFailed, match=r"head 0 holds columns \[0, 4, 8\].*\(T, d_head, n_heads\)"):
        sc.check_split_heads(bugs.by_id("split_strided_heads").make())
    with pytest.raises(SelfCheckFailed, match="row 1 holds columns \\[3, 4, 5\\] of token 0"):
        sc.check_split_heads(bugs.by_id("split_no_transpose").make())


# ------------------------------------------------------------------ real grading: one course, one autograde
def submissions():
    # every catalogued bug is graded by tests/grading/test_mutations.py (autograder.proofs.mutation), in one batch
    return {
        "complete": answers.fill(LESSON),
        "untouched": answers.student_notebook(LESSON),
        "misfit": answers.fill(LESSON, MISFIT),
        "split_no_transpose": answers.fill(LESSON, {"split_heads": bugs.by_id("split_no_transpose").source}),
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = lessons_class.results(tmp_path_factory, LESSON)
    for student, r in out.items():
        print(f"  {student:28s} {r['total'][0]:g}/{r['total'][1]:g}  lost {sorted(lost(r))}")
    return out


def test_every_required_bug_is_catalogued_with_its_function_tests():
    ids = {b.id for b in LESSON02_BUGS}
    assert REQUIRED <= ids, REQUIRED - ids
    for b in LESSON02_BUGS:
        assert b.tests and set(b.tests) <= set(POINTS), (b.id, b.tests)


@pytest.mark.grading
def test_completed_notebook_gets_full_marks(results):
    r = results["complete"]
    assert r["total"] == (FULL, FULL), r["errors"]
    assert lost(r) == set()


@pytest.mark.grading
def test_untouched_notebook_gets_zero(results):
    r = results["untouched"]
    assert r["total"] == (0.0, FULL)
    assert lost(r) == set(POINTS)
    assert "not implemented yet" in r["feedback"]


@pytest.mark.grading
def test_a_helper_bug_is_not_charged_again_by_the_composition_test(results):
    r = results["split_no_transpose"]
    assert "Composition not charged: split_heads" in r["feedback"]


@pytest.mark.grading
def test_pieces_that_do_not_fit_together_lose_only_the_composition_point(results):
    r = results["misfit"]
    assert lost(r) == {"mha_composition"}, r["errors"]
    assert r["total"] == (FULL - 1, FULL)
    assert "each pass on their own" in r["feedback"]
