"""The wrong-number signature (``autograder/checks/signature.py``): a digest of what a learner's function gave on a
hidden test's inputs drawn at one fixed salt, so two students graded by different processes can be compared.

The digest is quantised (the same numbers from other code give the same digest, different numbers a different one,
errors alone none); a renamed copy of a wrong softmax that no catalogued bug explains gets its original's signature
at any grading salt, a different wrong softmax another; and the grader's session adds it to the verdict of such a
failure only, changing nothing else, and gives it up when the rerun cannot finish.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest

import grader_session

from autograder import bugs, reference
from autograder.checks import registry, runner, signature
from autograder.checks.runner import Raised
from autograder.checks.signature import digest, signature_of
from autograder.checks.verdict import BUG, PASSED, UNNAMED, Verdict
from autograder.grading.pipeline import hidden_tests
from autograder.grading.pipeline.hidden_tests import Session
from autograder.kernel import hidden_cell
from autograder.kernel.protocol import encode_value
from autograder.proofs import salt_sweep

LESSON = "01_warmup"


# ------------------------------------------------------------------ two wrong softmaxes no catalogued bug explains


def shifted(x, axis=-1):  # softmax, then 0.1 added to every weight
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=axis, keepdims=True) + 0.1


def shifted_renamed(scores, axis=-1):  # the same code: other names, the independent lines in another order
    peak = scores.max(axis=axis, keepdims=True)
    offset = 0.1
    exps = np.exp(scores - peak)
    total = exps.sum(axis=axis, keepdims=True)
    return exps / total + offset


def damped(x, axis=-1):  # one more in the denominator: every row sums to less than 1
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / (e.sum(axis=axis, keepdims=True) + 1.0)


WRONG = {"shifted": shifted, "shifted_renamed": shifted_renamed, "damped": damped}


# ------------------------------------------------------------------ the digest


def test_the_same_results_give_the_same_digest_and_other_numbers_another():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(3, 4))
    results = [a, (a[0], 2.5), Raised(ValueError("x"))]
    assert digest(results) == digest([a.copy(), (a[0].copy(), 2.5), Raised(ValueError("other words"))])
    assert len(digest(results)) == signature.LENGTH and int(digest(results), 16) >= 0
    assert digest([a * (1 + 1e-9)]) == digest([a])  # beyond the 4th significant digit: rounding, not a difference
    assert digest([a * (1 + 3e-3)]) != digest([a])  # at the 3rd or 4th: other numbers
    assert digest([0.12341]) == digest([0.123412]) != digest([0.1244])
    assert digest([a]) != digest([a.T]) != digest([a.reshape(4, 3)])  # the shape counts
    assert digest([a, 1.0]) != digest([1.0, a])  # and the order
    assert digest([Raised(ValueError("x")), a]) != digest([Raised(TypeError("x")), a])  # an error by its type


def test_errors_alone_or_nothing_give_no_digest():
    assert digest([]) is None
    assert digest([Raised(ValueError("a")), Raised(IndexError("b"))]) is None
    assert digest([Raised(ValueError("a")), None]) is not None


def test_float32_and_float64_with_equal_values_give_one_digest():
    x32 = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)
    assert digest([x32]) == digest([x32.astype(np.float64)])
    assert digest([np.float32(0.75)]) == digest([0.75]) == digest([np.float64(0.75)])
    assert digest([x32]) != digest([x32.astype(np.int64)])  # the dtype's kind counts


def test_ints_and_bools_are_exact_and_special_floats_kept_apart():
    assert digest([10_001]) != digest([10_002])
    assert digest([True]) != digest([1])
    assert digest([np.array([1, 2])]) != digest([np.array([True, False])])
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-300, 5e-324])
    assert digest([special]) == digest([special.copy()])
    assert digest([np.array([np.nan])]) != digest([np.array([np.inf])]) != digest([np.array([-np.inf])])
    assert digest([np.array([0.0, 1.0])]) == digest([np.array([-0.0, 1.0 + 1e-14])])
    assert digest([np.array([1e-17, 1.0])]) == digest([np.array([-3e-17, 1.0])])  # noise beside 1 is 0
    assert digest([1e-17]) != digest([-3e-17])  # a number on its own is its own scale


def test_nested_results_are_compared_element_by_element():
    a = np.arange(6.0).reshape(2, 3) / 7
    first = ({"weights": a, "out": (1, 2.0)}, [a[0], None])
    assert digest([first]) == digest([({"out": (1, 2.0), "weights": a.copy()}, [a[0].copy(), None])])
    assert digest([first]) != digest([({"weights": a, "out": (1, 2.5)}, [a[0], None])])
    assert digest([first]) != digest([({"weights": a, "out": [1, 2.0]}, [a[0], None])])  # a list is no tuple
    assert digest([object()]) == digest([object()])  # anything else: its type
    assert digest([object()]) != digest(["text"])


# ------------------------------------------------------------------ the salt and the recording


def test_recording_fixes_the_salt_in_this_thread_only_and_records_each_result(monkeypatch):
    monkeypatch.setenv("MHA_GRADING_SALT", "123")
    before = runner.rng_for("t").random()
    seen = {}
    with signature.recording() as recorded:
        inside = runner.rng_for("t").random()
        thread = threading.Thread(target=lambda: seen.setdefault("other", runner.rng_for("t").random()))
        thread.start()
        thread.join()
        case = runner.Case((np.array([1.0, 2.0]),))
        runner._attempt(lambda x: x * 2, case, "f")
        runner._attempt(lambda x: x[5], case, "f")
    assert runner.rng_for("t").random() == before == seen["other"]  # outside, and in another thread: the env's salt
    monkeypatch.setenv("MHA_GRADING_SALT", "456")
    with signature.recording():
        assert runner.rng_for("t").random() == inside != before
    assert len(recorded) == 2 and np.array_equal(recorded[0], [2.0, 4.0])
    assert isinstance(recorded[1], Raised) and type(recorded[1].error) is IndexError


# ------------------------------------------------------------------ in this process, on a real hidden test


@pytest.mark.parametrize("grade_id", ["softmax_values", "softmax_stable"])
@pytest.mark.parametrize("name", sorted(WRONG))
def test_the_wrong_softmaxes_are_failures_no_catalogued_bug_explains(name, grade_id):
    test = registry.find(LESSON, grade_id)
    for salt in (0, 1, 2):
        ended = salt_sweep.verdict_of(test, {"softmax": WRONG[name]}, {"softmax": WRONG[name]}, salt)
        assert (ended.result, ended.bug, ended.uncatalogued) == (UNNAMED, None, True), ended.message
    assert bugs.for_function("softmax")  # the catalogue the verdict searched is not empty


@pytest.mark.parametrize("grade_id", ["softmax_values", "softmax_stable"])
def test_a_renamed_copy_shares_the_signature_at_every_grading_salt(monkeypatch, grade_id):
    test = registry.find(LESSON, grade_id)
    found = {}
    for salt in ("0", "77", "9182736455"):
        monkeypatch.setenv("MHA_GRADING_SALT", salt)
        found[salt] = {name: signature_of(test, {"softmax": fn}) for name, fn in WRONG.items()}
    first = found["0"]
    assert all(signatures == first for signatures in found.values())  # the grading salt changes nothing
    assert first["shifted"] == first["shifted_renamed"] != first["damped"]
    assert None not in first.values()
    monkeypatch.setenv("MHA_GRADING_SALT", "0")
    assert signature_of(test, {"softmax": reference.softmax}) not in first.values()  # passing there: its own digest


def test_a_run_that_cannot_end_as_a_test_ends_has_no_signature():
    def broken(values):
        runner._attempt(values["softmax"], runner.Case((np.ones(3),)), "softmax")
        raise RuntimeError("the test could not use the result")

    assert signature_of(broken, {"softmax": shifted}) is None

    def only_errors(x, axis=-1):
        raise ValueError("no")

    assert signature_of(registry.find(LESSON, "softmax_values"), {"softmax": only_errors}) is None


# ------------------------------------------------------------------ in the grader's session


def _graded(monkeypatch, grade_id: str, softmax) -> Verdict:
    """Grade lesson 01's ``grade_id`` with the kernel's side run here on ``softmax``, as ``SafeExecute`` does."""
    return grader_session.run(monkeypatch, LESSON, grade_id, {"softmax": softmax}).verdict()


@pytest.mark.parametrize("name", sorted(WRONG))
def test_the_session_signs_an_uncatalogued_failure_and_changes_nothing_else(monkeypatch, name):
    monkeypatch.setenv("MHA_GRADING_SALT", "31")
    signed = _graded(monkeypatch, "softmax_values", WRONG[name])
    monkeypatch.setattr(hidden_tests, "SIGNATURE_SECONDS", -1.0)  # no rerun: the verdict as it was without one
    unsigned = _graded(monkeypatch, "softmax_values", WRONG[name])
    assert unsigned.signature is None and signed.signature is not None
    assert dataclasses.replace(signed, signature=None) == unsigned
    # through the kernel's channel, the same digest as in this process
    assert signed.signature == signature_of(registry.find(LESSON, "softmax_values"), {"softmax": WRONG[name]})


def test_the_session_signs_nothing_else(monkeypatch):
    def raises(x, axis=-1):
        return x[100]

    assert _graded(monkeypatch, "softmax_values", reference.softmax) == Verdict(PASSED)
    ended = _graded(monkeypatch, "softmax_stable", bugs.by_id("softmax_no_max_subtraction").make())
    assert ended.result == BUG and ended.signature is None
    ended = _graded(monkeypatch, "softmax_values", raises)
    assert (ended.result, ended.raised, ended.signature) == (UNNAMED, "IndexError", None)


def test_a_rerun_whose_kernel_goes_away_leaves_the_verdict_unsigned(monkeypatch):
    monkeypatch.setenv("MHA_GRADING_SALT", "31")
    first = _graded(monkeypatch, "softmax_values", shifted)
    calls = []
    session_of = {}
    original = Session.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        session_of["it"] = self

    def dying(x, axis=-1):
        calls.append(1)
        if len(calls) > 5:  # the first run's five calls are done: the rerun's first call ends the cell
            session_of["it"].close()
        return shifted(x, axis)

    monkeypatch.setattr(Session, "__init__", init)
    ended = _graded(monkeypatch, "softmax_values", dying)
    assert ended.signature is None
    assert (ended.result, ended.uncatalogued, ended.bug, ended.raised) == (first.result, True, None, None)
    assert ended.message.endswith(first.message.split("The hidden tests found:", 1)[1])


def test_a_rerun_starts_no_call_after_its_time(monkeypatch):
    monkeypatch.setenv("MHA_GRADING_SALT", "31")
    monkeypatch.setattr(hidden_tests, "SIGNATURE_SECONDS", 1.5)
    calls = []

    def slow_later(x, axis=-1):
        calls.append(1)
        if len(calls) > 5:
            time.sleep(1.6)  # the rerun's first call outlasts its time
        return shifted(x, axis)

    ended = _graded(monkeypatch, "softmax_values", slow_later)
    assert (ended.result, ended.uncatalogued, ended.signature) == (UNNAMED, True, None)
    assert len(calls) <= 6  # the first run's five calls, and at most the one the rerun had started


def test_the_signature_travels_whole_in_the_execution_report_and_only_as_text():
    signed = Verdict(UNNAMED, uncatalogued=True, message="m", signature="0123456789abcdef")
    assert Verdict.from_json(signed.to_json()) == signed
    assert Verdict.from_json({"result": UNNAMED}).signature is None  # a report written before signatures
    with pytest.raises(ValueError):
        Verdict.from_json({"result": UNNAMED, "signature": 12})


def test_what_the_learner_prints_shows_once_the_rerun_prints_nothing(monkeypatch, capsys):
    monkeypatch.setenv("MHA_GRADING_SALT", "31")
    asked = []
    kernel_call = hidden_cell._call

    def recorded(namespace, message):
        asked.append(message.get("quiet"))
        return kernel_call(namespace, message)

    monkeypatch.setattr(hidden_cell, "_call", recorded)
    assert _graded(monkeypatch, "softmax_values", shifted).signature is not None
    assert asked == [None] * 5 + [True] * 5  # the first run's five calls, then the rerun's

    def chatty(x, axis=-1):
        print("debugging softmax")
        return x

    capsys.readouterr()
    for quiet, shown in ((False, 1), (True, 0)):
        kernel_call({"softmax": chatty}, {"name": "softmax", "args": [encode_value(1)], "quiet": quiet})
        assert capsys.readouterr().out.count("debugging softmax") == shown
