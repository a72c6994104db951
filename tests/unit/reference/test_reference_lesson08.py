"""Lesson 08's reference against independent implementations (``tests/helpers/independent.py``: RoPE by complex
numbers, ALiBi's slopes as closed formulas, MLA head by head without absorption) and against the properties the
lesson teaches: a RoPE score depends only on the distance, the two layouts are a column permutation apart, the
streaming decoder equals attention under the sinks-and-window mask with a bounded cache, the absorbed MLA equals
the plain one, and DeepSeek-V2's cache equals GQA's with 2.25 groups."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import independent
from autograder import reference as ref
from autograder.reference import lesson08

settings.register_profile("lesson08", max_examples=25, deadline=None)


def tol(dtype):
    return dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-11)


@settings(settings.get_profile("lesson08"))
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.sampled_from([2, 4, 6, 16]), st.booleans(),
       st.sampled_from([100.0, 10000.0, 500000.0]), st.sampled_from([np.float32, np.float64]))
def test_rope_equals_complex_multiplication(seed, T, d_head, interleaved, base, dtype):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, T, d_head)).astype(dtype)
    positions = rng.integers(0, 5000, size=T)
    got = ref.rope(x, positions, base, interleaved)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, independent.rope(x, positions, base, interleaved), **tol(dtype))


def test_rope_scores_depend_only_on_the_distance_and_the_layouts_are_a_permutation():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(1, 32)), rng.normal(size=(1, 32))
    for interleaved in (True, False):
        score = [(ref.rope(q, [m + 7], interleaved=interleaved) @ ref.rope(k, [m], interleaved=interleaved).T).item()
                 for m in (0, 3, 1000)]
        assert np.allclose(score, score[0], rtol=1e-9)
        other = (ref.rope(q, [8], interleaved=interleaved) @ ref.rope(k, [0], interleaved=interleaved).T).item()
        assert not np.isclose(other, score[0])
    x = rng.normal(size=(3, 5, 32))
    perm = np.r_[0:32:2, 1:32:2]
    np.testing.assert_allclose(ref.rope(x, np.arange(5))[..., perm], ref.rope(x[..., perm], np.arange(5),
                                                                              interleaved=False), rtol=1e-12)


@pytest.mark.parametrize("n_heads", [1, 2, 3, 5, 6, 7, 8, 12, 16, 20, 24, 32, 96, 112])
def test_alibi_equals_the_papers_formula(n_heads):
    np.testing.assert_array_equal(ref.alibi_bias(n_heads, 6), independent.alibi_bias(n_heads, 6))
    assert lesson08._alibi_slopes(n_heads) == independent.alibi_slopes(n_heads)


def test_alibi_slopes_of_8_heads_are_the_papers():
    assert lesson08._alibi_slopes(8) == [1 / 2 ** k for k in range(1, 9)]


@pytest.mark.parametrize("T, window", [(1, 1), (6, 1), (6, 3), (6, 6), (6, 40)])
def test_sliding_window_mask_leaves_window_keys_open(T, window):
    mask = ref.sliding_window_mask(T, window)
    for i in range(T):
        assert [j for j in range(T) if not mask[i, j]] == list(range(max(0, i - window + 1), i + 1))


def _gqa_layer(rng, lead, T, n_heads=6, n_kv_heads=2, d_head=3):
    d_model = n_heads * d_head
    x = rng.normal(size=(*lead, T, d_model))
    Ws = [rng.normal(size=(d_model, w)) / math.sqrt(d_model)
          for w in (d_model, n_kv_heads * d_head, n_kv_heads * d_head, d_model)]
    return x, Ws


@pytest.mark.parametrize("lead, T, n_sink, window", [((), 11, 4, 3), ((2,), 9, 1, 1), ((), 7, 0, 2), ((3,), 5, 2, 9)])
def test_streaming_decode_is_attention_over_sinks_and_window_with_a_bounded_cache(lead, T, n_sink, window):
    rng = np.random.default_rng(T)
    x, Ws = _gqa_layer(rng, lead, T)
    out, cache_k, cache_v = ref.streaming_decode(x, *Ws, 6, 2, n_sink, window)
    j = np.arange(T)[None, :]
    mask = ref.sliding_window_mask(T, window) & ~((j < n_sink) & (j <= np.arange(T)[:, None]))
    expected, _ = ref.grouped_query_attention(x, *Ws, 6, 2, mask)
    np.testing.assert_allclose(out, expected, rtol=1e-9, atol=1e-12)
    assert cache_k.shape == cache_v.shape == (*lead, 2, min(T, n_sink + window), 3)


def _mla(rng, lead, T, d_model, n_heads, d_head, d_c, d_rope, dtype=np.float64):
    shapes = [(d_model, d_c), (d_c, n_heads * d_head), (d_c, n_heads * d_head), (d_model, d_rope),
              (d_model, n_heads * d_head), (d_model, n_heads * d_rope), (n_heads * d_head, d_model)]
    return (rng.normal(size=(*lead, T, d_model)).astype(dtype),
            [(rng.normal(size=s) / math.sqrt(s[0])).astype(dtype) for s in shapes])


@settings(settings.get_profile("lesson08"))
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(1, 3), max_size=2), st.integers(1, 6), st.integers(1, 4),
       st.integers(1, 5), st.integers(1, 9), st.sampled_from([2, 4, 6]), st.booleans(),
       st.sampled_from([np.float32, np.float64]), st.integers(1, 6))
def test_mla_plain_and_absorbed_equal_mla_head_by_head(seed, lead, T, n_heads, d_head, d_c, d_rope, masked, dtype,
                                                       T_q):
    """The plain form from the tokens; the absorbed form from their cache, for the newest T_q <= T of them."""
    rng = np.random.default_rng(seed)
    x, Ws = _mla(rng, tuple(lead), T, 7, n_heads, d_head, d_c, d_rope, dtype)
    mask = np.triu(np.ones((T, T), dtype=bool), k=1) if masked else None
    expected_out, expected_w = independent.mla_by_loops(x, *Ws, n_heads, mask)
    out, weights = ref.mla_attention(x, *Ws, n_heads, mask)
    T_q = min(T_q, T)
    W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O = Ws
    c_kv, k_r = ref.mla_cache(x, W_DKV, W_KR)
    step_out, step_w = ref.mla_absorbed(x[..., T - T_q:, :], c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads,
                                        None if mask is None else mask[T - T_q:])
    for (o, w), rows in (((out, weights), slice(0, T)), ((step_out, step_w), slice(T - T_q, T))):
        assert o.dtype == w.dtype == dtype
        np.testing.assert_allclose(o, expected_out[..., rows, :], **tol(dtype))
        np.testing.assert_allclose(w, expected_w[..., rows, :], **tol(dtype))


def test_mla_absorbed_equals_plain_to_float64_rounding_at_deepseek_proportions():
    rng = np.random.default_rng(0)
    x, Ws = _mla(rng, (2,), 12, 64, 4, 16, 64, 8)
    W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O = Ws
    mask = np.triu(np.ones((12, 12), dtype=bool), k=1)
    plain = ref.mla_attention(x, *Ws, 4, mask)
    absorbed = ref.mla_absorbed(x, *ref.mla_cache(x, W_DKV, W_KR), W_UK, W_UV, W_Q, W_QR, W_O, 4, mask)
    assert np.abs(plain[0] - absorbed[0]).max() < 1e-12 and np.abs(plain[1] - absorbed[1]).max() < 1e-14
    step = ref.mla_absorbed(x[:, -1:], *ref.mla_cache(x, W_DKV, W_KR), W_UK, W_UV, W_Q, W_QR, W_O, 4)
    assert np.abs(plain[0][:, -1:] - step[0]).max() < 1e-12


def test_mla_absorbed_refuses_more_queries_than_cached_tokens():
    rng = np.random.default_rng(1)
    x, (W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O) = _mla(rng, (), 4, 7, 2, 4, 5, 2)
    c_kv, k_r = ref.mla_cache(x[:3], W_DKV, W_KR)
    with pytest.raises(ValueError, match="cache"):
        ref.mla_absorbed(x, c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, 2)


def test_kv_cache_counts_deepseek_v2_as_gqa_with_2_25_groups():
    v2 = dict(attention="MLA", n_layers=60, n_heads=128, d_head=128, d_c=512, d_rope=64)
    per_group = ref.kv_cache_elements_per_token(dict(v2, attention="GQA", n_kv_heads=1))
    assert ref.kv_cache_elements_per_token(v2) / per_group == 2.25
    assert ref.kv_cache_elements_per_token(dict(v2, attention="MHA")) == 2 * 128 * 128 * 60
    assert ref.kv_cache_elements_per_token(dict(v2, attention="MQA")) == 2 * 128 * 60
    with pytest.raises(ValueError):
        ref.kv_cache_elements_per_token(dict(v2, attention="MoE"))
