"""The contract of every graded function: the inputs its lesson allows, as the lesson's text and the function's
docstring state them.

A correct function may check its input and raise on what its lesson rules out (the course's alternatives do:
``autograder/alternatives/``), so a hidden test may send only inputs the contract allows: one impossible input
(11 query heads over 3 KV heads, a mask of the wrong shape) and such a function loses the cell. Each contract
below takes the function's arguments and raises ``ContractBroken``, naming the clause, when they break it.
``autograder.proofs.salt_sweep.contract_sweep`` runs every hidden test at each grading salt with each graded
function behind its contract, and ``tests/unit/checks/test_hidden_inputs.py`` asks for no broken clause at 200 salts.

Only what the lesson states, or what its computation needs to be defined, is a clause: float arrays of one dtype
(float32 or float64), shapes that agree, sizes that divide, boolean masks that broadcast. Values the lesson
promises to handle (a row of -inf scores, a NaN in a gradient handed to ``gradient_check``) are allowed, and so is
an input for which the lesson asks the function to raise ValueError (``split_heads`` with heads that do not divide
d_model): the hidden test then expects the ValueError that a function checking its input raises.
"""

from __future__ import annotations

import numbers

import numpy as np


class ContractBroken(ValueError):
    """An input its lesson does not allow (raised by a contract)."""


def _require(condition, clause: str):
    if not condition:
        raise ContractBroken(clause)


def _count(name, value, low=1):
    """A whole number (Python or numpy integer, not a bool) of at least ``low``."""
    _require(isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)) and value >= low,
             f"{name} must be an integer >= {low} (got {value!r})")
    return int(value)


def _flag(name, value):
    _require(isinstance(value, (bool, np.bool_)), f"{name} must be True or False (got {value!r})")


def _floats(*named, min_ndim=1):
    """Float arrays (float32 or float64) of one dtype, each with at least ``min_ndim`` axes and no NaN."""
    dtypes = set()
    for name, a in named:
        _require(isinstance(a, np.ndarray) and a.dtype in (np.float32, np.float64),
                 f"{name} must be a float32 or float64 array (got {type(a).__name__} "
                 f"{getattr(a, 'dtype', '')})")
        _require(a.ndim >= min_ndim, f"{name} must have at least {min_ndim} axes (got shape {a.shape})")
        _require(not np.isnan(a).any(), f"{name} must hold no NaN")
        dtypes.add(a.dtype)
    _require(len(dtypes) <= 1,
             f"{', '.join(n for n, _ in named)} must share one dtype (got {sorted(map(str, dtypes))})")


def _mask(mask, target, required=False):
    """None (unless ``required``) or a bool array that broadcasts to ``target``."""
    if mask is None:
        _require(not required, "mask is required")
        return
    _require(isinstance(mask, np.ndarray) and mask.dtype == bool, f"mask must be a bool array (got {mask!r:.40})")
    try:
        _require(np.broadcast_shapes(mask.shape, target) == tuple(target),
                 f"mask {mask.shape} must broadcast to {tuple(target)}")
    except ValueError:
        raise ContractBroken(f"mask {mask.shape} must broadcast to {tuple(target)}") from None


def _lead(*shapes):
    """The leading axes of arrays that share them (they must broadcast)."""
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ContractBroken(f"leading axes {shapes} must broadcast") from None


def _divides(n_heads, d_model, what="d_model"):
    _require(d_model % n_heads == 0, f"n_heads must divide {what} (got {what}={d_model}, n_heads={n_heads})")


def _weights(d_model, **named):
    """Weight matrices, each named with the shape it must have."""
    for name, (W, shape) in named.items():
        _require(W.ndim == 2 and W.shape == shape, f"{name} must be {shape} (got {W.shape}) for d_model={d_model}")


# --------------------------------------------------------------------------------------------- lesson 01
def softmax(x, axis=-1):
    """x is a float32 or float64 array; axis is one of its axes."""
    _floats(("x", x))
    _require(isinstance(axis, numbers.Integral) and -x.ndim <= axis < x.ndim, f"axis {axis!r} must be an axis of x")


