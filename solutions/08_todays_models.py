# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade_id": "intro"}
# # Lesson 08 · Attention in today's models: RoPE, ALiBi, sliding windows with sinks, latent attention
#
# The course so far stops where the 2017 paper and grouped-query attention stop. The open models you will read
# about today change attention in four more ways, each of them *per head*: rotary positions inside every query and
# key (RoPE), a distance penalty with its own slope in every head (ALiBi), a window that bounds what a head sees
# (with a few "sink" tokens kept for good), and keys and values rebuilt from one small shared latent vector
# (DeepSeek's multi-head latent attention, MLA). You build each in numpy, check it against its paper's
# definition, and measure what it buys.
#
# **Goals.** By the end of this lesson you can
# 1. rotate queries and keys with RoPE in both layouts found in real code, convert one into the other, and prove
#    that a RoPE score depends only on the distance between the two positions;
# 2. build ALiBi's per-head biases with the paper's slopes, for any number of heads;
# 3. write a sliding-window mask and a streaming decoder whose KV cache keeps attention sinks and stays bounded;
# 4. write multi-head latent attention, then the absorbed form that attends over the cached latent alone, and
#    count any model's KV cache per token;
# 5. read a model card and say which of these pieces the model uses.
#
# **Time needed:** about 75 minutes. **You need:** lesson 01's attention and lesson 02's heads; lesson 06's KV
# cache helps (its `decode_step` is given below, so this lesson works alone).
#
# **Names** (the [glossary](glossary.md) lists every one). `B` batch, `T` sequence length, `d_model`, `n_heads`,
# `d_head`, `n_kv_heads`, `W_Q, W_K, W_V, W_O` applied as `x @ W`, a boolean `mask` in which **True marks a
# blocked pair**. New here: `positions`, `base`, `n_sink`, `window`, and MLA's `d_c` (the latent's width) and
# `d_rope` (the width of its rotary key part).

# %% nbgrader={"grade_id": "setup", "points": 0}
### BEGIN HIDDEN TESTS
import os as _os, sys as _sys  # noqa: E401  grading: never import from the submission's folder
_sys.path[:] = [p for p in _sys.path if p and _os.path.abspath(p) != _os.getcwd()]
__import__("autograder.kernel.hidden_cell")  # grading: loaded before any cell of the learner's below can break imports
### END HIDDEN TESTS
import math

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

from selfcheck_08 import (check_alibi_bias, check_kv_cache_elements, check_mla_absorbed, check_mla_absorbed_memory,
                          check_mla_attention, check_rope, check_sliding_window_mask, check_streaming_decode)

