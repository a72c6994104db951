# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade_id": "intro"}
# # Lesson 05 · Exercises: practise multi-head attention
#
# **Goals.** By the end of this lesson you can
# 1. work out $d_k$ and the parameter count of a multi-head layer for any $d_{model}$ and head count;
# 2. split a batch of token vectors into heads and merge them back, exactly, and explain why the order
#    reshape-then-transpose matters;
# 3. show that two heads of a randomly initialised layer attend differently, with weights computed from the layer;
# 4. write multi-head attention from raw numpy operations and confirm it returns $d_{model}$ columns for any
#    head count;
# 5. find and fix a silent bug in attention code with the course's tools, and say in one sentence what it does;
# 6. explain in your own words why $W_O$ is needed and why the per-head $d_k$ sets the scale, and tell four
#    common claims about heads from the truth.
#
# **Time needed:** about 95 minutes. **You need:** lessons 01 and 02 (softmax, scaled dot-product attention,
# splitting into heads); numpy's `reshape`, `swapaxes` and `@`.
#
# **How this notebook works.** It uses four kinds of cells.
# - *Code you write*: cells that say `raise NotImplementedError()`. Answers you record as a variable start as
#   `None`; replace the `None`.
# - *Self-checks*: run the cell after each answer; it prints a line starting with ✔ or says what looks wrong.
#   When the notebook is graded, hidden tests run your code on other, random inputs.
# - *Written answers* (cells that say "YOUR ANSWER HERE"): a few sentences each, read and marked by your
#   instructor.
# - *Practice questions* with a **Check** you can open to compare your answer; they are not graded.
#
# Primary source: Vaswani et al., 2017, *Attention Is All You Need*, section 3.2.2.
#
# **Names** (the [glossary](glossary.md) lists every one). `B` batch, `T` tokens, `d_model` width of a token vector,
# `n_heads` heads (the paper's $h$), `d_head = d_model // n_heads` (the paper's $d_k = d_v$), projections
# `W_Q, W_K, W_V, W_O` of shape `(d_model, d_model)` applied as `x @ W`.

# %% nbgrader={"grade_id": "setup", "points": 0}
### BEGIN HIDDEN TESTS
import os as _os, sys as _sys  # noqa: E401  grading: never import from the submission's folder
_sys.path[:] = [p for p in _sys.path if p and _os.path.abspath(p) != _os.getcwd()]
__import__("autograder.kernel.hidden_cell")  # grading: loaded before any cell of the learner's below can break imports
### END HIDDEN TESTS
import math

import matplotlib.pyplot as plt
import numpy as np

from selfcheck_05 import (check_attention_layer, check_choice, check_head_weights, check_head_width,
                          check_masked_attention, check_mha_from_scratch, check_param_count_answers, check_pasted,
                          check_split_merge)

# %% [markdown] nbgrader={"grade_id": "warmup"}
# ## 1. Warm-up
#
# Answer in your head or on paper first, then open **Check**.
#
# **P1.** Write the attention equation of one head, and the equation that combines $h$ heads.
#
# <details><summary>Check</summary>
#
# One head $i$ attends with its own projections of the same input $X$:
# $\mathrm{head}_i = \mathrm{softmax}\!\left(\frac{(XW^Q_i)(XW^K_i)^\top}{\sqrt{d_k}}\right) XW^V_i$, where
# $W^Q_i, W^K_i, W^V_i$ are $(d_{model}, d_k)$. The layer is
# $\mathrm{MultiHead}(X) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\,W^O$ with $W^O$ of shape
# $(h\,d_v, d_{model})$. In code the $h$ matrices $W^Q_i$ sit side by side as the column blocks of one
# `(d_model, d_model)` matrix `W_Q`.
# </details>
#
# **P2.** Two heads run exactly the same equation on exactly the same tokens. How can they end up looking for
# different things?
#
# <details><summary>Check</summary>
#
# The equation is shared, the projections are not. Each head has its own $W^Q_i, W^K_i, W^V_i$, so its queries
# and keys are different linear views of the tokens, and "which key matches this query" is decided in a
# different subspace for each head. Nothing in the architecture assigns roles; whatever each head ends up doing
# comes from training.
# </details>
#
# Several exercises below need a softmax. This lesson's one **paste cell**, marked `PASTE CELL`, is below: paste
# your lesson-01 `softmax` into it (or write it again): stable for large scores, normalising along `axis`, and
# giving a row of $-\infty$ zeros. Its check says "This comes from your lesson 01" when the pasted softmax is
# wrong, and so does any later check that fails because of it.

# %% nbgrader={"grade_id": "softmax", "solution": true}
# PASTE CELL: the body of your lesson-01 softmax goes here (same name, same arguments).
def softmax(x, axis=-1):
    """Softmax of x along `axis`, stable for large scores (your lesson 01 version)."""
    ### BEGIN SOLUTION
    row_max = np.max(x, axis=axis, keepdims=True)  # one maximum per row along `axis`
    row_max = np.where(np.isfinite(row_max), row_max, 0)  # a row of -inf (all blocked) is not shifted
    e = np.exp(x - row_max)
    total = np.sum(e, axis=axis, keepdims=True)
    return e / np.where(total > 0, total, 1)  # an all-zero row stays 0 instead of 0/0
    ### END SOLUTION


# %%
# Lesson 01's self-checks on your pasted softmax (not graded here: lesson 01 grades softmax).
check_pasted(softmax=softmax)

