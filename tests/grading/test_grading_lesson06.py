"""Lesson 06 graded for real: one nbgrader autograde over a completed, an untouched and one submission per
catalogued lesson-06 bug (plus a tiled attention that builds the full matrix and claims it used no memory, and
functions that hand their work on, ``tests/helpers/handed_on.py``). Each bug must lose exactly the points of the tests
it is catalogued for, with its diagnosis in the learner's feedback."""

import handed_on
import pytest
import lessons_class
from grading_helpers import lost

from autograder import bugs, course
from autograder.course import answers, notebooks

LESSON = "06_going_further"
pytestmark = pytest.mark.grading

LESSON_BUGS = [b for b in bugs.CATALOG if b.lesson == LESSON]
REQUIRED = {"repeat_kv_tiled", "gqa_kv_heads_tiled", "kv_cache_wrong_axis", "causal_mask_forgotten"}

# Right values through the whole (T_q, T_k) matrix, and a notebook that rewrites every result the kernel sends to
# claim it used no memory: what the kernel says about its memory is not asked for, so the forgery gains nothing.
FORGED_FULL_MATRIX = bugs.by_id("tiled_full_matrix").source + '''

import builtins as _builtins
import json as _json


def _claims_no_memory(prompt="", _input=_builtins.input):
    try:
        message = _json.loads(prompt)
    except ValueError:
        return _input(prompt)
    if isinstance(message, dict) and message.get("op") == "result":
        message["peak"] = 0
        prompt = _json.dumps(message)
    return _input(prompt)


_builtins.input = _claims_no_memory
'''


# The paste cell with lesson-02 split_heads that gives head i every n_heads-th column: cross_attention (and the
# other functions) call it, yet no graded cell may lose a point, because grading puts the course's tools in place.
WRONG_TOOLS = answers.model_answers(LESSON)["tools"].replace(
    "pieces = x.reshape(*lead, T, n_heads, d_model // n_heads)  # (..., T, n_heads, d_head)\n"
    "    return np.swapaxes(pieces, -3, -2)",
    "pieces = x.reshape(*lead, T, d_model // n_heads, n_heads)  # strided heads\n"
    "    return np.moveaxis(pieces, -1, -3)")


# Right values, but first a causal mask of 60,000 tokens from the helper the grader answers for it (30,000 tokens,
# 900 million cells, the grader once built in its own process: 2.6 GB outside the kernel's limits, and full marks).
# 3.6 GB of mask is beyond any kernel's limit too, so the notebook's own cells that call it fail at once with
# MemoryError, never a kernel killed or not as its baseline memory happens to be (30,000 was either).
HUGE_HELPER_CALL = answers.model_answers(LESSON)["causal_self_attention"].replace(
    "    T = x.shape[-2]\n", "    T = x.shape[-2]\n    causal_mask(60_000)\n")


