# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade_id": "intro"}
# # Lesson 03 · Counting parameters: more heads cost nothing extra
#
# **Goals.** By the end of this lesson you can
# 1. say which weight matrices a multi-head attention layer owns, with their shapes, and count them with and
#    without biases;
# 2. explain why the count is the same for 1 head or 32 heads (and check it on the paper's d_model = 512 layer);
# 3. compute the attention parameters of BERT-base, GPT-2 small, GPT-3 175B and Llama-2 7B;
# 4. count what grouped-query (GQA) and multi-query (MQA) attention save, in weights and in KV-cache bytes.
#
# **Time needed:** about 35 minutes. **You need:** lesson 02 (heads are column slices of one projection).
#
# Cells that say `raise NotImplementedError()` are yours; the self-check after each one prints ✔ or says what
# looks wrong. Primary source: Vaswani et al., 2017, *Attention Is All You Need*, section 3.2.2 and Table 3.
#
# **Names** (the [glossary](glossary.md) lists every one). `d_model` the width of a token vector, `n_heads` the
# number of heads (the paper's $h$), `d_head = d_model // n_heads` (the paper's $d_k = d_v$), projections
# `W_Q, W_K, W_V, W_O` applied as `x @ W`.

# %% nbgrader={"grade_id": "setup", "points": 0}
### BEGIN HIDDEN TESTS
import os as _os, sys as _sys  # noqa: E401  grading: never import from the submission's folder
_sys.path[:] = [p for p in _sys.path if p and _os.path.abspath(p) != _os.getcwd()]
__import__("autograder.kernel.hidden_cell")  # grading: loaded before any cell of the learner's below can break imports
### END HIDDEN TESTS
import io

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import DisplayHandle, Image, Markdown, display
from matplotlib.figure import Figure
from matplotlib.ticker import StrMethodFormatter

from selfcheck_03 import (check_exercise_512, check_gqa_param_count, check_kv_cache_bytes, check_mha_param_count,
                          check_mha_param_count_bias)

# %% [markdown] nbgrader={"grade_id": "where_intro"}
# ## 1. Where the parameters live
#
# Head $i$ has its own projections $W^Q_i, W^K_i, W^V_i$, each of shape `(d_model, d_head)`. Put the
# `n_heads` of them side by side and you get one `(d_model, n_heads * d_head) = (d_model, d_model)` matrix:
# that is exactly the `W_Q` of lesson 02, whose column slice `i*d_head:(i+1)*d_head` *is* head $i$'s
# projection. The same holds for `W_K` and `W_V`. After attention, the concatenated heads,
# `(T, n_heads * d_head)`, go through the output projection `W_O` of shape `(n_heads * d_head, d_model)`.
#
# | matrix | shape | per head |
# |---|---|---|
# | `W_Q`, `W_K`, `W_V` | `(d_model, d_model)` each | `n_heads` column slices `(d_model, d_head)` |
# | `W_O` | `(d_model, d_model)` | `n_heads` row slices `(d_head, d_model)` |
#
# So the weights number $4\,d_{model}^2$, and `n_heads` appears nowhere in that formula: changing the number of
# heads only changes how the same matrices are *sliced*. With `bias=True`, each of the four projections adds one
# bias vector as long as its output, `d_model`.
#
# Implement `mha_param_count(d_model, n_heads, bias=False)` returning an `int`. Raise `ValueError` if `n_heads`
# does not divide `d_model` (you cannot split such a layer into equal heads).

# %% nbgrader={"grade_id": "mha_param_count", "solution": true}
def mha_param_count(d_model, n_heads, bias=False):
    """Number of parameters of one multi-head attention layer: W_Q, W_K, W_V, W_O (and their biases).

    Contract: d_model and n_heads are positive integers (n_heads that does not divide d_model raises ValueError);
    bias is True or False.
    """
    ### BEGIN SOLUTION
    if d_model % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
    count = 4 * d_model * d_model  # W_Q, W_K, W_V, W_O: each n_heads slices of (d_model, d_head)
    if bias:
        count += 4 * d_model
    return count
    ### END SOLUTION


