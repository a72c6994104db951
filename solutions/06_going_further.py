# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade_id": "intro"}
# # Lesson 06 · Going further: GQA, the KV cache, mask conventions, tiled attention, measured speed, cross-attention
#
# The first five lessons built multi-head attention as the 2017 paper describes it. Models that serve text today
# change three things around it: several query heads share one key/value head (GQA, MQA), generation reuses the
# keys and values of earlier tokens (the KV cache), and long sequences are processed in blocks so the
# $(T, T)$ weight matrix is never stored (the idea behind FlashAttention). This lesson builds each of them in
# numpy and *measures* what it buys, instead of taking the claims on trust.
#
# **Goals.** By the end of this lesson you can
# 1. implement grouped-query attention and say why MHA and MQA are its two ends;
# 2. decode token by token with a KV cache laid out `(B, n_kv_heads, T, d_head)`, prove it equals full causal
#    attention, and measure the time per generated token with and without the cache;
# 3. write the same causal mask in the four conventions you will meet (this course, `masked_fill(mask == 0)`
#    code, and PyTorch's two boolean `attn_mask`s);
# 4. compute attention over key blocks with an online softmax, exactly, without ever holding a $(T, T)$ array;
# 5. read a timing in GFLOP/s and as a fraction of your machine's matmul peak, and explain what a fused QKV
#    projection does and does not save;
# 6. write cross-attention, whose queries and keys come from two sequences of different lengths, with a padding
#    mask, and say what a query whose keys are all blocked must get.
#
# **Time needed:** about 90 minutes. **You need:** lessons 01 and 02 (softmax, attention with a mask,
# `split_heads`, `concat_heads`, multi-head attention).
#
# **Names** (the [glossary](glossary.md) lists every one). `B` batch, `T` sequence length, `d_model`, `n_heads`,
# `d_head = d_model // n_heads`, `W_Q, W_K, W_V, W_O` applied as `x @ W`, and a boolean `mask` in which **True marks
# a blocked (query, key) pair**. New here: `n_kv_heads`, the number of key/value heads, and
# `n_rep = n_heads // n_kv_heads`, how many query heads share each of them.

# %% nbgrader={"grade_id": "setup", "points": 0}
### BEGIN HIDDEN TESTS
import os as _os, sys as _sys  # noqa: E401  grading: never import from the submission's folder
_sys.path[:] = [p for p in _sys.path if p and _os.path.abspath(p) != _os.getcwd()]
__import__("autograder.kernel.hidden_cell")  # grading: loaded before any cell of the learner's below can break imports
### END HIDDEN TESTS
import math
import os
import time
import tracemalloc

# One BLAS thread per Python thread: the threads of section 4 then each have a core of their own (with BLAS's own
# threads on top they fought over the same cores), and the matmul peak of section 5 is one core's, as in its
# table. Set before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import matplotlib.pyplot as plt
import numpy as np

from selfcheck_06 import (check_causal_masks, check_causal_self_attention, check_decode_step,
                          check_decode_with_kv_cache, check_gqa, check_kv_cache_append, check_pasted, check_repeat_kv,
                          check_tiled_attention, check_tiled_memory, check_cross_attention)

# %% [markdown] nbgrader={"grade_id": "tools_intro"}
# ## 0. Paste cell: your tools from lessons 01 and 02
#
# This lesson's one **paste cell**, marked `PASTE CELL`, is below. Paste your `softmax` and
# `scaled_dot_product_attention` from lesson 01 and your `split_heads`, `concat_heads` and `multi_head_attention`
# from lesson 02 into it, run it, then run the check after it, which runs those lessons' self-checks and says
# "This comes from your lesson 01" (or 02) when a pasted function is wrong; so does any later check that fails
# because of it. The demonstrations in this lesson call them. This cell earns no points, and the graded tests never depend on it: they put the course's own
# versions of these functions in place, so a mistake carried over from an earlier lesson costs nothing here.

# %% nbgrader={"grade_id": "tools", "solution": true}
# PASTE CELL: the bodies of your lesson-01 and lesson-02 functions go here (same names, same arguments).
def softmax(x, axis=-1):
    """Numerically stable softmax along `axis` (your lesson-01 version)."""
    ### BEGIN SOLUTION
    row_max = np.max(x, axis=axis, keepdims=True)  # one maximum per row along `axis`
    row_max = np.where(np.isfinite(row_max), row_max, 0)  # a row of -inf (all blocked) is not shifted
    e = np.exp(x - row_max)
    total = np.sum(e, axis=axis, keepdims=True)
    return e / np.where(total > 0, total, 1)  # an all-zero row stays 0 instead of 0/0
    ### END SOLUTION


