"""Hidden tests of lesson 05 (exercises).

One function per graded test cell, named by the cell's grade_id (``mha_from_scratch`` grades the cell
``mha_from_scratch_test``). Function answers are graded against ``autograder.reference``: the learner's
``split_into_heads`` / ``merge_heads`` against ``split_heads`` / ``concat_heads``, ``head_weights`` against the
weights of ``multi_head_attention``, ``mha_from_scratch`` against ``multi_head_attention``. Inputs are seeded random
arrays whose sizes all differ (B, n_heads, T, d_head), unbatched and batched, float64 and float32. Composite
functions are graded with the reference helpers bound in place of the learner's, so a wrong split costs the
round-trip points only. The layer (``mha_from_scratch``, ``attention_layer``) is the exercise's own work: only the
split, the merge, softmax and ``head_weights`` answer for it; the other layer and ``masked_attention`` refuse
(``verdict.Refusal``).
"""

from __future__ import annotations

import math

import numpy as np

from autograder import reference
from autograder.checks import compare
from autograder.checks.runner import (Case, against_reference, standing_in, call_learner, distinct_dims, dtype_kept,
                                      known_bug, rng_for)
from autograder.checks.verdict import WrongAnswer
from autograder.checks.registry import hidden_test

# The answer of the multiple-choice question. It lives only here (hidden checks), never in lessons/.
_CHOICE = "c"
_WRONG_CHOICE = {
    "a": ("that option describes one attention whose output is cut into slices afterwards. In multi-head attention "
          "every head runs its own attention, with its own weights over the keys, on its own projections"),
    "b": ("if all heads shared W_Q, W_K and W_V they would compute identical weights: what lets heads differ is "
          "that each has its own learned projections, not a restriction on positions"),
    "d": ("W_O cannot be left out without changing what the layer can represent. Lesson 02 shows what W_O does "
          "that the concatenation does not; written answer 2 of this lesson asks you to explain it"),
}

_D_MODEL_SMALL = 32  # the d_model of exercise 2, fixed in the notebook's text and answer cell


def _not_answered(name):
    raise WrongAnswer(f"{name} is not implemented yet: replace None with your answer in its cell, run it, then "
                      "run the test cell again.")


def _whole_number(value, name) -> int:
    """The learner's answer as a Python int, or a WrongAnswer saying why it is not a whole number."""
    if value is None:
        _not_answered(name)
    if type(value) is bool or not isinstance(value, (int, np.integer)):
        raise WrongAnswer(f"{name} = {value!r} ({type(value).__name__}) should be a whole number (an int); "
                          "use // for integer division")
    return int(value)


# ---------------------------------------------------------------------------------------------- answers
# Exercise 1: BERT-large, d_model = 1024 and 16 heads (lesson 03 works the base Transformer's 512 and 8)
_D_MODEL, _N_HEADS = 1024, 16


@hidden_test(uses=('d_head_1024',), visible_check='check_head_width')
def d_head_1024(answer):
    """d_k of BERT-large: d_model = 1024, h = 16."""
    got = _whole_number(answer, "d_head_1024")
    expected = reference.split_heads(np.zeros((1, _D_MODEL)), _N_HEADS).shape[-1]
    if got == _D_MODEL * _N_HEADS:
        raise WrongAnswer("d_head_1024 multiplies d_model by the head count; the heads share d_model's columns, "
                          "so each gets d_model / n_heads of them")
    if got != expected:
        raise WrongAnswer(f"d_head_1024 = {got} is not the width of one head for d_model = {_D_MODEL} and "
                          f"{_N_HEADS} heads")


@hidden_test(uses=('param_count_16_heads', 'param_count_1_head'), visible_check='check_param_count_answers')
def param_count_1024(count_16_heads, count_1_head):
    """Parameters of W_Q, W_K, W_V, W_O for d_model = 1024 with 16 heads and with 1 head (no biases)."""
    d_model = _D_MODEL
    for name, value, n_heads in (("param_count_16_heads", count_16_heads, _N_HEADS),
                                 ("param_count_1_head", count_1_head, 1)):
        got = _whole_number(value, name)
        expected = reference.mha_param_count(d_model, n_heads)
        if got == expected:
            continue
        d_head = d_model // n_heads
        known = {
            3 * d_model * d_model: "counts only W_Q, W_K and W_V: W_O is a fourth d_model x d_model matrix",
            expected * n_heads: "is multiplied by the head count, but the heads share the columns of each "
                                "d_model x d_model matrix: each head owns a d_model x d_head slice",
            4 * d_model * d_head: "counts one head's slices only (d_model x d_head per matrix); the layer has "
                                  "n_heads of them",
            4 * d_model * d_model + 4 * d_model: "includes biases; the exercise asks for the matrices only",
            3 * d_model * d_model + d_model * d_head: "counts W_O as (d_head x d_model); it takes all n_heads * "
                                                      "d_head concatenated columns",
        }
        if got in known and got != expected:
            raise WrongAnswer(f"{name} = {got} {known[got]}")
        raise WrongAnswer(f"{name} = {got} is not the number of entries of W_Q, W_K, W_V and W_O for d_model = "
                          f"{d_model} and {n_heads} head{'s' if n_heads > 1 else ''}")


