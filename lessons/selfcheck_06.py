# Built from solutions/selfcheck_06.py by `make lessons`; edit that file, not this one.
"""Self-checks of lesson 06: grouped-query attention, the KV cache, mask conventions, tiled attention.

A check of a function that calls another of this lesson's functions first runs that helper's own check
quietly; if the helper is not right yet, it says so and stops, so one mistake is reported once, where it is.
The shared part (how a check calls your function, fails and passes) is in ``selfcheck_common.py``.
"""

from __future__ import annotations

import math

import numpy as np

from selfcheck_01 import check_attention, check_attention_mask, check_softmax, check_softmax_stable
from selfcheck_02 import check_concat_heads, check_mha_mask, check_multi_head_attention, check_split_heads
from selfcheck_common import call, check_pasted, close, fail, ok, own, pasted, peak_bytes

# the paste cell's functions, from lessons 01 and 02: a failure of theirs is reported as coming from that lesson
pasted("01", "softmax", check_softmax, check_softmax_stable)
pasted("01", "scaled_dot_product_attention", check_attention, check_attention_mask)
pasted("02", "split_heads", check_split_heads)
pasted("02", "concat_heads", check_concat_heads)
pasted("02", "multi_head_attention", check_multi_head_attention, check_mha_mask)

__all__ = ["check_pasted", "check_repeat_kv", "check_gqa", "check_causal_masks", "check_causal_self_attention",
           "check_kv_cache_append", "check_decode_step", "check_decode_with_kv_cache", "check_tiled_attention",
           "check_tiled_memory", "check_cross_attention"]


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
        return call(fn, name, *args)
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
    got = call(repeat_kv, "repeat_kv", x, 3)
    if np.shape(got) != (6, 3, 4):
        fail(f"repeat_kv of a (n_kv_heads=2, T=3, d_head=4) array with n_rep=3 has shape {np.shape(got)}, expected "
             "(6, 3, 4): repeat along the KV-head axis, the third from the end")
    order = np.asarray(got)[:, 0, 0]
    if np.array_equal(order, [0, 1, 0, 1, 0, 1]):
        fail("the KV heads come out in the order 0 1 0 1 0 1 (the whole stack tiled); each KV head must serve a "
             "consecutive group of query heads, 0 0 0 1 1 1: repeat each head in place, next to itself")
    if not np.array_equal(order, [0, 0, 0, 1, 1, 1]) or not np.array_equal(got, np.repeat(before, 3, axis=0)):
        fail(f"the heads come out as {order.tolist()}, expected [0, 0, 0, 1, 1, 1], each a full copy of its KV head")
    if not np.array_equal(x, before):
        fail("repeat_kv changed its input in place; return a new array")
    xb = np.arange(2.0)[:, None, None, None] * 10 + np.arange(2.0)[None, :, None, None] + np.zeros((2, 2, 3, 4))
    gotb = call(repeat_kv, "repeat_kv", xb, 2)  # (B=2, n_kv_heads=2, T=3, d_head=4)
    if np.shape(gotb) != (2, 4, 3, 4):
        fail(f"with a batch axis, (B=2, n_kv_heads=2, T=3, d_head=4) and n_rep=2 should give (2, 4, 3, 4), got "
             f"{np.shape(gotb)}: count the axis from the end so a batch axis does not move it")
    if not np.array_equal(np.asarray(gotb)[:, :, 0, 0], [[0, 0, 1, 1], [10, 10, 11, 11]]):
        fail("with a batch axis the heads are not repeated within each batch element: count the axis from the end")
    if not np.array_equal(call(repeat_kv, "repeat_kv", x, 1), x):
        fail("repeat_kv(x, 1) should return the same values as x")
    ok("repeat_kv: heads repeated in consecutive groups (0 0 0 1 1 1), batch axis untouched")


def _some_mask(rng, lead, T):
    """A random boolean mask (True = blocked) of shape (*lead, 1, T, T) in which every query keeps a key."""
    mask = rng.random((*lead, 1, T, T)) < 0.4
    mask[..., np.arange(T), np.arange(T)] = False
    return mask


