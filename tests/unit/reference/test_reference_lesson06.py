"""Lesson 06's reference functions against independent computations and the properties they must have:
GQA as a per-head loop, KV-cache decoding equal to full causal attention, the four mask conventions, and tiled
attention equal to plain attention within 1e-10 without a (T, T) array."""

import itertools
import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import independent
from autograder import reference as ref

settings.register_profile("course", max_examples=60, deadline=None)
settings.load_profile("course")


@st.composite
def gqa_layer(draw, batched=None, dtype=None):
    """Random GQA inputs: n_kv_heads, n_rep, d_head, T, B drawn independently (n_heads = n_kv_heads * n_rep)."""
    n_kv = draw(st.integers(1, 3))
    n_rep = draw(st.integers(1, 3))
    d_head = draw(st.integers(1, 5))
    T = draw(st.integers(1, 7))
    B = draw(st.integers(1, 3))
    batched = draw(st.booleans()) if batched is None else batched
    dtype = draw(st.sampled_from([np.float32, np.float64])) if dtype is None else dtype
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_heads = n_kv * n_rep
    d_model = n_heads * d_head
    lead = (B,) if batched else ()
    x = rng.normal(size=(*lead, T, d_model)).astype(dtype)
    W_Q, W_O = ((rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)).astype(dtype) for _ in range(2))
    W_K, W_V = ((rng.normal(size=(d_model, n_kv * d_head)) / math.sqrt(d_model)).astype(dtype) for _ in range(2))
    return x, (W_Q, W_K, W_V, W_O), n_heads, n_kv


def tol(dtype):
    return dict(rtol=2e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)


def gqa_loop(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None):
    """Independent GQA: a loop over query heads, each reading the column slice of its KV head (einsum, no
    repeat), and the output as the sum over heads of head_i @ W_O^i."""
    x = x.astype(float)
    d_head = x.shape[-1] // n_heads
    n_rep = n_heads // n_kv_heads
    out, weights = 0.0, []
    for h in range(n_heads):
        q_cols = slice(h * d_head, (h + 1) * d_head)
        kv = h // n_rep
        kv_cols = slice(kv * d_head, (kv + 1) * d_head)
        q = np.einsum("...td,de->...te", x, W_Q[:, q_cols].astype(float))
        k = np.einsum("...td,de->...te", x, W_K[:, kv_cols].astype(float))
        v = np.einsum("...td,de->...te", x, W_V[:, kv_cols].astype(float))
        head, w = independent.attention(q, k, v, mask)
        out = out + np.einsum("...te,ed->...td", head, W_O[q_cols, :].astype(float))
        weights.append(w)
    return out, np.stack(weights, axis=-3)


def causal(T_q, T_k=None):
    T_k = T_q if T_k is None else T_k
    return np.array([[j > i for j in range(T_k)] for i in range(T_q)], dtype=bool)


