"""The hidden-check machinery on its own: tamper-resistant comparison and the kernel guard."""

import numpy as np
import pytest

from autograder.checks import compare, runner, session


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
        runner.check("scaled_dot_product_attention", wrong, [case], outputs=("out", "weights"))


def test_check_catches_in_place_modification():
    def softmax(x, axis=-1):
        x -= x.max(axis=axis, keepdims=True)
        np.exp(x, out=x)
        x /= x.sum(axis=axis, keepdims=True)
        return x
    with pytest.raises(runner.WrongAnswer, match="in place"):
        runner.check("softmax", softmax, [runner.Case((np.arange(4.0),))])


def test_verify_detects_rebinding_and_imports(monkeypatch):
    session.start()
    session.verify({})
    monkeypatch.setattr(np, "allclose", lambda *a, **k: True)
    with pytest.raises(session.Tampered, match="numpy.allclose was reassigned"):
        session.verify({})
    monkeypatch.undo()
    session.start()
    from autograder import reference
    with pytest.raises(session.Tampered, match="hold code from the course's grading package"):
        session.verify({"split_heads": reference.split_heads})


def _record_softmax_values(softmax):
    """Run a hidden test in this process the way the kernel does and return its record."""
    from autograder.checks import lesson01, record

    rec = record.Recorder(softmax)
    try:
        lesson01.softmax_values(rec)
    except AssertionError:
        pass
    return record.encode([rec])


def test_recheck_accepts_a_correct_record_and_rejects_a_forged_one():
    from autograder import reference
    from autograder.verify import VerifyHiddenTests

    blob = _record_softmax_values(reference.softmax)
    assert VerifyHiddenTests.recheck(blob, "lesson01", "softmax_values", ["softmax"]) is None

    blob = _record_softmax_values(lambda x, axis=-1: np.zeros_like(x))
    problem = VerifyHiddenTests.recheck(blob, "lesson01", "softmax_values", ["softmax"])
    assert problem and "recorded results are wrong" in problem


def test_recheck_refuses_a_missing_or_pickled_record():
    import io

    from autograder.verify import VerifyHiddenTests

    assert "left no record" in VerifyHiddenTests.recheck(None, "lesson01", "softmax_values", ["softmax"])
    buffer = io.BytesIO()
    np.savez(buffer, **{"p0:calls": np.array([object()], dtype=object)})
    assert "could not be re-checked" in VerifyHiddenTests.recheck(buffer.getvalue(), "lesson01",
                                                                   "softmax_values", ["softmax"])


def test_records_travel_as_cell_outputs_and_are_removed_after_the_recheck():
    import base64

    import nbformat

    from autograder import reference
    from autograder.checks import record
    from autograder.verify import VerifyHiddenTests

    blob = _record_softmax_values(reference.softmax)
    cell = nbformat.v4.new_code_cell(
        '__import__("autograder.checks.session").checks.session.run("lesson01", "softmax_values", softmax)')
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "softmax_values", "points": 2}
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        record.MIMETYPE: {"test": "softmax_values", "npz": base64.b64encode(blob).decode()}})]
    assert record.from_outputs(cell.outputs, "softmax_values") == blob
    nb = nbformat.v4.new_notebook(cells=[cell])
    VerifyHiddenTests().preprocess(nb, {})
    assert cell.outputs == [], "a good record leaves no error, and the record itself is removed"

    cell.outputs = []
    VerifyHiddenTests().preprocess(nb, {})
    assert [o.ename for o in cell.outputs] == ["NotVerified"]


def test_hidden_inputs_depend_on_the_grading_salt(monkeypatch):
    monkeypatch.setenv("MHA_GRADING_SALT", "1")
    a = runner.rng_for("softmax_values").normal(size=3)
    monkeypatch.setenv("MHA_GRADING_SALT", "2")
    b = runner.rng_for("softmax_values").normal(size=3)
    assert not np.array_equal(a, b)