def check_gqa(grouped_query_attention, multi_head_attention, repeat_kv=None):
    """MHA end, MQA end and a true group, with and without a mask, batched and unbatched, against
    multi_head_attention with repeated K/V weights."""
    rng = np.random.default_rng(60)
    B, T, n_heads, d_head = 2, 5, 4, 3
    ends = [(n_heads, "the MHA end (n_kv_heads = n_heads)", None), (1, "the MQA end (n_kv_heads = 1)", None)]
    groups = [(2, "a group of 2 query heads per KV head", None),
              (2, "a group of 2 query heads per KV head, with a mask", (B,)),
              (2, "a group of 2 query heads per KV head, one sequence, with a mask", ())]
    for n_kv, name, mask_lead in ends + groups:
        if n_kv == 2 and repeat_kv is not None:
            broken = _helpers_not_ready(repeat_kv=lambda: check_repeat_kv(repeat_kv))
            if broken:
                _skip("grouped_query_attention with true groups", broken)
                return
        n_rep = n_heads // n_kv
        x, W_Q, W_K, W_V, W_O = _gqa_layer(rng, B, T, n_heads, n_kv, d_head)
        lead = (B,)
        kwargs = {}
        if mask_lead is not None:
            lead = mask_lead
            x = x if lead else x[0]
            kwargs = {"mask": _some_mask(rng, lead, T)}
        try:
            result = grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv, **kwargs)
        except NotImplementedError:
            result = call(grouped_query_attention, "grouped_query_attention", x, W_Q, W_K, W_V, W_O, n_heads, n_kv)
        except ValueError as exc:
            fail(f"for {name} grouped_query_attention raised ValueError ({exc}): W_K and W_V are (d_model, "
                 f"n_kv_heads * d_head) = {W_K.shape}, so K and V hold n_kv_heads heads of width d_head, not n_heads")
        if not isinstance(result, tuple) or len(result) != 2:
            fail("grouped_query_attention must return a pair: (out, weights)")
        out, weights = result
        if np.shape(weights) != (*lead, n_heads, T, T):
            fail(f"for {name} the weights should be (..., n_heads, T, T) = {(*lead, n_heads, T, T)}, got "
                 f"{np.shape(weights)}: repeat the KV heads so every query head has one")
        if np.shape(out) != (*lead, T, n_heads * d_head):
            fail(f"for {name} out should be (..., T, d_model) = {(*lead, T, n_heads * d_head)}, got {np.shape(out)}")
        expected, _ = call(multi_head_attention, "multi_head_attention", x, W_Q, _expand(W_K, n_kv, n_rep),
                           _expand(W_V, n_kv, n_rep), W_O, n_heads, **kwargs)
        if not close(out, expected, 1e-8):
            tiled, _ = call(multi_head_attention, "multi_head_attention", x, W_Q, _expand(W_K, n_kv, n_rep, "tile"),
                            _expand(W_V, n_kv, n_rep, "tile"), W_O, n_heads, **kwargs)
            if close(out, tiled, 1e-8):
                fail("the KV heads are repeated in the order 0 1 0 1 (the whole stack tiled); query heads "
                     "0..n_rep-1 must share KV head 0")
            if kwargs:
                unmasked, _ = call(multi_head_attention, "multi_head_attention", x, W_Q, _expand(W_K, n_kv, n_rep),
                                   _expand(W_V, n_kv, n_rep), W_O, n_heads)
                if close(out, unmasked, 1e-8):
                    fail(f"for {name} the output is that of attention without the mask: the mask given to "
                         "grouped_query_attention must reach the attention of every query head")
            fail(f"for {name} the output differs from multi-head attention with each KV head's weights copied "
                 "to its query heads: Q has n_heads heads and K, V have n_kv_heads heads, shared by groups")
    ok("grouped_query_attention: equals MHA with repeated K/V weights, at both ends and in between, with a mask, "
       "batched and unbatched")


