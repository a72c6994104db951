# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade_id": "intro"}
# # Lesson 02 · The multi-head mechanism
#
# **Goals.** By the end of this lesson you can
# 1. say what one attention misses and what $h$ heads in $d_\text{model}/h$-wide subspaces add;
# 2. implement `split_heads` and `concat_heads` (reshape, *then* transpose) and see what goes wrong without the
#    transpose;
# 3. explain why the output projection $W^O$ is needed, and show that $\mathrm{Concat}(\text{heads})\,W^O$ is a
#    sum of one term per head;
# 4. implement `multi_head_attention` for one sequence or a batch, with a mask that reaches every head;
# 5. watch a previous-token head and a same-word head appear on a real sentence from weights you can read.
#
# **Time needed:** about 60 minutes. **You need:** lesson 01 (softmax and scaled dot-product attention) and numpy's
# `reshape` and `swapaxes`.
#
# Cells that say `raise NotImplementedError()` are yours to fill in; run the self-check cell after each one.
# When the notebook is graded, hidden tests run your functions on other, random inputs.
#
# Primary source: Vaswani et al., 2017, *Attention Is All You Need*, section 3.2.2.
#
# **Names** (the [glossary](glossary.md) lists every one). `B` batch, `T` tokens, `d_model` the width of a token
# vector, `n_heads` the number of heads, `d_head = d_model // n_heads` the width of one head (the paper's $d_k =
# d_v$), `W_Q, W_K, W_V, W_O` the projections, all `(d_model, d_model)` and applied as `x @ W`, and a boolean `mask`
# in which **True marks a blocked (query, key) pair**.

# %% nbgrader={"grade_id": "setup", "points": 0}
### BEGIN HIDDEN TESTS
import os as _os, sys as _sys  # noqa: E401  grading: never import from the submission's folder
_sys.path[:] = [p for p in _sys.path if p and _os.path.abspath(p) != _os.getcwd()]
__import__("autograder.kernel.hidden_cell")  # grading: loaded before any cell of the learner's below can break imports
### END HIDDEN TESTS
import io
import math

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display
from matplotlib.colors import ListedColormap
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from selfcheck_02 import (check_concat_heads, check_mha_mask, check_multi_head_attention, check_output_projection,
                          check_pasted, check_round_trip, check_split_heads, check_sum_over_heads)


def figure_png(fig):
    """A matplotlib figure as a PNG image, shown the same whatever the plotting backend; closes the figure."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return Image(buffer.getvalue())

# %% [markdown] nbgrader={"grade_id": "lesson01_intro"}
# ## 1. Paste cell: your attention from lesson 01
#
# Every head runs the attention you wrote in lesson 01. This lesson's one **paste cell**, marked `PASTE CELL`,
# is below: paste your `softmax` and `scaled_dot_product_attention` bodies into it (same names, same arguments),
# run it, then run the check after it. That check runs lesson 01's self-checks; when one of your pasted functions
# is wrong, it, and any later check that fails because of it, says "This comes from your lesson 01".
#
# Your grade in this lesson never depends on this cell: the hidden tests of this lesson run your new functions with
# a correct attention in place of yours, so a slip left over from lesson 01 is not charged twice. The pictures
# and self-checks in this notebook do use your versions, so make the checks pass first.

# %% nbgrader={"grade_id": "lesson01_functions", "solution": true}
# PASTE CELL: the bodies of your lesson-01 functions go here (same names, same arguments).
def softmax(x, axis=-1):
    """Softmax of x along `axis`, stable for large scores (your lesson-01 version)."""
    ### BEGIN SOLUTION
    row_max = np.max(x, axis=axis, keepdims=True)  # one maximum per row along `axis`
    row_max = np.where(np.isfinite(row_max), row_max, 0)  # a row of -inf (all blocked) is not shifted
    e = np.exp(x - row_max)
    total = np.sum(e, axis=axis, keepdims=True)
    return e / np.where(total > 0, total, 1)  # an all-zero row stays 0 instead of 0/0
    ### END SOLUTION


def scaled_dot_product_attention(Q, K, V, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V, blocked pairs (mask True) get weight 0. Returns (out, weights)."""
    ### BEGIN SOLUTION
    d_k = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    weights = softmax(scores, axis=-1)  # (..., T_q, T_k)
    return weights @ V, weights  # (..., T_q, d_v), (..., T_q, T_k)
    ### END SOLUTION


# %%
# Lesson 01's self-checks, run on the functions you pasted above.
check_pasted(softmax=softmax, scaled_dot_product_attention=scaled_dot_product_attention)

