"""Lessons 02, 05 and 06 each have one paste cell for functions written in earlier lessons, checked right after it
by those lessons' self-checks; a wrong pasted function is reported as "This comes from your lesson NN", both by
that check and by a later check that fails because of it. No kernel: the self-check modules are called directly.
"""

from __future__ import annotations

import ast
import sys

import numpy as np
import pytest

from autograder import course
from autograder.course import notebooks

PASTE_LESSONS = {"02_multi_head": "01", "05_exercises": "01", "06_going_further": "01"}
# Pasted functions whose model answer may differ from their lesson's: lesson 06 pastes no output_projection, so
# its multi_head_attention ends in concat_heads(heads) @ W_O instead.
OWN_MODEL_ANSWER = {("06_going_further", "multi_head_attention")}


def model_answers(lesson):
    """{function name: the lines between BEGIN and END SOLUTION} for every function the lesson's solution defines."""
    answers = {}
    for cell in notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells:
        if cell.cell_type != "code" or "### BEGIN SOLUTION" not in cell.source:
            continue
        lines = cell.source.splitlines()
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.FunctionDef):
                body = lines[node.lineno - 1:]  # the closing comment lies after the function's last statement
                begin = [i for i, line in enumerate(body) if line.strip() == "### BEGIN SOLUTION"]
                end = [i for i, line in enumerate(body) if line.strip() == "### END SOLUTION"]
                if begin and end and begin[0] < node.end_lineno - node.lineno + 1:
                    answers[node.name] = body[begin[0] + 1:end[0]]
    return answers


def wrong_softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=0, keepdims=True)  # the bug: normalises along the first axis


def unscaled_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2)  # (..., T_q, T_k); the bug: no division by sqrt(d_k)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ V, weights


@pytest.mark.parametrize("lesson", course.lesson_names())
def test_one_paste_cell_checked_right_after_it(lesson):
    cells = notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells
    paste = [i for i, c in enumerate(cells) if c.cell_type == "code" and c.source.startswith("# PASTE CELL:")]
    if lesson not in PASTE_LESSONS:
        assert paste == []
        return
    assert len(paste) == 1, f"{lesson} needs exactly one cell marked '# PASTE CELL:'"
    defined = [f.name for f in ast.parse(cells[paste[0]].source).body if isinstance(f, ast.FunctionDef)]
    check = next(c for c in cells[paste[0] + 1:] if c.cell_type == "code")
    calls = [n for n in ast.walk(ast.parse(check.source)) if isinstance(n, ast.Call)
             and getattr(n.func, "id", None) == "check_pasted"]
    assert len(calls) == 1 and [k.arg for k in calls[0].keywords] == defined, \
        f"the cell after {lesson}'s paste cell must run check_pasted on every function it holds: {defined}"
    assert "paste cell" in cells[paste[0] - 1].source.lower(), "the markdown before it names the paste cell"


@pytest.mark.parametrize("lesson", sorted(PASTE_LESSONS))
def test_a_paste_cells_model_answer_is_the_earlier_lessons_model_answer(lesson):
    """The solution notebook pastes what a learner who finished the earlier lessons has: their model answers, line
    for line (a weaker pasted softmax fails lesson 01's self-check in the paste cell's check)."""
    cells = notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells
    paste = next(c.source for c in cells if c.cell_type == "code" and c.source.startswith("# PASTE CELL:"))
    pasted = [f.name for f in ast.parse(paste).body if isinstance(f, ast.FunctionDef)]
    earlier = {**model_answers("01_warmup"), **model_answers("02_multi_head")} if lesson != "02_multi_head" \
        else model_answers("01_warmup")
    here = model_answers(lesson)
    compared = [name for name in pasted if (lesson, name) not in OWN_MODEL_ANSWER]
    assert compared, f"{lesson}'s paste cell defines no function"
    for name in compared:
        assert here[name] == earlier[name], f"{lesson}'s pasted {name} differs from its earlier lesson's model answer"


@pytest.mark.parametrize("module, lesson", [("selfcheck_02", "01"), ("selfcheck_05", "01"), ("selfcheck_06", "01")])
def test_a_wrong_pasted_function_is_reported_as_coming_from_its_lesson(module, lesson):
    sc = course.import_selfcheck(module)
    with pytest.raises(AssertionError, match=f"^This comes from your lesson {lesson}: `softmax`, pasted"):
        sc.check_pasted(softmax=wrong_softmax)


def test_lesson_02_paste_check_names_lesson_02_for_a_pasted_split_heads():
    sc = course.import_selfcheck("selfcheck_06")
    no_transpose = lambda x, n_heads: x.reshape(*x.shape[:-2], n_heads, x.shape[-2], x.shape[-1] // n_heads)  # noqa
    with pytest.raises(AssertionError, match="^This comes from your lesson 02: `split_heads`"):
        sc.check_pasted(split_heads=no_transpose)


def test_a_later_check_blames_the_pasted_function_it_uses(monkeypatch):
    """Lesson 02's layer check fails because the pasted attention does not scale: the message says it comes from
    lesson 01, and says nothing of the kind when the pasted attention is right."""
    sc = course.import_selfcheck("selfcheck_02")
    reference = __import__("autograder.reference", fromlist=["x"])
    notebook = sys.modules["__main__"]
    attention = {"fn": unscaled_attention}

    def layer(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        def heads(W):
            return reference.split_heads(x @ W, n_heads)  # (..., n_heads, T, d_head)
        out, weights = attention["fn"](heads(W_Q), heads(W_K), heads(W_V), mask)
        return reference.concat_heads(out) @ W_O, weights

    monkeypatch.setattr(notebook, "scaled_dot_product_attention", unscaled_attention, raising=False)
    with pytest.raises(AssertionError, match="^This comes from your lesson 01: `scaled_dot_product_attention`"):
        sc.check_multi_head_attention(layer)
    attention["fn"] = reference.scaled_dot_product_attention
    monkeypatch.setattr(notebook, "scaled_dot_product_attention", reference.scaled_dot_product_attention)
    sc.check_multi_head_attention(layer)  # passes: nothing to blame