def check_causal_masks(causal_mask):
    """Known (4, 4) masks in each convention, their dtype, and a ValueError for an unknown name."""
    lower = np.tril(np.ones((4, 4), dtype=bool))  # may attend: on and below the diagonal
    wanted = {"course": (~lower, "True = blocked, above the diagonal"),
              "nn.MultiheadAttention": (~lower, "True = not allowed to attend, above the diagonal"),
              "F.scaled_dot_product_attention": (lower, "True = may attend, on and below the diagonal"),
              "masked_fill": (lower.astype(float), "1 = may attend, 0 = blocked (masked_fill(mask == 0, -inf))")}
    for convention, (expected, meaning) in wanted.items():
        got = call(causal_mask, "causal_mask", 4, convention)
        if np.shape(got) != (4, 4):
            fail(f"causal_mask(4, {convention!r}) has shape {np.shape(got)}, expected (4, 4)")
        if expected.dtype == bool and getattr(got, "dtype", None) != np.bool_:
            fail(f"causal_mask(4, {convention!r}) should be boolean, got {getattr(got, 'dtype', type(got))}")
        if not np.array_equal(np.asarray(got, float), np.asarray(expected, float)):
            inverted = np.array_equal(np.asarray(got, float), 1 - np.asarray(expected, float))
            fail(f"causal_mask(4, {convention!r}) is wrong" + (" (its polarity is inverted)" if inverted else "")
                 + f": in this convention {meaning}")
    try:
        causal_mask(4, "tensorflow")
    except ValueError:
        pass
    else:
        fail("causal_mask(4, 'tensorflow') should raise ValueError: a silent default would hide a typo")
    ok("causal_mask: all four conventions right, unknown names rejected")


