# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade_id": "intro"}
# # Lesson 09 · A small GPT: build it, train it, talk to it, take it apart
#
# Lesson 07's model had attention and nothing else. Here you complete the block every GPT stacks: a layer norm
# before each branch, an MLP after attention, residual connections around both. You write the backward pass of
# every new piece, check each one with finite differences, train a two-block model on real text (Python's own
# standard library, which your machine already has) until it beats a bigram baseline, make it write, and then
# take it apart: zero one head at a time and watch which one the model cannot do without.
#
# **Goals.** By the end of this lesson you can
# 1. derive the backward pass of layer norm, of an MLP with GELU, of cross-entropy and of an embedding lookup;
# 2. wire a whole block's backward pass: where the residual stream splits, the gradients add;
# 3. sample from a model with temperature and top-k, and decode with lesson 06's KV cache;
# 4. find an induction head by ablation and relate it to the head it reads from (K-composition).
#
# **Time needed:** about 100 minutes, two of them training. **You need:** lessons 01, 02, 06 and 07.
#
# **Names** (the [glossary](glossary.md) lists every one). `B` batch, `T` sequence length, `d_model`, `n_heads`,
# `d_head`, `W_Q, W_K, W_V, W_O` applied as `x @ W`, a boolean `mask` in which **True marks a blocked pair**,
# `grad_X` the gradient of the loss with respect to `X` (lesson 07). New here: `gamma`, `beta` (a layer norm's
# scale and shift), `W_1, b_1, W_2, b_2` (the MLP's weights), `d_ff` (the MLP's hidden width), `n_vocab` (the number
# of token kinds) and `logits`, the scores `(..., n_vocab)` the model gives each possible next token.

# %% nbgrader={"grade_id": "setup", "points": 0}
### BEGIN HIDDEN TESTS
import os as _os, sys as _sys  # noqa: E401  grading: never import from the submission's folder
_sys.path[:] = [p for p in _sys.path if p and _os.path.abspath(p) != _os.getcwd()]
__import__("autograder.kernel.hidden_cell")  # grading: loaded before any cell of the learner's below can break imports
### END HIDDEN TESTS
import os

# The model's matrices are small: one BLAS thread is fastest (threads cost more than they save). Set before numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import importlib.util
import math
import re
import time

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

from selfcheck_09 import (check_ablate_head, check_block_backward, check_cross_entropy,  # noqa: F401
                          check_embedding_backward, check_gelu_backward, check_generate, check_k_composition,
                          check_layer_norm, check_layer_norm_backward, check_mlp_backward, check_sample_next,
                          sample_probe)

# MHA_SHORT_TRAINING=1 (set by the grading command and the course's tests) trains for a few steps only.
SHORT = os.environ.get("MHA_SHORT_TRAINING") == "1"

# %% [markdown] nbgrader={"grade_id": "given_intro"}
# The pieces of lessons 01, 02, 06 and 07 this lesson builds on, given so that it stands on its own: attention and
# its backward pass, multi-head attention and its backward pass, and lesson 06's cached decoding step. Also given:
# GELU, the MLP's nonlinearity, and the MLP itself.

# %% nbgrader={"grade_id": "given"}
def softmax(x, axis=-1):
    """Stable softmax along `axis`; a row whose entries are all -inf gets all-zero weights (lesson 01)."""
    row_max = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - np.where(np.isfinite(row_max), row_max, 0))
    total = np.sum(e, axis=axis, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0).astype(e.dtype)


def scaled_dot_product_attention(Q, K, V, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V; mask True = blocked. Returns (out, weights) (lesson 01)."""
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])  # (..., T_q, T_k)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    weights = softmax(scores, axis=-1)  # (..., T_q, T_k)
    return weights @ V, weights  # (..., T_q, d_v), (..., T_q, T_k)


def split_heads(x, n_heads):
    """(..., T, d_model) -> (..., n_heads, T, d_head) (lesson 02)."""
    *lead, T, d_model = x.shape
    return np.swapaxes(x.reshape(*lead, T, n_heads, d_model // n_heads), -2, -3)  # (..., T, n_heads, d_head) swapped


def concat_heads(x):
    """(..., n_heads, T, d_head) -> (..., T, d_model) (lesson 02)."""
    *lead, n_heads, T, d_head = x.shape
    return np.swapaxes(x, -2, -3).reshape(*lead, T, n_heads * d_head)  # (..., T, n_heads, d_head) -> (..., T, d_model)


def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """Multi-head self-attention (lesson 02): (out (..., T, d_model), weights (..., n_heads, T, T))."""
    heads, weights = scaled_dot_product_attention(split_heads(x @ W_Q, n_heads), split_heads(x @ W_K, n_heads),
                                                  split_heads(x @ W_V, n_heads), mask)
    return concat_heads(heads) @ W_O, weights


def softmax_backward(weights, grad_weights, axis=-1):
    """dL/dscores of weights = softmax(scores) (lesson 07)."""
    return weights * (grad_weights - np.sum(weights * grad_weights, axis=axis, keepdims=True))


def scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None):
    """(dQ, dK, dV) of attention's out, given its weights and dL/dout (lesson 07)."""
    scale = 1.0 / math.sqrt(Q.shape[-1])
    grad_scores = softmax_backward(weights, grad_out @ np.swapaxes(V, -1, -2))  # (..., T_q, T_k)
    if mask is not None:
        grad_scores = np.where(mask, 0, grad_scores).astype(grad_scores.dtype)
    return (grad_scores @ K * scale, np.swapaxes(grad_scores, -1, -2) @ Q * scale,  # (..., T_q, d_k), (..., T_k, d_k)
            np.swapaxes(weights, -1, -2) @ grad_out)  # (..., T_k, d_v)


def multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None):
    """{"x", "W_Q", "W_K", "W_V", "W_O"}: every gradient of multi_head_attention's out (lesson 07)."""
    Q, K, V = (split_heads(x @ W, n_heads) for W in (W_Q, W_K, W_V))  # each (..., n_heads, T, d_head)
    heads, weights = scaled_dot_product_attention(Q, K, V, mask)
    rows = (-1, x.shape[-1])  # (B*T, d_model): every leading axis in one, as a weight's gradient sums over them all
    grads = {"W_O": concat_heads(heads).reshape(rows).T @ grad_out.reshape(rows)}  # (d_model, d_model)
    dQ, dK, dV = scaled_dot_product_attention_backward(Q, K, V, weights, split_heads(grad_out @ W_O.T, n_heads), mask)
    grad_x = 0
    for name, W, d in (("W_Q", W_Q, dQ), ("W_K", W_K, dK), ("W_V", W_V, dV)):
        d = concat_heads(d)  # (..., T, d_model)
        grads[name] = x.reshape(rows).T @ d.reshape(rows)  # (d_model, B*T) @ (B*T, d_model) -> (d_model, d_model)
        grad_x = grad_x + d @ W.T  # x feeds all three projections: their gradients add
    grads["x"] = grad_x
    return grads


def kv_cache_append(cache_k, cache_v, k, v):
    """The caches one token longer along axis -2 (lesson 06)."""
    return np.concatenate([cache_k, k], axis=-2), np.concatenate([cache_v, v], axis=-2)


