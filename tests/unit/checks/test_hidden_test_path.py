"""docs/maintainers.md's path of one hidden test is the path it takes: the modules listed there are the ones whose
code runs while lesson 01's ``softmax_values`` is graded, right and wrong, from the kernel's ``run`` to the verdict
``SafeExecute`` writes into the cell, and there are at most twelve of them."""

from __future__ import annotations

import builtins
import re
import sys
import threading

import nbformat
import pytest

from autograder import bugs, course, reference
from autograder.checks import registry
from autograder.grading.pipeline import execute
from autograder.grading.pipeline.hidden_tests import Session
from autograder.kernel import hidden_cell

SECTION = "## One hidden test, from its source cell to its score"
WRONG_ONLY = "(a wrong answer only)"
MOST = 12


def _documented() -> tuple:
    """(every module the docs list, those listed for a wrong answer only), as dotted names."""
    text = (course.ROOT / "docs" / "maintainers.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION):].split("\n## ", 1)[0]
    listed, wrong_only = [], set()
    for number, path, rest in re.findall(r"^(\d+)\. `(autograder/[^`]+)`(.*)$", section, re.M):
        name = path.removesuffix(".py").removesuffix("/").replace("/", ".")
        listed.append(name)
        if rest.strip().startswith(WRONG_ONLY):
            wrong_only.add(name)
    return listed, wrong_only


def _traced(monkeypatch, softmax) -> list:
    """The course's modules whose functions run while ``softmax_values`` grades ``softmax``, in first-call order."""
    session = Session(registry.find("01_warmup", "softmax_values"))
    monkeypatch.setenv("MHA_HIDDEN_TESTS", "grader")
    monkeypatch.setattr(hidden_cell, "_namespace", lambda: {"softmax": softmax})
    monkeypatch.setattr(builtins, "input", lambda prompt="": session.answer(prompt))
    seen: list = []

    def profile(frame, event, arg):
        module = frame.f_globals.get("__name__", "")
        if event == "call" and module.startswith("autograder") and module not in seen:
            seen.append(module)

    cell = nbformat.v4.new_code_cell('run("softmax_values")')
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        try:
            hidden_cell.run("softmax_values")
        except hidden_cell.HiddenTestFailed:
            pass
        session.close()
        execute.SafeExecute._write_verdict(cell, session, session.verdict())
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return seen


def _module_of(name: str) -> str:
    """A traced module as the docs name it: a package's modules by the package (``autograder.bugs.lesson01``)."""
    return "autograder.bugs" if name.startswith("autograder.bugs") else name


@pytest.mark.parametrize("answer", ["right", "wrong"])
def test_the_documented_path_is_the_path_a_hidden_test_takes(monkeypatch, answer):
    listed, wrong_only = _documented()
    softmax = reference.softmax if answer == "right" else bugs.by_id("softmax_no_keepdims").make()
    ran = {_module_of(m) for m in _traced(monkeypatch, softmax)}
    expected = set(listed) - (wrong_only if answer == "right" else set())
    assert ran == expected, (f"ran but not listed: {sorted(ran - expected)}; "
                             f"listed but not run: {sorted(expected - ran)}")
    assert len(listed) <= MOST


def test_the_docs_count_what_they_list():
    listed, wrong_only = _documented()
    text = (course.ROOT / "docs" / "maintainers.md").read_text(encoding="utf-8")
    words = {10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen", 14: "fourteen"}
    said = f"through {words[len(listed) - len(wrong_only)]} modules to the score nbgrader records ({words[len(listed)]}"
    assert said in " ".join(text.split()), said
