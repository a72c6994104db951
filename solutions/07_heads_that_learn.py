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

from selfcheck_07 import (check_attention_backward, check_attention_row_backward, check_gradient_check,  # noqa: F401
                          check_mha_backward, check_numeric_jacobian, check_sinusoidal_positions,
                          check_softmax_backward, check_softmax_jacobian, gradient_check_probe)

# MHA_SHORT_TRAINING=1 (set by the grading command and the course's tests) trains for a few steps only.
SHORT = os.environ.get("MHA_SHORT_TRAINING") == "1"

# %% [markdown] nbgrader={"grade_id": "given_intro"}
# The forward functions of lessons 01 and 02, given here so this lesson stands on its own:

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
# ## 1. The gradient of softmax, derived
#
# Training moves every weight against the gradient of a scalar loss $L$. The backward pass computes those
# gradients from the output's gradient, one function at a time, by the chain rule: each function receives
# $\partial L/\partial(\text{its output})$ and returns $\partial L/\partial(\text{its inputs})$. You derive each of
# these functions yourself, starting with the smallest one. Every formula is behind a **hint**: open one only
# when you are stuck, and the next one only if you are still stuck. The last hint of each step gives the result;
# the code is still yours to write.
#
# **Step 1: measure before you derive.** Take a row of three scores $s = (1.0, 2.0, 0.5)$ and $p =
# \mathrm{softmax}(s)$. Its Jacobian $J$ is the $3 \times 3$ table of how each weight moves when one score moves:
# $J_{ji} = \partial p_j / \partial s_i$ (row $j$: a weight, column $i$: a score). Measure it with central
# differences: move score $i$ by $+\varepsilon$ and by $-\varepsilon$ and divide the change of the whole vector $p$
# by $2\varepsilon$; that is column $i$ of $J$. Use $\varepsilon = 10^{-6}$ and the given `softmax`. Store the
# result as `J_numeric`, shape `(3, 3)`.

# %% nbgrader={"grade_id": "softmax_jacobian_numeric", "solution": true}
s = np.array([1.0, 2.0, 0.5])  # one row of scores, (T_k,) = (3,)
eps = 1e-6
### BEGIN SOLUTION
J_numeric = np.zeros((3, 3))
for i in range(3):
    step = np.zeros(3)
    step[i] = eps
    J_numeric[:, i] = (softmax(s + step) - softmax(s - step)) / (2 * eps)  # column i: every p_j moved by s_i
### END SOLUTION
check_numeric_jacobian(J_numeric, s)
print("p =", np.round(softmax(s), 4))
print("J_numeric =\n", np.round(J_numeric, 4))

# %% [markdown] nbgrader={"grade_id": "softmax_jacobian_intro"}
# **Step 2: read the numbers, then derive.** Look at what you printed before you read on. Which entries are
# positive, which negative? Is $J$ symmetric? What does each row sum to, and why must it (what happens to $p$ when
# you add the same number to every score)? Compare the diagonal with $p_i$ and with $p_i^2$, and an off-diagonal
# entry $J_{ji}$ with the product $p_j p_i$.
#
# Now derive it. From $p_j = e^{s_j} / \sum_k e^{s_k}$, write $\partial p_j/\partial s_i$ twice: once for $i = j$
# and once for $i \ne j$. Both cases are one expression in $p_j$, $p_i$ and $\delta_{ij}$ (1 when $i = j$, else 0).
# Write `softmax_jacobian(p)`: given the weights `p` of one row, shape `(n,)`, return the `(n, n)` matrix $J$ with
# your formula (from `p` alone: no finite differences). The self-check compares it with central differences at
# several rows, a blocked key ($p_j = 0$) included.
#
# <details><summary>Hint 1: which rule</summary>
#
# The quotient rule, with $N = e^{s_j}$ on top and $D = \sum_k e^{s_k}$ below: $\partial D/\partial s_i = e^{s_i}$
# for every $i$, while $\partial N/\partial s_i$ is $e^{s_j}$ only when $i = j$ and 0 otherwise. Then rewrite every
# $e^{s}/D$ you see as a weight $p$.
# </details>
#
# <details><summary>Hint 2: the shape argument</summary>
#
# $J$ is `(n, n)` and is built from one vector `p` of length `n`: the only `(n, n)` matrices at hand are the
# diagonal matrix of `p` (`np.diag`) and the outer product of `p` with itself (`np.outer`). Your measured $J$ is
# one combination of the two.
# </details>
#
# <details><summary>Hint 3: the result</summary>
#
# $\partial p_j/\partial s_i = p_j(\delta_{ij} - p_i)$: the diagonal is $p_i(1 - p_i) > 0$, the rest $-p_j p_i < 0$.
# As a matrix, $J = \mathrm{diag}(p) - p\,p^\top$.
# </details>