def decode_step(x_t, cache_k, cache_v, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
    """One token of cached decoding (lesson 06): (out_t (..., 1, d_model), cache_k, cache_v), caches one longer."""
    q = split_heads(x_t @ W_Q, n_heads)  # (..., n_heads, 1, d_head)
    cache_k, cache_v = kv_cache_append(cache_k, cache_v, split_heads(x_t @ W_K, n_kv_heads),
                                       split_heads(x_t @ W_V, n_kv_heads))
    n_rep = n_heads // n_kv_heads
    head, _ = scaled_dot_product_attention(q, np.repeat(cache_k, n_rep, axis=-3), np.repeat(cache_v, n_rep, axis=-3))
    return concat_heads(head) @ W_O, cache_k, cache_v


GELU_C = math.sqrt(2.0 / math.pi)


def gelu(x):
    """GELU, tanh form (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). x * x * x, not x ** 3: numpy's
    power is many times slower on float32."""
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * (x * x * x))))


def mlp(x, W_1, b_1, W_2, b_2):
    """The position-wise feed-forward network: gelu(x W_1 + b_1) W_2 + b_2, (..., d_model) -> (..., d_model)."""
    return gelu(x @ W_1 + b_1) @ W_2 + b_2  # (..., d_ff) -> (..., d_model)

# %% [markdown] nbgrader={"grade_id": "ln_intro"}
# ## 1. Layer norm
#
# Deep stacks of attention train badly when the residual stream's scale drifts. GPT-2 puts a **layer norm** in
# front of each branch: each row (one token's vector, the last axis) is moved to mean 0 and variance 1, then scaled
# and shifted by two learned vectors of length `d_model`:
#
# $$\mu = \frac{1}{d}\sum_i x_i, \quad \sigma^2 = \frac{1}{d}\sum_i (x_i - \mu)^2, \quad
#   \hat x_i = \frac{x_i - \mu}{\sqrt{\sigma^2 + \epsilon}}, \quad y_i = \gamma_i \hat x_i + \beta_i .$$
#
# The variance divides by $d$ (not $d - 1$), as PyTorch's `LayerNorm` does, and $\epsilon = 10^{-5}$ sits *inside*
# the square root: a row whose entries are all equal has $\sigma = 0$, and only $\epsilon$ keeps that division
# finite. Keep float32 float32.

# %% nbgrader={"grade_id": "layer_norm", "solution": true}
def layer_norm(x, gamma, beta, eps=1e-5):
    """Normalise each row of x (..., d_model) to mean 0 and variance 1, then scale by gamma and shift by beta
    (each (d_model,)).

    Contract: x is a float array with at least one axis; gamma and beta have x's last size; eps > 0.
    """
    ### BEGIN SOLUTION
    centred = x - x.mean(axis=-1, keepdims=True)  # (..., d_model)
    var = (centred * centred).mean(axis=-1, keepdims=True)  # (..., 1)
    return centred / np.sqrt(var + eps) * gamma + beta
    ### END SOLUTION


# %% nbgrader={"grade_id": "layer_norm_values", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("layer_norm_values")
### END HIDDEN TESTS
# Self-check: rows of mean 0 and variance 1 before gamma and beta, a constant row stays finite, eps is used, the
# last axis is the one normalised, float32 kept, x unchanged.
check_layer_norm(layer_norm)

# %% [markdown] nbgrader={"grade_id": "ln_backward_intro"}
# ### The backward pass, derived
#
# Start from the scalar case and build up. Write $g_i = \partial L / \partial \hat x_i = \text{grad\_out}_i\,
# \gamma_i$ (the scale is applied last, so its gradient multiplies first). Each $\hat x_i$ depends on $x_j$ three
# ways: directly, through $\mu$ and through $\sigma$. With $\partial \mu / \partial x_j = 1/d$ and
# $\partial \sigma / \partial x_j = \hat x_j / d$,
#
# $$\frac{\partial L}{\partial x_j} = \frac{1}{\sigma}\Big(g_j - \underbrace{\tfrac{1}{d}\textstyle\sum_i g_i}_{\text{the mean moved}}
#   - \hat x_j \underbrace{\tfrac{1}{d}\textstyle\sum_i g_i \hat x_i}_{\text{the spread moved}}\Big),
#   \qquad \sigma = \sqrt{\sigma^2 + \epsilon}.$$
#
# Two sanity checks follow from it: every row of the gradient sums to 0 (adding a constant to a row changes no
# output), and so does its product with $\hat x$ (scaling a row changes no output either). The gradients of
# $\gamma$ and $\beta$ are sums over every position of the batch: $\sum \text{grad\_out} \cdot \hat x$ and
# $\sum \text{grad\_out}$.
#
# <details><summary>Hint 1: the direct path</summary>If μ and σ were constants, the gradient would be g / σ. The two
# other terms correct for the fact that they are not.</details>
# <details><summary>Hint 2: shapes</summary>Every mean is along the last axis with keepdims=True, so it broadcasts
# back over the row. For γ and β, reshape grad_out to (-1, d_model) and sum over axis 0.</details>
# <details><summary>Hint 3: check it</summary>The self-check compares your gradient with finite differences of your
# own layer_norm; if the error is exactly the mean term, look at its sign.</details>

# %% nbgrader={"grade_id": "layer_norm_backward", "solution": true}
def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
    """(grad_x, grad_gamma, grad_beta) of layer_norm(x, gamma, beta, eps), given grad_out = dL/dout. grad_x has x's
    shape; grad_gamma and grad_beta are (d_model,), summed over every leading axis.

    Contract: x and grad_out are float arrays of one shape (..., d_model); gamma has shape (d_model,); eps > 0.
    """
    ### BEGIN SOLUTION
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    sigma = np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)  # (..., 1)
    x_hat = (x - mean) / sigma  # (..., d_model)
    g = grad_out * gamma  # dL/dx_hat
    grad_x = (g - g.mean(axis=-1, keepdims=True) - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) / sigma
    flat = (-1, x.shape[-1])  # (B*T, d_model)
    return grad_x, (grad_out * x_hat).reshape(flat).sum(axis=0), grad_out.reshape(flat).sum(axis=0)
    ### END SOLUTION


# %% nbgrader={"grade_id": "layer_norm_backward_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("layer_norm_backward_values")
### END HIDDEN TESTS
# Self-check: finite differences of your layer_norm, rows of grad_x summing to 0, gamma's and beta's gradients summed
# over the batch, float32 kept, inputs unchanged.
check_layer_norm_backward(layer_norm_backward, layer_norm)

# %% [markdown] nbgrader={"grade_id": "mlp_intro"}
# ## 2. The MLP
#
# After attention has moved information *between* positions, the MLP works on each position alone:
# `gelu(x @ W_1 + b_1) @ W_2 + b_2`, widening to `d_ff = 4 * d_model` and back (the paper's section 3.3; GELU in
# place of ReLU, as in GPT-2). GELU's tanh form is $\tfrac12 x (1 + \tanh u)$ with $u = c\,(x + 0.044715\,x^3)$,
# $c = \sqrt{2/\pi}$. Its derivative takes the product rule and the chain rule once each:
#
# $$\text{gelu}'(x) = \tfrac12 (1 + \tanh u) + \tfrac12 x\,(1 - \tanh^2 u)\; c\,(1 + 3 \cdot 0.044715\,x^2).$$
#
# Then the MLP's backward pass is lesson 07's linear-layer rule twice, with GELU's derivative between: the gradient
# reaching the hidden layer is multiplied, entry by entry, by the derivative *at the pre-activation*
# `x @ W_1 + b_1`; a bias's gradient sums the gradient over every position, as a weight's does.

