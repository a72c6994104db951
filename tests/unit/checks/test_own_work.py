"""A graded function earns its points for its own work, never for what a stand-in or the kernel said; and a correct
function that reuses another function of the lesson earns full marks.

Three ways a function could score without doing what it is graded for, each closed and each shown to stay fair to
honest work: calling a stand-in of a function the lesson tells it, in words, not to call (``forbids`` in
``@hidden_test``: that stand-in is a ``verdict.Refusal``; every other function of the lesson is answered by the
reference), over the real channel of ``autograder/kernel/hidden_cell.py`` and
``autograder/grading/pipeline/hidden_tests.py`` in one process; a memory figure the kernel reports (no longer asked
for: the memory point of ``tiled_memory`` is behavioural in the kernel); and a formula in place of the lesson-04
experiment. The mutation harness (``tests/grading/test_mutations.py``) grades the catalogued versions through the
real grading command.
"""

from __future__ import annotations

import builtins
import math

import grader_session
import handed_on
import numpy as np
import pytest

from autograder import bugs, course, reference
from autograder.checks import lesson04, registry, runner, verdict
from autograder.checks.verdict import WrongAnswer
from autograder.course import answers
from autograder.grading.pipeline.hidden_tests import RemoteFunction, Session
from autograder.kernel import hidden_cell
from autograder.proofs import salt_sweep

LESSON05, LESSON06 = "05_exercises", "06_going_further"


def _grade(monkeypatch, lesson, grade_id, namespace, memory_limit=None):
    """Run ``hidden_cell.run`` against a grader session (the kernel's ``input()`` answered by the grader)."""
    return grader_session.run(monkeypatch, lesson, grade_id, namespace, memory_limit)


def _notebook(lesson, **sources):
    """The namespace of a notebook holding the lesson's model answers, with ``sources`` ({name: source}) run after."""
    ns = {"np": np, "math": math, "__name__": "__notebook__"}
    for source in (*answers.model_answers(lesson).values(), *sources.values()):
        try:
            exec(compile(source, "<cell>", "exec"), ns)
        except SyntaxError:  # a written answer
            continue
    return ns


# ------------------------------------------------------------------------------------ stand-ins that refuse
def test_only_what_the_lesson_forbids_refuses_every_other_stand_in_answers():
    forbidding = 0
    for test in registry.all_tests().values():
        graded = set(test.uses) | set(test.together)
        for name, stand_in in test.stand_ins().items():
            assert name not in graded, test.name
            assert isinstance(stand_in, verdict.Refusal) == (name in test.forbids), (test.name, name)
        forbidding += bool(test.forbids)
        for name in test.forbids:  # the lesson's text says it, where the learner reads the function's task
            assert f"`{name}`" in (course.SOLUTIONS / f"{test.lesson}.py").read_text(encoding="utf-8"), (test.name, name)
    assert forbidding >= 5


def test_gqa_through_the_pasted_multi_head_attention_earns_full_marks(monkeypatch):
    """The identity lesson 06 states (GQA is multi-head attention with each KV head's weights repeated), written
    on the pasted multi_head_attention: correct, so its hidden test passes over the real channel."""
    session = _grade(monkeypatch, LESSON06, "gqa_values", _notebook(LESSON06, cheat=handed_on.GQA_VIA_MHA))
    assert session.verdict().passed


def test_a_decoding_loop_handed_to_the_causal_layer_gets_nothing(monkeypatch):
    """Over the real channel: the refusal names the function refused and the lesson's reason."""
    session = _grade(monkeypatch, LESSON06, "decode_loop_values",
                     _notebook(LESSON06, cheat=handed_on.DECODE_VIA_CAUSAL))
    assert not session.verdict().passed
    assert ("decode_with_kv_cache called causal_self_attention, which the lesson asks it not to call (the loop feeds "
            "the tokens to decode_step one at a time)") in session.verdict().message