# %% [markdown] nbgrader={"grade_id": "sizes_intro"}
# ## 2. Sizes: $d_k$ and the parameter count
#
# **Exercise 1.** BERT-large has $d_{model} = 1024$ and $h = 16$ heads (lesson 03 worked the base Transformer's
# 512 and 8; these are new numbers).
# 1. What is the width $d_k$ of one head? Record it as `d_head_1024`.
# 2. How many parameters do the four projection matrices $W_Q, W_K, W_V, W_O$ hold together (no biases)?
#    Record it as `param_count_16_heads`.
# 3. Now take a *single* head of full width, $d_k = d_{model} = 1024$. How many parameters do its four matrices
#    hold? Record it as `param_count_1_head`.
#
# Write a number or a Python expression that evaluates to a whole number (an `int`).

# %% nbgrader={"grade_id": "answer_d_head_1024", "solution": true}
d_head_1024 = None
### BEGIN SOLUTION
d_head_1024 = 1024 // 16
### END SOLUTION

# %% nbgrader={"grade_id": "d_head_1024", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("d_head_1024")
### END HIDDEN TESTS
# Self-check: a whole number of columns, and 16 heads of that width fill d_model.
check_head_width(d_head_1024, 1024, 16, name="d_head_1024")

# %% nbgrader={"grade_id": "answer_param_count_1024", "solution": true}
param_count_16_heads = None
param_count_1_head = None
### BEGIN SOLUTION
d_model = 1024
# W_Q, W_K, W_V: 16 heads x (d_model x d_head) each = d_model x d_model; W_O: (16 * d_head) x d_model
param_count_16_heads = 3 * 16 * (d_model * (d_model // 16)) + (16 * (d_model // 16)) * d_model
param_count_1_head = 4 * d_model * d_model
### END SOLUTION

# %% nbgrader={"grade_id": "param_count_1024", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("param_count_1024")
### END HIDDEN TESTS
# Self-check: the form of the two counts, and whether the head count changed them.
check_param_count_answers(param_count_16_heads, param_count_1_head, n_heads=16)

# %% [markdown] nbgrader={"grade_id": "small_intro"}
# **Exercise 2.** Take a small layer, $d_{model} = 32$. Record the width of one head when the layer has 2 heads
# (`d_head_2_heads`) and when it has 8 heads (`d_head_8_heads`). Then look at the two numbers: what happens to
# each head as you add heads, and what stays the same?

# %% nbgrader={"grade_id": "answer_d_head_small", "solution": true}
d_model_small = 32
d_head_2_heads = None
d_head_8_heads = None
### BEGIN SOLUTION
d_head_2_heads = d_model_small // 2
d_head_8_heads = d_model_small // 8
### END SOLUTION

# %% nbgrader={"grade_id": "d_head_small", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("d_head_small")
### END HIDDEN TESTS
# Self-check: whole numbers of columns that fill d_model = 32.
check_head_width(d_head_2_heads, 32, 2, name="d_head_2_heads")
check_head_width(d_head_8_heads, 32, 8, name="d_head_8_heads")

# %% [markdown] nbgrader={"grade_id": "sizes_after"}
# **P3.** Real layers often add a bias vector to each of the four projections. How many parameters do the
# biases add to a layer with $d_{model} = 1600$ and 25 heads (GPT-2 XL), and would the number change with 50
# heads?
#
# <details><summary>Check</summary>
#
# A bias has one entry per output column of its projection, $d_{model}$ entries, so the four biases add
# $4 \cdot 1600 = 6400$. The head count does not appear: with 25 or 50 heads the query bias is the same 1600
# numbers, only cut into 25 or 50 equal slices, one per head.
# </details>
#
# ## 3. Split into heads and merge back
#
# **Exercise 3, part 1.** Implement the two reshapes of the multi-head layer.
# - `split_into_heads(x, n_heads)`: `(..., T, d_model) -> (..., n_heads, T, d_head)`, where head `i` holds
#   columns `i*d_head:(i+1)*d_head` of every token.
# - `merge_heads(x)`: `(..., n_heads, T, d_head) -> (..., T, n_heads*d_head)`, the exact inverse.
#
# The `...` are any leading batch axes, so use negative axes (`np.swapaxes(x, -3, -2)`). Put a shape comment on
# each reshape and swap. The round trip `merge_heads(split_into_heads(x, n_heads))` must give back `x` bit for bit:
# the two functions only move numbers.

# %% nbgrader={"grade_id": "split_into_heads", "solution": true}
def split_into_heads(x, n_heads):
    """(..., T, d_model) -> (..., n_heads, T, d_head); head i holds columns i*d_head:(i+1)*d_head.

    Contract: x (..., T, d_model) is a float array; n_heads is a positive integer that divides d_model.
    """
    ### BEGIN SOLUTION
    *lead, T, d_model = x.shape
    x = x.reshape(*lead, T, n_heads, d_model // n_heads)  # (..., T, n_heads, d_head)
    return np.swapaxes(x, -3, -2)  # (..., n_heads, T, d_head)
    ### END SOLUTION


# %% nbgrader={"grade_id": "merge_heads", "solution": true}
def merge_heads(x):
    """(..., n_heads, T, d_head) -> (..., T, n_heads * d_head); undoes split_into_heads.

    Contract: x (..., n_heads, T, d_head) is a float array.
    """
    ### BEGIN SOLUTION
    *lead, n_heads, T, d_head = x.shape
    x = np.swapaxes(x, -3, -2)  # (..., T, n_heads, d_head)
    return x.reshape(*lead, T, n_heads * d_head)  # (..., T, d_model)
    ### END SOLUTION


# %% nbgrader={"grade_id": "roundtrip", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("roundtrip")
### END HIDDEN TESTS
# Self-check: which columns land in which head (an arange input), batches, and an exact round trip.
check_split_merge(split_into_heads, merge_heads)

# %% [markdown] nbgrader={"grade_id": "roundtrip_demo_intro"}
# **Exercise 3, part 2: prove it on a random input.** The cell below draws a random batch, sends it through your
# two functions and compares the result with the input using `np.array_equal` (exact equality, no tolerance).
#
# Then try this: replace both functions by a *bare* reshape, `x.reshape(*lead, n_heads, T, d_head)` and
# `x.reshape(*lead, T, d_model)`. The round trip is still exact! An exact round trip proves the two functions are
# inverses; it does not prove the heads hold the right numbers. The self-check above tests that separately with
# an input whose entries say where they came from. Put your own code back afterwards.

# %%
rng = np.random.default_rng(2017)
x = rng.normal(size=(2, 6, 16))  # (B, T, d_model)
heads = split_into_heads(x, 4)  # (B, n_heads, T, d_head)
back = merge_heads(heads)  # (B, T, d_model)
print("heads:", heads.shape, " back:", back.shape, " round trip exact:", np.array_equal(back, x))

# %% [markdown] nbgrader={"grade_id": "explain_reshape_q"}
# **Written answer 1 (3 points).** Explain why splitting into heads must *reshape to* `(T, n_heads, d_head)`
# *and then* swap the first two axes, and what goes wrong if you reshape a `(T, d_model)` array straight to
# `(n_heads, T, d_head)`. Say which numbers end up in head 0 in that case. (Hint: numpy's `reshape` reads and
# writes entries in row-major order; try it on `np.arange(24).reshape(3, 8)` with 2 heads.)
#
# *How it is marked (3 points):* 1 point for what a reshape does, and does not do, to the order of the entries;
# 1 point for what the swap of the first two axes achieves; 1 point for which numbers end up in head 0 after a
# bare reshape to `(n_heads, T, d_head)`, and whether anything reports the mistake.

# %% [markdown] nbgrader={"grade_id": "explain_reshape", "solution": true, "points": 3}
# ### BEGIN SOLUTION
# **Model answer.** A reshape never moves a number: it reinterprets the same row-major sequence of entries under
# a new shape. In a `(T, d_model)` array each token's `d_model` columns are contiguous, so reshaping to
# `(T, n_heads, d_head)` only cuts every token's row into `n_heads` consecutive blocks of `d_head` columns; block
# `i` of token `t` is exactly the part of that token that head `i` should see. The heads are now the middle axis,
# so a transpose (a swap of the `T` and `n_heads` axes, which does move data into the new order) brings them in
# front: `(n_heads, T, d_head)`, head `i` row `t` = token `t`, columns `i*d_head:(i+1)*d_head`.
#
# Reshaping straight to `(n_heads, T, d_head)` cuts the flat sequence into `n_heads` consecutive chunks of
# `T*d_head` entries. Head 0 then gets the first `T*d_head` numbers of the array: all `d_model` columns of the
# first tokens (with 2 heads, of the first `T/2` tokens), and its "rows" are pieces of one token's vector, not
# different tokens. Shapes match, nothing fails, and merging with the same kind of bare reshape even gives `x`
# back exactly, but every head attends over the wrong vectors: positions are mixed up inside a head.
#
# **Rubric for the grader (3 points).**
# - 1 point: a reshape keeps the row-major order of the entries; reshape to `(T, n_heads, d_head)` groups each
#   token's columns into contiguous blocks, one per head, without mixing tokens.
# - 1 point: the transpose (swap of the `T` and `n_heads` axes) is what moves the head axis to the front, giving
#   `(n_heads, T, d_head)` with head `i` holding columns `i*d_head:(i+1)*d_head` of every token.
# - 1 point: a bare reshape to `(n_heads, T, d_head)` puts consecutive entries, i.e. whole tokens' vectors
#   (the first tokens, all columns), into head 0, so a head's rows are not tokens; it fails silently (shapes
#   match, and a bare-reshape merge even undoes it).
# - Give no point for "the shapes would not match" or "it raises an error": it does not.
# ### END SOLUTION

# %% [markdown] nbgrader={"grade_id": "heads_intro"}
# ## 4. Two heads of a random layer attend differently
#
# **Exercise 4.** Implement `head_weights(x, W_Q, W_K, n_heads)`: the attention weights of every head of a
# layer, `(..., T, d_model) -> (..., n_heads, T, T)`. Project, split Q and K into heads, and apply softmax to
# each head's scores $Q_h K_h^\top / \sqrt{d_{head}}$ over the keys. Use `math.sqrt` for the scale.
#
# The point of the exercise is the claim "the heads are not redundant copies", so the evidence must come from
# the layer itself: two arrays of random numbers always differ and prove nothing. The hidden test gives your
# function its own layer and input and checks your weights against the true attention of each head, then checks
# that heads 0 and 1 differ.

# %% nbgrader={"grade_id": "head_weights", "solution": true}
def head_weights(x, W_Q, W_K, n_heads):
    """Attention weights of every head: x (..., T, d_model) -> (..., n_heads, T, T).

    Contract: x (..., T, d_model), W_Q and W_K (d_model, d_model) share one float dtype; n_heads divides d_model.
    """
    ### BEGIN SOLUTION
    d_head = x.shape[-1] // n_heads
    Q = split_into_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    K = split_into_heads(x @ W_K, n_heads)  # (..., n_heads, T, d_head)
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)  # (..., n_heads, T, T)
    return softmax(scores, axis=-1)
    ### END SOLUTION


# %% nbgrader={"grade_id": "heads_differ", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("heads_differ")
### END HIDDEN TESTS
# Self-check: shapes, rows sum to 1, same layer same weights, W_Q = 0 gives uniform weights, per-head probes.
check_head_weights(head_weights, split_into_heads)

# %% [markdown] nbgrader={"grade_id": "heads_plot_intro"}
# ### See it
#
# A sentence in which one word has two meanings: "The bank approved the loan after the river bank flooded".
# No model has been trained here: each token gets a random vector and the layer has random weights (the usual
# small initial scale, standard deviation $1/\sqrt{d_{model}}$), so the patterns below mean nothing about
# language. What they do show is the mechanism: the same input, the same equation, different column slices of
# `W_Q` and `W_K`, and already two different ways of distributing attention. Training shapes these differences
# into useful ones.
#
# *Figure (alt text): three heatmaps side by side over the 10 tokens of the sentence, queries on the vertical
# axis and keys on the horizontal axis, in the viridis colour map. The left two are the attention weights of
# head 0 and head 1, each row summing to 1, with visibly different bright cells; the right one, in cividis, is
# the absolute difference between the two heads, non-zero almost everywhere.*

# %%
tokens = ["The", "bank", "approved", "the", "loan", "after", "the", "river", "bank", "flooded"]
T, d_model, n_heads = len(tokens), 16, 4
rng = np.random.default_rng(7)
x = rng.normal(size=(T, d_model))  # (T, d_model): one random vector per token
W_Q = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
W_K = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
w = head_weights(x, W_Q, W_K, n_heads)  # (n_heads, T, T)
gap = np.abs(w[0] - w[1])  # (T, T)

fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
for ax, data, title, cmap in ((axes[0], w[0], "head 0 weights", "viridis"),
                              (axes[1], w[1], "head 1 weights", "viridis"),
                              (axes[2], gap, "|head 0 - head 1|", "cividis")):
    im = ax.imshow(data, cmap=cmap, vmin=0)
    ax.set_xticks(range(T), tokens, rotation=60, ha="right")
    ax.set_yticks(range(T), tokens)
    ax.set(xlabel="key", ylabel="query", title=title)
    fig.colorbar(im, ax=ax, fraction=0.046)
fig.tight_layout()
plt.show()
print(f"largest difference between head 0 and head 1: {gap.max():.3f}")

# %% [markdown] nbgrader={"grade_id": "mha_intro"}
# ## 5. Multi-head attention from raw operations
#
# **Exercise 5 (a real-world rep).** Implement `mha_from_scratch(x, W_Q, W_K, W_V, W_O, n_heads)` returning
# `(out, weights)` with only numpy operations and your own helpers from this notebook:
# 1. project: `x @ W_Q`, `x @ W_K`, `x @ W_V`, each `(..., T, d_model)`;
# 2. split each into heads, `(..., n_heads, T, d_head)`;
# 3. in every head at once: scores $Q_h K_h^\top / \sqrt{d_{head}}$, softmax over the keys, then weights times
#    values, `(..., n_heads, T, d_head)`;
# 4. merge the heads, `(..., T, d_model)`, and apply `W_O`.
#
# `out` is `(..., T, d_model)` and `weights` `(..., n_heads, T, T)`. No mask is needed here. The self-check runs
# your function with 1, 2, 3, 4, 6 and 12 heads and checks that the output always has `d_model` columns. Build the
# layer here: do not hand it to `attention_layer` below (the layer with a bug to find), which its hidden test
# refuses to call; your `split_into_heads`, `merge_heads`, `head_weights`, `softmax` and `masked_attention` are
# yours to use.

# %% nbgrader={"grade_id": "mha_from_scratch", "solution": true}
def mha_from_scratch(x, W_Q, W_K, W_V, W_O, n_heads):
    """Multi-head self-attention. x (..., T, d_model) -> (out (..., T, d_model), weights (..., n_heads, T, T)).

    Contract: x (..., T, d_model) and W_Q, W_K, W_V, W_O (d_model, d_model) share one float dtype; n_heads divides
    d_model.
    """
    ### BEGIN SOLUTION
    d_head = x.shape[-1] // n_heads
    Q = split_into_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    K = split_into_heads(x @ W_K, n_heads)  # (..., n_heads, T, d_head)
    V = split_into_heads(x @ W_V, n_heads)  # (..., n_heads, T, d_head)
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)  # (..., n_heads, T, T)
    weights = softmax(scores, axis=-1)  # (..., n_heads, T, T)
    heads = weights @ V  # (..., n_heads, T, d_head)
    return merge_heads(heads) @ W_O, weights  # (..., T, d_model), (..., n_heads, T, T)
    ### END SOLUTION


# %% nbgrader={"grade_id": "mha_from_scratch_test", "points": 3}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("mha_from_scratch_test")
### END HIDDEN TESTS
# Self-check: output (T, d_model) for every head count, W_O applied, a known output, the per-head scale.
check_mha_from_scratch(mha_from_scratch, split_into_heads, merge_heads)

# %% [markdown] nbgrader={"grade_id": "rep_sweep_intro"}
# ### Worked rep: the output width does not depend on the head count
#
# The cell below runs your layer on one input with every head count that divides $d_{model} = 24$ and prints
# the shapes. Read the columns: `d_head` shrinks as heads are added, the output stays $(T, d_{model})$, and the
# parameter count never moves. What changes is how the same $d_{model}$ columns are shared out:
# many narrow subspaces, each with its own attention pattern, or a few wide ones.

# %%
T, d_model = 7, 24
rng = np.random.default_rng(1)
x = rng.normal(size=(T, d_model))  # (T, d_model)
W_Q, W_K, W_V, W_O = rng.normal(size=(4, d_model, d_model)) / math.sqrt(d_model)  # each (d_model, d_model)
print(f"{'n_heads':>7} {'d_head':>6} {'out':>9} {'weights':>13} {'parameters':>10}")
for n_heads in [h for h in range(1, d_model + 1) if d_model % h == 0]:
    out, weights = mha_from_scratch(x, W_Q, W_K, W_V, W_O, n_heads)
    n_params = sum(W.size for W in (W_Q, W_K, W_V, W_O))
    print(f"{n_heads:>7} {d_model // n_heads:>6} {str(out.shape):>9} {str(weights.shape):>13} {n_params:>10}")

# %% [markdown] nbgrader={"grade_id": "find_bug_intro"}
# ## 6. Find the bug
#
# Real bugs in attention code rarely crash: the shapes fit, the numbers look like numbers, and the model just
# trains worse. Each cell below holds a short implementation that *runs* and carries exactly **one** mistake, of
# the kind learners make (the course has seen both of them many times). For each one:
#
# 1. run the cell and its self-check, and read what the check reports: it describes the *symptom*, not the cause;
# 2. find the line responsible with the course's tools: print shapes, sum the weights over a row, feed a probe
#    whose right answer you know (an `np.arange` input shows where each column goes; a weight matrix that is zero
#    outside one head's columns shows which head reads them), compare with your own functions from above;
# 3. fix it **in place** (change as little as you can) and run the self-check again; the hidden tests grade the
#    fixed function on other, random inputs;
# 4. explain the symptom in **one sentence** in the written answer after it: what a user of the function would
#    see go wrong, and why.
#
# **Bug 1.** `masked_attention(Q, K, V, mask)` is scaled dot-product attention with a mask (True = blocked),
# as in lesson 01: Q `(..., T_q, d_k)`, K `(..., T_k, d_k)`, V `(..., T_k, d_v)`, a mask broadcastable to
# `(..., T_q, T_k)`, returning `(out, weights)`. It calls your pasted `softmax`. Lesson 01's contract holds here too,
# to the last case: a query whose keys are *all* blocked gets all-zero weights (and so a zero output row).

# %% nbgrader={"grade_id": "masked_attention", "solution": true}
def masked_attention(Q, K, V, mask):
    """softmax(Q K^T / sqrt(d_k)) V, blocked pairs (mask True) weighted 0. Returns (out, weights).

    Contract: Q (..., T_q, d_k), K (..., T_k, d_k) and V (..., T_k, d_v) share one float dtype and leading axes that
    broadcast; mask is bool, broadcastable to (..., T_q, T_k).
    """
    ### BEGIN SOLUTION
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])  # (..., T_q, T_k)
    scores = np.where(mask, -np.inf, scores)  # blocked pairs: exp(-inf) = 0 inside the softmax
    weights = softmax(scores, axis=-1)  # (..., T_q, T_k); a row of -inf (every key blocked) gives zeros
    return weights @ V, weights  # (..., T_q, d_v), (..., T_q, T_k)
    ### END SOLUTION