# %% nbgrader={"grade_id": "gelu_backward", "solution": true}
def gelu_backward(x, grad_out):
    """dL/dx of gelu(x), given grad_out = dL/dgelu(x): grad_out times GELU's derivative at x, entry by entry.

    Contract: x and grad_out are float arrays of one shape.
    """
    ### BEGIN SOLUTION
    c = math.sqrt(2 / math.pi)
    t = np.tanh(c * (x + 0.044715 * (x * x * x)))  # tanh(u), u = c (x + 0.044715 x^3)
    return grad_out * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * (x * x)))
    ### END SOLUTION


# %% nbgrader={"grade_id": "gelu_backward_values", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("gelu_backward_values")
### END HIDDEN TESTS
# Self-check: finite differences of gelu, the slope 0.5 at 0, about 1 far right and 0 far left, float32 kept.
check_gelu_backward(gelu_backward)


# %% nbgrader={"grade_id": "mlp_backward", "solution": true}
def mlp_backward(x, W_1, b_1, W_2, b_2, grad_out):
    """Every gradient of mlp(x, W_1, b_1, W_2, b_2), given grad_out = dL/dout: a dict {"x", "W_1", "b_1", "W_2",
    "b_2"}, each the shape of that input; the weights' and biases' gradients summed over every leading axis.

    Contract: x and grad_out are float arrays (..., d_model); W_1 (d_model, d_ff), b_1 (d_ff,), W_2 (d_ff, d_model),
    b_2 (d_model,).
    """
    ### BEGIN SOLUTION
    pre = x @ W_1 + b_1  # (..., d_ff)
    grad_pre = gelu_backward(pre, grad_out @ W_2.T)  # (..., d_ff)
    flat_x, flat_pre = x.reshape(-1, x.shape[-1]), grad_pre.reshape(-1, pre.shape[-1])  # (B*T, d_model), (B*T, d_ff)
    flat_out = grad_out.reshape(-1, grad_out.shape[-1])  # (B*T, d_model)
    return {"x": grad_pre @ W_1.T, "W_1": flat_x.T @ flat_pre, "b_1": flat_pre.sum(axis=0),
            "W_2": gelu(pre).reshape(-1, pre.shape[-1]).T @ flat_out, "b_2": flat_out.sum(axis=0)}
    ### END SOLUTION


# %% nbgrader={"grade_id": "mlp_backward_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("mlp_backward_values")
### END HIDDEN TESTS
# Self-check: finite differences of the given mlp for x and all four weights, batched input, inputs unchanged.
check_mlp_backward(mlp_backward)

# %% [markdown] nbgrader={"grade_id": "loss_intro"}
# ## 3. The loss and the embedding
#
# The model's last layer gives `logits` `(..., n_vocab)` at every position; the loss is the mean, over the $N$
# positions, of $-\log \text{softmax}(\text{logits})[\text{target}]$. Derive its gradient for one position: with
# $p = \text{softmax}(z)$ and target $y$, $\partial(-\log p_y)/\partial z_i = p_i - [i = y]$ (lesson 07's softmax
# Jacobian, applied to the one-hot vector $-1/p_y$ at $y$). The mean divides by $N$, so
#
# $$\text{grad\_logits} = \frac{\text{softmax}(\text{logits}) - \text{one\_hot}(\text{targets})}{N}.$$
#
# Compute $\log p$ as `logits - max - log(sum(exp(logits - max)))`: logits of 1000 overflow `exp` otherwise.
#
# The first layer is a lookup: `x = E[tokens]` copies row `tokens[b, t]` of the embedding `E` `(n_vocab, d_model)`.
# Its backward pass sends each position's gradient back to the row it came from, and a token that appears at
# several positions collects all of them. Careful: `grad_E[tokens] += grad_x` looks right and is wrong, because
# numpy's fancy-index assignment writes a repeated index once; `np.add.at` adds every one.

# %% nbgrader={"grade_id": "cross_entropy", "solution": true}
def cross_entropy(logits, targets):
    """(loss, grad_logits): the mean over every position of -log softmax(logits)[target] (one float), and its
    gradient (softmax(logits) - one_hot(targets)) / N (logits' shape and dtype).

    Contract: logits is a float array (..., n_vocab); targets an integer array of logits' shape without its last
    axis, each in 0 .. n_vocab - 1.
    """
    ### BEGIN SOLUTION
    shifted = logits - logits.max(axis=-1, keepdims=True)  # (..., n_vocab): each row's largest is 0
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # (..., n_vocab)
    n = targets.size
    picked = np.take_along_axis(log_p, targets[..., None], axis=-1)  # (..., 1)
    grad = np.exp(log_p)  # (..., n_vocab)
    np.put_along_axis(grad, targets[..., None], np.take_along_axis(grad, targets[..., None], axis=-1) - 1, axis=-1)
    return float(-picked.sum() / n), grad / n
    ### END SOLUTION


# %% nbgrader={"grade_id": "cross_entropy_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("cross_entropy_values")
### END HIDDEN TESTS
# Self-check: equal logits give ln(n_vocab), the gradient's rows sum to 0 and match finite differences, the mean
# divides by every position, logits near 1000 stay finite, float32 kept.
check_cross_entropy(cross_entropy)


# %% nbgrader={"grade_id": "embedding_backward", "solution": true}
def embedding_backward(tokens, grad_x, n_vocab):
    """dL/dE of x = E[tokens], given grad_x = dL/dx: (n_vocab, d_model), grad_x's dtype; row v sums the gradients
    of every position whose token is v.

    Contract: tokens is an integer array (...) of values in 0 .. n_vocab - 1; grad_x a float array
    (..., d_model) with tokens' shape in front; n_vocab >= 1.
    """
    ### BEGIN SOLUTION
    grad_E = np.zeros((n_vocab, grad_x.shape[-1]), dtype=grad_x.dtype)
    np.add.at(grad_E, tokens.reshape(-1), grad_x.reshape(-1, grad_x.shape[-1]))  # (B*T,), (B*T, d_model)
    return grad_E
    ### END SOLUTION


# %% nbgrader={"grade_id": "embedding_backward_values", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("embedding_backward_values")
### END HIDDEN TESTS
# Self-check: a token seen three times collects three gradients, unseen tokens get zero rows, batched tokens.
check_embedding_backward(embedding_backward)