# %% [markdown] nbgrader={"grade_id": "why_heads"}
# ## 2. One attention, one view
#
# Attention gives each query a single set of weights over the keys, and its output is one weighted average of
# the value vectors. A token often needs several different things from its context at once: the word just before
# it, the earlier word it repeats, the verb that governs it. One set of weights has to blend all of these into a
# single average, and what it gains on one relation it loses on the others.
#
# Multi-head attention runs $h$ attentions side by side. Head $i$ has its own projections
# $W^Q_i, W^K_i, W^V_i$, each $d_\text{model} \times d_\text{head}$ with $d_\text{head} = d_\text{model}/h$, and
# applies lesson 01's equation in its own small subspace:
#
# $$\text{head}_i = \mathrm{Attention}(x W^Q_i,\; x W^K_i,\; x W^V_i), \qquad
#   \mathrm{MultiHead}(x) = \mathrm{Concat}(\text{head}_1, \dots, \text{head}_h)\, W^O .$$
#
# Because the projections are separate, each head can learn its own notion of "which key matches this query".
# Nothing assigns roles: in trained models some heads end up tracking position, others repeated words or syntax.
#
# In code the $h$ narrow projections are not stored separately. $W^Q_i$ is simply columns
# $i\,d_\text{head} : (i+1)\,d_\text{head}$ of one `(d_model, d_model)` matrix `W_Q`, so `x @ W_Q` computes every
# head's queries in one product, and **splitting the columns** hands each head its share. That is why the total
# cost stays close to one full-width attention (the paper's section 3.2.2, with $h = 8$ and
# $d_k = d_v = 512/8 = 64$).
#
# **Q1.** A layer has $d_\text{model} = 512$ and 8 heads. What is $d_\text{head}$, and by what is each head's
# score divided?
#
# <details><summary>Check</summary>
#
# $d_\text{head} = 512/8 = 64$, and each head divides its scores by $\sqrt{64} = 8$. The scale follows the
# width the dot product actually sums over, which inside a head is $d_\text{head}$, not $d_\text{model}$:
# dividing by $\sqrt{512}$ would make every head's softmax too flat.
# </details>
#
# **Q2.** If all heads apply the same equation, what lets them attend differently?
#
# <details><summary>Check</summary>
#
# Their projections. Each head reads its own columns of `W_Q`, `W_K` and `W_V`, so its queries and keys are
# different linear views of the same tokens, and the same equation then produces different weights.
# </details>

# %% [markdown] nbgrader={"grade_id": "layer_diagram_intro"}
# ### See it: the whole layer
#
# The picture follows one input through the layer. Each head projects the same tokens with its own columns of `W_Q`,
# `W_K` and `W_V`, attends in its `d_head`-wide subspace and returns `(T, d_head)`; the heads are glued side by side
# (Concat) and `W_O` maps the result back to `d_model`. Sections 3 to 6 build these boxes from left to right.
#
# *Figure (alt text): a left-to-right block diagram of one multi-head attention layer. The input x, shape (T,
# d_model), branches into three rows labelled head 1, head 2 and head h, each in its own pale viridis colour: first
# the head's projections x W^Q_i, x W^K_i, x W^V_i (its own columns of the weights), then its attention softmax(Q
# K^T / sqrt(d_head)) V, shape (T, d_head). The three rows join in a Concat box of shape (T, h times d_head), which
# feeds a box "@ W_O" of shape (d_model, d_model) and then the output, shape (T, d_model).*

