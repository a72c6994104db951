# Built from solutions/selfcheck.py by `make lessons`; edit that file, not this one.
"""Self-checks you can run while you work through the lessons.

Each ``check_*`` function calls your function on small examples and either prints a line starting with a
tick or raises an ``AssertionError`` that says what looks wrong and what usually causes it. The checks test
properties and known values; they do not contain a solution. Passing them is a good sign, not a guarantee:
the graded tests use other, random inputs.

Names follow the course glossary: T_q queries, T_k keys, d_k key width, d_v value width, d_model, n_heads,
d_head = d_model // n_heads; a mask is boolean and True marks a blocked (query, key) pair.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["check_softmax", "check_softmax_stable", "check_attention", "check_attention_mask",
           "attention_example"]


class SelfCheckFailed(AssertionError):
    """Your function gave a result that the lesson's self-check can show is wrong."""


def _fail(message):
    raise SelfCheckFailed(message)


def _call(fn, name, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise NotImplementedError(
            f"{name} is not implemented yet: write its body in the cell above (replace "
            "`raise NotImplementedError()`), run that cell, then run this check again.") from None


def _ok(message):
    print("\u2714 " + message)


def _close(a, b, tol=1e-6):
    return np.shape(a) == np.shape(b) and bool(np.all(np.abs(np.asarray(a, float) - np.asarray(b, float)) <= tol))


# ------------------------------------------------------------------------------------------------ softmax
def check_softmax(softmax):
    """Known values, rows summing to 1 along the requested axis, float32 kept, input left alone."""
    x = np.array([1.0, 2.0, 3.0])
    got = _call(softmax, "softmax", x)
    known = np.array([0.09003057317038046, 0.24472847105479767, 0.6652409557748219])
    if np.shape(got) != (3,):
        _fail(f"softmax([1, 2, 3]) has shape {np.shape(got)}, expected (3,): keep the input's shape")
    if not _close(got, known, 1e-7):
        _fail(f"softmax([1, 2, 3]) = {np.round(got, 6)}, expected {np.round(known, 6)} "
              "(each entry is exp(x_i) / sum_j exp(x_j))")
    if not np.array_equal(x, [1.0, 2.0, 3.0]):
        _fail("softmax changed its input array in place; compute into a new array instead")
    m = np.arange(12.0).reshape(3, 4) / 4
    rows = _call(softmax, "softmax", m)
    cols = _call(softmax, "softmax", m, axis=0)
    if np.shape(rows) != (3, 4) or np.shape(cols) != (3, 4):
        _fail("softmax of a (3, 4) array must keep the shape (3, 4); did you forget keepdims=True?")
    if not _close(rows.sum(axis=-1), np.ones(3)):
        _fail("with the default axis=-1 each row should sum to 1; check that the sum runs over `axis` with "
              "keepdims=True")
    if not _close(cols.sum(axis=0), np.ones(4)):
        _fail("with axis=0 each column should sum to 1: use the `axis` argument in both the max and the sum")
    x32 = np.array([0.5, 1.5], dtype=np.float32)
    got32 = _call(softmax, "softmax", x32)
    if getattr(got32, "dtype", None) != np.float32:
        _fail(f"float32 input came back as {getattr(got32, 'dtype', type(got32))}: keep the input's dtype")
    _ok("softmax: known values, rows and columns sum to 1, float32 stays float32")


def check_softmax_stable(softmax):
    """Scores around 1e4 must not overflow: softmax(x) == softmax(x - c)."""
    x = np.array([10000.0, 9999.0, 9998.0])
    with np.errstate(all="ignore"):
        got = _call(softmax, "softmax", x)
    if not np.all(np.isfinite(got)):
        _fail(f"softmax([1e4, 1e4-1, 1e4-2]) = {got}: exp(1e4) overflows to inf and inf/inf is NaN. "
              "Subtract the maximum along the axis before exp (softmax(x) = softmax(x - max x)).")
    expected = _call(softmax, "softmax", x - 10000.0)
    if not _close(got, expected, 1e-9):
        _fail("softmax(x) should equal softmax(x - c) for any constant c, but the results differ")
    _ok("softmax is stable for scores near 1e4")


# ------------------------------------------------------------------------------------------------ attention
def attention_example():
    """The small example the attention self-check uses: Q (T_q=2, d_k=4), K (T_k=3, 4), V (3, d_v=5)."""
    rng = np.random.default_rng(2017)
    Q = rng.normal(size=(2, 4))
    K = rng.normal(size=(3, 4))
    V = rng.normal(size=(3, 5))
    return Q, K, V


def _effective_scale(weights, scores):
    """The c with weights proportional to exp(c * scores) along each row (None if not of that form)."""
    w = np.asarray(weights, float)
    if np.any(w <= 0):
        return None
    logs = np.log(w)
    dl = (logs - logs[..., :1]).ravel()[1:]
    ds = (scores - scores[..., :1]).ravel()[1:]
    keep = np.abs(ds) > 1e-3
    if not np.any(keep):
        return None
    c = dl[keep] / ds[keep]
    return float(np.median(c)) if np.allclose(c, np.median(c), rtol=1e-3, atol=1e-6) else None


def check_attention(scaled_dot_product_attention):
    """Shapes, rows summing to 1, the sqrt(d_k) scale, out = weights @ V, inputs left alone."""
    Q, K, V = attention_example()
    copies = [a.copy() for a in (Q, K, V)]
    result = _call(scaled_dot_product_attention, "scaled_dot_product_attention", Q, K, V)
    if not isinstance(result, tuple) or len(result) != 2:
        _fail("scaled_dot_product_attention must return a pair: (out, weights)")
    out, weights = result
    if any(not np.array_equal(a, b) for a, b in zip((Q, K, V), copies)):
        _fail("scaled_dot_product_attention changed Q, K or V in place (e.g. `Q /= ...`); "
              "compute new arrays instead")
    if np.shape(weights) == (3, 2):
        _fail("weights have shape (T_k, T_q) = (3, 2); they should be (T_q, T_k) = (2, 3), one row per "
              "query: compute Q @ K^T, not K @ Q^T, and do not transpose the result")
    if np.shape(weights) != (2, 3):
        _fail(f"weights have shape {np.shape(weights)}, expected (T_q, T_k) = (2, 3)")
    if np.shape(out) != (2, 5):
        _fail(f"out has shape {np.shape(out)}, expected (T_q, d_v) = (2, 5): out = weights @ V")
    weights = np.asarray(weights, float)
    if not _close(weights.sum(axis=-1), np.ones(2)):
        if _close(weights.sum(axis=0), np.ones(3)):
            _fail("each *column* of the weights sums to 1: softmax ran over the query axis. Every query "
                  "needs a distribution over the keys: softmax over the last axis (axis=-1)")
        if np.allclose(weights, Q @ K.T) or np.allclose(weights, Q @ K.T / 2):
            _fail("the weights are the raw scores: apply softmax to the scores and return that")
        if _effective_scale(weights, Q @ K.T) is not None:
            _fail("the weights are exp(scores) but their rows do not sum to 1: divide each row by its sum "
                  "(that is what softmax does)")
        _fail(f"each row of the weights should sum to 1 (got row sums {np.round(weights.sum(-1), 4)}); "
              "the weights must be softmax(scores) along the last axis")
    raw = Q @ K.T
    c = _effective_scale(weights, raw)
    d_k = Q.shape[-1]
    diagnosis = {
        1.0: "the scores are not scaled: divide Q @ K^T by sqrt(d_k)",
        1 / d_k: "the scores are divided by d_k; divide by sqrt(d_k) (the standard deviation of q.k)",
        1 / math.sqrt(K.shape[-2]): "the scores are scaled by the number of keys (K.shape[-2]); the scale is "
                                    "sqrt(d_k) with d_k = Q.shape[-1], the width the dot product sums over",
    }
    if c is None:
        _fail("the weights are not softmax of a scaled Q @ K^T along each row; check the order of the "
              "matmul and which axis softmax uses")
    if abs(c - 1 / math.sqrt(d_k)) > 1e-6:
        for scale, message in diagnosis.items():
            if abs(c - scale) < 1e-6:
                _fail(message)
        _fail(f"the scores are multiplied by {c:.4g}; expected 1/sqrt(d_k) = {1 / math.sqrt(d_k):.4g}")
    if not _close(out, weights @ V, 1e-8):
        _fail("out should be weights @ V, shape (T_q, d_v); check the order of that product")
    _ok("scaled_dot_product_attention: shapes, rows sum to 1, scale 1/sqrt(d_k), out = weights @ V")


def check_attention_mask(scaled_dot_product_attention):
    """True = blocked: blocked weights exactly 0, the others renormalised, a 2-D mask broadcast over a batch."""
    rng = np.random.default_rng(7)
    Q = rng.normal(size=(2, 3, 4))  # (B, T_q, d_k)
    K = rng.normal(size=(2, 5, 4))  # (B, T_k, d_k)
    V = rng.normal(size=(2, 5, 6))  # (B, T_k, d_v)
    mask = np.array([[False, True, True, False, True],
                     [False, False, True, True, True],
                     [True, False, False, False, False]])  # (T_q, T_k), True = blocked
    result = _call(scaled_dot_product_attention, "scaled_dot_product_attention", Q, K, V, mask=mask)
    out, weights = result
    weights = np.asarray(weights, float)
    if np.shape(weights) != (2, 3, 5):
        _fail(f"with a batch, weights should be (B, T_q, T_k) = (2, 3, 5), got {np.shape(weights)}; "
              "a (T_q, T_k) mask must broadcast over the batch")
    blocked = np.broadcast_to(mask, weights.shape)
    if not _close(weights.sum(axis=-1), np.ones((2, 3))) and _close(weights.sum(axis=-2), np.ones((2, 5))):
        _fail("each *column* of the weights sums to 1: softmax ran over the query axis. Every query needs a "
              "distribution over the keys: softmax over the last axis (axis=-1)")
    if np.all(weights[~blocked] == 0) and np.any(weights[blocked] > 0):
        _fail("the mask's polarity is inverted: True marks a *blocked* pair and must get weight 0, "
              "while the False positions stay open")
    if np.any(weights[blocked] != 0):
        _fail("some blocked positions (mask True) have non-zero weight; set their scores to -inf before "
              "softmax: np.where(mask, -np.inf, scores)")
    if not _close(weights.sum(axis=-1), np.ones((2, 3))):
        _fail("with a mask, each row should still sum to 1; it does not, so the mask was applied after "
              "softmax without renormalising. Mask the scores (set -inf) *before* softmax")
    if np.shape(out) != (2, 3, 6):
        _fail(f"out should be (B, T_q, d_v) = (2, 3, 6), got {np.shape(out)}")
    _ok("masked attention: blocked weights are exactly 0, rows still sum to 1, the mask broadcasts")


# ================================================================================================ lesson 02
# The multi-head mechanism: split_heads, concat_heads, output_projection, multi_head_attention. The checks
# feed arrays whose entries say where they came from (entry (t, c) of x is 100*t + c), so a wrong result can
# be read back as "which token and which column ended up here".
__all__ += ["column_probe", "check_split_heads", "check_concat_heads", "check_output_projection",
            "check_sum_over_heads", "check_multi_head_attention", "check_mha_mask", "check_round_trip"]


def column_probe(T, d_model, B=None):
    """x with x[..., t, c] = 100*t + c (plus 10000*b for batch element b): every entry names its token and column."""
    t = np.arange(T)[:, None]
    c = np.arange(d_model)[None, :]
    x = (100.0 * t + c)  # (T, d_model)
    if B is None:
        return x
    return x[None] + 10000.0 * np.arange(B)[:, None, None]  # (B, T, d_model)


def _split_expected(T, n_heads, d_head, B=None):
    """The split of column_probe written entry by entry: head i, token t, slot j holds column i*d_head + j."""
    i, t, j = np.indices((n_heads, T, d_head))
    e = 100.0 * t + i * d_head + j  # (n_heads, T, d_head)
    if B is None:
        return e
    return e[None] + 10000.0 * np.arange(B)[:, None, None, None]


def _describe_head0(got, d_head):
    """'row r holds token a's columns [...]' for the first rows of head 0 of a column_probe split."""
    head0 = np.asarray(got)[0]
    rows = []
    for r in range(min(2, head0.shape[0])):
        toks = sorted({int(v // 100) for v in head0[r]})
        cols = [int(v % 100) for v in head0[r]]
        who = f"token {toks[0]}" if len(toks) == 1 else "tokens " + ", ".join(map(str, toks))
        rows.append(f"row {r} holds columns {cols} of {who}")
    return "; ".join(rows)


def check_split_heads(split_heads):
    """Which columns land in which head, on one sequence and on a batch; ValueError; input and dtype kept."""
    T, n_heads, d_head = 5, 4, 3
    d_model = n_heads * d_head
    x = column_probe(T, d_model)
    before = x.copy()
    got = _call(split_heads, "split_heads", x, n_heads)
    if not np.array_equal(x, before):
        _fail("split_heads changed its input in place; return a new array (or a view), never write into x")
    if np.shape(got) == (T, n_heads, d_head):
        _fail(f"split_heads gave shape (T, n_heads, d_head) = {np.shape(got)}: you reshaped but did not move "
              "the heads axis in front. Swap the T and n_heads axes: np.swapaxes(x, -3, -2)")
    if np.shape(got) != (n_heads, T, d_head):
        _fail(f"split_heads(x of shape (T, d_model) = {x.shape}, n_heads={n_heads}) should have shape "
              f"(n_heads, T, d_head) = {(n_heads, T, d_head)}, got {np.shape(got)}")
    expected = _split_expected(T, n_heads, d_head)
    if not np.array_equal(got, expected):
        head0 = np.asarray(got)[0]
        if np.array_equal(head0[0] % 100, np.arange(0, d_model, n_heads)):
            _fail(f"head 0 holds columns {[int(v) for v in head0[0] % 100]} of each token (every "
                  f"{n_heads}th column): did you reshape to (T, d_head, n_heads)? Reshape to "
                  "(T, n_heads, d_head) so head 0 gets the contiguous block 0:d_head")
        if np.array_equal(np.asarray(got), x.reshape(n_heads, T, d_head)):
            _fail("head 0 should hold columns 0:d_head of *every* token, but " + _describe_head0(got, d_head)
                  + ". You reshaped straight to (n_heads, T, d_head): reshape to (T, n_heads, d_head) "
                  "first, then swap the T and n_heads axes")
        _fail("split_heads put the wrong entries in the heads; head 0 should hold columns 0:d_head of every "
              "token, but " + _describe_head0(got, d_head))
    B = 2
    xb = column_probe(T, d_model, B)
    gotb = _call(split_heads, "split_heads", xb, n_heads)
    if np.shape(gotb) != (B, n_heads, T, d_head):
        _fail(f"on a batch (B, T, d_model) = {xb.shape} the result should be (B, n_heads, T, d_head) = "
              f"{(B, n_heads, T, d_head)}, got {np.shape(gotb)}: count the axes from the end "
              "(np.swapaxes(x, -3, -2)) so the batch axis stays in front")
    if not np.array_equal(gotb, _split_expected(T, n_heads, d_head, B)):
        _fail("split_heads is right for one sequence but wrong on a batch: axes were swapped counting from the "
              "front (0, 1) instead of from the end (-3, -2)")
    x32 = x.astype(np.float32)
    got32 = _call(split_heads, "split_heads", x32, n_heads)
    if getattr(got32, "dtype", None) != np.float32:
        _fail(f"float32 input came back as {getattr(got32, 'dtype', type(got32))}: keep the input's dtype")
    try:
        split_heads(np.zeros((T, 13)), n_heads)
    except ValueError:
        pass
    except NotImplementedError:
        raise
    except Exception as exc:
        _fail(f"split_heads(x with d_model=13, n_heads=4) raised {type(exc).__name__}; raise ValueError "
              "with a message saying that n_heads must divide d_model")
    else:
        _fail("split_heads(x with d_model=13, n_heads=4) returned a result; 4 heads cannot share 13 columns "
              "equally: raise ValueError")
    _ok("split_heads: head i holds columns i*d_head:(i+1)*d_head of every token, batched too; ValueError when "
        "n_heads does not divide d_model")


def check_concat_heads(concat_heads):
    """Token t's row is head 0, head 1, ... of token t side by side; batches; exact inverse of the split."""
    T, n_heads, d_head = 5, 4, 3
    d_model = n_heads * d_head
    heads = _split_expected(T, n_heads, d_head)  # head i, token t, slot j holds 100*t + i*d_head + j
    before = heads.copy()
    got = _call(concat_heads, "concat_heads", heads)
    if not np.array_equal(heads, before):
        _fail("concat_heads changed its input in place; return a new array")
    if np.shape(got) != (T, d_model):
        _fail(f"concat_heads of (n_heads, T, d_head) = {heads.shape} should be (T, n_heads*d_head) = "
              f"{(T, d_model)}, got {np.shape(got)}")
    expected = column_probe(T, d_model)
    if not np.array_equal(got, expected):
        if np.array_equal(got, heads.reshape(T, d_model)):
            row0 = sorted({int(v // 100) for v in np.asarray(got)[0]})
            _fail(f"row 0 of the result holds pieces of tokens {row0} from head 0 instead of all heads of token "
                  "0: you reshaped without moving the heads axis back. Swap n_heads and T (np.swapaxes(x, -3, "
                  "-2)), then reshape")
        _fail("concat_heads put the wrong entries in the rows: row t should be head 0, head 1, ... of token t "
              "side by side")
    B = 2
    gotb = _call(concat_heads, "concat_heads", _split_expected(T, n_heads, d_head, B))
    if np.shape(gotb) != (B, T, d_model):
        _fail(f"on a batch (B, n_heads, T, d_head) the result should be (B, T, d_model) = {(B, T, d_model)}, got "
              f"{np.shape(gotb)}; count the axes from the end (np.swapaxes(x, -3, -2))")
    if not np.array_equal(gotb, column_probe(T, d_model, B)):
        rows = sorted({int(v // 10000) for v in np.asarray(gotb)[0].ravel()})
        _fail(f"concat_heads is right for one sequence but mixes a batch: output example 0 holds numbers from input "
              f"examples {rows}. Swap axes -3 and -2 (counted from the end), not 0 and 1")
    _ok("concat_heads: row t is head 0, head 1, ... of token t side by side, batched too; it undoes the split")


def _concat_by_hand(heads):
    """Concat(heads) written as a concatenation along the last axis (no reshape involved)."""
    heads = np.asarray(heads)
    return np.concatenate([heads[..., i, :, :] for i in range(heads.shape[-3])], axis=-1)


def check_output_projection(output_projection):
    """Concat(heads) @ W_O, probed with an identity W_O and a W_O that only reads one head."""
    rng = np.random.default_rng(3)
    n_heads, T, d_head = 4, 5, 3
    d_model = n_heads * d_head
    heads = rng.normal(size=(n_heads, T, d_head))
    W_O = rng.normal(size=(d_model, d_model))
    copies = heads.copy(), W_O.copy()
    got = _call(output_projection, "output_projection", heads, W_O)
    if not (np.array_equal(heads, copies[0]) and np.array_equal(W_O, copies[1])):
        _fail("output_projection changed heads or W_O in place; compute new arrays")
    if np.shape(got) != (T, d_model):
        _fail(f"output_projection of heads (n_heads, T, d_head) = {heads.shape} with W_O {W_O.shape} should "
              f"be (T, d_model) = {(T, d_model)}, got {np.shape(got)}")
    concat = _concat_by_hand(heads)
    expected = concat @ W_O
    if not _close(got, expected, 1e-9):
        if _close(got, concat, 1e-9):
            _fail("the result is the concatenated heads themselves: W_O was never applied. Return "
                  "concat_heads(heads) @ W_O")
        if _close(got, concat @ W_O.T, 1e-9):
            _fail("the result is Concat(heads) @ W_O.T: W_O is transposed. Row block i of W_O belongs to head i, "
                  "so multiply by W_O as it is")
        if _close(got, expected / n_heads, 1e-9):
            _fail("the result is 1/n_heads of the right one: the heads' contributions were averaged. They add up")
        one = np.zeros_like(W_O)
        one[d_head:2 * d_head] = W_O[d_head:2 * d_head]  # only head 1's rows are non-zero
        probe = _call(output_projection, "output_projection", heads, one)
        if not _close(probe, heads[1] @ W_O[d_head:2 * d_head], 1e-9):
            _fail("with only rows d_head:2*d_head of W_O non-zero (the rows that belong to head 1) the result "
                  "should be head_1 @ those rows; it is not, so the heads do not meet their own rows of W_O. "
                  "Concatenate the heads (do not sum or average them) before multiplying by W_O")
        _fail("output_projection differs from Concat(heads) @ W_O; check the concatenation and the product")
    gotb = _call(output_projection, "output_projection", heads[None].repeat(2, axis=0), W_O)
    if np.shape(gotb) != (2, T, d_model) or not _close(gotb[1], expected, 1e-9):
        _fail("output_projection works for one sequence but not for a batch (B, n_heads, T, d_head): the "
              "heads axis is -3, counted from the end")
    _ok("output_projection: Concat(heads) @ W_O, each head meets its own rows of W_O, batched too")


def check_sum_over_heads(output_projection_per_head):
    """The per-head form sum_i head_i @ W_O[i*d_head:(i+1)*d_head] equals Concat(heads) @ W_O."""
    rng = np.random.default_rng(11)
    n_heads, T, d_head = 3, 4, 2
    d_model = n_heads * d_head
    heads = rng.normal(size=(n_heads, T, d_head))
    W_O = rng.normal(size=(d_model, d_model))
    got = _call(output_projection_per_head, "output_projection_per_head", heads, W_O)
    expected = _concat_by_hand(heads) @ W_O
    if np.shape(got) != (T, d_model):
        _fail(f"the per-head sum should have shape (T, d_model) = {(T, d_model)}, got {np.shape(got)}")
    if not _close(got, expected, 1e-9):
        if _close(got, expected / n_heads, 1e-9):
            _fail("you averaged the per-head terms; Concat(heads) @ W_O is their *sum*")
        _fail("the per-head sum differs from Concat(heads) @ W_O: head i must meet rows "
              "i*d_head:(i+1)*d_head of W_O")
    _ok(f"sum over heads of head_i @ W_O[i*d_head:(i+1)*d_head] equals Concat(heads) @ W_O "
        f"(largest difference {np.abs(np.asarray(got) - expected).max():.1e})")


def _uniform(w, tol=1e-9):
    w = np.asarray(w, float)
    return bool(np.all(np.abs(w - 1.0 / w.shape[-1]) <= tol))


def check_multi_head_attention(multi_head_attention):
    """Shapes, per-head projections, the per-head scale, batches, inputs kept (the mask: check_mha_mask).

    Uses your scaled_dot_product_attention from lesson 01 (through your multi_head_attention): run that
    lesson's checks first if this one reports something odd about softmax or the weights.
    """
    rng = np.random.default_rng(5)
    T, n_heads, d_head = 5, 4, 3
    d_model = n_heads * d_head
    x = rng.normal(size=(T, d_model))
    eye = np.eye(d_model)
    # W_Q reads into head 1's columns only; the other heads get zero queries, so uniform weights
    W_Q = np.zeros((d_model, d_model))
    W_Q[:, d_head:2 * d_head] = rng.normal(size=(d_model, d_head))
    W_K = rng.normal(size=(d_model, d_model))
    args = [x, W_Q, W_K, eye.copy(), eye.copy()]
    copies = [a.copy() for a in args]
    result = _call(multi_head_attention, "multi_head_attention", *args, n_heads)
    if not isinstance(result, tuple) or len(result) != 2:
        _fail("multi_head_attention must return a pair: (out, weights)")
    out, weights = result
    if any(not np.array_equal(a, b) for a, b in zip(args, copies)):
        _fail("multi_head_attention changed x or one of the W in place (e.g. `W_Q /= ...`); compute new arrays")
    if np.shape(weights) != (n_heads, T, T):
        _fail(f"weights should be (n_heads, T, T) = {(n_heads, T, T)}, got {np.shape(weights)}")
    if np.shape(out) != (T, d_model):
        _fail(f"out should be (T, d_model) = {(T, d_model)}, got {np.shape(out)}")
    weights = np.asarray(weights, float)
    if not _close(weights.sum(-1), np.ones((n_heads, T))):
        _fail("each row of every head's weights should sum to 1; run lesson 01's attention checks on your "
              "scaled_dot_product_attention")
    uniform = [_uniform(weights[i]) for i in range(n_heads)]
    if all(uniform):
        _fail("every head's weights are uniform, though head 1 has non-zero query columns (W_Q[:, d_head:"
              "2*d_head]): all heads seem to use one shared projection (e.g. the first d_head columns). "
              "Project with the whole W_Q and split the result, so head i uses its own columns")
    if uniform != [i != 1 for i in range(n_heads)]:
        if np.allclose(weights, weights[:1]):
            _fail("all heads have identical weights: they share one projection. Project with the whole W_Q, "
                  "W_K, W_V and then split_heads, so head i uses columns i*d_head:(i+1)*d_head")
        _fail(f"only W_Q's columns d_head:2*d_head (head 1) are non-zero, so only head 1 should attend "
              f"non-uniformly, but heads {[i for i in range(n_heads) if not uniform[i]]} do. Are the weights "
              "applied as x @ W.T instead of x @ W, or the heads split by strided columns?")
    q = (x @ W_Q)[:, d_head:2 * d_head]
    k = (x @ W_K)[:, d_head:2 * d_head]
    c = _effective_scale(weights[1], q @ k.T)
    if c is None:
        _fail("head 1's weights are not a softmax of its own (x @ W_Q) and (x @ W_K) columns d_head:2*d_head")
    if abs(c - 1 / math.sqrt(d_head)) > 1e-6:
        if abs(c - 1 / math.sqrt(d_model)) < 1e-6:
            _fail("the scores are divided by sqrt(d_model); inside a head the dot product sums over d_head = "
                  "d_model // n_heads terms, so divide by math.sqrt(d_head)")
        _fail(f"head 1's scores are multiplied by {c:.4g}; expected 1/sqrt(d_head) = {1 / math.sqrt(d_head):.4g}")
    # with W_V = W_O = identity, head i's output is its weights times x's columns of head i
    expected = np.concatenate([weights[i] @ x[:, i * d_head:(i + 1) * d_head] for i in range(n_heads)], axis=-1)
    if not _close(out, expected, 1e-8):
        _fail("with W_V and W_O the identity, out should be each head's weights applied to its own columns of x, "
              "side by side; it is not: check W_V, the concatenation and W_O")
    _check_mha_batch(multi_head_attention, rng, T, n_heads, d_model)
    _ok("multi_head_attention: shapes, each head uses its own columns of W_Q, scale 1/sqrt(d_head), batches "
        "pass through")


def check_mha_mask(multi_head_attention):
    """A (T, T) causal mask must block the future in every head, not just one."""
    rng = np.random.default_rng(6)
    T, n_heads, d_head = 5, 4, 3
    d_model = n_heads * d_head
    x = rng.normal(size=(T, d_model))
    eye = np.eye(d_model)
    causal = np.triu(np.ones((T, T), dtype=bool), k=1)
    _, wm = _call(multi_head_attention, "multi_head_attention", x, rng.normal(size=(d_model, d_model)),
                  rng.normal(size=(d_model, d_model)), eye.copy(), eye.copy(), n_heads, mask=causal)
    wm = np.asarray(wm, float)
    blocked = [bool(np.all(wm[i][causal] == 0)) for i in range(n_heads)]
    if not all(blocked):
        if blocked[0]:
            _fail(f"the (T, T) mask blocks pairs in head 0 only (heads {[i for i in range(n_heads) if not blocked[i]]}"
                  " still attend to the future): a (T, T) mask must reach every head; pass it as it is and it "
                  "broadcasts over (n_heads, T, T)")
        _fail("with a causal (T, T) mask some blocked pairs have non-zero weight: pass the mask to the attention "
              "(True = blocked)")
    if np.shape(wm) != (n_heads, T, T) or not _close(wm.sum(-1), np.ones((n_heads, T))):
        _fail("with a causal mask every head's rows should still sum to 1 over the keys left open")
    _ok("the (T, T) mask reaches every head: no head attends to a blocked pair")


def _check_mha_batch(multi_head_attention, rng, T, n_heads, d_model):
    xb = rng.normal(size=(2, T, d_model))
    Ws = [rng.normal(size=(d_model, d_model)) / math.sqrt(d_model) for _ in range(4)]
    outb, wb = _call(multi_head_attention, "multi_head_attention", xb, *Ws, n_heads)
    if np.shape(outb) != (2, T, d_model) or np.shape(wb) != (2, n_heads, T, T):
        _fail(f"on a batch (B, T, d_model) = {xb.shape}: out should be {(2, T, d_model)} and weights "
              f"{(2, n_heads, T, T)}, got {np.shape(outb)} and {np.shape(wb)}")
    out1, w1 = _call(multi_head_attention, "multi_head_attention", xb[1], *Ws, n_heads)
    if not (_close(outb[1], out1, 1e-9) and _close(wb[1], w1, 1e-9)):
        _fail("batch element 1 gives a different result inside a batch than on its own: some axis is counted "
              "from the front; count from the end (-3, -2, -1) so leading batch axes pass through")


def check_round_trip(split_heads, concat_heads):
    """Your two helpers together: concat_heads(split_heads(x, n_heads)) gives x back exactly."""
    x = np.random.default_rng(9).normal(size=(2, 5, 12))  # (B, T, d_model)
    for n_heads in (1, 3, 4, 12):
        back = _call(concat_heads, "concat_heads", _call(split_heads, "split_heads", x, n_heads))
        if np.shape(back) != x.shape or not np.array_equal(back, x):
            _fail(f"concat_heads(split_heads(x, {n_heads})) does not give x back exactly (shape {np.shape(back)}); "
                  "the two must be exact inverses: the same reshape and axis swap, in reverse order")
    _ok("concat_heads(split_heads(x, n_heads)) == x exactly, for 1, 3, 4 and 12 heads")

# ================================================================================================ lesson 05
# Exercises. The answer checks validate the *form* of an answer (a whole number, one letter); the function
# checks use probes whose right result follows from the definition (an arange input shows which column went
# where; W_Q = 0 makes every score 0, so every weight must be 1/T).
__all__ += ["check_head_width", "check_param_counts", "check_choice", "check_split_merge", "check_head_weights",
            "check_mha_from_scratch"]


def _not_answered(name):
    raise NotImplementedError(f"{name} is not implemented yet: replace None with your answer in the cell above, "
                              "run that cell, then run this check again.")


def _whole(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_head_width(d_head, d_model, n_heads, name="d_head"):
    """d_head is a whole number of columns and n_heads heads of that width tile d_model exactly."""
    if d_head is None:
        _not_answered(name)
    if not _whole(d_head):
        _fail(f"{name} = {d_head!r} is a {type(d_head).__name__}; a head is a whole number of columns, so "
              "give an int (in code, d_model // n_heads divides without leaving a float)")
    if d_head * n_heads != d_model:
        _fail(f"{n_heads} heads of {d_head} columns hold {d_head * n_heads} columns, but a token has "
              f"d_model = {d_model}: every column belongs to exactly one head")
    _ok(f"{name}: {n_heads} heads x {d_head} columns = d_model = {d_model}")


def check_param_counts(count_many_heads, count_one_head):
    """Both counts are positive whole numbers and the same: the head count does not change the parameters."""
    for name, v in (("param_count_8_heads", count_many_heads), ("param_count_1_head", count_one_head)):
        if v is None:
            _not_answered(name)
        if not _whole(v) or v <= 0:
            _fail(f"{name} = {v!r} should be a positive whole number (an int)")
    if count_many_heads != count_one_head:
        _fail(f"8 heads give {count_many_heads} parameters and 1 head gives {count_one_head}; splitting W_Q, W_K "
              "and W_V into heads cuts each matrix into column slices, it does not add or remove any entry")
    _ok("parameter counts: whole numbers, and the same for 8 heads and for 1 head (graded when submitted)")


def check_choice(answer, name="mc_answer"):
    """Only the form of a multiple-choice answer: one letter from a to d, as a string."""
    if answer is None:
        raise NotImplementedError(f"{name} is not implemented yet: set it to the letter of your choice, as a "
                                  "string, in the cell above, run it, then run this check again.")
    if type(answer) is not str or answer.strip().lower() not in tuple("abcd"):
        _fail(f"{name} = {answer!r}: record a single letter from a to d as a string")
    _ok(f"{name}: one letter recorded ({answer.strip().lower()}); it is graded when the notebook is graded")


# ------------------------------------------------------------------------------------------ split / merge
def _split_is_right(split_into_heads):
    """True when split_into_heads passes the arange probe (used to decide whether later probes can run)."""
    try:
        with np.errstate(all="ignore"):
            x = np.arange(120.0).reshape(5, 3, 8)  # (B, T, d_model)
            got = split_into_heads(x, 2)
            one = split_into_heads(x[0], 2)
        return (_close(got, np.stack([x[..., :4], x[..., 4:]], axis=1), 0.0)
                and _close(one, np.stack([x[0, :, :4], x[0, :, 4:]]), 0.0))
    except Exception:
        return False


def _merge_is_right(merge_heads):
    try:
        heads = np.arange(120.0).reshape(5, 2, 3, 4)  # (B, n_heads, T, d_head)
        got = merge_heads(heads)
        one = merge_heads(heads[0])
        return (_close(got, np.concatenate([heads[:, 0], heads[:, 1]], axis=-1), 0.0)
                and _close(one, np.concatenate([heads[0, 0], heads[0, 1]], axis=-1), 0.0))
    except Exception:
        return False


def check_split_merge(split_into_heads, merge_heads):
    """Head i holds columns i*d_head:(i+1)*d_head of every token, batches work, and the round trip is exact."""
    T, n_heads, d_head = 3, 2, 4
    d_model = n_heads * d_head
    x = np.arange(T * d_model, dtype=float).reshape(T, d_model)  # entry = d_model * token + column
    heads = _call(split_into_heads, "split_into_heads", x, n_heads)
    if not np.array_equal(x, np.arange(T * d_model, dtype=float).reshape(T, d_model)):
        _fail("split_into_heads changed its input in place; return a new array (or a view) instead")
    if np.shape(heads) == (T, n_heads, d_head):
        _fail(f"split_into_heads(x of shape (T, d_model) = {x.shape}, n_heads={n_heads}) has shape (T, n_heads, "
              f"d_head) = {np.shape(heads)}: you reshaped but did not move the head axis in front of T "
              "(swap the T and n_heads axes)")
    if np.shape(heads) != (n_heads, T, d_head):
        _fail(f"split_into_heads gave shape {np.shape(heads)}, expected (n_heads, T, d_head) = "
              f"{(n_heads, T, d_head)}")
    heads = np.asarray(heads)
    token, column = heads // d_model, heads % d_model
    if not np.array_equal(token, np.broadcast_to(np.arange(T)[None, :, None], heads.shape)):
        _fail(f"row t of every head should come from token t, but with x = np.arange({T * d_model}).reshape({T}, "
              f"{d_model}) (entry = {d_model} * token + column) your head 0 is {heads[0].astype(int).tolist()}: "
              f"its rows come from tokens {token[0, :, 0].astype(int).tolist()}. Reshaping straight to (n_heads, "
              "T, d_head) cuts the flat array into consecutive chunks, whole tokens at a time. Reshape to "
              "(T, n_heads, d_head) first, then swap the T and n_heads axes")
    if np.array_equal(column[0, 0], np.arange(0, d_model, n_heads)):
        _fail(f"head 0 holds columns {column[0, 0].tolist()} of token 0 (every n_heads-th column): you reshaped to "
              "(T, d_head, n_heads). Head i must hold the contiguous block of columns i*d_head:(i+1)*d_head, "
              "so reshape to (T, n_heads, d_head)")
    if not np.array_equal(column, np.broadcast_to(np.arange(d_model).reshape(n_heads, 1, d_head), heads.shape)):
        _fail(f"head 0 holds columns {column[0, 0].tolist()} of token 0, expected {list(range(d_head))}: head i "
              "holds columns i*d_head:(i+1)*d_head")
    B = 5
    xb = np.arange(B * T * d_model, dtype=float).reshape(B, T, d_model)
    try:
        heads_b = split_into_heads(xb, n_heads)
    except NotImplementedError:
        raise
    except Exception as exc:
        _fail(f"split_into_heads fails on a batch x of shape (B, T, d_model) = {xb.shape}: {exc}. Use negative "
              "axes (np.swapaxes(x, -3, -2)) so leading batch axes pass through")
    if np.shape(heads_b) != (B, n_heads, T, d_head) or not all(
            np.array_equal(heads_b[b], np.asarray(split_into_heads(xb[b], n_heads))) for b in range(B)):
        _fail(f"on a batch of shape {xb.shape} split_into_heads should give (B, n_heads, T, d_head) = "
              f"{(B, n_heads, T, d_head)} with each example split as on its own, got shape {np.shape(heads_b)}: "
              "swap the two axes just before d_head (np.swapaxes(x, -3, -2)), not fixed axes 0 and 1")
    merged = _call(merge_heads, "merge_heads", heads)
    if np.shape(merged) != (T, d_model):
        _fail(f"merge_heads of shape (n_heads, T, d_head) = {heads.shape} gave {np.shape(merged)}, expected "
              f"(T, d_model) = {(T, d_model)}")
    if not np.array_equal(merged, x):
        _fail("merge_heads(split_into_heads(x)) is not x: merge must undo the split in reverse order, moving the "
              "head axis back behind T *before* the reshape to (T, d_model)")
    merged_b = _call(merge_heads, "merge_heads", np.asarray(heads_b))
    if np.shape(merged_b) != xb.shape or not np.array_equal(merged_b, xb):
        _fail("merge_heads does not undo the split on a batch (B, n_heads, T, d_head): use negative axes")
    rng = np.random.default_rng(5)
    x32 = rng.normal(size=(4, 7, 18)).astype(np.float32)  # (B, T, d_model), d_model = 3 heads x 6 columns
    back = _call(merge_heads, "merge_heads", _call(split_into_heads, "split_into_heads", x32, 3))
    if getattr(back, "dtype", None) != np.float32 or not np.array_equal(back, x32):
        _fail("on a random float32 batch the round trip did not return x bit for bit (or changed the dtype); "
              "splitting and merging only move numbers, so nothing may be computed on them")
    _ok("split_into_heads / merge_heads: head i holds columns i*d_head:(i+1)*d_head, batches work, and "
        "merge(split(x)) == x exactly")


# ------------------------------------------------------------------------------------------ head weights
def _probe_layer(T=5, d_model=12, seed=11):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, d_model))
    W_Q = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    W_K = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    return x, W_Q, W_K


def _scale_probe(T=5, d_model=12, n_heads=3, seed=3):
    """x non-zero only in head 0's columns and W_Q = W_K = identity: head 0's raw scores are known."""
    d_head = d_model // n_heads
    rng = np.random.default_rng(seed)
    x = np.zeros((T, d_model))
    x[:, :d_head] = rng.normal(size=(T, d_head))
    return x, np.eye(d_model), x[:, :d_head] @ x[:, :d_head].T, d_head


def _scale_message(c, d_head, d_model):
    if c is None:
        return ("head 0's weights are not a softmax of its own scores Q_0 K_0^T (each row along the keys): check "
                "the order of the matmul and the softmax axis")
    for scale, message in (
            (1.0, "the scores are not scaled: divide them by sqrt(d_head)"),
            (1 / d_head, "the scores are divided by d_head; divide by sqrt(d_head), the standard deviation"),
            (1 / math.sqrt(d_model), "the scores are divided by sqrt(d_model); inside one head the dot product "
                                     "sums over d_head = d_model // n_heads terms, so divide by sqrt(d_head)")):
        if abs(c - scale) < 1e-6:
            return message
    return f"head 0's scores are multiplied by {c:.4g}; expected 1/sqrt(d_head) = {1 / math.sqrt(d_head):.4g}"


def check_head_weights(head_weights, split_into_heads=None):
    """Shape, rows sum to 1, same input same output, W_Q = 0 gives uniform weights; then per-head probes."""
    T, d_model, n_heads = 5, 12, 3
    x, W_Q, W_K = _probe_layer(T, d_model)
    copies = [a.copy() for a in (x, W_Q, W_K)]
    w = _call(head_weights, "head_weights", x, W_Q, W_K, n_heads)
    if any(not np.array_equal(a, b) for a, b in zip((x, W_Q, W_K), copies)):
        _fail("head_weights changed one of its inputs in place; compute new arrays instead")
    if np.shape(w) == (T, n_heads, T):
        _fail(f"head_weights gave shape (T, n_heads, T) = {np.shape(w)}: the head axis must come first, "
              f"(n_heads, T, T) = {(n_heads, T, T)}")
    if np.shape(w) != (n_heads, T, T):
        _fail(f"head_weights gave shape {np.shape(w)}, expected (n_heads, T, T) = {(n_heads, T, T)}")
    w = np.asarray(w, float)
    if np.any(w < 0) or not _close(w.sum(axis=-1), np.ones((n_heads, T))):
        _fail("every row of every head should be a probability distribution over the keys (non-negative, sums "
              "to 1): apply softmax along the last axis")
    again = _call(head_weights, "head_weights", x, W_Q, W_K, n_heads)
    if not np.array_equal(np.asarray(again, float), w):
        _fail("head_weights returned different weights for the same x, W_Q and W_K: the weights must be "
              "computed from the layer, with no random numbers. Two random patterns always 'differ', which "
              "proves nothing about the layer")
    flat = _call(head_weights, "head_weights", x, np.zeros_like(W_Q), W_K, n_heads)
    if not _close(flat, np.full((n_heads, T, T), 1 / T), 1e-9):
        _fail(f"with W_Q = 0 every query is 0, so every score is 0 and every weight must be 1/T = {1 / T:.3g}; "
              "yours are not: the weights must be softmax of the scores Q_h K_h^T / sqrt(d_head) of the layer")
    if split_into_heads is not None and not _split_is_right(split_into_heads):
        _ok("head_weights: shape, rows sum to 1, deterministic, W_Q = 0 gives uniform weights (the batch and "
            "per-head probes run once split_into_heads passes its check)")
        return
    B = 2
    xb = np.stack([x, x[::-1]])
    wb = _call(head_weights, "head_weights", xb, W_Q, W_K, n_heads)
    if np.shape(wb) != (B, n_heads, T, T) or not _close(wb[1], head_weights(x[::-1], W_Q, W_K, n_heads), 1e-9):
        _fail(f"on a batch x of shape (B, T, d_model) = {xb.shape} head_weights should give (B, n_heads, T, T) = "
              f"{(B, n_heads, T, T)}, each example as on its own (got shape {np.shape(wb)}): use negative axes")
    d_head = d_model // n_heads
    for j in range(n_heads):
        W_Q_j = W_Q.copy()
        W_Q_j[:, j * d_head:(j + 1) * d_head] = 0.0  # head j's queries become 0
        wj = np.asarray(_call(head_weights, "head_weights", x, W_Q_j, W_K, n_heads), float)
        if not _close(wj[j], np.full((T, T), 1 / T), 1e-9):
            _fail(f"zeroing the columns {j * d_head}:{(j + 1) * d_head} of W_Q (head {j}'s queries) should make "
                  f"head {j}'s weights uniform, but it does not: head {j} must use exactly columns "
                  f"j*d_head:(j+1)*d_head of Q and K (reshape to (T, n_heads, d_head), then swap axes)")
        others = [i for i in range(n_heads) if i != j]
        if not _close(wj[others], w[others], 1e-9):
            _fail(f"zeroing head {j}'s columns of W_Q changed the weights of other heads: each head must see only "
                  "its own columns")
    if np.allclose(w[0], w[1], atol=1e-3):
        _fail("heads 0 and 1 give the same weights on a random layer: each head must use its own column slice")
    x_s, eye, raw0, d_head = _scale_probe(T, d_model, n_heads)
    ws = np.asarray(_call(head_weights, "head_weights", x_s, eye, eye, n_heads), float)
    c = _effective_scale(ws[0], raw0)
    if c is None or abs(c - 1 / math.sqrt(d_head)) > 1e-6:
        _fail(_scale_message(c, d_head, d_model))
    _ok("head_weights: shape (n_heads, T, T), rows sum to 1, computed from the layer, each head uses only its "
        "own columns, scale 1/sqrt(d_head), batches work")


# ------------------------------------------------------------------------------------ mha from raw operations
def check_mha_from_scratch(mha_from_scratch, split_into_heads=None, merge_heads=None):
    """Output (T, d_model) for every head count; W_O applied; W_Q = 0 gives a known output; the per-head scale."""
    T, d_model = 5, 12
    x, W_Q, W_K = _probe_layer(T, d_model, seed=21)
    rng = np.random.default_rng(22)
    W_V = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    W_O = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    args = (x, W_Q, W_K, W_V, W_O)
    copies = [a.copy() for a in args]
    for n_heads in (1, 2, 3, 4, 6, 12):
        result = _call(mha_from_scratch, "mha_from_scratch", *args, n_heads)
        if not isinstance(result, tuple) or len(result) != 2:
            _fail("mha_from_scratch must return a pair: (out, weights)")
        out, weights = result
        if np.shape(out) != (T, d_model):
            _fail(f"with n_heads={n_heads} the output has shape {np.shape(out)}, expected (T, d_model) = "
                  f"{(T, d_model)} whatever the head count: concatenate the heads, then apply W_O")
        if np.shape(weights) != (n_heads, T, T):
            _fail(f"with n_heads={n_heads} the weights have shape {np.shape(weights)}, expected (n_heads, T, T) = "
                  f"{(n_heads, T, T)}")
        if not _close(np.asarray(weights, float).sum(axis=-1), np.ones((n_heads, T))):
            _fail("each row of each head's weights should sum to 1: softmax over the keys (last axis)")
    if any(not np.array_equal(a, b) for a, b in zip(args, copies)):
        _fail("mha_from_scratch changed one of its inputs in place; compute new arrays instead")
    n_heads = 3
    out, _ = mha_from_scratch(*args, n_heads)
    zero_out, _ = _call(mha_from_scratch, "mha_from_scratch", x, W_Q, W_K, W_V, np.zeros_like(W_O), n_heads)
    if not _close(zero_out, np.zeros((T, d_model)), 1e-12):
        _fail("with W_O = 0 the output should be 0, but it is not: the output is Concat(heads) @ W_O, so W_O "
              "must be applied last")
    helpers_ok = ((split_into_heads is None or _split_is_right(split_into_heads))
                  and (merge_heads is None or _merge_is_right(merge_heads)))
    if not helpers_ok:
        _ok("mha_from_scratch: shapes for every head count, W_O applied (the batch and value probes run "
            "once split_into_heads and merge_heads pass their check)")
        return
    xb = np.stack([x, x[::-1], 2 * x])
    outb, wb = _call(mha_from_scratch, "mha_from_scratch", xb, W_Q, W_K, W_V, W_O, n_heads)
    if np.shape(outb) != (3, T, d_model) or np.shape(wb) != (3, n_heads, T, T) or not _close(outb[0], out, 1e-9):
        _fail(f"on a batch x of shape (B, T, d_model) = {xb.shape} the result should be out (B, T, d_model) and "
              f"weights (B, n_heads, T, T), each example as on its own: use negative axes")
    flat_out, flat_w = _call(mha_from_scratch, "mha_from_scratch", x, np.zeros_like(W_Q), W_K, W_V, W_O, n_heads)
    expected = np.broadcast_to((x @ W_V).mean(axis=0) @ W_O, (T, d_model))
    if not _close(flat_w, np.full((n_heads, T, T), 1 / T), 1e-9):
        _fail("with W_Q = 0 every score is 0 and every weight must be 1/T; yours are not")
    if not _close(flat_out, expected, 1e-9):
        if _close(flat_out, np.broadcast_to((x @ W_V).mean(axis=0) @ W_O.T, (T, d_model)), 1e-9):
            _fail("W_O is applied transposed: the output is Concat(heads) @ W_O, with W_O of shape "
                  "(n_heads*d_head, d_model)")
        _fail("with W_Q = 0 each head averages its values over all tokens, so every output row must be "
              "mean_t(x @ W_V) @ W_O; yours is not: check that V is split into heads like Q and K, and that the "
              "heads are concatenated (not summed or averaged) before W_O")
    x_s, eye, raw0, d_head = _scale_probe(T, d_model, n_heads)
    _, ws = _call(mha_from_scratch, "mha_from_scratch", x_s, eye, eye, W_V, W_O, n_heads)
    c = _effective_scale(np.asarray(ws, float)[0], raw0)
    if c is None or abs(c - 1 / math.sqrt(d_head)) > 1e-6:
        _fail(_scale_message(c, d_head, d_model))
    _ok("mha_from_scratch: out is (T, d_model) for 1, 2, 3, 4, 6 and 12 heads, W_O applied, the W_Q = 0 output "
        "is right, scale 1/sqrt(d_head), batches work")

# ------------------------------------------------------------------------------------------------ lesson 03
__all__ += ["check_param_count", "check_param_count_bias", "check_exercise_512", "check_gqa_param_count", "check_kv_cache_bytes"]


def _count(fn, name, *args, **kwargs):
    got = _call(fn, name, *args, **kwargs)
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
        kind = "a float" if isinstance(got, (float, np.floating)) else type(got).__name__
        _fail(f"{name}{args} returned {kind} ({got!r}); a parameter count is a whole number: return an int "
              "(use // rather than /)")
    return int(got)


def check_param_count(mha_param_count):
    """Known values (the paper's d_model=512 layer, BERT-base), no change with n_heads, bias = 4 vectors."""
    got = _count(mha_param_count, "mha_param_count", 512, 8)
    if got != 1_048_576:
        if got * 4 == 1_048_576 * 3:
            _fail(f"mha_param_count(512, 8) = {got:,} = 3 * 512^2: W_O is missing. The layer owns four "
                  "(d_model, d_model) matrices: W_Q, W_K, W_V and W_O")
        if got == 8 * 1_048_576:
            _fail(f"mha_param_count(512, 8) = {got:,} is 8 times too large: each head's projections are "
                  "(d_model, d_head) slices, not full (d_model, d_model) matrices")
        _fail(f"mha_param_count(512, 8) = {got:,}, expected 4 * 512^2 = 1,048,576")
    counts = {h: _count(mha_param_count, "mha_param_count", 512, h) for h in (1, 2, 4, 16, 32)}
    if len(set(counts.values())) != 1 or counts[1] != got:
        _fail(f"the count should not depend on n_heads, but for d_model=512 you get {counts}: the n_heads "
              "slices of d_model x d_head always add up to one d_model x d_model matrix per projection")
    if _count(mha_param_count, "mha_param_count", 1024, 8) != 4 * got:
        _fail("doubling d_model should multiply the count by 4 (every matrix is d_model x d_model)")
    no_bias = _count(mha_param_count, "mha_param_count", 768, 12, bias=False)
    default = _count(mha_param_count, "mha_param_count", 768, 12)
    if default != no_bias or no_bias != 2_359_296:
        _fail(f"mha_param_count(768, 12) = {default:,}; with bias left at its default (False) it should be "
              "4 * 768^2 = 2,359,296")
    _ok("mha_param_count: 1,048,576 for d_model=512, the same for every n_heads, 4 * d_model^2 in general")


def check_param_count_bias(mha_param_count):
    """With bias=True: BERT-base's layer, one bias vector of length d_model per projection."""
    no_bias = _count(mha_param_count, "mha_param_count", 768, 12)
    with_bias = _count(mha_param_count, "mha_param_count", 768, 12, bias=True)
    extra = with_bias - no_bias
    if extra != 4 * 768:
        _fail(f"bias=True adds {extra:,} parameters for d_model=768; each of the four projections has one bias "
              "vector of length d_model, so it should add 4 * 768 = 3,072")
    if with_bias != 2_362_368:
        _fail(f"mha_param_count(768, 12, bias=True) = {with_bias:,}; BERT-base's attention layer has "
              "4 * 768^2 + 4 * 768 = 2,362,368 parameters")
    _ok("mha_param_count(bias=True): 2,362,368 for BERT-base's layer, 4 * d_model biases")


def check_exercise_512(exercise_512, mha_param_count=None):
    """The worked exercise: (d_head, params with 8 heads, params of one full-width head).

    A wrong total that merely repeats your ``mha_param_count`` is reported but not failed here: that function's
    own check already fails, and one mistake should not fail two checks.
    """
    got = _call(exercise_512, "exercise_512")
    if not isinstance(got, tuple) or len(got) != 3:
        _fail("exercise_512() should return a tuple of three numbers: (d_head, params_8_heads, params_1_head)")
    d_head, eight, one = got
    if d_head != 64:
        _fail(f"d_head = {d_head}; it is d_model // n_heads for d_model=512 and 8 heads")
    if eight != 4 * 512 * 512 or one != 4 * 512 * 512:
        try:
            echoes = mha_param_count is not None and (eight, one) == (mha_param_count(512, 8), mha_param_count(512, 1))
        except Exception:
            echoes = False
        if echoes:
            print(f"\u2718 exercise: {eight:,} and {one:,} come from your mha_param_count, which is wrong "
                  "(see its check above); fix it and run this cell again")
            return
        if eight != one:
            _fail(f"8 heads give {eight:,} parameters and one full-width head {one:,}; they should be equal")
        _fail(f"{eight:,} parameters: count all four projections W_Q, W_K, W_V, W_O of a 512-wide layer")
    _ok("exercise: d_head = 64, and 8 heads cost exactly what one 512-wide head costs: 1,048,576")


def check_gqa_param_count(gqa_param_count):
    """n_kv_heads == n_heads is MHA; MQA and Llama-2 70B known values; bias widths."""
    mha = _count(gqa_param_count, "gqa_param_count", 512, 8, 8)
    if mha != 1_048_576:
        _fail(f"gqa_param_count(512, 8, 8) = {mha:,}; with as many KV heads as query heads it is ordinary "
              "multi-head attention: 4 * 512^2 = 1,048,576")
    mqa = _count(gqa_param_count, "gqa_param_count", 512, 8, 1)
    if mqa == mha:
        _fail("gqa_param_count(512, 8, 1) equals the full multi-head count: W_K and W_V must be sized with "
              "n_kv_heads, (d_model, n_kv_heads * d_head), not with the query heads")
    if mqa != 2 * 512 * 512 + 2 * 512 * 64:
        _fail(f"gqa_param_count(512, 8, 1) = {mqa:,}; multi-query attention keeps W_Q and W_O at (512, 512) "
              "and shrinks W_K and W_V to (512, 64): 589,824")
    llama = _count(gqa_param_count, "gqa_param_count", 8192, 64, 8)
    if llama != 150_994_944:
        _fail(f"Llama-2 70B's layer (d_model 8192, 64 query heads, 8 KV heads) should have 150,994,944 "
              f"attention parameters, got {llama:,}")
    extra = _count(gqa_param_count, "gqa_param_count", 512, 8, 2, bias=True) - _count(
        gqa_param_count, "gqa_param_count", 512, 8, 2)
    if extra != 2 * 512 + 2 * 128:
        _fail(f"bias=True adds {extra:,}; the biases are as wide as each projection's output: d_model for W_Q "
              "and W_O, n_kv_heads * d_head for W_K and W_V (here 2 * 512 + 2 * 128 = 1,280)")
    _ok("gqa_param_count: MHA when n_kv_heads == n_heads, MQA 589,824, Llama-2 70B 150,994,944 per layer")


def check_kv_cache_bytes(kv_cache_bytes_per_token):
    """Llama-2 70B's known cache size per token and linearity in each argument."""
    got = _count(kv_cache_bytes_per_token, "kv_cache_bytes_per_token", 80, 8, 128)
    if got * 2 == 327_680:
        _fail(f"kv_cache_bytes_per_token(80, 8, 128) = {got:,} is half the answer: every layer caches a key "
              "AND a value vector per KV head (a factor of 2)")
    if got != 327_680:
        _fail(f"kv_cache_bytes_per_token(80, 8, 128) = {got:,}; Llama-2 70B caches 327,680 bytes (320 KiB) "
              "per token in 16-bit values")
    if _count(kv_cache_bytes_per_token, "kv_cache_bytes_per_token", 80, 8, 128, bytes_per_value=4) != 2 * got:
        _fail("bytes_per_value=4 (float32) should double the 16-bit size: use the bytes_per_value argument")
    if _count(kv_cache_bytes_per_token, "kv_cache_bytes_per_token", 40, 8, 128) * 2 != got:
        _fail("half the layers should cache half the bytes: multiply by n_layers")
    _ok("kv_cache_bytes_per_token: 327,680 bytes per token for Llama-2 70B, linear in every argument")


# ------------------------------------------------------------------------------------------------ lesson 04
__all__ += ["check_multi_head_scores", "check_dot_product_std"]


def check_multi_head_scores(multi_head_scores, split_heads):
    """Shape (n_heads, T, T), the per-head 1/sqrt(d_head) scale (probed against the raw products), float32."""
    rng = np.random.default_rng(4)
    T, n_heads, d_head = 5, 3, 4  # d_model = 12; every candidate scale differs
    d_model = n_heads * d_head
    x = rng.normal(size=(T, d_model))
    W_Q = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    W_K = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    copies = [a.copy() for a in (x, W_Q, W_K)]
    got = _call(multi_head_scores, "multi_head_scores", x, W_Q, W_K, n_heads)
    if any(not np.array_equal(a, b) for a, b in zip((x, W_Q, W_K), copies)):
        _fail("multi_head_scores changed its inputs in place; compute new arrays instead")
    if np.shape(got) != (n_heads, T, T):
        _fail(f"scores have shape {np.shape(got)}, expected (n_heads, T, T) = ({n_heads}, {T}, {T}): split "
              "Q and K into heads first, then Q @ swapaxes(K, -1, -2)")
    raw = split_heads(x @ W_Q, n_heads) @ np.swapaxes(split_heads(x @ W_K, n_heads), -1, -2)  # (n_heads, T, T)
    scale = float(np.median(np.asarray(got, float) / raw))
    if not np.allclose(np.asarray(got, float), raw * scale, rtol=1e-6, atol=1e-9):
        _fail("the scores are not one constant times each head's Q K^T: check which columns go to which head "
              "and the order of the matmul")
    wrong = {1.0: "the scores are not scaled: divide each head's Q K^T by math.sqrt(d_head)",
             1 / d_head: "the scores are divided by d_head; divide by its square root, math.sqrt(d_head)",
             1 / math.sqrt(d_model): "the scores are divided by sqrt(d_model); inside a head the dot product sums "
                                     "over d_head = d_model // n_heads terms: divide by math.sqrt(d_head)",
             1 / math.sqrt(T): "the scores are scaled by the sequence length T (x.shape[-2]); the scale is the "
                               "width the dot product sums over, d_head"}
    if abs(scale - 1 / math.sqrt(d_head)) > 1e-9:
        for s, message in wrong.items():
            if abs(scale - s) < 1e-9:
                _fail(message)
        _fail(f"the scores are multiplied by {scale:.4g}; expected 1/sqrt(d_head) = {1 / math.sqrt(d_head):.4g}")
    got32 = _call(multi_head_scores, "multi_head_scores", x.astype(np.float32), W_Q.astype(np.float32),
                  W_K.astype(np.float32), n_heads)
    if getattr(got32, "dtype", None) != np.float32:
        _fail(f"float32 input came back as {getattr(got32, 'dtype', type(got32))}: divide by math.sqrt(d_head) "
              "(a Python float); np.sqrt(d_head) is a numpy float64 and promotes the array")
    _ok("multi_head_scores: shape (n_heads, T, T), scale 1/sqrt(d_head), float32 stays float32")


def check_dot_product_std(dot_product_std):
    """std of q.k near sqrt(d_k), near 1 once scaled, and reproducible from the rng it is given."""
    n = 5000
    for d_k in (16, 256):
        unscaled = float(_call(dot_product_std, "dot_product_std", d_k, n, False, np.random.default_rng(1)))
        scaled = float(_call(dot_product_std, "dot_product_std", d_k, n, True, np.random.default_rng(1)))
        if abs(unscaled / d_k - 1) < 0.1:
            _fail(f"for d_k={d_k} you get {unscaled:.4g}, close to d_k itself: that is the variance; return the "
                  "standard deviation (np.std)")
        if abs(unscaled / math.sqrt(d_k) - 1) > 0.1:
            _fail(f"for d_k={d_k} the unscaled std is {unscaled:.4g}; for unit-variance q and k it should be near "
                  f"sqrt(d_k) = {math.sqrt(d_k):.4g}. Draw with rng.standard_normal and take q.k per sample "
                  "(a sum over the d_k axis)")
        if abs(scaled - 1) > 0.1:
            hint = (" (that is 1/sqrt(d_k): did you divide by d_k?)" if abs(scaled * math.sqrt(d_k) - 1) < 0.1
                    else "")
            _fail(f"for d_k={d_k} the scaled std is {scaled:.4g}, expected near 1: divide each dot product by "
                  f"math.sqrt(d_k){hint}")
    a = _call(dot_product_std, "dot_product_std", 8, 500, False, np.random.default_rng(3))
    b = _call(dot_product_std, "dot_product_std", 8, 500, False, np.random.default_rng(3))
    if a != b:
        _fail("the same seed gave two different results: draw q and k from the `rng` argument, not from "
              "np.random's global state")
    _ok("dot_product_std: about sqrt(d_k) unscaled, about 1 scaled, reproducible from its rng")

# ================================================================================================ lesson 06
# Grouped-query attention, the KV cache, mask conventions, tiled attention. Checks of a function that calls
# another of this lesson's functions first run that helper's own check quietly; if the helper is not right yet,
# they say so and stop, so one mistake is reported once, where it is.
__all__ += ["check_repeat_kv", "check_gqa", "check_causal_masks", "check_causal_self_attention",
            "check_kv_cache_append", "check_decode_step", "check_decode_with_kv_cache", "check_tiled_attention",
            "check_tiled_memory"]


def _helpers_not_ready(**checks):
    """Names of helpers whose own check fails; ``checks`` maps a name to a zero-argument function running it."""
    import contextlib
    import io

    broken = []
    for name, run in checks.items():
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                run()
        except Exception:  # a failed check, a stub, or a crash: the helper is not ready
            broken.append(name)
            continue
        if "\u2718" in printed.getvalue():  # its check was skipped because of a helper of its own
            broken.append(name)
    return broken


def _skip(what, broken):
    print(f"\u2718 {what} not checked yet: first make the check of {', '.join(broken)} pass "
          "(this check relies on it).")


def _gqa_layer(rng, B, T, n_heads, n_kv_heads, d_head):
    d_model = n_heads * d_head
    x = rng.normal(size=(B, T, d_model))
    W_Q, W_O = rng.normal(size=(2, d_model, d_model)) / math.sqrt(d_model)
    W_K, W_V = rng.normal(size=(2, d_model, n_kv_heads * d_head)) / math.sqrt(d_model)
    return x, W_Q, W_K, W_V, W_O


def _expand(W, n_kv_heads, n_rep, order="repeat"):
    """The (d_model, n_heads*d_head) weight that gives every query head its KV head's columns."""
    d_model, d_kv = W.shape
    per_head = W.reshape(d_model, n_kv_heads, d_kv // n_kv_heads)  # (d_model, n_kv_heads, d_head)
    if order == "repeat":
        per_head = np.repeat(per_head, n_rep, axis=1)
    else:
        per_head = np.tile(per_head, (1, n_rep, 1))
    return per_head.reshape(d_model, -1)


def _call_unless_broken(fn, name, broken, *args):
    """fn(*args), or None when a helper it relies on is broken (whatever fn then raised); stubs still say so."""
    try:
        return fn(*args)
    except NotImplementedError:
        return _call(fn, name, *args)
    except Exception:
        if broken:
            return None
        raise


def _causal(T):
    return np.triu(np.ones((T, T), dtype=bool), k=1)


def check_repeat_kv(repeat_kv):
    """Head order 0 0 0 1 1 1 (not 0 1 0 1 0 1), any leading axes, n_rep = 1 unchanged, input untouched."""
    x = np.broadcast_to(np.arange(2.0)[:, None, None], (2, 3, 4)).copy()  # (n_kv_heads=2, T=3, d_head=4), head j = j
    before = x.copy()
    got = _call(repeat_kv, "repeat_kv", x, 3)
    if np.shape(got) != (6, 3, 4):
        _fail(f"repeat_kv of a (n_kv_heads=2, T=3, d_head=4) array with n_rep=3 has shape {np.shape(got)}, expected "
              "(6, 3, 4): repeat along the KV-head axis, axis=-3")
    order = np.asarray(got)[:, 0, 0]
    if np.array_equal(order, [0, 1, 0, 1, 0, 1]):
        _fail("the KV heads come out in the order 0 1 0 1 0 1 (np.tile); each KV head must serve a consecutive "
              "group of query heads, 0 0 0 1 1 1: use np.repeat(x, n_rep, axis=-3)")
    if not np.array_equal(order, [0, 0, 0, 1, 1, 1]) or not np.array_equal(got, np.repeat(before, 3, axis=0)):
        _fail(f"the heads come out as {order.tolist()}, expected [0, 0, 0, 1, 1, 1], each a full copy of its KV head")
    if not np.array_equal(x, before):
        _fail("repeat_kv changed its input in place; return a new array")
    xb = np.arange(2.0)[:, None, None, None] * 10 + np.arange(2.0)[None, :, None, None] + np.zeros((2, 2, 3, 4))
    gotb = _call(repeat_kv, "repeat_kv", xb, 2)  # (B=2, n_kv_heads=2, T=3, d_head=4)
    if np.shape(gotb) != (2, 4, 3, 4):
        _fail(f"with a batch axis, (B=2, n_kv_heads=2, T=3, d_head=4) and n_rep=2 should give (2, 4, 3, 4), got "
              f"{np.shape(gotb)}: count the axis from the end (axis=-3) so a batch axis does not move it")
    if not np.array_equal(np.asarray(gotb)[:, :, 0, 0], [[0, 0, 1, 1], [10, 10, 11, 11]]):
        _fail("with a batch axis the heads are not repeated within each batch element; use axis=-3")
    if not np.array_equal(_call(repeat_kv, "repeat_kv", x, 1), x):
        _fail("repeat_kv(x, 1) should return the same values as x")
    _ok("repeat_kv: heads repeated in consecutive groups (0 0 0 1 1 1), batch axis untouched")


def check_gqa(grouped_query_attention, multi_head_attention, repeat_kv=None):
    """MHA end, MQA end and a true group, against multi_head_attention with repeated K/V weights."""
    rng = np.random.default_rng(60)
    B, T, n_heads, d_head = 2, 5, 4, 3
    ends = [(n_heads, "the MHA end (n_kv_heads = n_heads)"), (1, "the MQA end (n_kv_heads = 1)")]
    for n_kv, name in ends + [(2, "a group of 2 query heads per KV head")]:
        if n_kv == 2 and repeat_kv is not None:
            broken = _helpers_not_ready(repeat_kv=lambda: check_repeat_kv(repeat_kv))
            if broken:
                _skip("grouped_query_attention with true groups", broken)
                return
        n_rep = n_heads // n_kv
        x, W_Q, W_K, W_V, W_O = _gqa_layer(rng, B, T, n_heads, n_kv, d_head)
        result = _call(grouped_query_attention, "grouped_query_attention", x, W_Q, W_K, W_V, W_O, n_heads, n_kv)
        if not isinstance(result, tuple) or len(result) != 2:
            _fail("grouped_query_attention must return a pair: (out, weights)")
        out, weights = result
        if np.shape(weights) != (B, n_heads, T, T):
            _fail(f"for {name} the weights should be (B, n_heads, T, T) = {(B, n_heads, T, T)}, got "
                  f"{np.shape(weights)}: repeat the KV heads so every query head has one")
        if np.shape(out) != (B, T, n_heads * d_head):
            _fail(f"out should be (B, T, d_model) = {(B, T, n_heads * d_head)}, got {np.shape(out)}")
        expected, _ = _call(multi_head_attention, "multi_head_attention", x, W_Q, _expand(W_K, n_kv, n_rep), _expand(W_V, n_kv, n_rep), W_O, n_heads)
        if not _close(out, expected, 1e-8):
            tiled, _ = _call(multi_head_attention, "multi_head_attention", x, W_Q, _expand(W_K, n_kv, n_rep, "tile"), _expand(W_V, n_kv, n_rep, "tile"),
                                            W_O, n_heads)
            if _close(out, tiled, 1e-8):
                _fail("the KV heads are repeated in the order 0 1 0 1 (np.tile); query heads 0..n_rep-1 must share "
                      "KV head 0: np.repeat along axis -3")
            _fail(f"for {name} the output differs from multi-head attention with each KV head's weights copied "
                  "to its query heads: split Q into n_heads heads and K, V into n_kv_heads heads, then repeat K, V")
    _ok("grouped_query_attention: equals MHA with repeated K/V weights, at both ends and in between")


def check_causal_masks(causal_mask):
    """Known (4, 4) masks in each convention, their dtype, and a ValueError for an unknown name."""
    lower = np.tril(np.ones((4, 4), dtype=bool))  # may attend: on and below the diagonal
    wanted = {"course": (~lower, "True = blocked, above the diagonal"),
              "nn.MultiheadAttention": (~lower, "True = not allowed to attend, above the diagonal"),
              "F.scaled_dot_product_attention": (lower, "True = may attend, on and below the diagonal"),
              "masked_fill": (lower.astype(float), "1 = may attend, 0 = blocked (masked_fill(mask == 0, -inf))")}
    for convention, (expected, meaning) in wanted.items():
        got = _call(causal_mask, "causal_mask", 4, convention)
        if np.shape(got) != (4, 4):
            _fail(f"causal_mask(4, {convention!r}) has shape {np.shape(got)}, expected (4, 4)")
        if expected.dtype == bool and getattr(got, "dtype", None) != np.bool_:
            _fail(f"causal_mask(4, {convention!r}) should be boolean, got {getattr(got, 'dtype', type(got))}")
        if not np.array_equal(np.asarray(got, float), np.asarray(expected, float)):
            inverted = np.array_equal(np.asarray(got, float), 1 - np.asarray(expected, float))
            _fail(f"causal_mask(4, {convention!r}) is wrong" + (" (its polarity is inverted)" if inverted else "")
                  + f": in this convention {meaning}")
    try:
        causal_mask(4, "tensorflow")
    except ValueError:
        pass
    else:
        _fail("causal_mask(4, 'tensorflow') should raise ValueError: a silent default would hide a typo")
    _ok("causal_mask: all four conventions right, unknown names rejected")


def check_causal_self_attention(causal_self_attention, multi_head_attention, grouped_query_attention=None):
    """Zero weight on the future; equal to causal multi-head attention at the MHA end; causal in effect."""
    if grouped_query_attention is not None:
        broken = _helpers_not_ready(grouped_query_attention=lambda: check_gqa(grouped_query_attention,
                                                                              multi_head_attention))
        if broken:
            _skip("causal_self_attention", broken)
            return
    rng = np.random.default_rng(61)
    B, T, n_heads, d_head = 2, 6, 3, 4
    x, W_Q, W_K, W_V, W_O = _gqa_layer(rng, B, T, n_heads, n_heads, d_head)
    result = _call(causal_self_attention, "causal_self_attention", x, W_Q, W_K, W_V, W_O, n_heads, n_heads)
    if not isinstance(result, tuple) or len(result) != 2:
        _fail("causal_self_attention must return a pair: (out, weights)")
    out, weights = result
    if np.shape(weights) != (B, n_heads, T, T):
        _fail(f"weights should be (B, n_heads, T, T) = {(B, n_heads, T, T)}, got {np.shape(weights)}")
    if np.any(np.isnan(np.asarray(weights, float))):
        _fail("some weights are NaN: a row whose keys are all blocked gives 0/0. Query 0 must keep key 0: block only "
              "the future, np.triu(np.ones((T, T), bool), k=1), not the diagonal")
    future = np.asarray(weights)[..., _causal(T)]
    if np.any(future != 0):
        diag = np.asarray(weights)[..., np.arange(T), np.arange(T)]
        _fail("some weights on future tokens (above the diagonal) are not 0: the causal mask is missing or "
              "inverted; pass mask = np.triu(np.ones((T, T), bool), k=1), True = blocked"
              if np.any(diag != 0) else "the diagonal is blocked: a token may attend to itself; use k=1 in np.triu")
    x_later = x.copy()
    x_later[:, -1] += 1.0  # change only the last token
    out_later = _call(causal_self_attention, "causal_self_attention", x_later, W_Q, W_K, W_V, W_O, n_heads, n_heads)[0]
    if not _close(np.asarray(out_later)[:, :-1], np.asarray(out)[:, :-1], 1e-10):
        _fail("changing the last token changed the outputs of earlier tokens: they must not see the future. Is the "
              "causal mask passed to the attention?")
    expected, _ = _call(multi_head_attention, "multi_head_attention", x, W_Q, W_K, W_V, W_O, n_heads, mask=_causal(T))
    if not _close(out, expected, 1e-8):
        _fail("out differs from causal multi-head attention at the MHA end (n_kv_heads = n_heads)")
    _ok("causal_self_attention: no weight on the future, earlier rows blind to later tokens, equal to causal MHA")


def check_kv_cache_append(kv_cache_append):
    """Grows along time (axis -2) for a second step and a longer cache, batched and unbatched; inputs untouched."""
    rng = np.random.default_rng(62)
    B, n_kv, d_head = 2, 3, 5
    for T_past, lead in ((1, (B,)), (4, (B,)), (4, ())):
        cache_k, cache_v = rng.normal(size=(2, *lead, n_kv, T_past, d_head))
        k, v = rng.normal(size=(2, *lead, n_kv, 1, d_head))
        copies = [a.copy() for a in (cache_k, cache_v, k, v)]
        try:
            result = kv_cache_append(cache_k, cache_v, k, v)
        except NotImplementedError:
            _call(kv_cache_append, "kv_cache_append", cache_k, cache_v, k, v)
        except ValueError as exc:
            _fail(f"kv_cache_append raised ValueError ({exc}) for a cache {cache_k.shape} and a new key {k.shape}: "
                  "they only differ along the time axis, axis -2; concatenate there")
        if not isinstance(result, tuple) or len(result) != 2:
            _fail("kv_cache_append must return a pair: (cache_k, cache_v)")
        new_k, new_v = result
        want = (*lead, n_kv, T_past + 1, d_head)
        if np.shape(new_k) != want:
            hint = {(*lead, 2 * n_kv, 1, d_head): "it grew along the KV-head axis",
                    (*lead, n_kv, 1, 2 * d_head): "it grew along d_head, the last axis",
                    (2 * B, n_kv, 1, d_head): "it grew along the batch axis"}.get(np.shape(new_k), "")
            _fail(f"after appending 1 token to a cache {cache_k.shape} the cache should be {want}, got "
                  f"{np.shape(new_k)}" + (f": {hint}" if hint else "") + ". The time axis of "
                  "(..., n_kv_heads, T, d_head) is axis=-2")
        if not (np.array_equal(new_k[..., :T_past, :], cache_k) and np.array_equal(new_k[..., T_past:, :], k)
                and np.array_equal(new_v[..., :T_past, :], cache_v) and np.array_equal(new_v[..., T_past:, :], v)):
            _fail("the longer cache should hold the old entries first and the new token last, keys in cache_k and "
                  "values in cache_v")
        if any(not np.array_equal(a, b) for a, b in zip((cache_k, cache_v, k, v), copies)):
            _fail("kv_cache_append changed one of its inputs; return new arrays")
    _ok("kv_cache_append: the cache grows along time (axis -2), batched and unbatched")


def check_decode_step(decode_step, multi_head_attention, kv_cache_append=None, repeat_kv=None):
    """One step from a cache of 3 tokens equals row 3 of causal attention over 4 tokens, at MHA and GQA."""
    broken = _helpers_not_ready(**{n: c for n, c in (("kv_cache_append", kv_cache_append and (
        lambda: check_kv_cache_append(kv_cache_append))), ("repeat_kv", repeat_kv and (
            lambda: check_repeat_kv(repeat_kv)))) if c})
    rng = np.random.default_rng(63)
    B, T, n_heads, d_head = 2, 4, 4, 3
    for n_kv in (n_heads, 2):
        n_rep = n_heads // n_kv
        x, W_Q, W_K, W_V, W_O = _gqa_layer(rng, B, T, n_heads, n_kv, d_head)
        W_K_full, W_V_full = _expand(W_K, n_kv, n_rep), _expand(W_V, n_kv, n_rep)
        d_kv = n_kv * d_head
        heads_of = lambda y: np.swapaxes(y.reshape(B, -1, n_kv, d_head), 1, 2)  # (B, n_kv_heads, T, d_head)
        cache_k, cache_v = heads_of(x[:, :3] @ W_K), heads_of(x[:, :3] @ W_V)
        result = _call_unless_broken(decode_step, "decode_step", broken, x[:, 3:], cache_k, cache_v, W_Q, W_K, W_V,
                                     W_O, n_heads, n_kv)
        if broken:
            _skip("decode_step", broken)
            return
        if not isinstance(result, tuple) or len(result) != 3:
            _fail("decode_step must return three things: (out_t, cache_k, cache_v)")
        out_t, new_k, new_v = result
        if np.shape(new_k) != (B, n_kv, 4, d_head) or np.shape(new_v) != (B, n_kv, 4, d_head):
            _fail(f"after one step from a cache of 3 tokens the caches should be (B, n_kv_heads, 4, d_head) = "
                  f"{(B, n_kv, 4, d_head)}, got {np.shape(new_k)} and {np.shape(new_v)}")
        if not (_close(new_k, heads_of(x @ W_K)) and _close(new_v, heads_of(x @ W_V))):
            _fail("the returned caches should end with the newest token's key x_t @ W_K and value x_t @ W_V, split "
                  f"into n_kv_heads heads ({d_kv} columns of W_K, d_head={d_head} per head)")
        if np.shape(out_t) != (B, 1, n_heads * d_head):
            _fail(f"out_t should be (B, 1, d_model) = {(B, 1, n_heads * d_head)}, got {np.shape(out_t)}")
        full, _ = _call(multi_head_attention, "multi_head_attention", x, W_Q, W_K_full, W_V_full, W_O, n_heads, mask=_causal(T))
        if not _close(out_t, full[:, 3:], 1e-8):
            _fail("out_t is not row 3 of causal attention over the 4 tokens: append the new key and value to the "
                  "cache *before* attending (the token attends to itself too), then attend with its query to the "
                  "whole cache, its KV heads repeated with repeat_kv")
    _ok("decode_step: equals the last row of full causal attention and returns caches one token longer")


def check_decode_with_kv_cache(decode_with_kv_cache, multi_head_attention, decode_step=None, kv_cache_append=None,
                               repeat_kv=None):
    """Decoding token by token equals full causal attention; the caches end (B, n_kv_heads, T, d_head)."""
    rng = np.random.default_rng(64)
    B, T, n_heads, n_kv, d_head = 2, 5, 4, 2, 3
    x, W_Q, W_K, W_V, W_O = _gqa_layer(rng, B, T, n_heads, n_kv, d_head)
    helpers = {}
    if decode_step is not None:
        helpers["decode_step"] = lambda: check_decode_step(decode_step, multi_head_attention, kv_cache_append, repeat_kv)
    broken = _helpers_not_ready(**helpers)
    result = _call_unless_broken(decode_with_kv_cache, "decode_with_kv_cache", broken, x, W_Q, W_K, W_V, W_O,
                                 n_heads, n_kv)
    if broken:
        _skip("decode_with_kv_cache", broken)
        return
    if not isinstance(result, tuple) or len(result) != 3:
        _fail("decode_with_kv_cache must return three things: (out, cache_k, cache_v)")
    out, cache_k, cache_v = result
    if np.shape(cache_k) != (B, n_kv, T, d_head):
        _fail(f"after {T} tokens the cache should be (B, n_kv_heads, T, d_head) = {(B, n_kv, T, d_head)}, got "
              f"{np.shape(cache_k)}; start from np.zeros((B, n_kv_heads, 0, d_head))")
    if np.shape(out) != (B, T, n_heads * d_head):
        _fail(f"out should be (B, T, d_model) = {(B, T, n_heads * d_head)}, got {np.shape(out)}: join the step "
              "outputs along time, axis -2")
    n_rep = n_heads // n_kv
    full, _ = _call(multi_head_attention, "multi_head_attention", x, W_Q, _expand(W_K, n_kv, n_rep), _expand(W_V, n_kv, n_rep), W_O, n_heads,
                                   mask=_causal(T))
    if not _close(out, full, 1e-8):
        rows = [t for t in range(T) if not _close(out[:, t], full[:, t], 1e-8)]
        _fail(f"rows {rows} differ from full causal attention; feed token t as x[..., t:t+1, :] and keep the caches "
              "that decode_step returns for the next step")
    _ok("decode_with_kv_cache: token-by-token decoding equals full causal attention, row for row")


def check_tiled_attention(tiled_attention, scaled_dot_product_attention):
    """Equal to plain attention within 1e-10 for block sizes 1, 3, 4 and 64, with and without the causal mask."""
    rng = np.random.default_rng(65)
    Q = rng.normal(size=(2, 7, 4)) * 3  # (B, T_q, d_k); large scores so the running max really moves
    K = rng.normal(size=(2, 10, 4)) * 3  # (B, T_k, d_k)
    V = rng.normal(size=(2, 10, 5))  # (B, T_k, d_v)
    plain, _ = _call(scaled_dot_product_attention, "scaled_dot_product_attention", Q, K, V)
    Ks, Vs = K[:, :7], V[:, :7]
    plain_causal, _ = _call(scaled_dot_product_attention, "scaled_dot_product_attention", Q, Ks, Vs, mask=_causal(7))
    for block in (4, 3, 1, 64):
        out = _call(tiled_attention, "tiled_attention", Q, K, V, block)
        if np.shape(out) != (2, 7, 5):
            _fail(f"tiled_attention should return out of shape (B, T_q, d_v) = (2, 7, 5), got {np.shape(out)} "
                  "(only out: the weights are never formed)")
        if np.any(~np.isfinite(out)):
            _fail(f"block_size={block}: out contains NaN or inf; shift by the running max, and by 0 where a row has "
                  "seen no open key yet")
        if not _close(out, plain, 1e-10):
            _fail(f"block_size={block}: out differs from plain attention by up to {np.max(np.abs(out - plain)):.2g}; "
                  "when a block raises the running max m, rescale the running sum and output by exp(m_old - m_new)")
        out_c = _call(tiled_attention, "tiled_attention", Q, Ks, Vs, block, causal=True)
        if not _close(out_c, plain_causal, 1e-10):
            _fail(f"block_size={block}, causal=True: out differs from causal attention; block key j for query i "
                  "when j > i (positions counted from the start of the whole sequence, not of the block)")
    _ok("tiled_attention: equal to plain attention within 1e-10 for block sizes 1, 3, 4, 64, causal or not")


def check_tiled_memory(tiled_attention, T=1024, block_size=32):
    """The peak allocation (tracemalloc) stays far below one (T, T) float64 matrix."""
    import tracemalloc

    rng = np.random.default_rng(66)
    Q, K, V = rng.normal(size=(3, T, 8))  # each (T, d_k = 8)
    tracemalloc.start()
    try:
        _call(tiled_attention, "tiled_attention", Q, K, V, block_size)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    full = 8 * T * T
    if peak > full / 4:
        _fail(f"tiled_attention allocated {peak / 2**20:.2f} MB at its peak for T = {T}; one (T, T) float64 matrix "
              f"is {full / 2**20:.2f} MB. Work on (T_q, block_size) blocks of scores and never build the full matrix")
    _ok(f"tiled_attention: peak {peak / 2**20:.2f} MB for T = {T}, one (T, T) matrix would be {full / 2**20:.2f} MB")
