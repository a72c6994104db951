# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade_id": "intro"}
# # Lesson 07 · Heads that learn: attention's backward pass, and a tiny model trained until known heads appear
#
# Lesson 02 built a previous-token head by hand. Here heads *learn* their jobs. You derive and write the backward
# pass of attention in numpy, prove it right with finite differences, and train a tiny attention-only
# transformer, built from the forward functions of lessons 01-02 and your backward functions, until a
# previous-token head and induction heads appear (Olsson et al., 2022, *In-context learning and induction heads*).
#
# **Goals.** By the end of this lesson you can
# 1. derive the gradient of softmax, of scaled dot-product attention and of a multi-head layer, with shapes;
# 2. check any analytic gradient against central finite differences, and read the error it reports;
# 3. show by experiment that attention without positions is permutation equivariant, and fix it with the paper's
#    sinusoidal positions (section 3.5);
# 4. train a model whose heads specialise, measure each head's previous-token and induction score, and tell
#    when a run has failed to grow the head you expected.
#
# **Time needed:** about 90 minutes. **You need:** lessons 01 and 02 (softmax, attention with a mask,
# `split_heads`, `concat_heads`, multi-head attention) and the chain rule.
#
# **Names** (the [glossary](glossary.md) lists every one). `B` batch, `T` sequence length (`T_q`, `T_k`), `d_model`,
# `n_heads`, `d_head = d_model // n_heads`, `W_Q, W_K, W_V, W_O` applied as `x @ W`, a boolean `mask` in which
# **True marks a blocked pair**. New here: `grad_out` is the gradient of a scalar loss $L$ with respect to a
# function's output, and `dQ`, `dK`, `dV` those with respect to `Q`, `K`, `V`: a gradient always has the shape of
# what it is the gradient of.

# %% nbgrader={"grade_id": "setup", "points": 0}
### BEGIN HIDDEN TESTS
import os as _os, sys as _sys  # noqa: E401  grading: never import from the submission's folder
_sys.path[:] = [p for p in _sys.path if p and _os.path.abspath(p) != _os.getcwd()]
__import__("autograder.kernel.hidden_cell")  # grading: loaded before any cell of the learner's below can break imports
### END HIDDEN TESTS
import os

# The model's matrices are tiny: one BLAS thread is fastest (threads cost more than they save). Set before numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import io
import math
import time

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import DisplayHandle, Image, display
from matplotlib.figure import Figure

from selfcheck_07 import (check_attention_backward, check_gradient_check, check_mha_backward,
                          check_sinusoidal_positions, check_softmax_backward, gradient_check_probe)  # noqa: F401

# MHA_SHORT_TRAINING=1 (set by the grading command and the course's tests) trains for a few steps only.
SHORT = os.environ.get("MHA_SHORT_TRAINING") == "1"

# %% [markdown] nbgrader={"grade_id": "given_intro"}
# The forward functions of lessons 01 and 02, given here so this lesson stands on its own:

