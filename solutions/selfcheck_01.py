"""Self-checks of lesson 01: softmax and scaled dot-product attention.

The shared part (how a check calls your function, fails and passes) is in ``selfcheck_common.py``.
"""

from __future__ import annotations

import math

import numpy as np

from selfcheck_common import call, close, effective_scale, fail, ok, own

__all__ = ["check_softmax", "check_softmax_stable", "check_attention", "check_attention_mask", "attention_example"]


# ------------------------------------------------------------------------------------------------ softmax
def check_softmax(softmax):
    """Known values, rows summing to 1 along the requested axis, float32 kept, input left alone."""
    x = np.array([1.0, 2.0, 3.0])
    got = call(softmax, "softmax", x)
    known = np.array([0.09003057317038046, 0.24472847105479767, 0.6652409557748219])
    if np.shape(got) != (3,):
        fail(f"softmax([1, 2, 3]) has shape {np.shape(got)}, expected (3,): keep the input's shape")
    if not close(got, known, 1e-7):
        fail(f"softmax([1, 2, 3]) = {np.round(got, 6)}, expected {np.round(known, 6)} "
             "(each entry is exp(x_i) / sum_j exp(x_j))")
    if not np.array_equal(x, [1.0, 2.0, 3.0]):
        fail("softmax changed its input array in place; compute into a new array instead")
    m = np.arange(12.0).reshape(3, 4) / 4
    rows = call(softmax, "softmax", m)
    cols = call(softmax, "softmax", m, axis=0)
    if np.shape(rows) != (3, 4) or np.shape(cols) != (3, 4):
        fail("softmax of a (3, 4) array must keep the shape (3, 4); did you forget keepdims=True?")
    if not close(rows.sum(axis=-1), np.ones(3)):
        fail("with the default axis=-1 each row should sum to 1; check that the sum runs over `axis` with "
             "keepdims=True")
    if not close(cols.sum(axis=0), np.ones(4)):
        fail("with axis=0 each column should sum to 1: use the `axis` argument in both the max and the sum")
    for dtype in (np.float32, np.float64):
        got_d = call(softmax, "softmax", np.array([0.5, 1.5], dtype=dtype))
        if getattr(got_d, "dtype", None) != dtype:
            fail(f"{np.dtype(dtype).name} input came back as {getattr(got_d, 'dtype', type(got_d))}: keep the "
                 "input's dtype (convert nothing; a numpy float64 constant promotes float32)")
    ok("softmax: known values, rows and columns sum to 1, float32 stays float32 and float64 float64")


def check_softmax_stable(softmax):
    """Scores around 1e4 must not overflow: softmax(x) == softmax(x - c)."""
    x = np.array([10000.0, 9999.0, 9998.0])
    with np.errstate(all="ignore"):
        got = call(softmax, "softmax", x)
    if not np.all(np.isfinite(got)):
        fail(f"softmax([1e4, 1e4-1, 1e4-2]) = {got}: exp(1e4) overflows to inf and inf/inf is NaN. "
             "Subtract the maximum along the axis before exp (softmax(x) = softmax(x - max x)).")
    expected = call(softmax, "softmax", x - 10000.0)
    if not close(got, expected, 1e-9):
        fail("softmax(x) should equal softmax(x - c) for any constant c, but the results differ")
    apart = np.array([[0.0, 1.0], [-2000.0, -2001.0]])  # two rows far apart
    with np.errstate(all="ignore"):
        rows = call(softmax, "softmax", apart)
    one = call(softmax, "softmax", np.array([0.0, 1.0]))
    if not (np.all(np.isfinite(rows)) and close(rows[0], one, 1e-9) and close(rows[1], one[::-1], 1e-9)):
        fail(f"softmax([[0, 1], [-2000, -2001]]) = {np.round(rows, 4).tolist()}: each row should be the softmax of "
             "that row alone. A row far below another loses all its weight (0/0 = NaN) when the shift is not the "
             "row's own maximum: take the maximum along `axis`, not over the whole array")
    blocked = np.array([[0.5, -np.inf, 1.5], [-np.inf, -np.inf, -np.inf]])  # row 1: every key blocked
    with np.errstate(all="ignore"):
        rows = np.asarray(call(softmax, "softmax", blocked), float)
    if np.any(np.isnan(rows)) or not np.all(rows[1] == 0) or rows[0, 1] != 0:
        fail(f"softmax of a row of -inf (every key blocked) gave {rows[1].tolist()}; it should be all zeros. "
             "Its maximum is -inf and -inf - (-inf) is NaN: shift a row only by a finite maximum, and do not "
             "divide by a sum of 0")
    ok("softmax is stable for scores near 1e4 and for rows far apart; a row of -inf gives zeros")


