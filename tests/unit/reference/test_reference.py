"""The reference implementation against an independent one and against the properties attention must have."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import independent
from autograder import reference as ref

settings.register_profile("course", max_examples=60, deadline=None)
settings.load_profile("course")


@st.composite
def layer(draw, batched=None, dtype=None):
    """Random multi-head inputs whose sizes are all different: B, T, n_heads, d_head."""
    sizes = draw(st.lists(st.integers(1, 7), min_size=4, max_size=4, unique=True))
    B, T, n_heads, d_head = sizes
    batched = draw(st.booleans()) if batched is None else batched
    dtype = draw(st.sampled_from([np.float32, np.float64])) if dtype is None else dtype
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    d_model = n_heads * d_head
    lead = (B,) if batched else ()
    x = rng.normal(size=(*lead, T, d_model)).astype(dtype)
    Ws = [(rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)).astype(dtype) for _ in range(4)]
    mask = rng.random((T, T)) < 0.3
    mask[np.arange(T), rng.integers(0, T, T)] = False  # every query keeps at least one key
    return x, Ws, n_heads, mask


def tol(dtype):
    return dict(rtol=2e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)


@given(layer(), st.booleans())
def test_mha_equals_per_head_loop(data, use_mask):
    x, Ws, n_heads, mask = data
    m = mask if use_mask else None
    out, w = ref.multi_head_attention(x, *Ws, n_heads, mask=m)
    out2, w2 = independent.multi_head_attention(x.astype(float), *[W.astype(float) for W in Ws], n_heads, m)
    np.testing.assert_allclose(out, out2, **tol(x.dtype))
    np.testing.assert_allclose(w, w2, **tol(x.dtype))
    assert out.dtype == x.dtype and w.dtype == x.dtype, "float32 must stay float32, float64 stay float64"


@given(layer())
def test_split_concat_round_trip_is_exact(data):
    x, _, n_heads, _ = data
    heads = ref.split_heads(x, n_heads)
    d_head = x.shape[-1] // n_heads
    assert heads.shape == (*x.shape[:-2], n_heads, x.shape[-2], d_head)
    np.testing.assert_array_equal(heads, independent.split_heads(x, n_heads))
    np.testing.assert_array_equal(ref.concat_heads(heads), x)
    np.testing.assert_array_equal(ref.concat_heads(heads), independent.concat_heads(heads))


@given(layer(), st.booleans())
def test_attention_properties(data, use_mask):
    x, Ws, n_heads, mask = data
    m = mask if use_mask else None
    _, w = ref.multi_head_attention(x, *Ws, n_heads, mask=m)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
    assert np.all(w >= 0)
    if use_mask:
        assert np.all(w[..., mask] == 0), "blocked weights must be exactly 0"


@given(layer(batched=False, dtype=np.float64))
def test_causal_rows_do_not_see_the_future(data):
    x, Ws, n_heads, _ = data
    T = x.shape[-2]
    causal = np.triu(np.ones((T, T), bool), k=1)
    out, w = ref.multi_head_attention(x, *Ws, n_heads, mask=causal)
    assert np.all(w[:, causal] == 0)
    # changing the last token cannot change any earlier output row
    x2 = x.copy()
    x2[-1] += 1.0
    out2, _ = ref.multi_head_attention(x2, *Ws, n_heads, mask=causal)
    np.testing.assert_allclose(out[:-1], out2[:-1], rtol=1e-12, atol=1e-12)


@given(layer(dtype=np.float64), st.randoms(use_true_random=False))
def test_permutation_equivariance(data, rnd):
    x, Ws, n_heads, _ = data
    T = x.shape[-2]
    perm = list(range(T))
    rnd.shuffle(perm)
    out, w = ref.multi_head_attention(x, *Ws, n_heads)
    out_p, w_p = ref.multi_head_attention(x[..., perm, :], *Ws, n_heads)
    np.testing.assert_allclose(out_p, out[..., perm, :], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w_p, w[..., perm, :][..., perm], rtol=1e-10, atol=1e-12)


@given(layer())
def test_no_function_modifies_its_inputs(data):
    x, Ws, n_heads, mask = data
    copies = [a.copy() for a in (x, *Ws, mask)]
    ref.multi_head_attention(x, *Ws, n_heads, mask=mask)
    ref.softmax(x)
    ref.concat_heads(ref.split_heads(x, n_heads))
    for a, b in zip((x, *Ws, mask), copies):
        np.testing.assert_array_equal(a, b)


@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 9), st.integers(1, 9), st.booleans())
def test_attention_general_shapes(T_q, T_k, d_k, d_v, batched):
    rng = np.random.default_rng(T_q * 1000 + T_k * 100 + d_k * 10 + d_v)
    lead = (3, 2) if batched else ()
    Q, K, V = (rng.normal(size=(*lead, t, d)) for t, d in ((T_q, d_k), (T_k, d_k), (T_k, d_v)))
    out, w = ref.scaled_dot_product_attention(Q, K, V)
    out2, w2 = independent.attention(Q, K, V)
    assert out.shape == (*lead, T_q, d_v) and w.shape == (*lead, T_q, T_k)
    np.testing.assert_allclose(out, out2, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w, w2, rtol=1e-10, atol=1e-12)


def test_softmax_is_stable_and_matches_loop():
    x = np.array([[1e4, 1e4 - 1, 1e4 - 2], [-1e4, 0.0, 3.0]])
    with np.errstate(over="raise", invalid="raise"):
        got = ref.softmax(x)
    np.testing.assert_allclose(got, independent.softmax(x), rtol=1e-12)
    np.testing.assert_allclose(ref.softmax(x, axis=0), independent.softmax(x, axis=0), rtol=1e-12)


def test_fully_blocked_row_gets_zero_weights():
    Q = K = V = np.eye(3)
    mask = np.zeros((3, 3), bool)
    mask[1] = True
    out, w = ref.scaled_dot_product_attention(Q, K, V, mask=mask)
    assert np.all(w[1] == 0) and np.all(out[1] == 0) and np.all(np.isfinite(w))


def test_float32_stays_float32_with_python_float_scale():
    Q = np.ones((2, 4), np.float32)
    out, w = ref.scaled_dot_product_attention(Q, Q, Q)
    assert out.dtype == np.float32 and w.dtype == np.float32


@pytest.mark.parametrize("d_model,n_heads,bias,expected", [
    (512, 8, False, 4 * 512 ** 2),
    (512, 8, True, 4 * 512 ** 2 + 4 * 512),
    (768, 12, False, 2_359_296),
    (12288, 96, False, 603_979_776),
])
def test_param_count(d_model, n_heads, bias, expected):
    assert ref.mha_param_count(d_model, n_heads, bias) == expected
    assert ref.mha_param_count(d_model, n_heads, bias) == independent.mha_param_count(d_model, n_heads, bias)


@given(st.integers(1, 64), st.integers(1, 16), st.booleans())
def test_param_count_does_not_depend_on_heads(d_head, n_heads, bias):
    d_model = d_head * n_heads
    assert ref.mha_param_count(d_model, n_heads, bias) == ref.mha_param_count(d_model, 1, bias)
    assert ref.mha_param_count(d_model, n_heads, bias) == independent.mha_param_count(d_model, n_heads, bias)


@pytest.mark.parametrize("call", [
    lambda: ref.split_heads(np.zeros((3, 10)), 4),
    lambda: ref.mha_param_count(10, 4),
    lambda: ref.multi_head_attention(np.zeros((3, 10)), *[np.zeros((10, 10))] * 4, 4),
    lambda: ref.output_projection(np.zeros((2, 3, 4)), np.zeros((9, 8))),
    lambda: ref.scaled_dot_product_attention(np.zeros((2, 3)), np.zeros((2, 4)), np.zeros((2, 4))),
])
def test_bad_shapes_raise_value_error_that_says_what_to_do(call):
    with pytest.raises(ValueError, match=r"must|cannot|choose"):
        call()
