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
        expected, _ = multi_head_attention(x, W_Q, _expand(W_K, n_kv, n_rep), _expand(W_V, n_kv, n_rep), W_O, n_heads)
        if not _close(out, expected, 1e-8):
            tiled, _ = multi_head_attention(x, W_Q, _expand(W_K, n_kv, n_rep, "tile"), _expand(W_V, n_kv, n_rep, "tile"),
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
    expected, _ = multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=_causal(T))
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
        full, _ = multi_head_attention(x, W_Q, W_K_full, W_V_full, W_O, n_heads, mask=_causal(T))
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
    full, _ = multi_head_attention(x, W_Q, _expand(W_K, n_kv, n_rep), _expand(W_V, n_kv, n_rep), W_O, n_heads,
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
    plain, _ = scaled_dot_product_attention(Q, K, V)
    Ks, Vs = K[:, :7], V[:, :7]
    plain_causal, _ = scaled_dot_product_attention(Q, Ks, Vs, mask=_causal(7))
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