# %% nbgrader={"grade_id": "given"}
def softmax(x, axis=-1):
    """Stable softmax along `axis`; a row of -inf (every key blocked) gives zeros (lesson 01)."""
    row_max = np.max(x, axis=axis, keepdims=True)  # one maximum per row along `axis`
    row_max = np.where(np.isfinite(row_max), row_max, 0)  # a row of -inf (all blocked) is not shifted
    e = np.exp(x - row_max)
    total = np.sum(e, axis=axis, keepdims=True)
    return e / np.where(total > 0, total, 1)  # an all-zero row stays 0 instead of 0/0


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
    x = x.reshape(*lead, T, n_heads, d_model // n_heads)  # (..., T, n_heads, d_head)
    return np.swapaxes(x, -3, -2)  # (..., n_heads, T, d_head)


def concat_heads(x):
    """(..., n_heads, T, d_head) -> (..., T, d_model), the inverse of split_heads (lesson 02)."""
    *lead, n_heads, T, d_head = x.shape
    x = np.swapaxes(x, -3, -2)  # (..., T, n_heads, d_head)
    return x.reshape(*lead, T, n_heads * d_head)  # (..., T, d_model)


def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """Multi-head self-attention: returns (out (..., T, d_model), weights (..., n_heads, T, T)) (lesson 02)."""
    Q, K, V = (split_heads(x @ W, n_heads) for W in (W_Q, W_K, W_V))  # each (..., n_heads, T, d_head)
    heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # (..., n_heads, T, d_head), (..., n_heads, T, T)
    return concat_heads(heads) @ W_O, weights  # (..., T, d_model)


# %% [markdown] nbgrader={"grade_id": "softmax_intro"}
# ## 1. The gradient of softmax, without its Jacobian
#
# Training moves every weight against the gradient of a scalar loss $L$. The backward pass computes those
# gradients from the output's gradient, one function at a time, by the chain rule: each function receives
# $\partial L/\partial(\text{its output})$ and returns $\partial L/\partial(\text{its inputs})$.
#
# Take one row of scores $s$ (length `T_k`) and its weights $p = \mathrm{softmax}(s)$. Since
# $p_j = e^{s_j}/\sum_k e^{s_k}$,
# $$\frac{\partial p_j}{\partial s_i} = p_j(\delta_{ij} - p_i), \qquad J = \mathrm{diag}(p) - p p^\top
# \quad (T_k \times T_k).$$
# Given $g = \partial L/\partial p$, the chain rule gives $\partial L/\partial s_i = \sum_j g_j p_j(\delta_{ij} - p_i)
# = p_i\,(g_i - \sum_j g_j p_j)$. So
# $$\frac{\partial L}{\partial s} = p \odot \big(g - (g \cdot p)\big):$$
# one elementwise product and one sum per row. Never build $J$: for a batch of `(B, n_heads, T, T)` weights it would
# be `(B, n_heads, T, T, T)`, `T` times more memory for the same numbers.
#
# Two facts to check your result against: each row of $\partial L/\partial s$ sums to 0 (adding a constant to a row
# of scores changes no weight), and a blocked key ($p_j = 0$) gets gradient exactly 0.
#
# Implement `softmax_backward(weights, grad_weights, axis=-1)`: `weights` is `softmax(scores, axis)`, `grad_weights`
# is $\partial L/\partial$`weights` (same shape); return $\partial L/\partial$`scores`. Sum along `axis` with
# `keepdims=True`. float32 in, float32 out.

# %% nbgrader={"grade_id": "softmax_backward", "solution": true}
def softmax_backward(weights, grad_weights, axis=-1):
    """dL/dscores from weights = softmax(scores, axis) and dL/dweights (same shape)."""
    ### BEGIN SOLUTION
    dot = np.sum(grad_weights * weights, axis=axis, keepdims=True)  # one g . p per row
    return weights * (grad_weights - dot)
    ### END SOLUTION


# %% nbgrader={"grade_id": "softmax_backward_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("softmax_backward_values")
### END HIDDEN TESTS
# Self-check: rows of the gradient sum to 0, a directional derivative of softmax agrees, float32 kept.
check_softmax_backward(softmax_backward)

# %% [markdown] nbgrader={"grade_id": "gradcheck_intro"}
# ## 2. Trust, but check: the gradient check
#
# A backward pass can be wrong and still have the right shapes. The test that catches it costs nothing to write:
# move one input entry by $\pm\varepsilon$ and watch the loss,
# $$\frac{\partial f}{\partial x_i} \approx \frac{f(x + \varepsilon e_i) - f(x - \varepsilon e_i)}{2\varepsilon}.$$
# This *central* difference is off by $O(\varepsilon^2)$; the one-sided $(f(x + \varepsilon e_i) - f(x))/\varepsilon$ is
# off by $O(\varepsilon)$, a million times worse at $\varepsilon = 10^{-6}$.
#
# Implement `gradient_check(f, inputs, grad, eps=1e-6)`:
# - `f(*inputs)` returns a number; `inputs` is a list of arrays and `grad` the list of their analytic gradients.
# - Work on **float64 copies** of the inputs (`np.array(a, dtype=np.float64)`): $\varepsilon = 10^{-6}$ is below
#   float32's resolution, and the caller's arrays must not change. Move one entry, call `f` on the copies, put the
#   entry back exactly (`x.reshape(-1)` is a view you can index with one number).
# - For each input, its error is $\max|a - n| \,/\, \max(\max|a|, \max|n|, 10^{-12})$, with $a$ the analytic and
#   $n$ the numeric gradient: relative to the size of the whole gradient, not entry by entry, because an entry
#   that is exactly 0 (a blocked pair) would otherwise divide rounding noise by 0.
# - Return the largest error over the inputs, a float. Below about $10^{-7}$ the gradient is right; a wrong one
#   is off by $10^{-2}$ or more.

# %% nbgrader={"grade_id": "gradient_check", "solution": true}
def gradient_check(f, inputs, grad, eps=1e-6):
    """Largest relative error between the analytic gradients `grad` and central differences of f(*inputs)."""
    ### BEGIN SOLUTION
    xs = [np.array(a, dtype=np.float64) for a in inputs]
    worst = 0.0
    for x, analytic in zip(xs, grad):
        numeric = np.zeros_like(x)
        flat, numeric_flat = x.reshape(-1), numeric.reshape(-1)  # views
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + eps
            f_plus = float(f(*xs))
            flat[i] = old - eps
            f_minus = float(f(*xs))
            flat[i] = old
            numeric_flat[i] = (f_plus - f_minus) / (2 * eps)
        analytic = np.asarray(analytic, dtype=np.float64)
        size = max(np.max(np.abs(analytic)), np.max(np.abs(numeric)), 1e-12)
        worst = max(worst, float(np.max(np.abs(analytic - numeric)) / size))
    return worst
    ### END SOLUTION


# %% nbgrader={"grade_id": "gradient_check_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("gradient_check_values")
### END HIDDEN TESTS
# Self-check: a right gradient passes, a wrong one is caught, central (not one-sided) differences, inputs kept.
check_gradient_check(gradient_check)

# %% [markdown] nbgrader={"grade_id": "gradcheck_use_intro"}
# Now point your check at your own `softmax_backward`: the loss is $L = \sum G \odot \mathrm{softmax}(s)$ for a
# fixed random $G$, so $\partial L/\partial\,\mathrm{weights} = G$. One query's keys 3 and 5 are blocked (score
# $-\infty$).

# %%
rng = np.random.default_rng(0)
s = rng.normal(size=(4, 6))  # (T_q, T_k)
s[1, [3, 5]] = -np.inf
G = rng.normal(size=(4, 6))  # (T_q, T_k)
error = gradient_check(lambda s: np.sum(G * softmax(s)), [s], [softmax_backward(softmax(s), G)])
print(f"softmax_backward: largest relative error {error:.1e} (right below about 1e-7)")

# %% [markdown] nbgrader={"grade_id": "attention_intro"}
# ## 3. Backward through scaled dot-product attention
#
# The forward pass, with its shapes:
#
# | step | shape |
# |---|---|
# | $S = Q K^\top / \sqrt{d_k}$ | `(..., T_q, T_k)` |
# | $P = \mathrm{softmax}(S)$ along the keys, blocked pairs 0 | `(..., T_q, T_k)` |
# | $O = P V$ | `(..., T_q, d_v)` |
#
# Walk it backwards with $G = \partial L/\partial O$ (`grad_out`, `(..., T_q, d_v)`). For a matmul $C = AB$, the
# gradients are $\partial L/\partial A = (\partial L/\partial C) B^\top$ and $\partial L/\partial B = A^\top
# (\partial L/\partial C)$: the shapes leave no other choice.
# 1. $dV = P^\top G$: `(..., T_k, T_q) @ (..., T_q, d_v)`; every key's value collects the gradient of every query
#    that read it, weighted by how much it read.
# 2. $dP = G V^\top$: `(..., T_q, T_k)`.
# 3. $dS$ = `softmax_backward(P, dP)`; blocked pairs have $P = 0$, so they get no gradient.
# 4. $dQ = dS\, K / \sqrt{d_k}$ and $dK = dS^\top Q / \sqrt{d_k}$: the scale multiplies the scores, so it
#    multiplies their gradient too. Forget it and every gradient of $Q$ and $K$ is $\sqrt{d_k}$ times too big.
#
# Implement `scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None)` and return
# `(dQ, dK, dV)`. Use the `weights` the forward pass returned (do not recompute them), swap the last two axes with
# `np.swapaxes(a, -1, -2)` (never `.T`, which reverses the batch axes too), call your `softmax_backward`, and
# scale with `math.sqrt(d_k)`, a Python float (`np.sqrt` would turn float32 into float64). Queries and keys may
# differ in number (`T_q != T_k`), and the inputs may have batch axes.

# %% nbgrader={"grade_id": "attention_backward", "solution": true}
def scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None):
    """(dQ, dK, dV) of softmax(Q K^T / sqrt(d_k)) V, given the forward pass's weights and dL/dout."""
    ### BEGIN SOLUTION
    scale = 1.0 / math.sqrt(Q.shape[-1])
    dV = np.swapaxes(weights, -1, -2) @ grad_out  # (..., T_k, d_v)
    grad_weights = grad_out @ np.swapaxes(V, -1, -2)  # (..., T_q, T_k)
    grad_scores = softmax_backward(weights, grad_weights, axis=-1)  # (..., T_q, T_k); 0 where blocked
    dQ = grad_scores @ K * scale  # (..., T_q, d_k)
    dK = np.swapaxes(grad_scores, -1, -2) @ Q * scale  # (..., T_k, d_k)
    return dQ, dK, dV
    ### END SOLUTION