# %% nbgrader={"grade_id": "softmax_jacobian", "solution": true}
def softmax_jacobian(p):
    """J[j, i] = dp_j / ds_i for one row of weights p = softmax(s), shape (T_k,) -> (T_k, T_k).

    Contract: p is one softmax row: a float vector of probabilities that sum to 1.
    """
    ### BEGIN SOLUTION
    return np.diag(p) - np.outer(p, p)  # (T_k, T_k)
    ### END SOLUTION


# %% nbgrader={"grade_id": "softmax_jacobian_values", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("softmax_jacobian_values")
### END HIDDEN TESTS
# Self-check: your formula against central differences on rows of 1 to 5 weights, a blocked key included.
check_softmax_jacobian(softmax_jacobian)

# %% [markdown] nbgrader={"grade_id": "softmax_backward_intro"}
# **Step 3: the backward function, without the Jacobian.** In the model, softmax runs on every row of a
# `(B, n_heads, T, T)` array of scores. The function you need receives the weights $p$ of each row and
# $g = \partial L/\partial p$ (same shape) and returns $\partial L/\partial s$. Set up the chain rule for one row:
# $L$ depends on $s_i$ only through the weights, so
# $$\frac{\partial L}{\partial s_i} = \sum_j \frac{\partial L}{\partial p_j}\,\frac{\partial p_j}{\partial s_i}
# = \sum_j g_j\, J_{ji}.$$
# Put your formula for $J_{ji}$ in and simplify until no matrix is left: the blank is a formula with one
# elementwise product and one sum per row. `softmax_jacobian(p).T @ g` gives the right numbers for one row, so you
# can test your simplification on the row above before you write the function. Do not build $J$ in the function:
# for `(B, n_heads, T, T)` weights it would be `(B, n_heads, T, T, T)`, `T` times more memory for the same numbers.
#
# Two facts to test your result against: each row of $\partial L/\partial s$ sums to 0 (adding a constant to a row
# of scores changes no weight), and a blocked key ($p_j = 0$) gets gradient exactly 0.
#
# <details><summary>Hint 1: which rule</summary>
#
# Split the sum over $j$ into the term with $\delta_{ij}$ and the rest. The $\delta_{ij}$ keeps one term of the
# sum; in the rest, $p_i$ does not depend on $j$ and comes out of the sum.
# </details>
#
# <details><summary>Hint 2: the shape argument</summary>
#
# What is left is `p` times (`g` minus one number per row). That number is a sum over the row, so compute it with
# `np.sum(..., axis=axis, keepdims=True)`: `keepdims` leaves a length-1 axis that broadcasts back over the row.
# </details>
#
# <details><summary>Hint 3: the result</summary>
#
# $\partial L/\partial s_i = p_i\,(g_i - \sum_j g_j p_j)$, that is $\partial L/\partial s = p \odot (g - g \cdot p)$
# per row.
# </details>
#
# Implement `softmax_backward(weights, grad_weights, axis=-1)`: `weights` is `softmax(scores, axis)`, `grad_weights`
# is $\partial L/\partial$`weights` (same shape); return $\partial L/\partial$`scores`. float32 in, float32 out.
# Without the Jacobian, as step 3 derives: do not call `softmax_jacobian` (its hidden test refuses the call).

# %% nbgrader={"grade_id": "softmax_backward", "solution": true}
def softmax_backward(weights, grad_weights, axis=-1):
    """dL/dscores from weights = softmax(scores, axis) and dL/dweights (same shape).

    Contract: weights (softmax weights, none negative) and grad_weights share one shape and float dtype; axis is one
    of their axes.
    """
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
# A backward pass can be wrong and still have the right shapes. The test that catches it is the measurement you
# made in step 1, for every input at once: move one input entry by $\pm\varepsilon$ and watch the loss,
# $$\frac{\partial f}{\partial x_i} \approx \frac{f(x + \varepsilon e_i) - f(x - \varepsilon e_i)}{2\varepsilon}.$$
# Two errors limit it. *Truncation*: the central difference is off by $O(\varepsilon^2)$, the one-sided
# $(f(x + \varepsilon e_i) - f(x))/\varepsilon$ by $O(\varepsilon)$. *Rounding*: float64 stores $f$ to about
# $10^{-16}$ of its size, and dividing that by $2\varepsilon$ gives about $10^{-10}$ at $\varepsilon = 10^{-6}$. For
# the one-sided difference the truncation, about $10^{-6}$, dominates; for the central one the rounding does. So
# central differences are about a thousand times more accurate here, not the million that $\varepsilon$ against
# $\varepsilon^2$ suggests; the cell after the next one measures it.
#
# Implement `gradient_check(f, inputs, grad, eps=1e-6)`:
# - `f(*inputs)` returns a number; `inputs` is a list of arrays and `grad` the list of their analytic gradients.
# - Work on **float64 copies** of the inputs (`np.array(a, dtype=np.float64)`): float32 resolves only about
#   $1.2 \times 10^{-7}$ of a number's size, so a step of $10^{-6}$ would be lost in its rounding, and the caller's
#   arrays must not change. Move one entry, call `f` on the copies, put the entry back exactly (`x.reshape(-1)` is
#   a view you can index with one number).
# - For each input, its error is $\max|a - n| \,/\, \max(\max|a|, \max|n|, 10^{-12})$, with $a$ the analytic and
#   $n$ the numeric gradient: relative to the size of the whole gradient, not entry by entry, because an entry
#   that is exactly 0 (a blocked pair) would otherwise divide rounding noise by 0.
# - Return the largest error over the inputs, a float. The table after your check says how to read it.
# - A NaN or inf in a gradient or in `f` must come out as `nan` (the table's last row), never as a small error:
#   `np.max` keeps a NaN, but Python's `max(worst, err)` drops it (every comparison with NaN is false).