# %%
def diagram_box(ax, x, y, w, h, text, color="0.92", fontsize=9):
    """A rounded box centred at (x, y) with its text, drawn on a diagram axis (data units)."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=color, edgecolor="0.25", linewidth=1.2))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)


def diagram_arrow(ax, start, end, **style):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color="0.25", linewidth=1.2,
                                 shrinkA=0, shrinkB=0, **style))


def diagram_axes(width, height, title):
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set(xlim=(0, width), ylim=(0, height), title=title)
    ax.axis("off")
    return fig, ax


head_tints = plt.cm.viridis(np.linspace(0.35, 0.9, 3)) * [1, 1, 1, 0.45]  # light viridis tints, black text
fig, ax = diagram_axes(13, 5.2, "Multi-head attention: one layer, h heads")
rows = [("head 1", 4.1), ("head 2", 2.7), ("head h", 0.9)]
diagram_box(ax, 0.9, 2.5, 1.5, 1.1, "input x\n(T, d_model)")
for (name, y), tint in zip(rows, head_tints):
    i = name.split()[1]
    diagram_arrow(ax, (1.65, 2.5), (2.35, y))
    diagram_box(ax, 3.55, y, 2.3, 1.0, f"$x W^Q_{i}$,  $x W^K_{i}$,  $x W^V_{i}$\n(columns of head {i})", tint,
                fontsize=8)
    diagram_arrow(ax, (4.7, y), (5.3, y))
    diagram_box(ax, 6.45, y, 2.2, 1.0, f"{name}\nsoftmax(Q Kᵀ / √d_head) V\n(T, d_head)", tint, fontsize=8)
    diagram_arrow(ax, (7.55, y), (8.25, 2.5))
ax.text(3.55, 1.8, "...", ha="center", va="center", fontsize=14)
ax.text(6.45, 1.8, "...", ha="center", va="center", fontsize=14)
ax.text(3.55, 5.0, "per-head projections\n(T, d_head) each", ha="center", va="center", fontsize=8, color="0.3")
ax.text(6.45, 5.0, "heads: attention in each\nhead's own subspace", ha="center", va="center", fontsize=8,
        color="0.3")
diagram_box(ax, 9.05, 2.5, 1.6, 1.1, "Concat\n(T, h · d_head)")
diagram_arrow(ax, (9.85, 2.5), (10.35, 2.5))
diagram_box(ax, 11.0, 2.5, 1.3, 1.1, "@ W_O\n(d_model,\nd_model)")
diagram_arrow(ax, (11.65, 2.5), (12.05, 2.5))
ax.text(12.6, 2.5, "out\n(T, d_model)", ha="center", va="center", fontsize=9)
display(figure_png(fig))

# %% [markdown] nbgrader={"grade_id": "split_intro"}
# ## 3. Splitting the columns into heads
#
# `split_heads(x, n_heads)` takes `x` of shape `(..., T, d_model)` and returns `(..., n_heads, T, d_head)` in which
# **head i holds columns `i*d_head:(i+1)*d_head` of every token**. Two steps, in this order:
#
# 1. `reshape` to `(..., T, n_heads, d_head)`: each token's row of `d_model` numbers is cut into `n_heads`
#    consecutive pieces. A reshape never moves numbers in memory, it only regroups them, so this is the only
#    reshape that keeps "token t, columns of head i" together.
# 2. swap the `T` and `n_heads` axes, so the heads come first: `(..., n_heads, T, d_head)`.
#
# Reshaping straight to `(..., n_heads, T, d_head)` has the right shape but the wrong content (the picture below
# shows it). Count axes from the end (`-3`, `-2`) so any leading batch axes pass through untouched, and raise a
# `ValueError` when `n_heads` does not divide `d_model`. Do not copy or convert the data: a reshape and a swap
# keep the dtype.

# %% nbgrader={"grade_id": "split_heads", "solution": true}
def split_heads(x, n_heads):
    """(..., T, d_model) -> (..., n_heads, T, d_head); head i holds columns i*d_head:(i+1)*d_head.

    Contract: x (..., T, d_model) is a float array; n_heads is a positive integer (one that does not divide d_model
    raises ValueError).
    """
    ### BEGIN SOLUTION
    *lead, T, d_model = x.shape
    if d_model % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
    pieces = x.reshape(*lead, T, n_heads, d_model // n_heads)  # (..., T, n_heads, d_head)
    return np.swapaxes(pieces, -3, -2)  # (..., n_heads, T, d_head)
    ### END SOLUTION


# %% nbgrader={"grade_id": "split_heads_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("split_heads_values")
### END HIDDEN TESTS
# Self-check: which columns land in which head, one sequence and a batch, ValueError, dtype kept.
check_split_heads(split_heads)

# %% [markdown] nbgrader={"grade_id": "split_picture_intro"}
# ### See it: where each column goes
#
# Take 4 tokens with `d_model = 12` and 3 heads (`d_head = 4`). Every cell below is labelled `token,column` and
# coloured by the head that column belongs to. The middle panel is *your* `split_heads`, drawn head after head;
# the right panel is what a plain `x.reshape(n_heads, T, d_head)` produces. With the transpose, each head is one
# colour and holds all 4 tokens. Without it, "head 0" is token 0's columns for heads 0, 1 and 2 followed by
# token 1's first columns: pieces of different heads of the first tokens, and the last tokens are not in head 0
# at all.
#
# *Figure (alt text): three grids. Left, the 4 by 12 input with columns 0-3, 4-7 and 8-11 in three viridis
# colours, each cell labelled with its token and column. Middle, the correct split drawn as three stacked 4 by 4
# blocks, each block a single colour with tokens 0 to 3 down its rows. Right, the reshape without transpose:
# the same blocks hold mixed colours, and block 0 contains only tokens 0 and 1.*

# %%
T_pic, n_heads_pic, d_head_pic = 4, 3, 4
d_model_pic = n_heads_pic * d_head_pic
tok, col = np.indices((T_pic, d_model_pic))
x_pic = 100.0 * tok + col  # (T, d_model): entry (t, c) = 100 t + c names its token and column

panels = [
    ("input x  (T, d_model)", x_pic),
    ("your split_heads  (n_heads, T, d_head)", split_heads(x_pic, n_heads_pic).reshape(-1, d_head_pic)),
    ("reshape, no transpose (the bug)", x_pic.reshape(n_heads_pic, T_pic, d_head_pic).reshape(-1, d_head_pic)),
]
head_colors = ListedColormap(plt.cm.viridis(np.linspace(0.0, 0.85, n_heads_pic)))
fig, axes = plt.subplots(1, 3, figsize=(12, 4.2), gridspec_kw={"width_ratios": [3, 1.3, 1.3]})
for ax, (title, grid) in zip(axes, panels):
    owner = (grid % 100) // d_head_pic  # which head each entry's column belongs to
    ax.imshow(owner, cmap=head_colors, vmin=-0.5, vmax=n_heads_pic - 0.5, aspect="auto")
    for (r, c), v in np.ndenumerate(grid):
        ax.text(c, r, f"{int(v // 100)},{int(v % 100)}", ha="center", va="center", fontsize=7,
                color="white" if owner[r, c] == 0 else "black")
    ax.set_title(title, fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])
for ax in axes[1:]:
    for h in range(1, n_heads_pic):
        ax.axhline(h * T_pic - 0.5, color="red", linewidth=2)
    ax.set_yticks([h * T_pic + (T_pic - 1) / 2 for h in range(n_heads_pic)],
                  [f"head {h}" for h in range(n_heads_pic)])
    ax.set_xlabel("column within the head")
axes[0].set_xlabel("column of x (colour = owning head)")
axes[0].set_ylabel("token")
fig.suptitle("Labels are token,column: reshape then transpose keeps each head's columns together")
fig.tight_layout()
display(figure_png(fig))

# %% [markdown] nbgrader={"grade_id": "concat_intro"}
# ## 4. Putting the heads back side by side
#
# `concat_heads(x)` is the exact inverse: `(..., n_heads, T, d_head)` in, `(..., T, n_heads * d_head)` out, with
# row `t` made of head 0, head 1, ... of token `t` side by side. Undo the steps in reverse order: swap the heads
# axis back behind `T`, then reshape. (The swap leaves a non-contiguous view; `reshape` copies when it has to, so
# the result is right either way.)

# %% nbgrader={"grade_id": "concat_heads", "solution": true}
def concat_heads(x):
    """(..., n_heads, T, d_head) -> (..., T, n_heads * d_head); the exact inverse of split_heads.

    Contract: x (..., n_heads, T, d_head) is a float array.
    """
    ### BEGIN SOLUTION
    *lead, n_heads, T, d_head = x.shape
    tokens_first = np.swapaxes(x, -3, -2)  # (..., T, n_heads, d_head)
    return tokens_first.reshape(*lead, T, n_heads * d_head)  # (..., T, d_model)
    ### END SOLUTION


# %% nbgrader={"grade_id": "concat_heads_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("concat_heads_values")
### END HIDDEN TESTS
# Self-check: row t is every head of token t, on one sequence and on a batch.
check_concat_heads(concat_heads)

# %%
# Your two helpers together: the split and the concatenation undo each other exactly.
check_round_trip(split_heads, concat_heads)

# %% [markdown] nbgrader={"grade_id": "output_intro"}
# ## 5. The output projection $W^O$
#
# After concatenation, columns `i*d_head:(i+1)*d_head` of each token's row come from head $i$ and from nothing
# else. Heads never meet: if the layer stopped here, whatever head 2 found could never change the numbers head 0
# wrote. The output projection mixes them. Every output column is a weighted sum over *all* concatenated columns,
# so each one can combine what several heads found.
#
# $W^O$ is **linear**. It mixes heads by adding weighted copies of them, nothing more, so it adds no
# nonlinearity of its own. The layer as a whole is already nonlinear in $x$: the softmax makes each head's
# weights depend nonlinearly on the tokens. (The feed-forward layer after attention adds the block's other
# nonlinearity, an elementwise one; section 9 shows where it sits.) A sum also has a useful reading: cut $W^O$
# into row blocks $W^O_i = W^O[i\,d_\text{head}:(i+1)\,d_\text{head}]$, one per head, and
#
# $$\mathrm{Concat}(\text{head}_1, \dots, \text{head}_h)\, W^O \;=\; \sum_i \text{head}_i\, W^O_i ,$$
#
# because multiplying a row that was glued from pieces is the same as multiplying each piece by its own rows and
# adding. Each head writes its own contribution into the full `d_model` width, and the contributions add up.
#
# Implement `output_projection(heads, W_O)`: heads `(..., n_heads, T, d_head)`, `W_O` `(n_heads*d_head, d_model)`,
# result `(..., T, d_model)`. Use your `concat_heads`.

# %% nbgrader={"grade_id": "output_projection", "solution": true}
def output_projection(heads, W_O):
    """Concat(heads) @ W_O: (..., n_heads, T, d_head), W_O (n_heads*d_head, d_model) -> (..., T, d_model).

    Contract: heads (..., n_heads, T, d_head) and W_O (n_heads * d_head, d_model) share one float dtype.
    """
    ### BEGIN SOLUTION
    joined = concat_heads(heads)  # (..., T, n_heads*d_head)
    return joined @ W_O  # (..., T, d_model)
    ### END SOLUTION


# %%
# Self-check: an identity W_O, a W_O that only reads head 1, W_O not transposed, batches.
# (It calls your concat_heads through your output_projection: make the checks above pass first.)
check_output_projection(output_projection)

# %% nbgrader={"grade_id": "output_projection_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("output_projection_values")
### END HIDDEN TESTS
# Hidden tests of output_projection run here when your notebook is graded, with a correct concat_heads in place
# of yours, so a slip in concat_heads costs points only once. Your self-check is the cell above.

# %% [markdown] nbgrader={"grade_id": "mixing_intro"}
# ### See it: without $W^O$ the heads cannot mix
#
# Change only head 1 and look at which output columns move. After plain concatenation only head 1's own 4
# columns change; after `output_projection` every column does.

# %%
rng = np.random.default_rng(0)
n_heads_mix, T_mix, d_head_mix = 3, 5, 4
d_model_mix = n_heads_mix * d_head_mix
heads_mix = rng.normal(size=(n_heads_mix, T_mix, d_head_mix))  # (n_heads, T, d_head)
W_O_mix = rng.normal(size=(d_model_mix, d_model_mix)) / math.sqrt(d_model_mix)
nudged = heads_mix.copy()
nudged[1] += 1.0  # change head 1 only

moved_concat = np.abs(concat_heads(nudged) - concat_heads(heads_mix)).max(axis=0) > 1e-12  # (d_model,)
moved_proj = np.abs(output_projection(nudged, W_O_mix) - output_projection(heads_mix, W_O_mix)).max(axis=0) > 1e-12
print("columns changed by Concat alone:  ", np.flatnonzero(moved_concat))
print("columns changed by Concat then W_O:", np.flatnonzero(moved_proj))

# %% [markdown] nbgrader={"grade_id": "sum_intro"}
# ### Your turn: $W^O$ as a sum over heads
#
# Write `output_projection_per_head(heads, W_O)` that never concatenates: loop over the heads and add up
# `head_i @ W_O[i*d_head:(i+1)*d_head]`. The check after it compares your sum with the concatenated form on
# random numbers. (This cell is not graded; it is the equation above, made concrete.)

# %% nbgrader={"grade_id": "output_projection_per_head", "solution": true}
def output_projection_per_head(heads, W_O):
    """sum over i of heads[..., i, :, :] @ W_O[i*d_head:(i+1)*d_head], without concatenating."""
    ### BEGIN SOLUTION
    n_heads, d_head = heads.shape[-3], heads.shape[-1]
    total = 0.0
    for i in range(n_heads):
        rows_of_head_i = W_O[i * d_head:(i + 1) * d_head]  # (d_head, d_model)
        total = total + heads[..., i, :, :] @ rows_of_head_i  # (..., T, d_model)
    return total
    ### END SOLUTION


# %%
check_sum_over_heads(output_projection_per_head)
# The same map with W_O stored per head, (n_heads, d_head, d_model), and the sum written as one einsum:
W_O_per_head = W_O_mix.reshape(n_heads_mix, d_head_mix, d_model_mix)  # (n_heads, d_head, d_model)
summed = np.einsum("htd,hdm->tm", heads_mix, W_O_per_head)  # sum over heads h and head columns d
print("einsum over per-head W_O matches output_projection:",
      np.allclose(summed, output_projection(heads_mix, W_O_mix)))

# %% [markdown] nbgrader={"grade_id": "mha_intro"}
# Some codebases store $W^O$ as `(n_heads, d_head, d_model)` and sum over heads, others concatenate and multiply
# by a `(d_model, d_model)` matrix. You have just shown that these are the same map, with the same numbers in a
# different shape.
#
# ## 6. The whole layer
#
# Implement `multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None)` returning `(out, weights)`:
#
# | argument | shape |
# |---|---|
# | `x` | `(..., T, d_model)` |
# | `W_Q`, `W_K`, `W_V`, `W_O` | `(d_model, d_model)`, applied as `x @ W` |
# | `mask` | boolean, True = blocked; a `(T, T)` mask applies to **every** head |
# | `out` (returned) | `(..., T, d_model)` |
# | `weights` (returned) | `(..., n_heads, T, T)` |
#
# Project with the full matrices, split each result into heads, run your `scaled_dot_product_attention` once on
# all heads together (its `...` covers the heads axis, and it scales by the last axis, which is now `d_head`),
# then `output_projection`. A `(T, T)` mask needs no special handling: it broadcasts against
# `(..., n_heads, T, T)`. Do not modify any input.

# %% nbgrader={"grade_id": "multi_head_attention", "solution": true}
def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """Self-attention with n_heads heads. Returns (out (..., T, d_model), weights (..., n_heads, T, T)).

    Contract: x (..., T, d_model) and W_Q, W_K, W_V, W_O (d_model, d_model) share one float dtype; n_heads divides
    d_model; mask is None or bool, broadcastable to (..., n_heads, T, T).
    """
    ### BEGIN SOLUTION
    Q = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    K = split_heads(x @ W_K, n_heads)  # (..., n_heads, T, d_head)
    V = split_heads(x @ W_V, n_heads)  # (..., n_heads, T, d_head)
    heads, weights = scaled_dot_product_attention(Q, K, V, mask=mask)  # (..., n_heads, T, d_head), (..., n_heads, T, T)
    return output_projection(heads, W_O), weights  # (..., T, d_model), (..., n_heads, T, T)
    ### END SOLUTION


# %%
# Self-checks: shapes, each head reads its own columns of W_Q, the 1/sqrt(d_head) scale, batches; then the mask.
# They run your layer with your own helpers and your lesson-01 attention: make the checks above pass first.
check_multi_head_attention(multi_head_attention)
check_mha_mask(multi_head_attention)

# %% nbgrader={"grade_id": "mha_values", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("mha_values")
### END HIDDEN TESTS
# Hidden tests of multi_head_attention without a mask. When graded, your layer runs with a correct split_heads,
# concat_heads, output_projection and attention in place of yours: only the layer's own code is graded here.

# %% nbgrader={"grade_id": "mha_mask", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("mha_mask")
### END HIDDEN TESTS
# Hidden tests of multi_head_attention with masks: a (T, T) mask, a causal mask, a (B, 1, T, T) mask.

# %% nbgrader={"grade_id": "mha_composition", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("mha_composition")
### END HIDDEN TESTS
# Hidden test of the pieces together: your multi_head_attention calling *your* split_heads, concat_heads and
# output_projection, as the contract names them. A piece that is wrong on its own is charged in its own test
# only, not again here.

# %% [markdown] nbgrader={"grade_id": "sentence_intro"}
# ## 7. Heads in action: "The bank approved the loan after the river bank flooded."
#
# No trained model here: we build the weights by hand, so you can read why each head does what it does, and run
# them through *your* `multi_head_attention`.
#
# Each token vector `x` (width `d_model = 80`) holds a one-hot code for its word (8 different words), a one-hot
# code for its position (11 tokens), and some random "content" in the remaining columns. There are 4 heads of
# width `d_head = 20`:
#
# - **head 0, previous token.** Its query columns of `W_Q` copy the position code of token $t$; its key columns
#   of `W_K` copy the position code of token $s$ *shifted by one*. So $q_t \cdot k_s$ is large exactly when
#   $s = t - 1$.
# - **head 1, same word.** Its query and key columns both copy the word code, so $q_t \cdot k_s$ is large when the
#   two tokens are the same word; a position term subtracts the token's match with itself, so the second "bank"
#   looks back at the first one rather than at itself.
# - **heads 2 and 3** get random weights.
#
# `W_V` and `W_O` are the identity. The `sharpness` is the score of a match after the division by
# $\sqrt{d_\text{head}}$; with random weights it scales `W_Q` instead (4, the default, leaves it as drawn).

# %%
sentence = "The bank approved the loan after the river bank flooded ."
tokens = sentence.split()
words = list(dict.fromkeys(t.lower() for t in tokens))  # 8 distinct words, in order of appearance
T_s, n_heads_s, d_head_s = len(tokens), 4, 20
d_model_s = n_heads_s * d_head_s
WORD, POS = 0, len(words)  # x's columns: word code at 0..7, position code at 8..18, content from 20 on

x_s = np.zeros((T_s, d_model_s))  # (T, d_model)
for t, token in enumerate(tokens):
    x_s[t, WORD + words.index(token.lower())] = 1.0
    x_s[t, POS + t] = 1.0
x_s[:, d_head_s:] += np.random.default_rng(2017).normal(scale=0.3, size=(T_s, d_model_s - d_head_s))


def random_weights(seed):
    """W_Q, W_K, W_V, W_O drawn at random; W_Q and W_K large enough that the scores are not all near 0."""
    rng = np.random.default_rng(seed)
    W_Q, W_K = (rng.normal(scale=0.5, size=(d_model_s, d_model_s)) for _ in range(2))
    W_V, W_O = (rng.normal(scale=1 / math.sqrt(d_model_s), size=(d_model_s, d_model_s)) for _ in range(2))
    return W_Q, W_K, W_V, W_O


def hand_built_weights(sharpness=4.0, seed=0):
    """W_Q, W_K, W_V, W_O (each (d_model, d_model)): head 0 previous token, head 1 same word, 2 and 3 random."""
    W_Q, W_K, _, _ = random_weights(seed)
    strength = sharpness * math.sqrt(d_head_s)  # survives the division by sqrt(d_head)
    h0, h1 = 0, d_head_s  # first column of head 0 and of head 1
    W_Q[:, h0:h0 + d_head_s] = 0.0
    W_K[:, h0:h0 + d_head_s] = 0.0
    W_Q[:, h1:h1 + d_head_s] = 0.0
    W_K[:, h1:h1 + d_head_s] = 0.0
    for t in range(T_s):
        W_Q[POS + t, h0 + t] = strength  # head 0 query of token t: "I am at position t"
        W_K[POS + t, h0 + t + 1] = 1.0  # head 0 key of token s: "I am at position s + 1"
    for w in range(len(words)):
        W_Q[WORD + w, h1 + w] = strength  # head 1: the word code, in query and key
        W_K[WORD + w, h1 + w] = 1.0
    for t in range(T_s):
        W_Q[POS + t, h1 + len(words) + t] = strength  # head 1: minus the match with itself
        W_K[POS + t, h1 + len(words) + t] = -1.0
    eye = np.eye(d_model_s)
    return W_Q, W_K, eye, eye


def sentence_weights(kind="hand-built", causal=False, sharpness=4.0):
    """Attention weights (n_heads, T, T) of the sentence under the chosen settings, from your layer."""
    if kind == "hand-built":
        Ws = hand_built_weights(sharpness)
    else:  # random weights: sharpness scales the queries, 4 (the default) leaves them as drawn
        W_Q, W_K, W_V, W_O = random_weights(int(kind[-1]))
        Ws = (W_Q * (sharpness / 4.0), W_K, W_V, W_O)
    mask = np.triu(np.ones((T_s, T_s), dtype=bool), k=1) if causal else None
    _, weights = multi_head_attention(x_s, *Ws, n_heads_s, mask=mask)
    return weights


def draw_head(ax, weights, head, title=None):
    im = ax.imshow(weights[head], cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(T_s), tokens, rotation=60, fontsize=8)
    ax.set_yticks(range(T_s), tokens, fontsize=8)
    ax.set(xlabel="key", ylabel="query", title=title or f"head {head}")
    return im


# %% [markdown] nbgrader={"grade_id": "heads_figure_intro"}
# All four heads with the hand-built weights and no mask. Head 0 puts its weight one step left of the diagonal:
# every token looks at the token before it ("The", with nothing before it, spreads its weight evenly). Head 1
# links the repeated words: the second "bank" looks at the first, each "the" at the other two. Heads 2 and 3,
# random, are diffuse and differ from each other.
#
# *Figure (alt text): four 11 by 11 heatmaps in the viridis colour map, queries down the side and keys along the
# bottom, both labelled with the tokens of the sentence. Head 0 shows a bright line just below the diagonal; head
# 1 shows bright cells linking "bank" to "bank" and "the" to "the"; heads 2 and 3 show faint, spread-out
# patterns.*

# %%
weights_s = sentence_weights()  # (n_heads, T, T)
fig, axes = plt.subplots(1, 4, figsize=(18, 5), constrained_layout=True)
names = ["previous token", "same word", "random", "random"]
for head, ax in enumerate(axes):
    im = draw_head(ax, weights_s, head, f"head {head}: {names[head]}")
    if head > 0:
        ax.set_ylabel("")
fig.colorbar(im, ax=axes, label="attention weight", shrink=0.8)
fig.suptitle("Your multi_head_attention on hand-built weights")
display(figure_png(fig))
print("second 'bank' (query 8) in head 1 puts", round(float(weights_s[1, 8, 1]), 3), "on the first 'bank'")

# %% [markdown] nbgrader={"grade_id": "widget_intro"}
# ### Explore: one head at a time
#
# Pick a head and the layer's settings: the weights (hand-built, or random with one of two seeds), a causal mask,
# and the sharpness of the hand-built heads. Things to try: lower the sharpness and watch head 0's line blur into
# its neighbours; turn on the causal mask and see that the first "bank" finds no earlier "bank" in head 1; switch
# to random weights and compare heads 0 and 1, which are then just two more random heads.
#
# *Figure (alt text): one 11 by 11 heatmap of the chosen head's attention weights in viridis, tokens on both axes,
# redrawn when a control changes; by default head 0 with hand-built weights, a bright line just below the
# diagonal.*

# %% tags=["nbval-ignore-output"]
def head_picture(head=0, kind="hand-built", causal=False, sharpness=4.0):
    """The chosen head's heatmap as a PNG image (works with or without a widget front end)."""
    weights = sentence_weights(kind, causal, sharpness)
    fig, ax = plt.subplots(figsize=(5.4, 4.8))
    im = draw_head(ax, weights, head, f"head {head} · {kind}" + (" · causal" if causal else ""))
    fig.colorbar(im, ax=ax, label="attention weight")
    fig.tight_layout()
    return figure_png(fig)