@hidden_test(uses=('d_head_2_heads', 'd_head_8_heads'), visible_check='check_head_width')
def d_head_small(d_head_2_heads, d_head_8_heads):
    """d_k for d_model = 32 with 2 heads and with 8 heads."""
    for name, value, n_heads in (("d_head_2_heads", d_head_2_heads, 2), ("d_head_8_heads", d_head_8_heads, 8)):
        got = _whole_number(value, name)
        expected = reference.split_heads(np.zeros((1, _D_MODEL_SMALL)), n_heads).shape[-1]
        if got != expected:
            raise WrongAnswer(f"{name} = {got} is not the width of one head for d_model = {_D_MODEL_SMALL} and "
                              f"{n_heads} heads")


@hidden_test(uses=('mc_answer',), visible_check='check_choice')
def multiple_choice(mc_answer):
    """The multiple-choice question on what multi-head attention does."""
    if mc_answer is None:
        _not_answered("mc_answer")
    if type(mc_answer) is not str or str.lower(str.strip(mc_answer)) not in ("a", "b", "c", "d"):
        raise WrongAnswer(f"mc_answer = {mc_answer!r}: record one letter from a to d as a string")
    choice = str.lower(str.strip(mc_answer))
    if choice != _CHOICE:
        raise WrongAnswer(f"({choice}) is not the true statement: {_WRONG_CHOICE[choice]}.")


# ------------------------------------------------------------------------------------------ split / merge
def _split_cases(rng, test_id):
    d = distinct_dims(rng, ("B", "T", "n_heads", "d_head"))
    d_model = d["n_heads"] * d["d_head"]
    return d, [
        Case((rng.normal(size=(d["T"], d_model)), d["n_heads"]), label="unbatched"),
        Case((rng.normal(size=(d["B"], d["T"], d_model)), d["n_heads"]), label="batched"),
        Case((rng.normal(size=(d["B"], 2, d["T"], d_model)).astype(np.float32), d["n_heads"]),
             label="two batch axes, float32"),
        Case((rng.normal(size=(d["T"], d_model)), 1), label="one head"),
        Case((rng.normal(size=(d["B"], d["T"], d_model)), d_model), label="d_head = 1"),
    ]


@hidden_test(uses=('split_into_heads', 'merge_heads'), visible_check='check_split_merge')
def roundtrip(split_into_heads, merge_heads):
    """Both functions equal the reference on random inputs, and merge(split(x)) is x exactly."""
    rng = rng_for("roundtrip")
    d, cases = _split_cases(rng, "roundtrip")
    against_reference("split_into_heads", split_into_heads, cases, rtol=0.0, atol=0.0, ref=reference.split_heads)
    merge_cases = [Case((reference.split_heads(c.args[0], c.args[1]).copy(),), label=c.label) for c in cases]
    against_reference("merge_heads", merge_heads, merge_cases, rtol=0.0, atol=0.0, ref=reference.concat_heads)
    for name, fn, ref, dtype_cases in (("split_into_heads", split_into_heads, reference.split_heads, cases[1:3]),
                                       ("merge_heads", merge_heads, reference.concat_heads, merge_cases[1:3])):
        dtype_kept(name, fn, dtype_cases, rtol=0.0, atol=0.0, ref=ref)  # batched float64, float32
    for c in cases:
        x, n_heads = c.args
        before = compare.snapshot(x)
        with np.errstate(all="ignore"):
            back = merge_heads(split_into_heads(x, n_heads))
        if not compare.is_array(back) or back.dtype != x.dtype or not compare.unchanged(before, back):
            raise WrongAnswer(f"merge_heads(split_into_heads(x, {n_heads})) is not x bit for bit (same dtype) on "
                              f"input {c.describe()}")


