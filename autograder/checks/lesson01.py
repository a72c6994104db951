"""Hidden tests of lesson 01 (warm-up): ``softmax`` and ``scaled_dot_product_attention``.

One function per graded test cell, named by the cell's grade_id. Inputs are seeded random arrays whose sizes
are all different (B, T_q, T_k, d_k, d_v), unbatched and batched, float64 and float32 (each dtype kept), rows of
scores far from 0, and rows whose keys are all blocked (all-zero weights).
"""

from __future__ import annotations

import numpy as np

from autograder import reference
from autograder.checks.runner import Case, against_reference, standing_in, distinct_dims, dtype_kept, rng_for, random_mask
from autograder.checks.verdict import WrongAnswer
from autograder.checks.registry import hidden_test

_SDPA = "scaled_dot_product_attention"
_INSPECT = {
    "softmax": "the maximum and the sum: both along `axis`, with keepdims=True, and what a row of -inf gives",
    _SDPA: "the scale (the square root of the key width), the axis softmax runs over, where the mask enters, "
           "and the order of the products",
}


@hidden_test(uses=('softmax',), visible_check='check_softmax')
def softmax_values(softmax):
    """Values along every axis, 1-D to 3-D, float64 and float32; float32 stays float32, float64 stays float64."""
    rng = rng_for("softmax_values")
    d = distinct_dims(rng, ("a", "b", "c"))
    cases = [
        Case((rng.normal(size=d["a"]) * 3,), label="1-D"),
        Case((rng.normal(size=(d["a"], d["b"])) * 3,), label="2-D, default axis"),
        Case((rng.normal(size=(d["a"], d["b"])) * 3,), {"axis": 0}, label="2-D, axis=0"),
        Case((rng.normal(size=(d["a"], d["b"], d["c"])) * 3,), {"axis": 1}, label="3-D, axis=1"),
        Case((rng.normal(size=(d["b"], d["c"])).astype(np.float32),), label="float32"),
    ]
    against_reference("softmax", softmax, cases, rtol=1e-5, atol=1e-7, inspect=_INSPECT["softmax"])
    dtype_kept("softmax", softmax, [Case((rng.normal(size=(d["a"], d["b"])).astype(dtype),), label=f"{dtype.__name__}")
                                    for dtype in (np.float32, np.float64)], rtol=1e-5, atol=1e-7)


def _far_rows(rng, shape):
    """Rows far from 0 and far from each other (offsets of thousands, both signs), each with its own spread."""
    offsets = rng.permutation(np.array([-3000.0, -1500.0, 1500.0, 3000.0, 0.0, -6000.0, 4500.0, -4500.0, 6000.0]))
    spreads = rng.uniform(0.5, 8.0, size=shape[0])
    return offsets[:shape[0], None] + spreads[:, None] * rng.normal(size=shape)


def _blocked_row(rng, shape):
    """Scores with one row all -inf (every key blocked) and some -inf entries elsewhere."""
    x = rng.normal(size=shape) * 3
    x[rng.random(shape) < 0.3] = -np.inf
    x[:, 0] = rng.normal(size=shape[0])  # every other row keeps an open key
    x[int(rng.integers(0, shape[0]))] = -np.inf
    return x


@hidden_test(uses=('softmax',), visible_check='check_softmax_stable')
def softmax_stable(softmax):
    """No overflow or NaN for scores around +-1e4 (2-D and 1-D), for rows far apart, and for a row of -inf (all-zero
    weights)."""
    rng = rng_for("softmax_stable")
    d = distinct_dims(rng, ("a", "b"))
    big = 1e4 + rng.normal(size=(d["a"], d["b"])) * 5
    cases = [
        Case((big,), label="scores near 1e4"),
        Case((-big,), label="scores near -1e4"),
        Case((np.concatenate([big, -big], axis=-1),), label="mixed +-1e4"),
        Case((_far_rows(rng, (d["a"], d["b"])),), label="rows thousands apart, each with its own spread"),
        Case((_blocked_row(rng, (d["a"], d["b"])),), label="one row all -inf (every key blocked)"),
        Case((big[0],), label="one row of scores near 1e4 (1-D)"),
    ]
    against_reference("softmax", softmax, cases, rtol=1e-6, atol=1e-9, inspect=_INSPECT["softmax"])