controls = {
    "head": widgets.IntSlider(value=0, min=0, max=n_heads_s - 1, description="head"),
    "kind": widgets.Dropdown(options=["hand-built", "random, seed 1", "random, seed 2"], description="weights"),
    "causal": widgets.Checkbox(value=False, description="causal mask"),
    "sharpness": widgets.FloatSlider(value=4.0, min=0.5, max=10.0, step=0.5, description="sharpness"),
}
display(widgets.HBox(list(controls.values())))
picture = display(head_picture(), display_id=True)  # the default view, drawn even without a front end


def redraw(change):
    picture.update(head_picture(**{name: c.value for name, c in controls.items()}))


for control in controls.values():
    control.observe(redraw, names="value")

# %% [markdown] nbgrader={"grade_id": "random_heads_intro"}
# With random weights, do the heads still differ? They do: each reads different columns of the same random
# matrices, so their scores differ before anyone trains them. Training only has to pull them further apart.

# %%
random_w = sentence_weights("random, seed 1")  # (n_heads, T, T)
for a, b in [(0, 1), (2, 3)]:
    print(f"random heads {a} and {b}: largest difference in a weight {np.abs(random_w[a] - random_w[b]).max():.3f}")

# %% [markdown] nbgrader={"grade_id": "batched_intro"}
# ## 8. A batch at once, and fused Q, K, V
#
# Because every axis in your functions is counted from the end, the same code takes a batch `(B, T, d_model)` and
# returns weights `(B, n_heads, T, T)`: one matmul per projection for the whole batch instead of a Python loop.
# The cell checks that each batch element gets exactly what it gets on its own.