# ------------------------------------------------------------------------------------------ head weights
def _layer(rng, lead, d, dtype=np.float64, n_heads=None):
    n_heads = n_heads or d["n_heads"]
    d_model = d["n_heads"] * d["d_head"]
    x = rng.normal(size=(*lead, d["T"], d_model)).astype(dtype)
    Ws = [(rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)).astype(dtype) for _ in range(4)]
    return x, Ws, n_heads


_HELPERS = {"split_into_heads": reference.split_heads, "merge_heads": reference.concat_heads,
            "softmax": reference.softmax, "head_weights": reference.head_weights}


@hidden_test(uses=('head_weights',), helpers=('split_into_heads', 'softmax'), visible_check='check_head_weights')
def heads_differ(head_weights, split_into_heads=None, softmax=None):
    """head_weights equals the true per-head attention of layers the test supplies, and heads 0 and 1 differ.

    Graded with the reference split and softmax bound in place of the learner's. A function that returns random
    patterns (which always "differ") fails: the weights must be those of the given layer.
    """
    rng = rng_for("heads_differ")
    d = distinct_dims(rng, ("B", "T", "n_heads", "d_head"))  # all >= 2, so there are heads 0 and 1
    stand_ins = {k: v for k, v in _HELPERS.items() if k in ("split_into_heads", "softmax")}
    # The exercise's claim, on a layer the test supplies: heads 0 and 1 of the learner's result differ ...
    x, (W_Q, W_K, _, _), n_heads = _layer(rng, (), d)
    expected = reference.head_weights(x, W_Q, W_K, n_heads)
    with np.errstate(all="ignore"):
        with standing_in(head_weights, stand_ins):
            got = call_learner(head_weights, Case((x, W_Q, W_K, n_heads), label="the supplied layer"), "head_weights")
    if compare.is_array(got) and compare.shape_of(got) == compare.shape_of(expected):
        if compare.same_values(got[0], got[1], rtol=0.0, atol=1e-6):
            case = Case((x, W_Q, W_K, n_heads), label="the supplied layer")
            bug = known_bug("head_weights", case, (got,), ("result",), rtol=1e-6, atol=1e-9)
            same = ("heads 0 and 1 of head_weights give the same weights on a random layer: each head must use its "
                    "own columns i*d_head:(i+1)*d_head of Q and K")
            raise WrongAnswer.naming(bug, same) if bug else WrongAnswer(same + ".")
    # ... and they are the true attention weights of that layer (random arrays also differ; they fail here).
    cases = [Case((x, W_Q, W_K, n_heads), label="the supplied layer")]
    for lead, dtype, label in (((d["B"],), np.float64, "batched"), ((), np.float32, "float32")):
        xx, (Wq, Wk, _, _), h = _layer(rng, lead, d, dtype)
        cases.append(Case((xx, Wq, Wk, h), label=label))
    xx, (Wq, Wk, _, _), _ = _layer(rng, (), d)
    cases.append(Case((xx, Wq, Wk, 1), label="one head"))
    against_reference("head_weights", head_weights, cases, rtol=1e-4, atol=1e-6, stand_ins=stand_ins, ref=reference.head_weights)
    dtype_kept("head_weights", head_weights, cases[:3], stand_ins=stand_ins, ref=reference.head_weights)


# ------------------------------------------------------------------------------------ mha from raw operations
@hidden_test(
    uses=('mha_from_scratch',),
    helpers=('split_into_heads', 'merge_heads', 'softmax', 'head_weights'), visible_check='check_mha_from_scratch',
    forbids=('attention_layer',), because="the layer is built here, not handed to the layer with a bug to find")
def mha_from_scratch_test(mha_from_scratch, split_into_heads=None, merge_heads=None, softmax=None, head_weights=None):
    """Equal to reference.multi_head_attention for several head counts, unbatched, batched and float32."""
    rng = rng_for("mha_from_scratch")
    d = distinct_dims(rng, ("B", "T", "n_heads", "d_head"))
    d_model = d["n_heads"] * d["d_head"]
    cases = []
    for lead, dtype, n_heads, label in (((), np.float64, None, "unbatched"),
                                        ((d["B"],), np.float64, None, "batched"),
                                        ((d["B"],), np.float32, None, "batched, float32"),
                                        ((), np.float64, 1, "one head"),
                                        ((), np.float64, d_model, "d_head = 1")):
        x, Ws, h = _layer(rng, lead, d, dtype, n_heads)
        cases.append(Case((x, *Ws, h), label=label))
    stand_ins = {k: v for k, v in _HELPERS.items() if k in ("split_into_heads", "merge_heads", "softmax", "head_weights")}
    against_reference("mha_from_scratch", mha_from_scratch, cases, outputs=("out", "weights"), rtol=1e-4, atol=1e-6,
          stand_ins=stand_ins, ref=reference.multi_head_attention)
    dtype_kept("mha_from_scratch", mha_from_scratch, cases[1:3], outputs=("out", "weights"), stand_ins=stand_ins,
               ref=reference.multi_head_attention)


