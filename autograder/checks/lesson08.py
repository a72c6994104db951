"""Hidden tests of lesson 08 (attention in today's models): RoPE, ALiBi, sliding windows with sinks, MLA.

One function per graded test cell, named by the cell's grade_id. Inputs are seeded random arrays whose sizes all
differ (B, n_heads, T, d_head, d_c, d_rope), unbatched and batched, float64 and float32. Every other function of
the lesson is its reference stand-in while a test runs (``checks/registry.py``): ``mla_attention`` is graded
with the reference ``rope`` and attention. ``mla_absorbed`` takes the cache, not the tokens, and its rule (no key or
value of a cached token is built) is checked by its memory (``absorbed_memory``).
"""

from __future__ import annotations

import math

import numpy as np

from autograder import reference
from autograder.bugs import by_id
from autograder.checks import bug_match, compare
from autograder.checks.lesson03 import check_counts
from autograder.checks.registry import hidden_test
from autograder.checks.runner import (Case, against_reference, as_outputs, call_learner, call_measuring_memory,
                                      call_within_memory, dtype_kept, known_bug, memory_limit, rng_for)
from autograder.checks.verdict import WrongAnswer

_EVEN = (4, 6, 8, 10, 12)  # widths RoPE can rotate (pairs of columns)
_ODD = (3, 5, 7, 9, 11)


# ------------------------------------------------------------------------------------------------------ RoPE
@hidden_test(uses=("rope",), visible_check="check_rope")
def rope_values(rope):
    """Both layouts; unbatched (T, d_head) and batched (B, n_heads, T, d_head); positions that do not start at 0
    and are not consecutive; another base; float32, near position 2,000,000 too (angles in float64, as the lesson
    asks)."""
    rng = rng_for("rope_values")
    d_head = int(rng.choice(_EVEN))
    B, n_heads, T = (int(v) for v in rng.choice([s for s in _ODD if s != d_head], size=3, replace=False))
    start = int(rng.integers(1, 50))
    gaps = np.sort(rng.choice(np.arange(start, start + 500), size=T, replace=False))

    def case(shape, positions, dtype=np.float64, **kwargs):
        label = f"{'batched' if len(shape) > 2 else 'unbatched'}, positions {positions.tolist()}, " + ", ".join(
            f"{k}={v}" for k, v in kwargs.items())
        return Case((rng.normal(size=shape).astype(dtype), positions), kwargs, label=label.rstrip(", "))

    cases = [case((T, d_head), np.arange(T)),
             case((B, n_heads, T, d_head), np.arange(T), interleaved=False),
             case((n_heads, T, d_head), gaps, base=500000.0),
             case((B, T, d_head), gaps, interleaved=False, base=100.0)]
    against_reference("rope", rope, cases, rtol=1e-7, atol=1e-10, inspect="which columns form pair i, the "
                      "frequency of pair i, and the direction of the turn")
    far = gaps + 2_000_000  # a long context: angles computed in float32 there are off by hundredths of a radian
    f32 = [case((n_heads, T, d_head), gaps, np.float32), case((B, T, d_head), np.arange(T), np.float32,
                                                                interleaved=False),
           case((B, T, d_head), far, np.float32), case((n_heads, T, d_head), far, np.float32, interleaved=False)]
    against_reference("rope", rope, f32, rtol=1e-4, atol=1e-5)
    dtype_kept("rope", rope, [f32[0], cases[2]])


# ----------------------------------------------------------------------------------------------------- ALiBi
@hidden_test(uses=("alibi_bias",), visible_check="check_alibi_bias")
def alibi_values(alibi_bias):
    """Head counts that are and are not powers of 2, with T different from n_heads."""
    rng = rng_for("alibi_values")
    powers = [int(v) for v in rng.choice([2, 4, 16, 32], size=2, replace=False)]
    others = [int(v) for v in rng.choice([3, 5, 6, 7, 12, 20, 24], size=3, replace=False)]
    cases = []
    for n_heads in powers + others:
        T = int(rng.choice([t for t in range(3, 12) if t != n_heads]))
        cases.append(Case((n_heads, T), label=f"n_heads={n_heads}, T={T}"))
    against_reference("alibi_bias", alibi_bias, cases, rtol=1e-12, atol=1e-12,
                      inspect="the slopes (bias one token back, -alibi_bias(n, 2)[:, 1, 0]) against the paper's rule")


