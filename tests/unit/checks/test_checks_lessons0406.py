"""Lessons 04-06: the dtype contract, bugs that only unusual inputs or memory show, and diagnoses that name a
mistake without handing out the answer. The hidden tests are called directly (no kernel); the mutation harness
(tests/grading/test_mutations.py) proves the same bugs through the real grading command."""

import re
import types

import numpy as np
import pytest

from autograder import bugs, course, reference
from autograder.checks import compare, registry
from autograder.checks.runner import Case, dtype_kept
from autograder.checks.verdict import WrongAnswer

LESSONS = ("04", "05", "06")

# Bugs that ordinary inputs, values alone or one salt could miss: far rows, blocked rows, dtypes, memory.
HARD = ("tiled_max_starts_at_zero", "tiled_float64_accumulators", "gqa_blocked_row_uniform", "gqa_mask_dropped",
        "std_experiment_pairwise_matrix", "scores_np_sqrt_promotes", "scores_computed_in_float32",
        "mha_from_scratch_np_sqrt_promotes", "mha_from_scratch_projections_transposed",
        "head_weights_projections_transposed", "decode_loop_float64_cache", "causal_mask_blocks_diagonal",
        # work handed to a stand-in, a formula in place of an experiment, a full matrix walked in blocks
        "mha_from_scratch_calls_attention_layer", "tiled_calls_attention", "std_experiment_theory_formula",
        "tiled_full_matrix")

_LEARNER_NAMES = {"split_into_heads": reference.split_heads, "merge_heads": reference.concat_heads,
                  "head_weights": reference.head_weights, "mha_from_scratch": reference.multi_head_attention}


def _as_learner(fn):
    """The reference function ``fn`` as a notebook holds a function: in a namespace of its own. (A hidden test binds
    stand-ins where a learner's function looks its helpers up; the grader's own module must never be that place.)"""
    if not isinstance(fn, types.FunctionType):
        return fn
    return types.FunctionType(fn.__code__, dict(fn.__globals__), fn.__name__, fn.__defaults__, fn.__closure__)


def _values(test, function, fn):
    return {n: fn if n == function else _as_learner(_LEARNER_NAMES.get(n, getattr(reference, n, None)))
            for n in test.names}


@pytest.mark.parametrize("salt", ["0", "90210"])
def test_hard_bugs_are_caught_and_named_for_several_salts(monkeypatch, salt):
    monkeypatch.setenv("MHA_GRADING_SALT", salt)
    for bug_id in HARD:
        b = bugs.by_id(bug_id)
        tests = registry.tests_of(b.lesson)
        for name in b.tests:
            with pytest.raises(WrongAnswer) as caught:
                tests[name](_values(tests[name], b.function, b.make()))
            assert f"[{b.id}]" in str(caught.value), f"salt {salt}, {b.id}: {caught.value}"
        tests[b.tests[0]](_values(tests[b.tests[0]], b.function, _as_learner(getattr(reference, b.function,
                                                                                        _LEARNER_NAMES.get(b.function)))))


def test_a_known_bugs_nan_does_not_match_a_number():
    assert not compare.same_values(np.array([1.0, 2.0]), np.array([1.0, np.nan]))
    assert compare.same_values(np.array([1.0, np.nan]), np.array([1.0, np.nan]))


def test_dtype_kept_says_which_direction_went_wrong():
    x32 = np.ones((2, 3, 4), dtype=np.float32)
    cases = [Case((x32, 2), label="float32"), Case((x32.astype(np.float64), 2), label="float64")]
    with pytest.raises(WrongAnswer, match="float32 input must give float32"):
        dtype_kept("repeat_kv", lambda x, n: np.repeat(x.astype(np.float64), n, axis=-3), cases, rtol=0, atol=0)
    with pytest.raises(WrongAnswer, match="casts it down to float32"):
        dtype_kept("repeat_kv", lambda x, n: np.repeat(x.astype(np.float32), n, axis=-3), cases, rtol=0, atol=0)
    dtype_kept("repeat_kv", reference.repeat_kv, cases, rtol=0, atol=0)


def _answer_expressions():
    """The expressions of the model answers' lines in lessons 04-06 (comments, `return ` and `name = ` removed)."""
    found = set()
    for path in sorted(course.SOLUTIONS.glob("0[456]_*.py")):
        inside = False
        for line in path.read_text(encoding="utf-8").splitlines():
            if "### BEGIN SOLUTION" in line or "### END SOLUTION" in line:
                inside = "BEGIN" in line
                continue
            code = line.split("  #")[0].strip()
            if inside and code:
                code = re.sub(r"^(return |[\w, ]+ = )", "", code)
                if len(code) >= 12 and "(" in code:
                    found.add(code)
    return found


def test_no_diagnosis_of_lessons_04_to_06_gives_an_answer_line():
    answers = _answer_expressions()
    assert "np.repeat(x, n_rep, axis=-3)" in answers  # the scan finds the model answers' lines
    for b in bugs.CATALOG:
        if course.lesson_number(b.lesson) in LESSONS:
            given = [a for a in answers if a in b.diagnosis]
            assert not given, f"{b.id}'s diagnosis gives the answer line {given}"


def _self_check_messages():
    """Every string a self-check of lessons 04-06 can print (string literals, f-string parts joined)."""
    import ast

    texts = []
    for n in LESSONS:
        tree = ast.parse((course.SOLUTIONS / f"selfcheck_{n}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                texts.append("".join(v.value for v in node.values if isinstance(v, ast.Constant)))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.append(node.value)
    return texts


def test_no_self_check_message_of_lessons_04_to_06_gives_an_answer_line():
    answers = _answer_expressions()
    for text in _self_check_messages():
        given = [a for a in answers if a in text]
        assert not given, f"a self-check message gives the answer line {given}: {text[:120]}"