# %% nbgrader={"grade_id": "attention_backward_values", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("attention_backward_values")
### END HIDDEN TESTS
# Self-check: directional derivatives of attention (masked, T_q != T_k, batched), the scale, float32 kept.
check_attention_backward(scaled_dot_product_attention_backward, softmax_backward)

# %% [markdown] nbgrader={"grade_id": "mha_intro"}
# ## 4. Backward through a multi-head layer
#
# Forward: $Q = x W_Q$ and the same for $K$, $V$ (each `(..., T, d_model)`), split into heads
# `(..., n_heads, T, d_head)`, attention per head, concat back to `(..., T, d_model)`, then $\text{out} =
# \text{concat} \cdot W_O$. Backwards, with `grad_out` $= \partial L/\partial\,\text{out}$:
# 1. $dW_O = \text{concat}^\top\,$`grad_out`, summed over the batch and the positions: with batch axes, flatten
#    both to `(B*T, d_model)` first (`a.reshape(-1, d_model)`), then one matmul does the sum.
# 2. $d\,\text{concat}$ = `grad_out` $W_O^\top$, `(..., T, d_model)`.
# 3. Split and concat only move numbers around (they are permutations of the columns), so the gradient moves
#    back the same way: the gradient of concat's input is `split_heads` of its output's gradient, and the
#    gradient of split's input is `concat_heads` of its output's gradient. Route it through any other layout
#    and head 0's gradient lands in head 1's columns.
# 4. Attention backward per head (your function does all heads at once), then concat `dQ`, `dK`, `dV` back to
#    `(..., T, d_model)`.
# 5. $dW_Q = x^\top dQ$ (summed over batch and positions, as in step 1), and the same for $K$ and $V$.
# 6. $x$ feeds three projections, so its gradient is the sum of three paths:
#    $dx = dQ\, W_Q^\top + dK\, W_K^\top + dV\, W_V^\top$.
#
# Implement `multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None)` and return a dict
# with keys `"x"`, `"W_Q"`, `"W_K"`, `"W_V"`, `"W_O"`, each the gradient of that input, of its shape. Recompute
# the forward pass inside (with the given `split_heads`, `scaled_dot_product_attention`, `concat_heads`); a
# `(T, T)` mask applies to every head.

