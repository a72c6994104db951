# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade_id": "intro"}
# # Lesson 04 · Why divide by $\sqrt{d_k}$, and which $d_k$
#
# **Goals.** By the end of this lesson you can
# 1. predict the spread of a dot product of two random vectors, and measure it with an experiment you write;
# 2. show what unscaled scores do to softmax and to its gradient as $d_k$ grows;
# 3. compute multi-head scores with the *per-head* scale $\sqrt{d_{head}}$, and say what dividing by
#    $\sqrt{d_{model}}$ instead would do.
#
# **Time needed:** about 40 minutes. **You need:** lesson 01 (softmax, attention) and lesson 02 (`split_heads`).
#
# Cells that say `raise NotImplementedError()` are yours; the self-check after each one prints ✔ or says what
# looks wrong. Primary source: Vaswani et al., 2017, *Attention Is All You Need*, section 3.2.1 and its
# footnote 4.
#
# **Names** (the [glossary](glossary.md) lists every one). `d_k` the width of a query or key vector; in multi-head
# attention that width is `d_head = d_model // n_heads`. `T` tokens, `n_heads` heads, projections `W_Q, W_K` applied
# as `x @ W`.

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
from IPython.display import DisplayHandle, Image, display
from matplotlib.figure import Figure

from selfcheck_04 import check_dot_product_std, check_multi_head_scores

# %% [markdown] nbgrader={"grade_id": "given_intro"}
# Two functions from earlier lessons, given here so this lesson stands on its own:

# %% nbgrader={"grade_id": "given"}
def softmax(x, axis=-1):
    """Stable softmax along `axis`; a row whose entries are all -inf gets all-zero weights (lesson 01)."""
    row_max = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - np.where(np.isfinite(row_max), row_max, 0))
    total = np.sum(e, axis=axis, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0).astype(e.dtype)


def split_heads(x, n_heads):
    """(..., T, d_model) -> (..., n_heads, T, d_head); head i holds columns i*d_head:(i+1)*d_head (lesson 02)."""
    *lead, T, d_model = x.shape
    d_head = d_model // n_heads
    x = x.reshape(*lead, T, n_heads, d_head)  # (..., T, n_heads, d_head)
    return np.swapaxes(x, -3, -2)  # (..., n_heads, T, d_head)


# %% [markdown] nbgrader={"grade_id": "theory"}
# ## 1. Predict first
#
# **Q1.** Let $q$ and $k$ have $d_k$ independent entries, each with mean 0 and variance 1. What are the mean and
# the variance of $q \cdot k = \sum_{i=1}^{d_k} q_i k_i$? What is its standard deviation for $d_k = 64$?
#
# <details><summary>Check</summary>
#
# Each product $q_i k_i$ has mean $E[q_i]E[k_i] = 0$ and variance $E[q_i^2]E[k_i^2] - 0 = 1$. The $d_k$ products
# are independent, so their variances add: $q \cdot k$ has mean 0 and variance $d_k$ (the paper's footnote 4).
# The standard deviation is $\sqrt{d_k}$: 8 for $d_k = 64$. Dividing by $\sqrt{d_k}$ brings it back to 1 for
# every width.
# </details>
#
# ## 2. Measure it
#
# Write the experiment: `dot_product_std(d_k, n_samples, scaled, rng)` draws `n_samples` independent pairs
# $(q, k)$ of standard-normal vectors of width `d_k` **from the generator `rng`** (`rng.standard_normal`), computes
# each pair's $q \cdot k$ (divided by `math.sqrt(d_k)` when `scaled` is true) and returns their standard deviation
# as a float. Compute all the dot products at once: an array of shape `(n_samples, d_k)` for the queries, another
# for the keys, and a sum over the last axis. (Not `q @ k.T`: that makes an `(n_samples, n_samples)` matrix.)
#
# A random experiment cannot hit $\sqrt{d_k}$ exactly; with a few thousand samples it lands within a few percent.
# The graded test allows 10%, far more than that sampling error and far less than any wrong formula's error.