def check_causal_self_attention(causal_self_attention, multi_head_attention, grouped_query_attention=None,
                                causal_mask=None):
    """Zero weight on the future; equal to causal multi-head attention with each KV head's weights copied to its
    query heads, on true groups, batched and unbatched; causal in effect."""
    helpers = {}
    if grouped_query_attention is not None:
        helpers["grouped_query_attention"] = lambda: check_gqa(grouped_query_attention, multi_head_attention)
    if causal_mask is not None:
        helpers["causal_mask"] = lambda: check_causal_masks(causal_mask)
    broken = _helpers_not_ready(**helpers)
    if broken:
        _skip("causal_self_attention", broken)
        return
    rng = np.random.default_rng(61)
    B, T, n_heads, n_kv, d_head = 2, 6, 4, 2, 3
    x, W_Q, W_K, W_V, W_O = _gqa_layer(rng, B, T, n_heads, n_kv, d_head)
    try:
        result = causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv)
    except NotImplementedError:
        result = call(causal_self_attention, "causal_self_attention", x, W_Q, W_K, W_V, W_O, n_heads, n_kv)
    except ValueError as exc:
        fail(f"causal_self_attention raised ValueError ({exc}) with n_heads={n_heads} and n_kv_heads={n_kv}: "
             f"W_K and W_V are (d_model, n_kv_heads * d_head) = {W_K.shape}; the full path is grouped-query "
             "attention, like the cached one")
    if not isinstance(result, tuple) or len(result) != 2:
        fail("causal_self_attention must return a pair: (out, weights)")
    out, weights = result
    if np.shape(weights) != (B, n_heads, T, T):
        fail(f"weights should be (B, n_heads, T, T) = {(B, n_heads, T, T)}, got {np.shape(weights)}")
    weights = np.asarray(weights)
    if np.any(np.isnan(weights.astype(float))):
        fail("some weights are NaN: a row whose keys are all blocked gives 0/0. Which keys does query 0 have? "
             "A token may attend to itself")
    if np.any(weights[..., _causal(T)] != 0):
        fail("some weights on future tokens (above the diagonal) are not 0: the causal mask is missing or "
             "inverted (in the course, True = blocked)")
    if np.any(weights[..., np.arange(T), np.arange(T)] == 0):
        fail("the diagonal is blocked: a token may attend to itself; only the keys after it are the future")
    x_later = x.copy()
    x_later[:, -1] += 1.0  # change only the last token
    out_later = call(causal_self_attention, "causal_self_attention", x_later, W_Q, W_K, W_V, W_O, n_heads, n_kv)[0]
    if not close(np.asarray(out_later)[:, :-1], np.asarray(out)[:, :-1], 1e-10):
        fail("changing the last token changed the outputs of earlier tokens: they must not see the future. Is the "
             "causal mask passed to the attention?")
    n_rep = n_heads // n_kv
    W_K_full, W_V_full = _expand(W_K, n_kv, n_rep), _expand(W_V, n_kv, n_rep)
    expected, _ = call(multi_head_attention, "multi_head_attention", x, W_Q, W_K_full, W_V_full, W_O, n_heads,
                       mask=_causal(T))
    if not close(out, expected, 1e-8):
        fail("out differs from causal multi-head attention with each KV head's weights copied to its query heads")
    one = call(causal_self_attention, "causal_self_attention", x[0], W_Q, W_K, W_V, W_O, n_heads, n_kv)[0]
    if not close(one, expected[0], 1e-8):
        fail("on one sequence (T, d_model), without a batch axis, out differs from the first example of the batch: "
             "count the axes from the end (T is x.shape[-2])")
    ok("causal_self_attention: no weight on the future, earlier rows blind to later tokens, equal to causal GQA, "
       "batched and unbatched")


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
            call(kv_cache_append, "kv_cache_append", cache_k, cache_v, k, v)
        except ValueError as exc:
            fail(f"kv_cache_append raised ValueError ({exc}) for a cache {cache_k.shape} and a new key {k.shape}: "
                 "they only differ along the time axis, axis -2; concatenate there")
        if not isinstance(result, tuple) or len(result) != 2:
            fail("kv_cache_append must return a pair: (cache_k, cache_v)")
        new_k, new_v = result
        want = (*lead, n_kv, T_past + 1, d_head)
        if np.shape(new_k) != want:
            hint = {(*lead, 2 * n_kv, 1, d_head): "it grew along the KV-head axis",
                    (*lead, n_kv, 1, 2 * d_head): "it grew along d_head, the last axis",
                    (2 * B, n_kv, 1, d_head): "it grew along the batch axis"}.get(np.shape(new_k), "")
            fail(f"after appending 1 token to a cache {cache_k.shape} the cache should be {want}, got "
                 f"{np.shape(new_k)}" + (f": {hint}" if hint else "") + ". The time axis of "
                 "(..., n_kv_heads, T, d_head) is axis=-2")
        if not (np.array_equal(new_k[..., :T_past, :], cache_k) and np.array_equal(new_k[..., T_past:, :], k)
                and np.array_equal(new_v[..., :T_past, :], cache_v) and np.array_equal(new_v[..., T_past:, :], v)):
            fail("the longer cache should hold the old entries first and the new token last, keys in cache_k and "
                 "values in cache_v")
        if any(not np.array_equal(a, b) for a, b in zip((cache_k, cache_v, k, v), copies)):
            fail("kv_cache_append changed one of its inputs; return new arrays")
    ok("kv_cache_append: the cache grows along time (axis -2), batched and unbatched")


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
            fail("decode_step must return three things: (out_t, cache_k, cache_v)")
        out_t, new_k, new_v = result
        if np.shape(new_k) != (B, n_kv, 4, d_head) or np.shape(new_v) != (B, n_kv, 4, d_head):
            fail(f"after one step from a cache of 3 tokens the caches should be (B, n_kv_heads, 4, d_head) = "
                 f"{(B, n_kv, 4, d_head)}, got {np.shape(new_k)} and {np.shape(new_v)}")
        if not (close(new_k, heads_of(x @ W_K)) and close(new_v, heads_of(x @ W_V))):
            fail("the returned caches should end with the newest token's key x_t @ W_K and value x_t @ W_V, split "
                 f"into n_kv_heads heads ({d_kv} columns of W_K, d_head={d_head} per head)")
        if np.shape(out_t) != (B, 1, n_heads * d_head):
            fail(f"out_t should be (B, 1, d_model) = {(B, 1, n_heads * d_head)}, got {np.shape(out_t)}")
        full, _ = call(multi_head_attention, "multi_head_attention", x, W_Q, W_K_full, W_V_full, W_O, n_heads,
                       mask=_causal(T))
        if not close(out_t, full[:, 3:], 1e-8):
            fail("out_t is not row 3 of causal attention over the 4 tokens: append the new key and value to the "
                 "cache *before* attending (the token attends to itself too), then attend with its query to the "
                 "whole cache, its KV heads repeated with repeat_kv")
    ok("decode_step: equals the last row of full causal attention and returns caches one token longer")


