"""Lesson 09: a small GPT, built, trained, sampled and taken apart.

New names:
    gamma, beta          a layer norm's scale and shift, (d_model,) each
    W_1, b_1, W_2, b_2   the MLP's weights, (d_model, d_ff), (d_ff,), (d_ff, d_model), (d_model,)
    d_ff                 the MLP's hidden width (4 d_model here, as in the paper)
    n_vocab              number of token kinds; logits are (..., n_vocab)
    grad_X               dL/dX, the shape of X (lesson 07)
"""

from __future__ import annotations

import math

import numpy as np

from autograder.reference.arguments import positive_int
from autograder.reference.lesson01 import softmax
from autograder.reference.lesson02 import multi_head_attention
from autograder.reference.lesson06 import decode_step
from autograder.reference.lesson07 import multi_head_attention_backward

BLOCK_KEYS = ("gamma_1", "beta_1", "W_Q", "W_K", "W_V", "W_O", "gamma_2", "beta_2", "W_1", "b_1", "W_2", "b_2")

GELU_C = math.sqrt(2.0 / math.pi)  # the tanh form's constant (Hendrycks and Gimpel, 2016)


# ------------------------------------------------------------------------------------------------ layer norm
def layer_norm(x, gamma, beta, eps=1e-5):
    """Each row of x (the last axis) to mean 0 and variance 1 (the biased variance, as PyTorch), then * gamma + beta.

    x (..., d_model), gamma and beta (d_model,). float32 stays float32.
    """
    x = np.asarray(x)
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # (..., 1)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
    """(grad_x, grad_gamma, grad_beta) of out = layer_norm(x, gamma, beta, eps), given dL/dout.

    With x_hat = (x - mean) / sigma and g = grad_out * gamma, one row's gradient is
    (g - mean(g) - x_hat * mean(g * x_hat)) / sigma: the mean term because every entry moved the mean, the x_hat
    term because every entry moved the variance. grad_gamma and grad_beta sum over every leading axis.
    """
    x, grad_out = np.asarray(x), np.asarray(grad_out)
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    sigma = np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)  # (..., 1)
    x_hat = (x - mean) / sigma  # (..., d_model)
    g = grad_out * gamma  # (..., d_model): dL/dx_hat
    grad_x = (g - g.mean(axis=-1, keepdims=True) - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) / sigma
    rows = (-1, x.shape[-1])  # every leading axis into one: (N, d_model)
    return grad_x, (grad_out * x_hat).reshape(rows).sum(axis=0), grad_out.reshape(rows).sum(axis=0)


# ------------------------------------------------------------------------------------------------------ MLP
def gelu(x):
    """The tanh form of GELU: 0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2 / pi) (GPT-2's)."""
    x = np.asarray(x)
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * (x * x * x))))  # x * x * x: x ** 3 is ~200x slower


def gelu_backward(x, grad_out):
    """dL/dx of out = gelu(x), given dL/dout: grad_out times gelu's derivative at x, entry by entry."""
    x = np.asarray(x)
    t = np.tanh(GELU_C * (x + 0.044715 * (x * x * x)))
    slope = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3 * 0.044715 * x * x)
    return grad_out * slope


def mlp(x, W_1, b_1, W_2, b_2):
    """The position-wise feed-forward network: gelu(x W_1 + b_1) W_2 + b_2, (..., d_model) -> (..., d_model)."""
    return gelu(np.asarray(x) @ W_1 + b_1) @ W_2 + b_2  # (..., d_ff) -> (..., d_model)


def _summed_outer(a, b):
    """sum over every leading axis of a^T @ b: a (..., m), b (..., n) -> (m, n)."""
    return a.reshape(-1, a.shape[-1]).T @ b.reshape(-1, b.shape[-1])  # (m, N) @ (N, n) -> (m, n)