# ------------------------------------------------------------------------------------------- repeat_kv, GQA
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2), st.integers(0, 2**32 - 1))
def test_repeat_kv_gives_query_head_i_the_kv_head_i_div_n_rep(n_kv, n_rep, n_lead, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(*(2,) * n_lead, n_kv, 3, 2))
    got = ref.repeat_kv(x, n_rep)
    assert got.shape == (*x.shape[:-3], n_kv * n_rep, 3, 2)
    for i in range(n_kv * n_rep):
        np.testing.assert_array_equal(got[..., i, :, :], x[..., i // n_rep, :, :])


def test_repeat_kv_is_not_tile():
    x = np.arange(2.0).reshape(2, 1, 1)  # KV heads 0 and 1
    assert ref.repeat_kv(x, 3).ravel().tolist() == [0, 0, 0, 1, 1, 1]


@given(gqa_layer(), st.booleans())
def test_gqa_equals_per_head_loop(data, use_mask):
    x, Ws, n_heads, n_kv = data
    T = x.shape[-2]
    mask = causal(T) if use_mask else None
    out, w = ref.grouped_query_attention(x, *Ws, n_heads, n_kv, mask=mask)
    out2, w2 = gqa_loop(x, *Ws, n_heads, n_kv, mask)
    np.testing.assert_allclose(out, out2, **tol(x.dtype))
    np.testing.assert_allclose(w, w2, **tol(x.dtype))
    assert out.dtype == x.dtype and w.dtype == x.dtype
    assert w.shape == (*x.shape[:-2], n_heads, T, T)


@given(gqa_layer(dtype=np.float64))
def test_gqa_is_mha_with_repeated_kv_weights(data):
    x, (W_Q, W_K, W_V, W_O), n_heads, n_kv = data
    d_model = x.shape[-1]
    n_rep = n_heads // n_kv
    expand = lambda W: np.repeat(W.reshape(d_model, n_kv, -1), n_rep, axis=1).reshape(d_model, d_model)  # noqa: E731
    out, w = ref.grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv)
    out2, w2 = ref.multi_head_attention(x, W_Q, expand(W_K), expand(W_V), W_O, n_heads)
    np.testing.assert_allclose(out, out2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(w, w2, rtol=1e-12, atol=1e-12)


@given(gqa_layer(dtype=np.float64))
def test_mqa_heads_share_keys(data):
    """At the MQA end every query head reads the same keys: heads with equal queries get equal weights."""
    x, (W_Q, W_K, W_V, W_O), n_heads, _ = data
    d_head = x.shape[-1] // n_heads
    W_K1, W_V1 = W_K[:, :d_head], W_V[:, :d_head]
    W_Q_same = np.tile(W_Q[:, :d_head], (1, n_heads))  # every query head gets head 0's query weights
    _, w = ref.grouped_query_attention(x, W_Q_same, W_K1, W_V1, W_O, n_heads, 1)
    for h in range(1, n_heads):
        np.testing.assert_allclose(w[..., h, :, :], w[..., 0, :, :], rtol=1e-12, atol=1e-14)


def test_gqa_rejects_kv_heads_that_do_not_divide():
    x = np.zeros((3, 12))
    with pytest.raises(ValueError, match="n_kv_heads"):
        ref.grouped_query_attention(x, np.zeros((12, 12)), np.zeros((12, 9)), np.zeros((12, 9)), np.zeros((12, 12)),
                                    4, 3)
    with pytest.raises(ValueError, match="W_K"):
        ref.grouped_query_attention(x, np.zeros((12, 12)), np.zeros((12, 12)), np.zeros((12, 6)), np.zeros((12, 12)),
                                    4, 2)


# ------------------------------------------------------------------------------------------- mask conventions
@pytest.mark.parametrize("T", [1, 2, 5])
def test_causal_mask_conventions(T):
    blocked = causal(T)
    assert ref.causal_mask(T).dtype == np.bool_
    np.testing.assert_array_equal(ref.causal_mask(T), blocked)
    np.testing.assert_array_equal(ref.causal_mask(T, "course"), blocked)
    np.testing.assert_array_equal(ref.causal_mask(T, "nn.MultiheadAttention"), blocked)
    sdpa = ref.causal_mask(T, "F.scaled_dot_product_attention")
    assert sdpa.dtype == np.bool_
    np.testing.assert_array_equal(sdpa, ~blocked)  # True = may attend
    fill = ref.causal_mask(T, "masked_fill")
    assert fill.dtype.kind == "f"
    np.testing.assert_array_equal(fill == 0, blocked)  # masked_fill(mask == 0, -inf) blocks exactly the future
    with pytest.raises(ValueError, match="convention"):
        ref.causal_mask(T, "pytorch")


# ------------------------------------------------------------------------------------------- KV cache
@given(gqa_layer(dtype=np.float64))
def test_causal_self_attention_is_gqa_with_the_causal_mask(data):
    x, Ws, n_heads, n_kv = data
    T = x.shape[-2]
    out, w = ref.causal_self_attention(x, *Ws, n_heads, n_kv)
    out2, w2 = gqa_loop(x, *Ws, n_heads, n_kv, causal(T))
    np.testing.assert_allclose(out, out2, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w, w2, rtol=1e-10, atol=1e-12)
    assert np.all(w[..., causal(T)] == 0)


@given(gqa_layer())
def test_decoding_with_the_cache_equals_full_causal_attention(data):
    x, Ws, n_heads, n_kv = data
    T, d_head = x.shape[-2], x.shape[-1] // n_heads
    out, cache_k, cache_v = ref.decode_with_kv_cache(x, *Ws, n_heads, n_kv)
    full, _ = ref.causal_self_attention(x, *Ws, n_heads, n_kv)
    np.testing.assert_allclose(out, full, **tol(x.dtype))
    assert out.dtype == x.dtype
    assert cache_k.shape == cache_v.shape == (*x.shape[:-2], n_kv, T, d_head)
    # the cache holds exactly every token's keys and values, head j in columns j*d_head:(j+1)*d_head
    for j, t in itertools.product(range(n_kv), range(T)):
        cols = slice(j * d_head, (j + 1) * d_head)
        np.testing.assert_allclose(cache_k[..., j, t, :], x[..., t, :] @ Ws[1][:, cols], **tol(x.dtype))
        np.testing.assert_allclose(cache_v[..., j, t, :], x[..., t, :] @ Ws[2][:, cols], **tol(x.dtype))


@given(gqa_layer(dtype=np.float64), st.data())
def test_one_decode_step_is_the_last_row_of_the_full_path(data, draw):
    x, Ws, n_heads, n_kv = data
    T = x.shape[-2]
    t = draw.draw(st.integers(0, T - 1))
    _, cache_k, cache_v = ref.decode_with_kv_cache(x[..., :t, :], *Ws, n_heads, n_kv)
    copies = [cache_k.copy(), cache_v.copy()]
    out_t, k2, v2 = ref.decode_step(x[..., t:t + 1, :], cache_k, cache_v, *Ws, n_heads, n_kv)
    full, _ = gqa_loop(x[..., :t + 1, :], *Ws, n_heads, n_kv, causal(t + 1))
    np.testing.assert_allclose(out_t, full[..., t:t + 1, :], rtol=1e-10, atol=1e-12)
    assert k2.shape[-2] == v2.shape[-2] == t + 1
    np.testing.assert_array_equal(cache_k, copies[0])  # the caller's cache is not modified
    np.testing.assert_array_equal(cache_v, copies[1])


@given(st.integers(0, 4), st.integers(1, 3), st.booleans())
def test_kv_cache_append_grows_time_only(T_past, T_new, batched):
    rng = np.random.default_rng(T_past * 10 + T_new)
    lead = (2,) if batched else ()
    cache_k, cache_v = rng.normal(size=(2, *lead, 3, T_past, 4))
    k, v = rng.normal(size=(2, *lead, 3, T_new, 4))
    new_k, new_v = ref.kv_cache_append(cache_k, cache_v, k, v)
    assert new_k.shape == new_v.shape == (*lead, 3, T_past + T_new, 4)
    for t in range(T_past + T_new):
        src_k, src_v = (cache_k, cache_v) if t < T_past else (k, v)
        i = t if t < T_past else t - T_past
        np.testing.assert_array_equal(new_k[..., t, :], src_k[..., i, :])
        np.testing.assert_array_equal(new_v[..., t, :], src_v[..., i, :])
    with pytest.raises(ValueError, match="axis -2"):
        ref.kv_cache_append(cache_k, cache_v, k[..., :2, :, :], v)


# ------------------------------------------------------------------------------------------- tiled attention
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 12), st.integers(1, 5), st.integers(1, 4),
       st.integers(1, 14), st.booleans(), st.integers(0, 2**32 - 1))
