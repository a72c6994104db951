"""Hidden tests of lesson 06 (going further): GQA/MQA, the KV cache, mask conventions, tiled attention.

One function per graded test cell, named by the cell's grade_id. Inputs are seeded random arrays whose sizes
are all different (B, T, n_heads, n_kv_heads, d_head), unbatched and batched, float64 and float32. A composite
function is graded with the reference stand-ins of the helpers its test declares (``checks/registry.py``), so a
bug in ``repeat_kv``, ``kv_cache_append`` or a pasted function costs only that function's points; every other
function of the lesson refuses: GQA may not hand its work to ``multi_head_attention``, nor the decoding loop to
``causal_self_attention``.

Tiled attention is graded for its own work. It has no helpers, so while its tests run every function of the lesson
refuses to answer: a ``tiled_attention`` that calls ``scaled_dot_product_attention`` has tiled nothing. Its memory
point cannot take the kernel's word: the learner's function runs in the kernel, and a notebook can rewrite anything
the kernel sends, a count of its own memory included. So in grading the point is behavioural: the function computes
attention at a T whose (T, T) float64 matrix is larger than the kernel's memory limit (which the grader sets, and
knows), with tiles of (T, 256). Building the matrix fails with MemoryError there; working in tiles gives the right
values, which the grader checks cheaply on a few rows it draws (the keys are all different, so no shortcut over
repeated keys avoids the matrix). The price is the n * n scores themselves: about 3 s of one core at the default
limit of 2048 MB (T = 16640). Only where the function runs in the grader's own process (an instructor's kernel,
nbval, the salt sweep), and nothing can forge the count, is its peak counted with tracemalloc.
"""

from __future__ import annotations

import math

import numpy as np

from autograder import reference
from autograder.checks import bug_match, compare
from autograder.bugs import by_id
from autograder.checks.runner import (Case, against_reference, call_learner, call_measuring_memory,
                                      call_within_memory, dtype_kept, known_bug, memory_limit, rng_for, side_beyond)
from autograder.checks.verdict import WrongAnswer
from autograder.checks.registry import hidden_test

# (n_heads, n_kv_heads, d_head) configurations; in every one n_rep = n_heads // n_kv_heads >= 2 and
# n_kv_heads >= 2, so tiling and repeating the KV heads give different results.
_GQA = ((6, 2, 5), (6, 3, 4), (8, 2, 3), (4, 2, 7))
_SIZES = (3, 5, 7, 9, 10, 11)
# The pieces of attention pasted from lessons 01 and 02: helpers of every layer of this lesson.
_PIECES = ('split_heads', 'concat_heads', 'scaled_dot_product_attention', 'softmax')



def _rng(test_id: str):
    return rng_for(test_id)


def _layer(rng, n_heads, n_kv_heads, d_head, T, lead=(), dtype=np.float64):
    """x (*lead, T, d_model) and W_Q, W_K, W_V, W_O for grouped-query attention."""
    d_model = n_heads * d_head
    d_kv = n_kv_heads * d_head
    x = rng.normal(size=(*lead, T, d_model)).astype(dtype)
    W_Q, W_O = (rng.normal(size=(d_model, d_model)) / math.sqrt(d_model) for _ in range(2))
    W_K, W_V = (rng.normal(size=(d_model, d_kv)) / math.sqrt(d_model) for _ in range(2))
    return (x, *(W.astype(dtype) for W in (W_Q, W_K, W_V, W_O)))