# %% nbgrader={"grade_id": "masked_attention_test", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("masked_attention_test")
### END HIDDEN TESTS
# Self-check: blocked weights 0, the sum of every row of weights, a query with every key blocked, one mask for a
# whole batch, out = weights @ V, float32 kept.
check_masked_attention(masked_attention)

# %% [markdown] nbgrader={"grade_id": "symptom_masked_attention_q"}
# **Written answer (1 point).** In one sentence: what goes wrong in the output of the `masked_attention` you
# received, for which rows, and why?
#
# *How it is marked (1 point):* the symptom (which rows, what happens to their weights and output) and its cause,
# in one sentence.

# %% [markdown] nbgrader={"grade_id": "symptom_masked_attention", "solution": true, "points": 1}
# ### BEGIN SOLUTION
# **Model answer.** In every row that has blocked keys the weights sum to less than 1 (the open keys keep the
# shares the softmax gave them before the blocked ones were zeroed), so that query's output is a shrunken
# weighted sum of the values, the more so the more of its keys are blocked; the mask must act on the scores,
# before the softmax.
#
# **Rubric for the grader (1 point).**
# - 1 point: names the symptom (rows with blocked keys sum to less than 1 / their outputs shrink toward 0) *and*
#   its cause (blocked weights zeroed after the softmax, so the remaining weights are not renormalised).
# - No point for "the mask is applied at the wrong place" without the symptom, or for "the weights are wrong".
# ### END SOLUTION