def scaled_dot_product_attention(Q, K, V, mask=None, *, mask_required=False):
    """Q (..., T_q, d_k), K (..., T_k, d_k) and V (..., T_k, d_v) share one float dtype and leading axes that
    broadcast; mask is None or bool, broadcastable to (..., T_q, T_k)."""
    _floats(("Q", Q), ("K", K), ("V", V), min_ndim=2)
    _require(Q.shape[-1] == K.shape[-1], f"Q and K must have one d_k (got {Q.shape} and {K.shape})")
    _require(K.shape[-2] == V.shape[-2], f"K and V must have one T_k (got {K.shape} and {V.shape})")
    lead = _lead(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    _mask(mask, (*lead, Q.shape[-2], K.shape[-2]), required=mask_required)


# --------------------------------------------------------------------------------------------- lesson 02
def split_heads(x, n_heads):
    """x (..., T, d_model) is a float array; n_heads is a positive integer (one that does not divide d_model raises
    ValueError)."""
    _floats(("x", x), min_ndim=2)
    _divides(_count("n_heads", n_heads), x.shape[-1])


def concat_heads(x):
    """x (..., n_heads, T, d_head) is a float array."""
    _floats(("x", x), min_ndim=3)


def output_projection(heads, W_O):
    """heads (..., n_heads, T, d_head) and W_O (n_heads * d_head, d_model) share one float dtype."""
    _floats(("heads", heads), ("W_O", W_O), min_ndim=2)
    _require(heads.ndim >= 3, f"heads must be (..., n_heads, T, d_head) (got {heads.shape})")
    _require(W_O.shape[0] == heads.shape[-3] * heads.shape[-1],
             f"W_O must have n_heads * d_head = {heads.shape[-3] * heads.shape[-1]} rows (got {W_O.shape})")


def _layer(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads=None):
    """A self-attention layer's input: x (..., T, d_model), the four weights, n_heads dividing d_model (and, for
    GQA, n_kv_heads dividing n_heads)."""
    _floats(("x", x), ("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V), ("W_O", W_O), min_ndim=2)
    d_model = x.shape[-1]
    n_heads = _count("n_heads", n_heads)
    _divides(n_heads, d_model)
    kv = d_model
    if n_kv_heads is not None:
        n_kv_heads = _count("n_kv_heads", n_kv_heads)
        _require(n_heads % n_kv_heads == 0,
                 f"n_kv_heads must divide n_heads (got n_heads={n_heads}, n_kv_heads={n_kv_heads})")
        kv = n_kv_heads * (d_model // n_heads)
    _weights(d_model, W_Q=(W_Q, (d_model, d_model)), W_K=(W_K, (d_model, kv)), W_V=(W_V, (d_model, kv)),
             W_O=(W_O, (d_model, d_model)))


def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """x (..., T, d_model) and W_Q, W_K, W_V, W_O (d_model, d_model) share one float dtype; n_heads divides d_model;
    mask is None or bool, broadcastable to (..., n_heads, T, T)."""
    _layer(x, W_Q, W_K, W_V, W_O, n_heads)
    T = x.shape[-2]
    _mask(mask, (*x.shape[:-2], n_heads, T, T))


# --------------------------------------------------------------------------------------------- lesson 03
def mha_param_count(d_model, n_heads, bias=False):
    """d_model and n_heads are positive integers (n_heads that does not divide d_model raises ValueError); bias is
    True or False."""
    _divides(_count("n_heads", n_heads), _count("d_model", d_model))
    _flag("bias", bias)


def gqa_param_count(d_model, n_heads, n_kv_heads, bias=False):
    """d_model, n_heads and n_kv_heads are positive integers, n_kv_heads dividing n_heads; bias is True or False."""
    mha_param_count(d_model, n_heads, bias)
    _require(n_heads % _count("n_kv_heads", n_kv_heads) == 0, "n_kv_heads must divide n_heads")


def kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_value=2):
    """every argument is a positive integer."""
    for name, value in (("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("d_head", d_head),
                        ("bytes_per_value", bytes_per_value)):
        _count(name, value)


def exercise_512():
    """it takes no arguments."""


# --------------------------------------------------------------------------------------------- lesson 04
def multi_head_scores(x, W_Q, W_K, n_heads):
    """x (..., T, d_model), W_Q and W_K (d_model, d_model) share one float dtype; n_heads divides d_model."""
    _floats(("x", x), ("W_Q", W_Q), ("W_K", W_K), min_ndim=2)
    d_model = x.shape[-1]
    _divides(_count("n_heads", n_heads), d_model)
    _weights(d_model, W_Q=(W_Q, (d_model, d_model)), W_K=(W_K, (d_model, d_model)))


def dot_product_std(d_k, n_samples, scaled, rng):
    """d_k >= 1 and n_samples >= 2 are integers, scaled is True or False, rng is a numpy Generator."""
    _count("d_k", d_k)
    _count("n_samples", n_samples, low=2)
    _flag("scaled", scaled)
    _require(isinstance(rng, np.random.Generator), f"rng must be a numpy Generator (got {type(rng).__name__})")


# --------------------------------------------------------------------------------------------- lesson 05
def attention_layer(x, W_Q, W_K, W_V, W_O, n_heads):
    """x (..., T, d_model) and W_Q, W_K, W_V, W_O (d_model, d_model) share one float dtype; n_heads divides
    d_model."""
    _layer(x, W_Q, W_K, W_V, W_O, n_heads)


def masked_attention(Q, K, V, mask):
    """Q (..., T_q, d_k), K (..., T_k, d_k) and V (..., T_k, d_v) share one float dtype and leading axes that
    broadcast; mask is bool, broadcastable to (..., T_q, T_k)."""
    scaled_dot_product_attention(Q, K, V, mask, mask_required=True)


# --------------------------------------------------------------------------------------------- lesson 06
def repeat_kv(x, n_rep):
    """x (..., n_kv_heads, T, d_head) is a float array; n_rep is a positive integer."""
    _floats(("x", x), min_ndim=3)
    _count("n_rep", n_rep)


def grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None):
    """x (..., T, d_model), W_Q and W_O (d_model, d_model), W_K and W_V (d_model, n_kv_heads * d_head) share one
    float dtype; n_heads divides d_model and n_kv_heads divides n_heads; mask is None or bool, broadcastable to
    (..., n_heads, T, T)."""
    _layer(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)
    T = x.shape[-2]
    _mask(mask, (*x.shape[:-2], n_heads, T, T))


CONVENTIONS = ("course", "masked_fill", "nn.MultiheadAttention", "F.scaled_dot_product_attention")


def causal_mask(T, convention="course"):
    """T is a positive integer; convention is one of the four in the table."""
    _count("T", T)
    _require(convention in CONVENTIONS, f"convention must be one of {CONVENTIONS} (got {convention!r})")


def causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
    """x (..., T, d_model), W_Q and W_O (d_model, d_model), W_K and W_V (d_model, n_kv_heads * d_head) share one
    float dtype; n_heads divides d_model and n_kv_heads divides n_heads."""
    _layer(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)


def kv_cache_append(cache_k, cache_v, k, v):
    """the caches (..., n_kv_heads, T, d_head), T possibly 0, and k, v (..., n_kv_heads, T_new, d_head) share one
    float dtype."""
    _floats(("cache_k", cache_k), ("cache_v", cache_v), ("k", k), ("v", v), min_ndim=3)
    _require(cache_k.shape == cache_v.shape and k.shape == v.shape,
             f"the caches must share a shape, and k and v (got {cache_k.shape}, {cache_v.shape}, {k.shape}, {v.shape})")
    _require(cache_k.shape[:-2] == k.shape[:-2] and cache_k.shape[-1] == k.shape[-1],
             f"k must match the cache on every axis but time (-2) (got {k.shape} and {cache_k.shape})")


def decode_step(x_t, cache_k, cache_v, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
    """x_t (..., 1, d_model), the caches (..., n_kv_heads, T, d_head) and the weights, as in causal_self_attention,
    share one float dtype."""
    _layer(x_t, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)
    _require(x_t.shape[-2] == 1, f"x_t must hold one token, (..., 1, d_model) (got {x_t.shape})")
    _floats(("cache_k", cache_k), ("cache_v", cache_v), min_ndim=3)
    _floats(("x_t", x_t), ("cache_k", cache_k), min_ndim=2)
    d_head = x_t.shape[-1] // n_heads
    _require(cache_k.shape == cache_v.shape and cache_k.shape[-3:][::2] == (n_kv_heads, d_head),
             f"the caches must be (..., n_kv_heads, T, d_head) = (..., {n_kv_heads}, T, {d_head}) "
             f"(got {cache_k.shape}, {cache_v.shape})")


def decode_with_kv_cache(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
    """as causal_self_attention."""
    _layer(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)


def tiled_attention(Q, K, V, block_size, causal=False):
    """Q, K and V as in scaled_dot_product_attention; block_size is a positive integer; causal is True or False."""
    scaled_dot_product_attention(Q, K, V)
    _count("block_size", block_size)
    _flag("causal", causal)


def cross_attention(x_q, x_kv, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """x_q (..., T_q, d_model), x_kv (..., T_k, d_model) and four (d_model, d_model) weights share one float dtype;
    n_heads divides d_model; mask is None or bool, broadcastable to (..., T_q, T_k)."""
    _layer(x_q, W_Q, W_K, W_V, W_O, n_heads)
    _floats(("x_q", x_q), ("x_kv", x_kv), ("W_Q", W_Q), min_ndim=2)
    _require(x_kv.shape[-1] == x_q.shape[-1], f"x_q and x_kv must have one d_model (got {x_q.shape}, {x_kv.shape})")
    lead = _lead(x_q.shape[:-2], x_kv.shape[:-2])
    _mask(mask, (*lead, x_q.shape[-2], x_kv.shape[-2]))


# --------------------------------------------------------------------------------------------- lesson 07
def softmax_jacobian(p):
    """p is one softmax row: a float vector of probabilities that sum to 1."""
    _floats(("p", p))
    _require(p.ndim == 1 and (p >= 0).all() and abs(float(p.sum()) - 1) < 1e-6,
             f"p must be one softmax row: a vector of probabilities summing to 1 (got shape {p.shape})")


def softmax_backward(weights, grad_weights, axis=-1):
    """weights (softmax weights, none negative) and grad_weights share one shape and float dtype; axis is one of
    their axes."""
    _floats(("weights", weights), ("grad_weights", grad_weights))
    _require(weights.shape == grad_weights.shape, f"weights and grad_weights must share a shape "
                                                  f"(got {weights.shape}, {grad_weights.shape})")
    _require(isinstance(axis, numbers.Integral) and -weights.ndim <= axis < weights.ndim, "axis must be an axis")
    _require((weights >= 0).all(), "weights must be softmax weights (none negative)")


def attention_row_backward(q, K, V, grad_out):
    """q (d_k,), K (T, d_k), V (T, d_v) and grad_out (d_v,) share one float dtype."""
    _floats(("q", q), ("K", K), ("V", V), ("grad_out", grad_out))
    _require(q.ndim == 1 and K.ndim == 2 and V.ndim == 2 and grad_out.ndim == 1, "q (d_k,), K (T, d_k), V (T, d_v), "
             f"grad_out (d_v,) (got {q.shape}, {K.shape}, {V.shape}, {grad_out.shape})")
    _require(K.shape == (K.shape[0], q.shape[0]) and V.shape[0] == K.shape[0] and grad_out.shape == V.shape[1:],
             f"shapes must agree: q {q.shape}, K {K.shape}, V {V.shape}, grad_out {grad_out.shape}")


def scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None):
    """Q, K, V and mask as in scaled_dot_product_attention; weights (..., T_q, T_k) and grad_out (..., T_q, d_v)."""
    scaled_dot_product_attention(Q, K, V, mask)
    _floats(("Q", Q), ("weights", weights), ("grad_out", grad_out), min_ndim=2)
    lead = _lead(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    _require(weights.shape[-2:] == (Q.shape[-2], K.shape[-2]), f"weights must be (..., T_q, T_k) (got {weights.shape})")
    _require(grad_out.shape[-2:] == (Q.shape[-2], V.shape[-1]), f"grad_out must be (..., T_q, d_v) "
                                                                 f"(got {grad_out.shape})")
    _lead(lead, weights.shape[:-2], grad_out.shape[:-2])


def multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None):
    """as multi_head_attention; grad_out has x's shape."""
    multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask)
    _floats(("x", x), ("grad_out", grad_out))
    _require(grad_out.shape == x.shape, f"grad_out must have x's shape {x.shape} (got {grad_out.shape})")


def gradient_check(f, inputs, grad, eps=1e-6):
    """f is a function; inputs is a list of float arrays; grad is a list of arrays of their shapes, which may hold
    NaN or inf; eps > 0."""
    _require(callable(f), "f must be a function")
    _require(isinstance(inputs, (list, tuple)) and isinstance(grad, (list, tuple)) and len(inputs) == len(grad),
             "inputs and grad must be lists of one length")
    for i, (a, g) in enumerate(zip(inputs, grad)):
        _floats((f"inputs[{i}]", a))
        _require(isinstance(g, np.ndarray) and g.shape == a.shape,  # a gradient may hold NaN or inf: it must fail
                 f"grad[{i}] must be an array of inputs[{i}]'s shape {a.shape}")
    _require(isinstance(eps, numbers.Real) and eps > 0, f"eps must be positive (got {eps!r})")


def sinusoidal_positions(T, d_model):
    """T is a positive integer and d_model an even one."""
    _count("T", T)
    _require(_count("d_model", d_model, low=2) % 2 == 0, f"d_model must be even (got {d_model})")


# --------------------------------------------------------------------------------------------- lesson 08
def rope(x, positions, base=10000.0, interleaved=True):
    """x (..., T, d_head) is a float array with d_head even; positions holds T integers >= 0; base > 1; interleaved
    is True or False."""
    _floats(("x", x))
    _require(x.shape[-1] % 2 == 0, f"x's last axis must be even: RoPE turns pairs (got {x.shape})")
    positions = np.asarray(positions)
    _require(positions.dtype.kind in "iu" and positions.ndim == 1 and len(positions) == x.shape[-2]
             and (positions >= 0).all(), f"positions must be T = {x.shape[-2] if x.ndim > 1 else '?'} whole numbers "
                                         f">= 0 (got {positions.dtype} {positions.shape})")
    _require(isinstance(base, numbers.Real) and base > 1, f"base must be a number > 1 (got {base!r})")
    _flag("interleaved", interleaved)


def alibi_bias(n_heads, T):
    """n_heads and T are positive integers."""
    _count("n_heads", n_heads)
    _count("T", T)


def sliding_window_mask(T, window):
    """T and window are positive integers."""
    _count("T", T)
    _count("window", window)


def streaming_decode(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, n_sink, window):
    """as causal_self_attention; n_sink is an integer >= 0 and window a positive one."""
    _layer(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)
    _count("n_sink", n_sink, low=0)
    _count("window", window)


def _mla_weights(d_model, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, d_c, d_rope):
    n_heads = _count("n_heads", n_heads)
    _divides(n_heads, W_UK.shape[-1], "W_UK's width (n_heads * d_head)")
    width = W_UK.shape[-1]
    _weights(d_model, W_UK=(W_UK, (d_c, width)), W_UV=(W_UV, (d_c, width)), W_Q=(W_Q, (d_model, width)),
             W_QR=(W_QR, (d_model, n_heads * d_rope)), W_O=(W_O, (width, d_model)))
    _require(d_rope % 2 == 0, f"d_rope must be even: RoPE turns pairs (got {d_rope})")


def mla_attention(x, W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O, n_heads, mask=None):
    """x (..., T, d_model), W_DKV (d_model, d_c), W_UK and W_UV (d_c, n_heads * d_head), W_KR (d_model, d_rope), W_Q
    (d_model, n_heads * d_head), W_QR (d_model, n_heads * d_rope) and W_O (n_heads * d_head, d_model) share one
    float dtype; d_rope is even; mask is None or bool, broadcastable to (T, T)."""
    _floats(("x", x), ("W_DKV", W_DKV), ("W_UK", W_UK), ("W_UV", W_UV), ("W_KR", W_KR), ("W_Q", W_Q),
            ("W_QR", W_QR), ("W_O", W_O), min_ndim=2)
    d_model, d_c, d_rope = x.shape[-1], W_DKV.shape[-1], W_KR.shape[-1]
    _weights(d_model, W_DKV=(W_DKV, (d_model, d_c)), W_KR=(W_KR, (d_model, d_rope)))
    _mla_weights(d_model, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, d_c, d_rope)
    T = x.shape[-2]
    _mask(mask, (T, T))


def mla_absorbed(x, c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, mask=None):
    """x (..., T_q, d_model), c_kv (..., T, d_c) and k_r (..., T, d_rope), with T_q <= T, and the weights as in
    mla_attention share one float dtype; mask is None or bool, broadcastable to (T_q, T)."""
    _floats(("x", x), ("c_kv", c_kv), ("k_r", k_r), ("W_UK", W_UK), ("W_UV", W_UV), ("W_Q", W_Q), ("W_QR", W_QR),
            ("W_O", W_O), min_ndim=2)
    T_q, T = x.shape[-2], c_kv.shape[-2]
    _require(k_r.shape[-2] == T, f"c_kv and k_r must cache one T (got {c_kv.shape}, {k_r.shape})")
    _require(T_q <= T, f"x holds {T_q} tokens, more than the cache's {T}: the cache holds every token")
    _lead(x.shape[:-2], c_kv.shape[:-2], k_r.shape[:-2])
    _mla_weights(x.shape[-1], W_UK, W_UV, W_Q, W_QR, W_O, n_heads, c_kv.shape[-1], k_r.shape[-1])
    _mask(mask, (T_q, T))


KV_CACHE_SIZES = {"MHA": ("n_heads", "d_head"), "GQA": ("n_heads", "d_head", "n_kv_heads"),
                  "MQA": ("n_heads", "d_head"), "MLA": ("n_heads", "d_head", "d_c", "d_rope")}


def kv_cache_elements_per_token(config):
    """config is a dict: 'attention' one of MHA, GQA, MQA and MLA; positive integers 'n_layers', 'n_heads',
    'd_head', and 'n_kv_heads' (GQA, dividing n_heads) or 'd_c' and 'd_rope' (MLA)."""
    _require(isinstance(config, dict) and config.get("attention") in KV_CACHE_SIZES,
             f"config must be a dict whose 'attention' is one of {tuple(KV_CACHE_SIZES)}")
    for key in ("n_layers", *KV_CACHE_SIZES[config["attention"]]):
        _require(key in config, f"a {config['attention']} config must give {key!r}")
        _count(key, config[key])
    if config["attention"] == "GQA":
        _require(config["n_heads"] % config["n_kv_heads"] == 0,
                 f"n_kv_heads must divide n_heads (got {config['n_heads']} over {config['n_kv_heads']})")


# The lessons' functions of the same contract under another name (lesson 05's own names for lesson 02's pieces).
merge_heads, mha_from_scratch, head_weights = concat_heads, attention_layer, multi_head_scores


# --------------------------------------------------------------------------------------------- lesson 09
def _row_params(x, *named):
    for name, a in named:
        _floats((name, a))
        _require(a.shape == (x.shape[-1],), f"{name} must be (d_model,) = ({x.shape[-1]},) (got {a.shape})")


def layer_norm(x, gamma, beta, eps=1e-5):
    """x is a float array with at least one axis; gamma and beta have x's last size; eps > 0."""
    _floats(("x", x))
    _row_params(x, ("gamma", gamma), ("beta", beta))
    _require(eps > 0, f"eps must be > 0 (got {eps})")


def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
    """x and grad_out are float arrays of one shape (..., d_model); gamma has shape (d_model,); eps > 0."""
    _floats(("x", x), ("grad_out", grad_out))
    _require(grad_out.shape == x.shape, f"grad_out must have x's shape {x.shape} (got {grad_out.shape})")
    _row_params(x, ("gamma", gamma))
    _require(eps > 0, f"eps must be > 0 (got {eps})")


def gelu_backward(x, grad_out):
    """x and grad_out are float arrays of one shape."""
    _floats(("x", x), ("grad_out", grad_out))
    _require(grad_out.shape == x.shape, f"grad_out must have x's shape {x.shape} (got {grad_out.shape})")


def mlp_backward(x, W_1, b_1, W_2, b_2, grad_out):
    """x and grad_out are float arrays (..., d_model); W_1 (d_model, d_ff), b_1 (d_ff,), W_2 (d_ff, d_model), b_2
    (d_model,)."""
    _floats(("x", x), ("grad_out", grad_out))
    _require(grad_out.shape == x.shape, f"grad_out must have x's shape {x.shape} (got {grad_out.shape})")
    d_model, d_ff = x.shape[-1], np.shape(W_1)[-1]
    _weights(d_model, W_1=(W_1, (d_model, d_ff)), W_2=(W_2, (d_ff, d_model)))
    _require(np.shape(b_1) == (d_ff,) and np.shape(b_2) == (d_model,), "b_1 must be (d_ff,) and b_2 (d_model,)")


def cross_entropy(logits, targets):
    """logits is a float array (..., n_vocab); targets an integer array of logits' shape without its last axis, each in 0
    .. n_vocab - 1."""
    _floats(("logits", logits))
    _require(isinstance(targets, np.ndarray) and targets.dtype.kind in "iu", "targets must be an integer array")
    _require(targets.shape == logits.shape[:-1], f"targets must have shape {logits.shape[:-1]} (got {targets.shape})")
    _require(targets.size == 0 or (targets.min() >= 0 and targets.max() < logits.shape[-1]),
             "every target must be in 0 .. n_vocab - 1")


def embedding_backward(tokens, grad_x, n_vocab):
    """tokens is an integer array (...) of values in 0 .. n_vocab - 1; grad_x a float array (..., d_model) with tokens'
    shape in front; n_vocab >= 1."""
    n_vocab = _count("n_vocab", n_vocab)
    _require(isinstance(tokens, np.ndarray) and tokens.dtype.kind in "iu", "tokens must be an integer array")
    _floats(("grad_x", grad_x))
    _require(grad_x.shape[:-1] == tokens.shape, f"grad_x must be {tokens.shape} + (d_model,) (got {grad_x.shape})")
    _require(tokens.size == 0 or (tokens.min() >= 0 and tokens.max() < n_vocab), "tokens must be in 0 .. n_vocab - 1")


def block_backward(x, block, n_heads, grad_out, mask=None):
    """x and grad_out are float arrays (..., T, d_model); block holds the twelve arrays of BLOCK_KEYS; n_heads divides
    d_model; mask is None or a boolean (T, T) array."""
    _floats(("x", x), ("grad_out", grad_out), min_ndim=2)
    _require(grad_out.shape == x.shape, f"grad_out must have x's shape {x.shape} (got {grad_out.shape})")
    keys = ("gamma_1", "beta_1", "W_Q", "W_K", "W_V", "W_O", "gamma_2", "beta_2", "W_1", "b_1", "W_2", "b_2")
    _require(isinstance(block, dict) and set(block) == set(keys), f"block must hold exactly {keys}")
    d_model = x.shape[-1]
    _divides(_count("n_heads", n_heads), d_model)
    _weights(d_model, **{k: (block[k], (d_model, d_model)) for k in ("W_Q", "W_K", "W_V", "W_O")})
    mlp_backward(x, block["W_1"], block["b_1"], block["W_2"], block["b_2"], grad_out)
    _row_params(x, *((k, block[k]) for k in ("gamma_1", "beta_1", "gamma_2", "beta_2")))
    _mask(mask, x.shape[-2:-1] * 2)


def sample_next(logits, rng, temperature=1.0, top_k=None):
    """logits is a float array (n_vocab,); rng a numpy Generator; temperature >= 0; top_k None or an integer in 1 ..
    n_vocab."""
    _floats(("logits", logits))
    _require(logits.ndim == 1 and np.isfinite(logits).all(), "logits must be one finite row (n_vocab,)")
    _require(isinstance(rng, np.random.Generator), f"rng must be a numpy Generator (got {type(rng).__name__})")
    _require(temperature >= 0, f"temperature must be >= 0 (got {temperature})")
    if top_k is not None:
        _require(1 <= _count("top_k", top_k) <= logits.shape[0], "top_k must be in 1 .. n_vocab")


def generate(params, n_heads, prompt, n_new, rng, temperature=1.0, top_k=None):
    """params is a model (E, P, blocks, gamma_f, beta_f, W_U); prompt a sequence of at least one token; n_new >= 0 with
    len(prompt) + n_new at most the model's number of positions; rng, temperature and top_k as sample_next takes
    them."""
    _require(isinstance(params, dict) and {"E", "P", "blocks", "gamma_f", "beta_f", "W_U"} <= set(params),
             "params must hold E, P, blocks, gamma_f, beta_f and W_U")
    _require(len(prompt) >= 1, "the prompt must hold at least one token")
    _require(len(prompt) + _count("n_new", n_new, low=0) <= params["P"].shape[0],
             "len(prompt) + n_new must be at most the model's number of positions")
    _require(isinstance(rng, np.random.Generator), "rng must be a numpy Generator")
    _require(temperature >= 0 and (top_k is None or 1 <= top_k <= params["W_U"].shape[-1]),
             "temperature must be >= 0 and top_k None or in 1 .. n_vocab")


def ablate_head(heads, n_heads, head):
    """heads is a float array (..., T, d_model); n_heads divides d_model; head in 0 .. n_heads - 1."""
    _floats(("heads", heads), min_ndim=2)
    _divides(_count("n_heads", n_heads), heads.shape[-1])
    _require(0 <= _count("head", head, low=0) < n_heads, f"head must be in 0 .. {n_heads - 1} (got {head})")


def k_composition(W_Q, W_K, W_V_prev, W_O_prev, n_heads):
    """the four weights are float (d_model, d_model) arrays; n_heads divides d_model."""
    _floats(("W_Q", W_Q), ("W_K", W_K), ("W_V_prev", W_V_prev), ("W_O_prev", W_O_prev), min_ndim=2)
    d_model = W_Q.shape[0]
    _weights(d_model, W_Q=(W_Q, (d_model, d_model)), W_K=(W_K, (d_model, d_model)),
             W_V_prev=(W_V_prev, (d_model, d_model)), W_O_prev=(W_O_prev, (d_model, d_model)))
    _divides(_count("n_heads", n_heads), d_model)


def split_into_heads(x, n_heads):
    """x (..., T, d_model) is a float array; n_heads is a positive integer that divides d_model."""
    split_heads(x, n_heads)


def of(name: str):
    """The contract of the graded function ``name``, or None (a graded value, such as a written number)."""
    found = globals().get(name)
    return found if callable(found) and name in GRADED else None


GRADED = frozenset({
    "softmax", "scaled_dot_product_attention", "split_heads", "concat_heads", "output_projection",
    "multi_head_attention", "mha_param_count", "gqa_param_count", "kv_cache_bytes_per_token", "exercise_512",
    "multi_head_scores", "dot_product_std", "split_into_heads", "merge_heads", "head_weights", "mha_from_scratch",
    "masked_attention", "attention_layer", "repeat_kv", "grouped_query_attention", "causal_mask",
    "causal_self_attention", "kv_cache_append", "decode_step", "decode_with_kv_cache", "tiled_attention",
    "cross_attention", "softmax_jacobian", "softmax_backward", "attention_row_backward",
    "scaled_dot_product_attention_backward", "multi_head_attention_backward", "gradient_check",
    "sinusoidal_positions", "rope", "alibi_bias", "sliding_window_mask", "streaming_decode", "mla_attention",
    "mla_absorbed", "kv_cache_elements_per_token", "layer_norm", "layer_norm_backward", "gelu_backward", "mlp_backward",
    "cross_entropy", "embedding_backward", "block_backward", "sample_next", "generate", "ablate_head", "k_composition"})