# %% nbgrader={"grade_id": "gradient_check", "solution": true}
def gradient_check(f, inputs, grad, eps=1e-6):
    """Largest relative error between the analytic gradients `grad` and central differences of f(*inputs).

    Contract: f is a function; inputs is a list of float arrays; grad is a list of arrays of their shapes, which may
    hold NaN or inf; eps > 0.
    """
    ### BEGIN SOLUTION
    xs = [np.array(a, dtype=np.float64) for a in inputs]
    errors = [0.0]
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
        errors.append(float(np.max(np.abs(analytic - numeric))) / float(size))  # Python floats: NaN, no warning
    return float(np.max(errors))  # np.max keeps a NaN; Python's max(worst, err) would drop it
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
print(f"softmax_backward: largest relative error {error:.1e}")

# %% [markdown] nbgrader={"grade_id": "gradcheck_bands"}
# What your check can return, and what each result means (the cell below measures one of each on softmax):
#
# | `gradient_check` returns | it means |
# |---|---|
# | below $10^{-6}$ | **right.** A float64 gradient leaves about $10^{-10}$ to $10^{-9}$ (rounding divided by $2\varepsilon$); one computed in float32 about $10^{-7}$ (float32's resolution, $1.2 \times 10^{-7}$). |
# | $10^{-6}$ to $10^{-3}$ | **right, limited by precision:** float32 somewhere on a long chain, an `eps` other than $10^{-6}$ (at $10^{-3}$ truncation shows), or a loss far larger than its gradient. Redo the check in float64 with `eps=1e-6`: a right gradient drops below $10^{-6}$. |
# | $10^{-3}$ and above | **wrong:** a missing term, a missing factor (a missing $\sqrt{d_k}$ gives $1 - 1/\sqrt{d_k}$, at least 0.29), a wrong transpose or axis. Or `f` itself computes in float32: its rounding divided by $2\varepsilon$ is then this large; make `f` float64. |
# | `nan` | the analytic gradient or `f` holds NaN or inf: often $0 \cdot \infty$ on a blocked pair. |

# %%
def band(error):
    """The row of the table above that an error from gradient_check falls in."""
    if not np.isfinite(error):
        return "nan: NaN or inf somewhere"
    return "right" if error < 1e-6 else "right, limited by precision" if error < 1e-3 else "wrong"


row = np.array([1.0, 2.0, 0.5])  # step 1's scores, (T_k,)
p, G = softmax(row), np.array([0.3, -1.2, 0.8])  # its weights and a fixed dL/dweights
f = lambda s: np.sum(G * softmax(s))  # noqa: E731
h = 1e-6
one_sided = np.array([(f(row + h * e) - f(row)) / h for e in np.eye(3)])
central = np.array([(f(row + h * e) - f(row - h * e)) / (2 * h) for e in np.eye(3)])
exact = softmax_backward(p, G)
print(f"at eps = 1e-6, one-sided differences are off by {np.abs(one_sided - exact).max():.1e}, central ones by "
      f"{np.abs(central - exact).max():.1e}: {np.abs(one_sided - exact).max() / np.abs(central - exact).max():.0f} "
      "times less")
