# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade_id": "intro"}
# # Lesson 01 · Warm-up: softmax and scaled dot-product attention
#
# **Goals.** By the end of this lesson you can
# 1. write the attention equation from memory and say why the scores are divided by $\sqrt{d_k}$;
# 2. implement a softmax that does not overflow;
# 3. implement scaled dot-product attention with a mask, for one sequence or a whole batch.
#
# **Time needed:** about 40 minutes. **You need:** matrix products and the shape rules of numpy broadcasting.
#
# **How this notebook works.** Cells that say `raise NotImplementedError()` are yours to fill in. After each one
# comes a *self-check* cell: run it and it either prints a line starting with ✔ or tells you what looks wrong.
# When the notebook is graded, hidden tests run your functions on other, random inputs.
#
# Primary source: Vaswani et al., 2017, *Attention Is All You Need*, section 3.2.1.
#
# **Names** (the [glossary](glossary.md) lists every one). `T_q` queries and `T_k` keys (both `T` in
# self-attention), `d_k` the width of a query or key, `d_v` the width of a value, `B` a batch, and a boolean `mask`
# in which **True marks a blocked (query, key) pair**.

# %% nbgrader={"grade_id": "setup", "points": 0}
### BEGIN HIDDEN TESTS
import os as _os, sys as _sys  # noqa: E401  grading: never import from the submission's folder
_sys.path[:] = [p for p in _sys.path if p and _os.path.abspath(p) != _os.getcwd()]
__import__("autograder.kernel.hidden_cell")  # grading: loaded before any cell of the learner's below can break imports
### END HIDDEN TESTS
import math

import matplotlib.pyplot as plt
import numpy as np

from selfcheck_01 import check_attention, check_attention_mask, check_softmax, check_softmax_stable

# %% [markdown] nbgrader={"grade_id": "recall"}
# ## 1. Recall before you build
#
# Answer each question on paper or in your head first, then open **Check**.
#
# **Q1.** Write the scaled dot-product attention equation from memory, with the shape of every matrix.
#
# <details><summary>Check</summary>
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V$$
#
# $Q$ is $(T_q, d_k)$, $K$ is $(T_k, d_k)$, $V$ is $(T_k, d_v)$. The scores $QK^\top/\sqrt{d_k}$ are
# $(T_q, T_k)$: one row per query, one column per key. Softmax runs along each row, so every query gets a
# probability distribution over the keys, and the output, $(T_q, d_v)$, is for each query that weighted average
# of the value rows.
# </details>
#
# **Q2.** Why divide the scores by $\sqrt{d_k}$, and why would the problem get worse as $d_k$ grows?
#
# <details><summary>Check</summary>
#
# If the entries of $q$ and $k$ are independent with mean 0 and variance 1, then $q \cdot k$ is a sum of $d_k$
# such products: its mean is 0 and its variance is $d_k$ (the paper's footnote 4). So the typical score grows
# like $\sqrt{d_k}$. Large scores push softmax towards a one-hot vector, where its gradient is almost zero
# and learning stalls. Dividing by $\sqrt{d_k}$, the standard deviation, brings the scores back to unit spread
# whatever the width. Lesson 04 measures this.
# </details>

# %% [markdown] nbgrader={"grade_id": "softmax_intro"}
# ## 2. A softmax that does not overflow
#
# $\mathrm{softmax}(x)_i = e^{x_i} / \sum_j e^{x_j}$ turns any vector of scores into positive weights that sum
# to 1. Computed literally it breaks for large scores: `np.exp(1000.0)` is already `inf`, and `inf / inf` is
# `nan`. The cure costs one line. For any constant $c$,
# $e^{x_i - c} / \sum_j e^{x_j - c} = e^{x_i} / \sum_j e^{x_j}$, so subtract the largest score first: every
# exponent is then at most 0 and nothing overflows.
#
# The maximum must be each row's own (along `axis`): rows far apart, one near 0 and one near -2000, each need
# their own shift, or every exponent of the low row underflows to 0 and the row becomes 0/0.
#
# One more case comes from masking (section 3): a row whose keys are *all* blocked holds only $-\infty$. Its
# maximum is $-\infty$ and $-\infty - (-\infty)$ is NaN. In this course such a row gets all-zero weights: shift
# a row only by a finite maximum, and divide a row whose exponentials sum to 0 by something other than 0.
#
# Implement `softmax(x, axis=-1)` for arrays of any number of dimensions, normalising along `axis`.
# - Use `keepdims=True` in the max and the sum so they broadcast back against `x`.
# - A row of $-\infty$ gives a row of zeros (not NaN).
# - Do not modify `x`; return a new array with the same shape and dtype (float32 in, float32 out, float64 kept).