# %% [markdown] nbgrader={"grade_id": "block_intro"}
# ## 4. A whole block
#
# GPT-2's block puts the layer norm *inside* each branch (pre-norm), so the residual stream itself is never
# normalised:
#
# | step | shape |
# |---|---|
# | $x_1 = x + \mathrm{MHA}(\mathrm{LN}_1(x))$, with the causal mask | `(..., T, d_model)` |
# | $\text{out} = x_1 + \mathrm{MLP}(\mathrm{LN}_2(x_1))$ | `(..., T, d_model)` |
#
# `block_forward` (given below) computes it; `block` is a dict of twelve arrays: `gamma_1, beta_1, W_Q, W_K, W_V,
# W_O, gamma_2, beta_2, W_1, b_1, W_2, b_2`. The backward pass goes from the top: through the MLP's branch (MLP, then
# layer norm 2) to $x_1$, and **where the stream split, the gradients add**: $x_1$ went both into the branch and
# straight on, so $\partial L/\partial x_1$ = grad_out + what came back through the branch. The same happens at $x$
# with the attention's branch (`multi_head_attention_backward`, then layer norm 1). Your `block_backward` calls the
# backward functions above and the given `multi_head_attention_backward`; the graded test runs it with the
# course's versions of those, so it grades the wiring alone.

# %% nbgrader={"grade_id": "block_given"}
BLOCK_KEYS = ("gamma_1", "beta_1", "W_Q", "W_K", "W_V", "W_O", "gamma_2", "beta_2", "W_1", "b_1", "W_2", "b_2")


def block_forward(x, block, n_heads, mask=None, ablate=()):
    """One pre-norm block: (out (..., T, d_model), attention weights (..., n_heads, T, T)). Heads listed in
    `ablate` have their output zeroed with your ablate_head (section 7) before W_O."""
    b = block
    h = layer_norm(x, b["gamma_1"], b["beta_1"])
    heads, weights = scaled_dot_product_attention(split_heads(h @ b["W_Q"], n_heads), split_heads(h @ b["W_K"], n_heads),
                                                  split_heads(h @ b["W_V"], n_heads), mask)
    heads = concat_heads(heads)  # (..., T, d_model): the heads side by side, before W_O
    for head in ablate:
        heads = ablate_head(heads, n_heads, head)
    x1 = x + heads @ b["W_O"]
    return x1 + mlp(layer_norm(x1, b["gamma_2"], b["beta_2"]), b["W_1"], b["b_1"], b["W_2"], b["b_2"]), weights


# %% nbgrader={"grade_id": "block_backward", "solution": true}
def block_backward(x, block, n_heads, grad_out, mask=None):
    """Every gradient of block_forward(x, block, n_heads, mask)'s out, given grad_out: a dict with "x" and each key
    of BLOCK_KEYS, each the shape of that array.

    Contract: x and grad_out are float arrays (..., T, d_model); block holds the twelve arrays of BLOCK_KEYS;
    n_heads divides d_model; mask is None or a boolean (T, T) array.
    """
    ### BEGIN SOLUTION
    b = block
    h1 = layer_norm(x, b["gamma_1"], b["beta_1"])
    x1 = x + multi_head_attention(h1, b["W_Q"], b["W_K"], b["W_V"], b["W_O"], n_heads, mask)[0]
    h2 = layer_norm(x1, b["gamma_2"], b["beta_2"])
    grads = mlp_backward(h2, b["W_1"], b["b_1"], b["W_2"], b["b_2"], grad_out)
    grad_h2, grads["gamma_2"], grads["beta_2"] = layer_norm_backward(x1, b["gamma_2"], grads.pop("x"))
    grad_x1 = grad_out + grad_h2  # the stream split at x1: straight on, plus through the MLP's branch
    attention = multi_head_attention_backward(h1, b["W_Q"], b["W_K"], b["W_V"], b["W_O"], n_heads, grad_x1, mask)
    grad_h1, grads["gamma_1"], grads["beta_1"] = layer_norm_backward(x, b["gamma_1"], attention.pop("x"))
    grads.update(attention)
    grads["x"] = grad_x1 + grad_h1  # and at x: straight on, plus through the attention's branch
    return grads
    ### END SOLUTION


# %% nbgrader={"grade_id": "block_backward_values", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("block_backward_values")
### END HIDDEN TESTS
# Self-check: finite differences of the given block_forward for x and all twelve arrays, with the causal mask.
check_block_backward(block_backward, block_forward)

# %% [markdown] nbgrader={"grade_id": "model_intro"}
# ## 5. Train it on text
#
# The text is Python's own standard library: the source files of eighteen modules every CPython since 3.10 ships
# (`textwrap`, `argparse`, `dataclasses` ...), read from your installation, so nothing is downloaded and nothing is
# copied into this course. Each character is a token: the 95 printable ASCII characters and the newline
# (`n_vocab = 96`; a tab becomes four spaces, anything else `?`). The last tenth of the text is held out: every
# loss below is measured on it.
#
# **A baseline first.** A bigram model predicts the next character from the current one alone, by counting pairs
# in the training text (one added to every count, so no pair has probability 0). A transformer that cannot beat
# that has learnt nothing a table could not.

# %%
MODULES = ("textwrap", "string", "heapq", "bisect", "fnmatch", "glob", "shlex", "queue", "sched", "colorsys",
           "calendar", "difflib", "dataclasses", "argparse", "functools", "pprint", "fractions", "statistics")
VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))  # n_vocab = 96 characters; token 0 is the newline
n_vocab = len(VOCAB)
CHAR_TO_TOKEN = {c: i for i, c in enumerate(VOCAB)}


def encode(text):
    return np.array([CHAR_TO_TOKEN.get(c, CHAR_TO_TOKEN["?"]) for c in text.replace("\t", "    ")], dtype=np.int64)


def decode(tokens):
    return "".join(VOCAB[int(t)] for t in tokens)


def read_corpus():
    """The source of every module of MODULES this Python has as a .py file, one after another."""
    parts, missing = [], []
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or not str(spec.origin).endswith(".py"):
            missing.append(name)
            continue
        with open(spec.origin, encoding="utf-8") as f:
            parts.append(f.read())
    if missing:
        print(f"not found as source on this Python, left out: {', '.join(missing)}")
    return "\n".join(parts)


data = encode(read_corpus())
cut = int(0.9 * len(data))
train_data, held_out = data[:cut], data[cut:]
pair_counts = np.ones((n_vocab, n_vocab))
np.add.at(pair_counts, (train_data[:-1], train_data[1:]), 1)  # every (current, next) pair of the training text
bigram = pair_counts / pair_counts.sum(axis=1, keepdims=True)  # (n_vocab, n_vocab): P(next | current)
bigram_loss = float(-np.log(bigram[held_out[:-1], held_out[1:]]).mean())
print(f"{len(data):,} characters from {len(MODULES)} modules; {len(held_out):,} held out")
print(f"uniform guess: ln {n_vocab} = {math.log(n_vocab):.2f} nats per character; bigram baseline: "
      f"{bigram_loss:.2f}")

# %% [markdown] nbgrader={"grade_id": "model_code_intro"}
# **The model** (given): token embeddings and learned positions, two of your blocks with four heads each, a final
# layer norm and the unembedding `W_U` `(d_model, n_vocab)`. Its backward pass is your functions in reverse order;
# Adam updates every array. `d_model = 64`, `T = 64` characters of context, batches of 24 windows, 1,500 steps.
# The same cell gives `write`, which section 6 uses to make the model write, and what section 7 measures with:
# the repeated letters and lesson 07's two head scores.
#
# **Windows that repeat.** Code repeats itself: a name defined is used again, a line is written twice with one
# change. The model can learn to copy, but only once it needs to often enough. So each training window starts
# with a stretch of 8 to 32 characters and then goes on with the text *from that stretch's start again*: the
# stretch is always followed by its own repeat. Measured while building this lesson: with plain windows, 1,500
# steps grew a previous-token head but no head that copies; with half the windows repeating, none either; with
# every window repeating, layer 2 grows an induction head (section 7). The held-out loss is measured on plain text.