def check_decode_with_kv_cache(decode_with_kv_cache, multi_head_attention, decode_step=None, kv_cache_append=None,
                               repeat_kv=None):
    """Decoding token by token equals full causal attention; the caches end (B, n_kv_heads, T, d_head)."""
    rng = np.random.default_rng(64)
    B, T, n_heads, n_kv, d_head = 2, 5, 4, 2, 3
    x, W_Q, W_K, W_V, W_O = _gqa_layer(rng, B, T, n_heads, n_kv, d_head)
    helpers = {}
    if decode_step is not None:
        helpers["decode_step"] = lambda: check_decode_step(decode_step, multi_head_attention, kv_cache_append,
                                                           repeat_kv)
    broken = _helpers_not_ready(**helpers)
    result = _call_unless_broken(decode_with_kv_cache, "decode_with_kv_cache", broken, x, W_Q, W_K, W_V, W_O,
                                 n_heads, n_kv)
    if broken:
        _skip("decode_with_kv_cache", broken)
        return
    if not isinstance(result, tuple) or len(result) != 3:
        fail("decode_with_kv_cache must return three things: (out, cache_k, cache_v)")
    out, cache_k, cache_v = result
    if np.shape(cache_k) != (B, n_kv, T, d_head):
        fail(f"after {T} tokens the cache should be (B, n_kv_heads, T, d_head) = {(B, n_kv, T, d_head)}, got "
             f"{np.shape(cache_k)}; start from np.zeros((B, n_kv_heads, 0, d_head))")
    if np.shape(out) != (B, T, n_heads * d_head):
        fail(f"out should be (B, T, d_model) = {(B, T, n_heads * d_head)}, got {np.shape(out)}: join the step "
             "outputs along time, axis -2")
    n_rep = n_heads // n_kv
    full, _ = call(multi_head_attention, "multi_head_attention", x, W_Q, _expand(W_K, n_kv, n_rep),
                   _expand(W_V, n_kv, n_rep), W_O, n_heads, mask=_causal(T))
    if not close(out, full, 1e-8):
        rows = [t for t in range(T) if not close(out[:, t], full[:, t], 1e-8)]
        fail(f"rows {rows} differ from full causal attention; feed token t as x[..., t:t+1, :] and keep the caches "
             "that decode_step returns for the next step")
    result32 = call(decode_with_kv_cache, "decode_with_kv_cache", *(a.astype(np.float32) for a in
                                                                     (x, W_Q, W_K, W_V, W_O)), n_heads, n_kv)
    dtypes = [getattr(r, "dtype", None) for r in result32]
    if any(d != np.float32 for d in dtypes):
        fail(f"float32 input gave out, cache_k, cache_v of dtypes {[str(d) for d in dtypes]}: everything must stay "
             "float32; an array made without dtype= (np.zeros(shape)) is float64 and promotes what joins it")
    ok("decode_with_kv_cache: token-by-token decoding equals full causal attention, row for row; float32 stays "
       "float32")