# %% [markdown] nbgrader={"grade_id": "given_intro"}
# The functions this lesson builds on, from lessons 01, 02 and 06, given here so it stands on its own. Lesson 06's
# `decode_step` projects only the newest token, appends its key and value to the cache `(..., n_kv_heads, T,
# d_head)` and attends over the whole cache.

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
    x = x.reshape(*lead, T, n_heads, d_model // n_heads)  # (..., T, n_heads, d_head)
    return np.swapaxes(x, -3, -2)  # (..., n_heads, T, d_head)


def concat_heads(x):
    """(..., n_heads, T, d_head) -> (..., T, n_heads * d_head), the inverse of split_heads (lesson 02)."""
    *lead, n_heads, T, d_head = x.shape
    x = np.swapaxes(x, -3, -2)  # (..., T, n_heads, d_head)
    return x.reshape(*lead, T, n_heads * d_head)  # (..., T, n_heads * d_head)


def decode_step(x_t, cache_k, cache_v, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
    """One decoding step with a KV cache (lesson 06): x_t (..., 1, d_model), caches (..., n_kv_heads, T_past, d_head).
    Returns (out_t (..., 1, d_model), cache_k, cache_v) with the caches one token longer."""
    q = split_heads(x_t @ W_Q, n_heads)  # (..., n_heads, 1, d_head)
    k, v = split_heads(x_t @ W_K, n_kv_heads), split_heads(x_t @ W_V, n_kv_heads)  # (..., n_kv_heads, 1, d_head)
    cache_k = np.concatenate([cache_k, k], axis=-2)  # (..., n_kv_heads, T_past + 1, d_head)
    cache_v = np.concatenate([cache_v, v], axis=-2)
    n_rep = n_heads // n_kv_heads
    head, _ = scaled_dot_product_attention(q, np.repeat(cache_k, n_rep, axis=-3), np.repeat(cache_v, n_rep, axis=-3))
    return concat_heads(head) @ W_O, cache_k, cache_v  # (..., 1, d_model)


# %% [markdown] nbgrader={"grade_id": "rope_intro"}
# ## 1. Rotary position embedding (RoPE)
#
# Lesson 07 *added* sinusoidal positions to the token vectors. RoPE (Su et al., 2021, *RoFormer*, section 3.2)
# instead *rotates* every query and key inside each head, by an angle proportional to the token's position.
# Cut a head's `d_head` columns into `d_head / 2` pairs; pair $i$ is a point in the plane, and at position $m$ it
# turns by the angle $m\,\theta_i$ with
# $$\theta_i = \text{base}^{-2i/d_\text{head}}, \qquad i = 0, 1, \dots, d_\text{head}/2 - 1, \qquad
# \text{base} = 10000.$$
# Pair 0 turns by 1 radian per position (fast); the last pair by about $1/\text{base}$ radian (slow). A point
# $(a, b)$ turned by the angle $\phi$ is $(a\cos\phi - b\sin\phi,\; a\sin\phi + b\cos\phi)$, counter-clockwise,
# as in the paper's equation (34).
#
# **Which columns form a pair** is where real code differs, and mixing the two silently ruins a model:
#
# | layout | pair $i$ is columns | used by |
# |---|---|---|
# | interleaved (`interleaved=True`) | $2i$ and $2i+1$ | the RoFormer paper, GPT-J, Meta's original Llama code |
# | split halves (`interleaved=False`) | $i$ and $i + d_\text{head}/2$ | GPT-NeoX; Llama as Hugging Face ports it (`rotate_half`) |
#
# Both are RoPE: they differ only by which columns are called a pair, a fixed permutation of the columns. Like
# lesson 06's mask conventions, the thing to get right is which one the code you are reading uses.
#
# Implement `rope(x, positions, base=10000.0, interleaved=True)`: `x` is `(..., T, d_head)` (queries or keys of
# any number of heads), `positions` a `(T,)` integer array (row `t` of `x` sits at position `positions[t]`,
# counted from 0). Return the rotated array, same shape and dtype (compute the angles in float64 and cast their
# cosines and sines to `x.dtype`, so float32 stays float32). Do not change `x`.
#
# <details><summary>Hint 1</summary>
#
# Compute the `(T, d_head/2)` table of angles once: an outer product of the positions and the pairs' frequencies.
# Slices with a step, `x[..., 0::2]`, pick every other column.
# </details>
#
# <details><summary>Hint 2</summary>
#
# With `a` the first and `b` the second column of every pair (both `(..., T, d_head/2)`), the rotated pair is two
# arrays built from `a`, `b` and the cosines and sines. Put them back where `a` and `b` came from.
# </details>

# %% nbgrader={"grade_id": "rope", "solution": true}
def rope(x, positions, base=10000.0, interleaved=True):
    """Rotate each column pair of x (..., T, d_head) by positions[t] * base^(-2i/d_head).

    Contract: x (..., T, d_head) is a float array with d_head even; positions holds T integers >= 0; base > 1;
    interleaved is True or False.
    """
    ### BEGIN SOLUTION
    d_head = x.shape[-1]
    freq = base ** (-np.arange(0, d_head, 2) / d_head)  # (d_head/2,)
    angle = np.asarray(positions, dtype=np.float64)[:, None] * freq  # (T, d_head/2)
    cos, sin = np.cos(angle).astype(x.dtype), np.sin(angle).astype(x.dtype)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., :d_head // 2], x[..., d_head // 2:]
    turned_a, turned_b = a * cos - b * sin, a * sin + b * cos
    if not interleaved:
        return np.concatenate([turned_a, turned_b], axis=-1)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = turned_a, turned_b
    return out
    ### END SOLUTION


# %% nbgrader={"grade_id": "rope_values", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("rope_values")
### END HIDDEN TESTS
# Self-check: position 0 changes nothing, lengths are kept, which columns pair up, the direction and the
# frequencies of the turn, both layouts, float32 kept, x unchanged.
check_rope(rope)

# %% [markdown] nbgrader={"grade_id": "rope_relative_intro"}
# ### Why a rotation gives *relative* positions
#
# A query at position $m$ and a key at position $n$ are both rotated before their dot product. Run the cell: it
# rotates one random query and one random key to many pairs of positions with the same distance $m - n$ and
# prints the scores, then the same for a different distance.

# %%
rng = np.random.default_rng(8)
q, k = rng.normal(size=(1, 16)), rng.normal(size=(1, 16))  # (T, d_head) with T = 1


def rope_score(m, n, interleaved=True):
    """The dot product of q rotated to position m and k rotated to position n."""
    return (rope(q, np.array([m]), interleaved=interleaved) @ rope(k, np.array([n]), interleaved=interleaved).T).item()


for distance in (3, 10):
    scores = [rope_score(n + distance, n) for n in (0, 5, 100, 4000)]
    print(f"m - n = {distance:2d}: scores at n = 0, 5, 100, 4000:", np.round(scores, 10))

# %% [markdown] nbgrader={"grade_id": "rope_relative_task"}
# The scores agree to rounding for every pair at one distance, and change with the distance. Now show *why*, for
# one pair of columns, in a few lines. Write $R(\phi)$ for the $2 \times 2$ rotation by $\phi$, so that a pair of
# the query becomes $R(m\theta)\,q$ and a pair of the key $R(n\theta)\,k$ (column vectors). Use two facts about
# rotations: $R(\alpha)^\top = R(-\alpha)$ and $R(\alpha)R(\beta) = R(\alpha + \beta)$. Then say in one sentence
# why the whole score (the sum over all pairs) depends only on $m - n$, and one thing about $q$ and $k$ that it
# still depends on.
#
# *How it is marked (2 points):* 1 point for the derivation of one pair's term down to $q^\top R((n - m)\theta) k$
# (or the same written $q^\top R(-(m - n)\theta) k$; the angle's sign matters, and $R((m - n)\theta)$ is wrong),
# each step named; 1 point for the sentence about the sum, with what else the score depends on.

# %% [markdown] nbgrader={"grade_id": "rope_relative", "solution": true, "points": 2}
# ### BEGIN SOLUTION
# **Model answer.** One pair's term of the score is
# $(R(m\theta) q)^\top (R(n\theta) k) = q^\top R(m\theta)^\top R(n\theta)\, k = q^\top R(-m\theta) R(n\theta)\, k
# = q^\top R((n - m)\theta)\, k$: the first step is the transpose of a product, the second $R^\top = R(-\cdot)$,
# the third adds the angles. Only $n - m$ is left of the positions. The score is the sum of these terms over the
# `d_head / 2` pairs, each with its own $\theta_i$, so it too depends on the positions only through $m - n$; it
# still depends on the content, the vectors $q$ and $k$ themselves (and on the frequencies, so on `base`).
#
# **Rubric for the grader (2 points).** Derivation with the two rotation facts (1); the sum over pairs and what the
# score still depends on (1). A purely numerical argument earns at most 1.
# ### END SOLUTION

# %% [markdown] nbgrader={"grade_id": "rope_layouts_intro"}
# ### From one layout to the other
#
# A checkpoint trained with interleaved pairs can be run by split-half code if the columns of every head's $W_Q$
# and $W_K$ are reordered so that pair $i$'s two columns land at $i$ and $i + d_\text{head}/2$: even columns
# first, then odd ones. Scores do not change, because a dot product does not care in which order the columns of
# both vectors are listed. Run the cell: it checks both claims on your `rope`.

# %%
d_head = 16
to_halves = np.r_[0:d_head:2, 1:d_head:2]  # column order that turns interleaved pairs into split halves
x = rng.normal(size=(3, 5, d_head))  # (n_heads, T, d_head)
positions = np.arange(5)
same_rotation = np.allclose(rope(x, positions)[..., to_halves], rope(x[..., to_halves], positions, interleaved=False))
print("interleaved rope, then reorder == reorder, then split-half rope:", same_rotation)
q_i, k_i = rope(x, positions), rope(x[::-1], positions)  # interleaved queries and keys
q_h, k_h = rope(x[..., to_halves], positions, interleaved=False), rope(x[::-1][..., to_halves], positions,
                                                                          interleaved=False)
print("same scores:", np.allclose(q_i @ np.swapaxes(k_i, -1, -2), q_h @ np.swapaxes(k_h, -1, -2)))

# %% [markdown] nbgrader={"grade_id": "rope_base_intro"}
# ### What `base` does
#
# Pair $i$ repeats itself every $2\pi / \theta_i$ positions, its wavelength. The fastest pair (pair 0) always
# turns by 1 radian per position, a wavelength of $2\pi \approx 6.3$ tokens, whatever the base. The base sets the
# *slowest*: with 10,000 the last pair of a 128-wide head needs about 54,000 positions to come round, so far
# positions stay distinguishable only up to roughly that distance. Llama 3 raised the base to 500,000 for long
# contexts (Meta's published configuration, `rope_theta`). Move the slider.
#
# *Figure (alt text): the wavelength in tokens of each of the 64 column pairs of a 128-wide head, on a log scale,
# for the chosen base. Every curve starts at 6.3 tokens for pair 0 and rises steadily; with base 10,000 the last
# pair reaches about 54,000 tokens, with 500,000 about 2.6 million, and the printed line gives the exact numbers.*

# %% tags=["nbval-ignore-output"]
BASES = (100.0, 10000.0, 500000.0, 1000000.0)


def wavelengths(base, d_head=128):
    """Tokens it takes each column pair to turn once: 2 pi / theta_i."""
    return 2 * np.pi / base ** (-np.arange(0, d_head, 2) / d_head)


@widgets.interact(base=widgets.SelectionSlider(options=BASES, value=10000.0, description="base"))
def show_wavelengths(base):
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    for b in BASES:
        ax.plot(wavelengths(b), color="0.8" if b != base else plt.cm.viridis(0.3), lw=1 if b != base else 2.5)
    w = wavelengths(base)
    ax.set(yscale="log", xlabel="column pair i", ylabel="wavelength (tokens)",
           title=f"RoPE wavelengths, d_head = 128, base = {base:,.0f}")
    plt.show()
    print(f"fastest pair: {w[0]:.1f} tokens; slowest pair: {w[-1]:,.0f} tokens")

# %% [markdown] nbgrader={"grade_id": "alibi_intro"}
# ## 2. ALiBi: a distance penalty with one slope per head
#
# ALiBi (Press et al., 2022, *Train Short, Test Long*) uses no position vectors at all. It adds a bias to every
# score before the softmax: for query $i$ and key $j$ in head $h$, $-m_h\,|i - j|$. Far keys are penalised
# linearly, and each head has its own slope $m_h$: heads with steep slopes look only nearby, heads with gentle
# slopes look far. One multi-head idea in one line.
#
# The slopes (section 3 of the paper): for $n$ heads, a geometric sequence that starts at $2^{-8/n}$ and has that
# same ratio, so with 8 heads $\tfrac12, \tfrac14, \dots, \tfrac1{256}$. The paper only trains models whose head
# count is a power of 2; its reference code handles any other $n$ this way: take the $c$ slopes of the largest
# power of 2 below $n$, $c = 2^{\lfloor \log_2 n \rfloor}$, then add the 1st, 3rd, 5th, ... slopes of $2c$ heads,
# as many as are missing ($n - c$). So 12 heads get the 8 slopes of 8 heads, then slopes 1, 3, 5 and 7 of 16 heads.
#
# Implement `alibi_bias(n_heads, T)`, returning the `(n_heads, T, T)` float64 array $-m_h |i - j|$, head 0 with
# the largest slope. (Above the diagonal the same distance penalty applies; a causal mask blocks those pairs
# anyway.)
#
# <details><summary>Hint 1</summary>
#
# Write the slopes first, as a small function inside `alibi_bias` that calls itself for $2c$ heads. `n & (n - 1)
# == 0` is true exactly when `n` is a power of 2.
# </details>
#
# <details><summary>Hint 2</summary>
#
# `np.abs(t[:, None] - t[None, :])` with `t = np.arange(T)` is the `(T, T)` distance table; broadcast the slopes
# against it along a new first axis.
# </details>

# %% nbgrader={"grade_id": "alibi", "solution": true}
def alibi_bias(n_heads, T):
    """(n_heads, T, T): -slope_h * |i - j|, with the slopes of Press et al. (2022).

    Contract: n_heads and T are positive integers.
    """
    ### BEGIN SOLUTION
    def slopes(n):
        if n & (n - 1) == 0:
            return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
        c = 2 ** int(math.log2(n))
        return slopes(c) + slopes(2 * c)[0::2][:n - c]

    t = np.arange(T)
    distance = np.abs(t[:, None] - t[None, :])  # (T, T)
    return -np.array(slopes(n_heads))[:, None, None] * distance
    ### END SOLUTION


# %% nbgrader={"grade_id": "alibi_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("alibi_values")
### END HIDDEN TESTS
# Self-check: shape, zero diagonal, sign, the slopes of 8 heads and the rule for 12.
check_alibi_bias(alibi_bias)

# %% [markdown] nbgrader={"grade_id": "alibi_plot_intro"}
# Each head's penalty, read from your function: the slope is the bias one token away. The plot shows, per head,
# how much weight a key at distance $d$ loses relative to a key at distance 0, $e^{-m_h d}$.
#
# *Figure (alt text): left, the slopes of 8 and of 12 heads on a log scale, against the head index: the 8 slopes
# halve from 0.5 to 0.0039; the 12-head slopes repeat those 8 and then four in between (0.71, 0.35, 0.18 and
# 0.088). Right, e to the minus slope times distance for the 8 heads, over 0 to 64 tokens: head 0 falls to almost
# 0 within 10 tokens while head 7 still keeps about 0.78 at 64.*

# %%
fig, (ax_s, ax_d) = plt.subplots(1, 2, figsize=(10, 3.4))
for n, marker in ((8, "o"), (12, "s")):
    slopes = -alibi_bias(n, 2)[:, 1, 0]  # (n,): the bias one token back is -slope
    ax_s.plot(range(n), slopes, marker, label=f"{n} heads", color=plt.cm.viridis(0.2 if n == 8 else 0.7))
ax_s.set(yscale="log", xlabel="head", ylabel="slope m_h", title="ALiBi slopes")
ax_s.legend()
distance = np.arange(65)
slopes8 = -alibi_bias(8, 2)[:, 1, 0]
for h, m in enumerate(slopes8):
    ax_d.plot(distance, np.exp(-m * distance), color=plt.cm.viridis(h / 8), label=f"head {h}")
ax_d.set(xlabel="distance |i - j| (tokens)", ylabel="exp(-m_h |i - j|)", title="What each head keeps of a far key")
ax_d.legend(fontsize=7, ncol=2)
fig.tight_layout()
plt.show()
print("8 heads: ", np.round(slopes8, 4))
print("12 heads:", np.round(-alibi_bias(12, 2)[:, 1, 0], 4))
print(f"head 7 keeps exp(-{slopes8[-1]:.4f} * 64) = {np.exp(-slopes8[-1] * 64):.2f} of a key 64 tokens away")

# %% [markdown] nbgrader={"grade_id": "window_intro"}
# ## 3. Sliding windows and attention sinks
#
# ### A sliding-window mask
#
# With a causal mask, token $t$ attends to all $t + 1$ tokens so far, and the KV cache grows without end. Mistral
# 7B (Jiang et al., 2023) lets every layer attend only to a window of the most recent $W = 4096$ tokens. Its paper
# says a token attends to positions "between $i - W$ and $i$"; its reference code keeps a rolling cache of $W$
# entries, so a query sees exactly $W$ keys, itself included: keys $i - W + 1, \dots, i$. (Stacked layers still
# carry information further: $k$ layers reach back about $k \times W$ tokens.)
#
# Implement `sliding_window_mask(T, window)`: the `(T, T)` boolean mask, **True = blocked**, in which query `i`
# sees keys `i - window + 1` to `i`. It is causal too: nothing after `i`.

# %% nbgrader={"grade_id": "window", "solution": true}
def sliding_window_mask(T, window):
    """(T, T) bool, True = blocked: query i sees keys i - window + 1 ... i.

    Contract: T and window are positive integers.
    """
    ### BEGIN SOLUTION
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    return (j > i) | (j <= i - window)
    ### END SOLUTION


# %% nbgrader={"grade_id": "window_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("window_values")
### END HIDDEN TESTS
# Self-check: dtype and shape, polarity, causal, exactly `window` keys per query.
check_sliding_window_mask(sliding_window_mask)

# %% [markdown] nbgrader={"grade_id": "sinks_intro"}
# ### Why keep the first tokens: attention sinks
#
# Xiao et al. (2024, *Efficient Streaming Language Models with Attention Sinks*, StreamingLLM) noticed that
# trained models put a large share of their attention on the first few tokens, whatever those tokens are: the
# softmax must give its weight to *something*, and heads that have nothing useful to read park it there. A pure
# sliding window eventually evicts those tokens, and the model's outputs collapse. The example below shows the
# mechanism on one query's weights over 12 keys, where key 0 has the high score such a head learns.
#
# *Figure (alt text): two bar charts of one query's attention weights over 12 keys. With the sink, key 0 takes
# about 0.81 of the weight and the other keys share the rest; with key 0 evicted, the same scores renormalise and
# every remaining key's weight is about 5.2 times larger, so the output, the weighted mean of the values, moves.*

# %%
rng = np.random.default_rng(3)
scores = rng.normal(scale=0.5, size=12)  # one query's scores over 12 keys
scores[0] = 4.0  # the sink
values = rng.normal(size=(12, 4))  # (T_k, d_v)
with_sink = softmax(scores)
without_sink = softmax(scores[1:])
fig, axes = plt.subplots(1, 2, figsize=(10, 3), sharey=True)
axes[0].bar(range(12), with_sink, color=plt.cm.viridis(0.3))
axes[0].set(xlabel="key", ylabel="attention weight", title="all 12 keys (key 0 is the sink)")
axes[1].bar(range(1, 12), without_sink, color=plt.cm.viridis(0.7))
axes[1].set(xlabel="key", title="key 0 evicted: the same scores, renormalised")
fig.tight_layout()
plt.show()
print(f"the sink's weight: {with_sink[0]:.2f}; every other key's weight grows {without_sink[0] / with_sink[1]:.1f} "
      "times without it")
print("output with the sink:   ", np.round(with_sink @ values, 3))
print("output without the sink:", np.round(without_sink @ values[1:], 3))

# %% [markdown] nbgrader={"grade_id": "streaming_intro"}
# ### A streaming decoder with a bounded cache
#
# StreamingLLM keeps the first `n_sink` tokens' keys and values for good (the paper uses 4) and a rolling window
# of the most recent ones, so the cache never holds more than `n_sink + window` tokens however long the stream.
#
# Implement `streaming_decode(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, n_sink, window)`. Feed the tokens of `x`
# `(..., T, d_model)` one at a time through the given `decode_step`, starting from empty caches `(..., n_kv_heads,
# 0, d_head)` of `x`'s dtype. **Before** each step, cut each cache to its first `n_sink` tokens and its last
# `window - 1` tokens (when it holds more than that); the step then appends the new token, so it attends to the
# sinks and to the `window` most recent tokens, itself included, exactly the keys `sliding_window_mask` leaves
# open plus the sinks. Return `(out (..., T, d_model), cache_k, cache_v)`, the caches as they are after the last
# step. The caches' time axis is `-2` (there may be batch axes in front).
#
# <details><summary>Hint</summary>
#
# Write the cut as a small helper that takes one cache. `cache[..., :n_sink, :]` is the sinks; for the last
# `keep` tokens of a cache of length `T_past`, slice from `T_past - keep` (a slice `-keep:` goes wrong when
# `keep` is 0).
# </details>

# %% nbgrader={"grade_id": "streaming", "solution": true}
def streaming_decode(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, n_sink, window):
    """Decode x token by token with a KV cache of the first n_sink and the last `window` tokens.

    Contract: as causal_self_attention; n_sink is an integer >= 0 and window a positive one.
    """
    ### BEGIN SOLUTION
    def cut(cache):
        T_past = cache.shape[-2]
        if T_past <= n_sink + window - 1:
            return cache
        return np.concatenate([cache[..., :n_sink, :], cache[..., T_past - (window - 1):, :]], axis=-2)

    *lead, T, _ = x.shape
    d_head = W_K.shape[-1] // n_kv_heads
    cache_k = np.zeros((*lead, n_kv_heads, 0, d_head), dtype=x.dtype)  # (..., n_kv_heads, 0, d_head)
    cache_v = np.zeros((*lead, n_kv_heads, 0, d_head), dtype=x.dtype)
    outs = []
    for t in range(T):
        out_t, cache_k, cache_v = decode_step(x[..., t:t + 1, :], cut(cache_k), cut(cache_v), W_Q, W_K, W_V, W_O,
                                              n_heads, n_kv_heads)
        outs.append(out_t)
    return np.concatenate(outs, axis=-2), cache_k, cache_v
    ### END SOLUTION


# %% nbgrader={"grade_id": "streaming_values", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("streaming_values")
### END HIDDEN TESTS
# Self-check: the cache stays bounded, the output equals masked attention over the sinks and the window (batched,
# window 1 included), float32 kept.
check_streaming_decode(streaming_decode, decode_step)

# %% [markdown] nbgrader={"grade_id": "streaming_memory_intro"}
# Memory is now flat in the stream length. The cell decodes longer and longer streams and reports the cache's
# length and bytes at the end (`make bench` prints the same for longer streams, with the peak memory measured).
#
# *Figure (alt text): the KV cache's size in kilobytes at the end of the stream against the stream length, from 8
# to 256 tokens, for a full cache and for the streaming cache with 4 sinks and a window of 28. The full cache grows
# in a straight line to 32 kB at 256 tokens; the streaming cache grows until 32 tokens and then stays flat at 4 kB.*

# %%
rng = np.random.default_rng(0)
d_model, n_heads, n_kv_heads = 16, 4, 2
W_Q, W_O = (rng.normal(size=(d_model, d_model)) / 4 for _ in range(2))
W_K, W_V = (rng.normal(size=(d_model, n_kv_heads * d_model // n_heads)) / 4 for _ in range(2))
lengths = [8, 16, 32, 64, 128, 256]
full_kb, stream_kb = [], []
for T in lengths:
    x = rng.normal(size=(T, d_model))
    _, ck, cv = streaming_decode(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, n_sink=4, window=28)
    stream_kb.append((ck.nbytes + cv.nbytes) / 1024)
    full_kb.append(2 * T * d_model // n_heads * n_kv_heads * x.itemsize / 1024)  # what a full cache would hold
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot(lengths, full_kb, "o-", color=plt.cm.viridis(0.2), label="full KV cache")
ax.plot(lengths, stream_kb, "s-", color=plt.cm.viridis(0.7), label="4 sinks + window 28")
ax.set(xlabel="stream length T (tokens)", ylabel="KV cache (kB)", title="A bounded cache")
ax.legend()
plt.show()
print("streaming cache (kB):", stream_kb)
print("full cache (kB):     ", full_kb)

# %% [markdown] nbgrader={"grade_id": "mla_intro"}
# ## 4. Multi-head latent attention (MLA)
#
# GQA shrinks the KV cache by sharing heads. DeepSeek-V2 (DeepSeek-AI, 2024, section 2.1) keeps every head its
# own key and value but caches neither: each token is compressed to one small **latent** vector, and each head's
# keys and values are rebuilt from it.
#
# | step | code | shape |
# |---|---|---|
# | compress | `c_KV = x @ W_DKV` | `(..., T, d_c)`: **cached** |
# | keys, values (content) | `split_heads(c_KV @ W_UK)`, `split_heads(c_KV @ W_UV)` | `(..., n_heads, T, d_head)` each |
# | shared rotary key | `k_R = rope(x @ W_KR, positions)` | `(..., T, d_rope)`: **cached**, one for all heads |
# | queries (content, rotary) | `split_heads(x @ W_Q)`, `rope(split_heads(x @ W_QR), positions)` | `(..., n_heads, T, d_head)`, `(..., n_heads, T, d_rope)` |
# | per head | query `[q_C, q_R]`, key `[k_C, k_R]` | width `d_head + d_rope` |
#
# Why a separate rotary part? RoPE placed in the content keys would sit between `W_UK` and the query, and depend
# on the position: it would break the trick below. So DeepSeek-V2 rotates only a small extra part ("decoupled
# RoPE"), one key part shared by all heads. The scores divide by $\sqrt{d_\text{head} + d_\text{rope}}$, the width
# of the dot product. (DeepSeek-V2 also compresses the queries, with $d_c' = 1536$; that saves activations in
# training, not cache, and is left out here.) The numbers of DeepSeek-V2: 128 heads of $d_\text{head} = 128$,
# $d_c = 512$, $d_\text{rope} = 64$.
#
# Implement `mla_attention(x, W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O, n_heads, mask=None)` as in the table,
# positions `0 ... T-1`, and return `(out (..., T, d_model), weights (..., n_heads, T, T))` with `out =
# concat_heads(heads) @ W_O`. The given `scaled_dot_product_attention` and your `rope` do most of the work.
#
# <details><summary>Hint</summary>
#
# `k_R` has no head axis. `np.expand_dims(k_R, -3)` gives it one of length 1; `np.broadcast_to` then repeats it
# for every head without copying, so it can be concatenated with `k_C` along the last axis.
# </details>

# %% nbgrader={"grade_id": "mla", "solution": true}
def mla_attention(x, W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O, n_heads, mask=None):
    """DeepSeek-V2's multi-head latent attention, keys and values built from the latent c_KV.

    Contract: x (..., T, d_model), W_DKV (d_model, d_c), W_UK and W_UV (d_c, n_heads * d_head), W_KR (d_model,
    d_rope), W_Q (d_model, n_heads * d_head), W_QR (d_model, n_heads * d_rope) and W_O (n_heads * d_head, d_model)
    share one float dtype; d_rope is even; mask is None or bool, broadcastable to (T, T).
    """
    ### BEGIN SOLUTION
    positions = np.arange(x.shape[-2])
    c_kv = x @ W_DKV  # (..., T, d_c)
    k_c = split_heads(c_kv @ W_UK, n_heads)  # (..., n_heads, T, d_head)
    v = split_heads(c_kv @ W_UV, n_heads)  # (..., n_heads, T, d_head)
    k_r = np.expand_dims(rope(x @ W_KR, positions), -3)  # (..., 1, T, d_rope)
    k_r = np.broadcast_to(k_r, (*k_c.shape[:-1], k_r.shape[-1]))  # (..., n_heads, T, d_rope)
    q_c = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    q_r = rope(split_heads(x @ W_QR, n_heads), positions)  # (..., n_heads, T, d_rope)
    q, k = np.concatenate([q_c, q_r], axis=-1), np.concatenate([k_c, k_r], axis=-1)
    heads, weights = scaled_dot_product_attention(q, k, v, mask)
    return concat_heads(heads) @ W_O, weights
    ### END SOLUTION


# %% nbgrader={"grade_id": "mla_values", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("mla_values")
### END HIDDEN TESTS
# Self-check: shapes, the scale, the rotary key, the heads' columns, float32 kept.
check_mla_attention(mla_attention)

# %% [markdown] nbgrader={"grade_id": "absorb_intro"}
# ### The absorption trick: attend over the latent alone
#
# Caching `c_KV` saves memory only if decoding never rebuilds every past token's keys and values. It need not.
# Take head $h$'s columns of the up-projections, $W_{UK}^h$ and $W_{UV}^h$ (`(d_c, d_head)`, columns
# `h*d_head:(h+1)*d_head`), and its rows of the output projection, $W_O^h$ (`(d_head, d_model)`). Matrix products
# can be regrouped:
# - content score: $q_C^h \cdot (W_{UK}^{h\top} c_j) = (q_C^h\, W_{UK}^{h\top}) \cdot c_j$: fold $W_{UK}^h$ into
#   the query once, and score it against the cached latents directly;
# - output: $\big(\sum_j p_{ij}\, c_j W_{UV}^h\big) W_O^h = \big(\sum_j p_{ij}\, c_j\big)\, (W_{UV}^h W_O^h)$: mix the
#   latents with the weights, then one `(d_c, d_model)` matrix per head, and sum over the heads (lesson 02:
#   concatenating then multiplying by $W_O$ is the sum over heads of head $h$ times its rows of $W_O$).
#
# This is what a decoding step does: the newest token's query reads the whole cache. So `mla_absorbed` takes the
# cache, not the tokens behind it:
#
# `mla_absorbed(x, c_KV, k_R, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, mask=None)`
#
# - `x` `(..., T_q, d_model)`: the newest `T_q` tokens (one, in a decoding step), at positions `T - T_q ... T - 1`;
# - `c_KV` `(..., T, d_c)` and `k_R` `(..., T, d_rope)`: the cache of all `T` tokens, the newest last, `k_R` already
#   rotated (for the tokens `x_all` it is `x_all @ W_DKV` and `rope(x_all @ W_KR, np.arange(T))`); `T_q <= T`;
# - `mask` `(T_q, T)` (True where blocked) or None.
#
# Return `(out (..., T_q, d_model), weights (..., n_heads, T_q, T))`: with the cache of `x_all`, the last `T_q` rows
# of `mla_attention(x_all, ...)`, to float64 rounding. The queries are rotated at their own positions, and the
# scores are the content part plus the rotary part, divided by $\sqrt{d_\text{head} + d_\text{rope}}$, masked,
# then softmax. The rule: **no key or value of a cached token is built for any head** (no `c_KV @ W_UK`, no
# `c_KV @ W_UV`, not even one head at a time). The hidden test checks it the way lesson 06 checks tiled attention:
# it hands your function a cache whose tokens' keys would not fit in the memory the grader gives it. The lesson's
# `split_heads`, `softmax` and `scaled_dot_product_attention` (over the latents) are yours to use.
#
# <details><summary>Hint 1</summary>
#
# Per-head blocks of a weight: reshape `W_UK` `(d_c, n_heads*d_head)` to `(d_c, n_heads, d_head)`, then move the
# head axis to the front. `W_O` `(n_heads*d_head, d_model)` reshapes straight to `(n_heads, d_head, d_model)`: its
# rows are already grouped by head.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Give `c_KV` and `k_R` a head axis of length 1 (`np.expand_dims(a, -3)`) and let matmul broadcast them against
# the `n_heads` queries. The absorbed query is `(..., n_heads, T_q, d_c)`.
# </details>

# %% nbgrader={"grade_id": "absorbed", "solution": true}
def mla_absorbed(x, c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, mask=None):
    """The newest tokens x (..., T_q, d_model) attend over the MLA cache c_kv (..., T, d_c), k_r (..., T, d_rope)
    with W_UK and W_UV absorbed: no key or value of a cached token is built. T_q <= T.

    Contract: x (..., T_q, d_model), c_kv (..., T, d_c) and k_r (..., T, d_rope), with T_q <= T, and the weights as
    in mla_attention share one float dtype; mask is None or bool, broadcastable to (T_q, T).
    """
    ### BEGIN SOLUTION
    T_q, T = x.shape[-2], c_kv.shape[-2]
    positions = np.arange(T - T_q, T)  # the newest tokens' positions
    d_c, d_model, d_rope = c_kv.shape[-1], x.shape[-1], k_r.shape[-1]
    d_head = W_UK.shape[-1] // n_heads
    c = np.expand_dims(c_kv, -3)  # (..., 1, T, d_c)
    k = np.expand_dims(k_r, -3)  # (..., 1, T, d_rope)
    W_UK_h = np.swapaxes(W_UK.reshape(d_c, n_heads, d_head), 0, 1)  # (n_heads, d_c, d_head)
    W_UV_h = np.swapaxes(W_UV.reshape(d_c, n_heads, d_head), 0, 1)  # (n_heads, d_c, d_head)
    W_OV = W_UV_h @ W_O.reshape(n_heads, d_head, d_model)  # (n_heads, d_c, d_model)
    q_latent = split_heads(x @ W_Q, n_heads) @ np.swapaxes(W_UK_h, -1, -2)  # (..., n_heads, T_q, d_c)
    q_r = rope(split_heads(x @ W_QR, n_heads), positions)  # (..., n_heads, T_q, d_rope)
    scores = (q_latent @ np.swapaxes(c, -1, -2) + q_r @ np.swapaxes(k, -1, -2)) / math.sqrt(d_head + d_rope)
    blocked = np.zeros(scores.shape[-2:], dtype=bool) if mask is None else mask
    weights = softmax(np.where(blocked, -np.inf, scores), axis=-1)  # (..., n_heads, T_q, T)
    return np.sum((weights @ c) @ W_OV, axis=-3), weights
    ### END SOLUTION


# %% nbgrader={"grade_id": "absorbed_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("absorbed_values")
### END HIDDEN TESTS
# Self-check: the last rows of latent attention, from the cache (the whole sequence, and one decoding step;
# batched, masked), float32 kept.
check_mla_absorbed(mla_absorbed)

# %% nbgrader={"grade_id": "absorbed_memory", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("absorbed_memory")
### END HIDDEN TESTS
# Self-check: one decoding step over a long cache allocates far less than the cached tokens' keys would take.
check_mla_absorbed_memory(mla_absorbed)

# %% [markdown] nbgrader={"grade_id": "absorb_check_intro"}
# Your two forms side by side, on one causal batch with DeepSeek-V2's proportions scaled down (`d_c = 4 d_head`,
# `d_rope = d_head / 2`): the whole sequence at once, then the last token alone, as a decoding step reads the cache.
# `make bench` times both at decode time: the absorbed form reads `d_c + d_rope` numbers per cached token instead of
# rebuilding `2 n_heads d_head`.

# %%
rng = np.random.default_rng(2)
B, T, d_model, n_heads, d_head = 2, 10, 32, 4, 8
d_c, d_rope = 4 * d_head, d_head // 2
shapes = {"W_DKV": (d_model, d_c), "W_UK": (d_c, n_heads * d_head), "W_UV": (d_c, n_heads * d_head),
          "W_KR": (d_model, d_rope), "W_Q": (d_model, n_heads * d_head), "W_QR": (d_model, n_heads * d_rope),
          "W_O": (n_heads * d_head, d_model)}
mla_weights = dict(zip(shapes, (rng.normal(size=s) / math.sqrt(s[0]) for s in shapes.values())))
W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O = mla_weights.values()
x = rng.normal(size=(B, T, d_model))
causal = np.triu(np.ones((T, T), dtype=bool), k=1)
c_kv, k_r = x @ W_DKV, rope(x @ W_KR, np.arange(T))  # the cache: (B, T, d_c), (B, T, d_rope)
out_naive, w_naive = mla_attention(x, *mla_weights.values(), n_heads, causal)
out_absorbed, w_absorbed = mla_absorbed(x, c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, causal)
out_step, w_step = mla_absorbed(x[:, -1:], c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads)  # the last token
print(f"largest difference of the outputs: {np.abs(out_naive - out_absorbed).max():.1e}; "
      f"of the weights: {np.abs(w_naive - w_absorbed).max():.1e}")
print(f"the last token alone, as a decoding step: {np.abs(out_naive[:, -1:] - out_step).max():.1e}")
print(f"cached per token and layer: {d_c + d_rope} numbers (latent + rotary key) instead of "
      f"{2 * n_heads * d_head} (every head's key and value)")

# %% [markdown] nbgrader={"grade_id": "cache_intro"}
# ### The KV cache, counted
#
# Per token and layer a model caches (DeepSeek-V2, Table 1): MHA $2\,n_\text{heads} d_\text{head}$ (every head's
# key and value); GQA $2\,n_\text{kv\_heads} d_\text{head}$; MQA $2\,d_\text{head}$ (one key, one value); MLA
# $d_c + d_\text{rope}$ (one latent and one shared rotary key, for all heads, for keys *and* values).
#
# Implement `kv_cache_elements_per_token(config)`: `config` is a dict with `"attention"` (`"MHA"`, `"GQA"`,
# `"MQA"` or `"MLA"`), `"n_layers"`, `"n_heads"`, `"d_head"`, and `"n_kv_heads"` (GQA) or `"d_c"` and `"d_rope"`
# (MLA). Return the number of cached elements per token over all layers, an `int`.

# %% nbgrader={"grade_id": "cache", "solution": true}
def kv_cache_elements_per_token(config):
    """Numbers a model caches per token, over all its layers.

    Contract: config is a dict: 'attention' one of MHA, GQA, MQA and MLA; positive integers 'n_layers', 'n_heads',
    'd_head', and 'n_kv_heads' (GQA, dividing n_heads) or 'd_c' and 'd_rope' (MLA).
    """
    ### BEGIN SOLUTION
    kind = config["attention"]
    if kind == "MHA":
        per_layer = 2 * config["n_heads"] * config["d_head"]
    elif kind == "GQA":
        per_layer = 2 * config["n_kv_heads"] * config["d_head"]
    elif kind == "MQA":
        per_layer = 2 * config["d_head"]
    else:
        per_layer = config["d_c"] + config["d_rope"]
    return int(per_layer * config["n_layers"])
    ### END SOLUTION


# %% nbgrader={"grade_id": "cache_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("cache_values")
### END HIDDEN TESTS
# Self-check: each kind of attention on a small config, and DeepSeek-V2's "GQA with 2.25 groups".
check_kv_cache_elements(kv_cache_elements_per_token)

# %% [markdown] nbgrader={"grade_id": "models_intro"}
# ## 5. Real models: their caches, and which pieces they use
#
# The configurations below are the published ones (each entry's source is in its `"source"`). The table is computed
# from them by your function; cache sizes assume 2 bytes per number (bfloat16).

# %%
MODELS = {
    "Llama 2 7B": dict(attention="MHA", n_layers=32, n_heads=32, d_head=128, positions="RoPE, base 10,000",
                       window="none (4,096-token context)", context=4096,
                       source="Touvron et al., 2023, Llama 2; Meta's published config.json"),
    "Llama 3 8B": dict(attention="GQA", n_layers=32, n_heads=32, n_kv_heads=8, d_head=128,
                       positions="RoPE, base 500,000", window="none (8,192-token context)", context=8192,
                       source="Meta, 2024, Llama 3 model card; config.json rope_theta 500000"),
    "Mistral 7B": dict(attention="GQA", n_layers=32, n_heads=32, n_kv_heads=8, d_head=128,
                       positions="RoPE, base 10,000", window="sliding window of 4,096 (rolling cache)",
                       context=8192, cache_window=4096,
                       source="Jiang et al., 2023, Mistral 7B, Table 1"),
    "Falcon 7B": dict(attention="MQA", n_layers=32, n_heads=71, d_head=64, positions="RoPE",
                      window="none (2,048-token context)", context=2048,
                      source="TII, 2023, Falcon-7B config.json (multi_query, 71 heads of 64)"),
    "BLOOM 176B": dict(attention="MHA", n_layers=70, n_heads=112, d_head=128, positions="ALiBi",
                       window="none (2,048-token context)", context=2048,
                       source="BigScience, 2022, BLOOM (arXiv:2211.05100); bigscience/bloom config.json"),
    "DeepSeek-V2": dict(attention="MLA", n_layers=60, n_heads=128, d_head=128, d_c=512, d_rope=64,
                        positions="decoupled RoPE (64-wide, one key part for all heads)",
                        window="none (128K-token context)", context=131072,
                        source="DeepSeek-AI, 2024, DeepSeek-V2, sections 2.1 and 3.1.2"),
}
def cache_gib(config, tokens):
    """The KV cache of one sequence of `tokens` tokens, in GiB (bfloat16): a rolling cache (Mistral's) holds at
    most its window, so it stops growing there."""
    return 2 * kv_cache_elements_per_token(config) * np.minimum(tokens, config.get("cache_window", tokens)) / 2 ** 30


print(f"{'model':12} {'attention':9} {'heads (query/KV)':>17} {'per token':>12} {'KiB/token':>9} {'GiB at 128K':>12}")
for name, config in MODELS.items():
    elements = kv_cache_elements_per_token(config)
    kv = {"MHA": config["n_heads"], "GQA": config.get("n_kv_heads"), "MQA": 1, "MLA": "latent"}[config["attention"]]
    beyond = "*" if config["context"] < 131072 else " "  # past the context the model was trained for
    print(f"{name:12} {config['attention']:9} {str(config['n_heads']) + ' / ' + str(kv):>17} {elements:>12,} "
          f"{2 * elements / 1024:>9,.1f} {cache_gib(config, 131072):>11,.1f}{beyond}")
print("* beyond the model's context length: what its cache would be, not a length it was trained to read")
v2 = MODELS["DeepSeek-V2"]
groups = kv_cache_elements_per_token(v2) / kv_cache_elements_per_token(dict(v2, attention="GQA", n_kv_heads=1))
print(f"DeepSeek-V2's MLA caches as much as GQA with {groups:g} groups would "
      f"({v2['d_c']} + {v2['d_rope']} = {(v2['d_c'] + v2['d_rope']) / v2['d_head']:g} d_head per layer)")

# %% [markdown] nbgrader={"grade_id": "cache_plot_intro"}
# *Figure (alt text): the KV cache in GiB against the context length, 1K to 128K tokens, both axes logarithmic,
# one line per model of the table, solid up to the model's own context length and dashed beyond it (an
# extrapolation). At 128K tokens BLOOM would need about 490 GiB, Llama 2 7B 64 GiB, Llama 3 8B 16 GiB, DeepSeek-V2
# 8.4 GiB, and Falcon 7B, with its single key/value head, 1 GiB; Mistral 7B's line stops rising at its 4,096-token
# window (its rolling cache keeps only the window), at 0.5 GiB. The other lines are straight, because their cache
# grows in proportion to the context.*

# %%
context = 2.0 ** np.arange(10, 18)  # 1K ... 128K tokens
fig, ax = plt.subplots(figsize=(7, 4))
for k, (name, config) in enumerate(MODELS.items()):
    color, trained = plt.cm.viridis(k / len(MODELS)), context <= config["context"]
    ax.plot(context[trained], cache_gib(config, context[trained]), "o-", ms=3, color=color,
            label=f"{name} ({config['attention']})")
    if not trained.all():  # dashed from the last length the model reads: an extrapolation
        tail = context[max(int(trained.sum()) - 1, 0):]
        ax.plot(tail, cache_gib(config, tail), "o--", ms=3, color=color, alpha=0.6)
ax.set(xscale="log", yscale="log", xlabel="context length (tokens)", ylabel="KV cache (GiB, bfloat16)",
       title="KV cache of one sequence")
ax.legend(fontsize=8)
plt.show()

# %% [markdown] nbgrader={"grade_id": "map_intro"}
# ### The map: which pieces each model uses
#
# The same configurations, read as a map of this course's pieces (printed from `MODELS`, sources cited).

# %%
rows = ["| model | positions | heads (query / KV) | KV layout | window | source |", "|---|---|---|---|---|---|"]
for name, c in MODELS.items():
    kv = {"MHA": c["n_heads"], "GQA": c.get("n_kv_heads"), "MQA": 1, "MLA": f"latent d_c = {c.get('d_c')}"}
    rows.append(f"| {name} | {c['positions']} | {c['n_heads']} / {kv[c['attention']]} | {c['attention']} | "
                f"{c['window']} | {c['source']} |")
display(Markdown("\n".join(rows)))

# %% [markdown] nbgrader={"grade_id": "real_models_add"}
# ### What the real code adds
#
# This lesson's pieces are the ideas, not every detail of the released models. Reading their code you will meet:
# - **in DeepSeek-V2's MLA**, an RMSNorm on the latent $c_{KV}$ (and on the query's own latent) before the
#   up-projections, so its outputs differ from this lesson's for the same weights; a softmax scale larger than
#   $1/\sqrt{d_\text{head} + d_\text{rope}}$ when the context is stretched beyond training (YaRN's correction); and
#   keys and values that may have different widths (the content key's width need not be the value's);
# - **in streaming with attention sinks** (StreamingLLM), positions counted within the cache rather than in the
#   text: once tokens are evicted, the kept ones are re-numbered, so RoPE never sees a distance longer than the
#   cache. This lesson's `streaming_decode` keeps the text's positions, which is enough to see what the sinks do.

# %% [markdown] nbgrader={"grade_id": "summary"}
# ## Summary
#
# - RoPE rotates each column pair of every query and key by position times its frequency; two layouts exist
#   (interleaved, split halves), a column permutation apart; the score depends only on the distance $m - n$.
#   `base` sets the slowest pair's wavelength.
# - ALiBi adds $-m_h |i - j|$ to head $h$'s scores: one slope per head, geometric from $2^{-8/n}$, with the
#   reference code's rule for head counts that are not a power of 2.
# - A sliding window bounds what each query sees; a streaming cache keeps the first tokens (attention sinks)
#   and the last `window`, so memory is flat in the stream length and the sinks keep absorbing the softmax's mass.
# - MLA caches one latent per token and a shared rotary key, `d_c + d_rope` numbers per layer; folding `W_UK` into
#   the query and `W_UV` into `W_O` lets decoding attend over the latent alone, with the same result.
# - Real models mix these pieces: read a configuration for positions, query and KV heads, KV layout and window.
