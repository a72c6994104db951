"""Lesson 09's reference (a small GPT) against independent implementations (``tests/helpers/independent.py``: row
loops with Python floats, explicit Jacobians, GELU's derivative by the complex step, the model run prefix by prefix)
and against central finite differences, with hypothesis over random shapes and both float dtypes; sampling by the
frequencies of its draws; the KV-cached model against the whole model; ablation and K-composition against
constructed weights. Then every correct alternative of ``autograder/alternatives/lesson09.py`` against the reference
on the same inputs (the hidden tests' salt sweep proves them again, through the grader)."""

import ast
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import independent
from autograder import alternatives, course
from autograder import reference as ref
from autograder.reference.lesson09 import BLOCK_KEYS

settings.register_profile("lesson09", max_examples=20, deadline=None)
PROFILE = settings.get_profile("lesson09")
SEEDS = st.integers(0, 2**32 - 1)
DTYPES = st.sampled_from([np.float32, np.float64])
LEADS = st.lists(st.integers(1, 3), max_size=2).map(tuple)
MLP_KEYS = ("x", "W_1", "b_1", "W_2", "b_2")


def tol(dtype):
    return dict(rtol=2e-3, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-11)


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


def _close_to_differences(analytic: dict, numeric: dict, rel=1e-6):
    """Every gradient within ``rel`` of the largest entry of them all (a tiny gradient's differences are rounding
    noise, which must not fail the test)."""
    scale = max(float(np.max(np.abs(g))) for g in analytic.values())
    for name, num in numeric.items():
        assert analytic[name].shape == num.shape, name
        assert float(np.max(np.abs(analytic[name] - num))) <= rel * scale, name


def _ln_inputs(rng, shape, dtype, constant_row=False):
    x = rng.normal(size=shape) * rng.uniform(0.5, 3.0, size=(*shape[:-1], 1)) + rng.normal(size=(*shape[:-1], 1))
    if constant_row:
        x.reshape(-1, shape[-1])[0] = 1.5  # variance 0: only eps keeps the division finite
    gamma, beta = 1 + 0.5 * rng.normal(size=shape[-1]), 0.5 * rng.normal(size=shape[-1])
    return x.astype(dtype), gamma.astype(dtype), beta.astype(dtype)


def _unchanged(arrays, copies):
    return all(np.array_equal(a, b) for a, b in zip(arrays, copies))


# ------------------------------------------------------------------------------------------------ layer norm
@settings(PROFILE)
@given(SEEDS, LEADS, st.integers(1, 7), DTYPES, st.sampled_from([1e-5, 0.5]), st.booleans())
def test_layer_norm_equals_a_row_loop(seed, lead, d, dtype, eps, constant_row):
    rng = np.random.default_rng(seed)
    x, gamma, beta = _ln_inputs(rng, (*lead, 2, d), dtype, constant_row)
    copies = [a.copy() for a in (x, gamma, beta)]
    got = ref.layer_norm(x, gamma, beta, eps)
    assert _unchanged((x, gamma, beta), copies)
    assert got.shape == x.shape and got.dtype == dtype
    np.testing.assert_allclose(got, independent.layer_norm(x, gamma, beta, eps), rtol=1e-4 if dtype == np.float32
                               else 1e-12, atol=1e-4 if dtype == np.float32 else 1e-12)
    plain = ref.layer_norm(x.astype(np.float64), np.ones(d), np.zeros(d), eps)
    var = x.astype(np.float64).var(axis=-1, keepdims=True)
    np.testing.assert_allclose(plain.mean(axis=-1), 0, atol=1e-9)
    np.testing.assert_allclose((plain ** 2).mean(axis=-1, keepdims=True), var / (var + eps), rtol=1e-9, atol=1e-12)


@settings(PROFILE)
@given(SEEDS, LEADS, st.integers(1, 6), DTYPES, st.sampled_from([1e-5, 0.5]), st.booleans())
def test_layer_norm_backward_equals_explicit_jacobians(seed, lead, d, dtype, eps, constant_row):
    rng = np.random.default_rng(seed)
    x, gamma, _ = _ln_inputs(rng, (*lead, 2, d), dtype, constant_row)
    grad_out = rng.normal(size=x.shape).astype(dtype)
    copies = [a.copy() for a in (x, gamma, grad_out)]
    got = ref.layer_norm_backward(x, gamma, grad_out, eps)
    assert _unchanged((x, gamma, grad_out), copies)
    expected = independent.layer_norm_backward(x, gamma, grad_out, eps)
    for g, e, shape in zip(got, expected, (x.shape, (d,), (d,))):
        assert g.shape == shape and g.dtype == dtype
        np.testing.assert_allclose(g, e, **tol(dtype))
    np.testing.assert_allclose(got[0].astype(np.float64).sum(axis=-1), 0, atol=1e-4 if dtype == np.float32 else 1e-10)