def scaled_dot_product_attention(Q, K, V, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V; mask True = blocked. Returns (out, weights)."""
    ### BEGIN SOLUTION
    d_k = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    weights = softmax(scores, axis=-1)  # (..., T_q, T_k)
    return weights @ V, weights  # (..., T_q, d_v), (..., T_q, T_k)
    ### END SOLUTION


def split_heads(x, n_heads):
    """(..., T, d_model) -> (..., n_heads, T, d_head)."""
    ### BEGIN SOLUTION
    *lead, T, d_model = x.shape
    if d_model % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
    pieces = x.reshape(*lead, T, n_heads, d_model // n_heads)  # (..., T, n_heads, d_head)
    return np.swapaxes(pieces, -3, -2)  # (..., n_heads, T, d_head)
    ### END SOLUTION


def concat_heads(x):
    """(..., n_heads, T, d_head) -> (..., T, n_heads * d_head)."""
    ### BEGIN SOLUTION
    *lead, n_heads, T, d_head = x.shape
    tokens_first = np.swapaxes(x, -3, -2)  # (..., T, n_heads, d_head)
    return tokens_first.reshape(*lead, T, n_heads * d_head)  # (..., T, d_model)
    ### END SOLUTION


def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """Multi-head self-attention: x (..., T, d_model) -> (out (..., T, d_model), weights (..., n_heads, T, T))."""
    ### BEGIN SOLUTION
    Q = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    K = split_heads(x @ W_K, n_heads)
    V = split_heads(x @ W_V, n_heads)
    heads, weights = scaled_dot_product_attention(Q, K, V, mask)
    return concat_heads(heads) @ W_O, weights
    ### END SOLUTION


# %%
# Lesson 01's and lesson 02's self-checks, run on the functions you pasted above.
check_pasted(softmax=softmax, scaled_dot_product_attention=scaled_dot_product_attention, split_heads=split_heads,
             concat_heads=concat_heads, multi_head_attention=multi_head_attention)

# %% [markdown] nbgrader={"grade_id": "gqa_intro"}
# ## 1. Fewer key/value heads: GQA and MQA
#
# In multi-head attention every head has its own queries, keys and values. When a model generates text it must
# keep the keys and values of every earlier token (section 3 shows why), and that store, not the arithmetic,
# is what limits how long and how many sequences fit in memory. **Grouped-query attention** keeps `n_heads`
# query heads but only `n_kv_heads` key/value heads; each KV head serves a group of
# `n_rep = n_heads // n_kv_heads` query heads. Llama-2 70B, for instance, has 64 query heads and 8 KV heads.
#
# | `n_kv_heads` | name | K, V projections | KV store per token, per layer |
# |---|---|---|---|
# | `n_heads` | multi-head attention (MHA) | `(d_model, d_model)` each | `2 · n_heads · d_head` numbers |
# | between | grouped-query attention (GQA) | `(d_model, n_kv_heads · d_head)` each | `2 · n_kv_heads · d_head` |
# | 1 | multi-query attention (MQA) | `(d_model, d_head)` each | `2 · d_head` |
#
# The queries are unchanged: `W_Q` and `W_O` stay `(d_model, d_model)`. To attend, the `n_kv_heads` key heads
# are **repeated** so that there is one per query head again. The order matters: query heads
# `0 .. n_rep-1` share KV head 0, the next `n_rep` share KV head 1, and so on (this is what Llama's
# `repeat_kv` does). With `n_kv_heads = 2` and `n_rep = 3` the KV heads must line up as `0 0 0 1 1 1`.
#
# *Figure (alt text): two 6 by 2 grids, query heads on the vertical axis and KV heads on the horizontal axis, in
# the cividis colour map. Left, "np.repeat": query heads 0 to 2 use KV head 0 and 3 to 5 use KV head 1, two solid
# blocks. Right, "np.tile": the rows alternate between KV head 0 and 1, the wrong assignment.*

# %%
n_heads_demo, n_kv_demo = 6, 2
kv_ids = np.arange(n_kv_demo)
fig, axes = plt.subplots(1, 2, figsize=(6.4, 3.4))
for ax, (title, order) in zip(axes, [("np.repeat (right)", np.repeat(kv_ids, 3)),
                                     ("np.tile (wrong)", np.tile(kv_ids, 3))]):
    assignment = (order[:, None] == kv_ids[None, :]).astype(float)  # (n_heads, n_kv_heads)
    ax.imshow(assignment, cmap="cividis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(kv_ids, [f"KV {j}" for j in kv_ids])
    ax.set_yticks(range(n_heads_demo), [f"query head {i}" for i in range(n_heads_demo)])
    ax.set(xlabel="key/value head", title=title)
axes[0].set_ylabel("query head")
fig.suptitle("Which KV head each query head reads (n_heads=6, n_kv_heads=2)")
fig.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade_id": "repeat_kv_intro"}
# Implement `repeat_kv(x, n_rep)`: `(..., n_kv_heads, T, d_head) -> (..., n_kv_heads * n_rep, T, d_head)`, each
# KV head repeated `n_rep` times in a row. One numpy call does it; which one, and along which axis?
# Count axes from the end (`-3`), so the same code works with and without a batch axis.

# %% nbgrader={"grade_id": "repeat_kv", "solution": true}
def repeat_kv(x, n_rep):
    """(..., n_kv_heads, T, d_head) -> (..., n_kv_heads * n_rep, T, d_head), each KV head n_rep times in a row.

    Contract: x (..., n_kv_heads, T, d_head) is a float array; n_rep is a positive integer.
    """
    ### BEGIN SOLUTION
    return np.repeat(x, n_rep, axis=-3)  # (..., n_kv_heads * n_rep, T, d_head)
    ### END SOLUTION


# %% nbgrader={"grade_id": "repeat_kv_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("repeat_kv_values")
### END HIDDEN TESTS
# Self-check: head order 0 0 0 1 1 1, batch axis untouched, n_rep = 1 changes nothing.
check_repeat_kv(repeat_kv)

# %% [markdown] nbgrader={"grade_id": "gqa_fn_intro"}
# Now implement `grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None)`, returning
# `(out, weights)` like `multi_head_attention`:
#
# | argument | shape |
# |---|---|
# | `x` | `(..., T, d_model)` |
# | `W_Q`, `W_O` | `(d_model, d_model)` |
# | `W_K`, `W_V` | `(d_model, n_kv_heads * d_head)` with `d_head = d_model // n_heads` |
# | `weights` (returned) | `(..., n_heads, T, T)`: one pattern per *query* head |
# | `out` (returned) | `(..., T, d_model)` |
#
# Split the queries into `n_heads` heads and the keys and values into `n_kv_heads` heads (your `split_heads`
# works for both), repeat the key and value heads with `repeat_kv`, then attend and project as before.

# %% nbgrader={"grade_id": "grouped_query_attention", "solution": true}
def grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None):
    """n_heads query heads sharing n_kv_heads key/value heads. Returns (out, weights (..., n_heads, T, T)).

    Contract: x (..., T, d_model), W_Q and W_O (d_model, d_model), W_K and W_V (d_model, n_kv_heads * d_head) share
    one float dtype; n_heads divides d_model and n_kv_heads divides n_heads; mask is None or bool, broadcastable to
    (..., n_heads, T, T).
    """
    ### BEGIN SOLUTION
    group = n_heads // n_kv_heads  # query heads per KV head
    Q = split_heads(x @ W_Q, n_heads)  # queries: (..., n_heads, T, d_head)
    K = repeat_kv(split_heads(x @ W_K, n_kv_heads), group)  # (..., n_kv_heads, T, d_head) -> (..., n_heads, T, d_head)
    V = repeat_kv(split_heads(x @ W_V, n_kv_heads), group)  # (..., n_heads, T, d_head)
    heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # (..., n_heads, T, d_head), (..., n_heads, T, T)
    return concat_heads(heads) @ W_O, weights  # (..., T, d_model)
    ### END SOLUTION


# %% nbgrader={"grade_id": "gqa_values", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("gqa_values")
### END HIDDEN TESTS
# Self-check: the MHA end, the MQA end, and a true group, against multi-head attention with repeated weights.
check_gqa(grouped_query_attention, multi_head_attention, repeat_kv=repeat_kv)

# %% [markdown] nbgrader={"grade_id": "gqa_ends"}
# ### The two ends, and what GQA is
#
# The self-check compared your function with `multi_head_attention` in a telling way: GQA **is** multi-head
# attention whose key and value weights happen to be repeated. Copy each KV head's `d_head` columns of `W_K` into
# every query head of its group and you get a full `(d_model, d_model)` matrix; MHA with that matrix gives
# exactly GQA's output. So GQA does not compute anything MHA cannot; it constrains the heads of a group to share
# one key and one value projection, which is what lets the cache store `n_kv_heads` heads instead of `n_heads`.
# The cell below checks this once more and prints what it saves for Llama-2 70B (80 layers, 64 query heads,
# 8 KV heads, `d_head = 128`, 2-byte numbers).

# %%
rng = np.random.default_rng(6)
B, T, d_model, n_heads, n_kv_heads = 2, 5, 24, 6, 2
d_head, n_rep = d_model // n_heads, n_heads // n_kv_heads
x = rng.normal(size=(B, T, d_model))
W_Q, W_O = rng.normal(size=(2, d_model, d_model)) / math.sqrt(d_model)
W_K, W_V = rng.normal(size=(2, d_model, n_kv_heads * d_head)) / math.sqrt(d_model)


def expand_kv_weight(W, n_kv_heads, n_rep):
    """(d_model, n_kv_heads*d_head) -> (d_model, n_kv_heads*n_rep*d_head): each KV head's columns repeated."""
    d_model, d_kv = W.shape
    per_head = W.reshape(d_model, n_kv_heads, d_kv // n_kv_heads)  # (d_model, n_kv_heads, d_head)
    return np.repeat(per_head, n_rep, axis=1).reshape(d_model, -1)  # (d_model, n_heads*d_head)


gqa_out, _ = grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)
mha_out, _ = multi_head_attention(x, W_Q, expand_kv_weight(W_K, n_kv_heads, n_rep),
                                  expand_kv_weight(W_V, n_kv_heads, n_rep), W_O, n_heads)
print(f"GQA == MHA with repeated K/V weights: largest difference {np.max(np.abs(gqa_out - mha_out)):.1e}")

layers, q_heads, head_width, bytes_per_number, context = 80, 64, 128, 2, 4096
print(f"\nKV cache of Llama-2 70B shapes for one sequence of {context} tokens:")
for name, kv_heads in [("MHA", 64), ("GQA (as shipped)", 8), ("MQA", 1)]:
    per_token = 2 * layers * kv_heads * head_width * bytes_per_number  # K and V, every layer
    saving = "the baseline" if kv_heads == q_heads else f"{q_heads // kv_heads}x less than MHA"
    print(f"  {name:<17} n_kv_heads={kv_heads:>2}: {per_token / 2**10:>6.0f} KiB per token, "
          f"{per_token * context / 2**30:>5.2f} GiB per sequence ({saving})")

# %% [markdown] nbgrader={"grade_id": "masks_intro"}
# ## 2. One causal mask, four conventions
#
# Decoding needs a **causal** mask: query $t$ may attend to keys $0, \dots, t$ and to nothing later. Which value
# marks "blocked" is a convention, and libraries disagree. Mixing them up does not raise an error; it silently
# lets every token see the future, or hides everything but the future. Here is the same causal mask for $T = 4$
# as each convention writes it:
#
# | where | type | what True (or 1) means | causal mask for T = 4 | how it is built |
# |---|---|---|---|---|
# | this course | bool | **blocked** | True above the diagonal | `np.triu(np.ones((T, T), bool), k=1)` |
# | `scores.masked_fill(mask == 0, -inf)` code (common in tutorials) | 0/1 numbers | **may attend**; 0 is blocked | 1 on and below the diagonal | `torch.tril(torch.ones(T, T))` |
# | PyTorch `nn.MultiheadAttention(..., attn_mask=)`, boolean | bool | **blocked** (not allowed to attend) | True above the diagonal | `torch.triu(torch.ones(T, T, dtype=torch.bool), 1)` |
# | PyTorch `F.scaled_dot_product_attention(..., attn_mask=)`, boolean | bool | **may attend** (takes part in attention) | True on and below the diagonal | `torch.tril(torch.ones(T, T, dtype=torch.bool))` |
#
# ```
# course / nn.MultiheadAttention    masked_fill(mask == 0)     F.scaled_dot_product_attention
#   . X X X                           1 0 0 0                    T F F F
#   . . X X      (X = True,           1 1 0 0                    T T F F
#   . . . X       blocked)            1 1 1 0                    T T T F
#   . . . .                           1 1 1 1                    T T T T
# ```
#
# So the two PyTorch functions use **opposite** meanings for a boolean `attn_mask`: passing the same tensor to
# both blocks the future in one and everything *except* the future in the other. Two more facts worth knowing:
# both also accept a float mask that is *added* to the scores (0 where allowed, $-\infty$ where blocked), and
# `nn.MultiheadAttention`'s separate `key_padding_mask` uses True = ignore this key, like its `attn_mask`.
# `F.scaled_dot_product_attention(..., is_causal=True)` builds the causal mask itself. None of this needs
# PyTorch installed to learn: write the four masks in numpy.
#
# Implement `causal_mask(T, convention="course")` returning the `(T, T)` causal mask in one of the conventions
# `"course"`, `"masked_fill"` (float 1.0 / 0.0), `"nn.MultiheadAttention"` and `"F.scaled_dot_product_attention"`
# (both boolean). Raise `ValueError` for any other convention name.

# %% nbgrader={"grade_id": "causal_mask", "solution": true}
def causal_mask(T, convention="course"):
    """The (T, T) causal mask in the given convention (see the table above).

    Contract: T is a positive integer; convention is one of the four in the table.
    """
    ### BEGIN SOLUTION
    blocked = np.triu(np.ones((T, T), dtype=bool), k=1)  # (T, T), True above the diagonal
    if convention in ("course", "nn.MultiheadAttention"):
        return blocked
    if convention == "F.scaled_dot_product_attention":
        return ~blocked
    if convention == "masked_fill":
        return (~blocked).astype(float)
    raise ValueError(f"unknown mask convention {convention!r}")
    ### END SOLUTION


# %% nbgrader={"grade_id": "mask_conventions", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("mask_conventions")
### END HIDDEN TESTS
# Self-check: each convention's values for T = 4, its dtype, and a ValueError for an unknown name.
check_causal_masks(causal_mask)

# %% [markdown] nbgrader={"grade_id": "cache_intro"}
# ## 3. Generating text: the KV cache
#
# A decoder generates one token at a time, and each new token attends to every token before it. Done naively,
# generating token $t$ runs the whole layer over all $t$ tokens again: it recomputes the keys and values of
# tokens whose keys and values have not changed. With a causal mask they *cannot* change, because row $s$ of
# causal attention depends only on tokens $0..s$. So a decoder keeps them: the **KV cache** stores every
# earlier token's keys and values, and a step only projects the newest token, appends its key and value, and
# attends with one query.
#
# **Layout.** The cache is laid out `(B, n_kv_heads, T, d_head)`: batch, KV head, time, width, the same layout
# the keys have inside attention, so a step needs no transpose, and it holds `n_kv_heads`, not `n_heads`, heads
# (section 1). The time axis is axis `-2`.
#
# First the **full path**, the reference the cache must reproduce: implement `causal_self_attention(x, W_Q, W_K,
# W_V, W_O, n_heads, n_kv_heads)`, grouped-query self-attention over all $T$ tokens with the causal mask,
# returning `(out, weights)`. Use your `causal_mask`.

# %% nbgrader={"grade_id": "causal_self_attention", "solution": true}
def causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
    """The full, uncached path: GQA over all T tokens with the causal mask. Returns (out, weights).

    Contract: x (..., T, d_model), W_Q and W_O (d_model, d_model), W_K and W_V (d_model, n_kv_heads * d_head) share
    one float dtype; n_heads divides d_model and n_kv_heads divides n_heads.
    """
    ### BEGIN SOLUTION
    T = x.shape[-2]
    return grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=causal_mask(T))
    ### END SOLUTION