# %%
rng = np.random.default_rng(4)
B_b = 3
x_batch = np.stack([x_s, x_s[::-1], rng.normal(size=x_s.shape)])  # (B, T, d_model)
Ws_b = random_weights(3)
out_b, w_b = multi_head_attention(x_batch, *Ws_b, n_heads_s)  # (B, T, d_model), (B, n_heads, T, T)
one_by_one = [multi_head_attention(x_batch[b], *Ws_b, n_heads_s)[0] for b in range(B_b)]
print("out", out_b.shape, "weights", w_b.shape)
print("batched equals one sequence at a time:", np.allclose(out_b, np.stack(one_by_one)))

# %% [markdown] nbgrader={"grade_id": "fused_intro"}
# **Fused QKV.** Many implementations glue `W_Q`, `W_K` and `W_V` side by side into one `(d_model, 3*d_model)`
# matrix and compute `x @ W_QKV` once, then cut the `(B, T, 3*d_model)` result into Q, K and V (in an order that
# must be written down: here Q, then K, then V). What this buys is speed: `x` is read once, and one large
# matmul replaces three (or, with per-head matrices, $3h$ small ones), which means fewer calls and better use of
# the hardware. What it does **not** buy is memory: the fused output is exactly as large as the three separate
# ones put together, as the cell prints. Lesson 06 measures the speed.