def _tiled_difference(tiled_attention, scaled_dot_product_attention, Q, K, V, block):
    """What is wrong with tiled attention's out on (Q, K, V, block) (non-causal), as a message; None if right."""
    plain, _ = call(scaled_dot_product_attention, "scaled_dot_product_attention", Q, K, V)
    out = np.asarray(call(tiled_attention, "tiled_attention", Q, K, V, block))
    if out.shape != plain.shape:
        return (f"tiled_attention should return out of shape (..., T_q, d_v) = {plain.shape}, got {out.shape} "
                "(only out: the weights are never formed)")
    if close(out, plain, 1e-10):
        return None
    where = f"block_size={block}, T_k={K.shape[-2]}"
    bad = ~np.isfinite(out).all(axis=-1)  # (..., T_q): rows with NaN or inf
    if bad.any():
        row_max = (Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])).max(axis=-1)[bad]  # largest score per bad row
        return (f"{where}: {int(bad.sum())} rows of out are NaN or inf; the largest score of those rows is "
                f"{row_max.min():.0f} to {row_max.max():.0f}. exp(score - m) over- or underflows there in every "
                "term: is m, from the first block on, the largest score the row has seen (it starts at -inf, not "
                "at 0)?")
    d_k = Q.shape[-1]
    unscaled, _ = scaled_dot_product_attention(Q * math.sqrt(d_k), K, V)  # scores Q K^T, not divided
    if close(out, unscaled, 1e-8):
        return f"{where}: out equals attention without the 1/sqrt(d_k) scale: divide the block scores by sqrt(d_k)"
    cut = (K.shape[-2] // block) * block  # the keys in whole blocks
    if 0 < cut < K.shape[-2]:
        whole, _ = scaled_dot_product_attention(Q, K[..., :cut, :], V[..., :cut, :])
        if close(out, whole, 1e-8):
            return (f"{where}: out equals attention over the first {cut} keys only: the last, shorter block "
                    f"(keys {cut}..{K.shape[-2] - 1}) is left out")
    return (f"{where}: out differs from plain attention by up to {np.max(np.abs(out - plain)):.2g}, though the "
            "scale and the last block are right. Inspect how the running sum and output are carried from block to "
            "block: everything summed so far was measured against the old running max")


def check_tiled_attention(tiled_attention, scaled_dot_product_attention):
    """Equal to plain attention within 1e-10 for block sizes 1, 3, 4 and 64, with and without the causal mask,
    also for rows of scores far from 0; float32 stays float32."""
    rng = np.random.default_rng(65)
    Q = rng.normal(size=(2, 7, 4)) * 3  # (B, T_q, d_k); large scores so the running max really moves
    K = rng.normal(size=(2, 10, 4)) * 3  # (B, T_k, d_k)
    V = rng.normal(size=(2, 10, 5))  # (B, T_k, d_v)
    Ks, Vs = K[:, :7], V[:, :7]
    plain_causal, _ = call(scaled_dot_product_attention, "scaled_dot_product_attention", Q, Ks, Vs, mask=_causal(7))
    for block in (4, 3, 1, 64):
        why = _tiled_difference(tiled_attention, scaled_dot_product_attention, Q, K, V, block)
        if why:
            fail(why)
        out_c = call(tiled_attention, "tiled_attention", Q, Ks, Vs, block, causal=True)
        if not close(out_c, plain_causal, 1e-10):
            fail(f"block_size={block}, causal=True: out differs from causal attention; block key j for query i "
                 "when j > i (positions counted from the start of the whole sequence, not of the block)")
    Q_far, K_far = Q.copy(), K.copy()
    K_far[..., 0] = 1.0  # every key has feature 0 = 1, so query feature 0 shifts the whole row of scores
    Q_far[:, :3, 0] = [-3000.0, -300.0, 3000.0]  # rows of scores near -1500, -150 and +1500
    why = _tiled_difference(tiled_attention, scaled_dot_product_attention, Q_far, K_far, V, 3)
    if why:
        fail("on rows of scores far from 0 (near -1500, -150, +1500), " + why)
    out32 = call(tiled_attention, "tiled_attention", *(a.astype(np.float32) for a in (Q, K, V)), 4)
    if getattr(out32, "dtype", None) != np.float32:
        fail(f"float32 input gave {getattr(out32, 'dtype', type(out32))} output: create the running max, sum and "
             "output with the input's dtype (np.zeros and np.full make float64 unless told)")
    ok("tiled_attention: equal to plain attention within 1e-10 for block sizes 1, 3, 4, 64, causal or not, rows far "
       "from 0 included; float32 stays float32")


def check_tiled_memory(tiled_attention, T=1024, block_size=32):
    """The peak allocation (tracemalloc) stays far below one (T, T) float64 matrix."""
    rng = np.random.default_rng(66)
    Q, K, V = rng.normal(size=(3, T, 8))  # each (T, d_k = 8)
    peak = peak_bytes(tiled_attention, "tiled_attention", Q, K, V, block_size)
    full = 8 * T * T
    if peak > full / 4:
        fail(f"tiled_attention allocated {peak / 2**20:.2f} MB at its peak for T = {T}; one (T, T) float64 matrix "
             f"is {full / 2**20:.2f} MB. Work on (T_q, block_size) blocks of scores and never build the full matrix")
    ok(f"tiled_attention: peak {peak / 2**20:.2f} MB for T = {T}, one (T, T) matrix would be {full / 2**20:.2f} MB")


def _cross_layer(rng, B, T_q, T_k, n_heads, d_head):
    d_model = n_heads * d_head
    x_q = rng.normal(size=(B, T_q, d_model))  # (B, T_q, d_model): the queries' sequence
    x_kv = rng.normal(size=(B, T_k, d_model))  # (B, T_k, d_model): the keys' and values' sequence
    Ws = tuple(rng.normal(size=(4, d_model, d_model)) / math.sqrt(d_model))  # W_Q, W_K, W_V, W_O
    return x_q, x_kv, Ws


def _cross_result(cross_attention, x_q, x_kv, Ws, n_heads, **kwargs):
    try:
        result = call(cross_attention, "cross_attention", x_q, x_kv, *Ws, n_heads, **kwargs)
    except ValueError as exc:
        if "mask" not in kwargs:
            raise
        fail(f"with a padding mask of shape (B, 1, T_k) = {kwargs['mask'].shape}, x_q {x_q.shape} and x_kv "
             f"{x_kv.shape}, cross_attention raised ValueError ({exc}). The mask has a query axis and a key axis and "
             "no head axis: give it a head axis of size 1 in front of its last two, so it lines up with the weights "
             "(B, n_heads, T_q, T_k) and blocks keys, never queries")
    if not isinstance(result, tuple) or len(result) != 2:
        fail("cross_attention must return a pair: (out, weights)")
    return np.asarray(result[0]), np.asarray(result[1])


def check_cross_attention(cross_attention, multi_head_attention):
    """Shapes with T_q != T_k; equal to multi-head attention over both sequences joined, with the queries' own
    tokens blocked as keys; a padding mask (B, 1, T_k) gives padded keys weight 0 and changes nothing else; a
    sequence that is all padding gives all-zero weights; unbatched; float32 kept; inputs untouched."""
    rng = np.random.default_rng(67)
    B, T_q, T_k, n_heads, d_head = 2, 3, 5, 4, 2
    x_q, x_kv, Ws = _cross_layer(rng, B, T_q, T_k, n_heads, d_head)
    copies = [a.copy() for a in (x_q, x_kv, *Ws)]
    out, weights = _cross_result(cross_attention, x_q, x_kv, Ws, n_heads)
    if weights.shape == (B, n_heads, T_q, T_q):
        fail(f"the weights are (B, n_heads, T_q, T_q) = {weights.shape}: there is one column per *query*, so the "
             "keys were projected from x_q. Queries come from x_q; keys and values come from x_kv")
    if weights.shape != (B, n_heads, T_q, T_k) or out.shape != (B, T_q, n_heads * d_head):
        fail(f"with x_q {x_q.shape} and x_kv {x_kv.shape} expected out (B, T_q, d_model) = "
             f"{(B, T_q, n_heads * d_head)} and weights (B, n_heads, T_q, T_k) = {(B, n_heads, T_q, T_k)}, got "
             f"{out.shape} and {weights.shape}")
    if any(not np.array_equal(a, b) for a, b in zip((x_q, x_kv, *Ws), copies)):
        fail("cross_attention changed one of its inputs; work on new arrays")
    # the same numbers from self-attention over x_q and x_kv side by side, the queries' own tokens blocked as keys
    joined = np.concatenate([x_q, x_kv], axis=1)  # (B, T_q + T_k, d_model)
    no_own = np.arange(T_q + T_k)[None, :] < T_q  # (1, T_q + T_k): True = the queries' tokens, blocked as keys
    expected, _ = call(multi_head_attention, "multi_head_attention", joined, *Ws, n_heads, mask=no_own)
    if not close(out, expected[:, :T_q], 1e-8):
        fail("out differs from multi-head attention over x_q and x_kv joined with x_q's tokens blocked as keys, "
             "which attends exactly as cross-attention does: projections W_Q on x_q, W_K and W_V on x_kv, the "
             "per-head scale sqrt(d_head), then the heads joined and W_O")
    # padding: 2 extra keys of any value, blocked, change nothing; the padded keys get weight exactly 0
    lengths = np.array([T_k, 3])  # sequence 1 has only 3 real keys
    padded_kv = np.concatenate([x_kv, 50 * rng.normal(size=(B, 2, x_kv.shape[-1]))], axis=1)  # (B, T_k + 2, d_model)
    pad = np.arange(T_k + 2)[None, None, :] >= lengths[:, None, None]  # (B, 1, T_k + 2): True = padding
    out_p, w_p = _cross_result(cross_attention, x_q, padded_kv, Ws, n_heads, mask=pad)
    if w_p.shape != (B, n_heads, T_q, T_k + 2):
        fail(f"with a padding mask of shape (B, 1, T_k) = {pad.shape} the weights should be (B, n_heads, T_q, T_k) = "
             f"{(B, n_heads, T_q, T_k + 2)}, got {w_p.shape}. The mask has no head axis: it applies to every "
             "head, so it needs one more axis, of size 1, in front of its last two (query, key) axes")
    blocked = np.broadcast_to(pad[:, None], w_p.shape)  # (B, n_heads, T_q, T_k + 2)
    if np.any(np.isnan(w_p)) or np.any(w_p[blocked] != 0):
        fail("with a padding mask (B, 1, T_k), some weights on padded keys are not 0: a padding mask blocks keys, "
             "the last axis of the weights (True = blocked)")
    short = call(cross_attention, "cross_attention", x_q[1:], x_kv[1:, :3], *Ws, n_heads)[0]  # the real keys only
    if not (close(out_p[:1], out[:1], 1e-8) and close(out_p[1:], short, 1e-8)):
        fail("padding changed the result: attention over real keys plus blocked padding must equal attention over "
             "the real keys alone. Rows of the weights over the open keys must still sum to 1")
    # a sequence that is all padding: every key of its queries blocked
    empty = np.arange(T_k)[None, None, :] >= np.array([T_k, 0])[:, None, None]  # (B, 1, T_k): sequence 1 empty
    with np.errstate(all="ignore"):
        out_e, w_e = _cross_result(cross_attention, x_q, x_kv, Ws, n_heads, mask=empty)
    if np.isnan(w_e).any() or np.isnan(out_e).any():
        fail("a query whose keys are all blocked gives NaN: with -inf at every score of the row, the softmax "
             "computes exp(-inf - (-inf)) = NaN. The contract is all-zero weights for such a row (not NaN, not "
             "uniform), which your lesson-01 softmax gives: shift by 0 where the row maximum is -inf, and divide "
             "only where the sum is positive")
    if np.any(w_e[1] != 0):
        uniform = np.allclose(w_e[1], 1 / T_k)
        fail("a query whose keys are all blocked gets weights " + ("1/T_k on every key (uniform): a large negative "
             "number such as -1e9 in place of -inf gives every blocked score the same value, so softmax spreads "
             "the row evenly over keys it may not see" if uniform else "that are not all 0")
             + ". The contract: all-zero weights, so a zero output row")
    if not close(out_e[1], np.zeros_like(out_e[1]), 1e-12) or not close(out_e[0], out[0], 1e-8):
        fail("with all-zero weights the output rows of the empty sequence must be 0, and the other sequence's "
             "rows unchanged")
    one = _cross_result(cross_attention, x_q[0], x_kv[0], Ws, n_heads)[0]
    if not close(one, out[0], 1e-8):
        fail("on one pair of sequences (T_q, d_model) and (T_k, d_model), without a batch axis, out differs from "
             "the first example of the batch: count the axes from the end")
    out32, w32 = call(cross_attention, "cross_attention", *(a.astype(np.float32) for a in (x_q, x_kv, *Ws)),
                      n_heads)
    dtypes = [getattr(a, "dtype", None) for a in (out32, w32)]
    if any(d != np.float32 for d in dtypes):
        fail(f"float32 input gave out and weights of dtypes {[str(d) for d in dtypes]}: scale by a Python float "
             "(math.sqrt), and create any array with the input's dtype")
    ok("cross_attention: T_q queries over T_k keys, padded keys ignored, an all-padding sequence gives zero "
       "weights, batched and unbatched, float32 kept")


# this lesson's functions, each with the checks that take it alone: a check of a function that calls one of
# them names it when it is the one that is wrong (selfcheck_common.own)
own("repeat_kv", check_repeat_kv)
own("causal_mask", check_causal_masks)
own("kv_cache_append", check_kv_cache_append)