def test_with_every_stand_in_answering_the_handed_on_loop_would_pass(monkeypatch):
    """The check above can fail: were every stand-in the reference, the loop would earn full marks."""
    monkeypatch.setattr(registry.HiddenTest, "stand_ins",
                        lambda self, refused=None: {n: f for n, f in registry.stand_ins_of(self.lesson).items()
                                                    if n not in self.uses})
    session = _grade(monkeypatch, LESSON06, "decode_loop_values",
                     _notebook(LESSON06, cheat=handed_on.DECODE_VIA_CAUSAL))
    assert session.verdict().passed


def test_a_test_s_own_bind_does_not_lift_a_refusal():
    """Lesson 07's attention_row_backward test binds softmax_backward; scaled_dot_product_attention_backward, which
    the lesson forbids it, still refuses."""
    ns = dict(salt_sweep.model_namespace("07_heads_that_learn"))
    exec("""
def attention_row_backward(q, K, V, grad_out):
    weights = softmax(q @ K.T / np.sqrt(K.shape[-1]))
    dQ, dK, dV = scaled_dot_product_attention_backward(q[None, :], K, V, weights[None, :], grad_out[None, :])
    return dQ[0], dK, dV
""", ns)
    test = registry.find("07_heads_that_learn", "attention_row_backward_values")
    with pytest.raises(WrongAnswer, match=r"scaled_dot_product_attention_backward"):
        test({n: ns[n] for n in test.names})


def test_a_layer_that_calls_the_other_layer_gets_nothing(monkeypatch):
    """mha_from_scratch returns attention_layer(...), whose given code is still buggy: no credit for either."""
    bug = bugs.by_id("mha_from_scratch_calls_attention_layer")
    ns = _notebook(LESSON05, given=bugs.by_id("attention_layer_as_given").source, cheat=bug.source)
    session = _grade(monkeypatch, LESSON05, "mha_from_scratch_test", ns)
    assert not session.verdict().passed and f"[{bug.id}]" in session.verdict().message
    assert session.verdict().bug == bug.id


def test_the_fix_that_calls_the_other_layer_gets_nothing(monkeypatch):
    """The other way round: attention_layer, a find-the-bug exercise, handed to mha_from_scratch."""
    bug = bugs.by_id("attention_layer_calls_mha_from_scratch")
    session = _grade(monkeypatch, LESSON05, "attention_layer_test", _notebook(LESSON05, cheat=bug.source))
    assert session.verdict().bug == bug.id


def test_catching_the_refusal_does_not_help(monkeypatch):
    """The refusal is kept by the grader: a function that catches the error and then does the work itself still
    called what it may not call."""
    ns = _notebook(LESSON05, cheat='''
def mha_from_scratch(x, W_Q, W_K, W_V, W_O, n_heads):
    try:
        return attention_layer(x, W_Q, W_K, W_V, W_O, n_heads)
    except Exception:
        d_head = x.shape[-1] // n_heads
        Q, K, V = (split_into_heads(x @ W, n_heads) for W in (W_Q, W_K, W_V))  # (..., n_heads, T, d_head)
        weights = softmax(Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head), axis=-1)  # (..., n_heads, T, T)
        return merge_heads(weights @ V) @ W_O, weights
''')
    session = _grade(monkeypatch, LESSON05, "mha_from_scratch_test", ns)
    assert not session.verdict().passed and "attention_layer" in session.verdict().message


def test_helpers_still_answer_so_a_slip_elsewhere_costs_nothing(monkeypatch):
    """The model mha_from_scratch calls split_into_heads, merge_heads and softmax: wrong in the notebook, they are
    still answered by the reference; the buggy attention_layer it does not call costs nothing either."""
    ns = _notebook(LESSON05, given=bugs.by_id("attention_layer_as_given").source,
                   split=bugs.by_id("split_into_heads_head_axis_last").source,
                   merge=bugs.by_id("merge_heads_bare_reshape").source,
                   softmax="def softmax(x, axis=-1):\n    return np.zeros_like(x)\n")
    assert _grade(monkeypatch, LESSON05, "mha_from_scratch_test", ns).verdict().passed