print(f"float32 resolves {np.finfo(np.float32).eps:.1e} of a number's size, float64 {np.finfo(np.float64).eps:.1e}")
for what, grad in (("your softmax_backward, float64", exact),
                   ("your softmax_backward, float32", softmax_backward(p.astype(np.float32), G.astype(np.float32))),
                   ("the Jacobian's -p p^T part left out", p * G)):
    error = gradient_check(f, [row], [grad])
    print(f"{what:38s} error {error:.1e}: {band(error)}")

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
# Derive it small first, then grow it.
#
# **One query, one key (worked).** The score is a scalar, $s = q \cdot k / \sqrt{d_k} = \sum_c q_c k_c /
# \sqrt{d_k}$. Moving $q_c$ moves $s$ at the rate $k_c / \sqrt{d_k}$, so $\partial s/\partial q = k/\sqrt{d_k}$
# (a vector of $q$'s shape, `(d_k,)`) and likewise $\partial s/\partial k = q/\sqrt{d_k}$. With one key, the
# softmax of one score is 1 whatever the score, so $o = v$: $\partial L/\partial v = \partial L/\partial o$, and
# $q$ and $k$ get gradient 0. Attention learns *where to look* only when it has a choice.
#
# **One query, a row of keys (yours).** Now $q$ is `(d_k,)`, $K$ is `(T_k, d_k)` (key $j$ is row $k_j$), $V$ is
# `(T_k, d_v)` and $g = \partial L/\partial o$ is `(d_v,)`. The forward pass is $s_j = q \cdot k_j/\sqrt{d_k}$,
# $p = \mathrm{softmax}(s)$, $o = \sum_j p_j v_j$. Walk it backwards, one line at a time:
# 1. $o$ is linear in each $v_j$ with coefficient $p_j$: $\partial L/\partial v_j = \;?$ (a `(d_v,)` vector for
#    each key: stack them into `(T_k, d_v)`).
# 2. $o$ is linear in each $p_j$ with coefficient vector $v_j$: $\partial L/\partial p_j = \;?$ (a number per
#    key: `(T_k,)`).
# 3. $\partial L/\partial s$ from $\partial L/\partial p$: you wrote that function in section 1.
# 4. $q$ meets every key: $\partial L/\partial q = \sum_j (\partial L/\partial s_j)\,\partial s_j/\partial q$, with
#    the worked example's $\partial s_j/\partial q$. Key $j$ meets only query $q$: $\partial L/\partial k_j = \;?$
#
# Write `attention_row_backward(q, K, V, grad_out)` returning `(dq, dK, dV)` with the shapes of `q`, `K`, `V`.
# Use the given `softmax` for the forward pass and your `softmax_backward`; scale by `math.sqrt(d_k)`, a Python
# float (`np.sqrt` would turn float32 into float64). The row is the exercise: do not hand it to the matrix form you
# write next, `scaled_dot_product_attention_backward` (its hidden test refuses the call).
#
# <details><summary>Hint 1: which rule</summary>
#
# The chain rule through a sum: if $o = \sum_j p_j v_j$, then $\partial L/\partial v_j = p_j\,g$ and
# $\partial L/\partial p_j = g \cdot v_j$ (the gradient of $L$ along $o$, read through the coefficient that
# multiplies what you differentiate).
# </details>
#
# <details><summary>Hint 2: the shape argument</summary>
#
# `dV` is `(T_k, d_v)` and its row $j$ is $p_j\,g$: an outer product of `p` `(T_k,)` with `grad_out` `(d_v,)`. The
# numbers $g \cdot v_j$ for all $j$ are one matrix-vector product of `V` with `grad_out`. `dq` is a weighted sum
# of the rows of `K`, a `(d_k,)` vector: `K` transposed times a `(T_k,)` vector. Row $j$ of `dK` is a number times
# `q`: another outer product.
# </details>
#
# <details><summary>Hint 3: the result</summary>
#
# With $d s = $ `softmax_backward(p, V g)`: $dV = p\,g^\top$, $dq = K^\top ds/\sqrt{d_k}$ and
# $dK = ds\,q^\top/\sqrt{d_k}$ (row $j$ is $ds_j\, q/\sqrt{d_k}$).
# </details>

# %% nbgrader={"grade_id": "attention_row_backward", "solution": true}
def attention_row_backward(q, K, V, grad_out):
    """(dq, dK, dV) of one query's attention o = softmax(K q / sqrt(d_k)) V, given dL/do (d_v,).

    Contract: q (d_k,), K (T, d_k), V (T, d_v) and grad_out (d_v,) share one float dtype.
    """
    ### BEGIN SOLUTION
    scale = 1.0 / math.sqrt(q.shape[-1])
    p = softmax(K @ q * scale)  # (T_k,)
    dV = np.outer(p, grad_out)  # (T_k, d_v)
    ds = softmax_backward(p, V @ grad_out)  # (T_k,)
    return K.T @ ds * scale, np.outer(ds, q) * scale, dV
    ### END SOLUTION


# %% nbgrader={"grade_id": "attention_row_backward_values", "points": 1}
### BEGIN HIDDEN TESTS
__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("attention_row_backward_values")
### END HIDDEN TESTS
# Self-check: dq, dK, dV against directional derivatives of one query's attention; the scale; float32 kept.
check_attention_row_backward(attention_row_backward)