# %% nbgrader={"grade_id": "dot_product_std", "solution": true}
def dot_product_std(d_k, n_samples, scaled, rng):
    """Standard deviation of q.k over n_samples pairs of standard-normal vectors of width d_k (drawn from rng),
    each dot product divided by sqrt(d_k) when `scaled`.

    Contract: d_k >= 1 and n_samples >= 2 are integers, scaled is True or False, rng is a numpy Generator.
    """
    ### BEGIN SOLUTION
    q = rng.standard_normal((n_samples, d_k))  # (n_samples, d_k)
    k = rng.standard_normal((n_samples, d_k))  # (n_samples, d_k)
    dots = np.sum(q * k, axis=-1)  # (n_samples,): one q.k per pair
    if scaled:
        dots = dots / math.sqrt(d_k)
    return float(np.std(dots))
    ### END SOLUTION


# %% nbgrader={"grade_id": "std_experiment", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("std_experiment")
### END HIDDEN TESTS
# Self-check: about sqrt(d_k) unscaled, about 1 scaled, the same result for the same seed.
check_dot_product_std(dot_product_std)

# %% [markdown] nbgrader={"grade_id": "sweep_intro"}
# Now run your experiment for $d_k$ from 1 to 1024 and plot it. On log-log axes a power law is a straight line:
# $\sqrt{d_k}$ is a line of slope 1/2, and a constant is a flat line.
#
# *Figure (alt text): the measured standard deviation of q·k against d_k from 1 to 1024, both axes logarithmic.
# The unscaled points climb along the dashed line sqrt(d_k), from 1 to 32; the points scaled by 1/sqrt(d_k)
# stay on a flat line at 1.*

# %%
d_ks = 2 ** np.arange(11)  # 1, 2, 4, ..., 1024
rng = np.random.default_rng(2017)
unscaled = [dot_product_std(int(d), 3000, False, rng) for d in d_ks]
scaled = [dot_product_std(int(d), 3000, True, rng) for d in d_ks]

fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(d_ks, np.sqrt(d_ks), "--", color="0.5", label="theory: sqrt(d_k)")
ax.plot(d_ks, unscaled, "o", color=plt.cm.viridis(0.15), label="measured, q·k")
ax.plot(d_ks, scaled, "s", color=plt.cm.viridis(0.7), label="measured, q·k / sqrt(d_k)")
ax.set(xscale="log", yscale="log", xlabel="d_k (log axis)", ylabel="standard deviation of the score (log axis)",
       title="The spread of q·k grows like sqrt(d_k)")
ax.set_xticks(d_ks, [str(d) for d in d_ks])
ax.minorticks_off()
ax.legend()
fig.tight_layout()
plt.show()
for d, u, s in zip(d_ks[::2], unscaled[::2], scaled[::2]):
    print(f"d_k = {d:5d}: std {u:7.3f} (sqrt(d_k) = {math.sqrt(d):6.3f}), scaled {s:.3f}")

# %% [markdown] nbgrader={"grade_id": "saturation_intro"}
# ## 3. What unscaled scores do to softmax
#
# One query attends over eight keys. All vectors are random with unit-variance entries, and widening $d_k$ adds
# entries to the same vectors. Unscaled, the scores spread like $\sqrt{d_k}$, so the largest one soon dominates
# and softmax turns almost one-hot. That is bad for learning: the gradient of softmax is the matrix
# $J = \mathrm{diag}(p) - p p^\top$, and when $p$ is one-hot every entry of $J$ is 0, so almost no gradient flows
# back to the scores, and through them to `W_Q` and `W_K`. The right panel plots the size of $J$ (its
# Frobenius norm, averaged over 200 random queries) against $d_k$.
#
# Move the slider and flip the toggle. Without a live front end the figure shows $d_k = 256$, unscaled.
#
# *Figure (alt text): left, a bar chart of one query's attention weights over eight keys labelled with the
# words "the cat sat on a warm mat ."; at d_k = 256 unscaled one bar is near 1 and the rest near 0. Right, the
# softmax gradient norm against d_k on log axes: the unscaled curve stays near 0.35 up to d_k = 4, then drops
# about seven-fold by d_k = 512, not monotonically (random draws make it wobble; it rises again at 1024), while
# the scaled curve stays flat near 0.36; a marker shows the chosen d_k.*

# %% tags=["nbval-ignore-output"]
TOKENS = ["the", "cat", "sat", "on", "a", "warm", "mat", "."]
D_K_OPTIONS = [int(d) for d in 2 ** np.arange(11)]  # 1 .. 1024
demo_rng = np.random.default_rng(4)
q_demo = demo_rng.standard_normal(max(D_K_OPTIONS))  # one query; its first d_k entries are used
K_demo = demo_rng.standard_normal((len(TOKENS), max(D_K_OPTIONS)))  # (T_k, 1024); each d_k uses its first columns