def test_tiled_attention_that_calls_plain_attention_gets_nothing(monkeypatch):
    bug = bugs.by_id("tiled_calls_attention")
    ns = _notebook(LESSON06, cheat=bug.source)
    for grade_id in bug.tests:
        session = _grade(monkeypatch, LESSON06, grade_id, ns, memory_limit=64 << 20)
        assert not session.verdict().passed and f"[{bug.id}]" in session.verdict().message, grade_id


def test_without_the_refusal_the_cheat_would_pass(monkeypatch):
    """The checks above can fail: with the reference answering every stand-in, the cheat earns full marks."""
    test = registry.find(LESSON05, "mha_from_scratch_test")
    monkeypatch.setattr(registry.HiddenTest, "stand_ins",
                        lambda self, refused=None: {n: f for n, f in registry.stand_ins_of(self.lesson).items()
                                                    if n not in self.uses})
    ns = _notebook(LESSON05, cheat=bugs.by_id("mha_from_scratch_calls_attention_layer").source)
    test({n: ns[n] for n in test.names})


# ------------------------------------------------------------------------------------ memory, not on the kernel's word
_LIMIT = 64 << 20  # the kernel's memory limit the grader sets, here small: the (T, T) matrix beyond it has T = 2897


def _held_to(limit, source):
    """A notebook whose tiled_attention is ``source``, a function that builds the full (T_q, T_k) matrix, run as in a
    kernel held to ``limit`` bytes: asking for that matrix beyond the limit is a MemoryError."""
    ns = _notebook(LESSON06, cheat=source)
    builds_the_matrix = ns["tiled_attention"]

    def tiled_attention(Q, K, V, block_size, causal=False):
        if 8 * Q.shape[-2] * K.shape[-2] > limit:
            raise MemoryError(f"Unable to allocate an array with shape ({Q.shape[-2]}, {K.shape[-2]})")
        return builds_the_matrix(Q, K, V, block_size, causal)

    ns["tiled_attention"] = tiled_attention
    return ns


def test_the_memory_point_is_behavioural_in_the_kernel(monkeypatch):
    """In grading, the model answer passes at a T whose (T, T) matrix is beyond the kernel's limit, and a function
    that builds that matrix fails with its diagnosis. Nothing the kernel says about its memory is asked for."""
    assert runner.side_beyond(_LIMIT) ** 2 * 8 > _LIMIT >= (runner.side_beyond(_LIMIT) - 1) ** 2 * 8
    model = _grade(monkeypatch, LESSON06, "tiled_memory", _notebook(LESSON06), memory_limit=_LIMIT)
    assert model.verdict().passed
    bug = bugs.by_id("tiled_full_matrix")
    session = _grade(monkeypatch, LESSON06, "tiled_memory", _held_to(_LIMIT, bug.source), memory_limit=_LIMIT)
    assert not session.verdict().passed and f"[{bug.id}]" in session.verdict().message and "ran out of memory" in \
        session.verdict().message


def test_the_kernel_is_never_asked_for_its_memory(monkeypatch):
    sent = []
    session = Session(registry.find(LESSON06, "tiled_memory"), memory_limit=_LIMIT)
    real = session._to_kernel.put
    monkeypatch.setattr(session._to_kernel, "put", lambda message: (sent.append(message), real(message)))
    ns = _notebook(LESSON06)
    monkeypatch.setenv("MHA_HIDDEN_TESTS", "grader")
    monkeypatch.setattr(hidden_cell, "_namespace", lambda: ns)
    monkeypatch.setattr(builtins, "input", lambda prompt="": session.answer(prompt))
    hidden_cell.run("tiled_memory")
    calls = [m for m in sent if m.get("op") == "call"]
    assert calls and all(set(m) == {"op", "name", "args", "kwargs", "stand_ins"} for m in calls)
    with pytest.raises(TypeError):  # and a figure measured in the kernel cannot be asked for by mistake
        runner.call_measuring_memory(RemoteFunction("tiled_attention", session), runner.Case(()), "tiled_attention")