# %%
D_MODEL, N_HEADS, N_BLOCKS, T_MAX, BATCH = 64, 4, 2, 64, 24
N_STEPS = 20 if SHORT else 1500


def init_model(rng):
    """The model's arrays, float32: E and P small, each block's projections scaled by 1 / sqrt(fan-in), and the
    weights that write into the residual stream (W_O, W_2) smaller still, as GPT-2 does."""
    d, d_ff = D_MODEL, 4 * D_MODEL

    def normal(*shape, scale):
        return (rng.normal(size=shape) * scale).astype(np.float32)

    blocks = []
    for _ in range(N_BLOCKS):
        block = {"gamma_1": np.ones(d, np.float32), "beta_1": np.zeros(d, np.float32),
                 "gamma_2": np.ones(d, np.float32), "beta_2": np.zeros(d, np.float32),
                 "b_1": np.zeros(d_ff, np.float32), "b_2": np.zeros(d, np.float32),
                 "W_1": normal(d, d_ff, scale=1 / math.sqrt(d)),
                 "W_2": normal(d_ff, d, scale=1 / math.sqrt(d_ff * 2 * N_BLOCKS))}
        for name in ("W_Q", "W_K", "W_V"):
            block[name] = normal(d, d, scale=1 / math.sqrt(d))
        block["W_O"] = normal(d, d, scale=1 / math.sqrt(d * 2 * N_BLOCKS))
        blocks.append(block)
    return {"E": normal(n_vocab, d, scale=0.5), "P": normal(T_MAX, d, scale=0.5), "blocks": blocks,
            "gamma_f": np.ones(d, np.float32), "beta_f": np.zeros(d, np.float32),
            "W_U": normal(d, n_vocab, scale=1 / math.sqrt(d))}


def causal(T):
    return np.triu(np.ones((T, T), dtype=bool), k=1)  # (T, T): True above the diagonal, the future


def gpt_logits(params, n_heads, tokens, ablate=()):
    """Logits (..., T, n_vocab) of every position of tokens (..., T); `ablate` lists (block, head) pairs to zero."""
    T = tokens.shape[-1]
    x = params["E"][tokens] + params["P"][:T]  # (..., T, d_model)
    for i, block in enumerate(params["blocks"]):
        x, _ = block_forward(x, block, n_heads, causal(T), ablate=[h for b, h in ablate if b == i])
    return layer_norm(x, params["gamma_f"], params["beta_f"]) @ params["W_U"]


def loss_and_grads(params, tokens, targets):
    """The mean cross-entropy of the next character and every array's gradient: your functions, in reverse."""
    T = tokens.shape[-1]
    mask = causal(T)
    x = params["E"][tokens] + params["P"][:T]
    inputs = []
    for block in params["blocks"]:
        inputs.append(x)
        x, _ = block_forward(x, block, N_HEADS, mask)
    final = layer_norm(x, params["gamma_f"], params["beta_f"])  # (B, T, d_model)
    loss, grad_logits = cross_entropy(final @ params["W_U"], targets)
    grads = {"W_U": final.reshape(-1, D_MODEL).T @ grad_logits.reshape(-1, n_vocab)}  # (d_model, n_vocab)
    grad_x, grads["gamma_f"], grads["beta_f"] = layer_norm_backward(x, params["gamma_f"], grad_logits @ params["W_U"].T)
    grads["blocks"] = [None] * N_BLOCKS
    for i in reversed(range(N_BLOCKS)):
        block_grads = block_backward(inputs[i], params["blocks"][i], N_HEADS, grad_x, mask)
        grad_x = block_grads.pop("x")
        grads["blocks"][i] = block_grads
    grads["E"] = embedding_backward(tokens, grad_x, n_vocab)
    grads["P"] = np.zeros_like(params["P"])
    grads["P"][:T] = grad_x.sum(axis=0)  # every sequence's position t adds into row t
    return loss, grads


def arrays(tree):
    """(path, array) of every array of the model (or of its gradients), in one fixed order."""
    for name in ("E", "P", "gamma_f", "beta_f", "W_U"):
        yield name, tree[name]
    for i, block in enumerate(tree["blocks"]):
        for key in BLOCK_KEYS:
            yield f"{key}{i}", block[key]


def adam_step(params, grads, state, lr, beta1=0.9, beta2=0.99, eps=1e-8):
    """One Adam update of every array in place (Kingma and Ba, 2015)."""
    state["t"] = state.get("t", 0) + 1
    for (name, p), (_, g) in zip(arrays(params), arrays(grads)):
        m = state.setdefault(("m", name), np.zeros_like(g))
        v = state.setdefault(("v", name), np.zeros_like(g))
        m += (1 - beta1) * (g - m)
        v += (1 - beta2) * (g * g - v)
        p -= (lr * (m / (1 - beta1 ** state["t"])) / (np.sqrt(v / (1 - beta2 ** state["t"])) + eps)).astype(p.dtype)


