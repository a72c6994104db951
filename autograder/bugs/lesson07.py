"""Catalogued learner bugs of lesson 07: the softmax Jacobian, the backward pass of softmax, of one query's
attention, of attention and of a multi-head layer, the gradient check and the sinusoidal positions."""

import math  # noqa: F401 - used inside the bug sources' namespace

import numpy as np  # noqa: F401

from autograder.bugs import declarer

bug = declarer(__name__)

# ------------------------------------------------------------------------------------------- softmax Jacobian
_JACOBIAN = ("softmax_jacobian_values",)

bug("jacobian_diagonal_only", "softmax_jacobian",
    """Only the diagonal of the Jacobian is filled: moving score i moves every other weight j too, in the opposite
    direction, because all the weights share one denominator. Derive dp_j/ds_i for i != j as well.""",
    """
    def softmax_jacobian(p):
        return np.diag(p * (1 - p))
    """, tests=_JACOBIAN)

bug("jacobian_no_kronecker_delta", "softmax_jacobian",
    """Every entry is given the diagonal's form p_j (1 - p_i): the term that comes from differentiating the
    numerator e^(s_j) itself appears only when i = j (the Kronecker delta); off the diagonal only the shared
    denominator moves.""",
    """
    def softmax_jacobian(p):
        return np.outer(p, 1 - p)
    """, tests=_JACOBIAN)

bug("jacobian_outer_product_only", "softmax_jacobian",
    """The Jacobian is only the -p p^T part: the diagonal misses the term from differentiating the numerator
    e^(s_j) with respect to its own score.""",
    """
    def softmax_jacobian(p):
        return -np.outer(p, p)
    """, tests=_JACOBIAN)

# ------------------------------------------------------------------------------------------- softmax backward
_SOFTMAX = ("softmax_backward_values",)

bug("softmax_backward_no_subtraction", "softmax_backward",
    """The gradient is weights * grad_weights: the term that subtracts sum(grad_weights * weights) along each row
    is missing. Softmax's Jacobian is diag(p) - p p^T, and the p p^T part is that subtraction; without it the rows
    of the gradient do not sum to 0.""",
    """
    def softmax_backward(weights, grad_weights, axis=-1):
        return weights * grad_weights
    """, tests=_SOFTMAX)

bug("softmax_backward_global_sum", "softmax_backward",
    """The sum of grad_weights * weights runs over the whole array instead of along `axis` of each row: every row
    subtracts the same number. Sum along `axis` with keepdims=True.""",
    """
    def softmax_backward(weights, grad_weights, axis=-1):
        return weights * (grad_weights - np.sum(grad_weights * weights))
    """, tests=_SOFTMAX)

bug("softmax_backward_fixed_axis", "softmax_backward",
    """The row sum always runs along the last axis, ignoring the `axis` argument: a softmax taken along another
    axis gets the wrong gradient. Pass `axis` to the sum.""",
    """
    def softmax_backward(weights, grad_weights, axis=-1):
        return weights * (grad_weights - np.sum(grad_weights * weights, axis=-1, keepdims=True))
    """, tests=_SOFTMAX)

# ------------------------------------------------------------------------------------ one query's backward
_ROW = ("attention_row_backward_values",)


def _row_source(dq_dk="K.T @ ds * scale, np.outer(ds, q) * scale", ds="softmax_backward(p, V @ grad_out)",
                dv="np.outer(p, grad_out)", before=""):
    return f"""
    def attention_row_backward(q, K, V, grad_out):
        scale = 1.0 / math.sqrt(q.shape[-1]){before}
        p = softmax(K @ q * scale)
        ds = {ds}
        dq, dK = {dq_dk}
        return dq, dK, {dv}
    """


bug("row_backward_no_scale", "attention_row_backward",
    """dq and dK miss the 1/sqrt(d_k) factor: the score is q . k_j / sqrt(d_k), so its gradient reaches q and each
    k_j divided by sqrt(d_k) too.""",
    _row_source(dq_dk="K.T @ ds, np.outer(ds, q)"), tests=_ROW)

