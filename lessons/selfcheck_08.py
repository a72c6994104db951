# Built from solutions/selfcheck_08.py by `make lessons`; edit that file, not this one.
"""Self-checks of lesson 08: RoPE, ALiBi, sliding windows with attention sinks, multi-head latent attention.

The checks test properties a right answer has (a rotation keeps lengths, position 0 changes nothing, a window
leaves exactly `window` keys open, the absorbed form equals the plain one) and a few values the papers state (the
ALiBi slopes of 8 heads); they hold no solution. The shared part is in ``selfcheck_common.py``.
"""

from __future__ import annotations

import math

import numpy as np

from selfcheck_common import call, close, fail, ok, own, peak_bytes

__all__ = ["check_rope", "check_alibi_bias", "check_sliding_window_mask", "check_streaming_decode",
           "check_mla_attention", "check_mla_absorbed", "check_mla_absorbed_memory", "check_kv_cache_elements"]


def _unit(d_head, column):
    e = np.zeros((1, d_head))  # (T, d_head) with T = 1
    e[0, column] = 1.0
    return e


def check_rope(rope):
    """Position 0 is the identity; lengths per pair kept; pairs, direction and frequencies; both layouts."""
    d_head = 8
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5, d_head))  # (n_heads, T, d_head)
    copy = x.copy()
    positions = np.array([0, 1, 2, 7, 30])
    for interleaved in (True, False):
        layout = "interleaved" if interleaved else "split-half"
        out = call(rope, "rope", x, positions, interleaved=interleaved)
        if not np.array_equal(x, copy):
            fail("rope changed x in place; build a new array")
        if np.shape(out) != x.shape:
            fail(f"rope returned shape {np.shape(out)} for x of shape {x.shape}; the shape must not change")
        out = np.asarray(out, float)
        if not close(out[:, 0], x[:, 0]):
            fail(f"({layout}) the row at position 0 changed: a rotation by 0 * theta is no rotation. Are the "
                 "positions used as given, counted from 0?")
        a, b = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :4], x[..., 4:])
        c, d = (out[..., 0::2], out[..., 1::2]) if interleaved else (out[..., :4], out[..., 4:])
        if not np.allclose(a ** 2 + b ** 2, c ** 2 + d ** 2):
            fail(f"({layout}) the length of a column pair changed: either the wrong columns are paired (pair i is "
                 f"{'columns 2i and 2i+1' if interleaved else 'columns i and i + d_head/2'}) or the rotation's "
                 "formula is not a rotation")
    turned = np.asarray(call(rope, "rope", _unit(d_head, 0), np.array([1])), float)[0]
    if abs(turned[1]) < 1e-9 and abs(turned[d_head // 2]) > 1e-9:
        fail("with interleaved=True, column 0 turned into column d_head/2: that is the split-half layout; "
             "interleaved pairs are columns 2i and 2i + 1")
    if not close(turned[:2], [math.cos(1), math.sin(1)]):
        if close(turned[:2], [math.cos(1), -math.sin(1)]):
            fail("column pair 0 turned clockwise: the paper's rotation of (a, b) by phi is "
                 "(a cos phi - b sin phi, a sin phi + b cos phi)")
        fail(f"(1, 0) in pair 0 at position 1 should turn by 1 radian to (cos 1, sin 1) = (0.540, 0.841), got "
             f"{np.round(turned[:2], 3).tolist()}")
    half = np.asarray(call(rope, "rope", _unit(d_head, 0), np.array([1]), interleaved=False), float)[0]
    if close(half[[0, d_head // 2]], [math.cos(1), -math.sin(1)]):
        fail("with interleaved=False, column pair 0 (columns 0 and d_head/2) turned clockwise: the rotation of "
             "(a, b) by phi is (a cos phi - b sin phi, a sin phi + b cos phi), in both layouts")
    if not close(half[[0, d_head // 2]], [math.cos(1), math.sin(1)]):
        fail("with interleaved=False, column 0 should pair with column d_head/2 (rotate_half): (1, 0) at position "
             f"1 should become cos 1 in column 0 and sin 1 in column {d_head // 2}")
    last = np.asarray(call(rope, "rope", _unit(d_head, d_head - 2), np.array([1000]), base=100.0), float)[0]
    angle = math.atan2(last[-1], last[-2])
    expected = 1000 * 100.0 ** (-(d_head - 2) / d_head) % (2 * math.pi)
    if abs((angle - expected + math.pi) % (2 * math.pi) - math.pi) > 1e-6:
        fail(f"the last pair turned by the wrong angle (base 100, position 1000, d_head {d_head}): pair i turns by "
             "position * base^(-2i/d_head), with i the pair's index (so the exponent uses 2i, the index of its first "
             "column)")
    x32 = x.astype(np.float32)
    out32 = call(rope, "rope", x32, positions)
    if getattr(out32, "dtype", None) != np.float32:
        fail(f"float32 input came back as {getattr(out32, 'dtype', type(out32))}: cast the cosines and sines to "
             "x.dtype")
    far, turn = np.array([500_001]), 500_001 * 10000.0 ** (-2 / d_head)  # a long context; pair 1's angle there
    got = np.asarray(call(rope, "rope", _unit(d_head, 2).astype(np.float32), far), float)[0]
    if not close(got[2:4], [math.cos(turn), math.sin(turn)], tol=1e-5):
        fail("at position 500,001, float32 input turned by the wrong angle: float32 keeps about 7 significant "
             "digits, so an angle of 50,000 radians computed in float32 is off by thousandths of a radian. Compute "
             "the angles (positions times frequencies) in float64, then cast the cosines and sines to x.dtype")
    ok("rope: position 0 unchanged, pairs keep their length, both layouts pair the right columns, the turn's "
       "direction and frequencies, float32 kept, angles in float64")


def check_alibi_bias(alibi_bias):
    """Shape, zero diagonal, negative off it, the slopes of 8 and of 12 heads."""
    bias = call(alibi_bias, "alibi_bias", 8, 5)
    if np.shape(bias) != (8, 5, 5):
        fail(f"alibi_bias(8, 5) should have shape (n_heads, T, T) = (8, 5, 5), got {np.shape(bias)}")
    bias = np.asarray(bias, float)
    if np.any(np.diagonal(bias, axis1=1, axis2=2) != 0):
        fail("a key at distance 0 (the diagonal) should get bias 0")
    if np.any(bias[:, 1, 0] > 0):
        fail("the bias one token back is positive: ALiBi *penalises* distance, -m_h |i - j|")
    slopes = -bias[:, 1, 0]
    expected = [2.0 ** (-(h + 1)) for h in range(8)]  # the paper: 1/2, 1/4, ..., 1/256 for 8 heads
    if not close(slopes, expected):
        if close(slopes, expected[::-1]):
            fail("the slopes are in reverse order: head 0 gets the largest slope, 2^(-8/n)")
        if close(slopes, [2.0 ** -h for h in range(8)]):
            fail("the slopes start at 1: the paper's sequence starts at 2^(-8/n) (1/2 for 8 heads), not at 2^0")
        fail(f"with 8 heads the slopes should be 1/2, 1/4, ..., 1/256, got {np.round(slopes, 5).tolist()}")
    if not np.allclose(-bias[:, 4, 1], 3 * slopes) or not np.allclose(bias, np.swapaxes(bias, 1, 2)):
        fail("the bias should be -slope * |i - j|: 3 tokens away, three times the slope, and the same either way")
    twelve = -np.asarray(call(alibi_bias, "alibi_bias", 12, 2), float)[:, 1, 0]
    if not close(twelve[:8], expected) or not close(twelve[8:], [2.0 ** (-(2 * k + 1) / 2) for k in range(4)]):
        fail("with 12 heads (not a power of 2) the slopes should be the 8 slopes of 8 heads, then the 1st, 3rd, 5th "
             f"and 7th slopes of 16 heads; got {np.round(twelve, 4).tolist()}")
    ok("alibi_bias: shape, zero diagonal, penalties grow with distance, slopes of 8 and of 12 heads")


def check_sliding_window_mask(sliding_window_mask):
    """Boolean (T, T), True blocked, causal, exactly min(window, i + 1) keys open for query i."""
    T, window = 7, 3
    mask = call(sliding_window_mask, "sliding_window_mask", T, window)
    if np.shape(mask) != (T, T) or getattr(mask, "dtype", None) != bool:
        fail(f"sliding_window_mask({T}, {window}) should be a ({T}, {T}) boolean array, got shape {np.shape(mask)}, "
             f"dtype {getattr(mask, 'dtype', type(mask))}")
    if mask[T - 1, T - 1] or not mask[T - 1, 0]:
        fail("True marks a *blocked* pair: the last query must see itself (False) and not key 0 (True)")
    if np.any(~mask[np.triu_indices(T, k=1)]):
        fail("a query sees a key after it: the mask must stay causal")
    open_keys = (~mask).sum(axis=1)
    expected = np.minimum(window, np.arange(T) + 1)
    if not np.array_equal(open_keys, expected):
        fail(f"query i should see min(window, i + 1) keys (itself and the window - 1 before it): expected "
             f"{expected.tolist()} open keys per query, got {open_keys.tolist()}")
    ok("sliding_window_mask: boolean, True blocked, causal, window keys per query")


def _gqa_case(rng, lead, T, d_model, n_heads, n_kv_heads, dtype=np.float64):
    d_head = d_model // n_heads
    x = rng.normal(size=(*lead, T, d_model))
    Ws = [rng.normal(size=(d_model, d_model)) / math.sqrt(d_model),
          rng.normal(size=(d_model, n_kv_heads * d_head)) / math.sqrt(d_model),
          rng.normal(size=(d_model, n_kv_heads * d_head)) / math.sqrt(d_model),
          rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)]
    return x.astype(dtype), [W.astype(dtype) for W in Ws]


def _windowed_attention(x, Ws, n_heads, n_kv_heads, n_sink, window, decode_step):
    """Every output row recomputed from scratch: decode_step on a cache of exactly the keys the token may see."""
    T = x.shape[-2]
    d_head = x.shape[-1] // n_heads
    outs = []
    for t in range(T):
        seen = sorted(set(range(min(n_sink, t))) | set(range(max(0, t - window + 1), t)))
        empty = np.zeros((*x.shape[:-2], n_kv_heads, 0, d_head), dtype=x.dtype)
        ck, cv = empty, empty
        for s in seen:  # the cache of the tokens t may see, built by the given decode_step
            _, ck, cv = decode_step(x[..., s:s + 1, :], ck, cv, *Ws, n_heads, n_kv_heads)
        out_t, _, _ = decode_step(x[..., t:t + 1, :], ck, cv, *Ws, n_heads, n_kv_heads)
        outs.append(out_t)
    return np.concatenate(outs, axis=-2)


def check_streaming_decode(streaming_decode, decode_step):
    """Bounded caches, output equal to attention over sinks + window (batched, window 1), float32 kept."""
    rng = np.random.default_rng(4)
    for lead, T, n_sink, window in (((), 9, 2, 3), ((2,), 8, 1, 4), ((), 6, 0, 2), ((), 5, 3, 1), ((), 4, 2, 9)):
        x, Ws = _gqa_case(rng, lead, T, 8, 4, 2)
        got = call(streaming_decode, "streaming_decode", x, *Ws, 4, 2, n_sink, window)
        if not isinstance(got, tuple) or len(got) != 3:
            fail("streaming_decode should return a tuple (out, cache_k, cache_v)")
        out, ck, cv = got
        cached = min(T, n_sink + window)
        expected_cache = (*lead, 2, cached, 2)
        where = f"(T={T}, n_sink={n_sink}, window={window}{', batched' if lead else ''})"
        if np.shape(ck) != expected_cache or np.shape(cv) != expected_cache:
            fail(f"{where}: after the last step the caches should hold min(T, n_sink + window) = {cached} tokens, "
                 f"shape {expected_cache}; got {np.shape(ck)} and {np.shape(cv)}. Cut along the time axis, -2, "
                 "before each step")
        expected = _windowed_attention(x, Ws, 4, 2, n_sink, window, decode_step)
        if not close(out, expected, tol=1e-9):
            fail(f"{where}: the output differs from attention over the sinks and the last `window` tokens. Does "
                 "each cut keep the first n_sink and the last window - 1 tokens, and only when the cache is longer "
                 "than that?")
    x, Ws = _gqa_case(rng, (), 5, 8, 4, 2, np.float32)
    out = call(streaming_decode, "streaming_decode", x, *Ws, 4, 2, 1, 2)[0]
    if getattr(out, "dtype", None) != np.float32:
        fail("float32 input gave a result that is not float32: create the empty caches with x's dtype")
    ok("streaming_decode: bounded caches, output equals attention over the sinks and the window (batched, "
       "window 1), float32 kept")


def _mla_case(rng, lead, T, d_model, n_heads, d_head, d_c, d_rope, dtype=np.float64):
    shapes = [(d_model, d_c), (d_c, n_heads * d_head), (d_c, n_heads * d_head), (d_model, d_rope),
              (d_model, n_heads * d_head), (d_model, n_heads * d_rope), (n_heads * d_head, d_model)]
    Ws = [(rng.normal(size=s) / math.sqrt(s[0])).astype(dtype) for s in shapes]
    return rng.normal(size=(*lead, T, d_model)).astype(dtype), Ws


def _rotate(a, positions):
    """(..., T, d_rope) turned by RoPE from its definition: interleaved pairs as complex numbers, position t turned by
    t * 10000^(-2i/d_rope)."""
    z = a[..., 0::2] + 1j * a[..., 1::2]
    z = z * np.exp(1j * np.asarray(positions)[:, None] * 10000.0 ** (-np.arange(0, a.shape[-1], 2) / a.shape[-1]))
    out = np.empty_like(a)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


def _mla_by_loops(x, Ws, n_heads, mask, scale_width=None):
    """MLA one head and one batch element at a time, from the definitions."""
    W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O = Ws
    d_head, d_rope = W_UK.shape[1] // n_heads, W_KR.shape[1]
    T = x.shape[-2]
    flat = x.reshape(-1, T, x.shape[-1])  # (B, T, d_model): every leading axis in B
    outs, weights = [], []
    for xb in flat:
        c, k_r = xb @ W_DKV, _rotate(xb @ W_KR, np.arange(T))
        out, wb = np.zeros((T, W_O.shape[1])), []
        for h in range(n_heads):
            cols, rcols = slice(h * d_head, (h + 1) * d_head), slice(h * d_rope, (h + 1) * d_rope)
            s = (xb @ W_Q[:, cols]) @ (c @ W_UK[:, cols]).T + _rotate(xb @ W_QR[:, rcols], np.arange(T)) @ k_r.T
            s = s / math.sqrt(scale_width or d_head + d_rope)
            if mask is not None:
                s = np.where(mask, -np.inf, s)
            w = np.exp(s - s.max(axis=1, keepdims=True))
            w = w / w.sum(axis=1, keepdims=True)
            out += w @ (c @ W_UV[:, cols]) @ W_O[cols]
            wb.append(w)
        outs.append(out)
        weights.append(wb)
    return np.array(outs).reshape(*x.shape[:-1], -1), np.array(weights).reshape(*x.shape[:-2], n_heads, T, T)


def _mla_result(fn, name, args, out_shape, weights_shape, where):
    got = call(fn, name, *args)
    if not isinstance(got, tuple) or len(got) != 2:
        fail(f"{name} should return a tuple (out, weights)")
    out, weights = got
    if np.shape(out) != out_shape or np.shape(weights) != weights_shape:
        fail(f"{name}{where}: out should be {out_shape} and weights {weights_shape}, got {np.shape(out)} and "
             f"{np.shape(weights)}")
    return out, weights


def _check_mla(fn, name, T_q=None):
    """Against MLA head by head. ``mla_attention`` gets the tokens; ``mla_absorbed`` gets the cache of the tokens
    and their last ``T_q`` (all T when None), and must give the last T_q rows."""
    rng = np.random.default_rng(6)
    for lead, masked in (((), False), ((2,), True)):
        # d_c != d_head + d_rope: a scale by either differs; d_rope = 4, two pairs, where RoPE's two layouts differ
        T, n_heads, d_head, d_c, d_rope = 5, 3, 4, 9, 4
        x, Ws = _mla_case(rng, lead, T, 7, n_heads, d_head, d_c, d_rope)
        mask = np.triu(np.ones((T, T), dtype=bool), k=1) if masked else None
        rows = slice(T - (T_q or T), T)  # the queries' rows
        where = " (batched, causal)" if masked else ""
        if T_q is None:
            args = (x, *Ws, n_heads, mask)
        else:
            W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O = Ws
            where += f" (the last {T_q} of {T} tokens)" if T_q < T else ""
            cache = (x @ W_DKV, _rotate(x @ W_KR, np.arange(T)))  # (..., T, d_c), (..., T, d_rope)
            args = (x[..., rows, :], *cache, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, None if mask is None else mask[rows])
        n_q = rows.stop - rows.start
        out, weights = _mla_result(fn, name, args, (*lead, n_q, 7), (*lead, n_heads, n_q, T), where)
        expected_out, expected_w = (a[..., rows, :] for a in _mla_by_loops(x, Ws, n_heads, mask))
        if not close(weights, expected_w, tol=1e-9):
            def scaled_by(width):
                return close(weights, _mla_by_loops(x, Ws, n_heads, mask, scale_width=width)[1][..., rows, :], tol=1e-9)
            if scaled_by(d_head):
                fail(f"{name}{where}: the scores are divided by sqrt(d_head); each head's query and key have "
                     "d_head + d_rope columns (content and rotary parts), so divide by sqrt(d_head + d_rope)")
            if scaled_by(d_c):
                fail(f"{name}{where}: the scores are divided by sqrt(d_c), the latent's width. Absorbing W_UK only "
                     "regroups the same products: each score is still a dot product of d_head + d_rope numbers")
            if T_q is not None and T_q < T:
                fail(f"{name}{where}: the weights differ from MLA's last rows. The queries are the newest tokens, at "
                     f"positions T - T_q ... T - 1 ({T - T_q} ... {T - 1} here), not from 0: rotate them there")
            fail(f"{name}{where}: the weights differ from MLA's. Check the rotary parts (the key part is rotated, "
                 "once, and shared by all heads; only the rotary parts are rotated, in rope's default interleaved "
                 "layout: pairs of columns 2i and 2i + 1) and which columns of W_UK and W_Q belong to each head")
        if not close(out, expected_out, tol=1e-9):
            fail(f"{name}{where}: the weights are right but the output is not: check the values (the latent times "
                 "head h's columns of W_UV) and W_O (head h's rows)")
    x, Ws = _mla_case(rng, (2,), 4, 7, 3, 4, 9, 4, np.float32)
    if T_q is None:
        args = (x, *Ws, 3)
    else:
        W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O = Ws
        args = (x, x @ W_DKV, _rotate(x @ W_KR, np.arange(4)).astype(np.float32), W_UK, W_UV, W_Q, W_QR, W_O, 3)
    got = call(fn, name, *args)
    if any(getattr(a, "dtype", None) != np.float32 for a in got):
        fail(f"{name}: float32 input gave a result that is not float32")


def check_mla_attention(mla_attention):
    _check_mla(mla_attention, "mla_attention")
    ok("mla_attention: equals MLA computed head by head from its definition (batched, causal), float32 kept")


def check_mla_absorbed(mla_absorbed):
    for T_q in (None, 1, 2):
        _check_mla(mla_absorbed, "mla_absorbed", T_q=T_q or 5)
    ok("mla_absorbed: from the cache, equals the last rows of MLA computed head by head from its definition (the "
       "whole sequence, one decoding step, two newest tokens; batched, causal), float32 kept")


def check_mla_absorbed_memory(mla_absorbed, T=4096):
    """One decoding step over a cache of T tokens: the peak allocation (tracemalloc) stays far below one head's keys
    of the cached tokens."""
    rng = np.random.default_rng(88)
    n_heads, d_head, d_c, d_rope, d_model = 2, 256, 4, 2, 6
    x, Ws = _mla_case(rng, (), 1, d_model, n_heads, d_head, d_c, d_rope)
    W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O = Ws
    c_kv, k_r = rng.normal(size=(T, d_c)), rng.normal(size=(T, d_rope))  # the cache
    peak = peak_bytes(mla_absorbed, "mla_absorbed", x, c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads)
    one_head = 8 * T * d_head
    if peak > one_head / 4:
        fail(f"mla_absorbed allocated {peak / 2**20:.2f} MB at its peak for one token over a cache of {T}; one head's "
             f"keys of the cached tokens are {one_head / 2**20:.2f} MB. Fold W_UK into the query and W_UV into W_O, "
             "and never multiply the cached latents by W_UK or W_UV")
    ok(f"mla_absorbed: peak {peak / 2**20:.2f} MB for one token over a cache of {T}; one head's keys of the cached "
       f"tokens would be {one_head / 2**20:.2f} MB")


def check_kv_cache_elements(kv_cache_elements_per_token):
    """Each kind on a small config; DeepSeek-V2 caches as much as GQA with 2.25 groups."""
    base = {"n_layers": 3, "n_heads": 6, "d_head": 5, "n_kv_heads": 2, "d_c": 7, "d_rope": 4}
    expected = {"MHA": 2 * 6 * 5 * 3, "GQA": 2 * 2 * 5 * 3, "MQA": 2 * 5 * 3, "MLA": (7 + 4) * 3}
    hints = {"MHA": "a key and a value per head, per layer", "GQA": "a key and a value per KV head (n_kv_heads)",
             "MQA": "one key and one value per layer, shared by every head",
             "MLA": "one latent (d_c) and one rotary key (d_rope) per layer, shared by every head, for keys and values"}
    for kind, want in expected.items():
        got = call(kv_cache_elements_per_token, "kv_cache_elements_per_token", dict(base, attention=kind))
        if type(got) is not int:
            fail(f"kv_cache_elements_per_token should return an int, got {type(got).__name__}")
        if got != want:
            fail(f"{kind} with n_layers=3, n_heads=6, d_head=5, n_kv_heads=2, d_c=7, d_rope=4: expected {want}, got "
                 f"{got}. Count {hints[kind]}, times the layers")
    v2 = {"attention": "MLA", "n_layers": 60, "n_heads": 128, "d_head": 128, "d_c": 512, "d_rope": 64}
    groups = kv_cache_elements_per_token(v2) / (2 * 128 * 60)
    if groups != 2.25:
        fail(f"DeepSeek-V2 (d_c = 512, d_rope = 64, d_head = 128) should cache as much as GQA with 2.25 groups; your "
             f"count says {groups:g}")
    ok("kv_cache_elements_per_token: MHA, GQA, MQA and MLA counted; DeepSeek-V2 equals GQA with 2.25 groups")


# this lesson's functions, each with the checks that take it alone: a check of a function that calls one of
# them names it when it is the one that is wrong (selfcheck_common.own)
own("rope", check_rope)
own("alibi_bias", check_alibi_bias)
own("sliding_window_mask", check_sliding_window_mask)