def mlp_backward(x, W_1, b_1, W_2, b_2, grad_out):
    """Gradients of mlp's output with respect to x and its four weights, given dL/dout.

    Returns {"x", "W_1", "b_1", "W_2", "b_2"}, each the shape of that input; the weights' gradients sum over every
    leading axis (batch and positions). The forward pass is recomputed.
    """
    x, grad_out = np.asarray(x), np.asarray(grad_out)
    pre = x @ W_1 + b_1  # (..., d_ff)
    hidden = gelu(pre)  # (..., d_ff)
    grad_hidden = grad_out @ np.swapaxes(W_2, -1, -2)  # (..., d_model) @ (d_model, d_ff) -> (..., d_ff)
    grad_pre = gelu_backward(pre, grad_hidden)  # (..., d_ff)
    return {"x": grad_pre @ np.swapaxes(W_1, -1, -2), "W_1": _summed_outer(x, grad_pre),
            "b_1": grad_pre.reshape(-1, grad_pre.shape[-1]).sum(axis=0), "W_2": _summed_outer(hidden, grad_out),
            "b_2": grad_out.reshape(-1, grad_out.shape[-1]).sum(axis=0)}


# ---------------------------------------------------------------------------------------------- the loss
def cross_entropy(logits, targets):
    """(loss, grad_logits): the mean over every position of -log softmax(logits)[target], and its gradient.

    logits (..., n_vocab), targets (...) integers in 0 .. n_vocab - 1. The log-probabilities are computed as
    logits - max - log(sum(exp(logits - max))), so large logits never overflow. grad_logits = (softmax(logits) -
    one_hot(targets)) / N, N the number of positions, the shape of logits and its dtype.
    """
    logits, targets = np.asarray(logits), np.asarray(targets)
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets must have the shape of logits without its last axis, {logits.shape[:-1]}, "
                         f"got {targets.shape}")
    shifted = logits - logits.max(axis=-1, keepdims=True)  # (..., n_vocab): the largest entry of a row is 0
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # (..., n_vocab)
    picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]  # (...)
    n = max(targets.size, 1)
    grad = np.exp(log_probs)  # (..., n_vocab): the probabilities
    np.put_along_axis(grad, targets[..., None], np.take_along_axis(grad, targets[..., None], axis=-1) - 1, axis=-1)
    return float(-picked.sum() / n), (grad / n).astype(logits.dtype, copy=False)


def embedding_backward(tokens, grad_x, n_vocab):
    """dL/dE of x = E[tokens], given dL/dx: row v collects the gradients of every position whose token is v (a
    token seen twice collects twice: ``np.add.at``, not ``grad_E[tokens] += grad_x``). tokens (...), grad_x
    (..., d_model) -> (n_vocab, d_model), grad_x's dtype."""
    tokens, grad_x = np.asarray(tokens), np.asarray(grad_x)
    positive_int("n_vocab", n_vocab)
    grad_E = np.zeros((n_vocab, grad_x.shape[-1]), dtype=grad_x.dtype)
    np.add.at(grad_E, tokens.reshape(-1), grad_x.reshape(-1, grad_x.shape[-1]))  # (N,), (N, d_model)
    return grad_E


# ------------------------------------------------------------------------------------------------- a block
def block_forward(x, block, n_heads, mask=None):
    """One pre-norm transformer block (GPT-2's): x1 = x + MHA(LN_1(x)), out = x1 + MLP(LN_2(x1)).

    x (..., T, d_model); ``block`` a dict of the arrays BLOCK_KEYS names. Returns out and the block's attention
    weights (..., n_heads, T, T).
    """
    b = block
    attended, weights = multi_head_attention(layer_norm(x, b["gamma_1"], b["beta_1"]), b["W_Q"], b["W_K"], b["W_V"],
                                             b["W_O"], n_heads, mask)
    x1 = x + attended  # (..., T, d_model): the residual stream after attention
    return x1 + mlp(layer_norm(x1, b["gamma_2"], b["beta_2"]), b["W_1"], b["b_1"], b["W_2"], b["b_2"]), weights