bug("row_backward_no_softmax_backward", "attention_row_backward",
    """The gradient of the weights is used as the gradient of the scores: the step through softmax is missing.
    dL/dp_j = g . v_j is the gradient of the weights; pass it through softmax_backward before it reaches q and K.""",
    _row_source(ds="V @ grad_out"), tests=_ROW)

bug("row_backward_dk_outer_swapped", "attention_row_backward",
    """dK is the outer product the wrong way round, (d_k, T_k) instead of (T_k, d_k): row j of dK belongs to key j
    and is dL/ds_j times q / sqrt(d_k). A gradient has the shape of what it is the gradient of.""",
    _row_source(dq_dk="K.T @ ds * scale, np.outer(q, ds) * scale"), tests=_ROW)

bug("row_backward_calls_matrix_form", "attention_row_backward",
    """attention_row_backward hands one query to scaled_dot_product_attention_backward, the matrix form, instead of
    deriving it: the exercise is the row itself, built from the chain rule through o = sum_j p_j v_j, softmax and
    the scores. A function earns its points for the work it does.""",
    """
    def attention_row_backward(q, K, V, grad_out):
        out, weights = scaled_dot_product_attention(q[None], K, V)
        dQ, dK, dV = scaled_dot_product_attention_backward(q[None], K, V, weights, grad_out[None])
        return dQ[0], dK, dV
    """, tests=_ROW, visible=False)

# ---------------------------------------------------------------------------------------- attention backward
_ATTENTION = ("attention_backward_values",)


def _attention_source(dq_dk="grad_scores @ K * scale, np.swapaxes(grad_scores, -1, -2) @ Q * scale",
                      scores="softmax_backward(weights, grad_out @ np.swapaxes(V, -1, -2))",
                      dv="np.swapaxes(weights, -1, -2) @ grad_out", before=""):
    return f"""
    def scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None):
        scale = 1.0 / math.sqrt(Q.shape[-1]){before}
        grad_scores = {scores}
        dQ, dK = {dq_dk}
        return dQ, dK, {dv}
    """


bug("attention_backward_no_scale", "scaled_dot_product_attention_backward",
    """dQ and dK miss the 1/sqrt(d_k) factor: the scores are Q K^T / sqrt(d_k), so the gradient reaching Q and K
    through them is divided by sqrt(d_k) too. Without it both are sqrt(d_k) times too big.""",
    _attention_source(dq_dk="grad_scores @ K, np.swapaxes(grad_scores, -1, -2) @ Q"), tests=_ATTENTION)

bug("attention_backward_scaled_by_d_k", "scaled_dot_product_attention_backward",
    """dQ and dK are divided by d_k instead of sqrt(d_k): the forward pass divides the scores by sqrt(d_k), and the
    backward pass divides their gradient by the same number.""",
    _attention_source(dq_dk="grad_scores @ K / Q.shape[-1], np.swapaxes(grad_scores, -1, -2) @ Q / Q.shape[-1]"),
    tests=_ATTENTION)

bug("attention_backward_unmasked_weights", "scaled_dot_product_attention_backward",
    """The weights are recomputed from Q and K without the mask, so gradient flows into blocked pairs, which
    the forward pass gave weight 0. Use the `weights` the forward pass returned (0 on every blocked pair).""",
    _attention_source(before="""
        weights = np.exp(Q @ np.swapaxes(K, -1, -2) * scale)
        weights = weights / weights.sum(axis=-1, keepdims=True)"""), tests=_ATTENTION)

bug("attention_backward_no_softmax_backward", "scaled_dot_product_attention_backward",
    """The gradient of the weights is used as the gradient of the scores: the step through softmax is missing.
    Pass dL/dweights = grad_out V^T through softmax_backward(weights, ...) first.""",
    _attention_source(scores="grad_out @ np.swapaxes(V, -1, -2)"), tests=_ATTENTION)