# %% nbgrader={"grade_id": "mha_backward", "solution": true}
def multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None):
    """Gradients of multi_head_attention's out w.r.t. x, W_Q, W_K, W_V, W_O, given dL/dout; returns a dict."""
    ### BEGIN SOLUTION
    d_model = x.shape[-1]
    Q = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    K = split_heads(x @ W_K, n_heads)  # (..., n_heads, T, d_head)
    V = split_heads(x @ W_V, n_heads)  # (..., n_heads, T, d_head)
    per_head, weights = scaled_dot_product_attention(Q, K, V, mask)  # the forward pass again
    concat = concat_heads(per_head)  # (..., T, d_model)
    grad_W_O = concat.reshape(-1, d_model).T @ grad_out.reshape(-1, d_model)  # (d_model, d_model)
    grad_heads = split_heads(grad_out @ W_O.T, n_heads)  # (..., n_heads, T, d_head)
    dQ, dK, dV = scaled_dot_product_attention_backward(Q, K, V, weights, grad_heads, mask)
    dQ, dK, dV = concat_heads(dQ), concat_heads(dK), concat_heads(dV)  # each (..., T, d_model)
    x_flat = x.reshape(-1, d_model)  # (B*T, d_model)
    return {"x": dQ @ W_Q.T + dK @ W_K.T + dV @ W_V.T,
            "W_Q": x_flat.T @ dQ.reshape(-1, d_model),
            "W_K": x_flat.T @ dK.reshape(-1, d_model),
            "W_V": x_flat.T @ dV.reshape(-1, d_model),
            "W_O": grad_W_O}
    ### END SOLUTION


# %% nbgrader={"grade_id": "mha_backward_values", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("mha_backward_values")
### END HIDDEN TESTS
# Self-check: every gradient's shape and directional derivative, batched and masked, float32 kept.
check_mha_backward(multi_head_attention_backward, multi_head_attention)

# %% [markdown] nbgrader={"grade_id": "mha_check_intro"}
# Your gradient check on your whole layer: batched, causal, all five gradients at once.

# %%
rng = np.random.default_rng(1)
B, T, d_model, n_heads = 2, 5, 6, 3
x = rng.normal(size=(B, T, d_model))
Ws = [rng.normal(size=(d_model, d_model)) / math.sqrt(d_model) for _ in range(4)]  # W_Q, W_K, W_V, W_O
causal = np.triu(np.ones((T, T), dtype=bool), k=1)  # (T, T) True above the diagonal: the future is blocked
G = rng.normal(size=(B, T, d_model))  # (B, T, d_model)
loss = lambda x, *Ws: np.sum(G * multi_head_attention(x, *Ws, n_heads, causal)[0])  # noqa: E731
grads = multi_head_attention_backward(x, *Ws, n_heads, G, causal)
error = gradient_check(loss, [x, *Ws], [grads[k] for k in ("x", "W_Q", "W_K", "W_V", "W_O")])
print(f"multi_head_attention_backward: largest relative error {error:.1e} over x and the four weights")

# %% [markdown] nbgrader={"grade_id": "positions_intro"}
# ## 5. Attention cannot see order: positions
#
# Permute the tokens of $x$ and every query still meets the same keys with the same values, only in another
# order, and a weighted average does not care about order. So self-attention is **permutation equivariant**:
# $\mathrm{MHA}(x[\pi]) = \mathrm{MHA}(x)[\pi]$. A model that must attend to "the previous token" needs to know
# where each token is. The paper adds a fixed position code to every token (section 3.5):
# $$PE_{t,\,2i} = \sin\!\big(t / 10000^{2i/d_{model}}\big), \qquad
# PE_{t,\,2i+1} = \cos\!\big(t / 10000^{2i/d_{model}}\big).$$
# Columns $2i$ and $2i+1$ form one pair with one frequency, sine then cosine, interleaved; frequencies fall from 1
# (columns 0, 1) to about $1/10000$. For any fixed offset $k$, $PE_{t+k}$ is a rotation of $PE_t$, pair by pair,
# so a linear map can turn "position $t$" into "position $t-1$": that is how a previous-token head can be learned.
#
# Implement `sinusoidal_positions(T, d_model)` returning the `(T, d_model)` float64 array (`d_model` is even).
# Positions $t = 0, \dots, T-1$.

# %% nbgrader={"grade_id": "sinusoidal_positions", "solution": true}
def sinusoidal_positions(T, d_model):
    """The paper's sinusoidal position encoding, (T, d_model)."""
    ### BEGIN SOLUTION
    t = np.arange(T)[:, None]  # (T, 1)
    freq = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)  # one frequency per pair of columns
    pe = np.zeros((T, d_model))
    pe[:, 0::2] = np.sin(t * freq)
    pe[:, 1::2] = np.cos(t * freq)
    return pe
    ### END SOLUTION