# %% [markdown] nbgrader={"grade_id": "attention_matrix_intro"}
# **Every query at once.** In the forward pass each query's row is computed on its own, with the same $K$ and
# $V$. So row $i$ of $dQ$ is your row formula for query $i$. But a key and its value are read by *every* query:
# their gradients are the **sums** of what each query's row sends them. Write each of your row results as a
# matrix product over all queries (stack $P$, $G$ and $dS$ by rows: `(T_q, T_k)`, `(T_q, d_v)`, `(T_q, T_k)`),
# so that the sum over queries happens inside the product. Check every product's shapes: with batch axes in
# front, `(..., T_q, T_k)` and so on. The shapes alone cannot decide: when $T_q = T_k$ a product with a transpose
# missing fits just as well, and only the row formulas tell them apart.
#
# <details><summary>Hint 1: which rule</summary>
#
# A sum over queries $i$ of an outer product, $\sum_i a_i\, b_i^\top$, is $A^\top B$ when $a_i$ and $b_i$ are the
# rows of $A$ and $B$.
# </details>
#
# <details><summary>Hint 2: the shape argument</summary>
#
# `dV` is `(..., T_k, d_v)`: from $P$ `(..., T_q, T_k)` and $G$ `(..., T_q, d_v)`, $T_q$ must be summed away.
# `dS` comes row by row from `softmax_backward`, which works on whole arrays along the last axis. `dK` is
# `(..., T_k, d_k)`, summed over queries like `dV`; `dQ` is `(..., T_q, d_k)`, one row per query.
# </details>
#
# <details><summary>Hint 3: the result</summary>
#
# $dV = P^\top G$, $dP = G V^\top$, $dS =$ `softmax_backward(P, dP)`, $dQ = dS\,K/\sqrt{d_k}$ and
# $dK = dS^\top Q/\sqrt{d_k}$, where $^\top$ swaps only the last two axes.
# </details>
#
# **The mask.** A blocked pair has weight exactly 0 in the forward pass, and `softmax_backward` multiplies by the
# weight, so a blocked pair gets score gradient exactly 0, and through it nothing reaches $Q$ or $K$; a fully
# blocked row (all weights 0) gets all-zero gradients. Nothing else changes: `mask` is in the signature so the
# function mirrors the forward pass, and you need not use it if you use the forward pass's `weights`.
#
# Implement `scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None)` and return
# `(dQ, dK, dV)`. Use the `weights` the forward pass returned (do not recompute them), swap the last two axes with
# `np.swapaxes(a, -1, -2)` (never `.T`, which reverses the batch axes too), call your `softmax_backward`, and
# scale with `math.sqrt(d_k)`. Queries and keys may differ in number (`T_q != T_k`), and the inputs may have batch
# axes.

# %% nbgrader={"grade_id": "attention_backward", "solution": true}
def scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None):
    """(dQ, dK, dV) of softmax(Q K^T / sqrt(d_k)) V, given the forward pass's weights and dL/dout.

    Contract: Q, K, V and mask as in scaled_dot_product_attention; weights (..., T_q, T_k) and grad_out (..., T_q,
    d_v).
    """
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
# The forward pass, with its shapes:
#
# | step | shape |
# |---|---|
# | $Q = x W_Q$, $K = x W_K$, $V = x W_V$ | `(..., T, d_model)` each |
# | split each into heads | `(..., n_heads, T, d_head)` |
# | attention per head | `(..., n_heads, T, d_head)` |
# | concat the heads, $C$ | `(..., T, d_model)` |
# | $\text{out} = C\,W_O$ | `(..., T, d_model)` |
#
# Walk it backwards from `grad_out` $= \partial L/\partial\,\text{out}$. Two pieces are new; derive them first.
#
# **A matmul $y = x W$.** Write one entry: $y_{to} = \sum_c x_{tc} W_{co}$ ($t$ a position, $c$ an input column,
# $o$ an output column). Which entries of $y$ does $x_{tc}$ touch, and with which coefficients? Which entries does
# $W_{co}$ touch? Sum $\partial L/\partial y_{to}$ times those coefficients and read the sums as matrix products:
# that gives $\partial L/\partial x$ and $\partial L/\partial W$ (each of the shape of what it is the gradient of).
# With a batch axis, the same $W$ is used by every example and every position.
#
# <details><summary>Hint 1: which rule</summary>
#
# $x_{tc}$ touches $y_{to}$ for every $o$, with coefficient $W_{co}$; $W_{co}$ touches $y_{to}$ for every position
# $t$ (and every example), with coefficient $x_{tc}$. The chain rule sums over everything a variable touches.
# </details>
#
# <details><summary>Hint 2: the shape argument</summary>
#
# $\partial L/\partial x$ is `(..., T, d_model)`: `grad` `(..., T, d_model)` times a `(d_model, d_model)` matrix.
# $\partial L/\partial W$ is `(d_model, d_model)` with no batch axis: the sum over examples and positions is one
# matmul once both arrays are flattened to `(B*T, d_model)` (`a.reshape(-1, d_model)`).
# </details>
#
# <details><summary>Hint 3: the result</summary>
#
# $\partial L/\partial x = (\partial L/\partial y)\,W^\top$ and $\partial L/\partial W = x^\top (\partial
# L/\partial y)$, with $x$ and $\partial L/\partial y$ flattened to `(B*T, d_model)` so that the product sums over
# every example and position.
# </details>
#
# **Split and concat.** They only move numbers: every entry of the output is one entry of the input. So the
# gradient of an entry goes back to the place it came from. Which of the given functions moves entries from the
# heads' layout back to `(..., T, d_model)`, and which the other way? Route a gradient through any other layout
# (a plain `reshape` without the axis swap) and head 0's gradient lands in another head's columns or another
# token's row.
#
# <details><summary>Hint: the result</summary>
#
# The gradient of concat's input is `split_heads` of its output's gradient, and the gradient of split's input is
# `concat_heads` of its output's gradient: each is the other's inverse.
# </details>
#
# Now chain them: from `grad_out`, through $W_O$ (both its gradient and the gradient of $C$), into the heads,
# through your attention backward (all heads at once), out of the heads, and through the three projections. $x$
# feeds three projections: what happens to the three gradients that reach it?
#
# <details><summary>Hint: the six steps</summary>
#
# 1. $dW_O = C^\top$ `grad_out`, flattened as above. 2. $dC$ = `grad_out` $W_O^\top$. 3. split $dC$ into heads.
# 4. attention backward per head, then concat `dQ`, `dK`, `dV` back to `(..., T, d_model)`. 5. $dW_Q = x^\top dQ$
# (flattened) and the same for $K$ and $V$. 6. $dx = dQ\, W_Q^\top + dK\, W_K^\top + dV\, W_V^\top$: the three paths
# add.
# </details>
#
# Implement `multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None)` and return a dict
# with keys `"x"`, `"W_Q"`, `"W_K"`, `"W_V"`, `"W_O"`, each the gradient of that input, of its shape. Recompute
# the forward pass inside (with the given `split_heads`, `scaled_dot_product_attention`, `concat_heads`); a
# `(T, T)` mask applies to every head.