# ------------------------------------------------------------------------------------------------ attention
def attention_example():
    """The small example the attention self-check uses: Q (T_q=2, d_k=4), K (T_k=3, 4), V (3, d_v=5)."""
    rng = np.random.default_rng(2017)
    Q = rng.normal(size=(2, 4))
    K = rng.normal(size=(3, 4))
    V = rng.normal(size=(3, 5))
    return Q, K, V




def check_attention(scaled_dot_product_attention):
    """Shapes, rows summing to 1, the sqrt(d_k) scale, out = weights @ V, inputs left alone."""
    Q, K, V = attention_example()
    copies = [a.copy() for a in (Q, K, V)]
    result = call(scaled_dot_product_attention, "scaled_dot_product_attention", Q, K, V)
    if not isinstance(result, tuple) or len(result) != 2:
        fail("scaled_dot_product_attention must return a pair: (out, weights)")
    out, weights = result
    if any(not np.array_equal(a, b) for a, b in zip((Q, K, V), copies)):
        fail("scaled_dot_product_attention changed Q, K or V in place (e.g. `Q /= ...`); "
             "compute new arrays instead")
    if np.shape(weights) == (3, 2):
        fail("weights have shape (T_k, T_q) = (3, 2); they should be (T_q, T_k) = (2, 3), one row per "
             "query: compute Q @ K^T, not K @ Q^T, and do not transpose the result")
    if np.shape(weights) != (2, 3):
        fail(f"weights have shape {np.shape(weights)}, expected (T_q, T_k) = (2, 3)")
    if np.shape(out) != (2, 5):
        fail(f"out has shape {np.shape(out)}, expected (T_q, d_v) = (2, 5): out = weights @ V")
    weights = np.asarray(weights, float)
    if not close(weights.sum(axis=-1), np.ones(2)):
        if close(weights.sum(axis=0), np.ones(3)):
            fail("each *column* of the weights sums to 1: softmax ran over the query axis. Every query "
                 "needs a distribution over the keys: softmax over the last axis (axis=-1)")
        if np.allclose(weights, Q @ K.T) or np.allclose(weights, Q @ K.T / 2):
            fail("the weights are the raw scores: apply softmax to the scores and return that")
        if effective_scale(weights, Q @ K.T) is not None:
            fail("the weights are exp(scores) but their rows do not sum to 1: divide each row by its sum "
                 "(that is what softmax does)")
        fail(f"each row of the weights should sum to 1 (got row sums {np.round(weights.sum(-1), 4)}); "
             "the weights must be softmax(scores) along the last axis")
    raw = Q @ K.T
    c = effective_scale(weights, raw)
    d_k = Q.shape[-1]
    diagnosis = {
        1.0: "the scores are not scaled: divide Q @ K^T by sqrt(d_k)",
        1 / d_k: "the scores are divided by d_k; divide by sqrt(d_k) (the standard deviation of q.k)",
        1 / math.sqrt(K.shape[-2]): "the scores are scaled by the number of keys (K.shape[-2]); the scale is "
                                    "sqrt(d_k), d_k being the width the dot product sums over (the last axis of Q)",
    }
    if c is None:
        fail("the weights are not softmax of a scaled Q @ K^T along each row; check the order of the "
             "matmul and which axis softmax uses")
    if abs(c - 1 / math.sqrt(d_k)) > 1e-6:
        for scale, message in diagnosis.items():
            if abs(c - scale) < 1e-6:
                fail(message)
        fail(f"the scores are multiplied by {c:.4g}; expected 1/sqrt(d_k) = {1 / math.sqrt(d_k):.4g}")
    if not close(out, weights @ V, 1e-8):
        fail("out should be weights @ V, shape (T_q, d_v); check the order of that product")
    _check_attention_batch(scaled_dot_product_attention, Q, K, V)
    ok("scaled_dot_product_attention: shapes, rows sum to 1, scale 1/sqrt(d_k), out = weights @ V, batched, "
       "dtypes kept")