def windows(source, rng, B, repeat=True):
    """B windows of T_MAX + 1 characters (inputs and next-character targets); with `repeat`, each starts with a
    stretch of 8 to 32 characters followed by the text again from that stretch's start."""
    starts = rng.integers(0, len(source) - T_MAX - 1, size=B)
    rows = []
    for s in starts:
        if repeat:
            n = int(rng.integers(8, T_MAX // 2 + 1))
            rows.append(np.concatenate([source[s:s + n], source[s:s + T_MAX + 1 - n]]))
        else:
            rows.append(source[s:s + T_MAX + 1])
    rows = np.stack(rows)  # (B, T + 1): T = T_MAX
    return rows[:, :-1], rows[:, 1:]


def train(seed=0, n_steps=N_STEPS, lr=5e-3, every=100):
    """Train from `seed`; every `every` steps record the held-out loss. Warm-up over 50 steps, then a cosine decay
    of the step size to a tenth."""
    rng = np.random.default_rng(seed)
    params, state = init_model(rng), {}
    check = windows(held_out, np.random.default_rng(1000 + seed), 64, repeat=False)
    history = {"seed": seed, "steps": [], "held_out": []}
    start = time.perf_counter()
    for step in range(n_steps + 1):
        if step % every == 0 or step == n_steps:
            history["steps"].append(step)
            history["held_out"].append(cross_entropy(gpt_logits(params, N_HEADS, check[0]), check[1])[0])
        if step == n_steps:
            break
        rate = lr * min(1.0, (step + 1) / 50) * (0.1 + 0.45 * (1 + math.cos(math.pi * step / n_steps)))
        _, grads = loss_and_grads(params, *windows(train_data, rng, BATCH))
        adam_step(params, grads, state, rate)
    history["seconds"] = time.perf_counter() - start
    return params, history


letters = np.array([CHAR_TO_TOKEN[c] for c in "abcdefghijklmnopqrstuvwxyz"])
T_HALF = T_MAX // 2
first_half = letters[np.random.default_rng(7).integers(0, 26, size=(64, T_HALF))]  # 64 sequences of T_HALF letters
repeated = np.concatenate([first_half, first_half], axis=1)  # each row: random letters, then the same again


def half_losses(params, ablate=()):
    """Mean loss of the next letter on the first (random) and the second (repeated) half of `repeated`."""
    logits = gpt_logits(params, N_HEADS, repeated[:, :-1], ablate)  # (B, T, n_vocab): B = 64, T = T_MAX - 1
    log_p = logits - logits.max(axis=-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(axis=-1, keepdims=True))
    per_position = -np.take_along_axis(log_p, repeated[:, 1:, None], axis=-1)[..., 0]  # (B, T)
    return float(per_position[:, :T_HALF - 1].mean()), float(per_position[:, T_HALF:].mean())


def attention_weights(params, n_sequences=8):
    """Each block's attention weights (n_sequences, N_HEADS, T, T) on the first sequences of `repeated`."""
    x = params["E"][repeated[:n_sequences, :-1]] + params["P"][:T_MAX - 1]
    found = []
    for block in params["blocks"]:
        x, w = block_forward(x, block, N_HEADS, causal(T_MAX - 1))
        found.append(w)
    return found


def scores_of(w):
    """(previous-token score, induction score) per head of one block's weights (B, n_heads, T, T): lesson 07's."""
    t = np.arange(1, w.shape[-1])
    later = np.arange(T_HALF, w.shape[-1])
    return w[..., t, t - 1].mean(axis=(0, 2)), w[..., later, later - T_HALF + 1].mean(axis=(0, 2))


def write(params, prompt, n_chars, rng, temperature=0.8, top_k=10):
    """`n_chars` characters after `prompt` (a string), through your generate (section 6). The model knows T_MAX
    positions: each time they run out, generation starts a fresh cache from the last T_MAX // 2 characters."""
    tokens = list(encode(prompt)[-T_MAX // 2:]) or [CHAR_TO_TOKEN["\n"]]
    text = ""
    while len(text) < n_chars:
        n_new = min(T_MAX - len(tokens), n_chars - len(text))
        out = generate(params, N_HEADS, tokens, n_new, rng, temperature, top_k)
        text += decode(out[len(tokens):])
        tokens = out[-T_MAX // 2:]
    return text


TRAINING_WORDS = set(re.findall(r"[A-Za-z_]{3,}", decode(train_data)))  # every name and word of 3+ letters


def known_words(text):
    """(words of three or more letters in text, the share of them that occur in the training text)."""
    words = re.findall(r"[A-Za-z_]{3,}", text)
    return len(words), (sum(w in TRAINING_WORDS for w in words) / len(words) if words else float("nan"))


SEED = 0  # change it and run the cells below again: each seed trains another model
runs = {}


def trained(seed=None):
    """(params, history) of the run from `seed` (default: SEED), trained on first use; later cells reuse it."""
    seed = SEED if seed is None else seed
    if seed not in runs:
        runs[seed] = train(seed)
    return runs[seed]


# %% [markdown] nbgrader={"grade_id": "training_run_intro"}
# Training takes about two minutes of one core (the cell prints the time it took on yours).
#
# *Figure (alt text): the held-out loss against the training step, falling from above the dashed line of the bigram
# baseline to below it. The lines printed under the figure give the numbers it shows.*

# %%
model, history = trained()
fig, ax = plt.subplots(figsize=(6.5, 3.4))
ax.plot(history["steps"], history["held_out"], color="0.2", label="the model")
ax.axhline(bigram_loss, color=plt.cm.viridis(0.6), ls="--", label="bigram baseline")
ax.set(xlabel="training step", ylabel="held-out cross-entropy (nats per character)", title="Training")
ax.legend()
fig.tight_layout()
plt.show()
final_loss = history["held_out"][-1]
print(f"Figure: the held-out loss falls from {history['held_out'][0]:.2f} to {final_loss:.2f} nats per character; "
      f"the bigram baseline is {bigram_loss:.2f}.")
print(f"seed {SEED}: {history['steps'][-1]} steps in {history['seconds']:.0f} s; the model "
      + ("beats" if final_loss < bigram_loss else "does not beat") + " the bigram baseline"
      + (" (short mode, MHA_SHORT_TRAINING=1: a few steps only)" if SHORT else ""))

# %% [markdown] nbgrader={"grade_id": "sampling_intro"}
# ## 6. Talk to it
#
# The model gives logits for the next character; **sampling** turns them into one. Divide the logits by a
# **temperature** first: below 1 it sharpens the distribution towards the likeliest character, above 1 it flattens
# it, and 0 means "always the likeliest" (greedy; no division then). **Top-k** keeps only the `k` largest logits
# (the rest get probability 0) before the softmax. Draw with the generator `rng` you are given (`rng.choice(n,
# p=p)` or `rng.random()` against the cumulative sum), never with `np.random`'s global functions: the same seed
# must give the same text. Temperature is applied to the *logits*: dividing the probabilities by it and
# renormalising changes nothing.

# %% nbgrader={"grade_id": "sample_next", "solution": true}
def sample_next(logits, rng, temperature=1.0, top_k=None):
    """One token (an int) drawn with the generator rng from softmax(logits / temperature) over the top_k largest
    logits (all of them when top_k is None); temperature 0 gives the largest logit's token.

    Contract: logits is a float array (n_vocab,); rng a numpy Generator; temperature >= 0; top_k None or an integer
    in 1 .. n_vocab.
    """
    ### BEGIN SOLUTION
    if temperature == 0:
        return int(np.argmax(logits))
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    if top_k is not None:
        scaled = np.where(scaled >= np.sort(scaled)[-top_k], scaled, -np.inf)  # the k largest kept
    return int(rng.choice(len(scaled), p=softmax(scaled)))
    ### END SOLUTION


# %% nbgrader={"grade_id": "sample_next_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("sample_next_values")
### END HIDDEN TESTS
# Self-check: temperature 0 and top_k=1 give the largest logit, top-k keeps k tokens, frequencies follow
# softmax(logits / temperature), the same seed gives the same draws.
check_sample_next(sample_next)

# %% [markdown] nbgrader={"grade_id": "generate_intro"}
# **Generation** is sampling in a loop, with lesson 06's KV cache: `model_step` (given) runs one token through the
# model, appends its keys and values to each block's cache and returns the next token's logits; its position is
# the cache's length. Feed the prompt one token at a time to fill the cache; the logits after the prompt's last
# token give the first new token; feed that one, and so on. Never recompute the whole model (`gpt_logits`): the
# cache is what makes each new token cost one token's work.

# %% nbgrader={"grade_id": "model_step_given"}
def empty_cache(params, n_heads):
    """A KV cache with no token: per block, keys and values (n_heads, 0, d_head)."""
    empty = np.zeros((n_heads, 0, params["E"].shape[1] // n_heads), dtype=params["E"].dtype)
    return [(empty, empty) for _ in params["blocks"]]


def model_step(params, n_heads, token, cache):
    """(logits (n_vocab,) of the next token, the cache one token longer) after feeding `token` at position
    len(cache); the caller's cache is unchanged."""
    position = cache[0][0].shape[-2]
    x = (params["E"][int(token)] + params["P"][position])[None, :]  # (1, d_model)
    longer = []
    for b, (cache_k, cache_v) in zip(params["blocks"], cache):
        out, cache_k, cache_v = decode_step(layer_norm(x, b["gamma_1"], b["beta_1"]), cache_k, cache_v, b["W_Q"],
                                            b["W_K"], b["W_V"], b["W_O"], n_heads, n_heads)
        x = x + out
        x = x + mlp(layer_norm(x, b["gamma_2"], b["beta_2"]), b["W_1"], b["b_1"], b["W_2"], b["b_2"])
        longer.append((cache_k, cache_v))
    return (layer_norm(x, params["gamma_f"], params["beta_f"]) @ params["W_U"])[0], longer


# %% nbgrader={"grade_id": "generate", "solution": true}
def generate(params, n_heads, prompt, n_new, rng, temperature=1.0, top_k=None):
    """The prompt followed by n_new tokens, each drawn with sample_next from the logits model_step gives after the
    token before it: a list of ints. Every token goes through model_step once.

    Contract: params is a model (E, P, blocks, gamma_f, beta_f, W_U); prompt a sequence of at least one token;
    n_new >= 0 with len(prompt) + n_new at most the model's number of positions; rng, temperature and top_k as
    sample_next takes them.
    """
    ### BEGIN SOLUTION
    tokens = list(map(int, prompt))
    cache = empty_cache(params, n_heads)
    for token in tokens:
        logits, cache = model_step(params, n_heads, token, cache)
    for _ in range(n_new):
        tokens.append(sample_next(logits, rng, temperature, top_k))
        logits, cache = model_step(params, n_heads, tokens[-1], cache)
    return tokens
    ### END SOLUTION


# %% nbgrader={"grade_id": "generate_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("generate_values")
### END HIDDEN TESTS
# Self-check: greedy generation equals the likeliest character computed with gpt_logits at each step, the prompt is
# kept, the length is right, the same seed gives the same text.
check_generate(generate, gpt_logits)

# %% [markdown] nbgrader={"grade_id": "talk_intro"}
# The model knows `T_MAX = 64` positions; `write` (given with the model) goes on past them by starting a fresh
# cache from the last 32 characters each time the positions run out. Move the sliders: at temperature 0 the model repeats its likeliest
# line or a run of spaces; around 0.8 it writes something that looks like Python (keywords, `self.`, brackets,
# names it has read), though not code that runs; at 2 it is noise.
#
# *Figure (alt text): none; the output is text. Without a live front end it shows the text at temperature 0.8,
# top-k 10.*

# %% tags=["nbval-ignore-output"]
temperature_choice = widgets.FloatSlider(value=0.8, min=0.0, max=2.0, step=0.1, description="temperature")
top_k_choice = widgets.IntSlider(value=10, min=1, max=n_vocab, description="top-k")
prompt_choice = widgets.Text(value="def ", description="prompt")
written = widgets.Output()


def rewrite(change=None):
    model, _ = trained()
    with written:
        written.clear_output(wait=True)
        print(prompt_choice.value + write(model, prompt_choice.value, 300, np.random.default_rng(0),
                                          temperature_choice.value, top_k_choice.value))


for control in (temperature_choice, top_k_choice, prompt_choice):
    control.observe(rewrite, names="value")
display(widgets.VBox([temperature_choice, top_k_choice, prompt_choice, written]))
rewrite()

# %% [markdown] nbgrader={"grade_id": "words_intro"}
# Does the text show what the model read? A bigram table already gets single letters right; whole words take more
# than one step of context. So count the words of three or more letters the model writes, and how many of them
# occur somewhere in the training text (`known_words`, given with the model), for the trained and the untrained
# model (the same sampler: temperature 0.8, top-k 10, 3,000 characters each). Measured while building this
# lesson: about two thirds of the trained model's words, none of the untrained model's.

# %%
model, _ = trained()
untrained = init_model(np.random.default_rng(SEED))  # the same start, before any step
n_chars = 300 if SHORT else 3000
for name, params in (("trained", model), ("untrained", untrained)):
    count, share = known_words(write(params, "\n", n_chars, np.random.default_rng(1)))
    print(f"{name:>9}: {count} words of 3+ letters, {share:.0%} of them in the training text")

# %% [markdown] nbgrader={"grade_id": "ablate_intro"}
# ## 7. Take it apart
#
# Which heads does the model need? **Ablation** answers by removing one: zero the head's output (its `d_head`
# columns of the concatenated heads, before `W_O`: the layout of `concat_heads`, head `h` at columns `h * d_head`
# to `(h + 1) * d_head`) and measure the loss again. The test text is the one lesson 07 used for induction heads:
# random lowercase letters, then the same letters again. Nothing can predict the first half; the second half is
# predictable only by a model that looks back for the earlier copy of the current letter and copies what came after
# it (an **induction head**, which reads a **previous-token head**'s work in its keys).

# %% nbgrader={"grade_id": "ablate_head", "solution": true}
def ablate_head(heads, n_heads, head):
    """A copy of heads (..., T, d_model), the n_heads head outputs side by side before W_O, with head `head`'s
    columns set to 0. The caller's array is unchanged.

    Contract: heads is a float array (..., T, d_model); n_heads divides d_model; head in 0 .. n_heads - 1.
    """
    ### BEGIN SOLUTION
    d_head = heads.shape[-1] // n_heads
    out = heads.copy()
    out[..., head * d_head:(head + 1) * d_head] = 0
    return out
    ### END SOLUTION


# %% nbgrader={"grade_id": "ablate_head_values", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("ablate_head_values")
### END HIDDEN TESTS
# Self-check: that head's columns zero, every other column and the input unchanged, batched input.
check_ablate_head(ablate_head)

# %% [markdown] nbgrader={"grade_id": "ablation_table_intro"}
# *Figure (alt text): a bar for each of the eight heads (block 1 heads 0-3, block 2 heads 0-3): the loss on the
# repeated half with that head zeroed, beside the loss with every head in place. The lines printed under it give
# the numbers and name the head whose removal costs the most.*

# %%
model, _ = trained()
heads = [(b, h) for b in range(N_BLOCKS) for h in range(N_HEADS)]
intact = half_losses(model)
ablated = {bh: half_losses(model, [bh]) for bh in heads}
fig, ax = plt.subplots(figsize=(7, 3.2))
ax.bar(range(len(heads)), [ablated[bh][1] for bh in heads], color=plt.cm.viridis(0.3))
ax.axhline(intact[1], color="0.2", ls="--", label="every head in place")
ax.set_xticks(range(len(heads)), [f"block {b + 1}\nhead {h}" for b, h in heads], fontsize=8)
ax.set(ylabel="loss on the repeated half", title="One head zeroed at a time")
ax.legend()
fig.tight_layout()
plt.show()
worst = max(heads, key=lambda bh: ablated[bh][1])
print(f"Every head in place: {intact[0]:.2f} on the random half, {intact[1]:.2f} on the repeated half.")
for b, h in heads:
    print(f"  block {b + 1}, head {h} zeroed: repeated half {ablated[b, h][1]:.2f} "
          f"({ablated[b, h][1] - intact[1]:+.2f})")
print(f"Zeroing block {worst[0] + 1}, head {worst[1]} costs the most on the repeated half.")

# %% [markdown] nbgrader={"grade_id": "patterns_intro"}
# Look at the heads themselves on one repeated sequence. A previous-token head draws the diagonal just below the
# main one; an induction head draws a stripe in the lower-left quarter, one step right of the diagonal that pairs
# each letter with its earlier copy. The two numbers are lesson 07's scores: the mean weight on the key one back,
# and the mean weight, in the second half, on the key just after the earlier copy.
#
# *Figure (alt text): a 63 by 63 grid of attention weights for the chosen block and head, queries down, keys
# across, causal. The title gives the head's previous-token and induction scores.*

# %% tags=["nbval-ignore-output"]
model, _ = trained()
weights_by_block = attention_weights(model)  # per block (8, N_HEADS, T, T)
head_choice = widgets.Dropdown(options=[(f"block {b + 1}, head {h}", (b, h)) for b, h in heads], value=worst,
                               description="head")
pattern_view = widgets.Output()


def show_pattern(change=None):
    b, h = head_choice.value
    previous, induction = scores_of(weights_by_block[b])
    with pattern_view:
        pattern_view.clear_output(wait=True)
        fig, ax = plt.subplots(figsize=(4.6, 4.2))
        ax.imshow(weights_by_block[b][0, h], cmap="viridis", vmin=0, vmax=1)
        ax.set(xlabel="key", ylabel="query", title=f"block {b + 1}, head {h}: previous-token {previous[h]:.2f}, "
                                                   f"induction {induction[h]:.2f}")
        plt.show()


head_choice.observe(show_pattern, names="value")
display(head_choice, pattern_view)
show_pattern()

# %% [markdown] nbgrader={"grade_id": "composition_intro"}
# ### K-composition: which head does the induction head read from?
#
# A head of block 2 reads, in its keys, whatever earlier heads wrote into the stream. Elhage et al. (2021, *A
# mathematical framework for transformer circuits*) measure it from the weights alone. Head $j$ of block 1 writes
# $x\,W_{OV}^j$ with $W_{OV}^j = W_V[:, j]\,W_O[j, :]$ (its slice of columns of $W_V$ and of rows of $W_O$); head $i$
# of block 2 scores a query $x_q$ against a key $x_k$ by $x_q W_{QK}^i x_k^T$ with $W_{QK}^i = W_Q[:, i]\,
# W_K[:, i]^T$. Keys that carry head $j$'s output give $x_q\,W_{QK}^i\,(W_{OV}^j)^T x^T$, so the **K-composition
# score** is
#
# $$\frac{\lVert W_{QK}^i\,(W_{OV}^j)^T \rVert_F}{\lVert W_{QK}^i \rVert_F\,\lVert W_{OV}^j \rVert_F},$$
#
# between 0 and 1: large when what head $j$ writes lies where head $i$'s keys look. It ignores the layer norm
# between the blocks, and random matrices already score well above 0, so read it as a ranking, next to the
# ablation above. In a model this small, after two minutes of training, the ranking is weak: the induction head's
# scores lie close together, and the largest need not be the previous-token head's, while zeroing the
# previous-token head costs the repeated half more than a nat (section 7's table). The weights of a larger or
# longer-trained model separate more clearly (Elhage et al. report it for theirs); here the ablation is the
# stronger evidence. Your run's numbers are below.

# %% nbgrader={"grade_id": "k_composition", "solution": true}
def k_composition(W_Q, W_K, W_V_prev, W_O_prev, n_heads):
    """K-composition scores (n_heads, n_heads): [i, j] for head i of a block (W_Q, W_K) reading, in its keys, what
    head j of the block before (W_V_prev, W_O_prev) writes.

    Contract: the four weights are float (d_model, d_model) arrays; n_heads divides d_model.
    """
    ### BEGIN SOLUTION
    d_head = W_Q.shape[0] // n_heads
    scores = np.zeros((n_heads, n_heads))
    for i in range(n_heads):
        q = slice(i * d_head, (i + 1) * d_head)
        W_QK = W_Q[:, q] @ W_K[:, q].T  # (d_model, d_model)
        for j in range(n_heads):
            v = slice(j * d_head, (j + 1) * d_head)
            W_OV = W_V_prev[:, v] @ W_O_prev[v, :]  # (d_model, d_model)
            scores[i, j] = np.linalg.norm(W_QK @ W_OV.T) / (np.linalg.norm(W_QK) * np.linalg.norm(W_OV))
    return scores
    ### END SOLUTION


# %% nbgrader={"grade_id": "k_composition_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("k_composition_values")
### END HIDDEN TESTS
# Self-check: identity weights give 1/sqrt(2) on the diagonal, swapped blocks move it off, scaling changes nothing.
check_k_composition(k_composition)

# %% [markdown] nbgrader={"grade_id": "composition_read_intro"}
# *Figure (alt text): a 4 by 4 grid of K-composition scores, block 2's heads down, block 1's heads across, with
# each score written in its square. The lines under it name the induction head (the block-2 head with the highest
# induction score), the previous-token head (the block-1 head with the highest previous-token score) and the
# block-1 head the induction head composes with most.*

# %%
model, _ = trained()
b1, b2 = model["blocks"]
composition = k_composition(b2["W_Q"], b2["W_K"], b1["W_V"], b1["W_O"], N_HEADS)
fig, ax = plt.subplots(figsize=(4.4, 3.8))
ax.imshow(composition, cmap="viridis")
for i in range(N_HEADS):
    for j in range(N_HEADS):
        ax.text(j, i, f"{composition[i, j]:.2f}", ha="center", va="center", color="w", fontsize=8)
ax.set(xlabel="block 1 head (writes)", ylabel="block 2 head (keys read)", title="K-composition")
fig.tight_layout()
plt.show()
previous_1, _ = scores_of(weights_by_block[0])
_, induction_2 = scores_of(weights_by_block[1])
inductor, previous_head = int(np.argmax(induction_2)), int(np.argmax(previous_1))
print(f"induction head: block 2, head {inductor} (induction score {induction_2[inductor]:.2f}); previous-token "
      f"head: block 1, head {previous_head} (previous-token score {previous_1[previous_head]:.2f})")
print(f"block 2, head {inductor} composes most with block 1, head {int(np.argmax(composition[inductor]))} "
      f"({composition[inductor].max():.2f}; the others {', '.join(f'{v:.2f}' for v in np.delete(composition[inductor], np.argmax(composition[inductor])))})")
print(f"zeroing block 1, head {previous_head} moves the repeated half's loss by "
      f"{ablated[0, previous_head][1] - intact[1]:+.2f}; zeroing block 2, head {inductor} by "
      f"{ablated[1, inductor][1] - intact[1]:+.2f}")

# %% [markdown] nbgrader={"grade_id": "summary"}
# ## Summary
#
# - Layer norm's backward pass has three paths per entry (direct, through the mean, through the spread); its rows
#   sum to 0. GELU's derivative is one product rule and one chain rule; the MLP is lesson 07's linear rule twice.
# - Cross-entropy's gradient is probabilities minus the one-hot target, divided by the number of positions; an
#   embedding's gradient adds every position's gradient into its token's row (`np.add.at`).
# - In a residual block, where the stream splits the gradients add: at $x_1$ and again at $x$.
# - Temperature divides the logits, top-k keeps the k largest, and the KV cache makes each new token one token's
#   work.
# - Ablation finds the heads a behaviour needs; K-composition reads from the weights which head's output another
#   head's keys look at.