bug("attention_backward_dv_untransposed", "scaled_dot_product_attention_backward",
    """dV is computed with the weights untransposed. out = weights @ V, so dV = weights^T @ grad_out:
    (T_k, T_q) @ (T_q, d_v). With T_q != T_k the shapes do not even fit.""",
    _attention_source(dv="weights @ grad_out"), tests=_ATTENTION)

bug("attention_backward_dk_untransposed", "scaled_dot_product_attention_backward",
    """dK is computed with the scores' gradient untransposed. scores = Q K^T / sqrt(d_k), so K's gradient collects,
    for each key, the queries that scored it: dK = dS^T Q / sqrt(d_k), (T_k, T_q) @ (T_q, d_k). With T_q != T_k the
    shapes do not even fit.""",
    _attention_source(dq_dk="grad_scores @ K * scale, grad_scores @ Q * scale"), tests=_ATTENTION)

bug("attention_backward_dot_T", "scaled_dot_product_attention_backward",
    """The transposes use .T, which reverses every axis, batch axes included: on batched input the heads and the
    batch are swapped (or the shapes do not fit). Swap only the last two axes, np.swapaxes(a, -1, -2).""",
    """
    def scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None):
        scale = 1.0 / math.sqrt(Q.shape[-1])
        dV = weights.T @ grad_out
        grad_scores = softmax_backward(weights, grad_out @ V.T)
        return grad_scores @ K * scale, grad_scores.T @ Q * scale, dV
    """, tests=_ATTENTION)

# ------------------------------------------------------------------------------------ multi-head backward
_MHA = ("mha_backward_values",)


def _mha_source(grad_heads="split_heads(grad_out @ W_O.T, n_heads)", weight="flat(x).T @ flat({d})",
                grad_x="dQ @ W_Q.T + dK @ W_K.T + dV @ W_V.T", grad_W_O="flat(concat).T @ flat(grad_out)",
                merge="concat_heads({g})"):
    return f"""
    def multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None):
        d_model = x.shape[-1]
        flat = lambda a: a.reshape(-1, d_model)
        Q, K, V = (split_heads(x @ W, n_heads) for W in (W_Q, W_K, W_V))
        heads, weights = scaled_dot_product_attention(Q, K, V, mask)
        concat = concat_heads(heads)
        grad_heads = {grad_heads}
        dQ, dK, dV = scaled_dot_product_attention_backward(Q, K, V, weights, grad_heads, mask)
        dQ, dK, dV = {merge.format(g="dQ")}, {merge.format(g="dK")}, {merge.format(g="dV")}
        return {{"x": {grad_x}, "W_Q": {weight.format(d="dQ")}, "W_K": {weight.format(d="dK")},
                "W_V": {weight.format(d="dV")}, "W_O": {grad_W_O}}}
    """


bug("mha_backward_not_summed_over_batch", "multi_head_attention_backward",
    """The weight gradients keep a batch axis (x^T @ dQ per example): a weight is shared by every example and every
    position, so its gradient is the sum over all of them. Flatten to (B*T, d_model) before the matmul.""",
    _mha_source(weight="np.swapaxes(x, -1, -2) @ {d}",
                grad_W_O="np.swapaxes(concat, -1, -2) @ grad_out"), tests=_MHA)

bug("mha_backward_averaged_over_batch", "multi_head_attention_backward",
    """The weight gradients are averaged over the batch instead of summed: the loss adds every example's
    contribution, so its gradient adds theirs too.""",
    _mha_source(weight="(np.swapaxes(x, -1, -2) @ {d}).reshape(-1, d_model, d_model).mean(axis=0)",
                grad_W_O="(np.swapaxes(concat, -1, -2) @ grad_out).reshape(-1, d_model, d_model).mean(axis=0)"),
    tests=_MHA)