def _attention_dims(rng, names):
    """Distinct sizes in which every candidate scale differs: sqrt(d_k) against d_k, sqrt(T_k) and sqrt(T_q)
    (d_k = 2 with T_k = 4 would make dividing by d_k and by sqrt(T_k) the same mistake)."""
    while True:
        d = distinct_dims(rng, names)
        if d["d_k"] ** 2 not in (d["T_q"], d["T_k"]):
            return d


def _qkv(rng, lead, d, dtype=np.float64):
    Q = rng.normal(size=(*lead, d["T_q"], d["d_k"])).astype(dtype)
    K = rng.normal(size=(*lead, d["T_k"], d["d_k"])).astype(dtype)
    V = rng.normal(size=(*lead, d["T_k"], d["d_v"])).astype(dtype)
    return Q, K, V


@hidden_test(uses=('scaled_dot_product_attention',), helpers=('softmax',), visible_check='check_attention')
def attention_values(scaled_dot_product_attention, softmax=None):
    """Unmasked attention: unbatched, batched, batched with heads, float32. Graded with the reference softmax."""
    rng = rng_for("attention_values")
    d = _attention_dims(rng, ("B", "H", "T_q", "T_k", "d_k", "d_v"))
    cases = [
        Case(_qkv(rng, (), d), label="unbatched"),
        Case(_qkv(rng, (d["B"],), d), label="batched"),
        Case(_qkv(rng, (d["B"], d["H"]), d), label="batch and heads"),
        Case(_qkv(rng, (d["B"],), d, np.float32), label="float32"),
    ]
    against_reference(_SDPA, scaled_dot_product_attention, cases, outputs=("out", "weights"), rtol=1e-4, atol=1e-6,
          stand_ins={"softmax": reference.softmax}, inspect=_INSPECT[_SDPA])
    dtype_kept(_SDPA, scaled_dot_product_attention,
               [Case(_qkv(rng, (d["B"],), d, dtype), label=f"batched, {dtype.__name__}")
                for dtype in (np.float32, np.float64)], outputs=("out", "weights"),
               stand_ins={"softmax": reference.softmax})


@hidden_test(uses=('scaled_dot_product_attention',), helpers=('softmax',), visible_check='check_attention_mask')
def attention_mask(scaled_dot_product_attention, softmax=None):
    """Masked attention: a (T_q, T_k) mask broadcast over the batch, a per-example mask, a causal mask."""
    rng = rng_for("attention_mask")
    d = _attention_dims(rng, ("B", "T_q", "T_k", "d_k", "d_v"))
    T_q, T_k = d["T_q"], d["T_k"]
    causal = np.triu(np.ones((T_q, T_q), dtype=bool), k=1)
    sq = dict(d, T_k=T_q)
    cases = [
        Case(_qkv(rng, (), d), {"mask": random_mask(rng, (T_q, T_k))}, label="unbatched, random mask"),
        Case(_qkv(rng, (d["B"],), d), {"mask": random_mask(rng, (T_q, T_k))}, label="batched, one (T_q, T_k) mask"),
        Case(_qkv(rng, (d["B"],), d), {"mask": random_mask(rng, (d["B"], T_q, T_k))}, label="batched, per-example mask"),
        Case(_qkv(rng, (d["B"],), sq), {"mask": causal}, label="causal self-attention"),
        Case(_qkv(rng, (d["B"],), d), {"mask": random_mask(rng, (d["B"], T_q, T_k), blocked_row=True)},
             label="batched, one query with every key blocked"),
    ]
    against_reference(_SDPA, scaled_dot_product_attention, cases, outputs=("out", "weights"), rtol=1e-4, atol=1e-6,
          stand_ins={"softmax": reference.softmax}, inspect=_INSPECT[_SDPA])
    # blocked weights must be exactly zero, not merely small
    Q, K, V = _qkv(rng, (), d)
    mask = random_mask(rng, (T_q, T_k))
    with standing_in(scaled_dot_product_attention, {"softmax": reference.softmax}):
        _, weights = scaled_dot_product_attention(Q, K, V, mask=mask)
    blocked = np.asarray(weights)[mask].tolist()
    if any(w != 0.0 for w in blocked):
        raise WrongAnswer("blocked weights are small but not exactly 0: a large negative score only makes a weight "
                          "small; a blocked score must be -inf before softmax, so its weight is exactly 0")