def block_backward(x, block, n_heads, grad_out, mask=None):
    """Every gradient of block_forward's out, given dL/dout: {"x", and each key of BLOCK_KEYS}.

    Where the stream splits (x1 goes both into the MLP's branch and straight on), the two gradients add; the same
    at x. The forward pass is recomputed.
    """
    b = block
    x, grad_out = np.asarray(x), np.asarray(grad_out)
    h1 = layer_norm(x, b["gamma_1"], b["beta_1"])  # (..., T, d_model)
    attended, _ = multi_head_attention(h1, b["W_Q"], b["W_K"], b["W_V"], b["W_O"], n_heads, mask)
    x1 = x + attended
    h2 = layer_norm(x1, b["gamma_2"], b["beta_2"])
    grads = {}
    through_mlp = mlp_backward(h2, b["W_1"], b["b_1"], b["W_2"], b["b_2"], grad_out)
    grad_h2, grads["gamma_2"], grads["beta_2"] = layer_norm_backward(x1, b["gamma_2"], through_mlp["x"])
    grad_x1 = grad_out + grad_h2  # straight on, plus through the MLP's branch
    through_attention = multi_head_attention_backward(h1, b["W_Q"], b["W_K"], b["W_V"], b["W_O"], n_heads, grad_x1,
                                                      mask)
    grad_h1, grads["gamma_1"], grads["beta_1"] = layer_norm_backward(x, b["gamma_1"], through_attention["x"])
    grads["x"] = grad_x1 + grad_h1  # straight on, plus through the attention's branch
    for key in ("W_Q", "W_K", "W_V", "W_O"):
        grads[key] = through_attention[key]
    for key in ("W_1", "b_1", "W_2", "b_2"):
        grads[key] = through_mlp[key]
    return grads


# ------------------------------------------------------------------------------------------------- the model
def gpt_logits(params, n_heads, tokens):
    """The whole model at once: logits (..., T, n_vocab) of every position of ``tokens`` (..., T), causal.

    params: "E" (n_vocab, d_model) token embeddings, "P" (T_max, d_model) learned positions, "blocks" a list of
    block dicts, "gamma_f" and "beta_f" the final layer norm, "W_U" (d_model, n_vocab).
    """
    tokens = np.asarray(tokens)
    T = tokens.shape[-1]
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)  # (T, T): True above the diagonal, the future
    x = params["E"][tokens] + params["P"][:T]  # (..., T, d_model)
    for block in params["blocks"]:
        x, _ = block_forward(x, block, n_heads, mask)
    return layer_norm(x, params["gamma_f"], params["beta_f"]) @ params["W_U"]  # (..., T, n_vocab)


def empty_cache(params, n_heads):
    """A KV cache with no token: per block, keys and values (n_heads, 0, d_head)."""
    d_head = params["E"].shape[1] // n_heads
    empty = np.zeros((n_heads, 0, d_head), dtype=params["E"].dtype)
    return [(empty, empty) for _ in params["blocks"]]


def model_step(params, n_heads, token, cache):
    """One token through the model with lesson 06's KV cache: (logits (n_vocab,) of the next token, the cache one
    token longer). The token's position is the cache's length. The caller's cache is not modified."""
    position = cache[0][0].shape[-2] if cache else 0
    x = (params["E"][int(token)] + params["P"][position])[None, :]  # (1, d_model)
    longer = []
    for block, (cache_k, cache_v) in zip(params["blocks"], cache):
        b = block
        attended, cache_k, cache_v = decode_step(layer_norm(x, b["gamma_1"], b["beta_1"]), cache_k, cache_v,
                                                 b["W_Q"], b["W_K"], b["W_V"], b["W_O"], n_heads, n_heads)
        x = x + attended  # (1, d_model)
        x = x + mlp(layer_norm(x, b["gamma_2"], b["beta_2"]), b["W_1"], b["b_1"], b["W_2"], b["b_2"])
        longer.append((cache_k, cache_v))
    return (layer_norm(x, params["gamma_f"], params["beta_f"]) @ params["W_U"])[0], longer  # (n_vocab,)


