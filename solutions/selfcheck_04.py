"""Self-checks of lesson 04: the per-head scores and why they are divided by sqrt(d_head).

The shared part (how a check calls your function, fails and passes) is in ``selfcheck_common.py``.
"""

from __future__ import annotations

import math

import numpy as np

from selfcheck_common import call, close, fail, ok

__all__ = ["check_multi_head_scores", "check_dot_product_std"]


def check_multi_head_scores(multi_head_scores, split_heads):
    """Shape (n_heads, T, T), the per-head 1/sqrt(d_head) scale (probed against the raw products), float32."""
    rng = np.random.default_rng(4)
    T, n_heads, d_head = 5, 3, 4  # d_model = 12; every candidate scale differs
    d_model = n_heads * d_head
    x = rng.normal(size=(T, d_model))
    W_Q = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    W_K = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    copies = [a.copy() for a in (x, W_Q, W_K)]
    got = call(multi_head_scores, "multi_head_scores", x, W_Q, W_K, n_heads)
    if any(not np.array_equal(a, b) for a, b in zip((x, W_Q, W_K), copies)):
        fail("multi_head_scores changed its inputs in place; compute new arrays instead")
    if np.shape(got) != (n_heads, T, T):
        fail(f"scores have shape {np.shape(got)}, expected (n_heads, T, T) = ({n_heads}, {T}, {T}): split "
             "Q and K into heads first, then take each head's Q K^T")
    if getattr(got, "dtype", None) != np.float64:
        fail(f"float64 input came back as {getattr(got, 'dtype', type(got))}: keep the input's dtype, cast nothing")
    raw = split_heads(x @ W_Q, n_heads) @ np.swapaxes(split_heads(x @ W_K, n_heads), -1, -2)  # (n_heads, T, T)
    scale = float(np.median(np.asarray(got, float) / raw))
    if not np.allclose(np.asarray(got, float), raw * scale, rtol=1e-6, atol=1e-9):
        fail("the scores are not one constant times each head's Q K^T: check which columns go to which head "
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
                fail(message)
        fail(f"the scores are multiplied by {scale:.4g}; expected 1/sqrt(d_head) = {1 / math.sqrt(d_head):.4g}")
    xb = np.stack([x, x[::-1]])  # (B=2, T, d_model): the second sequence is the first reversed
    try:
        got_b = multi_head_scores(xb, W_Q, W_K, n_heads)
    except NotImplementedError:
        raise
    except Exception as exc:
        fail(f"multi_head_scores fails on a batch x of shape (B, T, d_model) = {xb.shape}: {exc}. Count the axes "
             "from the end (the last two are T and d_head) so a batch axis in front passes through")
    if np.shape(got_b) != (2, n_heads, T, T) or not close(got_b[0], got, 1e-9):
        fail(f"on a batch x of shape (B, T, d_model) = {xb.shape} the scores should be (B, n_heads, T, T) = "
             f"{(2, n_heads, T, T)}, each example as on its own (got shape {np.shape(got_b)}): count the axes "
             "from the end, not from the front")
    got32 = call(multi_head_scores, "multi_head_scores", x.astype(np.float32), W_Q.astype(np.float32),
                 W_K.astype(np.float32), n_heads)
    if getattr(got32, "dtype", None) != np.float32:
        fail(f"float32 input came back as {getattr(got32, 'dtype', type(got32))}: a numpy float64 scale "
             "(np.sqrt of a Python number) promotes float32 arrays; a Python float (math.sqrt) does not")
    ok("multi_head_scores: shape (n_heads, T, T), scale 1/sqrt(d_head), batches work, float32 stays float32 and "
       "float64 float64")


def check_dot_product_std(dot_product_std):
    """std of q.k near sqrt(d_k), near 1 once scaled, and reproducible from the rng it is given."""
    n = 5000
    for d_k in (16, 256):
        unscaled = float(call(dot_product_std, "dot_product_std", d_k, n, False, np.random.default_rng(1)))
        scaled = float(call(dot_product_std, "dot_product_std", d_k, n, True, np.random.default_rng(1)))
        if abs(unscaled / d_k - 1) < 0.1:
            fail(f"for d_k={d_k} you get {unscaled:.4g}, close to d_k itself: that is the variance; return the "
                 "standard deviation (np.std)")
        if abs(unscaled / math.sqrt(d_k) - 1) > 0.1:
            fail(f"for d_k={d_k} the unscaled std is {unscaled:.4g}; for unit-variance q and k it should be near "
                 f"sqrt(d_k) = {math.sqrt(d_k):.4g}. Draw with rng.standard_normal and take q.k per sample "
                 "(a sum over the d_k axis)")
        if abs(scaled - 1) > 0.1:
            hint = (" (that is 1/sqrt(d_k): did you divide by d_k?)" if abs(scaled * math.sqrt(d_k) - 1) < 0.1
                    else "")
            fail(f"for d_k={d_k} the scaled std is {scaled:.4g}, expected near 1: divide each dot product by "
                 f"math.sqrt(d_k){hint}")
    a = call(dot_product_std, "dot_product_std", 8, 500, False, np.random.default_rng(3))
    b = call(dot_product_std, "dot_product_std", 8, 500, False, np.random.default_rng(3))
    if a != b:
        fail("the same seed gave two different results: draw q and k from the `rng` argument, not from "
             "np.random's global state")
    import tracemalloc

    n, d_k = 4000, 4
    tracemalloc.start()
    try:
        call(dot_product_std, "dot_product_std", d_k, n, False, np.random.default_rng(4))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if peak > n * n * 8 / 4:
        fail(f"for n_samples={n} the experiment allocated {peak / 2**20:.0f} MB at its peak; an (n_samples, "
             f"n_samples) matrix of every q against every k is {n * n * 8 / 2**20:.0f} MB, of which only the "
             "diagonal is needed. Multiply each q by its own k, entry by entry, and sum over d_k")
    ok("dot_product_std: about sqrt(d_k) unscaled, about 1 scaled, reproducible from its rng")