@settings(PROFILE, max_examples=10)
@given(SEEDS, LEADS, st.integers(1, 5), st.sampled_from([1e-5, 0.5]))
def test_layer_norm_backward_equals_finite_differences(seed, lead, d, eps):
    rng = np.random.default_rng(seed)
    x, gamma, beta = _ln_inputs(rng, (*lead, 2, d), np.float64)
    grad_out = rng.normal(size=x.shape)
    got = dict(zip(("x", "gamma", "beta"), ref.layer_norm_backward(x, gamma, grad_out, eps)))
    numeric = _central_differences(lambda x, g, b: np.sum(grad_out * ref.layer_norm(x, g, b, eps)), [x, gamma, beta])
    _close_to_differences(got, dict(zip(("x", "gamma", "beta"), numeric)))


# ---------------------------------------------------------------------------------------------------- GELU, MLP
@settings(PROFILE)
@given(SEEDS, LEADS, st.integers(1, 8), DTYPES)
def test_gelu_backward_equals_the_complex_step_derivative(seed, lead, n, dtype):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-6, 6, size=(*lead, n))
    x.reshape(-1)[:3] = (0.0, 12.0, -12.0)[:x.size]
    x, grad_out = x.astype(dtype), rng.normal(size=x.shape).astype(dtype)
    got = ref.gelu_backward(x, grad_out)
    assert got.dtype == dtype and got.shape == x.shape
    expected = grad_out * independent.gelu_derivative(x)
    # float32's tanh form rounds 1 + tanh(u) and 1 - tanh(u)^2 where tanh(u) is near -1 or 1: its slope is off by up
    # to about 1.3e-6 there (the slope itself near 0 for x < -4), so the allowance scales with grad_out
    rtol, atol = (1e-4, 2e-6) if dtype == np.float32 else (1e-12, 1e-14)
    assert np.all(np.abs(got - expected) <= rtol * np.abs(expected) + atol * np.maximum(np.abs(grad_out), 1))


def test_gelu_is_near_the_exact_erf_form_and_its_derivative_near_finite_differences():
    x = np.linspace(-8, 8, 161)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    assert np.max(np.abs(ref.gelu(x) - exact)) < 1e-3  # the tanh form approximates the erf form closely
    numeric = (ref.gelu(x + 1e-6) - ref.gelu(x - 1e-6)) / 2e-6
    np.testing.assert_allclose(ref.gelu_backward(x, np.ones_like(x)), numeric, atol=1e-8)


def _mlp_inputs(rng, lead, T, d_model, d_ff, dtype):
    x = rng.normal(size=(*lead, T, d_model))
    W_1, W_2 = rng.normal(size=(d_model, d_ff)) / math.sqrt(d_model), rng.normal(size=(d_ff, d_model)) / math.sqrt(d_ff)
    b_1, b_2 = 0.5 * rng.normal(size=d_ff), 0.5 * rng.normal(size=d_model)
    return tuple(a.astype(dtype) for a in (x, W_1, b_1, W_2, b_2, rng.normal(size=x.shape)))


@settings(PROFILE)
@given(SEEDS, LEADS, st.integers(1, 4), st.integers(1, 5), st.integers(1, 6), DTYPES)
def test_mlp_backward_equals_a_per_position_jacobian(seed, lead, T, d_model, d_ff, dtype):
    inputs = _mlp_inputs(np.random.default_rng(seed), lead, T, d_model, d_ff, dtype)
    copies = [a.copy() for a in inputs]
    got = ref.mlp_backward(*inputs)
    assert _unchanged(inputs, copies)
    expected = independent.mlp_backward(*inputs)
    assert sorted(got) == sorted(MLP_KEYS)
    for name, a in zip(MLP_KEYS, inputs):
        assert got[name].shape == a.shape and got[name].dtype == dtype, name
        np.testing.assert_allclose(got[name], expected[name], **tol(dtype), err_msg=name)


@settings(PROFILE, max_examples=8)
@given(SEEDS, LEADS, st.integers(1, 3), st.integers(1, 4), st.integers(1, 5))
def test_mlp_backward_equals_finite_differences(seed, lead, T, d_model, d_ff):
    *weights, grad_out = _mlp_inputs(np.random.default_rng(seed), lead, T, d_model, d_ff, np.float64)
    numeric = _central_differences(lambda *a: np.sum(grad_out * ref.mlp(*a)), weights)
    _close_to_differences(ref.mlp_backward(*weights, grad_out), dict(zip(MLP_KEYS, numeric)))