# %% [markdown] nbgrader={"grade_id": "find_bug_layer_intro"}
# **Bug 2.** `attention_layer(x, W_Q, W_K, W_V, W_O, n_heads)` is the whole multi-head layer in one function,
# the same contract as your `mha_from_scratch`: x `(..., T, d_model)` -> `(out (..., T, d_model), weights
# (..., n_heads, T, T))`. Its rows of weights sum to 1 and its shapes are right. Find the one line that is wrong,
# and fix it there: the fix may call your own functions of this notebook (your `split_into_heads`, say), but not
# hand the whole layer to `mha_from_scratch`, which its hidden test refuses to call.

# %% nbgrader={"grade_id": "attention_layer", "solution": true}
def attention_layer(x, W_Q, W_K, W_V, W_O, n_heads):
    """Multi-head self-attention: x (..., T, d_model) -> (out (..., T, d_model), weights (..., n_heads, T, T)).

    Contract: x (..., T, d_model) and W_Q, W_K, W_V, W_O (d_model, d_model) share one float dtype; n_heads divides
    d_model.
    """
    ### BEGIN SOLUTION
    *lead, T, d_model = x.shape
    d_head = d_model // n_heads

    def split(y):  # (..., T, d_model) -> (..., n_heads, T, d_head)
        return np.swapaxes(y.reshape(*lead, T, n_heads, d_head), -3, -2)

    Q, K, V = split(x @ W_Q), split(x @ W_K), split(x @ W_V)  # each (..., n_heads, T, d_head)
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)  # (..., n_heads, T, T)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))  # a stable softmax over the keys
    weights = e / e.sum(axis=-1, keepdims=True)  # (..., n_heads, T, T)
    heads = weights @ V  # (..., n_heads, T, d_head)
    merged = np.swapaxes(heads, -3, -2).reshape(*lead, T, d_model)  # (..., T, n_heads * d_head)
    return merged @ W_O, weights
    ### END SOLUTION


