"""The hidden-test channel on its own: the kernel side (``autograder/kernel/hidden_cell.py``) talking to the grader side
(``autograder/grading/pipeline/hidden_tests.py``) in one process, the kernel's ``input()`` answered by ``Session.answer``.

The real thing runs over a kernel's stdin channel (tests/test_grading_*.py, tests/grading/test_tamper.py); here each
step of the protocol is checked directly: a verdict the kernel cannot fake, helpers answered by the grader, a
changed input seen by the test, a learner's error reported with the learner's own frames only.
"""

from __future__ import annotations

import builtins
import json

import numpy as np
import pytest

from autograder.kernel import hidden_cell, protocol
from autograder import reference
from autograder.bugs import by_id
from autograder.checks import registry
from autograder.grading.pipeline.hidden_tests import Session


def _grade(monkeypatch, lesson, grade_id, namespace, forge=None):
    """Run ``hidden_cell.run`` against a grader session; ``forge`` may rewrite the kernel's messages."""
    session = _grade.session = Session(registry.find(lesson, grade_id))
    monkeypatch.setenv("MHA_HIDDEN_TESTS", "grader")
    monkeypatch.setattr(hidden_cell, "_namespace", lambda: namespace)
    monkeypatch.setattr(builtins, "input", lambda prompt="": session.answer(forge(prompt) if forge else prompt))
    try:
        hidden_cell.run(grade_id)
    except hidden_cell.HiddenTestFailed:
        assert not session.verdict().passed, "the kernel stopped a cell the grader passed"
    finally:
        session.close()
    ended = session.verdict()
    return ended.passed, ended.message


def test_a_correct_function_passes_and_its_visible_check_gives_way(monkeypatch, capsys):
    ns = {"softmax": reference.softmax, "check_softmax": "the visible check"}
    assert _grade(monkeypatch, "01_warmup", "softmax_values", ns) == (True, None)
    assert ns["check_softmax"] != "the visible check" and hidden_cell.PASSED in capsys.readouterr().out


def test_a_catalogued_bug_fails_with_its_diagnosis(monkeypatch):
    bug = by_id("softmax_no_max_subtraction")
    ns = {}
    exec(bug.source, {"np": np}, ns)
    passed, message = _grade(monkeypatch, "01_warmup", "softmax_stable", ns)
    assert not passed and bug.id in message


def test_the_outcome_kept_for_the_instructor_names_the_bug_the_grader_found(monkeypatch):
    bug = by_id("softmax_no_max_subtraction")
    ns = {}
    exec(bug.source, {"np": np}, ns)
    _grade(monkeypatch, "01_warmup", "softmax_stable", ns)
    assert _grade.session.verdict().bug == bug.id
    _grade(monkeypatch, "01_warmup", "softmax_values", {"softmax": reference.softmax},
           lambda prompt: "{not json" if json.loads(prompt)["op"] == "result" else prompt)
    assert _grade.session.verdict().result == "interfered"


def test_helpers_are_answered_by_the_grader(monkeypatch):
    """attention graded with the reference softmax: a wrong softmax in the notebook costs nothing here."""
    calls = []

    def wrong_softmax(x, axis=-1):
        calls.append(1)
        return np.zeros_like(x)

    def attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]).astype(Q.dtype)
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores)  # noqa: F821 - looked up in this module, where the test binds it
        weights = np.where(np.isnan(weights), 0.0, weights).astype(Q.dtype)
        return weights @ V, weights

    ns = {"softmax": wrong_softmax}
    attention.__globals__["softmax"] = wrong_softmax  # the learner's namespace is this module's here
    ns["scaled_dot_product_attention"] = attention
    passed, message = _grade(monkeypatch, "01_warmup", "attention_values", ns)
    assert passed, message
    assert calls == [], "the notebook's own softmax ran while its attention was graded"


def test_a_changed_input_is_seen_by_the_test(monkeypatch):
    def softmax(x, axis=-1):
        x -= x.max(axis=axis, keepdims=True)
        np.exp(x, out=x)
        x /= x.sum(axis=axis, keepdims=True)
        return x

    passed, message = _grade(monkeypatch, "01_warmup", "softmax_values", {"softmax": softmax})
    assert not passed and "in place" in message