# ----------------------------------------------------------------------------------------------------- the loss
@settings(PROFILE)
@given(SEEDS, LEADS, st.integers(1, 5), st.integers(2, 9), DTYPES, st.sampled_from([0.0, 1000.0, -1000.0]))
def test_cross_entropy_equals_a_position_loop_and_stays_finite_far_out(seed, lead, T, n_vocab, dtype, shift):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(*lead, T, n_vocab)) * 3 + shift).astype(dtype)
    targets = rng.integers(0, n_vocab, size=(*lead, T))
    copies = logits.copy(), targets.copy()
    loss, grad = ref.cross_entropy(logits, targets)
    assert _unchanged((logits, targets), copies)
    assert type(loss) is float and math.isfinite(loss) and loss >= 0
    assert grad.shape == logits.shape and grad.dtype == dtype and np.all(np.isfinite(grad))
    e_loss, e_grad = independent.cross_entropy(logits, targets)
    assert loss == pytest.approx(e_loss, rel=1e-4 if dtype == np.float32 else 1e-12, abs=1e-5)
    np.testing.assert_allclose(grad, e_grad, rtol=1e-3 if dtype == np.float32 else 1e-9,
                               atol=1e-6 if dtype == np.float32 else 1e-13)
    np.testing.assert_allclose(grad.astype(np.float64).sum(axis=-1), 0, atol=1e-6)  # each row: p sums to 1


@settings(PROFILE, max_examples=10)
@given(SEEDS, LEADS, st.integers(1, 4), st.integers(2, 6))
def test_cross_entropy_gradient_equals_finite_differences(seed, lead, T, n_vocab):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(*lead, T, n_vocab)) * 2
    targets = rng.integers(0, n_vocab, size=(*lead, T))
    (numeric,) = _central_differences(lambda z: ref.cross_entropy(z, targets)[0], [logits])
    _close_to_differences({"logits": ref.cross_entropy(logits, targets)[1]}, {"logits": numeric})


def test_cross_entropy_known_values_and_shape_check():
    loss, grad = ref.cross_entropy(np.zeros((2, 4)), np.array([0, 3]))
    assert loss == pytest.approx(math.log(4), rel=1e-15)
    np.testing.assert_allclose(grad, [[-0.375, 0.125, 0.125, 0.125], [0.125, 0.125, 0.125, -0.375]])
    loss, _ = ref.cross_entropy(np.array([[1000.0, 0.0]]), np.array([0]))
    assert loss == pytest.approx(math.log1p(math.exp(-1000.0)), abs=1e-300)
    with pytest.raises(ValueError):
        ref.cross_entropy(np.zeros((2, 3, 4)), np.zeros((3, 2), dtype=int))