# %% nbgrader={"grade_id": "positions_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("positions_values")
### END HIDDEN TESTS
# Self-check: shape, known values, interleaved sine/cosine pairs, one frequency per pair.
check_sinusoidal_positions(sinusoidal_positions)

# %% [markdown] nbgrader={"grade_id": "positions_plot_intro"}
# *Figure (alt text): the encoding of 64 positions with d_model = 64 as an image, positions down, columns across;
# the left columns alternate quickly between light and dark as the position grows, and the right columns change
# so slowly that they look constant (sines near 0, cosines near 1).*

# %%
fig, ax = plt.subplots(figsize=(7, 3.6))
image = ax.imshow(sinusoidal_positions(64, 64), cmap="viridis", aspect="auto")
ax.set(xlabel="column of the encoding (0 .. d_model - 1)", ylabel="position t",
       title="Sinusoidal positions: fast pairs on the left, slow on the right")
fig.colorbar(image, ax=ax, label="value")
fig.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade_id": "equivariance_intro"}
# The experiment: a random layer, five tokens, a random permutation. Without positions, permuting the input
# permutes the output, exactly. With positions added to each token *after* permuting (position 0 stays position 0),
# it does not.

# %%
rng = np.random.default_rng(7)
T, d_model, n_heads = 5, 8, 2
x = rng.normal(size=(T, d_model))
Ws = [rng.normal(size=(d_model, d_model)) / math.sqrt(d_model) for _ in range(4)]  # W_Q, W_K, W_V, W_O
perm = rng.permutation(T)
pe = sinusoidal_positions(T, d_model)
plain = np.abs(multi_head_attention(x[perm], *Ws, n_heads)[0] - multi_head_attention(x, *Ws, n_heads)[0][perm])
placed = np.abs(multi_head_attention(x[perm] + pe, *Ws, n_heads)[0]
                - multi_head_attention(x + pe, *Ws, n_heads)[0][perm])
print(f"permutation {perm.tolist()}")
print(f"without positions: largest |MHA(x[perm]) - MHA(x)[perm]| = {plain.max():.1e}  (equivariant)")
print(f"with positions:    largest difference                    = {placed.max():.2f}  (order now matters)")

# %% [markdown] nbgrader={"grade_id": "model_intro"}
# ## 6. A tiny attention-only transformer
#
# The model (given: read it, you do not write it) is what Olsson et al. study, with no feed-forward layers and no
# layer norm:
#
# | step | shape |
# |---|---|
# | tokens, integers in `0 .. n_vocab-1` | `(B, T)` |
# | $x_0$ = embedding rows of the tokens + position rows | `(B, T, d_model)` |
# | $x_{l+1} = x_l + \mathrm{MHA}_l(x_l)$ with the causal mask (residual connection) | `(B, T, d_model)` |
# | logits $= x_L W_U$, then cross-entropy against the next token | `(B, T, n_vocab)` |
#
# The positions start at your `sinusoidal_positions` (times 0.5) and are learned, like everything else. The
# backward pass runs your `multi_head_attention_backward` once per layer; a residual connection passes its
# gradient straight through *and* through the layer, so the two add. Adam (given) updates every array. The
# model trains in float32: your functions keep float32, and that halves the time. Seeds are fixed.
#
# Two numbers say what a head does, from its weights on a fixed evaluation batch:
# - **previous-token score**: the mean weight from each position $t \ge 1$ on key $t-1$;
# - **induction score**: in a sequence whose second half repeats its first half (length `T_half`), the mean weight
#   from each position $t$ of the second half on key $t - T_{half} + 1$: the token that followed the earlier copy
#   of the current token, which is the next token. A uniform causal head scores about $1/t$ on both.

# %%
def init_model(n_vocab, T, d_model, n_layers, rng):
    """Embedding E, learned positions P (starting at the sinusoidal ones), each layer's four projections, W_U."""
    params = {"E": rng.normal(size=(n_vocab, d_model)) * 0.5, "P": sinusoidal_positions(T, d_model) * 0.5,
              "W_U": rng.normal(size=(d_model, n_vocab)) / math.sqrt(d_model)}
    for layer in range(n_layers):
        for name in ("W_Q", "W_K", "W_V", "W_O"):
            params[f"{name}{layer}"] = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    return {name: a.astype(np.float32) for name, a in params.items()}


def layer_weights(params, layer):
    return [params[f"{name}{layer}"] for name in ("W_Q", "W_K", "W_V", "W_O")]


def forward(params, tokens, n_layers, n_heads):
    """Logits (B, T, n_vocab), every layer's input, every layer's attention weights, the mask and the last x."""
    T = tokens.shape[1]
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)  # (T, T) causal: True above the diagonal
    x = params["E"][tokens] + params["P"][:T]  # (B, T, d_model)
    inputs, weights = [], []
    for layer in range(n_layers):
        out, w = multi_head_attention(x, *layer_weights(params, layer), n_heads, mask)
        inputs.append(x)
        weights.append(w)  # (B, n_heads, T, T)
        x = x + out  # the residual connection
    return x @ params["W_U"], inputs, weights, mask, x


