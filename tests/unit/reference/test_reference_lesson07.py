"""Lesson 07's reference backward pass against central finite differences and against an independent per-head
loop (``tests/helpers/independent.py``: explicit Jacobians, einsum, column slices), with hypothesis over random shapes,
masks and both float dtypes; the gradient check and the sinusoidal positions against known values."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import independent
from autograder import reference as ref

settings.register_profile("lesson07", max_examples=25, deadline=None)
NAMES = ("x", "W_Q", "W_K", "W_V", "W_O")


def tol(dtype):
    return dict(rtol=2e-3, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-11)


@st.composite
def attention_inputs(draw):
    """Q, K, V with T_q, T_k, d_k, d_v and the batch axes drawn independently, a mask (or None), grad_out."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    T_q, T_k, d_k, d_v = (draw(st.integers(1, 6)) for _ in range(4))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    Q, K, V = (rng.normal(size=(*lead, t, d)).astype(dtype) for t, d in ((T_q, d_k), (T_k, d_k), (T_k, d_v)))
    mask = None
    if draw(st.booleans()):
        mask = rng.random((T_q, T_k)) < 0.4
        if draw(st.booleans()):
            mask[0] = True  # a fully blocked query: all-zero weights, all-zero gradient
    out, weights = ref.scaled_dot_product_attention(Q, K, V, mask)
    return Q, K, V, weights, rng.normal(size=out.shape).astype(dtype), mask


@st.composite
def layer_inputs(draw, dtype=None):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_heads, d_head, T = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 5))
    lead = (draw(st.integers(1, 3)),) if draw(st.booleans()) else ()
    dtype = dtype or draw(st.sampled_from([np.float32, np.float64]))
    d_model = n_heads * d_head
    x = rng.normal(size=(*lead, T, d_model)).astype(dtype)
    Ws = [(rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)).astype(dtype) for _ in range(4)]
    mask = np.triu(np.ones((T, T), dtype=bool), k=1) if draw(st.booleans()) else None
    return x, Ws, n_heads, rng.normal(size=x.shape).astype(dtype), mask


@settings(settings.get_profile("lesson07"))
@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 6), st.sampled_from([0, -1]),
       st.sampled_from([np.float32, np.float64]))
def test_softmax_backward_equals_the_explicit_jacobian(seed, rows, T_k, axis, dtype):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(rows, T_k) if axis == -1 else (T_k, rows)) * 3
    weights = ref.softmax(scores, axis=axis).astype(dtype)
    grad = rng.normal(size=scores.shape).astype(dtype)
    got = ref.softmax_backward(weights, grad, axis=axis)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, independent.softmax_backward(weights, grad, axis=axis), **tol(dtype))
    np.testing.assert_allclose(got.sum(axis=axis), 0, atol=1e-5 if dtype == np.float32 else 1e-12)


@settings(settings.get_profile("lesson07"))
@given(attention_inputs())
def test_attention_backward_equals_a_loop_and_blocks_no_gradient(inputs):
    Q, K, V, weights, grad_out, mask = inputs
    copies = [a.copy() for a in inputs[:5]]
    got = ref.scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask)
    assert all(np.array_equal(a, b) for a, b in zip(inputs[:5], copies))
    for g, e, a in zip(got, independent.attention_backward(Q, K, V, weights, grad_out), (Q, K, V)):
        assert g.shape == a.shape and g.dtype == a.dtype
        np.testing.assert_allclose(g, e, **tol(Q.dtype))
    if mask is not None and mask[0].all():
        assert not got[0][..., 0, :].any(), "a fully blocked query got a gradient"


@settings(settings.get_profile("lesson07"))
@given(attention_inputs())
def test_attention_backward_equals_finite_differences(inputs):
    Q, K, V, _, grad_out, mask = (a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype != bool else a
                                  for a in inputs)

    def loss(Q, K, V):
        return np.sum(grad_out * ref.scaled_dot_product_attention(Q, K, V, mask)[0])

    weights = ref.scaled_dot_product_attention(Q, K, V, mask)[1]
    grads = ref.scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask)
    assert ref.gradient_check(loss, [Q, K, V], grads) < 1e-6


@settings(settings.get_profile("lesson07"))
@given(layer_inputs())
def test_mha_backward_equals_a_per_head_loop(inputs):
    x, Ws, n_heads, grad_out, mask = inputs
    copies = [a.copy() for a in (x, *Ws, grad_out)]
    got = ref.multi_head_attention_backward(x, *Ws, n_heads, grad_out, mask)
    assert all(np.array_equal(a, b) for a, b in zip((x, *Ws, grad_out), copies))
    expected = independent.multi_head_attention_backward(x, *Ws, n_heads, grad_out, mask)
    assert sorted(got) == sorted(NAMES)
    for name, a in zip(NAMES, (x, *Ws)):
        assert got[name].shape == a.shape and got[name].dtype == x.dtype, name
        np.testing.assert_allclose(got[name], expected[name], **tol(x.dtype), err_msg=name)