def _check_attention_batch(scaled_dot_product_attention, Q, K, V):
    """The example inside a batch of 2 (with a second, different example) gives the same result as alone; float32
    stays float32 and float64 float64."""
    name = "scaled_dot_product_attention"
    out1, w1 = call(scaled_dot_product_attention, name, Q, K, V)
    Qb, Kb, Vb = (np.stack([a[::-1], a]) for a in (Q, K, V))  # (B=2, T, d_k), (2, T, d_k), (2, T, d_v): the example is batch element 1
    outb, wb = call(scaled_dot_product_attention, name, Qb, Kb, Vb)
    if np.shape(wb) != (2, 2, 3) or np.shape(outb) != (2, 2, 5):
        fail(f"on a batch, Q {Qb.shape}, K {Kb.shape}, V {Vb.shape}, the weights should be (B, T_q, T_k) = "
             f"(2, 2, 3) and out (B, T_q, d_v) = (2, 2, 5); got {np.shape(wb)} and {np.shape(outb)}")
    if not (close(wb[1], w1, 1e-9) and close(outb[1], out1, 1e-9)):
        fail("batch element 1 gives a different result inside a batch than on its own: some axis is counted from "
             "the front (K.T reverses all axes, batch included); transpose only the last two axes of K")
    for dtype in (np.float32, np.float64):
        outd, wd = call(scaled_dot_product_attention, name, *(a.astype(dtype) for a in (Q, K, V)))
        for what, arr in (("out", outd), ("weights", wd)):
            if getattr(arr, "dtype", None) != dtype:
                fail(f"{np.dtype(dtype).name} Q, K, V gave {what} of dtype {getattr(arr, 'dtype', type(arr))}: "
                     "keep the input's dtype. A numpy float64 scalar (np.sqrt of a number) promotes float32; "
                     "math.sqrt gives a Python float, which does not. And cast nothing to float32")


def check_attention_mask(scaled_dot_product_attention):
    """True = blocked: blocked weights exactly 0, the others renormalised, a 2-D mask broadcast over a batch."""
    rng = np.random.default_rng(7)
    Q = rng.normal(size=(2, 3, 4))  # (B, T_q, d_k)
    K = rng.normal(size=(2, 5, 4))  # (B, T_k, d_k)
    V = rng.normal(size=(2, 5, 6))  # (B, T_k, d_v)
    mask = np.array([[False, True, True, False, True],
                     [False, False, True, True, True],
                     [True, False, False, False, False]])  # (T_q, T_k), True = blocked
    result = call(scaled_dot_product_attention, "scaled_dot_product_attention", Q, K, V, mask=mask)
    out, weights = result
    weights = np.asarray(weights, float)
    if np.shape(weights) != (2, 3, 5):
        fail(f"with a batch, weights should be (B, T_q, T_k) = (2, 3, 5), got {np.shape(weights)}; "
             "a (T_q, T_k) mask must broadcast over the batch")
    blocked = np.broadcast_to(mask, weights.shape)
    if not close(weights.sum(axis=-1), np.ones((2, 3))) and close(weights.sum(axis=-2), np.ones((2, 5))):
        fail("each *column* of the weights sums to 1: softmax ran over the query axis. Every query needs a "
             "distribution over the keys: softmax over the last axis (axis=-1)")
    if np.all(weights[~blocked] == 0) and np.any(weights[blocked] > 0):
        fail("the mask's polarity is inverted: True marks a *blocked* pair and must get weight 0, "
             "while the False positions stay open")
    if np.any(weights[blocked] != 0):
        fail("some blocked positions (mask True) have non-zero weight: a blocked score must be -inf *before* "
             "softmax, so that its weight is exactly 0")
    if not close(weights.sum(axis=-1), np.ones((2, 3))):
        fail("with a mask, each row should still sum to 1; it does not, so the mask was applied after "
             "softmax without renormalising. Mask the scores (set -inf) *before* softmax")
    if np.shape(out) != (2, 3, 6):
        fail(f"out should be (B, T_q, d_v) = (2, 3, 6), got {np.shape(out)}")
    out0, w0 = call(scaled_dot_product_attention, "scaled_dot_product_attention", Q[0], K[0], V[0], mask=mask)
    if not (close(w0, weights[0], 1e-9) and close(out0, np.asarray(out)[0], 1e-9)):
        fail("one sequence (T_q, d_k) with a (T_q, T_k) mask gives a different result than the same sequence "
             "inside a batch: the mask or some axis is handled for one of the two layouts only")
    every = mask.copy()
    every[1] = True  # query 1 may see no key at all
    with np.errstate(all="ignore"):
        out_b, w_b = call(scaled_dot_product_attention, "scaled_dot_product_attention", Q, K, V, mask=every)
    row = np.asarray(w_b, float)[:, 1]
    if np.any(np.isnan(row)):
        fail("a query whose keys are all blocked gets NaN weights; it should get all-zero weights (and a zero "
             "output). Its scores are all -inf: run the softmax self-check above, which shows that case")
    if np.any(row != 0):
        fail(f"a query whose keys are all blocked gets weights {np.round(row[0], 4).tolist()}; every blocked "
             "pair must get weight exactly 0, also when the whole row is blocked. A large negative number "
             "instead of -inf gives equal scores, so uniform weights")
    ok("masked attention: blocked weights are exactly 0 (a fully blocked row too), rows still sum to 1, the mask "
       "broadcasts")


# this lesson's functions, each with the checks that take it alone: a check of a function that calls one of
# them names it when it is the one that is wrong (selfcheck_common.own)
own("softmax", check_softmax, check_softmax_stable)
