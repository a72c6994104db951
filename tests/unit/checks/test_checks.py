"""The hidden-check machinery on its own: comparison that no learner object can fool, bug diagnoses."""

import numpy as np
import pytest

from autograder.checks import compare, runner


class AlwaysEqual(np.ndarray):
    def __eq__(self, other):
        return True


def test_mismatch_is_not_fooled_by_a_fake_eq_or_a_subclass():
    expected = np.arange(6.0).reshape(2, 3)
    fake = np.zeros((2, 3)).view(AlwaysEqual)
    assert "numpy array" in compare.mismatch(fake, expected)

    class Liar:
        shape = (2, 3)
        def __eq__(self, other):
            return True
    assert compare.mismatch(Liar(), expected) is not None


def test_mismatch_reports_shape_nan_and_largest_difference():
    e = np.zeros((2, 3))
    assert "shape (3, 2)" in compare.mismatch(np.zeros((3, 2)), e)
    assert "NaN" in compare.mismatch(np.full((2, 3), np.nan), e)
    got = e.copy()
    got[1, 2] = 0.5
    assert "flat index 5" in compare.mismatch(got, e)
    assert compare.mismatch(e + 1e-12, e) is None


def test_mismatch_does_not_use_rebindable_numpy(monkeypatch):
    monkeypatch.setattr(np, "allclose", lambda *a, **k: True)
    monkeypatch.setattr(np, "array_equal", lambda *a, **k: True)
    assert compare.mismatch(np.ones(3), np.zeros(3)) is not None


def test_check_names_a_catalogued_bug():
    from autograder.bugs import by_id

    wrong = by_id("attention_scaled_by_d_k").make()
    rng = np.random.default_rng(0)
    case = runner.Case((rng.normal(size=(3, 5)), rng.normal(size=(4, 5)), rng.normal(size=(4, 2))))
    with pytest.raises(runner.WrongAnswer, match=r"divided by d_k instead of sqrt\(d_k\).*attention_scaled_by_d_k"):
        runner.against_reference("scaled_dot_product_attention", wrong, [case], outputs=("out", "weights"))


def test_check_catches_in_place_modification():
    def softmax(x, axis=-1):
        x -= x.max(axis=axis, keepdims=True)
        np.exp(x, out=x)
        x /= x.sum(axis=axis, keepdims=True)
        return x
    with pytest.raises(runner.WrongAnswer, match="in place"):
        runner.against_reference("softmax", softmax, [runner.Case((np.arange(4.0),))])


def test_hidden_inputs_depend_on_the_grading_salt(monkeypatch):
    monkeypatch.setenv("MHA_GRADING_SALT", "1")
    a = runner.rng_for("softmax_values").normal(size=3)
    monkeypatch.setenv("MHA_GRADING_SALT", "2")
    b = runner.rng_for("softmax_values").normal(size=3)
    assert not np.array_equal(a, b)