def test_tiled_attention_equals_plain_attention_within_1e_10(B, T_q, T_k, d_k, d_v, block, use_causal, seed):
    rng = np.random.default_rng(seed)
    Q = rng.normal(size=(B, T_q, d_k)) * 4  # large scores: the running max moves from block to block
    K = rng.normal(size=(B, T_k, d_k)) * 4
    V = rng.normal(size=(B, T_k, d_v))
    mask = causal(T_q, T_k) if use_causal else None
    with np.errstate(all="raise"):  # no overflow, no NaN, no 0/0 along the way
        got = ref.tiled_attention(Q, K, V, block, causal=use_causal)
    want, _ = independent.attention(Q, K, V, mask)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_tiled_attention_keeps_float32():
    rng = np.random.default_rng(3)
    Q, K, V = (rng.normal(size=(2, 9, 4)).astype(np.float32) for _ in range(3))
    got = ref.tiled_attention(Q, K, V, 4, causal=True)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, independent.attention(Q, K, V, causal(9))[0], rtol=2e-5, atol=1e-6)


def test_tiled_attention_never_holds_a_T_by_T_array():
    T, block = 2048, 64
    rng = np.random.default_rng(4)
    Q, K, V = (rng.normal(size=(T, 8)) for _ in range(3))
    tracemalloc.start()
    try:
        ref.tiled_attention(Q, K, V, block, causal=True)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        ref.scaled_dot_product_attention(Q, K, V)
        naive = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert naive > T * T * 8  # the plain path holds at least one (T, T) float64 array
    assert peak < T * T * 8 / 4, f"tiled peak {peak} bytes"
    assert peak < 8 * T * block * 8  # a few (T, block) blocks at a time