def test_a_function_that_returns_zeros_earns_no_memory_point(monkeypatch):
    zeros = "def tiled_attention(Q, K, V, block_size, causal=False):\n    return np.zeros(Q.shape[:-1] + V.shape[-1:])\n"
    session = _grade(monkeypatch, LESSON06, "tiled_memory", _notebook(LESSON06, cheat=zeros), memory_limit=_LIMIT)
    assert not session.verdict().passed


# ------------------------------------------------------------------------------------ an experiment, not a formula
_HONEST = {  # the same experiment, drawn and reduced in other honest ways
    "keys first, sample std": """
def dot_product_std(d_k, n_samples, scaled, rng):
    k = rng.standard_normal((n_samples, d_k))  # (n_samples, d_k)
    q = rng.standard_normal((n_samples, d_k))  # (n_samples, d_k)
    dots = (q * k).sum(axis=1) / (math.sqrt(d_k) if scaled else 1.0)  # (n_samples,)
    return float(np.std(dots, ddof=1))
""",
    "pairs interleaved": """
def dot_product_std(d_k, n_samples, scaled, rng):
    pairs = rng.normal(0.0, 1.0, size=(n_samples, 2, d_k))  # (n_samples, 2, d_k): q and k of each pair
    dots = np.einsum("nd,nd->n", pairs[:, 0], pairs[:, 1])  # (n_samples,)
    return float(dots.std() / math.sqrt(d_k)) if scaled else float(dots.std())
""",
    "one pair at a time": """
def dot_product_std(d_k, n_samples, scaled, rng):
    dots = []
    for _ in range(n_samples):
        q, k = rng.standard_normal(d_k), rng.standard_normal(d_k)  # (d_k,) each
        dots.append(float(q @ k) / (math.sqrt(d_k) if scaled else 1.0))
    return float(np.std(dots))
""",
}


@pytest.mark.parametrize("name", sorted(_HONEST))
def test_every_honest_experiment_passes_for_every_salt(name):
    ns = {"np": np, "math": math}
    exec(compile(_HONEST[name], name, "exec"), ns)
    test = registry.find("04_dk_scaling", "std_experiment")
    for salt in range(10 if name != "one pair at a time" else 2):
        with salt_sweep.grading_salt(salt):
            test({"dot_product_std": ns["dot_product_std"]})


def test_a_formula_fails_and_is_named():
    bug = bugs.by_id("std_experiment_theory_formula")
    test = registry.find("04_dk_scaling", "std_experiment")
    with pytest.raises(WrongAnswer, match=rf"\[{bug.id}\]"):
        test({"dot_product_std": bug.make()})
    # and before the few-sample check, nothing told it from an experiment
    seed = 12345
    lesson04.no_pairwise_matrix(bug.make())
    assert lesson04._value(bug.make(), 2, False, seed) == math.sqrt(2)
    with pytest.raises(WrongAnswer, match=rf"\[{bug.id}\]"):
        lesson04.measured(bug.make(), seed)
    lesson04.measured(reference.dot_product_std, seed)


def test_catching_the_refusal_does_not_help_where_the_test_runs_in_this_process_either():
    """An instructor's kernel, nbval, the salt sweep: the test's own refusals are kept too."""
    ns = _notebook(LESSON06, cheat='''
def tiled_attention(Q, K, V, block_size, causal=False):
    try:
        scaled_dot_product_attention(Q, K, V)
    except Exception:
        pass
    return reference_tiled(Q, K, V, block_size, causal)
''')
    ns["reference_tiled"] = reference.tiled_attention
    test = registry.find(LESSON06, "tiled_values")
    with pytest.raises(WrongAnswer, match="tiled_attention called scaled_dot_product_attention"):
        test({n: ns[n] for n in test.names})