# %% nbgrader={"grade_id": "attention_layer_test", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("attention_layer_test")
### END HIDDEN TESTS
# Self-check: shapes, a probe whose Q and K live in head 0's columns only, uniform weights, float32.
check_attention_layer(attention_layer)

# %% [markdown] nbgrader={"grade_id": "symptom_attention_layer_q"}
# **Written answer (1 point).** In one sentence: what is wrong with the heads of the `attention_layer` you
# received, and why does nothing in its shapes or its weights' row sums reveal it?
#
# *How it is marked (1 point):* which columns each head read, and why no shape or row sum shows it, in one
# sentence.

# %% [markdown] nbgrader={"grade_id": "symptom_attention_layer", "solution": true, "points": 1}
# ### BEGIN SOLUTION
# **Model answer.** Its split reshaped to `(T, d_head, n_heads)`, so each head read every `n_heads`-th column
# (head 0 columns 0, n_heads, 2 n_heads, ...) instead of its own contiguous block, while the merge wrote each head
# back into the contiguous block: a reshape only reinterprets the same entries, so every shape fits and each head
# still computes a valid softmax over its (wrong) subspace, and only a probe of which columns a head reads, or a
# comparison with a correct layer, shows it.
#
# **Rubric for the grader (1 point).**
# - 1 point: the heads read strided columns (every `n_heads`-th) instead of contiguous blocks of `d_head`
#   columns, *and* why it is silent (same shapes, rows still sum to 1; the reshape moves no number, it only
#   regroups them).
# - No point for "the reshape is wrong" without saying which columns the heads get.
# ### END SOLUTION