def _config(rng, i):
    """A GQA configuration and a batch size B and length T different from every size in it."""
    n_heads, n_kv_heads, d_head = _GQA[i % len(_GQA)]
    free = [s for s in _SIZES if s not in (n_heads, n_kv_heads, d_head, n_heads // n_kv_heads)]
    B, T = (int(v) for v in rng.choice(free, size=2, replace=False))
    return n_heads, n_kv_heads, d_head, B, T


@hidden_test(uses=('repeat_kv',), visible_check='check_repeat_kv')
def repeat_kv_values(repeat_kv):
    """(..., n_kv_heads, T, d_head) -> (..., n_kv_heads * n_rep, T, d_head), each KV head repeated in a row."""
    rng = _rng("repeat_kv_values")
    cases = []
    for i, (lead, n_rep, dtype) in enumerate((((), 3, np.float64), ((2,), 2, np.float64), ((4,), 3, np.float32),
                                              ((), 1, np.float64))):
        n_kv, _, d_head, B, T = _config(rng, i)
        shape = (*lead[:-1], B, n_kv, T, d_head) if lead else (n_kv, T, d_head)
        cases.append(Case((rng.normal(size=shape).astype(dtype), n_rep),
                          label=f"{'batched' if lead else 'unbatched'}, n_rep={n_rep}, {np.dtype(dtype).name}"))
    against_reference("repeat_kv", repeat_kv, cases, rtol=0, atol=0)
    dtype_kept("repeat_kv", repeat_kv, cases[:3], rtol=0, atol=0)


@hidden_test(uses=('grouped_query_attention',), helpers=('repeat_kv', *_PIECES), visible_check='check_gqa')
def gqa_values(grouped_query_attention, **helpers):
    """GQA between its two ends: MHA (n_kv_heads = n_heads), MQA (n_kv_heads = 1), and true groups."""
    rng = _rng("gqa_values")
    cases = []
    for i in range(len(_GQA)):
        n_heads, n_kv, d_head, B, T = _config(rng, i)
        lead = (B,) if i % 2 else ()
        args = _layer(rng, n_heads, n_kv, d_head, T, lead)
        cases.append(Case((*args, n_heads, n_kv), label=f"GQA n_heads={n_heads}, n_kv_heads={n_kv}"
                          + (", batched" if lead else ", unbatched")))
    n_heads, n_kv, d_head, B, T = _config(rng, 0)
    mask = rng.random((T, T)) < 0.3
    mask[np.arange(T), rng.integers(0, T, T)] = False  # every query keeps a key
    cases += [
        Case((*_layer(rng, n_heads, n_kv, d_head, T, (B,)), n_heads, n_kv), {"mask": mask}, label="GQA with a mask"),
        Case((*_layer(rng, n_heads, n_heads, d_head, T, (B,)), n_heads, n_heads), label="MHA end: n_kv_heads = n_heads"),
        Case((*_layer(rng, n_heads, 1, d_head, T, (B,)), n_heads, 1), label="MQA end: n_kv_heads = 1"),
    ]
    against_reference("grouped_query_attention", grouped_query_attention, cases, outputs=("out", "weights"), rtol=1e-6,
          atol=1e-9)
    n_heads, n_kv, d_head, B, T = _config(rng, 1)
    f32 = [Case((*_layer(rng, n_heads, n_kv, d_head, T, (B,), np.float32), n_heads, n_kv), label="float32")]
    against_reference("grouped_query_attention", grouped_query_attention, f32, outputs=("out", "weights"), rtol=1e-3,
          atol=1e-5)
    gqa_masks_and_dtypes(grouped_query_attention, rng, f32[0])


def gqa_masks_and_dtypes(grouped_query_attention, rng, case32):
    """A mask per batch element with a fully blocked row (its weights all 0, so its output row 0), on true
    groups, batched and unbatched; then float32 stays float32 and float64 float64."""
    cases = []
    for i, lead in ((2, ()), (3, None)):
        n_heads, n_kv, d_head, B, T = _config(rng, i)
        lead = (B,) if lead is None else lead
        mask = rng.random((*lead, 1, T, T)) < 0.4  # (..., 1, T, T): the same for every head
        mask[..., np.arange(T), rng.integers(0, T, T)] = False  # every query keeps a key ...
        mask[..., int(rng.integers(0, T)), :] = True  # ... but one, which is fully blocked
        cases.append(Case((*_layer(rng, n_heads, n_kv, d_head, T, lead), n_heads, n_kv), {"mask": mask},
                          label=f"GQA n_heads={n_heads}, n_kv_heads={n_kv}, a mask with one fully blocked query"
                          + (", batched" if lead else ", unbatched")))
    against_reference("grouped_query_attention", grouped_query_attention, cases, outputs=("out", "weights"), rtol=1e-6,
          atol=1e-9)
    dtype_kept("grouped_query_attention", grouped_query_attention, [case32, cases[1]], outputs=("out", "weights"))


@hidden_test(uses=('causal_mask',), visible_check='check_causal_masks')
def mask_conventions(causal_mask):
    """The causal mask in each convention: right dtype family, shape and values."""
    kinds = {"course": "b", "nn.MultiheadAttention": "b", "F.scaled_dot_product_attention": "b",
             "masked_fill": "biuf"}
    for T in (5, 1, 8):
        for convention, allowed in kinds.items():
            case = Case((T, convention), label=f"T={T}, convention={convention!r}")
            got = call_learner(causal_mask, case, "causal_mask")
            expected = reference.causal_mask(T, convention)
            if not compare.is_array(got):
                raise WrongAnswer(f"causal_mask should return a numpy array, got {type(got).__name__} on {case.describe()}")
            if got.dtype.kind not in allowed:
                raise WrongAnswer(f"causal_mask({T}, {convention!r}) has dtype {got.dtype}; this convention takes a "
                                  "boolean mask" + (" (np.bool_)" if allowed == "b" else " or 0/1 numbers"))
            if compare.shape_of(got) != (T, T):
                raise WrongAnswer(f"causal_mask({T}, {convention!r}) has shape {compare.shape_of(got)}, expected ({T}, {T})")
            g = [float(v) for v in compare.flat_floats(got)]
            e = [float(v) for v in compare.flat_floats(expected)]
            if g != e:
                b = bug_match.first_fit("causal_mask", lambda b: g == [
                    float(v) for v in compare.flat_floats(np.asarray(b.make()(T, convention)))])
                if b is not None:
                    raise WrongAnswer.naming(b, f"on input {case.describe()}")
                raise WrongAnswer(_mask_difference(T, convention, g, e), uncatalogued=True)


def _mask_difference(T, convention, got, expected):
    """Where a causal mask differs (below, on, above the diagonal) and what the convention puts there."""
    regions = {"below the diagonal": lambda i, j: j < i, "on the diagonal": lambda i, j: j == i,
               "above the diagonal": lambda i, j: j > i}
    wrong, sizes = {}, {}
    for name, inside in regions.items():
        cells = [i * T + j for i in range(T) for j in range(T) if inside(i, j)]
        sizes[name] = len(cells)
        wrong[name] = sum(1 for c in cells if got[c] != expected[c])
    where = ", ".join(f"{n} ({wrong[n]} of {sizes[n]})" for n in regions if wrong[n])
    show = (lambda v: f"{v:g}") if convention == "masked_fill" else (lambda v: str(bool(v)))
    open_value, blocked_value = expected[0], expected[T - 1] if T > 1 else None  # (0, 0) is open, (0, T-1) blocked
    rule = (f"in this convention a pair that may attend holds {show(open_value)} and a blocked pair"
            + (f" {show(blocked_value)}" if blocked_value is not None else " the other value")
            + "; query i may attend to keys 0..i, itself included")
    return f"causal_mask({T}, {convention!r}) differs from the causal mask in that convention {where}: {rule}"


@hidden_test(uses=('causal_self_attention',),
             helpers=('grouped_query_attention', 'repeat_kv', 'causal_mask', *_PIECES),
             visible_check='check_causal_self_attention')
def causal_full_values(causal_self_attention, **helpers):
    """The full (uncached) causal path, GQA and MHA (n_kv_heads = n_heads); graded with the reference GQA, repeat_kv
    and causal_mask."""
    rng = _rng("causal_full_values")
    cases = []
    for i in range(3):
        n_heads, n_kv, d_head, B, T = _config(rng, i)
        lead = (B,) if i != 1 else ()
        cases.append(Case((*_layer(rng, n_heads, n_kv, d_head, T, lead), n_heads, n_kv),
                          label=f"n_heads={n_heads}, n_kv_heads={n_kv}" + (", batched" if lead else ", unbatched")))
    n_heads, _, d_head, B, T = _config(rng, 0)
    cases.append(Case((*_layer(rng, n_heads, n_heads, d_head, T, (B,)), n_heads, n_heads),
                      label=f"n_heads = n_kv_heads = {n_heads} (MHA), batched"))
    against_reference("causal_self_attention", causal_self_attention, cases, outputs=("out", "weights"), rtol=1e-6, atol=1e-9)
    n_heads, n_kv, d_head, B, T = _config(rng, 3)
    f32 = Case((*_layer(rng, n_heads, n_kv, d_head, T, (B,), np.float32), n_heads, n_kv), label="float32, batched")
    dtype_kept("causal_self_attention", causal_self_attention, [f32, cases[0]], outputs=("out", "weights"))


@hidden_test(uses=('kv_cache_append',), visible_check='check_kv_cache_append')
def kv_cache_append_values(kv_cache_append):
    """Append along the time axis; the first case is a second decoding step (cache of 1 token + 1 new token)."""
    rng = _rng("kv_cache_append_values")
    n_heads, n_kv, d_head, B, T = _config(rng, 0)

    def arrays(lead, T_past, T_new, dtype=np.float64):
        return tuple(rng.normal(size=(*lead, n_kv, t, d_head)).astype(dtype)
                     for t in (T_past, T_past, T_new, T_new))

    cases = [
        Case(arrays((B,), 1, 1), label="batched, second step: 1 cached token + 1 new"),
        Case(arrays((B,), T, 1), label=f"batched, {T} cached tokens + 1 new"),
        Case(arrays((), T, 1), label=f"unbatched, {T} cached tokens + 1 new"),
        Case(arrays((B,), 0, 1), label="batched, empty cache + 1 new"),
        Case(arrays((B,), T, 2, np.float32), label=f"float32, {T} cached tokens + 2 new"),
    ]
    against_reference("kv_cache_append", kv_cache_append, cases, outputs=("cache_k", "cache_v"), rtol=0, atol=0)
    dtype_kept("kv_cache_append", kv_cache_append, cases[1:], outputs=("cache_k", "cache_v"), rtol=0, atol=0)


@hidden_test(uses=('decode_step',), helpers=('kv_cache_append', 'repeat_kv', *_PIECES),
             visible_check='check_decode_step')
def decode_step_values(decode_step, **helpers):
    """One decoding step from caches of several lengths (0 included); graded with the reference helpers."""
    rng = _rng("decode_step_values")
    cases = []
    for i, T_past in enumerate((4, 7, 0)):  # the empty cache last: a bug that fails on it is still named
        n_heads, n_kv, d_head, B, _ = _config(rng, i)
        lead = (B,) if i != 1 else ()
        x, W_Q, W_K, W_V, W_O = _layer(rng, n_heads, n_kv, d_head, 1, lead)
        cache = [rng.normal(size=(*lead, n_kv, T_past, d_head)) for _ in range(2)]
        cases.append(Case((x, *cache, W_Q, W_K, W_V, W_O, n_heads, n_kv),
                          label=f"cache of {T_past} tokens, n_heads={n_heads}, n_kv_heads={n_kv}"
                          + (", batched" if lead else ", unbatched")))
    against_reference("decode_step", decode_step, cases, outputs=("out_t", "cache_k", "cache_v"), rtol=1e-6, atol=1e-9)
    n_heads, n_kv, d_head, B, _ = _config(rng, 3)
    x, W_Q, W_K, W_V, W_O = _layer(rng, n_heads, n_kv, d_head, 1, (B,), np.float32)
    cache = [rng.normal(size=(B, n_kv, 5, d_head)).astype(np.float32) for _ in range(2)]
    f32 = Case((x, *cache, W_Q, W_K, W_V, W_O, n_heads, n_kv), label="float32, cache of 5 tokens, batched")
    dtype_kept("decode_step", decode_step, [f32, cases[0]], outputs=("out_t", "cache_k", "cache_v"))


# the functions that compute attention over a whole sequence at once (a (T, T) matrix of scores)
_WHOLE_ATTENTION = ('scaled_dot_product_attention', 'multi_head_attention', 'grouped_query_attention',
                    'causal_self_attention', 'cross_attention')


@hidden_test(uses=('decode_with_kv_cache',), helpers=('decode_step', 'kv_cache_append', 'repeat_kv'),
             visible_check='check_decode_with_kv_cache', forbids=_WHOLE_ATTENTION + ('tiled_attention',),
             because="the loop feeds the tokens to decode_step one at a time")
def decode_loop_values(decode_with_kv_cache, **helpers):
    """Token-by-token decoding of a whole sequence equals the full causal path; graded with reference helpers. The
    loop feeds its tokens to decode_step: the functions that compute the whole causal path refuse."""
    rng = _rng("decode_loop_values")
    cases = []
    for i in range(2):
        n_heads, n_kv, d_head, B, T = _config(rng, i + 1)
        lead = (B,) if i == 0 else ()
        cases.append(Case((*_layer(rng, n_heads, n_kv, d_head, T, lead), n_heads, n_kv),
                          label=f"T={T}, n_heads={n_heads}, n_kv_heads={n_kv}" + (", batched" if lead else "")))
    against_reference("decode_with_kv_cache", decode_with_kv_cache, cases, outputs=("out", "cache_k", "cache_v"), rtol=1e-6,
          atol=1e-9)
    n_heads, n_kv, d_head, B, T = _config(rng, 0)
    f32 = Case((*_layer(rng, n_heads, n_kv, d_head, T, (B,), np.float32), n_heads, n_kv), label="float32, batched")
    dtype_kept("decode_with_kv_cache", decode_with_kv_cache, [f32, cases[0]], outputs=("out", "cache_k", "cache_v"))


def _tiled_cases(rng, dtype):
    cases = []
    for lead, T_q, T_k, block, causal in (((), 13, 29, 4, False), ((3, 2), 11, 23, 5, False),
                                          ((2,), 17, 17, 6, True), ((), 9, 9, 1, True), ((2,), 7, 19, 64, False)):
        d_k, d_v = 5, 3
        args = tuple(rng.normal(size=(*lead, t, d)).astype(dtype) * 2 for t, d in ((T_q, d_k), (T_k, d_k), (T_k, d_v)))
        cases.append(Case((*args, block), {"causal": causal},
                          label=f"{'causal, ' if causal else ''}block_size={block}, T_k={T_k}, {np.dtype(dtype).name}"))
    if dtype == np.float64:  # float32 keeps a score near 1300 to 1e-4 only: too coarse for any tolerance here
        cases += [_far_rows_case(rng, dtype, causal) for causal in (False, True)]
    return cases


def _far_rows_case(rng, dtype, causal):
    """Rows whose scores all lie far below 0 or far above it: key feature 0 is 1 for every key, so query i's
    feature 0 shifts its whole row of scores (softmax ignores a shift; exp of a score near -1000 does not)."""
    lead, T, d_k, d_v, block = (2,), 12, 5, 3, 5
    Q, K, V = (rng.normal(size=(*lead, T, d)) * 2 for d in (d_k, d_k, d_v))
    K[..., 0] = 1.0
    offsets = (-3000.0, -300.0, 0.0, 3000.0)
    Q[..., 0] = rng.choice(offsets, size=(*lead, T))  # (..., T): each row's offset
    args = tuple(a.astype(dtype) for a in (Q, K, V))
    near = int(max(offsets) / math.sqrt(d_k))
    return Case((*args, block), {"causal": causal}, label=f"{'causal, ' if causal else ''}rows of scores near "
                f"+-{near}, block_size={block}, T_k={T}, {np.dtype(dtype).name}")


def _tiled_reference(Q, K, V, block_size, causal=False):
    """What tiled attention must equal: the plain (T_q, T_k) computation."""
    mask = np.triu(np.ones((Q.shape[-2], K.shape[-2]), dtype=bool), k=1) if causal else None
    return reference.scaled_dot_product_attention(Q, K, V, mask)[0]


# Tiled attention is graded for its own work: a function that computes attention over the whole sequence refuses
# to answer while it runs (the tiles and the online softmax are the exercise; the lesson says so).
_TILED = dict(forbids=_WHOLE_ATTENTION,
              because="it never holds the whole (T_q, T_k) matrix of scores; tiling is the exercise")


@hidden_test(uses=('tiled_attention',), visible_check='check_tiled_attention', **_TILED)
def tiled_values(tiled_attention):
    """Equal to plain attention within 1e-10 in float64 (1e-5 in float32) for any block size, causal or not."""
    rng = _rng("tiled_values")
    f64, f32 = _tiled_cases(rng, np.float64), _tiled_cases(rng, np.float32)
    against_reference("tiled_attention", tiled_attention, f64, rtol=1e-10, atol=1e-10, ref=_tiled_reference)
    against_reference("tiled_attention", tiled_attention, f32, rtol=1e-4, atol=1e-5, ref=_tiled_reference)
    dtype_kept("tiled_attention", tiled_attention, [f32[0], f64[0]], ref=_tiled_reference)


# The memory point. Where the function runs in this process (an instructor's kernel, nbval, the salt sweep) its
# peak allocation is counted here, with tracemalloc, at T = 1024. Where it runs in the learner's kernel, nothing the
# kernel reports is trusted (a notebook can rewrite what goes over its channel), so the memory is tested by what the
# kernel cannot forge: the function gets inputs whose (T, T) float64 matrix is larger than the kernel may
# hold (its address-space limit, which the grader sets), while each (T, block_size) tile is small. A function that
# builds the matrix fails with MemoryError; one that works in tiles returns the right values. Those values cost the
# grader little: it computes exact attention for _CHECKED_ROWS queries it draws, over every key. The keys are drawn
# independently, so none repeats: a function that attends over the distinct keys only still needs the whole matrix.
_SMALL_T, _SMALL_D, _SMALL_BLOCK = 1024, 8, 32
_BIG_D, _BIG_BLOCK, _CHECKED_ROWS = 2, 256, 64


def _memory_failure(case, detail):
    b = by_id("tiled_full_matrix")
    return WrongAnswer.naming(b, f"on input {case.describe()}: {detail}")


@hidden_test(uses=('tiled_attention',), visible_check='check_tiled_memory', **_TILED)
def tiled_memory(tiled_attention):
    """Never holds a (T_q, T_k) array: counted here when the function runs here; in the kernel, it computes
    attention at a T whose (T, T) float64 matrix the kernel cannot hold."""
    rng = _rng("tiled_memory")
    Q, K, V = (rng.normal(size=(_SMALL_T, _SMALL_D)) for _ in range(3))
    case = Case((Q, K, V, _SMALL_BLOCK), label=f"T={_SMALL_T}, block_size={_SMALL_BLOCK}")
    limit = memory_limit(tiled_attention)
    if limit is None:
        out, peak = call_measuring_memory(tiled_attention, case, "tiled_attention")
        if peak < 0:
            raise WrongAnswer("tiled_attention stopped Python's memory tracing (tracemalloc.stop()), so its memory "
                              "cannot be measured; remove that call")
    else:
        out, peak = call_learner(tiled_attention, case, "tiled_attention"), None
    # The values are graded by tiled_values; here they only have to show the function computes attention (a
    # catalogued value bug, already penalised there, does not cost this point too).
    why = compare.mismatch(out, _tiled_reference(Q, K, V, _SMALL_BLOCK), rtol=1e-6, atol=1e-8, what="tiled_attention")
    value_bug = why is not None and known_bug("tiled_attention", case, (out,), ("result",), rtol=1e-6, atol=1e-8)
    if why is not None and not value_bug:
        raise WrongAnswer(f"{why} on input {case.describe()}; the memory is tested on a function that computes "
                          "attention")
    full = _SMALL_T * _SMALL_T * 8
    if peak is not None:
        if peak > full // 4:
            raise _memory_failure(case, f"peak {peak / 2**20:.1f} MB; one ({_SMALL_T}, {_SMALL_T}) float64 matrix is "
                                        f"{full / 2**20:.1f} MB")
        return
    T = -(-side_beyond(limit) // _BIG_BLOCK) * _BIG_BLOCK  # whole blocks: a partial block's slip is tiled_values's
    Q, K, V = (rng.normal(size=(T, _BIG_D)) for _ in range(3))  # (T, d) each, no two keys alike
    big = Case((Q, K, V, _BIG_BLOCK), label=f"T={T}, block_size={_BIG_BLOCK}")
    with np.errstate(all="ignore"):
        got, ran_out = call_within_memory(tiled_attention, big, "tiled_attention")
    if ran_out:
        raise _memory_failure(big, f"it ran out of memory; one ({T}, {T}) float64 matrix is {T * T * 8 / 2**30:.1f} "
                                   f"GB, more than the {limit / 2**30:.1f} GB the kernel may hold")
    rows = np.sort(rng.choice(T, size=_CHECKED_ROWS, replace=False))
    expected = reference.scaled_dot_product_attention(Q[rows], K, V)[0]  # (_CHECKED_ROWS, d), over every key
    whole = compare.is_array(got) and compare.shape_of(got) == (T, _BIG_D)  # else mismatch names its type or shape
    why = compare.mismatch(got[rows] if whole else got, expected if whole else np.empty((T, _BIG_D)), rtol=1e-6,
                           atol=1e-8, what="tiled_attention")
    if why is not None and not value_bug:
        raise WrongAnswer(f"{why} on input {big.describe()}; the memory is tested on a function that computes "
                          "attention")


def _cross_case(rng, lead, T_q, T_k, n_heads, d_head, dtype=np.float64, mask=None, label=""):
    d_model = n_heads * d_head
    x_q = rng.normal(size=(*lead, T_q, d_model)).astype(dtype)
    x_kv = rng.normal(size=(*lead, T_k, d_model)).astype(dtype)
    Ws = tuple((rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)).astype(dtype) for _ in range(4))
    return Case((x_q, x_kv, *Ws, n_heads), {} if mask is None else {"mask": mask},
                label=f"{label}, T_q={T_q}, T_k={T_k}, n_heads={n_heads}" + (", batched" if lead else ", unbatched"))


def _padding(rng, B, T_k, empty=False):
    """A padding mask (B, 1, T_k), True at each sequence's padded keys; with ``empty`` the last sequence is all
    padding, so its queries have every key blocked."""
    lengths = rng.integers(1, T_k, size=B)  # every sequence padded, none empty ...
    if empty:
        lengths[-1] = 0  # ... but this one
    return np.arange(T_k)[None, None, :] >= lengths[:, None, None]  # (B, 1, T_k)


@hidden_test(uses=('cross_attention',), helpers=_PIECES, visible_check='check_cross_attention')
def cross_attention_values(cross_attention, **helpers):
    """Queries from x_q, keys and values from x_kv (T_q != T_k): no mask, padding masks (B, 1, T_k), a sequence
    that is all padding (all-zero weights), a (T_q, T_k) mask, and a padding mask on two sequences of one length
    (where a mask over the wrong axis runs); float32 stays float32."""
    rng = _rng("cross_attention_values")
    cases = []
    for i in range(3):
        n_heads, _, d_head, B, T_q = _config(rng, i)
        T_k = int(rng.choice([s for s in _SIZES if s not in (n_heads, d_head, B, T_q)]))
        lead = (B,) if i else ()
        mask = None if i == 0 else _padding(rng, B, T_k, empty=(i == 2))
        cases.append(_cross_case(rng, lead, T_q, T_k, n_heads, d_head, mask=mask,
                                 label=("no mask", "padding mask (B, 1, T_k)",
                                        "padding mask (B, 1, T_k), the last sequence all padding")[i]))
    n_heads, _, d_head, B, T_q = _config(rng, 3)
    T_k = int(rng.choice([s for s in _SIZES if s not in (n_heads, d_head, B, T_q)]))
    mask = rng.random((T_q, T_k)) < 0.4
    mask[np.arange(T_q), rng.integers(0, T_k, T_q)] = False  # every query keeps a key
    cases.append(_cross_case(rng, (B,), T_q, T_k, n_heads, d_head, mask=mask, label="a (T_q, T_k) mask"))
    n_heads, _, d_head, B, T = _config(rng, 0)
    cases.append(_cross_case(rng, (B,), T, T, n_heads, d_head, mask=_padding(rng, B, T),
                             label="padding mask (B, 1, T_k), T_q = T_k"))
    against_reference("cross_attention", cross_attention, cases, outputs=("out", "weights"), rtol=1e-6, atol=1e-9)
    n_heads, _, d_head, B, T_q = _config(rng, 1)
    T_k = int(rng.choice([s for s in _SIZES if s not in (n_heads, d_head, B, T_q)]))
    f32 = _cross_case(rng, (B,), T_q, T_k, n_heads, d_head, np.float32, mask=_padding(rng, B, T_k),
                      label="float32, padding mask")
    against_reference("cross_attention", cross_attention, [f32], outputs=("out", "weights"), rtol=1e-3, atol=1e-5)
    dtype_kept("cross_attention", cross_attention, [f32, cases[1]], outputs=("out", "weights"))