def points():
    """grade_id -> points of every graded test cell, read from the lesson source."""
    nb = notebooks.read_source(course.SOLUTIONS / f"{LESSON}.py")
    return {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") and c.metadata["nbgrader"]["points"] > 0}


def submissions():
    return {
        "complete": answers.fill(LESSON),
        "untouched": answers.student_notebook(LESSON),
        "full_matrix": answers.fill(LESSON, {"tiled_attention": FORGED_FULL_MATRIX}),
        "calls_attention": answers.fill(LESSON, {"tiled_attention": bugs.by_id("tiled_calls_attention").source}),
        "wrong_tools": answers.fill(LESSON, {"tools": WRONG_TOOLS}),
        "huge_helper_call": answers.fill(LESSON, {"causal_self_attention": HUGE_HELPER_CALL}),
        "hands_work_on": answers.fill(LESSON, {"grouped_query_attention": handed_on.GQA_VIA_MHA,
                                               "decode_with_kv_cache": handed_on.DECODE_VIA_CAUSAL,
                                               "tiled_attention": handed_on.DISTINCT_KEYS_ONLY}),
    }
    # every catalogued bug is graded by tests/grading/test_mutations.py (autograder.proofs.mutation), in one batch


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return lessons_class.results(tmp_path_factory, LESSON)


def test_the_required_bugs_are_catalogued():
    assert REQUIRED <= {b.id for b in LESSON_BUGS}
    assert all(b.tests and set(b.tests) <= set(points()) for b in LESSON_BUGS)


def test_completed_notebook_gets_full_marks(results):
    total = sum(points().values())
    assert results["complete"]["total"] == (total, total), results["complete"]["errors"]
    assert lost(results["complete"]) == set()


def test_untouched_notebook_gets_zero(results):
    total = sum(points().values())
    r = results["untouched"]
    assert r["total"] == (0.0, total)
    assert lost(r) == set(points())
    assert "not implemented yet" in r["feedback"]


def test_a_wrong_pasted_tool_costs_no_point(results):
    assert "strided heads" in WRONG_TOOLS
    r = results["wrong_tools"]
    assert lost(r) == set(), r["errors"]


def test_a_helper_asked_for_more_than_the_kernel_may_hold_refuses_and_costs_only_its_caller(results):
    """The grader answers causal_mask for causal_self_attention; asked for 60,000 tokens it refuses within the
    kernel's memory limit instead of building 3.6 billion cells, and only the caller's cell is lost, saying why."""
    assert "causal_mask(60_000)" in HUGE_HELPER_CALL
    r = results["huge_helper_call"]
    assert lost(r) == {"causal_full_values"}, r["errors"]
    assert "causal_mask was called with sizes whose result would not fit in" in r["feedback"]


def test_tiled_attention_through_the_full_matrix_loses_only_the_memory_point(results):
    """Its values are right; in the kernel it meets a T whose (T, T) matrix is beyond the kernel's memory limit, and
    the notebook's claim that it used no memory is never asked for."""
    r = results["full_matrix"]
    assert lost(r) == {"tiled_memory"}, r["errors"]
    total = sum(points().values())
    assert r["total"] == (total - points()["tiled_memory"], total)
    assert "[tiled_full_matrix]" in r["feedback"] and "ran out of memory" in r["feedback"]


def test_tiled_attention_that_calls_plain_attention_gets_nothing_for_it(results):
    """The stand-in of scaled_dot_product_attention refuses to answer while tiled_attention is graded."""
    r = results["calls_attention"]
    assert lost(r) == {"tiled_values", "tiled_memory"}, r["errors"]
    assert "[tiled_calls_attention]" in r["feedback"]


def test_a_function_that_hands_its_work_on_gets_nothing_for_it(results):
    """GQA through multi_head_attention and the decoding loop through causal_self_attention lose their cells, named;
    attention over the distinct keys only runs out of memory on keys that do not repeat; nothing else is lost."""
    r = results["hands_work_on"]
    assert lost(r) == {"decode_loop_values", "tiled_memory"}, r["errors"]  # GQA on the pasted MHA is correct
    assert "decode_with_kv_cache called causal_self_attention, which the lesson asks it not to call" in r["feedback"]
    assert "[tiled_full_matrix]" in r["feedback"] and "ran out of memory" in r["feedback"]


# --------------------------------------------------------------------------------------------------------------
# The visible self-checks, without a kernel: a learner's bug makes the self-check of its own cell fail and no
# other (a self-check whose helper is broken says so and stops), so visible checks never cost points twice.
def _learner_namespace(replacement=None):
    """The notebook's given tools and model answers (one replaced by a bug), as a learner's kernel holds them."""
    import math
    import textwrap
    import time
    import tracemalloc

    import numpy as np

    nb = notebooks.read_source(course.SOLUTIONS / f"{LESSON}.py")
    ns = {"np": np, "math": math, "time": time, "tracemalloc": tracemalloc}
    tools = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "tools")
    exec(tools.source, ns)
    for src in answers.model_answers(LESSON).values():
        exec(src, ns)
    if replacement:
        exec(textwrap.dedent(replacement), ns)
    return ns


def _visible_check_failures(ns):
    import contextlib
    import io

    sc = course.import_selfcheck(course.selfcheck_module(LESSON))
    mha, sdpa = ns["multi_head_attention"], ns["scaled_dot_product_attention"]
    checks = {
        "repeat_kv_values": lambda: sc.check_repeat_kv(ns["repeat_kv"]),
        "gqa_values": lambda: sc.check_gqa(ns["grouped_query_attention"], mha, repeat_kv=ns["repeat_kv"]),
        "mask_conventions": lambda: sc.check_causal_masks(ns["causal_mask"]),
        "causal_full_values": lambda: sc.check_causal_self_attention(
            ns["causal_self_attention"], mha, grouped_query_attention=ns["grouped_query_attention"],
            causal_mask=ns["causal_mask"]),
        "kv_cache_append_values": lambda: sc.check_kv_cache_append(ns["kv_cache_append"]),
        "decode_step_values": lambda: sc.check_decode_step(ns["decode_step"], mha, kv_cache_append=ns["kv_cache_append"],
                                                           repeat_kv=ns["repeat_kv"]),
        "decode_loop_values": lambda: sc.check_decode_with_kv_cache(
            ns["decode_with_kv_cache"], mha, decode_step=ns["decode_step"], kv_cache_append=ns["kv_cache_append"],
            repeat_kv=ns["repeat_kv"]),
        "tiled_values": lambda: sc.check_tiled_attention(ns["tiled_attention"], sdpa),
        "tiled_memory": lambda: sc.check_tiled_memory(ns["tiled_attention"]),
        "cross_attention_values": lambda: sc.check_cross_attention(ns["cross_attention"], mha),
    }
    assert set(checks) == set(points())
    failed = {}
    for gid, run in checks.items():
        try:
            with contextlib.redirect_stdout(io.StringIO()), np_quiet():
                run()
        except AssertionError as exc:
            failed[gid] = str(exc)
    return failed


def np_quiet():
    import numpy as np
    return np.errstate(all="ignore")


def test_visible_self_checks_pass_on_the_model_answers():
    assert _visible_check_failures(_learner_namespace()) == {}


@pytest.mark.parametrize("bug", [b for b in LESSON_BUGS if b.visible], ids=lambda b: b.id)
def test_visible_self_checks_fail_only_in_the_bugs_own_cell(bug):
    failed = _visible_check_failures(_learner_namespace(bug.source))
    assert set(failed) == set(bug.tests), failed