# %% nbgrader={"grade_id": "causal_full_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("causal_full_values")
### END HIDDEN TESTS
# Self-check: no weight on a future token, earlier rows unchanged when a later token changes.
check_causal_self_attention(causal_self_attention, multi_head_attention,
                            grouped_query_attention=grouped_query_attention, causal_mask=causal_mask)

# %% [markdown] nbgrader={"grade_id": "append_intro"}
# Implement `kv_cache_append(cache_k, cache_v, k, v)`: the caches are `(..., n_kv_heads, T_past, d_head)`, the new
# keys and values `(..., n_kv_heads, T_new, d_head)`; return the two longer caches
# `(..., n_kv_heads, T_past + T_new, d_head)` as new arrays. Which axis is time?

# %% nbgrader={"grade_id": "kv_cache_append", "solution": true}
def kv_cache_append(cache_k, cache_v, k, v):
    """Append k, v (..., n_kv_heads, T_new, d_head) to the caches along time. Returns (cache_k, cache_v).

    Contract: the caches (..., n_kv_heads, T, d_head), T possibly 0, and k, v (..., n_kv_heads, T_new, d_head) share
    one float dtype.
    """
    ### BEGIN SOLUTION
    cache_k = np.concatenate([cache_k, k], axis=-2)  # (..., n_kv_heads, T_past + T_new, d_head)
    cache_v = np.concatenate([cache_v, v], axis=-2)
    return cache_k, cache_v
    ### END SOLUTION


# %% nbgrader={"grade_id": "kv_cache_append_values", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("kv_cache_append_values")
### END HIDDEN TESTS
# Self-check: the cache grows along time (axis -2), batched and unbatched, inputs untouched.
check_kv_cache_append(kv_cache_append)

# %% [markdown] nbgrader={"grade_id": "step_intro"}
# Implement one decoding step, `decode_step(x_t, cache_k, cache_v, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)`:
#
# 1. project only the newest token `x_t`, shape `(..., 1, d_model)`, into `q` `(..., n_heads, 1, d_head)` and
#    `k`, `v` `(..., n_kv_heads, 1, d_head)`;
# 2. append `k`, `v` to the caches with `kv_cache_append` **before** attending (a token may attend to itself);
# 3. attend with `q` to the repeated caches; no mask is needed, because the cache holds nothing from the future;
# 4. concatenate the heads and apply `W_O`.
#
# Return `(out_t, cache_k, cache_v)` with `out_t` of shape `(..., 1, d_model)`.