@settings(settings.get_profile("lesson07"), max_examples=10)
@given(layer_inputs(dtype=np.float64))
def test_mha_backward_equals_finite_differences(inputs):
    x, Ws, n_heads, grad_out, mask = inputs

    def loss(x, *Ws):
        return np.sum(grad_out * ref.multi_head_attention(x, *Ws, n_heads, mask)[0])

    grads = ref.multi_head_attention_backward(x, *Ws, n_heads, grad_out, mask)
    numeric = _central_differences(loss, [x, *Ws])
    # Relative to the whole gradient, not to each input's own: when two tokens are nearly alike, the gradients of
    # W_Q and W_K are tiny and finite differences there are rounding noise (1e-10), which must not fail the test.
    scale = max(float(np.max(np.abs(grads[n]))) for n in NAMES)
    for name, num in zip(NAMES, numeric):
        assert float(np.max(np.abs(grads[name] - num))) <= 1e-6 * scale, name


def _central_differences(f, inputs, eps=1e-6):
    """d f / d input, entry by entry, by central differences in float64 copies of ``inputs``."""
    xs = [np.array(a, dtype=np.float64) for a in inputs]
    out = []
    for x in xs:
        g = np.zeros_like(x)
        flat, g_flat = x.reshape(-1), g.reshape(-1)  # views of x and g
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + eps
            up = float(f(*xs))
            flat[i] = old - eps
            down = float(f(*xs))
            flat[i] = old
            g_flat[i] = (up - down) / (2 * eps)
        out.append(g)
    return out


def test_gradient_check_measures_a_wrong_entry_relative_to_the_whole_gradient():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(3, 2)), rng.normal(size=4).astype(np.float32)
    copies = x.copy(), y.copy()

    def f(x, y):
        return np.sum(np.sin(x)) * np.sum(y ** 2)

    grad = [np.cos(x) * np.sum(y.astype(float) ** 2), 2 * y.astype(float) * np.sum(np.sin(x))]
    assert ref.gradient_check(f, [x, y], grad) < 1e-8  # float32 input: perturbed in a float64 copy
    assert np.array_equal(x, copies[0]) and np.array_equal(y, copies[1])
    wrong = [grad[0], grad[1].copy()]
    wrong[1][2] += 0.25
    size = max(np.abs(grad[1]).max(), np.abs(wrong[1]).max())
    assert abs(ref.gradient_check(f, [x, y], wrong) - 0.25 / size) < 1e-7
    assert ref.gradient_check(f, [x, y], [grad[0] * 2, grad[1]]) > 0.4


def test_sinusoidal_positions_known_values_and_rotation():
    pe = ref.sinusoidal_positions(50, 16)
    assert pe.shape == (50, 16) and pe.dtype == np.float64
    np.testing.assert_allclose(pe[0], np.tile([0.0, 1.0], 8))
    np.testing.assert_allclose(pe[3, 4:6], [math.sin(3 / 10000 ** (4 / 16)), math.cos(3 / 10000 ** (4 / 16))])
    for i in range(8):  # PE_{t+k} is PE_t rotated, pair by pair, by the angle k * frequency of the pair
        angle = 5 * 10000 ** (-2 * i / 16)
        rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
        np.testing.assert_allclose(pe[:-5, 2 * i:2 * i + 2] @ rotation, pe[5:, 2 * i:2 * i + 2], atol=1e-12)
    assert ref.sinusoidal_positions(3, 5).shape == (3, 5)


def test_gradient_check_reports_nan_for_a_gradient_holding_nan_or_inf_in_any_input():
    """The lesson's table: nan means NaN or inf somewhere. Python's max(worst, err) once dropped it, so the reference
    (and the model answer) gave about 1e-10 for a broken gradient."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(3,)), rng.normal(size=(2, 2))

    def f(a, b):
        return float(np.sum(a ** 2) + np.sum(np.sin(b)))

    good = [2 * x, np.cos(y)]
    assert ref.gradient_check(f, [x, y], good) < 1e-8
    for value in (np.nan, np.inf):
        for which in (0, 1):
            held = [g.copy() for g in good]
            held[which].flat[0] = value
            assert np.isnan(ref.gradient_check(f, [x, y], held)), (value, which)