# %% nbgrader={"grade_id": "param_count", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("param_count")
### END HIDDEN TESTS
# Self-check: the paper's 512-wide layer, the same count for every n_heads, biases.
check_mha_param_count(mha_param_count)

# %% nbgrader={"grade_id": "param_count_bias", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("param_count_bias")
### END HIDDEN TESTS
# Self-check (biases): BERT-base's layer, 4 * 768^2 + 4 * 768.
check_mha_param_count_bias(mha_param_count)

# %% [markdown] nbgrader={"grade_id": "exercise_intro"}
# ## 2. The paper's layer, by hand
#
# The base Transformer uses $d_{model} = 512$ and $h = 8$ heads (section 3.2.2). Work out on paper first:
# what is `d_head`? How many weights do the four projections hold? How many would a single head of full width
# ($h = 1$, `d_head = 512`) hold? Then let `exercise_512()` return the three numbers as a tuple
# `(d_head, params_8_heads, params_1_head)`; you may call your `mha_param_count`.
#
# <details><summary>Check (open after you have your numbers)</summary>
#
# `d_head = 512 / 8 = 64`. Each projection is $512 \times 512 = 262{,}144$ weights, so the four hold
# $4 \times 262{,}144 = 1{,}048{,}576$. One full-width head has the same four $512 \times 512$ matrices: the same
# 1,048,576. Eight heads cost nothing extra in parameters; the paper adds that the compute is also close to one
# full-width head.
# </details>

# %% nbgrader={"grade_id": "exercise_512", "solution": true}
def exercise_512():
    """(d_head, params_8_heads, params_1_head) for d_model = 512, no bias."""
    ### BEGIN SOLUTION
    d_head = 512 // 8
    return d_head, mha_param_count(512, 8), mha_param_count(512, 1)
    ### END SOLUTION


# %% nbgrader={"grade_id": "exercise_values", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("exercise_values")
### END HIDDEN TESTS
check_exercise_512(exercise_512, mha_param_count)

# %% [markdown] nbgrader={"grade_id": "widget_intro"}
# ### Try it: change d_model and n_heads
#
# Pick a width and a number of heads (only the divisors of `d_model` are offered). The text shows `d_head` and
# every matrix's shape; the left panel stacks each projection's parameters head by head, the right panel
# plots *your* `mha_param_count` for every valid head count of this `d_model`. Watch the slices get thinner
# while the bars and the line do not move. Without a live front end the figure shows `d_model = 512`, 8 heads.
#
# *Figure (alt text): left, four equal stacked bars for W_Q, W_K, W_V and W_O, each divided into n_heads equal
# coloured slices of d_model × d_head parameters; right, the total parameter count plotted against the number
# of heads on a log axis, a flat line at 4 × d_model², with the chosen head count marked.*

# %% tags=["nbval-ignore-output"]
D_MODELS = [64, 96, 128, 192, 256, 384, 512, 768, 1024]


def head_counts(d_model, limit=64):
    """The numbers of heads that split d_model into equal heads (up to `limit`)."""
    return [h for h in range(1, min(d_model, limit) + 1) if d_model % h == 0]