def softmax_jacobian_norm(p):
    """Frobenius norm of d softmax / d scores = diag(p) - p p^T, for weights p of shape (..., T_k)."""
    J = p[..., :, None] * np.eye(p.shape[-1]) - p[..., :, None] * p[..., None, :]  # (..., T_k, T_k)
    return np.sqrt(np.sum(J ** 2, axis=(-2, -1)))


def mean_gradient_norms(d_k, n_queries=200, seed=0):
    """Mean softmax-gradient norm over random queries and keys of width d_k: (unscaled, scaled)."""
    r = np.random.default_rng(seed)
    q = r.standard_normal((n_queries, 1, d_k))  # (n_queries, 1, d_k)
    K = r.standard_normal((n_queries, len(TOKENS), d_k))  # (n_queries, T_k, d_k)
    scores = np.sum(q * K, axis=-1)  # (n_queries, T_k)
    return tuple(float(np.mean(softmax_jacobian_norm(softmax(s)))) for s in (scores, scores / math.sqrt(d_k)))


norms = [mean_gradient_norms(d) for d in D_K_OPTIONS]
grad_curve = {False: [n[0] for n in norms], True: [n[1] for n in norms]}


def as_png(fig):
    """A static image of `fig`: shown with or without a live front end, and replaceable in place."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    return Image(buf.getvalue())


def saturation_figure(d_k, scaled):
    scores = K_demo[:, :d_k] @ q_demo[:d_k]  # (T_k,)
    if scaled:
        scores = scores / math.sqrt(d_k)
    p = softmax(scores)
    fig = Figure(figsize=(10, 3.8))
    ax_w, ax_g = fig.subplots(1, 2)
    ax_w.bar(range(len(TOKENS)), p, color=plt.cm.viridis(0.35 + 0.6 * p))
    ax_w.set_xticks(range(len(TOKENS)), TOKENS)
    ax_w.set(ylim=(0, 1.05), xlabel="key", ylabel="attention weight",
             title=f"One query, d_k = {d_k}, {'scaled' if scaled else 'unscaled'}: max weight {p.max():.2f}")
    for s, style, label in ((False, "o-", "unscaled q·k"), (True, "s-", "scaled q·k / sqrt(d_k)")):
        ax_g.plot(D_K_OPTIONS, grad_curve[s], style, color=plt.cm.viridis(0.7 if s else 0.15), label=label)
    ax_g.plot([d_k], [grad_curve[scaled][D_K_OPTIONS.index(d_k)]], "o", ms=14, mfc="none", color="0.2",
              label=f"d_k = {d_k}")
    ax_g.set(xscale="log", yscale="log", xlabel="d_k (log axis)", ylabel="mean ‖diag(p) − p pᵀ‖ (log axis)",
             title="Softmax gradient shrinks as the weights turn one-hot")
    ax_g.set_xticks(D_K_OPTIONS, [str(d) for d in D_K_OPTIONS], fontsize=7)
    ax_g.minorticks_off()
    ax_g.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    return fig


d_k_choice = widgets.SelectionSlider(options=D_K_OPTIONS, value=256, description="d_k")
scaled_choice = widgets.ToggleButtons(options=[("unscaled", False), ("scaled by 1/sqrt(d_k)", True)], value=False)
display(widgets.VBox([d_k_choice, scaled_choice]))
saturation_view = DisplayHandle()  # the output the controls replace in place
saturation_view.display(as_png(saturation_figure(256, False)))


def redraw(change=None):
    saturation_view.update(as_png(saturation_figure(d_k_choice.value, scaled_choice.value)))


d_k_choice.observe(redraw, names="value")
scaled_choice.observe(redraw, names="value")

# %% [markdown] nbgrader={"grade_id": "per_head_intro"}
# ## 4. Which $d_k$? The one the dot product sums over
#
# In multi-head attention every head computes its own scores from its own `d_head`-wide slices of $Q$ and $K$.
# The dot product inside a head sums `d_head = d_model // n_heads` products, so its spread is
# $\sqrt{d_{head}}$, and that is the number to divide by. It is tempting to use $\sqrt{d_{model}}$ because
# `d_model` is "the model's dimension", but no attention *score* sums over `d_model` terms (the projections
# `x @ W_Q` and `x @ W_K` do, but their sums are not the scores that softmax reads).
#
# Implement `multi_head_scores(x, W_Q, W_K, n_heads)`: project `x` (`(..., T, d_model)`) with `W_Q` and `W_K`,
# split both into heads with the given `split_heads`, and return every head's scaled scores, shape
# `(..., n_heads, T, T)`. Divide by `math.sqrt(d_head)`: a Python float keeps float32 input float32, while
# `np.sqrt(d_head)` is a numpy float64 that, in NumPy 2, turns the whole array into float64.

# %% nbgrader={"grade_id": "multi_head_scores", "solution": true}
def multi_head_scores(x, W_Q, W_K, n_heads):
    """Scaled attention scores of every head: x (..., T, d_model) -> (..., n_heads, T, T).

    Contract: x (..., T, d_model), W_Q and W_K (d_model, d_model) share one float dtype; n_heads divides d_model.
    """
    ### BEGIN SOLUTION
    d_head = x.shape[-1] // n_heads
    Q = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    K = split_heads(x @ W_K, n_heads)  # (..., n_heads, T, d_head)
    return Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)  # (..., n_heads, T, T)
    ### END SOLUTION


# %% nbgrader={"grade_id": "head_scores", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("head_scores")
### END HIDDEN TESTS
# Self-check: shape (n_heads, T, T), the 1/sqrt(d_head) scale, float32 kept.
check_multi_head_scores(multi_head_scores, split_heads)

# %% [markdown] nbgrader={"grade_id": "mistake_intro"}
# ### Measure the mistake
#
# Take the paper's layer, `d_model = 512` and 8 heads (`d_head = 64`), random tokens and random projections
# scaled so that every entry of $Q$ and $K$ has variance 1. Compare your per-head scores with the same scores
# divided by $\sqrt{d_{model}}$ instead, which is your result times $\sqrt{d_{head} / d_{model}} = 1/\sqrt{8}$.

# %%
rng = np.random.default_rng(3)
T, d_model, n_heads = 12, 512, 8
x = rng.standard_normal((T, d_model))
W_Q = rng.standard_normal((d_model, d_model)) / math.sqrt(d_model)  # keeps x @ W_Q at unit variance
W_K = rng.standard_normal((d_model, d_model)) / math.sqrt(d_model)
per_head = multi_head_scores(x, W_Q, W_K, n_heads)  # (n_heads, T, T), divided by sqrt(d_head)
by_d_model = per_head * math.sqrt(d_model // n_heads) / math.sqrt(d_model)  # as if divided by sqrt(d_model)
for label, s in (("divide by sqrt(d_head) = 8", per_head), ("divide by sqrt(d_model) = 22.6", by_d_model)):
    p = softmax(s)  # (n_heads, T, T)
    print(f"{label:31s} score std {s.std():.3f} | mean largest weight {p.max(axis=-1).mean():.3f} "
          f"(uniform would be {1 / T:.3f})")

# %% [markdown] nbgrader={"grade_id": "summary"}
# Scaled by $\sqrt{d_{model}}$, the scores have a spread of about $1/\sqrt{8} \approx 0.35$ instead of 1: every
# head starts out close to uniform attention, the opposite failure to saturation. Training can partly undo a
# constant factor through the size of `W_Q` and `W_K`, but the scale the paper chose, and the one every major
# implementation uses, is the one that gives unit-spread scores at initialisation: $\sqrt{d_{head}}$.
#
# ## Summary
#
# - For independent unit-variance entries, $q \cdot k$ has variance $d_k$ and standard deviation $\sqrt{d_k}$; you
#   measured it, and dividing by $\sqrt{d_k}$ holds it near 1 for every width.
# - Unscaled, wide scores push softmax to one-hot, where its gradient $\mathrm{diag}(p) - pp^\top$ vanishes.
# - In multi-head attention the scale is $\sqrt{d_{head}} = \sqrt{d_{model}/n_{heads}}$, the width each head's dot
#   product sums over; $\sqrt{d_{model}}$ makes the weights too flat. Dividing by $d_{head}$ (no square root)
#   is flatter still only when $d_{head} > \sqrt{d_{model}}$, that is when $d_{model} > n_{heads}^2$ (true for
#   the paper's 512 and 8 heads, $64 > 22.6$; false for, say, $d_{model} = 64$ with 16 heads).
# - Scale with `math.sqrt(d_head)`: in NumPy 2, `np.sqrt(d_head)` silently turns float32 scores into float64.
#
# **Next:** lesson 05 puts the pieces together in exercises.