def loss_and_grads(params, tokens, targets, counted, n_layers, n_heads):
    """Mean cross-entropy over the positions `counted` (B, T) marks, every parameter's gradient, the weights and
    each position's loss."""
    logits, inputs, weights, mask, x_last = forward(params, tokens, n_layers, n_heads)
    probs = softmax(logits)  # (B, T, n_vocab)
    picked = np.take_along_axis(probs, targets[..., None], axis=-1)[..., 0]  # (B, T)
    per_position = -np.log(picked + 1e-9)
    n = counted.sum()
    grad_logits = probs.copy()  # dL/dlogits = (probs - one_hot(targets)) / n, on counted positions only
    np.put_along_axis(grad_logits, targets[..., None], picked[..., None] - 1, axis=-1)
    grad_logits *= (counted / n)[..., None].astype(np.float32)
    d_model = params["E"].shape[1]
    grads = {"W_U": x_last.reshape(-1, d_model).T @ grad_logits.reshape(-1, grad_logits.shape[-1])}
    grad_x = grad_logits @ params["W_U"].T  # (B, T, d_model)
    for layer in reversed(range(n_layers)):
        g = multi_head_attention_backward(inputs[layer], *layer_weights(params, layer), n_heads, grad_x, mask)
        for name in ("W_Q", "W_K", "W_V", "W_O"):
            grads[f"{name}{layer}"] = g[name]
        grad_x = grad_x + g["x"]  # residual: straight through, plus through the layer
    grads["E"] = np.zeros_like(params["E"])
    np.add.at(grads["E"], tokens, grad_x)  # each token's embedding row collects its positions' gradients
    grads["P"] = np.zeros_like(params["P"])
    grads["P"][:tokens.shape[1]] = grad_x.sum(axis=0)
    return float((per_position * counted).sum() / n), grads, weights, per_position