# %% nbgrader={"grade_id": "mha_backward", "solution": true}
def multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None):
    """Gradients of multi_head_attention's out w.r.t. x, W_Q, W_K, W_V, W_O, given dL/dout; returns a dict.

    Contract: as multi_head_attention; grad_out has x's shape.
    """
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
    """The paper's sinusoidal position encoding, (T, d_model).

    Contract: T is a positive integer and d_model an even one.
    """
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
# The positions start at your `sinusoidal_positions` times 1.5 (the token embeddings are random normal times 0.5;
# a sine's own spread is about 0.71, so the position codes start about twice as spread as the embeddings) and are
# learned, like everything else. The
# backward pass runs your `multi_head_attention_backward` once per layer; a residual connection passes its
# gradient straight through *and* through the layer, so the two add. Adam (given) updates every array. The
# model trains in float32: your functions keep float32, which moves half the bytes of float64 and is faster on
# most machines. Seeds are fixed.
#
# Two numbers say what a head does, from its weights on a fixed evaluation batch:
# - **previous-token score**: the mean weight from each position $t \ge 1$ on key $t-1$;
# - **induction score**: in a sequence whose second half repeats its first half (length `T_half`), the mean weight
#   from each position $t$ of the second half on key $t - T_{half} + 1$: the token that followed the earlier copy
#   of the current token, which is the next token. A uniform causal head scores about $1/t$ on both.

