"""What the hidden and visible checks say: a bug is named only when it alone reproduces every case; numpy's shape
errors come with a sentence on what they usually mean. No kernel: the checks are called directly."""

import sys

import numpy as np
import pytest

from autograder import bugs, course
from autograder.checks import lesson01, runner


def _case(rng, T_q, T_k, d_k, d_v, lead=()):
    return runner.Case(tuple(rng.normal(size=(*lead, *shape)) for shape in ((T_q, d_k), (T_k, d_k), (T_k, d_v))))


def test_two_bugs_that_agree_on_every_case_are_not_named():
    """d_k = 2 and T_k = 4: dividing by d_k and by sqrt(T_k) give the same numbers; a second size tells them apart."""
    rng = np.random.default_rng(0)
    wrong = bugs.by_id("attention_scaled_by_seq_len").make()
    labels = ("out", "weights")
    alike = _case(rng, 3, 4, 2, 5)
    observed = [(alike, wrong(*alike.args), None)]
    assert runner.matching_bug("scaled_dot_product_attention", observed, labels, rtol=1e-6, atol=1e-9) is None
    other = _case(rng, 3, 7, 3, 5)
    observed.append((other, wrong(*other.args), None))
    named = runner.matching_bug("scaled_dot_product_attention", observed, labels, rtol=1e-6, atol=1e-9)
    assert named is not None and named.id == "attention_scaled_by_seq_len"


def test_k_transposed_with_dot_T_is_named_and_an_uncatalogued_fixed_axis_explained(monkeypatch):
    monkeypatch.setenv("MHA_GRADING_SALT", "1")
    with pytest.raises(runner.WrongAnswer, match=r"reverses \*all\* its axes.*\[attention_K_T\]"):
        lesson01.attention_values(bugs.by_id("attention_K_T").make())

    def swapped_front(Q, K, V, mask=None):  # right for one sequence only: K.swapaxes(0, 1)
        scores = Q @ K.swapaxes(0, 1) / np.sqrt(Q.shape[-1]).item()
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights = weights / weights.sum(-1, keepdims=True)
        return weights @ V, weights

    with pytest.raises(runner.WrongAnswer) as err:
        lesson01.attention_values(swapped_front)
    text = str(err.value)
    assert "raised ValueError" in text and "Count axes from the end" in text and "[" not in text.split("Where")[0]


def test_a_self_check_explains_numpy_shape_errors():
    sys.path.insert(0, str(course.SOLUTIONS))
    try:
        import selfcheck_01
        import selfcheck_common

        def k_dot_T(Q, K, V, mask=None):
            return bugs.by_id("attention_K_T").make()(Q, K, V, mask)

        with pytest.raises(selfcheck_common.SelfCheckFailed, match="count axes from the end"):
            selfcheck_01.check_attention_mask(k_dot_T)
    finally:
        sys.path.remove(str(course.SOLUTIONS))