# %%
W_QKV = np.concatenate(Ws_b[:3], axis=1)  # (d_model, 3*d_model): columns [Q | K | V]
qkv = x_batch @ W_QKV  # (B, T, 3*d_model)
Q_f, K_f, V_f = np.split(qkv, 3, axis=-1)  # each (B, T, d_model), in the order Q, K, V
separate = [x_batch @ W for W in Ws_b[:3]]
print("fused Q, K, V equal the separate products:", all(np.allclose(f, s) for f, s in zip((Q_f, K_f, V_f), separate)))
print(f"bytes: fused output {qkv.nbytes}, three separate outputs {sum(s.nbytes for s in separate)}")

# %% [markdown] nbgrader={"grade_id": "block_diagram_intro"}
# ## 9. Where the layer sits: a transformer block
#
# Multi-head attention is one half of a transformer block. The paper's block (its encoder layer, figure 1) runs
# attention, adds the block's input back to the result (a **residual** connection) and applies **layer
# normalisation**, which rescales each token vector; then a **feed-forward** layer, two linear maps with a ReLU
# between them applied to each token on its own, gets the same treatment. The residuals let each sub-layer learn a
# change to its input rather than a replacement. The block's output has its input's shape, `(T, d_model)`, which is
# why blocks stack (6 in the paper's base model). Many later models put the layer norm *before* each sub-layer
# ("pre-norm"); the pieces are the same.
#
# *Figure (alt text): a bottom-to-top flow chart of one transformer block. From the input x, shape (T, d_model), an
# arrow goes up to a box "multi-head attention (this lesson)" in a pale viridis colour, then to "add: x +
# attention(x)", then "layer norm", then "feed-forward: two linear maps, ReLU between, each token alone", then "add:
# its input + feed-forward", then "layer norm, to the next block". Two lines labelled residual run up the left side:
# one from the input to the first add box, skipping attention, and one from the output of the first layer norm to
# the second add box, skipping the feed-forward layer.*