bug("mha_backward_heads_merged_by_reshape", "multi_head_attention_backward",
    """The heads' gradients are put back with a plain reshape of (..., n_heads, T, d_head) to (..., T, d_model),
    without swapping the heads and T axes back: the wrong permutation, so one token's gradient lands in another
    token's row. Use concat_heads, the inverse of the split the forward pass made.""",
    _mha_source(merge="{g}.reshape(x.shape)"), tests=_MHA)

bug("mha_backward_split_without_transpose", "multi_head_attention_backward",
    """The gradient of the concatenated heads is split into heads with a plain reshape to (..., n_heads, T,
    d_head): the wrong permutation (the forward split swaps the T and heads axes). Use split_heads.""",
    _mha_source(grad_heads="(grad_out @ W_O.T).reshape(*x.shape[:-2], n_heads, x.shape[-2], -1)"), tests=_MHA)

bug("mha_backward_one_path_to_x", "multi_head_attention_backward",
    """x's gradient comes only through the queries: x feeds W_Q, W_K and W_V, so its gradient is the sum of the
    three paths, dQ W_Q^T + dK W_K^T + dV W_V^T.""",
    _mha_source(grad_x="dQ @ W_Q.T"), tests=_MHA)

bug("mha_backward_w_o_grad_transposed", "multi_head_attention_backward",
    """W_O's gradient is transposed: out = concat @ W_O, so dW_O = concat^T @ grad_out (rows for concat's
    columns, columns for the output's), not grad_out^T @ concat.""",
    _mha_source(grad_W_O="flat(grad_out).T @ flat(concat)"), tests=_MHA)

bug("mha_backward_skips_w_o", "multi_head_attention_backward",
    """The output's gradient is split into heads without going back through W_O first: the heads' gradient is
    split_heads(grad_out @ W_O^T).""",
    _mha_source(grad_heads="split_heads(grad_out, n_heads)"), tests=_MHA)

bug("mha_backward_weights_not_transposed", "multi_head_attention_backward",
    """x's gradient multiplies by W_Q, W_K, W_V instead of their transposes: for y = x @ W, dx = dy @ W^T.""",
    _mha_source(grad_x="dQ @ W_Q + dK @ W_K + dV @ W_V"), tests=_MHA)

# ------------------------------------------------------------------------------------------ gradient check
_GC = ("gradient_check_values",)


def _gc_source(numeric="(f_plus - f_minus) / (2 * eps)", error="np.max(np.abs(a - n)) / size",
               inputs="zip(xs, grad)", copies="[np.array(a, dtype=np.float64) for a in inputs]",
               restore="flat[i] = old"):
    return f"""
    def gradient_check(f, inputs, grad, eps=1e-6):
        xs = {copies}
        f_0 = float(f(*xs))
        worst = 0.0
        for x, analytic in {inputs}:
            n = np.zeros(x.shape)
            flat, n_flat = x.reshape(-1), n.reshape(-1)
            for i in range(flat.size):
                old = flat[i]
                flat[i] = old + eps
                f_plus = float(f(*xs))
                flat[i] = old - eps
                f_minus = float(f(*xs))
                {restore}
                n_flat[i] = {numeric}
            a = np.asarray(analytic, dtype=np.float64)
            size = max(np.max(np.abs(a)), np.max(np.abs(n)), 1e-12)
            worst = max(worst, float({error}))
        return worst
    """


bug("gc_forward_difference", "gradient_check",
    """The numeric gradient is one-sided, (f(x + eps) - f(x)) / eps, which is off by O(eps); the central
    difference (f(x + eps) - f(x - eps)) / (2 eps) is off by O(eps^2).""",
    _gc_source(numeric="(f_plus - f_0) / eps"), tests=_GC)

bug("gc_absolute_error", "gradient_check",
    """The error is absolute, max|analytic - numeric|, not relative: the same mistake then looks 1000 times
    bigger in a loss 1000 times bigger. Divide by the largest magnitude of the two gradients.""",
    _gc_source(error="np.max(np.abs(a - n))"), tests=_GC)