# %% [markdown] nbgrader={"grade_id": "explain_w_o_q"}
# ## 7. Explain it
#
# **Written answer 2 (2 points).** Why does the layer apply $W_O$ after concatenating the heads? What could the
# next layer not get if the concatenation were passed on as it is? Say what kind of map $W_O$ is.
#
# *How it is marked (2 points):* 1 point for what each block of output columns depends on without $W_O$; 1 point
# for what kind of map $W_O$ is and how it combines the heads into each output column (a wrong kind of map costs a
# point).

# %% [markdown] nbgrader={"grade_id": "explain_w_o", "solution": true, "points": 2}
# ### BEGIN SOLUTION
# **Model answer.** Concatenation only places the heads' outputs side by side: columns `0:d_head` of the result
# come from head 0 alone, the next `d_head` columns from head 1 alone, and so on. No output column combines what
# two heads found. $W_O$ is a learned linear map from all $n_{heads} d_{head}$ concatenated columns to each of
# the $d_{model}$ output columns, so every output column is a weighted sum over all heads:
# $\mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h) W_O = \sum_i \mathrm{head}_i W_O^{(i)}$, with
# $W_O^{(i)}$ the rows `i*d_head:(i+1)*d_head` of $W_O$. It also chooses which combination of head outputs is
# written back into the $d_{model}$-wide residual stream. It is linear, not an average and not a nonlinear
# combination; nonlinear use of the mixed signal comes from the layers after it (the feed-forward network).
#
# **Rubric for the grader (2 points).**
# - 1 point: without $W_O$ each block of output columns depends on one head only; concatenation does not let
#   heads combine or interact.
# - 1 point: $W_O$ is a learned *linear* map (a matrix) that mixes all heads into every output column (e.g. the
#   sum over heads of $\mathrm{head}_i W_O^{(i)}$) and maps back to $d_{model}$ for the next layer.
# - Take a point off an otherwise full answer that calls $W_O$ a nonlinear combination or an average of heads.
# ### END SOLUTION

