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