# %% nbgrader={"grade_id": "decode_step", "solution": true}
def decode_step(x_t, cache_k, cache_v, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
    """One decoding step with a KV cache. Returns (out_t (..., 1, d_model), cache_k, cache_v).

    Contract: x_t (..., 1, d_model), the caches (..., n_kv_heads, T, d_head) and the weights, as in
    causal_self_attention, share one float dtype.
    """
    ### BEGIN SOLUTION
    group = n_heads // n_kv_heads  # query heads per KV head
    q = split_heads(x_t @ W_Q, n_heads)  # (..., n_heads, 1, d_head)
    k = split_heads(x_t @ W_K, n_kv_heads)  # (..., n_kv_heads, 1, d_head)
    v = split_heads(x_t @ W_V, n_kv_heads)
    cache_k, cache_v = kv_cache_append(cache_k, cache_v, k, v)  # (..., n_kv_heads, T_past + 1, d_head)
    heads, _ = scaled_dot_product_attention(q, repeat_kv(cache_k, group), repeat_kv(cache_v, group))
    return concat_heads(heads) @ W_O, cache_k, cache_v  # (..., 1, d_model)
    ### END SOLUTION


# %% nbgrader={"grade_id": "decode_step_values", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("decode_step_values")
### END HIDDEN TESTS
# Self-check: one step from a cache of 3 tokens equals row 3 of causal attention over 4 tokens.
check_decode_step(decode_step, multi_head_attention, kv_cache_append=kv_cache_append, repeat_kv=repeat_kv)

# %% [markdown] nbgrader={"grade_id": "loop_intro"}
# Finally the loop: `decode_with_kv_cache(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)` starts from empty caches,
# shape `(..., n_kv_heads, 0, d_head)` (`np.zeros` accepts a 0 in a shape), feeds the tokens of `x` to
# `decode_step` one at a time (`x[..., t:t+1, :]` keeps the time axis), and returns
# `(out, cache_k, cache_v)` with `out` `(..., T, d_model)`, the step outputs joined along time. The loop is the
# exercise: do not hand the sequence to a function that attends over all of it at once
# (`scaled_dot_product_attention`, `multi_head_attention`, `grouped_query_attention`, `causal_self_attention`,
# `cross_attention`, `tiled_attention`); its hidden test refuses those calls.

# %% nbgrader={"grade_id": "decode_with_kv_cache", "solution": true}
def decode_with_kv_cache(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
    """Token-by-token decoding of x (..., T, d_model). Returns (out (..., T, d_model), cache_k, cache_v).

    Contract: as causal_self_attention.
    """
    ### BEGIN SOLUTION
    empty = (*x.shape[:-2], n_kv_heads, 0, x.shape[-1] // n_heads)  # (..., n_kv_heads, 0, d_head)
    cache_k = np.zeros(empty, dtype=x.dtype)
    cache_v = np.zeros(empty, dtype=x.dtype)
    outs = []
    for t in range(x.shape[-2]):
        out_t, cache_k, cache_v = decode_step(x[..., t:t + 1, :], cache_k, cache_v, W_Q, W_K, W_V, W_O,
                                              n_heads, n_kv_heads)  # out_t (..., 1, d_model)
        outs.append(out_t)
    return np.concatenate(outs, axis=-2), cache_k, cache_v  # (..., T, d_model)
    ### END SOLUTION


# %% nbgrader={"grade_id": "decode_loop_values", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("decode_loop_values")
### END HIDDEN TESTS
# Self-check: decoding token by token gives exactly the rows of full causal attention.
check_decode_with_kv_cache(decode_with_kv_cache, multi_head_attention, decode_step=decode_step,
                           kv_cache_append=kv_cache_append, repeat_kv=repeat_kv)

# %% [markdown] nbgrader={"grade_id": "cache_timing_intro"}
# ### Measure it: time per generated token, with and without the cache
#
# To generate token number $T$ without a cache you run the full path over all $T$ tokens and keep the last row:
# four projections of $T$ tokens and a $(T, T)$ score matrix per head, so the cost of *each* token grows with
# $T$ (and a whole sequence costs about $T^2$). With the cache you project one token and compute one row of
# scores against $T$ cached keys. The cell below times both on your machine with your functions (best of 5
# runs each; small sizes so it stays quick).
#
# *Figure (alt text): time per generated token in milliseconds against the position T of that token, both axes
# logarithmic, T from 16 to 256. The line without a cache rises steadily with T; the line with the KV cache stays
# low and nearly flat, so the gap widens as T grows.*

# %%
def best_time(fn, *args, repeat=5):
    """The best of `repeat` wall-clock timings of fn(*args), in seconds (the least disturbed by other work)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return min(times)


rng = np.random.default_rng(0)
d_model, n_heads, n_kv_heads = 64, 4, 2
d_head = d_model // n_heads
W_Q, W_O = rng.normal(size=(2, d_model, d_model)) / math.sqrt(d_model)
W_K, W_V = rng.normal(size=(2, d_model, n_kv_heads * d_head)) / math.sqrt(d_model)
lengths = [16, 32, 64, 128, 256]
x_long = rng.normal(size=(1, lengths[-1], d_model))  # (B=1, T, d_model)
no_cache_ms, cache_ms = [], []
for T in lengths:
    x = x_long[:, :T]  # (1, T, d_model)
    cache_k = split_heads(x[:, :T - 1] @ W_K, n_kv_heads)  # (1, n_kv_heads, T-1, d_head): what T-1 steps cached
    cache_v = split_heads(x[:, :T - 1] @ W_V, n_kv_heads)
    no_cache_ms.append(1e3 * best_time(causal_self_attention, x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads))
    cache_ms.append(1e3 * best_time(decode_step, x[:, T - 1:], cache_k, cache_v, W_Q, W_K, W_V, W_O,
                                    n_heads, n_kv_heads))
    print(f"T={T:>4}: without cache {no_cache_ms[-1]:7.3f} ms/token, with cache {cache_ms[-1]:6.3f} ms/token, "
          f"{no_cache_ms[-1] / cache_ms[-1]:5.1f}x")

colors = plt.cm.viridis([0.15, 0.7])
fig, ax = plt.subplots(figsize=(6, 3.8))
ax.plot(lengths, no_cache_ms, "o-", color=colors[0], label="without cache: full path over T tokens")
ax.plot(lengths, cache_ms, "s-", color=colors[1], label="with KV cache: one decode_step")
ax.set(xscale="log", yscale="log", xlabel="position T of the generated token",
       ylabel="time per generated token (ms)", title="Cost of one generated token as the sequence grows")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade_id": "cache_timing_read"}
# **Read your plot.** At small $T$ both are dominated by Python and numpy call overhead (tens of microseconds),
# so the cache wins little. As $T$ grows, the uncached cost rises roughly in proportion to $T$ (then faster, once
# the $(T, T)$ scores dominate), while a cached step grows only through the one row of $T$ scores. The cache
# trades memory (section 1 computed how much) for time, which is why GQA's smaller cache matters.

# %% [markdown] nbgrader={"grade_id": "tiled_intro"}
# ## 4. Attention without the (T, T) matrix: tiling and the online softmax
#
# Attention as written so far stores the scores and the weights: `n_heads` arrays of $T \times T$ numbers per
# sequence. At $T = 2048$ with 12 heads in float64 that is 384 MB for the weights alone (a MB here is $2^{20}$ bytes,
# as this lesson's cells count it), and it grows with $T^2$.
# Yet each output row only needs a weighted sum. The trick (the idea of FlashAttention, Dao et al., 2022) is to
# walk over the keys in **blocks** of `block_size` and keep, for every query, three running quantities:
#
# - $m$, the largest score seen so far;
# - $\ell$, the sum of $e^{s_j - m}$ over the keys seen so far;
# - $a$, the sum of $e^{s_j - m}\, v_j$ over the keys seen so far (a row of width $d_v$).
#
# When a new block arrives with scores $s$, the maximum may rise to $m' = \max(m, \max_j s_j)$. Everything
# summed so far was measured against the old $m$, so rescale it by $e^{m - m'}$ (a number $\le 1$), then add the
# block: $\ell \leftarrow e^{m - m'}\ell + \sum_j e^{s_j - m'}$ and $a \leftarrow e^{m - m'} a + \sum_j
# e^{s_j - m'} v_j$. After the last block, the output row is $a / \ell$: exactly the softmax-weighted sum, not
# an approximation, because $e^{s_j - m} / \sum_k e^{s_k - m}$ does not depend on $m$. The largest array held at
# once is one block of scores, $(T_q, \text{block\_size})$.
#
# Implement `tiled_attention(Q, K, V, block_size, causal=False)`: Q `(..., T_q, d_k)`, K `(..., T_k, d_k)`,
# V `(..., T_k, d_v)` -> out `(..., T_q, d_v)` (no weights: they are never formed). With `causal=True`, key $j$ is
# blocked for query $i$ when $j > i$. Two cautions:
# - start $m$ at $-\infty$. With this causal rule key 0 is open to every query, so every query sees an open key in
#   the first block and $m'$ is finite from then on: with finite scores its inputs never produce NaN. A row whose
#   first block is *entirely* blocked does: with left padding (the first keys of a sequence are padding) or a sliding
#   window, $m'$ stays $-\infty$ after that block and $e^{-\infty - (-\infty)}$ is NaN, which then spreads through
#   every later block (a cell after the self-checks below shows such an input). Shifting by 0 at such rows
#   (`np.where(np.isfinite(m_new), m_new, 0.0)`) makes the blocked keys contribute $e^{-\infty} = 0$ and keeps your
#   function right when you later add a mask;
# - the result must equal plain attention within $10^{-10}$ in float64, for any block size (including 1 and one
#   larger than $T_k$);
# - the tiles are the exercise: do not call a function that attends over the whole sequence at once
#   (`scaled_dot_product_attention`, `multi_head_attention`, `grouped_query_attention`, `causal_self_attention`,
#   `cross_attention`); its hidden tests refuse those calls.

# %% nbgrader={"grade_id": "tiled_attention", "solution": true}
def tiled_attention(Q, K, V, block_size, causal=False):
    """Attention over key blocks with an online softmax; never holds a (T_q, T_k) array. Returns out.

    Contract: Q, K and V as in scaled_dot_product_attention; block_size is a positive integer; causal is True or
    False.
    """
    ### BEGIN SOLUTION
    T_q, T_k = Q.shape[-2], K.shape[-2]
    scale = 1.0 / math.sqrt(Q.shape[-1])
    lead = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    dtype = np.result_type(Q, K, V)
    m = np.full((*lead, T_q, 1), -np.inf, dtype=dtype)  # running max per query
    total = np.zeros((*lead, T_q, 1), dtype=dtype)  # running sum of exp(s - m)
    acc = np.zeros((*lead, T_q, V.shape[-1]), dtype=dtype)  # running sum of exp(s - m) * v
    queries = np.arange(T_q)[:, None]  # (T_q, 1)
    for start in range(0, T_k, block_size):
        stop = min(start + block_size, T_k)
        s = (Q * scale) @ np.swapaxes(K[..., start:stop, :], -1, -2)  # (..., T_q, block)
        if causal:
            s = np.where(np.arange(start, stop)[None, :] > queries, -np.inf, s)  # future keys blocked
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))  # (..., T_q, 1)
        shift = np.where(np.isfinite(m_new), m_new, 0.0)
        p = np.exp(s - shift)  # (..., T_q, block)
        rescale = np.exp(np.where(np.isfinite(m), m, shift) - shift)  # exp(m_old - m_new), 1 where nothing seen
        total = total * rescale + p.sum(axis=-1, keepdims=True)
        acc = acc * rescale + p @ V[..., start:stop, :]  # (..., T_q, d_v)
        m = m_new
    return acc / total  # (..., T_q, d_v)
    ### END SOLUTION


# %% nbgrader={"grade_id": "tiled_values", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("tiled_values")
### END HIDDEN TESTS
# Self-check: equal to plain attention within 1e-10 (float64) for several block sizes, causal or not.
check_tiled_attention(tiled_attention, scaled_dot_product_attention)

# %% nbgrader={"grade_id": "tiled_memory", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("tiled_memory")
### END HIDDEN TESTS
# Self-check: the peak allocation stays far below one (T, T) float64 matrix.
check_tiled_memory(tiled_attention)

# %% [markdown] nbgrader={"grade_id": "tiled_nan_intro"}
# ### See it: the input that does give NaN
#
# A key whose score is $-\infty$ for every query acts as padding: here keys 0 and 1 hold $-\infty$, and every
# query is positive, so their scores are $-\infty$ (a stand-in for a padding mask, which this function does not
# take). With `block_size = 2` the first block is entirely blocked for every query. The cell shows the NaN that
# block makes when the shift is the raw running max, then runs *your* `tiled_attention` on the same input and
# compares it with plain attention, which gives those keys weight 0.

# %%
s_first = np.array([[-np.inf, -np.inf]])  # (T_q = 1, block): the first block's scores, both keys padding
m_first = s_first.max(axis=-1, keepdims=True)  # (T_q, 1): the running max after it, still -inf
with np.errstate(invalid="ignore"):  # -inf - (-inf) is NaN: let it happen quietly, to show it
    print("shift by the running max:     ", np.exp(s_first - m_first))
print("shift by 0 where it is -inf:  ", np.exp(s_first - np.where(np.isfinite(m_first), m_first, 0.0)))

rng = np.random.default_rng(7)
Q_pad = rng.uniform(0.5, 1.5, size=(1, 4, 3))  # (B, T_q, d_k), every entry positive
K_pad = rng.normal(size=(1, 6, 3))  # (B, T_k, d_k)
K_pad[:, :2] = -np.inf  # keys 0 and 1: score -inf for every query, like padding
V_pad = rng.normal(size=(1, 6, 5))  # (B, T_k, d_v)
plain_pad, _ = scaled_dot_product_attention(Q_pad, K_pad, V_pad)
tiled_pad = tiled_attention(Q_pad, K_pad, V_pad, 2)
print("your tiled_attention, block_size=2:", "NaN in the output" if np.isnan(tiled_pad).any() else
      f"largest difference from plain attention {np.max(np.abs(tiled_pad - plain_pad)):.1e}")


# %% [markdown] nbgrader={"grade_id": "memory_plot_intro"}
# ### Measure it: peak memory as T grows
#
# The cell below *measures* the peak memory of one call with Python's `tracemalloc` (numpy reports every array
# it allocates to it) for plain attention on `n_heads = 4` heads, which forms the `(n_heads, T, T)` scores and
# weights, and for your `tiled_attention` with `block_size = 64`. The dashed line is *computed* from shapes: the
# bytes of one `(n_heads, T, T)` float64 array, $8 \cdot n\_heads \cdot T^2$.
#
# *Figure (alt text): peak memory in MB against sequence length T from 64 to 512, both axes logarithmic. The
# measured peak of plain attention rises about four-fold for each doubling of T, nearly parallel to the dashed line
# of one (n_heads, T, T) array and three to four times above it. The measured peak of tiled attention starts level with
# plain attention at T = 64, rises about two-fold per doubling from T = 128 on, and ends more than five times lower
# at T = 512: the gap widens with every doubling.*

# %%
def peak_mb(fn, *args):
    """Peak megabytes allocated while fn(*args) runs, measured with tracemalloc."""
    tracemalloc.start()
    try:
        fn(*args)
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


rng = np.random.default_rng(1)
n_heads, d_head, block_size = 4, 16, 64
T_values = [64, 128, 256, 512]
naive_mb, tiled_mb, one_matrix_mb = [], [], []
for T in T_values:
    Q, K, V = rng.normal(size=(3, n_heads, T, d_head))  # each (n_heads, T, d_head)
    naive_mb.append(peak_mb(scaled_dot_product_attention, Q, K, V))
    tiled_mb.append(peak_mb(tiled_attention, Q, K, V, block_size))
    one_matrix_mb.append(8 * n_heads * T * T / 2**20)
    print(f"T={T:>5}: plain {naive_mb[-1]:7.1f} MB, tiled {tiled_mb[-1]:6.2f} MB, "
          f"one (n_heads, T, T) array {one_matrix_mb[-1]:6.1f} MB")

colors = plt.cm.viridis([0.15, 0.7])
fig, ax = plt.subplots(figsize=(6, 3.8))
ax.plot(T_values, naive_mb, "o-", color=colors[0], label="plain attention (measured)")
ax.plot(T_values, tiled_mb, "s-", color=colors[1], label=f"tiled, block_size={block_size} (measured)")
ax.plot(T_values, one_matrix_mb, "--", color="0.4", label="one (n_heads, T, T) float64 array (computed)")
ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="peak memory (MB)",
       title="Peak memory of one attention call, n_heads=4")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade_id": "memory_read"}
# **Read your plot.** Plain attention holds several $(n\_heads, T, T)$ arrays at once (scores, their exponentials,
# the weights), so its peak is three to four times the dashed line and quadruples with each doubling of $T$. Tiled
# attention's peak is set by the output and a few $(n\_heads, T, \text{block\_size})$ blocks: once $T$ is longer
# than one block, it only doubles.
# In numpy the tiled loop is *slower* than one big matmul (a Python loop over blocks); on a GPU, FlashAttention
# is faster as well, because keeping each block in fast on-chip memory saves the trips to main memory that the
# big matrices cost. What numpy can show you is the memory, and that the result is exact.

# %% [markdown] nbgrader={"grade_id": "threads_intro"}
# ### Every core: query blocks on threads
#
# Your `tiled_attention` walks over blocks of *keys*, one after another: each block updates the running maximum,
# sum and output of every query, so those steps depend on each other. The *queries* are different: output row $i$
# depends only on query $i$ and on all the keys and values, never on another query. Cut $Q$ into blocks of rows
# and each block's output can be computed on its own, at the same time as the others. That is the outer loop of
# FlashAttention, the one a GPU spreads over its cores.
#
# In Python, threads usually take turns (the global interpreter lock), but numpy lets go of that lock while it
# works on a large array: inside `@`, `np.exp` or a sum, another thread's numpy call runs on another core. The
# cell below cuts the queries into one block per core, runs *your* `tiled_attention` on each block in a thread
# pool, puts the blocks' rows back together and checks that the result is the same. Each thread holds
# only its own `(..., T_q / n_threads, block_size)` scores, so the memory stays linear in $T$.

# %%
from concurrent.futures import ThreadPoolExecutor


def attention_on_threads(Q, K, V, block_size, n_threads):
    """tiled_attention with the queries cut into n_threads blocks of rows, each block on its own thread."""
    edges = np.linspace(0, Q.shape[-2], n_threads + 1).astype(int)  # block sizes differ by 1 at most
    query_blocks = [Q[..., start:stop, :] for start, stop in zip(edges[:-1], edges[1:])]
    with ThreadPoolExecutor(n_threads) as pool:  # pool.map returns the blocks' outputs in order
        outputs = list(pool.map(lambda q: tiled_attention(q, K, V, block_size), query_blocks))
    return np.concatenate(outputs, axis=-2)  # the rows back together: (..., T_q, d_v)


cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
rng = np.random.default_rng(2)
Q, K, V = rng.normal(size=(3, 4, 1024, 64)).astype(np.float32)  # each (n_heads, T, d_head)
timings = {}
for n_threads in sorted({1, 2, cores}):
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        threaded = attention_on_threads(Q, K, V, 128, n_threads)
        best = min(best, time.perf_counter() - start)
    timings[n_threads] = best
    same = np.allclose(threaded, tiled_attention(Q, K, V, 128), atol=1e-5)
    print(f"{n_threads} thread(s): {best * 1e3:6.1f} ms, {timings[1] / best:4.2f}x the one-thread time, "
          f"same output as one call: {same}")
print(f"this kernel may use {cores} core(s)")

# %% [markdown] nbgrader={"grade_id": "threads_read"}
# **Read your numbers.** The cell prints how many times faster the threads are than one. With two free cores, two
# threads take clearly less time than one, though usually not half: the blocks share memory bandwidth, and the thread
# pool costs a little. On the machine used to prepare the course (2 cores, one BLAS thread per Python thread, as the
# setup cell asks) it printed 1.73x to 1.78x when the cores were free. With one core, threads only take turns and
# gain nothing. With cores busy with other work the figure swings from run to run: on that machine, under load, it
# went anywhere from below 1x (slower than one thread) to about 2x. The output is the same either way, because every
# row is computed exactly as before. `make bench` runs the same idea on the full-size layer ($T = 2048$, 12 heads,
# float32) and compares it with PyTorch's `F.scaled_dot_product_attention`, a compiled kernel that also uses every
# core.

# %% [markdown] nbgrader={"grade_id": "speed_intro"}
# ## 5. Measured speed: a loop over heads, batched heads, a fused QKV projection
#
# Three ways to compute the same multi-head attention:
#
# - **loop**: a Python loop over heads; each head has its own `(d_model, d_head)` slices of `W_Q`, `W_K`, `W_V`,
#   so that is `3 · n_heads` small matmuls plus one attention per head;
# - **batched**: three `(d_model, d_model)` projections, then `reshape`/`transpose` into heads and one batched
#   attention for all heads (lesson 02's way);
# - **fused QKV**: the three weights stored side by side as one `(d_model, 3·d_model)` matrix `W_QKV`, so a single
#   matmul reads `x` once and produces Q, K and V together.
#
# **What fusing does and does not save.** The fused matmul does the same arithmetic as the three separate ones.
# It makes one library call instead of three (or `3 · n_heads`), reads `x` from memory once instead of three
# times, and hands the hardware one large matrix product, which it runs closer to its peak rate than several
# small ones. Its output, `(B, T, 3·d_model)`, is exactly as large as the three `(B, T, d_model)` outputs
# together, so it saves **no** memory (certainly not a factor 3); its gain is fewer calls and better use of the
# hardware, and it is largest when the matrices are small and call overhead dominates.
#
# To judge a time you need a yardstick. The arithmetic is counted in floating-point operations (a multiply and
# an add are 2): the four projections cost $8\,B\,T\,d_{model}^2$, the scores and the weighted sum
# $4\,B\,T^2 d_{model}$. Dividing by the time gives GFLOP/s, and dividing that by what one large matrix product
# reaches on *this* machine gives the fraction of peak actually used.

# %%
def mha_loop(x, W_Q, W_K, W_V, W_O, n_heads):
    """One head at a time: 3 * n_heads small projections."""
    d_head = x.shape[-1] // n_heads
    heads = []
    for h in range(n_heads):
        cols = slice(h * d_head, (h + 1) * d_head)
        head, _ = scaled_dot_product_attention(x @ W_Q[:, cols], x @ W_K[:, cols], x @ W_V[:, cols])
        heads.append(head)  # (..., T, d_head)
    return np.concatenate(heads, axis=-1) @ W_O  # (..., T, d_model)


def mha_batched(x, W_Q, W_K, W_V, W_O, n_heads):
    """Three full-width projections, reshape/transpose into heads, one batched attention."""
    return multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads)[0]


def mha_fused(x, W_QKV, W_O, n_heads):
    """One (d_model, 3*d_model) projection: x is read once, Q, K, V come out side by side."""
    *lead, T, d_model = x.shape
    qkv = (x @ W_QKV).reshape(*lead, T, 3, n_heads, d_model // n_heads)  # (..., T, 3, n_heads, d_head)
    qkv = np.moveaxis(qkv, (-3, -2), (0, -3))  # (3, ..., n_heads, T, d_head)
    heads, _ = scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])  # (..., n_heads, T, d_head)
    return concat_heads(heads) @ W_O  # (..., T, d_model)


def matmul_peak_gflops(sizes=(256, 512, 768), repeat=5):
    """Best GFLOP/s of an (n, n) @ (n, n) float64 product over a few sizes: this machine's practical ceiling."""
    rng = np.random.default_rng(0)
    rates = []
    for n in sizes:
        a, b = rng.normal(size=(2, n, n))
        rates.append(2 * n**3 / best_time(np.matmul, a, b, repeat=repeat) / 1e9)
    return max(rates)


# The lesson-sized layer runs in milliseconds. The two real sizes take seconds (and a few hundred MB for the
# (1, 12, 2048, 2048) weights): set RUN_LARGE = True to measure them on your machine too.
RUN_LARGE = False
shapes = [(2, 32, 64, 4)] + ([(8, 128, 512, 8), (1, 2048, 768, 12)] if RUN_LARGE else [])
fractions = {}  # (layer label, variant) -> fraction of the matmul peak; filled below
peak_before = matmul_peak_gflops()
timings = {}  # (layer label, variant) -> best seconds
flop_counts = {}
for B, T, d_model, n_heads in shapes:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(B, T, d_model))
    W_Q, W_K, W_V, W_O = rng.normal(size=(4, d_model, d_model)) / math.sqrt(d_model)
    W_QKV = np.concatenate([W_Q, W_K, W_V], axis=1)  # (d_model, 3*d_model), stored once like a model's weights
    runs = {"loop": lambda: mha_loop(x, W_Q, W_K, W_V, W_O, n_heads),
            "batched": lambda: mha_batched(x, W_Q, W_K, W_V, W_O, n_heads),
            "fused QKV": lambda: mha_fused(x, W_QKV, W_O, n_heads)}
    assert all(np.allclose(f(), runs["batched"]()) for f in runs.values()), "the three variants must agree"
    label = f"B={B} T={T} d_model={d_model} h={n_heads}"
    flop_counts[label] = 8 * B * T * d_model**2 + 4 * B * T * T * d_model
    for _ in range(3 if B > 2 else 7):  # round-robin: a burst of other work slows all variants alike
        for name, fn in runs.items():
            t = best_time(fn, repeat=1)
            timings[(label, name)] = min(t, timings.get((label, name), t))
# the peak is measured before and after the runs; the higher value is the ceiling
peak = max(peak_before, matmul_peak_gflops())
print(f"matmul peak on this machine: {peak:.1f} GFLOP/s (float64, best of n x n products, n up to 768)\n")
for (label, name), seconds in timings.items():
    rate = flop_counts[label] / seconds / 1e9
    fractions[(label, name)] = rate / peak
    print(f"{label:<30} {name:<10} {seconds * 1e3:8.3f} ms {rate:7.2f} GFLOP/s {rate / peak:6.1%} of peak")


# %% [markdown] nbgrader={"grade_id": "speed_plot_intro"}
# *Figure (alt text): grouped bars of the fraction of this machine's matmul peak reached by the loop, batched and
# fused-QKV variants, one group per measured layer shape (the lesson-sized layer; also the two real sizes when
# RUN_LARGE is True). On the lesson-sized layer the loop reaches the smallest fraction and batched and fused are
# close to each other.*

# %%
if not fractions:
    raise NotImplementedError("the speed measurement above is not implemented yet: it needs your section-0 "
                              "functions; fill them in, then run the measurement and this cell again")
labels = list(dict.fromkeys(k[0] for k in fractions))
variants = ["loop", "batched", "fused QKV"]
colors = plt.cm.viridis([0.1, 0.5, 0.85])
fig, ax = plt.subplots(figsize=(7, 3.6))
for i, name in enumerate(variants):
    ax.bar(np.arange(len(labels)) + (i - 1) * 0.27, [fractions[(lab, name)] for lab in labels], width=0.27,
           color=colors[i], label=name)
ax.set_xticks(np.arange(len(labels)), labels)
ax.set(xlabel="layer shape", ylabel="fraction of matmul peak", title="How much of the hardware each variant uses")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade_id": "speed_read"}
# **Read your numbers.** On the lesson-sized layer much of the time is call overhead: each numpy call costs a
# few microseconds whatever its size, so the loop, with `3 · n_heads` projections and `n_heads` attentions, is the
# slowest, while batched and fused, with a handful of calls each, are close. At $T = 2048$ the fraction of peak
# drops: the $(n\_heads, T, T)$ scores are 384 MB in float64, and subtracting the maximum, `exp`, summing and
# dividing are passes over memory, not matmul work, so no variant comes near the peak there. That is the cost tiled attention
# (section 4) and fused GPU kernels attack. Timings on a shared machine are noisy: rerun a cell and compare best
# times, not the first ones.
#
# `bench/attention_speed.py` (one of the scripts `make bench` runs) makes the same comparison at the two real sizes
# too, in float32 and float64, timing the variants round-robin and keeping each one's best run. Run as
# `PYTHONPATH=. python bench/attention_speed.py --threads 1`, which limits BLAS to one thread as this lesson's
# setup cell does, on the machine used to prepare the course (2 CPU cores shared with other work), it printed:
#
# | layer (float64; matmul peak 52 GFLOP/s on one core) | loop | batched | fused QKV | course reference |
# |---|---|---|---|---|
# | lesson size, B=2 T=32 d_model=64 h=4 | 0.15 ms, 34% | 0.11 ms, 46% | 0.11 ms, 44% | 0.13 ms, 38% |
# | B=8 T=128 d_model=512 h=8 | 64 ms, 72% | 58 ms, 79% | 58 ms, 80% | 59 ms, 79% |
# | B=1 T=2048 d_model=768 h=12 | 2412 ms, 18% | 2724 ms, 16% | 1082 ms, 40% | 1331 ms, 32% |
#
# (time of one call, and the fraction of the matmul peak it reached). The speed cell above measures its peak on
# smaller products and printed about the same peak on that machine, so your fractions can be set beside these.
# At B=8, T=128 the loop is still the slowest, and fusing QKV gains nothing measurable over batched: three
# `(1024, 512) @ (512, 512)` products are already large enough to run at the hardware's rate, so saving two calls
# saves microseconds. At T=2048 every variant reaches a smaller fraction of the peak than at B=8, and the loop over
# heads *beats* the batched version: batched, every step of the softmax allocates and streams a 384 MB
# `(12, 2048, 2048)` array, while the loop works on one 32 MB `(T, T)` matrix at a time. That row is the least
# steady: its times moved a lot from one run to the next on that busy machine, and of its ranking only the loop
# beating the batched version held in every run. On other hardware (more cores, a GPU) the ranking changes again,
# which is the point: measure before you believe a claim.
#
# **Check.** Why can the fused QKV projection not cut the memory of the projections by 3?
#
# <details><summary>Check</summary>
#
# Because it computes the same numbers: Q, K and V for every token, `3 · d_model` values per token, exactly what
# the three separate projections produce. Fusing changes how the work is issued (one matmul that reads `x` once,
# fewer calls, one large product the hardware runs efficiently), not how much output there is.
# </details>

# %% [markdown] nbgrader={"grade_id": "cross_intro"}
# ## 6. Cross-attention: queries from one sequence, keys and values from another
#
# Every layer so far was *self*-attention: queries, keys and values all came from the same tokens `x`. In the
# paper's encoder-decoder (section 3.2.3) the decoder also has a **cross-attention** layer: its queries come from
# the decoder's tokens `x_q` (the translation written so far, $T_q$ tokens) and its keys and values from the
# encoder's output `x_kv` (the source sentence, $T_k$ tokens). Nothing else changes: the same four projections,
# heads and scale. Only the shapes do: the scores of a head are $(T_q, T_k)$, one row per decoder token and one
# column per source token, and $T_q \ne T_k$ in general.
#
# **Padding.** Sentences in a batch have different lengths, so the shorter ones are filled up to a common
# $T_k$ with padding tokens that mean nothing. No query may attend to them: a **padding mask** blocks *keys*.
# For a batch it is `(B, 1, T_k)`: True at the padded keys of each sequence, the same for every query (the axis of
# size 1) and every head. This function's mask has **no head axis**: it is broadcastable to `(..., T_q, T_k)`,
# and your function gives it the head axis, so that it lines up with the weights `(..., n_heads, T_q, T_k)`.
#
# | argument | shape |
# |---|---|
# | `x_q` | `(..., T_q, d_model)`: the queries' tokens |
# | `x_kv` | `(..., T_k, d_model)`: the keys' and values' tokens |
# | `W_Q`, `W_K`, `W_V`, `W_O` | `(d_model, d_model)` each |
# | `mask` | boolean, broadcastable to `(..., T_q, T_k)`, True = blocked; a padding mask is `(B, 1, T_k)` |
# | `weights` (returned) | `(..., n_heads, T_q, T_k)` |
# | `out` (returned) | `(..., T_q, d_model)` |
#
# Implement `cross_attention(x_q, x_kv, W_Q, W_K, W_V, W_O, n_heads, mask=None)`. One more rule, from the
# contract: a query whose keys are **all** blocked (a sequence that is all padding, for instance) gets
# **all-zero weights**, and so a zero output row. Your lesson-01 attention already does this: it puts $-\infty$
# into the blocked scores, and your softmax shifts a row of $-\infty$ by 0 instead of its maximum and divides
# only where the row's sum is positive. So each head can run your `scaled_dot_product_attention`; the cell after
# the self-check shows what two common shortcuts give instead.

# %% nbgrader={"grade_id": "cross_attention", "solution": true}
def cross_attention(x_q, x_kv, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """Queries from x_q (..., T_q, d_model), keys and values from x_kv (..., T_k, d_model); mask True = blocked,
    broadcastable to (..., T_q, T_k). Returns (out (..., T_q, d_model), weights (..., n_heads, T_q, T_k)).

    Contract: x_q (..., T_q, d_model), x_kv (..., T_k, d_model) and four (d_model, d_model) weights share one float
    dtype; n_heads divides d_model; mask is None or bool, broadcastable to (..., T_q, T_k).
    """
    ### BEGIN SOLUTION
    Q = split_heads(x_q @ W_Q, n_heads)  # (..., n_heads, T_q, d_head)
    K = split_heads(x_kv @ W_K, n_heads)  # (..., n_heads, T_k, d_head)
    V = split_heads(x_kv @ W_V, n_heads)  # (..., n_heads, T_k, d_head)
    if mask is not None:
        mask = np.expand_dims(mask, -3)  # (..., 1, T_q, T_k): the same mask for every head
    heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # weights (..., n_heads, T_q, T_k)
    return concat_heads(heads) @ W_O, weights  # (..., T_q, d_model), (..., n_heads, T_q, T_k)
    ### END SOLUTION


# %% nbgrader={"grade_id": "cross_attention_values", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("cross_attention_values")
### END HIDDEN TESTS
# Self-check: T_q != T_k, equal to self-attention over both sequences joined (the queries' tokens blocked as
# keys), padded keys ignored, an all-padding sequence gives zero weights, unbatched, float32 kept.
check_cross_attention(cross_attention, multi_head_attention)

# %% [markdown] nbgrader={"grade_id": "blocked_row_intro"}
# ### See it: a query with no key to attend to
#
# The batch below has two source sequences; the second is **empty**, all padding, so every key of its queries is
# blocked. Three ways to block a key give three different rows of weights for such a query:
#
# - $-\infty$ in the blocked scores, then a softmax that always shifts by the row maximum (the one-line version
#   common in code, not yours from lesson 01): the row maximum is $-\infty$, and $e^{-\infty - (-\infty)}$ is
#   NaN. The NaN flows into the output row and, through the next layers, into everything that reads it.
# - $-10^9$ instead of $-\infty$ (common in code): every score of the row is the same $-10^9$, so softmax
#   returns **uniform** weights $1/T_k$: the query reads the average of keys it was told not to see, silently.
# - The contract of this course, which your lesson-01 softmax keeps: **all-zero** weights, so the output row is 0
#   (and the residual connection around the layer passes the token on unchanged).
#
# The cell computes the first two by hand on one head's scores, then runs *your* `cross_attention`.

# %%
rng = np.random.default_rng(8)
B, T_q, T_k, d_model, n_heads = 2, 2, 4, 8, 2
x_q = rng.normal(size=(B, T_q, d_model))  # (B, T_q, d_model)
x_kv = rng.normal(size=(B, T_k, d_model))  # (B, T_k, d_model)
W_Q, W_K, W_V, W_O = rng.normal(size=(4, d_model, d_model)) / math.sqrt(d_model)  # each (d_model, d_model)
lengths = np.array([3, 0])  # sequence 0 has 3 real keys, sequence 1 none
padding = np.arange(T_k)[None, None, :] >= lengths[:, None, None]  # (B, 1, T_k): True at padded keys
scores = rng.normal(size=T_k)  # one query's scores, (T_k,)
with np.errstate(invalid="ignore"):  # -inf - (-inf) is NaN: let it happen quietly, to show it
    s = np.where(padding[1, 0], -np.inf, scores)  # sequence 1: every key blocked
    print("-inf, one-line softmax:", np.exp(s - s.max()) / np.exp(s - s.max()).sum())
s = np.where(padding[1, 0], -1e9, scores)
print("-1e9, one-line softmax:", np.exp(s - s.max()) / np.exp(s - s.max()).sum())
out, weights = cross_attention(x_q, x_kv, W_Q, W_K, W_V, W_O, n_heads, mask=padding)
print("your cross_attention:  ", weights[1, 0, 0], " output row:", out[1, 0, :4], "...")
print("sequence 0, 3 real keys, head 0, query 0:", np.round(weights[0, 0, 0], 3), "(the padded key gets 0)")

# %% [markdown] nbgrader={"grade_id": "summary"}
# ## Summary
#
# - **GQA** shares each key/value head among `n_rep = n_heads // n_kv_heads` consecutive query heads
#   (`np.repeat`, not `np.tile`); MHA (`n_kv_heads = n_heads`) and MQA (`n_kv_heads = 1`) are its two ends. It is
#   MHA with repeated K/V weights, and it shrinks the KV cache by `n_rep`.
# - A **KV cache** laid out `(B, n_kv_heads, T, d_head)` grows along time (axis -2); cached decoding gives exactly
#   the rows of full causal attention, at a per-token cost that barely grows with T.
# - **Masks**: this course and `nn.MultiheadAttention` use True = blocked; `F.scaled_dot_product_attention` and
#   `masked_fill(mask == 0, -inf)` code mark the pairs that may attend. Check the convention every time.
# - **Tiled attention** with a running max and sum is exact and needs memory linear in T, not quadratic.
# - **Speed**: measure, and compare with the machine's matmul peak. A fused QKV matmul reads `x` once and makes
#   fewer, larger calls; it does not save memory.
# - **Cross-attention** takes queries from one sequence and keys and values from another: weights
#   `(..., n_heads, T_q, T_k)`. A padding mask `(B, 1, T_k)` blocks keys, never queries; a query with every key
#   blocked gets all-zero weights, as lesson 01's softmax gives (`-inf` with a softmax that always shifts by the
#   row maximum gives NaN, `-1e9` gives uniform weights).