# %% nbgrader={"grade_id": "softmax", "solution": true}
def softmax(x, axis=-1):
    """Softmax of x along `axis`, stable for large scores.

    Contract: x is a float32 or float64 array; axis is one of its axes.
    """
    ### BEGIN SOLUTION
    row_max = np.max(x, axis=axis, keepdims=True)  # one maximum per row along `axis`
    row_max = np.where(np.isfinite(row_max), row_max, 0)  # a row of -inf (all blocked) is not shifted
    e = np.exp(x - row_max)
    total = np.sum(e, axis=axis, keepdims=True)
    return e / np.where(total > 0, total, 1)  # an all-zero row stays 0 instead of 0/0
    ### END SOLUTION


# %% nbgrader={"grade_id": "softmax_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("softmax_values")
### END HIDDEN TESTS
# Self-check: known values, any axis, float32 kept.
check_softmax(softmax)

# %% nbgrader={"grade_id": "softmax_stable", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("softmax_stable")
### END HIDDEN TESTS
# Self-check: scores near 1e4 must not overflow; rows far apart; a row of -inf gives zeros.
check_softmax_stable(softmax)

# %% [markdown] nbgrader={"grade_id": "saturation_intro"}
# ### How softmax saturates as scores grow
#
# Take four fixed scores and multiply them all by a growing factor. The plot below uses *your* `softmax`.
# While the scores are small the weights are spread out; as they grow, the largest score takes almost all the
# weight. The right panel shows why that matters for learning: the derivative of the largest weight with
# respect to its own score, $p(1-p)$, shrinks towards 0 once $p$ is close to 1.
#
# *Figure (alt text): left, four attention weights plotted against a score multiplier from 0.1 to 30 on a log
# axis; one weight rises to 1 while the other three fall to 0. Right, the gradient p(1-p) of the largest weight
# on the same axis, peaking near a multiplier of 1 and falling towards 0 as the multiplier grows.*

# %%
base_scores = np.array([1.0, 0.5, 0.0, -0.5])
multipliers = np.logspace(-1, np.log10(30), 60)
weights_by_scale = np.array([softmax(m * base_scores) for m in multipliers])  # (60, 4)
p_top = weights_by_scale[:, 0]

fig, (ax_w, ax_g) = plt.subplots(1, 2, figsize=(10, 3.6))
colors = plt.cm.viridis(np.linspace(0, 0.9, len(base_scores)))
for i, s in enumerate(base_scores):
    ax_w.plot(multipliers, weights_by_scale[:, i], color=colors[i], label=f"score {s:+.1f} × multiplier")
ax_w.set(xscale="log", xlabel="score multiplier", ylabel="softmax weight", title="Weights turn one-hot")
ax_w.legend(fontsize=8)
ax_g.plot(multipliers, p_top * (1 - p_top), color=colors[0])
ax_g.set(xscale="log", xlabel="score multiplier", ylabel="p (1 - p)", title="Gradient of the top weight vanishes")
fig.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade_id": "attention_intro"}
# ## 3. Scaled dot-product attention, with a mask
#
# Implement `scaled_dot_product_attention(Q, K, V, mask=None)` returning `(out, weights)`:
#
# | argument | shape |
# |---|---|
# | `Q` | `(..., T_q, d_k)` |
# | `K` | `(..., T_k, d_k)` |
# | `V` | `(..., T_k, d_v)` |
# | `mask` | boolean, broadcastable to `(..., T_q, T_k)`; **True = blocked** |
# | `weights` (returned) | `(..., T_q, T_k)`, each row sums to 1 |
# | `out` (returned) | `(..., T_q, d_v)` |
#
# The `...` are any leading batch axes: write the function once with `@` and `np.swapaxes(K, -1, -2)` (not
# `K.T`, which would also reverse the batch axes) and it works for one sequence, a batch, or a batch of heads.
#
# **Masking.** A blocked pair must get weight exactly 0 and the open pairs of the row must still sum to 1.
# Put $-\infty$ into the blocked *scores* before softmax: `np.where(mask, -np.inf, scores)`. Zeroing weights
# after softmax leaves rows that no longer sum to 1. A large negative number instead of $-\infty$ fails the
# other way: in a row where every key is blocked all scores are equal and the row gets uniform weights; with
# $-\infty$ and your softmax the row gets all-zero weights, as it should. Conventions differ between libraries
# (lesson 06 compares them); in this course True always means blocked.
#
# Use your `softmax`, scale by `math.sqrt(d_k)` (a Python float keeps float32 input float32; `np.sqrt(d_k)` is a
# numpy float64 and would promote it), keep float64 input float64 (cast nothing), and do not modify the inputs.