def as_png(fig):
    """A static image of `fig`: shown with or without a live front end, and replaceable in place."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    return Image(buf.getvalue())


def layout_figure(d_model, n_heads):
    d_head = d_model // n_heads
    fig = Figure(figsize=(10, 3.8))
    ax_bar, ax_line = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    colors = plt.cm.viridis(np.linspace(0, 0.95, n_heads))
    for j, name in enumerate(["W_Q", "W_K", "W_V", "W_O"]):
        for i in range(n_heads):  # head i's slice: columns (or, for W_O, rows) i*d_head:(i+1)*d_head
            ax_bar.bar(j, d_model * d_head, bottom=i * d_model * d_head, color=colors[i],
                       edgecolor="white", linewidth=0.5 if n_heads <= 32 else 0)
    ax_bar.set_xticks(range(4), ["W_Q", "W_K", "W_V", "W_O"])
    ax_bar.set(ylabel="parameters", title=f"{n_heads} slices of {d_model} × {d_head} in each matrix")
    hs = head_counts(d_model)
    totals = [mha_param_count(d_model, h) for h in hs]
    ax_line.plot(hs, totals, "o-", color=plt.cm.viridis(0.3), label="mha_param_count(d_model, n_heads)")
    ax_line.plot([n_heads], [mha_param_count(d_model, n_heads)], "o", ms=12, mfc="none",
                 color=plt.cm.viridis(0.85), label=f"n_heads = {n_heads}")
    ax_line.set(xscale="log", xlabel="n_heads (log axis)", ylabel="parameters",
                ylim=(0, 1.3 * max(max(totals), 1)), title=f"Total for d_model = {d_model}")
    ax_line.set_xticks(hs, [str(h) for h in hs], fontsize=7)
    ax_line.minorticks_off()
    for ax in (ax_bar, ax_line):
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax_line.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def layout_text(d_model, n_heads):
    d_head = d_model // n_heads
    total = mha_param_count(d_model, n_heads)
    return Markdown(
        f"**d_model = {d_model}, n_heads = {n_heads} → d_head = {d_head}.** "
        f"`W_Q`, `W_K`, `W_V`: `({d_model}, {d_model})`, each {n_heads} column slices `({d_model}, {d_head})`; "
        f"`W_O`: `({d_model}, {d_model})`, {n_heads} row slices `({d_head}, {d_model})`. "
        f"Total: **{total:,}** = 4 × {d_model}²; one full-width head: {mha_param_count(d_model, 1):,}.")


d_model_choice = widgets.Dropdown(options=D_MODELS, value=512, description="d_model")
n_heads_choice = widgets.Dropdown(options=head_counts(512), value=8, description="n_heads")
display(widgets.HBox([d_model_choice, n_heads_choice]))
text_view, figure_view = DisplayHandle(), DisplayHandle()  # outputs that the controls replace in place
text_view.display(layout_text(512, 8))
figure_view.display(as_png(layout_figure(512, 8)))


def redraw(change=None):
    d_model, n_heads = d_model_choice.value, n_heads_choice.value
    if n_heads is None or d_model % n_heads:
        return
    text_view.update(layout_text(d_model, n_heads))
    figure_view.update(as_png(layout_figure(d_model, n_heads)))


def new_d_model(change):
    options = head_counts(change["new"])
    keep = n_heads_choice.value if n_heads_choice.value in options else max(h for h in options if h <= 8)
    n_heads_choice.options = options  # resets the value to options[0]: set it again
    n_heads_choice.value = keep
    redraw()


d_model_choice.observe(new_d_model, names="value")
n_heads_choice.observe(redraw, names="value")

# %% [markdown] nbgrader={"grade_id": "table3_intro"}
# ### More heads do not always help
#
# If the count does not change, what does the number of heads buy? The paper's Table 3, rows (A), varies $h$ in
# the base model ($d_{model} = 512$, about 65M parameters in total) while keeping the compute fixed, and reports
# BLEU on the English-German development set (newstest2013). One head is 0.9 BLEU worse than the best setting;
# 8 and 16 heads tie at the top; 32 heads, with `d_head = 16`, fall back. The right axis is *your* count of the
# attention parameters per layer for each row: one flat line.
#
# *Figure (alt text): development-set BLEU against the number of heads (1, 4, 8, 16, 32) on a log axis: 24.9,
# 25.5, 25.8, 25.8, 25.4, rising then falling; a second, flat line on the right axis shows 1,048,576 attention
# parameters per layer for every head count.*

# %%
table3_heads = [1, 4, 8, 16, 32]
table3_bleu = [24.9, 25.5, 25.8, 25.8, 25.4]  # Vaswani et al., 2017, Table 3 (A) and base row; dev set
table3_params = [mha_param_count(512, h) for h in table3_heads]

fig, ax_bleu = plt.subplots(figsize=(6.4, 3.6))
ax_bleu.plot(table3_heads, table3_bleu, "o-", color=plt.cm.viridis(0.2), label="BLEU (dev)")
for h, b in zip(table3_heads, table3_bleu):
    ax_bleu.annotate(f"{b}", (h, b), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
ax_bleu.set(xscale="log", xlabel="n_heads (log axis; d_head = 512 / n_heads)", ylabel="BLEU, development set",
            ylim=(24.5, 26.2), title="Table 3 (A): heads vs quality at a fixed parameter count")
ax_bleu.set_xticks(table3_heads, [f"{h}\n(d_head {512 // h})" for h in table3_heads], fontsize=8)
ax_bleu.minorticks_off()
ax_params = ax_bleu.twinx()
ax_params.plot(table3_heads, table3_params, "s--", color=plt.cm.viridis(0.75), label="attention parameters")
ax_params.set(ylabel="attention parameters per layer", ylim=(0, 1.5e6))
ax_params.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
fig.legend(loc="lower center", bbox_to_anchor=(0.55, 0.18), fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade_id": "models_intro"}
# ## 3. Real models
#
# The same count scales to today's models. BERT, GPT-2 and GPT-3 give their projections biases; Llama-2 does
# not. The table is computed with your `mha_param_count`; the last column compares the attention weights with
# the model's nominal size.
#
# A common claim is that `W_O` is negligible next to the feed-forward block. It is not: with the usual
# feed-forward width $4\,d_{model}$ the block holds $8\,d_{model}^2$, attention $4\,d_{model}^2$, and `W_O` alone
# $d_{model}^2$, one twelfth of a layer. (Llama-2's gated feed-forward is a little different; the proportions are
# similar.)

# %%
models = [  # name, d_model, n_heads, layers, biases, nominal size
    ("BERT-base", 768, 12, 12, True, 110e6),
    ("GPT-2 small", 768, 12, 12, True, 124e6),
    ("GPT-3 175B", 12288, 96, 96, True, 175e9),
    ("Llama-2 7B", 4096, 32, 32, False, 7e9),
]
rows = ["| model | d_model | n_heads | d_head | layers | attention params / layer | all layers | share of model |",
        "|---|---|---|---|---|---|---|---|"]
for name, d_model, n_heads, n_layers, bias, size in models:
    per_layer = mha_param_count(d_model, n_heads, bias=bias)
    rows.append(f"| {name} | {d_model} | {n_heads} | {d_model // n_heads} | {n_layers} | {per_layer:,} | "
                f"{per_layer * n_layers:,} | {per_layer * n_layers / size:.0%} |")
display(Markdown("\n".join(rows)))

# %% [markdown] nbgrader={"grade_id": "gqa_intro"}
# ## 4. Sharing keys and values: GQA and MQA
#
# When a model generates text one token at a time, it keeps every earlier token's keys and values in a *KV
# cache* so it does not recompute them. For long contexts that cache, not the weights, fills the accelerator's
# memory. Grouped-query attention (GQA) keeps all `n_heads` query heads but only `n_kv_heads` key/value heads;
# each K/V head serves a group of `n_heads // n_kv_heads` query heads. Multi-query attention (MQA) is the
# extreme `n_kv_heads = 1`; `n_kv_heads = n_heads` is ordinary multi-head attention.
#
# | matrix | MHA | GQA |
# |---|---|---|
# | `W_Q` | `(d_model, d_model)` | `(d_model, d_model)` |
# | `W_K`, `W_V` | `(d_model, d_model)` | `(d_model, n_kv_heads * d_head)` |
# | `W_O` | `(d_model, d_model)` | `(d_model, d_model)` |
#
# `d_head` is still `d_model // n_heads`: it is set by the *query* heads. Biases are as long as each output.
#
# Implement `gqa_param_count(d_model, n_heads, n_kv_heads, bias=False)`, then
# `kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_value=2)`: the bytes one more token adds to
# the cache (every layer stores one key and one value vector of width `d_head` per KV head;
# `bytes_per_value=2` for 16-bit numbers).

# %% nbgrader={"grade_id": "gqa_param_count", "solution": true}
def gqa_param_count(d_model, n_heads, n_kv_heads, bias=False):
    """Parameters of one grouped-query attention layer (n_kv_heads key/value heads shared by n_heads queries).

    Contract: d_model, n_heads and n_kv_heads are positive integers, n_kv_heads dividing n_heads; bias is True or
    False.
    """
    ### BEGIN SOLUTION
    d_kv = n_kv_heads * (d_model // n_heads)  # width of W_K's and W_V's output: n_kv_heads * d_head
    count = 2 * d_model * d_model + 2 * d_model * d_kv  # W_Q, W_O full; W_K, W_V narrow
    if bias:
        count += 2 * d_model + 2 * d_kv
    return count
    ### END SOLUTION


# %% nbgrader={"grade_id": "gqa_count", "points": 2}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("gqa_count")
### END HIDDEN TESTS
# Self-check: MHA as a special case, MQA, Llama-2 70B, bias widths.
check_gqa_param_count(gqa_param_count)

# %% nbgrader={"grade_id": "kv_cache_bytes_per_token", "solution": true}
def kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_value=2):
    """Bytes the KV cache grows by for each token: a key and a value per KV head, in every layer.

    Contract: every argument is a positive integer.
    """
    ### BEGIN SOLUTION
    return 2 * n_layers * n_kv_heads * d_head * bytes_per_value  # 2: K and V
    ### END SOLUTION


# %% nbgrader={"grade_id": "kv_cache_bytes", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("kv_cache_bytes")
### END HIDDEN TESTS
check_kv_cache_bytes(kv_cache_bytes_per_token)

# %% [markdown] nbgrader={"grade_id": "gqa_compare_intro"}
# ### What Llama-2 70B saves
#
# Llama-2 70B has `d_model = 8192`, 64 query heads (`d_head = 128`), 80 layers, and 8 KV heads. The table
# compares it with the same model built with full multi-head attention and with multi-query attention, using
# your two functions. The last column is the cache for one sequence of 4,096 tokens in 16-bit numbers.

# %%
d_model, n_heads, n_layers, T = 8192, 64, 80, 4096
d_head = d_model // n_heads
rows = ["| layout | KV heads | attention params / layer | all layers | KV cache / token | KV cache, 4,096 tokens |",
        "|---|---|---|---|---|---|"]
for label, n_kv in (("MHA", n_heads), ("GQA (Llama-2 70B)", 8), ("MQA", 1)):
    per_layer = gqa_param_count(d_model, n_heads, n_kv)
    per_token = kv_cache_bytes_per_token(n_layers, n_kv, d_head)
    rows.append(f"| {label} | {n_kv} | {per_layer:,} | {per_layer * n_layers / 1e9:.2f} B | "
                f"{per_token / 2**10:,.0f} KiB | {per_token * T / 2**30:.2f} GiB |")
display(Markdown("\n".join(rows)))

# %% [markdown] nbgrader={"grade_id": "gqa_takeaway"}
# Going from 64 to 8 KV heads removes 44% of the attention weights (W_Q and W_O are untouched) but cuts the KV
# cache by a factor of 8: from 10 GiB to 1.25 GiB for one 4,096-token sequence. That factor is why GQA is
# used: it lets a server hold eight times as many sequences, or eight times longer ones, in the same memory,
# at a small cost in quality that MQA's factor of 64 would make larger.
#
# ## Summary
#
# - A multi-head attention layer owns four `(d_model, d_model)` matrices: $4\,d_{model}^2$ weights, plus
#   $4\,d_{model}$ biases if it has them. Heads are slices of those matrices, so the count does not depend on
#   `n_heads`: 1,048,576 for the paper's 512-wide layer, whether it has 1 head or 8.
# - The number of heads is a modelling choice, not a size: the paper's Table 3 finds 8 to 16 heads best at
#   $d_{model} = 512$, with 1 or 32 heads worse.
# - `W_O` is a quarter of the attention weights and about a twelfth of a layer.
# - GQA and MQA shrink only `W_K` and `W_V`; their real saving is the KV cache, which falls by
#   `n_heads / n_kv_heads`.
#
# **Next:** lesson 04 looks inside one head: why its scores are divided by $\sqrt{d_{head}}$ and not by
# $\sqrt{d_{model}}$.