# ---------------------------------------------------------------------------------------------- the embedding
@settings(PROFILE)
@given(SEEDS, LEADS, st.integers(1, 8), st.integers(1, 5), st.integers(2, 9), DTYPES)
def test_embedding_backward_collects_repeated_tokens(seed, lead, T, d_model, n_vocab, dtype):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, max(n_vocab // 2, 1), size=(*lead, T))  # half the kinds: many repeats
    tokens.reshape(-1)[0] = tokens.reshape(-1)[-1]  # a repeat at least once, when there are two positions
    grad_x = rng.normal(size=(*tokens.shape, d_model)).astype(dtype)
    copies = tokens.copy(), grad_x.copy()
    got = ref.embedding_backward(tokens, grad_x, n_vocab)
    assert _unchanged((tokens, grad_x), copies)
    assert got.shape == (n_vocab, d_model) and got.dtype == dtype
    np.testing.assert_allclose(got, independent.embedding_backward(tokens, grad_x, n_vocab), **tol(dtype))
    unseen = np.setdiff1d(np.arange(n_vocab), tokens)
    assert not got[unseen].any()


def test_embedding_backward_equals_finite_differences_of_a_lookup():
    rng = np.random.default_rng(3)
    tokens, grad_x = np.array([[2, 0, 2, 2], [1, 2, 0, 0]]), rng.normal(size=(2, 4, 3))
    E = rng.normal(size=(5, 3))
    (numeric,) = _central_differences(lambda E: np.sum(grad_x * E[tokens]), [E])
    np.testing.assert_allclose(ref.embedding_backward(tokens, grad_x, 5), numeric, atol=1e-8)
    with pytest.raises(ValueError):
        ref.embedding_backward(tokens, grad_x, 0)


# ------------------------------------------------------------------------------------------------------ a block
def random_block(rng, d_model, d_ff, dtype=np.float64):
    s = 1 / math.sqrt(d_model)
    block = {"gamma_1": 1 + 0.3 * rng.normal(size=d_model), "beta_1": 0.3 * rng.normal(size=d_model),
             "gamma_2": 1 + 0.3 * rng.normal(size=d_model), "beta_2": 0.3 * rng.normal(size=d_model),
             "W_1": rng.normal(size=(d_model, d_ff)) * s, "b_1": 0.3 * rng.normal(size=d_ff),
             "W_2": rng.normal(size=(d_ff, d_model)) / math.sqrt(d_ff), "b_2": 0.3 * rng.normal(size=d_model)}
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        block[name] = rng.normal(size=(d_model, d_model)) * s
    return {k: block[k].astype(dtype) for k in BLOCK_KEYS}


def _block_inputs(seed, lead, T, n_heads, d_head, d_ff, masked, dtype=np.float64):
    rng = np.random.default_rng(seed)
    d_model = n_heads * d_head
    x = rng.normal(size=(*lead, T, d_model)).astype(dtype)
    mask = np.triu(np.ones((T, T), dtype=bool), k=1) if masked else None
    return x, random_block(rng, d_model, d_ff, dtype), rng.normal(size=x.shape).astype(dtype), mask


@settings(PROFILE, max_examples=12)
@given(SEEDS, LEADS, st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.integers(1, 5), st.booleans())
def test_block_forward_equals_the_independent_parts(seed, lead, T, n_heads, d_head, d_ff, masked):
    x, block, _, mask = _block_inputs(seed, lead, T, n_heads, d_head, d_ff, masked)
    out, weights = ref.block_forward(x, block, n_heads, mask)
    assert weights.shape == (*lead, n_heads, T, T)
    np.testing.assert_allclose(out, independent.block_forward(x, block, n_heads, mask), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("masked", [False, True])
@settings(PROFILE, max_examples=5)
@given(SEEDS, st.sampled_from([(), (2,)]), st.integers(1, 3), st.sampled_from([(1, 3), (2, 2)]), st.integers(1, 4))
def test_block_backward_equals_finite_differences_for_every_array(masked, seed, lead, T, heads, d_ff):
    n_heads, d_head = heads
    x, block, grad_out, mask = _block_inputs(seed, lead, T, n_heads, d_head, d_ff, masked)
    copies = {k: v.copy() for k, v in block.items()}
    got = ref.block_backward(x, block, n_heads, grad_out, mask)
    assert all(np.array_equal(block[k], copies[k]) for k in BLOCK_KEYS)
    assert sorted(got) == sorted(("x", *BLOCK_KEYS))

    def loss(x, *arrays):
        return np.sum(grad_out * ref.block_forward(x, dict(zip(BLOCK_KEYS, arrays)), n_heads, mask)[0])

    numeric = _central_differences(loss, [x, *(block[k] for k in BLOCK_KEYS)])
    _close_to_differences(got, dict(zip(("x", *BLOCK_KEYS), numeric)))


def test_block_backward_keeps_float32_and_agrees_with_float64():
    x, block, grad_out, mask = _block_inputs(5, (3,), 4, 2, 3, 7, True)
    wide = ref.block_backward(x, block, 2, grad_out, mask)
    narrow = ref.block_backward(x.astype(np.float32), {k: v.astype(np.float32) for k, v in block.items()}, 2,
                                grad_out.astype(np.float32), mask)
    for name in ("x", *BLOCK_KEYS):
        assert narrow[name].dtype == np.float32, name
        np.testing.assert_allclose(narrow[name], wide[name], rtol=2e-3, atol=2e-4, err_msg=name)


# ---------------------------------------------------------------------------------------------------- sampling
SAMPLING_CASES = [(1.0, None), (0.5, None), (1.7, 5), (1.0, 3), (2.0, 1), (1.0, 40)]


def _fits(counts, p, z=5.5):
    """Every token's count within z standard deviations of its expected count (a right sampler fails about 1 time
    in 10 million per token), and never a token of probability 0."""
    n = counts.sum()
    if np.any(counts[p == 0]):
        return False
    return bool(np.all(np.abs(counts - n * p) <= z * np.sqrt(n * p * (1 - p)) + 1))


@pytest.mark.parametrize("temperature, top_k", SAMPLING_CASES)
def test_next_token_probabilities_equals_a_sorted_loop(temperature, top_k):
    rng = np.random.default_rng(11)
    for logits in (rng.normal(size=13) * 2, rng.normal(size=7) - 40.0, np.array([1.0, 3.0, 3.0, -2.0, 3.0])):
        p = ref.next_token_probabilities(logits, temperature, top_k)
        np.testing.assert_allclose(p, independent.next_token_probabilities(logits, temperature, top_k), atol=1e-14)
        assert p.sum() == pytest.approx(1.0) and np.count_nonzero(p) == min(top_k or logits.size, logits.size)


@pytest.mark.parametrize("temperature, top_k", SAMPLING_CASES)
def test_sample_next_draws_follow_the_probabilities(temperature, top_k):
    rng = np.random.default_rng(7)
    logits = rng.normal(size=12) * 1.5
    copy = logits.copy()
    draws_rng = np.random.default_rng(int(rng.integers(2**31)))
    draws = [ref.sample_next(logits, draws_rng, temperature, top_k) for _ in range(4000)]
    assert np.array_equal(logits, copy) and all(type(t) is int for t in draws)
    p = ref.next_token_probabilities(logits, temperature, top_k)
    counts = np.bincount(draws, minlength=logits.size)
    assert _fits(counts, p)
    assert set(np.flatnonzero(4000 * p >= 10)) <= set(np.flatnonzero(counts))  # the likely tokens all drawn
    if top_k is not None and top_k < logits.size:
        assert set(draws) <= set(np.argsort(-logits)[:top_k].tolist())


def test_sample_next_at_temperature_0_is_the_argmax_and_uses_only_rng():
    rng = np.random.default_rng(0)
    logits = np.array([0.5, 2.0, -1.0, 2.0])  # a tie: the first of the largest
    assert {ref.sample_next(logits, rng, 0.0) for _ in range(50)} == {1}
    assert ref.next_token_probabilities(logits, 0.0).tolist() == [0, 1, 0, 0]
    draws = [[ref.sample_next(logits, np.random.default_rng(5), 1.3, 3) for _ in range(3)] for _ in range(2)]
    assert draws[0] == draws[1]
    with pytest.raises(ValueError):
        ref.sample_next(logits, rng, -1.0)
    with pytest.raises(ValueError):
        ref.sample_next(logits, rng, 1.0, 0)


# ---------------------------------------------------------------------------------------- the model, generation
def random_model(rng, n_vocab, d_model, d_ff, n_blocks, T_max, dtype=np.float64):
    return {"E": rng.normal(size=(n_vocab, d_model)).astype(dtype),
            "P": (0.5 * rng.normal(size=(T_max, d_model))).astype(dtype),
            "blocks": [random_block(rng, d_model, d_ff, dtype) for _ in range(n_blocks)],
            "gamma_f": (1 + 0.3 * rng.normal(size=d_model)).astype(dtype),
            "beta_f": (0.3 * rng.normal(size=d_model)).astype(dtype),
            "W_U": (rng.normal(size=(d_model, n_vocab)) * 2 / math.sqrt(d_model)).astype(dtype)}


@pytest.mark.parametrize("n_blocks, n_heads", [(1, 1), (2, 2), (3, 4)])
def test_the_cached_model_step_equals_the_whole_model_at_every_position(n_blocks, n_heads):
    rng = np.random.default_rng(n_blocks)
    params = random_model(rng, 11, 8, 12, n_blocks, 9)
    tokens = rng.integers(0, 11, size=9)
    whole = ref.gpt_logits(params, n_heads, tokens)
    assert whole.shape == (9, 11)
    np.testing.assert_allclose(whole, independent.gpt_logits(params, n_heads, tokens), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ref.gpt_logits(params, n_heads, np.stack([tokens, tokens[::-1]]))[1],
                               ref.gpt_logits(params, n_heads, tokens[::-1]), rtol=1e-12, atol=1e-12)
    cache = ref.empty_cache(params, n_heads)
    for t, token in enumerate(tokens):
        before = [(k.copy(), v.copy()) for k, v in cache]
        logits, longer = ref.model_step(params, n_heads, token, cache)
        assert all(np.array_equal(k, k0) and np.array_equal(v, v0) for (k, v), (k0, v0) in zip(cache, before))
        assert [k.shape for k, _ in longer] == [(n_heads, t + 1, 8 // n_heads)] * n_blocks
        np.testing.assert_allclose(logits, whole[t], rtol=1e-10, atol=1e-12, err_msg=f"position {t}")
        cache = longer


def test_greedy_generate_is_argmax_decoding_through_the_whole_model():
    rng = np.random.default_rng(4)
    params = random_model(rng, 13, 6, 10, 2, 12)
    for prompt in ([3], [5, 1, 12, 0]):
        tokens = list(prompt)
        while len(tokens) < 12:
            tokens.append(int(np.argmax(ref.gpt_logits(params, 2, tokens)[-1])))
        got = ref.generate(params, 2, prompt, 12 - len(prompt), np.random.default_rng(0), temperature=0.0)
        assert got == tokens and all(type(t) is int for t in got)
    with pytest.raises(ValueError):
        ref.generate(params, 2, [], 3, np.random.default_rng(0))
    with pytest.raises(ValueError):
        ref.generate(params, 2, [1, 2], 11, np.random.default_rng(0))


def test_sampled_generate_draws_each_token_from_the_whole_models_distribution():
    """With the same generator, generate's draws are sample_next's on gpt_logits of the tokens so far."""
    rng = np.random.default_rng(8)
    params = random_model(rng, 9, 6, 10, 2, 10)
    got = ref.generate(params, 3, [4, 2], 8, np.random.default_rng(42), temperature=0.9, top_k=4)
    replay_rng, tokens = np.random.default_rng(42), [4, 2]
    while len(tokens) < 10:
        tokens.append(ref.sample_next(ref.gpt_logits(params, 3, tokens)[-1], replay_rng, 0.9, 4))
    assert got == tokens


# ------------------------------------------------------------------------------------------------ take apart
@settings(PROFILE)
@given(SEEDS, LEADS, st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), DTYPES, st.data())
def test_ablate_head_zeroes_only_that_heads_columns(seed, lead, T, n_heads, d_head, dtype, data):
    rng = np.random.default_rng(seed)
    head = data.draw(st.integers(0, n_heads - 1))
    heads = rng.normal(size=(*lead, T, n_heads * d_head)).astype(dtype)
    copy = heads.copy()
    got = ref.ablate_head(heads, n_heads, head)
    assert np.array_equal(heads, copy) and got.dtype == dtype and got.shape == heads.shape
    cols = np.arange(heads.shape[-1]) // d_head == head
    assert not got[..., cols].any()
    assert np.array_equal(got[..., ~cols], heads[..., ~cols])
    W_O = rng.normal(size=(n_heads * d_head, 5))
    others = sum(heads[..., h * d_head:(h + 1) * d_head] @ W_O[h * d_head:(h + 1) * d_head] for h in range(n_heads)
                 if h != head)
    np.testing.assert_allclose(got @ W_O, np.broadcast_to(others, got.shape[:-1] + (5,)), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        ref.ablate_head(heads, n_heads, n_heads)


@settings(PROFILE)
@given(SEEDS, st.integers(1, 4), st.integers(1, 3))
def test_k_composition_is_between_0_and_1_and_equals_traces_of_full_circuits(seed, n_heads, d_head):
    rng = np.random.default_rng(seed)
    d_model = n_heads * d_head
    Ws = [rng.normal(size=(d_model, d_model)) for _ in range(4)]
    copies = [W.copy() for W in Ws]
    got = ref.k_composition(*Ws, n_heads)
    assert _unchanged(Ws, copies)
    assert got.shape == (n_heads, n_heads) and np.all(got >= 0) and np.all(got <= 1 + 1e-12)
    np.testing.assert_allclose(got, independent.k_composition(*Ws, n_heads), rtol=1e-9)
    for c in (0.01, 3.0, -2.0):  # scaling any of the four weights scales W_QK or W_OV: the ratio stays
        np.testing.assert_allclose(ref.k_composition(Ws[0] * c, *Ws[1:], n_heads), got, rtol=1e-10)
        np.testing.assert_allclose(ref.k_composition(*Ws[:3], Ws[3] * c, n_heads), got, rtol=1e-10)
    narrow = ref.k_composition(*(W.astype(np.float32) for W in Ws), n_heads)
    assert narrow.dtype == np.float32
    np.testing.assert_allclose(narrow, got, rtol=1e-4, atol=1e-5)


def test_k_composition_is_1_where_the_keys_read_exactly_what_a_head_writes_and_0_where_they_cannot():
    rng = np.random.default_rng(2)
    W_Q, W_K, W_V, W_O = (rng.normal(size=(4, 4)) for _ in range(4))
    W_K[:, 2] = 3.0 * W_O[1, :]  # d_head = 1: head 2's keys read along head 1's output direction
    W_K[:, 3] = np.linalg.svd(W_O[0:1, :])[2][-1]  # head 3's keys orthogonal to head 0's output direction
    scores = ref.k_composition(W_Q, W_K, W_V, W_O, 4)
    assert scores[2, 1] == pytest.approx(1.0, rel=1e-12)
    assert scores[3, 0] == pytest.approx(0.0, abs=1e-12)
    W_Q, W_K, W_V, W_O = (rng.normal(size=(6, 6)) for _ in range(4))  # the hidden test's construction, d_head 2
    W_K[:, 2:4] = (W_V[:, 0:2] @ W_O[0:2, :]).T @ rng.normal(size=(6, 2))
    scores = ref.k_composition(W_Q, W_K, W_V, W_O, 3)
    assert scores[1, 0] > 0.5 and scores[1, 0] == scores.max()


# ------------------------------------------------------------------------------------------- the alternatives
GRADED = ("layer_norm", "layer_norm_backward", "gelu_backward", "mlp_backward", "cross_entropy", "embedding_backward",
          "block_backward", "sample_next", "generate", "ablate_head", "k_composition")
AT_LEAST_THREE = ("layer_norm_backward", "mlp_backward", "cross_entropy", "block_backward", "sample_next",
                  "k_composition")
GIVEN = ("softmax", "split_heads", "concat_heads", "multi_head_attention", "multi_head_attention_backward",
         "decode_step", "kv_cache_append", "gelu", "mlp", "block_forward", "empty_cache", "model_step")


ALTERNATIVES = [(a.id, a.cell, a.source) for a in alternatives.of_lesson(course.lesson_numbered("09"))]


def _learner_function(cell, source):
    """The alternative's function, defined in the names a learner's notebook has: np, math, the lesson's given
    functions and every graded one (not next_token_probabilities, which learners do not have, nor gpt_logits, which
    generate may not call)."""
    namespace = {"np": np, "math": math, **{n: getattr(ref, n) for n in (*GIVEN, *GRADED)}}
    exec(compile(source, f"<alternative {cell}>", "exec"), namespace)
    return namespace[cell]


def test_every_graded_cell_has_its_alternatives_each_a_whole_cell():
    ids = [a[0] for a in ALTERNATIVES]
    assert len(ids) == len(set(ids))
    count = {cell: sum(a[1] == cell for a in ALTERNATIVES) for cell in GRADED}
    assert {c: n for c, n in count.items() if n < (3 if c in AT_LEAST_THREE else 2)} == {}
    assert {a[1] for a in ALTERNATIVES} <= set(GRADED)
    for id_, cell, source in ALTERNATIVES:
        assert re.findall(r"^def (\w+)", source, re.M) == [cell], id_
        assert ast.get_docstring(ast.parse(source).body[0]), id_
        assert not re.search(r"\b(next_token_probabilities|gpt_logits)\b", source), id_


def _inputs(cell, rng, dtype):
    """(args, kwargs, outputs, rtol, atol) of one random call of ``cell``, sized like the hidden tests."""
    B, T, half, d_ff = (int(v) for v in rng.choice((2, 3, 4, 5, 6, 7, 9), size=4, replace=False))
    d_model = 2 * half
    lead = (B,) if rng.random() < 0.5 else ()
    loose = dtype == np.float32
    if cell == "layer_norm":
        args = _ln_inputs(rng, (*lead, T, d_model), dtype, constant_row=bool(lead))
        return args, {"eps": 0.5} if rng.random() < 0.3 else {}, None, *((1e-4, 1e-5) if loose else (1e-9, 1e-12))
    if cell == "layer_norm_backward":
        x, gamma, _ = _ln_inputs(rng, (*lead, T, d_model), dtype, constant_row=bool(lead))
        return (x, gamma, rng.normal(size=x.shape).astype(dtype)), {}, 3, *((1e-3, 1e-4) if loose else (1e-8, 1e-10))
    if cell == "gelu_backward":
        x = rng.uniform(-4, 4, size=(*lead, T, d_ff))
        x.reshape(-1)[:3] = (0.0, 12.0, -12.0)
        return ((x.astype(dtype), rng.normal(size=x.shape).astype(dtype)), {}, None,
                *((1e-4, 1e-6) if loose else (1e-9, 1e-12)))
    if cell == "mlp_backward":
        return (_mlp_inputs(rng, lead, T, d_model, d_ff, dtype), {}, MLP_KEYS,
                *((1e-3, 1e-4) if loose else (1e-8, 1e-10)))
    if cell == "cross_entropy":
        n_vocab = int(rng.integers(10, 30))
        logits = rng.normal(size=(*lead, T, n_vocab)) * 3 + (1000.0 if rng.random() < 0.4 else 0.0)
        return ((logits.astype(dtype), rng.integers(0, n_vocab, size=(*lead, T))), {}, 2,
                *((1e-4, 1e-6) if loose else (1e-8, 1e-12)))
    if cell == "embedding_backward":
        n_vocab = int(rng.integers(12, 20))
        tokens = rng.integers(0, n_vocab // 2, size=(*lead, T + 3))
        tokens.reshape(-1)[:2] = tokens.reshape(-1)[2]
        grad_x = rng.normal(size=(*tokens.shape, d_model)).astype(dtype)
        return (tokens, grad_x, n_vocab), {}, None, *((1e-5, 1e-6) if loose else (1e-10, 1e-12))
    if cell == "block_backward":
        x, block, grad_out, mask = _block_inputs(int(rng.integers(2**31)), lead, T, 2, half, d_ff, rng.random() < 0.6,
                                                 dtype)
        return ((x, block, 2, grad_out), {} if mask is None else {"mask": mask}, ("x", *BLOCK_KEYS),
                *((2e-3, 2e-4) if loose else (1e-8, 1e-10)))
    if cell == "ablate_head":
        n_heads = 3
        heads = rng.normal(size=(*lead, T, n_heads * half)).astype(dtype)
        return (heads, n_heads, int(rng.integers(n_heads))), {}, None, 0, 0
    if cell == "k_composition":
        n_heads, d_head = [(2, 3), (3, 2), (4, 3), (1, 5)][int(rng.integers(4))]
        Ws = [(rng.normal(size=(n_heads * d_head,) * 2) / math.sqrt(n_heads * d_head)).astype(dtype) for _ in range(4)]
        if n_heads > 1 and rng.random() < 0.5:
            Ws[1][:, d_head:2 * d_head] = (Ws[2][:, :d_head] @ Ws[3][:d_head]).T @ rng.normal(size=(len(Ws[0]), d_head))
        return tuple(Ws), {"n_heads": n_heads}, None, *((1e-4, 1e-6) if loose else (1e-9, 1e-12))
    raise KeyError(cell)


def _parts(result, outputs):
    if outputs is None:
        return {"result": result}
    if isinstance(outputs, int):
        assert isinstance(result, tuple) and len(result) == outputs
        return dict(enumerate(result))
    assert isinstance(result, dict) and sorted(result) == sorted(outputs)
    return result


def _snapshot(value):
    if isinstance(value, dict):
        return {k: np.array(v, copy=True) for k, v in value.items()}
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _same(value, snapshot):
    if isinstance(value, dict):
        return all(np.array_equal(value[k], snapshot[k]) for k in snapshot)
    return np.array_equal(value, snapshot) if isinstance(value, np.ndarray) else True


NUMERIC = [a for a in ALTERNATIVES if a[1] not in ("sample_next", "generate")]


@pytest.mark.parametrize("alt_id, cell, source", NUMERIC, ids=[a[0] for a in NUMERIC])
def test_each_alternative_equals_the_reference(alt_id, cell, source):
    fn = _learner_function(cell, source)
    for seed in range(5):
        for dtype in (np.float64, np.float32):
            rng = np.random.default_rng([seed, 9, int(dtype == np.float32)])
            args, kwargs, outputs, rtol, atol = _inputs(cell, rng, dtype)
            snapshots = [_snapshot(a) for a in args]
            got = _parts(fn(*args, **kwargs), outputs)
            assert all(_same(a, s) for a, s in zip(args, snapshots)), f"{alt_id} modified an input"
            expected = _parts(getattr(ref, cell)(*args, **kwargs), outputs)
            for name, e in expected.items():
                g = got[name]
                where = f"{alt_id}, seed {seed}, {np.dtype(dtype).name}, {name}"
                if isinstance(e, float):
                    assert type(g) is float and g == pytest.approx(e, rel=rtol, abs=atol), where
                    continue
                assert isinstance(g, np.ndarray) and g.shape == e.shape and g.dtype == e.dtype, where
                np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=where)


SAMPLERS = [a for a in ALTERNATIVES if a[1] == "sample_next"]


@pytest.mark.parametrize("alt_id, cell, source", SAMPLERS, ids=[a[0] for a in SAMPLERS])
def test_each_sampling_alternative_draws_from_the_references_distribution(alt_id, cell, source):
    fn = _learner_function(cell, source)
    cases = [(1.0, None, 0.0), (0.5, None, 0.0), (1.7, 5, 0.0), (1.0, 3, -40.0), (0.0, None, 0.0)]
    for seed, (temperature, top_k, shift) in enumerate(cases):
        rng = np.random.default_rng([seed, 17])
        logits = rng.normal(size=int(rng.integers(12, 24))) * 1.5 + shift
        copy = logits.copy()
        draws_rng = np.random.default_rng(seed)
        draws = [fn(logits, draws_rng, temperature, top_k) for _ in range(2000)]
        assert np.array_equal(logits, copy) and all(type(t) is int for t in draws), alt_id
        assert _fits(np.bincount(draws, minlength=logits.size), ref.next_token_probabilities(logits, temperature,
                                                                                             top_k)), (alt_id, seed)
        again = np.random.default_rng(seed)
        assert [fn(logits, again, temperature, top_k) for _ in range(20)] == draws[:20], alt_id


GENERATORS = [a for a in ALTERNATIVES if a[1] == "generate"]


@pytest.mark.parametrize("alt_id, cell, source", GENERATORS, ids=[a[0] for a in GENERATORS])
def test_each_generate_alternative_gives_the_references_tokens(alt_id, cell, source):
    """With the reference sample_next standing in, the same generator gives the same tokens."""
    fn = _learner_function(cell, source)
    for seed in range(5):
        rng = np.random.default_rng([seed, 23])
        n_vocab, T_max = int(rng.integers(11, 17)), int(rng.integers(14, 20))
        params = random_model(rng, n_vocab, 8, 12, 2, T_max)
        prompt = [int(t) for t in rng.integers(0, n_vocab, size=int(rng.integers(1, 6)))]
        for n_new, kwargs in ((6, {"temperature": 0.0}), (7, {"temperature": 0.8}), (0, {}),
                              (T_max - len(prompt), {"temperature": 1.2, "top_k": 3})):
            got = fn(params, 2, np.array(prompt), n_new, np.random.default_rng(seed), **kwargs)
            expected = ref.generate(params, 2, prompt, n_new, np.random.default_rng(seed), **kwargs)
            assert got == expected and all(type(t) is int for t in got), (alt_id, seed, n_new, kwargs)
        for bad_prompt, n_new in (([], 3), (prompt, T_max - len(prompt) + 1)):
            with pytest.raises(ValueError):
                fn(params, 2, bad_prompt, n_new, np.random.default_rng(0))