def test_a_learners_error_is_reported_with_the_learners_frames_only(monkeypatch):
    source = "def softmax(x, axis=-1):\n    return x / undefined_name\n"
    ns = {"np": np}
    exec(compile(source, "/tmp/ipykernel_1/123.py", "exec"), ns)
    passed, message = _grade(monkeypatch, "01_warmup", "softmax_values", ns)
    assert not passed and "NameError" in message and "undefined_name" in message
    assert "autograder" not in message and "hidden_cell" not in message


def test_an_undefined_function_fails_the_test(monkeypatch):
    passed, message = _grade(monkeypatch, "01_warmup", "softmax_values", {})
    assert not passed and "softmax" in message


@pytest.mark.parametrize("forgery", ["claims_done", "garbage", "wrong_results"])
def test_the_kernel_cannot_talk_its_way_to_a_pass(monkeypatch, forgery):
    def forge(prompt):
        message = json.loads(prompt)
        if forgery == "claims_done" and message["op"] == "ready":
            return json.dumps({"op": "done", "passed": True})
        if forgery == "garbage" and message["op"] == "result":
            return "{not json"
        if forgery == "wrong_results" and message["op"] == "result":
            message["value"] = protocol.encode_value(np.zeros(3))
            return json.dumps(message)
        return prompt

    passed, _ = _grade(monkeypatch, "01_warmup", "softmax_values", {"softmax": reference.softmax}, forge)
    assert passed is False


def test_values_cross_the_channel_without_pickle():
    for value in [np.arange(6.0).reshape(2, 3).astype(np.float32), np.array([True, False]), 3, 2.5, "b", None,
                  (1, np.ones(2)), [1, 2], {"x": np.zeros(1)}, float("nan"), np.float32(1.5)]:
        back = protocol.decode_value(json.loads(json.dumps(protocol.encode_value(value))))
        assert type(back) is type(value) or isinstance(value, np.generic)
    assert isinstance(protocol.decode_value(protocol.encode_value(object())), protocol.Unrecordable)
    with pytest.raises(ValueError):
        protocol.decode_value({"array": "bm90IGFuIG5weQ=="})  # not an .npy


def test_every_graded_cell_has_exactly_one_registered_test_and_every_test_is_used():
    from autograder import course
    from autograder.course import notebooks

    cells = set()
    for source in course.lesson_sources():
        lesson = source.stem
        for cell in notebooks.read_source(source).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade") and cell.cell_type == "code" and meta.get("points", 0) > 0:
                assert registry.find(lesson, meta["grade_id"]) is not None, meta["grade_id"]
                assert cell.source.count("hidden_cell.run(") == 1
                cells.add((lesson, meta["grade_id"]))
    assert set(registry.all_tests()) == cells


# ------------------------------------------------------------------ helpers the grader answers, within a budget

class _Bound:
    """What ``Session._helper`` reads of the learner's function: the helpers bound to it."""

    def __init__(self, **helpers):
        self._stand_ins = helpers