def generate(params, n_heads, prompt, n_new, rng, temperature=1.0, top_k=None):
    """The prompt followed by n_new tokens, each drawn by sample_next from the logits model_step gives after the
    token before it: a list of ints. Every token goes through model_step once (the prompt's too, to fill the
    cache); the full model is never recomputed."""
    tokens = [int(t) for t in prompt]
    if not tokens:
        raise ValueError("the prompt needs at least one token")
    if len(tokens) + n_new > params["P"].shape[0]:
        raise ValueError(f"the model has {params['P'].shape[0]} positions: a prompt of {len(tokens)} tokens can "
                         f"take at most {params['P'].shape[0] - len(tokens)} new ones, not {n_new}")
    cache = empty_cache(params, n_heads)
    for token in tokens:  # the prompt fills the cache; the last logits predict the first new token
        logits, cache = model_step(params, n_heads, token, cache)
    for _ in range(n_new):
        tokens.append(sample_next(logits, rng, temperature, top_k))
        logits, cache = model_step(params, n_heads, tokens[-1], cache)
    return tokens


# ---------------------------------------------------------------------------------------------- sampling
def next_token_probabilities(logits, temperature=1.0, top_k=None):
    """The distribution ``sample_next`` draws from: softmax(logits / temperature) over the top_k largest logits
    only (the others get probability 0); temperature 0 puts all of it on the largest (the first, on a tie)."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature < 0:
        raise ValueError(f"temperature must be 0 or more, got {temperature}")
    if top_k is not None:
        positive_int("top_k", top_k)
    n_vocab = logits.shape[-1]
    if temperature == 0:
        p = np.zeros(n_vocab)
        p[int(np.argmax(logits))] = 1.0
        return p
    z = logits / temperature
    if top_k is not None and top_k < n_vocab:
        kept = np.argsort(-z, kind="stable")[:top_k]  # the k largest
        z = np.where(np.isin(np.arange(n_vocab), kept), z, -np.inf)
    return softmax(z)


def sample_next(logits, rng, temperature=1.0, top_k=None):
    """One token drawn from next_token_probabilities(logits, temperature, top_k) with the generator ``rng``: an
    int. logits (n_vocab,)."""
    p = next_token_probabilities(logits, temperature, top_k)
    return int(min(np.searchsorted(np.cumsum(p), rng.random(), side="right"), np.flatnonzero(p)[-1]))


# ---------------------------------------------------------------------------------------------- take apart
def ablate_head(heads, n_heads, head):
    """A copy of the concatenated head outputs ``heads`` (..., T, d_model), before W_O, with head ``head``'s
    columns (head * d_head to (head + 1) * d_head, the layout of concat_heads) set to 0."""
    heads = np.array(heads)  # a copy: the caller's array stays
    d_head = heads.shape[-1] // n_heads
    if not 0 <= head < n_heads:
        raise ValueError(f"head must be in 0 .. {n_heads - 1}, got {head}")
    heads[..., head * d_head:(head + 1) * d_head] = 0
    return heads


def k_composition(W_Q, W_K, W_V_prev, W_O_prev, n_heads):
    """K-composition scores (Elhage et al., 2021): [i, j] for head i of a layer reading, in its keys, what head j of
    the layer before writes. (n_heads, n_heads).

    Head j's OV circuit is W_OV = W_V_prev[:, j] @ W_O_prev[j, :] (its slice of columns of W_V, of rows of W_O);
    head i's QK circuit W_QK = W_Q[:, i] @ W_K[:, i]^T. Keys that read head j's output score x W_QK (x W_OV)^T, so
    the score is ||W_QK W_OV^T||_F / (||W_QK||_F ||W_OV||_F), between 0 and 1.
    """
    d_model = np.shape(W_Q)[0]
    d_head = d_model // n_heads
    cols = [slice(h * d_head, (h + 1) * d_head) for h in range(n_heads)]
    W_QK = [W_Q[:, c] @ W_K[:, c].T for c in cols]  # each (d_model, d_model)
    W_OV = [W_V_prev[:, c] @ W_O_prev[c, :] for c in cols]  # each (d_model, d_model)
    return np.array([[np.linalg.norm(qk @ ov.T) / (np.linalg.norm(qk) * np.linalg.norm(ov)) for ov in W_OV]
                     for qk in W_QK])
