"""No message a learner can read hands out a complete line of the model solution.

Answer lines: every code line of every solution cell in ``solutions/`` (the model answers), with its comment
removed, and, for ``return EXPR`` and ``name = EXPR`` lines, EXPR alone; a line the student notebook already hands
out (the starting code of a find-the-bug exercise, autograder/publish/given_code.py) is no answer. Messages: every catalogued bug's
diagnosis, and every string the hidden checks (``autograder/checks/``) and the visible self-checks
(``solutions/selfcheck_*.py``) can show. A message names the mistake and the idea to revisit, never the line.
"""

import ast
import functools
import re

import pytest

from autograder.course import answers
from autograder import bugs, course
from autograder.publish import given_code

MIN_LENGTH = 15  # shorter pieces (`d_k`, `weights @ V`) are vocabulary, not an answer; so is a bare list of names


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


@functools.lru_cache(maxsize=None)
def _docstring_lines(source: str) -> set:
    """The line numbers of the docstrings of a cell's functions."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str):
            lines.update(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    return lines


def answer_lines() -> dict:
    """{squashed answer line: (lesson, the line as written)}."""
    found = {}
    for lesson in course.lesson_names():
        handed_out = {_squash(line.split("  #")[0]) for b in given_code.given_bugs(lesson)
                      for line in b.source.splitlines()}
        for source in answers.model_answers(lesson).values():
            try:
                ast.parse(source)
            except SyntaxError:  # a written answer, not code
                continue
            shown = _docstring_lines(source)  # the learner sees a function's docstring: not an answer
            for number, raw in enumerate(source.splitlines(), start=1):
                if number in shown:
                    continue
                line = raw.split("  #")[0].strip()
                if not line or line.startswith(("#", "def ", '"""', "if ", "for ", "else", "raise ")):
                    continue
                pieces = {line}
                m = re.match(r"^(?:return\s+|[\w, \[\]\.]+?\s*[-+*/]?=\s*)(.+)$", line)
                if m:
                    pieces.add(m.group(1))
                if _squash(line) in handed_out:
                    continue
                for piece in pieces:
                    if len(_squash(piece)) >= MIN_LENGTH and re.search(r"[(\[@*/+-]", piece):
                        found[_squash(piece)] = (lesson, line)
    return found


def _strings(path) -> list:
    """Every string literal of a module, f-strings with their fields written as {}."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.JoinedStr):
            out.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
    return out


@functools.lru_cache(maxsize=None)
def messages() -> list:
    """(where, text) of every message a learner may read."""
    found = [(f"bug {b.id}", b.diagnosis) for b in bugs.CATALOG]
    root = course.SOLUTIONS.parent
    modules = sorted((root / "autograder" / "checks").glob("*.py")) + sorted(course.SOLUTIONS.glob("selfcheck_*.py"))
    for path in modules:
        for text in _strings(path):
            if not text.lstrip().startswith(("def ", "\n    def ")):  # a docstring of code is not shown
                found.append((str(path.relative_to(root)), text))
    return found


def test_the_answer_lines_are_found():
    lines = answer_lines()
    assert _squash("np.swapaxes(pieces, -3, -2)") in lines  # lesson 02's split_heads, its expression
    assert _squash("joined @ W_O") not in lines  # too short to give anything away
    assert _squash("Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)") in lines  # lesson 04's multi_head_scores
    assert _squash("d_model // n_heads") not in lines  # lesson 05 hands it out in attention_layer's given code
    assert len(lines) > 40


def test_the_messages_are_found():
    texts = [t for _, t in messages()]
    assert any("[" not in t and "blocked" in t for t in texts)
    assert len([w for w, _ in messages() if w.startswith("bug ")]) == len(bugs.CATALOG)


@pytest.mark.parametrize("lesson", sorted({b.lesson for b in bugs.CATALOG}))
def test_no_diagnosis_or_check_message_contains_an_answer_line(lesson):
    lines = answer_lines()
    leaks = []
    for where, text in messages():
        mine = ((where.startswith("bug ") and bugs.by_id(where[4:]).lesson == lesson)
                or course.lesson_number(lesson) in where)
        if not mine:
            continue
        squashed = _squash(text)
        for line, (origin, written) in lines.items():
            if line in squashed:
                leaks.append(f"{where}: {written!r} (an answer line of {origin}) in {text[:120]!r}")
    assert not leaks, "\n".join(leaks)