@pytest.mark.parametrize("name, args", [
    ("causal_mask", [30_000]),  # 900 million cells
    ("sinusoidal_positions", [200_000, 4_096]),
    ("alibi_bias", [64, 20_000]),
])
def test_a_helper_asked_for_more_than_the_kernel_may_hold_refuses_without_building_it(name, args):
    """The grader computes a bound helper in its own process: sizes past the kernel's memory limit (64 MB here)
    raise ``StandInTooLarge`` (a refusal: the calling function fails whatever it does with the error) and the
    grader's resident memory does not grow by the array it was asked for."""
    import resource

    from autograder import reference
    from autograder.grading.pipeline import hidden_tests
    from autograder.kernel.protocol import encode_value

    session = hidden_tests.Session(test=None, memory_limit=64 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    reply = session._stand_in(_Bound(**{name: getattr(reference, name)}),
                            {"name": name, "args": [encode_value(a) for a in args], "kwargs": {}})
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - before
    assert reply["op"] == "stand_in_raised" and reply["type"] == "StandInTooLarge", reply
    assert f"{name} was called with sizes whose result would not fit in 64 MB" in reply["message"]
    assert [type(r).__name__ for r in session._refusals] == ["StandInTooLarge"]
    assert grown < 80 << 20, grown
    honest = session._stand_in(_Bound(causal_mask=reference.causal_mask),
                             {"name": "causal_mask", "args": [encode_value(16)], "kwargs": {}})
    assert honest["op"] == "stand_in_result"
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY  # the grader's own limit is back


def _said_by_self_check(monkeypatch, cell: str, namespace: dict) -> str:
    import types

    import IPython

    from autograder.kernel import hidden_cell

    shell = types.SimpleNamespace(history_manager=types.SimpleNamespace(input_hist_raw=[cell]))
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    return hidden_cell._self_check_verdict(namespace)


def test_a_test_cell_without_a_self_check_never_says_the_learner_s_self_check_was_not_run(monkeypatch):
    """Lesson 02's output_projection is checked in its own cell; its test cell holds only the hidden line. The
    message once said "Your self-check was not run" of a check that ran and passed."""
    cell = ("### BEGIN HIDDEN TESTS\n__import__('x')\n### END HIDDEN TESTS\n"
            "# Hidden tests of output_projection run here\n")
    said = _said_by_self_check(monkeypatch, cell, {})
    assert "not run" not in said and "no self-check of its own" in said
    checked = cell + "assert 1 == 2, 'the heads are joined in the wrong order'\n"
    assert _said_by_self_check(monkeypatch, checked, {}) == (
        "Your self-check says: the heads are joined in the wrong order")


def test_a_learner_function_warning_on_the_grader_s_inputs_prints_nothing_into_its_cell():
    """A NaN gradient (lesson 07's hidden test sends one) makes numpy warn "invalid value encountered"; printed on
    the cell's stderr, nbgrader scored the cell 0 though the function was right (the model answer's canary lost
    2 points so)."""
    import warnings

    import numpy as np

    from autograder.kernel import hidden_cell
    from autograder.kernel.protocol import decode_value, encode_value

    namespace = {"np": np}
    exec("def ratio(a, b):\n    return np.float64(a) / np.float64(b)\n", namespace)
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="warn"):
        warnings.simplefilter("always")
        reply = hidden_cell._call(namespace, {"name": "ratio", "args": [encode_value(0.0), encode_value(0.0)]})
        assert reply["op"] == "result" and np.isnan(decode_value(reply["value"]))
        assert caught == []
        namespace["ratio"](0.0, 0.0)  # the check can fail: the same call outside the grader's call warns
        assert [str(w.message) for w in caught] == ["invalid value encountered in scalar divide"]


def test_a_helper_call_larger_than_the_grader_reads_fails_at_once_in_the_kernel(monkeypatch):
    """The grader's socket drops a message over MAX_MESSAGE, and a kernel that sent one would wait for its reply until
    the cell's time limit: the kernel refuses to send it and raises MemoryError in the learner's function, which a
    memory test reads as 'ran out of memory'."""
    sent = []
    monkeypatch.setattr(builtins, "input", lambda prompt="": sent.append(prompt) or "{}")
    big = np.zeros((protocol.MAX_MESSAGE // 8) * 3 // 4 + 1)  # base64 makes it longer than MAX_MESSAGE
    with pytest.raises(MemoryError, match=r"split_heads was called with \d+ MB"):
        hidden_cell._StandIn("split_heads")(big, 2)
    assert sent == []
    monkeypatch.setattr(builtins, "input", lambda prompt="": sent.append(len(prompt)) or json.dumps(
        {"op": "stand_in_result", "value": protocol.encode_value(1.0)}))
    assert hidden_cell._StandIn("split_heads")(big[: len(big) // 2], 2) == 1.0  # under the limit: sent
    assert sent and sent[0] <= protocol.MAX_MESSAGE