# %% [markdown] nbgrader={"grade_id": "explain_scale_q"}
# **Written answer 3 (2 points).** Inside one head of a layer with $d_{model} = 1600$ and 25 heads (GPT-2 XL),
# the scores are divided by $\sqrt{64}$, not by $\sqrt{1600}$. Why is the per-head $d_k$ the right number, and
# what would happen to that head's attention if you divided by $\sqrt{d_{model}}$ instead?
#
# *How it is marked (2 points):* 1 point for why the scale is the square root of the number of terms in the dot
# product, and what that number is inside one head; 1 point for what $\sqrt{d_{model}}$ would do to the scores and
# to the softmax, and how that depends on the number of heads.

# %% [markdown] nbgrader={"grade_id": "explain_scale", "solution": true, "points": 2}
# ### BEGIN SOLUTION
# **Model answer.** The scale exists to undo the growth of a dot product with its length: if the entries of $q$
# and $k$ have mean 0 and variance 1, $q \cdot k$ is a sum of $d$ products and has variance $d$, standard
# deviation $\sqrt{d}$ (the paper's footnote 4). Inside one head the dot product runs over that head's own
# $d_k = d_{model}/h = 64$ columns, not over all 1600, so its standard deviation is $\sqrt{64} = 8$ and dividing
# by 8 brings the scores back to unit spread. Dividing by $\sqrt{1600} = 40$ would shrink them by a further
# factor $\sqrt{h} = \sqrt{25} = 5$: the softmax would be flatter than intended, each head's attention
# closer to uniform, and the scale would change with the head count although one head's computation does not.
#
# **Rubric for the grader (2 points).**
# - 1 point: the scale is the standard deviation $\sqrt{d}$ of a dot product summed over $d$ terms, and inside a
#   head $d$ is the per-head $d_k = d_{model}/h$.
# - 1 point: with $\sqrt{d_{model}}$ the scores are too small by a factor $\sqrt{h}$, so the softmax is too flat
#   (weights too uniform); the effect grows with the number of heads.
# ### END SOLUTION

# %% [markdown] nbgrader={"grade_id": "mc_intro"}
# ## 8. Multiple choice
#
# **Question (1 point).** Compared with one attention at full width $d_{model}$, what does multi-head attention
# do? Record the letter of the one true statement as a string in `mc_answer`.
#
# - **a)** It computes one attention at full width and then cuts its output into `n_heads` slices of `d_head`
#   columns.
# - **b)** All heads share the same $W_Q$, $W_K$ and $W_V$; they differ only in which positions each head is
#   allowed to look at.
# - **c)** Each head projects the tokens with its own learned slices of $W_Q$, $W_K$, $W_V$ into a
#   $d_{head}$-wide subspace and attends there on its own; the heads are then concatenated and $W_O$ maps them
#   back to $d_{model}$.
# - **d)** $W_O$ can be left out without changing what the layer can represent, because concatenating the heads
#   already combines them.
#
# The self-check below only tells you whether your answer has the right form; the grader marks it.

# %% nbgrader={"grade_id": "answer_mc", "solution": true}
mc_answer = None  # one letter, as a string
### BEGIN SOLUTION
mc_answer = "c"
### END SOLUTION

# %% nbgrader={"grade_id": "multiple_choice", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("multiple_choice")
### END HIDDEN TESTS
# Self-check: one letter from a to d.
check_choice(mc_answer)

# %% [markdown] nbgrader={"grade_id": "true_false"}
# ## 9. True or false?
#
# Four claims about heads that you will meet in blog posts and talks. Decide, then open **Check**.
#
# **T1.** "More heads always make the model better."
#
# <details><summary>Check</summary>
#
# **False.** The paper tried it at a fixed parameter budget (Table 3, rows (A), development set, the parameter
# count does not move with $h$): 1 head scores 24.9 BLEU, 4 heads 25.5, 8 heads 25.8, 16 heads 25.8 and 32
# heads 25.4. One head is worst, but past about 8 heads the score stops rising and then falls, because each head
# gets narrower ($d_k = 16$ at 32 heads). Later studies of trained models found that a large share of heads can
# be removed at inference time with little loss. The figure below plots the paper's numbers.
# </details>
#
# **T2.** "Each head is built to do one interpretable job, such as tracking coreference."
#
# <details><summary>Check</summary>
#
# **False.** Nothing in the layer gives a head a role: every head is the same equation with its own learned
# projections, and what it does is whatever training made useful. Some trained heads show a clear pattern
# (attend to the previous token, to the first token), but many mix several behaviours, and a job such as
# coreference is often spread over several heads. Whether a head "does X" is an empirical question that needs
# probing or ablation, not a label that comes with the architecture.
# </details>
#
# **T3.** "Multi-head attention is an ensemble: the output is the average of the heads' outputs."
#
# <details><summary>Check</summary>
#
# **False.** The heads are concatenated and multiplied by $W_O$, a learned matrix. That is a *linear* map that
# mixes the heads, $\sum_i \mathrm{head}_i W_O^{(i)}$, with a different learned block $W_O^{(i)}$ for each head;
# averaging the heads and then projecting is only the special case in which every block is the same matrix
# divided by $n_{heads}$. And a statement you may
# also read, "W_O combines the heads non-linearly", is false as well: $W_O$ itself is linear, and any nonlinear
# use of the mixed signal comes from the layers after it (the feed-forward network), with the residual stream
# carrying the result there.
# </details>
#
# **T4.** "A head's attention weights explain why the model made its prediction."
#
# <details><summary>Check</summary>
#
# **False.** The weights say how much of each token's *value vector* flows into a position, not what that
# information does. $W_V$ can map a heavily attended token to almost nothing, a weakly attended token can carry
# a decisive feature, and $W_O$ and later layers decide what is used. Treat attention maps as hints about where
# information moves, to be tested, not as explanations.
# </details>
#
# *Figure (alt text): a bar chart of BLEU on the development set against the number of heads, 1, 4, 8, 16 and
# 32, from Vaswani et al. 2017, Table 3 rows (A), with the per-head width d_k written on each bar; the y axis
# starts at 24.5 to make the differences visible. The bars rise from 24.9 at one head to 25.8 at 8 and 16
# heads, then drop to 25.4 at 32 heads.*