# -------------------------------------------------------------------------------------------- sliding window
def _mask_values(mask, T):
    if not compare.is_array(mask):
        raise WrongAnswer(f"sliding_window_mask should return a numpy array, got {type(mask).__name__}")
    if mask.dtype.kind != "b":
        raise WrongAnswer(f"sliding_window_mask should return a boolean array (True = blocked), got dtype {mask.dtype}")
    if compare.shape_of(mask) != (T, T):
        raise WrongAnswer(f"sliding_window_mask({T}, ...) has shape {compare.shape_of(mask)}, expected ({T}, {T})")
    return [bool(v) for v in compare.flat_floats(mask)]


@hidden_test(uses=("sliding_window_mask",), visible_check="check_sliding_window_mask")
def window_values(sliding_window_mask):
    """Windows of 1, inside the sequence, and at least as long as it."""
    rng = rng_for("window_values")
    T = int(rng.integers(7, 13))
    windows = [1, int(rng.integers(2, T // 2)), int(rng.integers(T // 2, T)), T, T + int(rng.integers(1, 5))]
    observed, problem = [], None
    for window in windows:
        case = Case((T, window), label=f"T={T}, window={window}")
        got = _mask_values(call_learner(sliding_window_mask, case, "sliding_window_mask"), T)
        observed.append((T, window, got))
        expected = [bool(v) for v in reference.sliding_window_mask(T, window).ravel()]
        if problem is None and got != expected:
            wrong = [(k // T, k % T) for k in range(T * T) if got[k] != expected[k]]
            problem = (f"on input {case.describe()}: {len(wrong)} pairs differ, e.g. query {wrong[0][0]}, key "
                       f"{wrong[0][1]} is {'blocked' if got[wrong[0][0] * T + wrong[0][1]] else 'open'}")
    if problem is not None:
        bug = bug_match.agreed_fit("sliding_window_mask", lambda b: all(
            [bool(v) for v in np.asarray(b.make()(T_, w)).ravel()] == g for T_, w, g in observed))
        if bug is not None:
            raise WrongAnswer.naming(bug, problem)
        raise WrongAnswer(f"sliding_window_mask is wrong {problem}. Query i sees keys i - window + 1 ... i (True = "
                          "blocked).", uncatalogued=True)


# -------------------------------------------------------------------------------------------- streaming decoder
def _gqa_layer(rng, lead, T, n_heads, n_kv_heads, d_head, dtype=np.float64):
    d_model = n_heads * d_head
    x = rng.normal(size=(*lead, T, d_model))
    Ws = [rng.normal(size=(d_model, w)) / math.sqrt(d_model)
          for w in (d_model, n_kv_heads * d_head, n_kv_heads * d_head, d_model)]
    return tuple(a.astype(dtype) for a in (x, *Ws))


@hidden_test(uses=("streaming_decode",), helpers=("decode_step",), visible_check="check_streaming_decode")
def streaming_values(streaming_decode, **helpers):
    """Streams longer than n_sink + window (batched and not), no sinks, window 1, a stream shorter than the cache;
    the output and the final caches; float32."""
    rng = rng_for("streaming_values")
    n_heads, n_kv_heads, d_head = (6, 2, 5) if rng.random() < 0.5 else (6, 3, 4)
    B, T = (int(v) for v in rng.choice([7, 9, 10, 11], size=2, replace=False))
    n_sink, window = int(rng.integers(1, 4)), int(rng.integers(2, 5))

    def case(lead, T, n_sink, window, dtype=np.float64):
        args = (*_gqa_layer(rng, lead, T, n_heads, n_kv_heads, d_head, dtype), n_heads, n_kv_heads, n_sink, window)
        return Case(args, label=f"{'batched' if lead else 'unbatched'}, T={T}, n_sink={n_sink}, window={window}")

    cases = [case((), T, n_sink, window), case((B,), T, n_sink, window), case((), T, 0, window),
             case((B,), T, n_sink, 1), case((), n_sink + window - 1, n_sink, window)]
    outputs = ("out", "cache_k", "cache_v")
    against_reference("streaming_decode", streaming_decode, cases, outputs=outputs, rtol=1e-7, atol=1e-10,
                      inspect="what the cache holds before each step: its first n_sink and its last window - 1 tokens")
    f32 = case((B,), T, n_sink, window, np.float32)
    against_reference("streaming_decode", streaming_decode, [f32], outputs=outputs, rtol=1e-4, atol=1e-5)
    dtype_kept("streaming_decode", streaming_decode, [f32, cases[0]], outputs=outputs)


# ------------------------------------------------------------------------------------------------------- MLA
def _mla_dims(rng):
    """n_heads, T, d_model, d_head, d_c, d_rope, B: all different; d_head and d_rope even."""
    d_head, d_rope = (int(v) for v in rng.choice([4, 6, 8], size=2, replace=False))
    sizes = [s for s in (3, 5, 7, 9, 10, 11, 12) if s != d_head + d_rope]  # d_c != d_head + d_rope: another scale
    n_heads, T, d_model, d_c, B = (int(v) for v in rng.choice(sizes, size=5, replace=False))
    return n_heads, T, d_model, d_head, d_c, d_rope, B


def _mla_case(rng, lead, dims, masked, dtype=np.float64):
    n_heads, T, d_model, d_head, d_c, d_rope, _ = dims
    shapes = [(d_model, d_c), (d_c, n_heads * d_head), (d_c, n_heads * d_head), (d_model, d_rope),
              (d_model, n_heads * d_head), (d_model, n_heads * d_rope), (n_heads * d_head, d_model)]
    Ws = [rng.normal(size=s) / math.sqrt(s[0]) for s in shapes]
    x = rng.normal(size=(*lead, T, d_model))
    mask = None
    if masked:
        mask = np.triu(np.ones((T, T), dtype=bool), k=1) | (rng.random((T, T)) < 0.2)
        mask[np.arange(T), np.arange(T)] = False  # every query keeps itself
    label = f"{'batched' if lead else 'unbatched'}{', masked' if masked else ''}, {np.dtype(dtype).name}"
    return Case((x.astype(dtype), *(W.astype(dtype) for W in Ws), n_heads), {"mask": mask} if masked else {},
                label=label)


def _check_mla(name, fn):
    rng = rng_for(f"{name}_values")
    dims = _mla_dims(rng)
    B = dims[-1]
    cases = [_mla_case(rng, (), dims, False), _mla_case(rng, (B,), dims, True), _mla_case(rng, (B, 2), dims, False),
             _mla_case(rng, (), dims, True)]
    against_reference(name, fn, cases, outputs=("out", "weights"), rtol=1e-7, atol=1e-10,
                      inspect="the scale, the rotary parts (only they are rotated; one key part shared by all heads) "
                              "and which columns and rows of the weights belong to each head")
    f32 = _mla_case(rng, (B,), dims, True, np.float32)
    against_reference(name, fn, [f32], outputs=("out", "weights"), rtol=1e-3, atol=1e-5)
    dtype_kept(name, fn, [f32, cases[1]], outputs=("out", "weights"))


@hidden_test(uses=("mla_attention",), helpers=("rope", "split_heads", "concat_heads", "scaled_dot_product_attention",
                                               "softmax"), visible_check="check_mla_attention")
def mla_values(mla_attention, **helpers):
    """Unbatched, batched (B) and (B, 2), with and without a mask; float32."""
    _check_mla("mla_attention", mla_attention)


def _from_cache(case: Case, T_q: int) -> Case:
    """An ``mla_attention`` case as ``mla_absorbed`` takes it: the last T_q tokens, the cache of all T (c_KV and the
    rotated k_R, made by the reference), and the mask's last T_q rows."""
    x, W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O, n_heads = case.args
    c_kv, k_r = reference.mla_cache(x, W_DKV, W_KR)  # (..., T, d_c), (..., T, d_rope)
    mask = case.kwargs.get("mask")
    T = x.shape[-2]
    kwargs = {} if mask is None else {"mask": mask[T - T_q:]}  # (T_q, T)
    tokens = f"the last {T_q} of {T} tokens" if T_q < T else f"all {T} tokens"
    return Case((x[..., T - T_q:, :], c_kv, k_r.astype(x.dtype), W_UK, W_UV, W_Q, W_QR, W_O, n_heads), kwargs,
                label=f"{case.label}, {tokens}")


@hidden_test(uses=("mla_absorbed",), helpers=("rope", "split_heads", "concat_heads", "softmax"),
             visible_check="check_mla_absorbed")
def absorbed_values(mla_absorbed, **helpers):
    """The cache of unbatched, batched (B) and (B, 2) sequences, with and without a mask; the queries all the tokens,
    the last one (a decoding step) or the last few (rotated at their own positions); float32."""
    rng = rng_for("mla_absorbed_values")
    dims = _mla_dims(rng)
    T, B = dims[1], dims[-1]
    few = int(rng.integers(2, T))  # 2 ... T - 1 newest tokens
    cases = [_from_cache(_mla_case(rng, (), dims, False), T), _from_cache(_mla_case(rng, (B,), dims, True), T),
             _from_cache(_mla_case(rng, (B, 2), dims, False), 1), _from_cache(_mla_case(rng, (), dims, True), few),
             _from_cache(_mla_case(rng, (B,), dims, False), few)]
    against_reference("mla_absorbed", mla_absorbed, cases, outputs=("out", "weights"), rtol=1e-7, atol=1e-10,
                      inspect="the scale, the rotary parts (the queries rotated at positions T - T_q ... T - 1; the "
                              "cached key already rotated and shared by all heads) and which columns and rows of the "
                              "weights belong to each head")
    f32 = _from_cache(_mla_case(rng, (B,), dims, True, np.float32), few)
    against_reference("mla_absorbed", mla_absorbed, [f32], outputs=("out", "weights"), rtol=1e-3, atol=1e-5)
    dtype_kept("mla_absorbed", mla_absorbed, [f32, cases[1]], outputs=("out", "weights"))


# The absorption rule, by its memory, as lesson 06 checks tiled attention: one decoding step over a long cache. Where
# the function runs in this process its peak allocation is counted (tracemalloc); in the learner's kernel it gets a
# cache whose tokens' keys, even one head's, are larger than the kernel may hold, while the cache itself and the
# (n_heads, 1, T) scores are small. A function that builds the keys or values of the cached tokens fails with
# MemoryError; one that absorbs W_UK and W_UV returns the right values, which cost the grader little (the reference
# is the absorbed form).
_STEP_HEADS, _STEP_D_HEAD, _STEP_D_C, _STEP_D_ROPE, _STEP_D_MODEL = 2, 2048, 4, 2, 6
_SMALL_CACHE, _PROBE_CACHE = 2048, 64  # measured here; only the values checked, in the kernel


def _absorbed_failure(case, detail):
    b = by_id("absorbed_builds_cached_keys")
    return WrongAnswer.naming(b, f"on input {case.describe()}: {detail}")


def _decode_step_case(rng, T, dtype=np.float64):
    n_heads, d_head, d_c, d_rope, d_model = _STEP_HEADS, _STEP_D_HEAD, _STEP_D_C, _STEP_D_ROPE, _STEP_D_MODEL
    shapes = [(d_c, n_heads * d_head), (d_c, n_heads * d_head), (d_model, n_heads * d_head),
              (d_model, n_heads * d_rope), (n_heads * d_head, d_model)]  # W_UK, W_UV, W_Q, W_QR, W_O
    Ws = [(rng.normal(size=s) / math.sqrt(s[0])).astype(dtype) for s in shapes]
    x = rng.normal(size=(1, d_model)).astype(dtype)  # the newest token
    c_kv, k_r = rng.normal(size=(T, d_c)).astype(dtype), rng.normal(size=(T, d_rope)).astype(dtype)  # the cache
    return Case((x, c_kv, k_r, *Ws, n_heads), label=f"one token over a cache of T={T}, n_heads={n_heads}, "
                                                    f"d_head={d_head}, d_c={d_c}")


def _step_mismatch(out, case: Case):
    """What is wrong with ``out`` as mla_absorbed's result on ``case`` (None when right): the expected values cost
    the grader little, the reference being the absorbed form."""
    got = as_outputs(out, ("out", "weights"))
    for what, g, e in zip(("out", "weights"), got, reference.mla_absorbed(*case.args)):
        why = compare.mismatch(g, e, rtol=1e-6, atol=1e-8, what=f"mla_absorbed's {what}")
        if why is not None:
            return why, got
    return None, got


@hidden_test(uses=("mla_absorbed",), helpers=("rope", "split_heads", "concat_heads", "softmax"),
             visible_check="check_mla_absorbed_memory")
def absorbed_memory(mla_absorbed, **helpers):
    """Builds no key or value of a cached token: counted here when the function runs here; in the kernel, one
    decoding step over a cache whose tokens' keys of one head the kernel cannot hold."""
    rng = rng_for("absorbed_memory")
    limit = memory_limit(mla_absorbed)
    case = _decode_step_case(rng, _SMALL_CACHE if limit is None else _PROBE_CACHE)
    if limit is None:
        out, peak = call_measuring_memory(mla_absorbed, case, "mla_absorbed")
        if peak < 0:
            raise WrongAnswer("mla_absorbed stopped Python's memory tracing (tracemalloc.stop()), so its memory cannot "
                              "be measured; remove that call")
    else:
        out, peak = call_learner(mla_absorbed, case, "mla_absorbed"), None
    # The values are graded by absorbed_values; here they only have to show the function computes the step (a
    # catalogued value bug, already penalised there, does not cost this point too).
    why, got = _step_mismatch(out, case)
    value_bug = why is not None and known_bug("mla_absorbed", case, got, ("out", "weights"), rtol=1e-6, atol=1e-8)
    if why is not None and not value_bug:
        raise WrongAnswer(f"{why} on input {case.describe()}; the memory is tested on a function that computes the "
                          "step")
    one_head = _SMALL_CACHE * _STEP_D_HEAD * 8
    if peak is not None:
        if peak > one_head // 4:
            raise _absorbed_failure(case, f"peak {peak / 2**20:.1f} MB; one head's keys of the cached tokens are "
                                          f"{one_head / 2**20:.1f} MB")
        return
    T = limit // (_STEP_D_HEAD * 8) + 1  # one head's (T, d_head) float64 keys: more than the kernel may hold
    big = _decode_step_case(rng, T)
    with np.errstate(all="ignore"):
        out, ran_out = call_within_memory(mla_absorbed, big, "mla_absorbed")
    if ran_out:
        raise _absorbed_failure(big, f"it ran out of memory; one head's keys of the cached tokens are "
                                     f"{T * _STEP_D_HEAD * 8 / 2**30:.1f} GB, more than the {limit / 2**30:.1f} GB the "
                                     "kernel may hold")
    why, _ = _step_mismatch(out, big)
    if why is not None and not value_bug:
        raise WrongAnswer(f"{why} on input {big.describe()}; the memory is tested on a function that computes the "
                          "step")


# ----------------------------------------------------------------------------------------------- cache counts
def cache_configs(rng) -> list:
    """Every kind of attention twice, with sizes that all differ (so a size used in the wrong place shows), within
    the lesson's contract: GQA's n_heads a multiple of n_kv_heads (each KV head serves a whole group); and
    DeepSeek-V2's configuration."""
    configs = []
    for kind in reference.KV_CACHE_ATTENTION * 2:
        n_layers, group, d_head, n_kv_heads, d_c, d_rope = (int(v) for v in rng.choice(
            [2, 3, 5, 7, 11, 13, 17, 19], size=6, replace=False))
        n_heads = n_kv_heads * group  # a product of two primes: no other size equals it
        config = {"attention": kind, "n_layers": n_layers, "n_heads": n_heads, "d_head": d_head}
        config.update({"GQA": {"n_kv_heads": n_kv_heads}, "MLA": {"d_c": d_c, "d_rope": d_rope}}.get(kind, {}))
        configs.append(config)
    return configs + [dict(attention="MLA", n_layers=60, n_heads=128, d_head=128, d_c=512, d_rope=64)]


@hidden_test(uses=("kv_cache_elements_per_token",), visible_check="check_kv_cache_elements")
def cache_values(kv_cache_elements_per_token):
    """Every kind of attention on salted configurations whose sizes all differ, and DeepSeek-V2's."""
    cases = [((config,), {}) for config in cache_configs(rng_for("cache_values"))]
    check_counts("kv_cache_elements_per_token", kv_cache_elements_per_token, cases,
                 inspect="what one layer caches for each kind of attention, and the number of layers")
