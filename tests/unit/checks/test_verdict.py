"""The typed verdict of a hidden test: made where the test runs, carried as data, never read back out of a message.

A grader session's verdict names the bug, the error raised and the undefined name the test decided on; the same
failure with every message reworded records the same; the execution report carries it through the graded
notebook's JSON unchanged; what the notebook could have written there instead is refused, not trusted.
"""

from __future__ import annotations


import nbformat
import numpy as np
import pytest

import grader_session

from autograder import bugs, reference
from autograder.checks.verdict import BUG, NOT_RUN, PASSED, UNANSWERED, UNNAMED, Verdict, WrongAnswer
from autograder.grading.records import items
from autograder.grading.pipeline import execute


def _verdict(monkeypatch, grade_id: str, namespace: dict) -> Verdict:
    """Grade lesson 01's ``grade_id`` with the kernel's side run on ``namespace``, as ``SafeExecute`` does."""
    return grader_session.run(monkeypatch, "01_warmup", grade_id, namespace).verdict()


def _reworded(monkeypatch):
    """Every message a hidden test writes replaced by one that names nothing."""
    original = WrongAnswer.__init__

    def init(self, message, **kwargs):
        original(self, "something is wrong", **kwargs)

    monkeypatch.setattr(WrongAnswer, "__init__", init)


@pytest.mark.parametrize("reword", [False, True])
def test_a_catalogued_bug_is_named_by_the_test_whatever_the_message_says(monkeypatch, reword):
    bug = bugs.by_id("softmax_no_max_subtraction")
    if reword:
        _reworded(monkeypatch)
    ended = _verdict(monkeypatch, "softmax_stable", {"softmax": bug.make()})
    assert (ended.result, ended.bug) == (BUG, bug.id)
    assert (f"[{bug.id}]" in ended.message) is not reword


@pytest.mark.parametrize("reword", [False, True])
def test_an_error_the_code_raised_and_the_name_it_lacked_are_fields(monkeypatch, reword):
    def softmax(x, axis=-1):
        return helper_never_defined(x)  # noqa: F821 - the learner's slip

    if reword:
        _reworded(monkeypatch)
    ended = _verdict(monkeypatch, "softmax_values", {"softmax": softmax})
    assert (ended.result, ended.bug, ended.raised, ended.undefined) == (UNNAMED, None, "NameError",
                                                                         "helper_never_defined")


def test_the_untouched_stub_is_unanswered_and_a_right_answer_passes(monkeypatch):
    def stub(x, axis=-1):
        raise NotImplementedError()

    assert _verdict(monkeypatch, "softmax_values", {"softmax": stub}).result == UNANSWERED
    assert _verdict(monkeypatch, "softmax_values", {"softmax": reference.softmax}) == Verdict(PASSED)


def test_an_unexplained_difference_carries_the_self_checks_word_first(monkeypatch):
    ended = _verdict(monkeypatch, "softmax_values", {"softmax": lambda x, axis=-1: np.asarray(x) * 0.5})
    assert ended.result == UNNAMED and ended.uncatalogued
    assert ended.message.index("The hidden tests found:") > 0


def test_the_execution_report_carries_verdicts_through_the_notebook_json():
    report = execute.ExecutionReport(["memory limit: x"], {
        "a": Verdict(BUG, bug="softmax_no_max_subtraction", message="m"),
        "b": Verdict(UNNAMED, raised="NameError", undefined="f", uncatalogued=True, message="x" * 10_000),
        "c": Verdict(NOT_RUN)})
    nb = nbformat.v4.new_notebook()
    nb.metadata[execute.REPORT_KEY] = report.to_json()
    back = execute.execution_report(nbformat.reads(nbformat.writes(nb), as_version=4))
    assert back.sandbox_events == report.sandbox_events
    assert back.verdicts["a"] == report.verdicts["a"] and back.verdicts["c"] == report.verdicts["c"]
    assert back.verdicts["b"].raised == "NameError" and len(back.verdicts["b"].message) == 4000


@pytest.mark.parametrize("data", [{"result": "passed!"}, {"result": "passed", "bug": "x"}, {"result": "bug"},
                                  {"result": "unnamed", "raised": 3}, ["passed"]])
def test_a_verdict_that_is_not_one_is_refused(data):
    with pytest.raises(ValueError):
        Verdict.from_json(data)


def _graded_cell(ename: str, evalue: str):
    cell = nbformat.v4.new_code_cell("run()")
    cell.metadata["nbgrader"] = {"grade_id": "t", "grade": True}
    cell.outputs = [execute.error_output(ename, evalue)]
    return cell


def test_the_failure_is_named_from_the_verdict_not_the_message():
    answer = nbformat.v4.new_code_cell("def helper(:")
    answer.metadata["nbgrader"] = {"grade_id": "a", "solution": True}
    answer.outputs = [execute.error_output("SyntaxError", "invalid syntax")]
    test = _graded_cell(execute.WRONG_ANSWER, "softmax raised ValueError: forged words")
    nb = nbformat.v4.new_notebook(cells=[answer, test])
    cells = {"a": answer, "t": test}
    said = Verdict(UNNAMED, raised="TypeError", message="anything")
    assert items.failure_name(nb, cells, "t", {}, "wrong result", said) == "TypeError"
    assert items.failure_name(nb, cells, "t", {}, "wrong result", Verdict(UNNAMED, message="x raised ValueError: ")) \
        == "wrong result"
    lacked = Verdict(UNNAMED, raised="NameError", undefined="helper")
    assert items.failure_name(nb, cells, "t", {"helper": "a"}, "wrong result", lacked) == "SyntaxError"