# %%
n_heads_tried = np.array([1, 4, 8, 16, 32])
bleu = np.array([24.9, 25.5, 25.8, 25.8, 25.4])  # Vaswani et al. 2017, Table 3 (A), newstest2013
fig, ax = plt.subplots(figsize=(6, 3.6))
bars = ax.bar([str(h) for h in n_heads_tried], bleu, color=plt.cm.viridis(np.linspace(0.15, 0.85, 5)))
for bar, h in zip(bars, n_heads_tried):
    ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() + 0.03, f"d_k={512 // h}", ha="center",
            fontsize=8)
ax.set(ylim=(24.5, 26.1), xlabel="number of heads (d_model = 512, same parameter count)",
       ylabel="BLEU (development set)", title="More heads help, up to a point")
fig.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade_id": "reps"}
# ## 10. Real-world reps, worked
#
# Exercises 2 and 5 were two of the reps. Here are the worked versions of two more.
#
# **Rep: the head sizes of real models.** The cell below takes published configurations that lesson 03's table
# did not show, computes $d_{head}$ and the attention parameters of one layer ($4 d_{model}^2$, no biases) and of
# all layers. The head width is a design choice of its own: 64 (BERT-large, GPT-2 XL, like the original
# Transformer), 128 (LLaMA-65B) and 256 (GPT-J 6B, with only 16 heads at $d_{model} = 4096$). Models with
# grouped-query attention are left out on purpose: their $W_K$ and $W_V$ are smaller than
# $d_{model} \times d_{model}$ (lesson 03).

# %%
models = [  # name, d_model, n_heads, layers
    ("BERT-large", 1024, 16, 24),
    ("GPT-2 XL", 1600, 25, 48),
    ("GPT-J 6B", 4096, 16, 28),
    ("LLaMA-65B", 8192, 64, 80),
]
print(f"{'model':<17}{'d_model':>8}{'n_heads':>8}{'d_head':>7}{'attn params/layer':>19}{'all layers':>16}")
for name, d_model, n_heads, layers in models:
    per_layer = 4 * d_model * d_model  # W_Q, W_K, W_V, W_O
    print(f"{name:<17}{d_model:>8}{n_heads:>8}{d_model // n_heads:>7}{per_layer:>19,}{per_layer * layers:>16,}")

# %% [markdown] nbgrader={"grade_id": "rep_paper"}
# **Rep: read the paper's section 3.2.2 against your code.** Every symbol in its equations names something you
# built today:
#
# | paper | in your code | shape |
# |---|---|---|
# | $h$ | `n_heads` | |
# | $d_k = d_v = d_{model}/h$ | `d_head` | |
# | $W^Q_i$, $W^K_i$, $W^V_i$ | columns `i*d_head:(i+1)*d_head` of `W_Q`, `W_K`, `W_V` | `(d_model, d_head)` |
# | $QW^Q_i$ | head `i` of `split_into_heads(x @ W_Q, n_heads)` | `(T, d_head)` |
# | $\mathrm{head}_i$ | `heads[i]`, index `i` on the heads axis of `heads = weights @ V` in `mha_from_scratch` | `(T, d_head)` |
# | $\mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)$ | `merge_heads(heads)` | `(T, h d_v)` |
# | $W^O$ | `W_O` | `(h d_v, d_model)` |
# | $\sqrt{d_k}$ | `math.sqrt(d_head)` | |
#
# In the paper $Q$, $K$, $V$ are the layer's inputs; in self-attention all three are the same token matrix
# `x`, which is why `mha_from_scratch` takes only `x`.
#
# ## Summary
#
# - $d_{head} = d_{model} / n_{heads}$; the four projections hold the same number of parameters whatever the
#   head count, exactly like one full-width head.
# - Split = reshape to `(T, n_heads, d_head)` then swap axes; merge undoes it in reverse. An exact round trip does
#   not prove the heads hold the right columns.
# - Different heads attend differently because they use different slices of the projections; evidence for that
#   must come from the layer's own weights.
# - $W_O$ is a learned linear map that mixes the heads; the per-head $d_k$ sets the scale.
# - More heads do not always help, heads have no built-in roles, attention weights are hints.
#
# **Next:** lesson 06 goes further: grouped-query attention, a KV cache, and attention in O(T) memory.