def adam_step(params, grads, state, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    """One Adam update of every array in place (Kingma and Ba, 2015)."""
    state["t"] = state.get("t", 0) + 1
    for name, g in grads.items():
        m = state.setdefault(("m", name), np.zeros_like(g))
        v = state.setdefault(("v", name), np.zeros_like(g))
        m += (1 - beta1) * (g - m)
        v += (1 - beta2) * (g * g - v)
        m_hat = m / (1 - beta1 ** state["t"])
        v_hat = v / (1 - beta2 ** state["t"])
        params[name] -= (lr * m_hat / (np.sqrt(v_hat) + eps)).astype(params[name].dtype)


def previous_token_batch(rng, B, T, n_vocab):
    """Random tokens; the target at position t is the token at t - 1 (position 0 is not counted)."""
    tokens = rng.integers(0, n_vocab, size=(B, T))  # (B, T)
    counted = np.ones((B, T))
    counted[:, 0] = 0
    return tokens, np.roll(tokens, 1, axis=1), counted


def repeated_batch(rng, B, T_half, n_vocab):
    """T_half distinct random tokens, then the same again; the target is the next token (the last not counted)."""
    first = np.argsort(rng.random((B, n_vocab)), axis=1)[:, :T_half]  # (B, T_half)
    tokens = np.concatenate([first, first], axis=1)  # (B, T)
    counted = np.ones(tokens.shape)
    counted[:, -1] = 0
    return tokens, np.roll(tokens, -1, axis=1), counted


def previous_token_scores(weights):
    """Per head: mean weight from position t on key t - 1. weights (B, n_heads, T, T) -> (n_heads,)."""
    t = np.arange(1, weights.shape[-1])
    return weights[..., t, t - 1].mean(axis=(0, 2))


def induction_scores(weights, T_half):
    """Per head: mean weight from each second-half position t on key t - T_half + 1. -> (n_heads,)."""
    t = np.arange(T_half, weights.shape[-1])
    return weights[..., t, t - T_half + 1].mean(axis=(0, 2))


def train(task, n_steps, every, *, n_vocab, d_model=32, n_heads=4, B=64, lr=1e-2, seed=0):
    """Train on `task` ("previous" or "induction"); every `every` steps, record the scores on a fixed evaluation
    batch, its losses and one example's attention weights."""
    rng = np.random.default_rng(seed)
    n_layers, T = (1, 20) if task == "previous" else (2, 20)
    params = init_model(n_vocab, T, d_model, n_layers, rng)
    state = {}
    eval_rng = np.random.default_rng(seed + 1000)
    if task == "previous":
        eval_batch = previous_token_batch(eval_rng, 256, T, n_vocab)
    else:
        eval_batch = repeated_batch(eval_rng, 256, T // 2, n_vocab)
    history = {"task": task, "steps": [], "loss": [], "first_half": [], "second_half": [], "scores": [],
               "patterns": [], "tokens": eval_batch[0][0]}
    start = time.perf_counter()
    for step in range(n_steps + 1):
        if step % every == 0 or step == n_steps:
            loss, _, weights, per_position = loss_and_grads(params, *eval_batch, n_layers, n_heads)
            half = T // 2
            history["steps"].append(step)
            history["loss"].append(loss)
            history["first_half"].append(float(per_position[:, :half - 1].mean()))
            history["second_half"].append(float(per_position[:, half:-1].mean()))
            history["scores"].append(
                [previous_token_scores(w) if task == "previous" or layer == 0 else induction_scores(w, half)
                 for layer, w in enumerate(weights)])
            history["patterns"].append([w[0] for w in weights])  # example 0: (n_heads, T, T) per layer
        if step == n_steps:
            break
        if task == "previous":
            batch = previous_token_batch(rng, B, T, n_vocab)
        else:  # the repeated half has a random length, so no head can find the repeat by position alone
            batch = repeated_batch(rng, B, int(rng.integers(6, T // 2 + 1)), n_vocab)
        _, grads, _, _ = loss_and_grads(params, *batch, n_layers, n_heads)
        adam_step(params, grads, state, lr)
    history["seconds"] = time.perf_counter() - start
    return history


TRAINING = {"previous": dict(n_steps=15 if SHORT else 400, every=5 if SHORT else 20, n_vocab=64),
            "induction": dict(n_steps=15 if SHORT else 600, every=5 if SHORT else 30, n_vocab=16)}
runs = {}


def trained(task):
    """The training run of `task`, trained on first use (a later cell reuses it)."""
    if task not in runs:
        runs[task] = train(task, **TRAINING[task])
    return runs[task]


# %% [markdown] nbgrader={"grade_id": "previous_intro"}
# ## 7. Task 1: a previous-token head
#
# One layer, four heads, 64 token kinds, sequences of 20 random tokens; at every position the model must output
# the token *before* it. Nothing tells a head to look one step back; the loss does. Run it (it takes a few
# seconds; the time is printed).
#
# *Figure (alt text): each of the four heads' previous-token score against the training step. All four start
# near 0.2 (spread over the past) and rise; the best ends near 0.8, while the loss falls from about 4 to
# nearly 0.*

# %%
run = trained("previous")
scores = np.array([s[0] for s in run["scores"]])  # one row per checkpoint, one column per head
fig, (ax_s, ax_l) = plt.subplots(1, 2, figsize=(10, 3.6))
for h in range(scores.shape[1]):
    ax_s.plot(run["steps"], scores[:, h], color=plt.cm.viridis(h / scores.shape[1]), label=f"head {h}")
ax_s.set(xlabel="training step", ylabel="previous-token score", ylim=(0, 1), title="Heads learn to look one back")
ax_s.legend()
ax_l.plot(run["steps"], run["loss"], color="0.2")
ax_l.set(xlabel="training step", ylabel="cross-entropy (evaluation batch)", title="Loss")
fig.tight_layout()
plt.show()
best = int(np.argmax(scores[-1]))
print(f"trained {run['steps'][-1]} steps in {run['seconds']:.1f} s; final loss {run['loss'][-1]:.3f}")
print("final previous-token scores per head:", np.round(scores[-1], 2), f"(best: head {best})")
if SHORT:
    print("short mode (MHA_SHORT_TRAINING=1): a few steps only, so no head is expected yet")
else:
    assert scores[-1, best] > 0.6, "no previous-token head appeared: see 'When a head does not appear' below"

# %% [markdown] nbgrader={"grade_id": "previous_read"}
# In lesson 02 you *wrote* a previous-token head: its query columns copied each token's position code and its key
# columns the code of the position before, so the scores peaked one step back. Here the same head grew out of a
# loss. It is not as clean: it keeps some weight on the current token, because the current token's own embedding
# reaches the output through the residual connection anyway, so a little self-attention costs the loss almost
# nothing, and gradient descent only sharpens what the loss pays for.

# %% [markdown] nbgrader={"grade_id": "induction_intro"}
# ## 8. Task 2: induction heads
#
# Two layers, four heads each, 16 token kinds. Each sequence is `T_half` distinct random tokens, then the same
# tokens again ($T = 2\,T_{half}$; `T_half` is drawn from 6 to 10 at each step, so that no head can find the
# repeat from positions alone). The first half cannot be predicted (loss about $\ln 16 \approx 2.8$); the second
# half can, *if* the model learns the two-step circuit Olsson et al. describe: a layer-1 head copies each token's
# previous token into it, and a layer-2 head looks for the position whose previous token equals the current
# token and copies what it finds there.
#
# *Figure (alt text): left, the four layer-2 heads' induction scores against the training step: two of them climb
# from near 0.05 to about 0.8 while two stay low. Right, the loss on the first half stays near 2.8 while the loss
# on the second half falls from 2.8 to below 0.1.*

# %%
run = trained("induction")
scores = np.array([s[1] for s in run["scores"]])  # layer 2's induction scores: a row per checkpoint
fig, (ax_s, ax_l) = plt.subplots(1, 2, figsize=(10, 3.6))
for h in range(scores.shape[1]):
    ax_s.plot(run["steps"], scores[:, h], color=plt.cm.viridis(h / scores.shape[1]), label=f"layer 2, head {h}")
ax_s.set(xlabel="training step", ylabel="induction score", ylim=(0, 1), title="Induction heads appear")
ax_s.legend(fontsize=8)
ax_l.plot(run["steps"], run["first_half"], "--", color="0.5", label="first half (random)")
ax_l.plot(run["steps"], run["second_half"], color=plt.cm.viridis(0.2), label="second half (repeated)")
ax_l.set(xlabel="training step", ylabel="cross-entropy (evaluation batch)", title="Loss by half")
ax_l.legend()
fig.tight_layout()
plt.show()
best = int(np.argmax(scores[-1]))
print(f"trained {run['steps'][-1]} steps in {run['seconds']:.1f} s")
print(f"loss: first half {run['first_half'][-1]:.2f}, second half {run['second_half'][-1]:.2f}")
print("final layer-2 induction scores:", np.round(scores[-1], 2), f"(best: head {best})")
print("layer-1 previous-token scores: ", np.round(run["scores"][-1][0], 2))
if SHORT:
    print("short mode (MHA_SHORT_TRAINING=1): a few steps only, so no head is expected yet")
else:
    assert scores[-1, best] > 0.6, "no induction head appeared: see 'When a head does not appear' below"
    assert run["second_half"][-1] < 0.3 < 2.0 < run["first_half"][-1], "the repeat is not being predicted"

# %% [markdown] nbgrader={"grade_id": "patterns_intro"}
# Watch the heads form. Choose a checkpoint and a head; the image is that head's attention on one evaluation
# sequence (10 tokens, then the same 10 again). An induction head draws a diagonal stripe in the lower-left
# quarter, one step right of the diagonal that pairs each token with its earlier copy. Without a live front end
# the figure shows the last checkpoint, layer 2, the best head.
#
# *Figure (alt text): a 20 by 20 grid of attention weights, queries down and keys across, labelled with the
# sequence's tokens; below the diagonal only (causal). At the last checkpoint the best layer-2 head has a bright
# stripe from query 10, key 1 to query 19, key 10, and little weight anywhere else.*

# %% tags=["nbval-ignore-output"]
run = trained("induction")
step_choice = widgets.SelectionSlider(options=run["steps"], value=run["steps"][-1], description="step")
head_choice = widgets.Dropdown(options=[(f"layer {layer + 1}, head {h}", (layer, h))
                                        for layer in range(2) for h in range(4)],
                               value=(1, int(np.argmax(run["scores"][-1][1]))), description="head")


def as_png(fig):
    """A static image of `fig`: shown with or without a live front end, and replaceable in place."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    return Image(buf.getvalue())


def pattern_figure(step, layer, head):
    i = run["steps"].index(step)
    w = run["patterns"][i][layer][head]  # (T, T)
    labels = [str(t) for t in run["tokens"]]
    fig = Figure(figsize=(5.2, 4.6))
    ax = fig.subplots()
    image = ax.imshow(w, cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    score = run["scores"][i][layer][head]
    kind = "previous-token" if layer == 0 else "induction"
    ax.set(xlabel="key (token)", ylabel="query (token)",
           title=f"step {step}, layer {layer + 1}, head {head}: {kind} score {score:.2f}")
    fig.colorbar(image, ax=ax, label="attention weight")
    fig.tight_layout()
    return fig


display(widgets.VBox([step_choice, head_choice]))
pattern_view = DisplayHandle()  # the output the controls replace in place
pattern_view.display(as_png(pattern_figure(step_choice.value, *head_choice.value)))


def redraw(change=None):
    pattern_view.update(as_png(pattern_figure(step_choice.value, *head_choice.value)))


step_choice.observe(redraw, names="value")
head_choice.observe(redraw, names="value")

# %% [markdown] nbgrader={"grade_id": "failure"}
# ### When a head does not appear
#
# You notice it in the numbers above: the best score stays near the uniform level ($1/t$, about 0.1-0.2) and, for
# task 2, the second half's loss stays close to the first half's. Check in this order:
# 1. **The gradients.** Run the gradient checks of sections 2 and 4 again; a factor missing in `dQ`/`dK` still
#    trains, slowly and badly.
# 2. **The step size.** With `lr` ten times smaller the heads need ten times more steps; much larger and the loss
#    jumps about. `lr=1e-2` is used here.
# 3. **The steps.** Induction heads appear suddenly after a plateau (Olsson et al. call it a phase change); give
#    `n_steps` twice as many before you change anything else.
# 4. **A shortcut.** With `T_half` fixed at 10, a layer-1 head can learn to look exactly 9 positions back and
#    predict the repeat with no induction head at all; the loss falls, the induction score stays at 0. Random
#    `T_half` removes that shortcut. A loss that falls while the score does not is a model solving the task
#    another way, worth a look in the widget.
# 5. **The seed.** A different `seed` gives different heads (which head number becomes the induction head
#    changes), but with these sizes every seed we tried grew one.
#
# ## Summary
#
# - softmax backward is $p \odot (g - g \cdot p)$ per row; its Jacobian is never built.
# - Attention backward: $dV = P^\top G$, $dS$ from softmax backward, $dQ = dS K/\sqrt{d_k}$,
#   $dK = dS^\top Q/\sqrt{d_k}$; blocked pairs get no gradient because their weight is 0.
# - Split and concat are permutations, so gradients go back through the inverse permutation; weight gradients
#   sum over batch and positions; $x$'s gradient sums its three paths.
# - Central differences check any gradient, with an error measured relative to the whole gradient.
# - Without positions attention is permutation equivariant; sinusoidal positions break the symmetry.
# - A previous-token head and induction heads grow out of next-token prediction in a few seconds of numpy.