# %%
def init_model(n_vocab, T, d_model, n_layers, rng):
    """Embedding E, learned positions P (starting at the sinusoidal ones), each layer's four projections, W_U."""
    params = {"E": rng.normal(size=(n_vocab, d_model)) * 0.5, "P": sinusoidal_positions(T, d_model) * 1.5,
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


def train(task, n_steps, every, *, n_vocab, d_model=32, n_heads=4, B=32, lr=2e-2, seed=0):
    """Train on `task` ("previous" or "induction"); every `every` steps, record the scores on a fixed evaluation
    batch, its losses and one example's attention weights."""
    rng = np.random.default_rng(seed)
    n_layers, T = (1, 20) if task == "previous" else (2, 20)
    params = init_model(n_vocab, T, d_model, n_layers, rng)
    state = {}
    eval_rng = np.random.default_rng(seed + 1000)
    if task == "previous":
        eval_batch = previous_token_batch(eval_rng, 64, T, n_vocab)
    else:
        eval_batch = repeated_batch(eval_rng, 64, T // 2, n_vocab)
    history = {"task": task, "seed": seed, "steps": [], "loss": [], "first_half": [], "second_half": [], "scores": [],
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


SEED = 0  # change it and run the cells below again: every seed from 0 to 19 grows the heads of both tasks
TRAINING = {"previous": dict(n_steps=15 if SHORT else 100, every=5 if SHORT else 10, n_vocab=64),
            "induction": dict(n_steps=15 if SHORT else 500, every=5 if SHORT else 25, n_vocab=16)}
runs = {}


def trained(task, seed=None):
    """The training run of `task` with `seed` (default: SEED), trained on first use (a later cell reuses it)."""
    seed = SEED if seed is None else seed
    if (task, seed) not in runs:
        runs[task, seed] = train(task, seed=seed, **TRAINING[task])
    return runs[task, seed]


def loss_fell(run):
    """None when the run's loss fell as a working model's does, else what it did. Previous-token prediction: the
    loss ends below a tenth of where it started (a working model ends near 0.001). Induction: the repeated
    half's loss ends below half the random half's (which cannot fall below ln 16, about 2.8)."""
    if run["task"] == "previous":
        start, end = run["loss"][0], run["loss"][-1]
        return None if end < 0.1 * start else f"the loss barely moved ({start:.2f} -> {end:.2f})"
    random_half, repeated_half = run["first_half"][-1], run["second_half"][-1]
    return None if repeated_half < 0.5 * random_half else (
        f"the repeated half's loss ({repeated_half:.2f}) is not below half the random half's ({random_half:.2f})")


def verdict(run, scores, threshold=0.6):
    """What a finished run grew, or why it did not and what to try: a sentence, never an exception. It reads the
    loss as well as the head scores: a head whose pattern looks right while the loss stays up is not working."""
    best = int(np.argmax(scores[-1]))
    if SHORT:
        return "short mode (MHA_SHORT_TRAINING=1): a few steps only, so no head is expected yet"
    stuck = loss_fell(run)
    if scores[-1, best] > threshold and stuck is None:
        return f"head {best} scores {scores[-1, best]:.2f} > {threshold} and the loss fell: the head appeared"
    if scores[-1, best] > threshold:
        return (f"head {best} scores {scores[-1, best]:.2f} > {threshold}, but {stuck}: a head that looks right "
                "while the model does not learn points at the backward pass. Run the gradient checks of sections "
                "2 and 4 first.")
    return (f"no head appeared: the best score is {scores[-1, best]:.2f}, not above {threshold}, after "
            f"{run['steps'][-1]} steps with seed {run['seed']}. Try, in this order: the gradient checks of sections "
            "2 and 4; twice the steps (n_steps in TRAINING); another SEED. 'When a head does not appear' below "
            "says why.")


# %% [markdown] nbgrader={"grade_id": "previous_intro"}
# ## 7. Task 1: a previous-token head
#
# One layer, four heads, 64 token kinds, sequences of 20 random tokens; at every position the model must output
# the token *before* it (this task is previous-token prediction: the answer is already in the sequence, one step
# back). Nothing tells a head to look one step back; the loss does. The budget is 100 steps of 32 sequences, under
# a second of one core here; the cell prints the time it took on yours. Change `SEED` (in the model's cell) and
# run again to see another run.
#
# *Figure (alt text): left, each of the four heads' previous-token score against the training step; right, the
# loss on the evaluation batch against the step. The line printed under the figure gives the numbers it shows:
# where the scores and the loss start and end, and how many heads end above 0.6.*

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
climbed = int(np.sum(scores[-1] > 0.6))
print(f"Figure: the previous-token scores start near {scores[0].mean():.2f} (attention spread over the past) and end "
      f"at {', '.join(f'{v:.2f}' for v in scores[-1])}: {climbed} of {scores.shape[1]} heads above 0.6. The loss "
      f"falls from {run['loss'][0]:.2f} to {run['loss'][-1]:.3f}.")
print(f"seed {run['seed']}: trained {run['steps'][-1]} steps in {run['seconds']:.1f} s")
print(verdict(run, scores))

# %% [markdown] nbgrader={"grade_id": "previous_read"}
# In lesson 02 you *wrote* a previous-token head: its query columns copied each token's position code and its key
# columns the code of the position before, so the scores peaked one step back. Here the same head grew out of a
# loss: the position codes you wrote in section 5 are what lets a linear map turn "position $t$" into "position
# $t - 1$". How close the best head gets to a score of 1 is printed above; whatever weight it keeps elsewhere
# costs the loss little, and gradient descent sharpens only what the loss pays for.

# %% [markdown] nbgrader={"grade_id": "induction_intro"}
# ## 8. Task 2: induction heads
#
# Two layers, four heads each, 16 token kinds. Each sequence is `T_half` distinct random tokens, then the same
# tokens again ($T = 2\,T_{half}$; `T_half` is drawn from 6 to 10 at each step, so that no head can find the
# repeat from positions alone), and the model predicts the *next* token. The first half cannot be predicted
# (a loss near $\ln 16 \approx 2.8$ at best); the second half can, *if* the model learns the two-step circuit
# Olsson et al. describe: a layer-1 head copies each token's previous token into it, and a layer-2 head looks for
# the position whose previous token equals the current token and copies what it finds there.
#
# **Why these settings.** The budget is 500 steps of 32 sequences, about 2 s of one core here. The first layer
# must find "one position back" before the second can use it, so the position codes start with three times the
# embeddings' scale (1.5 against 0.5, about twice their spread): with equal scales, about half of the seeds spent
# their 500 steps on the plateau before the phase change and grew no induction head. Adam's step size is `lr=2e-2`, on small batches
# of 32: many quick, slightly noisy steps. With these settings every seed from 0 to 19 grows an induction head
# above 0.6 within its budget, and the repeated half's loss ends far below the random half's (the course's tests
# train all twenty).
#
# **What the runs show.** Layer 1's previous-token work is done, but not sharply: its best head's previous-token
# score ends between 0.3 and 0.6 (printed under the figure), enough for layer 2 to find "the token after my
# earlier copy", because the loss pays only for that. The induction score stops short of 1 (between 0.6 and 0.9
# over the twenty seeds): the loss pays for the next token, not for sharp attention, and the last of the `T_half`
# queries the score averages has no next token to predict, so nothing trains where that query looks.
#
# *Figure (alt text): left, the four layer-2 heads' induction scores against the training step; right, the loss
# on the first (random) and second (repeated) half against the step. The line printed under the figure gives the
# numbers it shows: where the scores and both losses start and end, and how many heads end above 0.6.*

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
climbed = int(np.sum(scores[-1] > 0.6))
print(f"Figure: the layer-2 induction scores start near {scores[0].mean():.2f} and end at "
      f"{', '.join(f'{v:.2f}' for v in scores[-1])}: {climbed} of {scores.shape[1]} heads above 0.6. The first "
      f"half's loss goes from {run['first_half'][0]:.2f} to {run['first_half'][-1]:.2f}, the second half's from "
      f"{run['second_half'][0]:.2f} to {run['second_half'][-1]:.2f}.")
print(f"seed {run['seed']}: trained {run['steps'][-1]} steps in {run['seconds']:.1f} s")
print("layer-1 previous-token scores:", np.round(run["scores"][-1][0], 2))
print(verdict(run, scores))

# %% [markdown] nbgrader={"grade_id": "patterns_intro"}
# Watch the heads form. Choose a checkpoint and a head; the image is that head's attention on one evaluation
# sequence (10 tokens, then the same 10 again). An induction head draws a diagonal stripe in the lower-left
# quarter, one step right of the diagonal that pairs each token with its earlier copy. Without a live front end
# the figure shows the last checkpoint, layer 2, the best head.
#
# *Figure (alt text): a 20 by 20 grid of attention weights, queries down and keys across, labelled with the
# sequence's tokens; below the diagonal only (causal). At the last checkpoint the best layer-2 head has a bright
# stripe from query 10, key 1 to query 19, key 10, bright on most of its ten queries, and little weight
# anywhere else.*

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
# 1. **The gradients.** Run the gradient checks of sections 2 and 4 again. Training alone does not catch every
#    mistake: Adam divides each array's gradient by its own running size, so a constant factor missing in `dQ`
#    or `dK` (the $1/\sqrt{d_k}$) cancels and the model trains as well; a wrong transpose or sign does not.
# 2. **The step size.** With `lr` ten times smaller the heads need many times more steps; much larger and the loss
#    jumps about. `lr=2e-2` is used here.
# 3. **The steps.** Induction heads appear suddenly after a plateau (Olsson et al. call it a phase change); give
#    `n_steps` twice as many before you change anything else.
# 4. **A shortcut.** With `T_half` fixed at 10, a layer-1 head can learn to look exactly 9 positions back and
#    predict the repeat without the two-step circuit: the loss falls whether or not an induction head grows, so
#    the loss alone proves nothing. Random `T_half` removes that shortcut. A loss that falls while the score does
#    not is a model solving the task another way, worth a look in the widget.
# 5. **The seed.** A different `SEED` gives different heads (which head number becomes the induction head
#    changes). With the settings above, seeds 0 to 19 all grow an induction head; with position codes as weak as
#    the embeddings, many do not in this budget. If you change the sizes, expect some seeds to need more steps.
#
# ## Summary
#
# - You measured softmax's Jacobian, derived it, and turned it into a backward pass that never builds it: one
#   product and one sum per row.
# - One query first, then every query: a key and a value are read by every query, so their gradients sum over
#   the queries, which is what the transposed products do.
# - Attention backward: the values' gradient from the weights and the output's gradient, the scores' from your
#   softmax backward, then the queries' and keys' from the scores', each with the same $1/\sqrt{d_k}$ as the
#   forward pass; blocked pairs get no gradient because their weight is 0. (Your cells above hold the formulas.)
# - Split and concat are permutations, so gradients go back through the inverse permutation; weight gradients
#   sum over batch and positions; $x$'s gradient sums its three paths.
# - Central differences check any gradient, with an error measured relative to the whole gradient.
# - Without positions attention is permutation equivariant; sinusoidal positions break the symmetry.
# - A previous-token head grows out of previous-token prediction, and induction heads out of next-token
#   prediction on repeated sequences, in a few seconds of numpy, for every seed the course tries.