# ------------------------------------------------------------------------------------------ find the bug
def _mask(rng, shape, blocked_row=False):
    """A random boolean mask (True = blocked) in which every query keeps at least one key; with ``blocked_row``
    one query of the last (batch element's) mask has every key blocked."""
    mask = rng.random(shape) < 0.4
    T_q, T_k = shape[-2:]
    mask[..., np.arange(T_q), rng.integers(0, T_k, T_q)] = False
    if blocked_row:
        mask[(*(n - 1 for n in shape[:-2]), int(rng.integers(0, T_q)))] = True
    return mask


@hidden_test(uses=('masked_attention',), helpers=('softmax',), visible_check='check_masked_attention')
def masked_attention_test(masked_attention, softmax=None):
    """The fixed masked_attention equals the reference attention with a mask: T_q != T_k, a (T_q, T_k) mask and
    one per batch element, a query whose keys are all blocked (all-zero weights), unbatched and batched, float32
    kept. Graded with the reference softmax."""
    rng = rng_for("masked_attention_test")
    d = distinct_dims(rng, ("B", "T_q", "T_k", "d_k", "d_v"))
    cases = []
    for lead, mask_lead, blocked_row, dtype, label in (
            ((), (), False, np.float64, "unbatched, a (T_q, T_k) mask"),
            ((d["B"],), (), True, np.float64, "batched, one (T_q, T_k) mask for all, one query with every key blocked"),
            ((d["B"],), (d["B"],), True, np.float64,
             "batched, a mask per batch element, one query with every key blocked"),
            ((d["B"],), (d["B"],), False, np.float32, "batched, float32")):
        Q, K, V = (rng.normal(size=(*lead, d[t], d[w])).astype(dtype) * 2
                   for t, w in (("T_q", "d_k"), ("T_k", "d_k"), ("T_k", "d_v")))
        cases.append(Case((Q, K, V, _mask(rng, (*mask_lead, d["T_q"], d["T_k"]), blocked_row)), label=label))
    stand_ins = {"softmax": reference.softmax}
    against_reference("masked_attention", masked_attention, cases[:3], outputs=("out", "weights"), rtol=1e-6, atol=1e-9,
          stand_ins=stand_ins, ref=reference.scaled_dot_product_attention)
    against_reference("masked_attention", masked_attention, cases[3:], outputs=("out", "weights"), rtol=1e-4, atol=1e-6,
          stand_ins=stand_ins, ref=reference.scaled_dot_product_attention)
    dtype_kept("masked_attention", masked_attention, cases[2:], outputs=("out", "weights"), stand_ins=stand_ins,
               ref=reference.scaled_dot_product_attention)


@hidden_test(uses=('attention_layer',), helpers=('softmax',), visible_check='check_attention_layer',
             forbids=('mha_from_scratch',), because="the exercise is to fix the given layer, not to replace it")
def attention_layer_test(attention_layer, softmax=None):
    """The fixed attention_layer equals the reference multi-head attention for several head counts, unbatched,
    batched and float32. Graded with the reference softmax."""
    rng = rng_for("attention_layer_test")
    d = distinct_dims(rng, ("B", "T", "n_heads", "d_head"))
    cases = []
    for lead, dtype, n_heads, label in (((), np.float64, None, "unbatched"),
                                        ((d["B"],), np.float64, None, "batched"),
                                        ((d["B"],), np.float32, None, "batched, float32"),
                                        ((), np.float64, d["d_head"], "n_heads = d_head")):
        x, Ws, h = _layer(rng, lead, d, dtype, n_heads)
        cases.append(Case((x, *Ws, h), label=f"{label}, n_heads={h}"))
    stand_ins = {"softmax": reference.softmax}
    against_reference("attention_layer", attention_layer, cases, outputs=("out", "weights"), rtol=1e-4, atol=1e-6, stand_ins=stand_ins,
          ref=reference.multi_head_attention)
    dtype_kept("attention_layer", attention_layer, cases[1:3], outputs=("out", "weights"), stand_ins=stand_ins,
               ref=reference.multi_head_attention)