# %%
fig, ax = diagram_axes(6.4, 7.6, "A transformer block (encoder layer of the paper)")
layer_tint = plt.cm.viridis(0.6) * np.array([1, 1, 1, 0.45])
steps = [(0.6, "x, from the previous block\n(T, d_model)", None),  # (height, text, colour; None: no box)
         (1.7, "multi-head attention\n(this lesson)", layer_tint), (2.8, "add: x + attention(x)", "0.92"), (3.8, "layer norm", "0.92"),
         (4.9, "feed-forward: two linear maps,\nReLU between, each token alone", "0.92"),
         (6.0, "add: its input + feed-forward", "0.92"), (7.0, "layer norm  ->  next block", "0.92")]
for (y, text, color), (y_next, _, _) in zip(steps, steps[1:] + [(None, None, None)]):
    if color is None:
        ax.text(3.6, y, text, ha="center", va="center", fontsize=9)
    else:
        diagram_box(ax, 3.6, y, 3.6, 0.75, text, color, fontsize=9)
    if y_next is not None:
        diagram_arrow(ax, (3.6, y + (0.25 if color is None else 0.375)), (3.6, y_next - 0.375))
for branch, end in [(1.05, 2.8), (4.35, 6.0)]:  # residual: from a sub-layer's input around it, into its "add"
    ax.plot([3.6, 1.0, 1.0], [branch, branch, end], color="0.25", linewidth=1.2)
    ax.plot([3.6], [branch], "o", color="0.25", markersize=4)
    diagram_arrow(ax, (1.0, end), (1.8, end))
    ax.text(0.9, (branch + end) / 2, "residual", rotation=90, ha="right", va="center", fontsize=8, color="0.3")
display(figure_png(fig))

# %% [markdown] nbgrader={"grade_id": "summary"}
# ## Summary
#
# - Multi-head attention runs $h$ attentions in parallel, each on its own $d_\text{head} = d_\text{model}/h$
#   columns of the projections; each head scales its scores by $\sqrt{d_\text{head}}$.
# - `split_heads` reshapes to `(..., T, n_heads, d_head)` and *then* swaps `T` and `n_heads`; without the swap
#   a "head" is a slab of the first tokens. `concat_heads` undoes both steps in reverse.
# - Concatenation keeps heads apart; the linear map $W^O$ mixes them, and
#   $\mathrm{Concat}(\text{heads})\,W^O = \sum_i \text{head}_i W^O_i$.
# - A `(T, T)` mask broadcasts to every head; a batch is just more leading axes.
# - Fusing Q, K, V into one matmul saves calls, not memory.
#
# **Next:** lesson 03 counts the parameters of this layer and shows why the count does not depend on $h$.