bug("gc_per_entry_relative", "gradient_check",
    """The error is relative entry by entry, |a - n| / max(|a|, |n|), not relative to the whole gradient's size:
    a small entry then weighs as much as the largest, and an entry that is exactly 0 divides rounding noise by
    (almost) 0.""",
    _gc_source(error="np.max(np.abs(a - n) / np.maximum(np.maximum(np.abs(a), np.abs(n)), 1e-12))"), tests=_GC)

_GC_NAN = """A gradient holding NaN or inf gives a small error instead of nan: Python's max drops a NaN as soon as it
    is compared with a number (max(worst, err) at once, max(err, worst) at the next input). Collect each input's
    error and return np.max of them, which keeps the NaN."""

bug("gc_max_drops_nan", "gradient_check", _GC_NAN, _gc_source(), tests=_GC)

bug("gc_max_keeps_nan_only_last", "gradient_check", _GC_NAN,
    _gc_source().replace("worst = max(worst, float({error}))".format(error="np.max(np.abs(a - n)) / size"),
                         "worst = max(float(np.max(np.abs(a - n)) / size), worst)"), tests=_GC)

bug("gc_first_input_only", "gradient_check",
    """Only the first input is checked: return the largest error over every input and its gradient.""",
    _gc_source(inputs="zip(xs[:1], grad[:1])"), tests=_GC)

bug("gc_perturbs_inputs", "gradient_check",
    """The caller's own arrays are moved and moved back by adding eps again, which leaves them slightly changed
    (x + eps - 2 eps + eps is not always x in floating point), and a float32 input cannot even hold a step of
    1e-6. Perturb float64 copies, np.array(a, dtype=np.float64), and put each entry back by assigning the saved
    value.""",
    _gc_source(copies="list(inputs)", restore="flat[i] = flat[i] + eps"), tests=_GC)

# ---------------------------------------------------------------------------------------------- positions
_PE = ("positions_values",)


def _pe_source(body):
    return f"""
    def sinusoidal_positions(T, d_model):
        t = np.arange(T)[:, None]
{body}
    """


bug("positions_sines_then_cosines", "sinusoidal_positions",
    """All the sines come first and all the cosines after; the paper interleaves them: sine in column 2i, cosine in
    column 2i + 1, one pair per frequency.""",
    _pe_source("""        freq = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
        return np.concatenate([np.sin(t * freq), np.cos(t * freq)], axis=1)"""), tests=_PE)

bug("positions_cos_sin_swapped", "sinusoidal_positions",
    """Cosine and sine are swapped: the paper puts the sine in the even columns 2i and the cosine in the odd
    columns 2i + 1.""",
    _pe_source("""        freq = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
        pe = np.zeros((T, d_model))
        pe[:, 0::2] = np.cos(t * freq)
        pe[:, 1::2] = np.sin(t * freq)
        return pe"""), tests=_PE)

bug("positions_frequency_per_column", "sinusoidal_positions",
    """Every column gets its own frequency, 10000^(-j/d_model) for column j; in the paper the two columns of a pair
    share one, 10000^(-2i/d_model), so that each pair is a rotation by a fixed angle per step.""",
    _pe_source("""        freq = 10000.0 ** (-np.arange(d_model) / d_model)
        pe = np.sin(t * freq)
        pe[:, 1::2] = np.cos(t * freq)[:, 1::2]
        return pe"""), tests=_PE)

bug("positions_exponent_without_two", "sinusoidal_positions",
    """The exponent is i/d_model for pair i instead of 2i/d_model: the frequencies fall only to 10000^(-1/2) = 0.01
    instead of about 1/10000.""",
    _pe_source("""        freq = 10000.0 ** (-np.arange(d_model // 2) / d_model)
        pe = np.zeros((T, d_model))
        pe[:, 0::2] = np.sin(t * freq)
        pe[:, 1::2] = np.cos(t * freq)
        return pe"""), tests=_PE)