# %% nbgrader={"grade_id": "scaled_dot_product_attention", "solution": true}
def scaled_dot_product_attention(Q, K, V, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V with blocked pairs (mask True) given weight 0. Returns (out, weights).

    Contract: Q (..., T_q, d_k), K (..., T_k, d_k) and V (..., T_k, d_v) share one float dtype and leading axes that
    broadcast; mask is None or bool, broadcastable to (..., T_q, T_k).
    """
    ### BEGIN SOLUTION
    d_k = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    weights = softmax(scores, axis=-1)  # (..., T_q, T_k)
    return weights @ V, weights  # (..., T_q, d_v), (..., T_q, T_k)
    ### END SOLUTION


# %% nbgrader={"grade_id": "attention_values", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("attention_values")
### END HIDDEN TESTS
# Self-check: shapes, rows sum to 1, the 1/sqrt(d_k) scale, out = weights @ V, batched, dtypes kept.
check_attention(scaled_dot_product_attention)

# %% nbgrader={"grade_id": "attention_mask", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("attention_mask")
### END HIDDEN TESTS
# Self-check: True = blocked, blocked weights exactly 0 (a fully blocked row too), rows renormalised, a 2-D mask
# broadcast over a batch.
check_attention_mask(scaled_dot_product_attention)

# %% [markdown] nbgrader={"grade_id": "causal_intro"}
# ### See it: a causal mask on a short sentence
#
# A decoder may only look backwards, so query $t$ is blocked from every key after $t$: the mask is True above
# the diagonal, `np.triu(np.ones((T, T), dtype=bool), k=1)`. The tokens below get random vectors (no model has
# been trained), so the pattern inside the lower triangle means nothing yet; the empty upper triangle is the
# mask at work. Lesson 02 gives each head its own projections.
#
# *Figure (alt text): a 6 by 6 heatmap of attention weights for the tokens "The cat sat on the mat", queries on
# the vertical axis and keys on the horizontal axis, in the viridis colour map; every cell above the diagonal is
# exactly 0, and each row's weights sum to 1.*

# %%
tokens = ["The", "cat", "sat", "on", "the", "mat"]
T = len(tokens)
rng = np.random.default_rng(0)
x = rng.normal(size=(T, 8))  # (T, d_k): one random vector per token
causal = np.triu(np.ones((T, T), dtype=bool), k=1)  # True above the diagonal = future keys blocked
_, w = scaled_dot_product_attention(x, x, x, mask=causal)  # w: (T, T)

fig, ax = plt.subplots(figsize=(4.6, 4))
im = ax.imshow(w, cmap="viridis", vmin=0, vmax=1)
ax.set_xticks(range(T), tokens)
ax.set_yticks(range(T), tokens)
ax.set(xlabel="key", ylabel="query", title="Causal self-attention weights")
fig.colorbar(im, ax=ax, label="weight")
fig.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade_id": "summary"}
# ## Summary
#
# - Attention is $\mathrm{softmax}(QK^\top/\sqrt{d_k})V$: each query's output is a weighted average of the value
#   rows, with weights from how well the query matches each key.
# - Subtracting the row maximum makes softmax safe for any score size without changing its value.
# - The $\sqrt{d_k}$ is the standard deviation of a dot product of unit-variance vectors; without it, wide keys
#   saturate softmax and its gradient vanishes.
# - A mask puts $-\infty$ into blocked scores before softmax; in this course True means blocked.
#
# **Next:** lesson 02 runs this function several times in parallel, once per head, on learned projections.
