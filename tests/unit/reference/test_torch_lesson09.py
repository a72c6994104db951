"""Lesson 09's backward passes against torch.autograd, an implementation nobody here wrote: layer norm
(``F.layer_norm``), the MLP with GELU's tanh form (``F.gelu(approximate="tanh")``), the cross-entropy
(``F.cross_entropy``, logits near 1000 too) and a whole pre-norm block with and without the causal mask. Collected
only where torch is installed (``conftest.py`` beside this file); the course itself never needs torch."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from autograder import reference as ref
from autograder.reference.lesson09 import BLOCK_KEYS

CASES = [(0, ()), (1, (2,)), (2, (3, 2))]  # (seed, leading axes)


def tensors(*arrays):
    return [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]


def grads_of(out, grad_out, leaves):
    """d sum(grad_out * out) / d leaf for each leaf, as numpy arrays."""
    (out * torch.tensor(grad_out)).sum().backward()
    return [leaf.grad.numpy() for leaf in leaves]


@pytest.mark.parametrize("seed, lead", CASES)
@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_layer_norm_and_its_backward_equal_torch(seed, lead, eps):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(*lead, 4, 6)) * 2 + 1
    x.reshape(-1, 6)[0] = 0.7  # a constant row
    gamma, beta, grad_out = 1 + 0.5 * rng.normal(size=6), 0.5 * rng.normal(size=6), rng.normal(size=x.shape)
    leaves = tensors(x, gamma, beta)
    out = F.layer_norm(leaves[0], (6,), leaves[1], leaves[2], eps)
    np.testing.assert_allclose(ref.layer_norm(x, gamma, beta, eps), out.detach().numpy(), rtol=1e-10, atol=1e-12)
    for got, expected in zip(ref.layer_norm_backward(x, gamma, grad_out, eps), grads_of(out, grad_out, leaves)):
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("seed, lead", CASES)
def test_mlp_backward_equals_torch_with_gelus_tanh_form(seed, lead):
    rng = np.random.default_rng(seed)
    d_model, d_ff = 5, 7
    x = rng.normal(size=(*lead, 3, d_model)) * 2
    W_1, W_2 = rng.normal(size=(d_model, d_ff)), rng.normal(size=(d_ff, d_model))
    b_1, b_2, grad_out = rng.normal(size=d_ff), rng.normal(size=d_model), rng.normal(size=x.shape)
    leaves = tensors(x, W_1, b_1, W_2, b_2)
    out = F.gelu(leaves[0] @ leaves[1] + leaves[2], approximate="tanh") @ leaves[3] + leaves[4]
    np.testing.assert_allclose(ref.mlp(x, W_1, b_1, W_2, b_2), out.detach().numpy(), rtol=1e-10, atol=1e-12)
    got = ref.mlp_backward(x, W_1, b_1, W_2, b_2, grad_out)
    for name, expected in zip(("x", "W_1", "b_1", "W_2", "b_2"), grads_of(out, grad_out, leaves)):
        np.testing.assert_allclose(got[name], expected, rtol=1e-9, atol=1e-11, err_msg=name)


@pytest.mark.parametrize("seed, lead", CASES)
@pytest.mark.parametrize("shift", [0.0, 1000.0])
def test_cross_entropy_and_its_gradient_equal_torch(seed, lead, shift):
    rng = np.random.default_rng(seed)
    n_vocab = 11
    logits = rng.normal(size=(*lead, 5, n_vocab)) * 3 + shift
    targets = rng.integers(0, n_vocab, size=(*lead, 5))
    (leaf,) = tensors(logits)
    loss = F.cross_entropy(leaf.reshape(-1, n_vocab), torch.tensor(targets.reshape(-1)))  # the mean over positions
    loss.backward()
    got_loss, got_grad = ref.cross_entropy(logits, targets)
    assert got_loss == pytest.approx(loss.item(), rel=1e-12)
    np.testing.assert_allclose(got_grad, leaf.grad.numpy(), rtol=1e-9, atol=1e-14)


def torch_block(x, b, n_heads, mask):
    """A pre-norm block in torch: x1 = x + MHA(LN_1(x)), out = x1 + MLP(LN_2(x1)); heads as column blocks."""
    d_model = x.shape[-1]
    d_head = d_model // n_heads

    def heads(a):  # (..., T, d_model) -> (..., n_heads, T, d_head)
        return a.reshape(*a.shape[:-1], n_heads, d_head).transpose(-3, -2)

    h = F.layer_norm(x, (d_model,), b["gamma_1"], b["beta_1"], 1e-5)
    q, k, v = heads(h @ b["W_Q"]), heads(h @ b["W_K"]), heads(h @ b["W_V"])
    scores = q @ k.transpose(-1, -2) / math.sqrt(d_head)  # (..., n_heads, T, T)
    if mask is not None:
        scores = scores.masked_fill(torch.tensor(mask), float("-inf"))
    attended = torch.softmax(scores, dim=-1) @ v  # (..., n_heads, T, d_head)
    x1 = x + attended.transpose(-3, -2).reshape(x.shape) @ b["W_O"]  # (..., T, d_model)
    h2 = F.layer_norm(x1, (d_model,), b["gamma_2"], b["beta_2"], 1e-5)
    return x1 + F.gelu(h2 @ b["W_1"] + b["b_1"], approximate="tanh") @ b["W_2"] + b["b_2"]


@pytest.mark.parametrize("seed, lead", CASES)
@pytest.mark.parametrize("masked", [False, True])
def test_block_backward_equals_torch_for_every_array(seed, lead, masked):
    rng = np.random.default_rng(seed)
    n_heads, d_model, d_ff, T = 2, 6, 10, 4
    s = 1 / math.sqrt(d_model)
    block = {"gamma_1": 1 + 0.3 * rng.normal(size=d_model), "beta_1": 0.3 * rng.normal(size=d_model),
             "gamma_2": 1 + 0.3 * rng.normal(size=d_model), "beta_2": 0.3 * rng.normal(size=d_model),
             "W_1": rng.normal(size=(d_model, d_ff)) * s, "b_1": 0.3 * rng.normal(size=d_ff),
             "W_2": rng.normal(size=(d_ff, d_model)) / math.sqrt(d_ff), "b_2": 0.3 * rng.normal(size=d_model),
             **{name: rng.normal(size=(d_model, d_model)) * s for name in ("W_Q", "W_K", "W_V", "W_O")}}
    x, grad_out = rng.normal(size=(*lead, T, d_model)), rng.normal(size=(*lead, T, d_model))
    mask = np.triu(np.ones((T, T), dtype=bool), k=1) if masked else None
    names = ("x", *BLOCK_KEYS)
    leaves = tensors(x, *(block[k] for k in BLOCK_KEYS))
    out = torch_block(leaves[0], dict(zip(BLOCK_KEYS, leaves[1:])), n_heads, mask)
    np.testing.assert_allclose(ref.block_forward(x, block, n_heads, mask)[0], out.detach().numpy(), rtol=1e-10,
                               atol=1e-12)
    got = ref.block_backward(x, block, n_heads, grad_out, mask)
    for name, expected in zip(names, grads_of(out, grad_out, leaves)):
        np.testing.assert_allclose(got[name], expected, rtol=1e-9, atol=1e-11, err_msg=name)