def test_tiled_attention_does_not_modify_inputs_and_ignores_key_order():
    rng = np.random.default_rng(5)
    Q, K, V = rng.normal(size=(4, 3)), rng.normal(size=(11, 3)), rng.normal(size=(11, 2))
    copies = [a.copy() for a in (Q, K, V)]
    out = ref.tiled_attention(Q, K, V, 3)
    for a, b in zip((Q, K, V), copies):
        np.testing.assert_array_equal(a, b)
    perm = rng.permutation(11)
    np.testing.assert_allclose(ref.tiled_attention(Q, K[perm], V[perm], 3), out, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------- cross-attention
@st.composite
def cross_layer(draw):
    """Random cross-attention inputs: T_q and T_k drawn apart, a padding mask (B, 1, T_k) or (1, T_k) in which a
    sequence may be all padding (its queries then have every key blocked), float32 or float64."""
    n_heads, d_head = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    T_q, T_k, B = draw(st.integers(1, 6)), draw(st.integers(1, 6)), draw(st.integers(1, 3))
    batched = draw(st.booleans())
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    d_model = n_heads * d_head
    lead = (B,) if batched else ()
    x_q = rng.normal(size=(*lead, T_q, d_model)).astype(dtype)
    x_kv = rng.normal(size=(*lead, T_k, d_model)).astype(dtype)
    Ws = tuple((rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)).astype(dtype) for _ in range(4))
    lengths = [draw(st.integers(0, T_k)) for _ in range(B if batched else 1)]
    padded = np.arange(T_k)[None, :] >= np.array(lengths)[:, None]  # (B, T_k) True at padded keys
    mask = padded[:, None, :] if batched else padded  # (B, 1, T_k) or (1, T_k)
    return x_q, x_kv, Ws, n_heads, (mask if draw(st.booleans()) else None)


def cross_loop(x_q, x_kv, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """Independent cross-attention: a loop over heads, queries from x_q and keys/values from x_kv by column
    slices and einsum, the output as the sum over heads of head_i @ W_O^i."""
    d_head = x_q.shape[-1] // n_heads
    out, weights = 0.0, []
    for h in range(n_heads):
        cols = slice(h * d_head, (h + 1) * d_head)
        q = np.einsum("...td,de->...te", x_q.astype(float), W_Q[:, cols].astype(float))
        k = np.einsum("...td,de->...te", x_kv.astype(float), W_K[:, cols].astype(float))
        v = np.einsum("...td,de->...te", x_kv.astype(float), W_V[:, cols].astype(float))
        head, w = independent.attention(q, k, v, mask)
        out = out + np.einsum("...te,ed->...td", head, W_O[cols, :].astype(float))
        weights.append(w)
    return out, np.stack(weights, axis=-3)


@given(cross_layer())
def test_cross_attention_equals_per_head_loop_with_padding(data):
    x_q, x_kv, Ws, n_heads, mask = data
    out, weights = ref.cross_attention(x_q, x_kv, *Ws, n_heads, mask=mask)
    want_out, want_w = cross_loop(x_q, x_kv, *Ws, n_heads, mask)
    assert out.shape == x_q.shape and weights.shape == (*x_q.shape[:-2], n_heads, x_q.shape[-2], x_kv.shape[-2])
    assert out.dtype == weights.dtype == x_q.dtype
    np.testing.assert_allclose(out, want_out, **tol(x_q.dtype))
    np.testing.assert_allclose(weights, want_w, **tol(x_q.dtype))
    if mask is not None:
        blocked = np.broadcast_to(mask[..., None, :, :], weights.shape)
        assert np.all(weights[blocked] == 0)
        all_blocked = blocked.all(axis=-1)  # (..., n_heads, T_q): a sequence that is all padding
        assert np.all(weights[all_blocked] == 0) and not np.isnan(out).any()


@given(cross_layer())
def test_cross_attention_of_a_sequence_with_itself_is_self_attention(data):
    x_q, _, Ws, n_heads, _ = data
    out, weights = ref.cross_attention(x_q, x_q, *Ws, n_heads)
    want_out, want_w = ref.multi_head_attention(x_q, *Ws, n_heads)
    np.testing.assert_allclose(out, want_out, **tol(x_q.dtype))
    np.testing.assert_allclose(weights, want_w, **tol(x_q.dtype))


def test_cross_attention_ignores_padded_keys_and_keeps_its_inputs():
    rng = np.random.default_rng(6)
    x_q, x_kv = rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 5, 8))
    Ws = rng.normal(size=(4, 8, 8)) / math.sqrt(8)
    copies = [a.copy() for a in (x_q, x_kv, *Ws)]
    padded = np.concatenate([x_kv, rng.normal(size=(2, 4, 8)) * 100], axis=1)  # 4 padding tokens of any value
    mask = np.arange(9)[None, None, :] >= 5  # (1, 1, T_k = 9): the last 4 keys are padding
    out, _ = ref.cross_attention(x_q, padded, *Ws, 2, mask=mask)
    np.testing.assert_allclose(out, ref.cross_attention(x_q, x_kv, *Ws, 2)[0], rtol=1e-12, atol=1e-12)
    for a, b in zip((x_q, x_kv, *Ws), copies):
        np.testing.assert_array_equal(a, b)
