"""Catalogued learner bugs of lesson 09, its block: layer norm and its backward pass, GELU's and the MLP's backward
passes, cross-entropy, the embedding's backward pass and a whole block's (sampling, generation and the tools that
take a model apart: ``lesson09_model.py``)."""

import math  # noqa: F401 - used inside the bug sources' namespace

import numpy as np  # noqa: F401

from autograder.bugs import declarer

bug = declarer(__name__)

# ------------------------------------------------------------------------------------------------ layer norm
_LN = ("layer_norm_values",)


def _ln_source(mean="x.mean(axis=-1, keepdims=True)", var="((x - mean) ** 2).mean(axis=-1, keepdims=True)",
               out="(x - mean) / np.sqrt(var + eps) * gamma + beta"):
    return f"""
    def layer_norm(x, gamma, beta, eps=1e-5):
        x = np.asarray(x)
        mean = {mean}
        var = {var}
        return {out}
    """


bug("layer_norm_no_eps", "layer_norm",
    """The variance is used without eps: a row whose entries are (almost) equal has a variance near 0, and dividing
    by its square root blows up or gives NaN. Add eps to the variance before taking the square root.""",
    _ln_source(out="(x - mean) / np.sqrt(var) * gamma + beta"), tests=_LN)

bug("layer_norm_unbiased_variance", "layer_norm",
    """The variance is the unbiased one (divided by d_model - 1): layer norm, as in PyTorch and GPT-2, uses the
    biased variance, the plain mean of the squared deviations (divided by d_model).""",
    _ln_source(var="x.var(axis=-1, ddof=1, keepdims=True)"), tests=_LN)

bug("layer_norm_wrong_axis", "layer_norm",
    """The mean and variance are taken over the first axis (down the columns, across positions or examples)
    instead of the last: layer norm normalises each token vector on its own, over its d_model features.""",
    _ln_source(mean="x.mean(axis=0, keepdims=True)", var="((x - mean) ** 2).mean(axis=0, keepdims=True)"),
    tests=_LN)

bug("layer_norm_whole_array_stats", "layer_norm",
    """One mean and one variance are taken over the whole array: each token vector (each row along the last axis)
    gets its own mean and variance, so that every row comes out with mean 0 and variance 1 before the scale and
    shift.""",
    _ln_source(mean="x.mean()", var="x.var()"), tests=_LN)

bug("layer_norm_gamma_beta_swapped", "layer_norm",
    """gamma and beta are swapped: gamma is the scale (it multiplies the normalised row), beta the shift (it is
    added after).""",
    _ln_source(out="(x - mean) / np.sqrt(var + eps) * beta + gamma"), tests=_LN)

bug("layer_norm_eps_outside_sqrt", "layer_norm",
    """eps is added to the standard deviation instead of the variance: the denominator is the square root of
    (variance + eps). The two agree for large variances but not for rows whose variance is close to eps.""",
    _ln_source(out="(x - mean) / (np.sqrt(var) + eps) * gamma + beta"), tests=_LN)

bug("layer_norm_divides_by_variance", "layer_norm",
    """The centred row is divided by the variance instead of the standard deviation (its square root): the result
    does not have variance 1.""",
    _ln_source(out="(x - mean) / (var + eps) * gamma + beta"), tests=_LN)

bug("layer_norm_transposes_to_broadcast", "layer_norm",
    """The mean and variance lose their last axis (no keepdims), and x is transposed so that they broadcast: that
    works for one sequence (T, d_model) only, because a transpose reverses every axis, and on a batch (B, T,
    d_model) the statistics no longer line up with their rows. Keep the reduced axis instead, so each row's
    statistics stay beside that row.""",
    _ln_source(mean="x.mean(axis=-1)", var="x.var(axis=-1)",
               out="((x.T - mean) / np.sqrt(var + eps)).T * gamma + beta"), tests=_LN)

# ------------------------------------------------------------------------------------- layer norm backward
_LNB = ("layer_norm_backward_values",)


def _lnb_source(sigma="np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)", g="grad_out * gamma",
                grad_x="(g - g.mean(axis=-1, keepdims=True) - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) "
                       "/ sigma",
                grad_gamma="(grad_out * x_hat).reshape(rows).sum(axis=0)",
                grad_beta="grad_out.reshape(rows).sum(axis=0)"):
    return f"""
    def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
        x, grad_out = np.asarray(x), np.asarray(grad_out)
        mean = x.mean(axis=-1, keepdims=True)
        sigma = {sigma}
        x_hat = (x - mean) / sigma
        g = {g}
        grad_x = {grad_x}
        rows = (-1, x.shape[-1])
        return grad_x, {grad_gamma}, {grad_beta}
    """


bug("layer_norm_backward_mean_term_sign", "layer_norm_backward",
    """The mean term has the wrong sign: every entry of a row moved the row's mean, which was subtracted, so the
    row's mean of the incoming gradient (times gamma) is subtracted from each entry, not added.""",
    _lnb_source(grad_x="(g + g.mean(axis=-1, keepdims=True) - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) "
                       "/ sigma"), tests=_LNB)

bug("layer_norm_backward_no_x_hat_term", "layer_norm_backward",
    """The term that comes through the variance is missing: every entry of a row also moved the row's variance,
    which divides the whole row. Subtract x_hat times the row's mean of (gradient times x_hat) as well.""",
    _lnb_source(grad_x="(g - g.mean(axis=-1, keepdims=True)) / sigma"), tests=_LNB)

bug("layer_norm_backward_stats_as_constants", "layer_norm_backward",
    """The mean and the standard deviation are treated as constants, so x's gradient is only the incoming one
    (times gamma) divided by sigma: both statistics depend on every entry of the row, which adds a mean term and an
    x_hat term to the gradient.""",
    _lnb_source(grad_x="g / sigma"), tests=_LNB)

bug("layer_norm_backward_no_eps", "layer_norm_backward",
    """The backward pass recomputes the standard deviation without eps: it must divide by the same square root of
    (variance + eps) as the forward pass did, or the gradient is not the forward pass's (and blows up on rows of
    nearly equal entries).""",
    _lnb_source(sigma="np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True))"), tests=_LNB)

bug("layer_norm_backward_params_summed_over_first_axis", "layer_norm_backward",
    """gamma's and beta's gradients are summed over the first axis only: on batched input (B, T, d_model) they keep
    a positions axis. gamma and beta are shared by every example and every position, so sum over every axis but the
    last.""",
    _lnb_source(grad_gamma="(grad_out * x_hat).sum(axis=0)", grad_beta="grad_out.sum(axis=0)"), tests=_LNB)

bug("layer_norm_backward_forgets_gamma", "layer_norm_backward",
    """x's gradient forgets gamma: the output is x_hat times gamma, so the gradient reaching x_hat is the incoming
    gradient times gamma, entry by entry, before it goes back through the normalisation.""",
    _lnb_source(g="grad_out"), tests=_LNB)

bug("layer_norm_backward_grad_gamma_from_x", "layer_norm_backward",
    """gamma's gradient multiplies the incoming gradient by the raw x: gamma multiplies the normalised row x_hat,
    so its gradient is the sum of the incoming gradient times x_hat.""",
    _lnb_source(grad_gamma="(grad_out * x).reshape(rows).sum(axis=0)"), tests=_LNB)

bug("layer_norm_backward_not_divided_by_sigma", "layer_norm_backward",
    """x's gradient is not divided by sigma: x_hat is (x - mean) / sigma, so every path from x to x_hat passes
    through that division, and the whole bracket is divided by sigma.""",
    _lnb_source(grad_x="g - g.mean(axis=-1, keepdims=True) - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)"),
    tests=_LNB)

# ------------------------------------------------------------------------------------------ GELU backward
_GELU = ("gelu_backward_values",)


def _gelu_source(slope="0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * c * (1 + 3 * 0.044715 * x ** 2)",
                 out="grad_out * slope"):
    return f"""
    def gelu_backward(x, grad_out):
        x = np.asarray(x)
        c = math.sqrt(2.0 / math.pi)
        t = np.tanh(c * (x + 0.044715 * x ** 3))
        slope = {slope}
        return {out}
    """


bug("gelu_backward_no_inner_chain", "gelu_backward",
    """The chain rule stops at the tanh: its argument is c (x + 0.044715 x^3), whose derivative is
    c (1 + 3 * 0.044715 x^2), not c alone. Multiply by the derivative of the inner polynomial too.""",
    _gelu_source(slope="0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * c"), tests=_GELU)

bug("gelu_backward_cubic_coefficient", "gelu_backward",
    """The derivative of 0.044715 x^3 is taken as 0.044715 x^2: differentiating x^3 brings down a factor 3, so the
    inner polynomial's derivative is 1 + 3 * 0.044715 x^2.""",
    _gelu_source(slope="0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * c * (1 + 0.044715 * x ** 2)"), tests=_GELU)

bug("gelu_backward_tanh_derivative", "gelu_backward",
    """The derivative of tanh(u) is taken as 1 - tanh(u): it is 1 - tanh(u)^2 (sech^2 u).""",
    _gelu_source(slope="0.5 * (1 + t) + 0.5 * x * (1 - t) * c * (1 + 3 * 0.044715 * x ** 2)"), tests=_GELU)

bug("gelu_backward_no_product_rule", "gelu_backward",
    """Only the tanh factor is differentiated: GELU is 0.5 x times (1 + tanh(...)), a product, so its derivative
    also has the term 0.5 (1 + tanh(...)) from differentiating the 0.5 x in front.""",
    _gelu_source(slope="0.5 * x * (1 - t ** 2) * c * (1 + 3 * 0.044715 * x ** 2)"), tests=_GELU)

bug("gelu_backward_exact_erf", "gelu_backward",
    """This is the derivative of the exact GELU, x Phi(x) with the normal distribution's erf: the lesson's gelu is
    GPT-2's tanh form, and the backward pass must differentiate the function the forward pass computed (the two
    differ by up to about 1e-3).""",
    """
    def gelu_backward(x, grad_out):
        x = np.asarray(x)
        cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        pdf = np.exp(-0.5 * x ** 2) / math.sqrt(2 * math.pi)
        return grad_out * (cdf + x * pdf)
    """, tests=_GELU)

bug("gelu_backward_relu_step", "gelu_backward",
    """The slope is ReLU's step, 1 for positive x and 0 otherwise: GELU is smooth, its slope goes gradually from 0
    to 1 (and dips slightly below 0 near x = -0.75). Differentiate the tanh form.""",
    """
    def gelu_backward(x, grad_out):
        x = np.asarray(x)
        return grad_out * (x > 0)
    """, tests=_GELU)

bug("gelu_backward_returns_slope", "gelu_backward",
    """The slope of GELU at x is returned as it is: the chain rule multiplies it, entry by entry, by the incoming
    gradient grad_out.""",
    _gelu_source(out="slope"), tests=_GELU)

# ------------------------------------------------------------------------------------------- MLP backward
_MLP = ("mlp_backward_values",)


def _mlp_source(grad_hidden="grad_out @ W_2.T", grad_pre="gelu_backward(pre, grad_hidden)",
                grad_x="grad_pre @ W_1.T", grad_W_1="flat(x).T @ flat(grad_pre)", grad_b_1="flat(grad_pre).sum(axis=0)",
                grad_W_2="flat(hidden).T @ flat(grad_out)", grad_b_2="flat(grad_out).sum(axis=0)"):
    return f"""
    def mlp_backward(x, W_1, b_1, W_2, b_2, grad_out):
        x, grad_out = np.asarray(x), np.asarray(grad_out)
        flat = lambda a: a.reshape(-1, a.shape[-1])
        pre = x @ W_1 + b_1
        hidden = gelu(pre)
        grad_hidden = {grad_hidden}
        grad_pre = {grad_pre}
        return {{"x": {grad_x}, "W_1": {grad_W_1}, "b_1": {grad_b_1}, "W_2": {grad_W_2}, "b_2": {grad_b_2}}}
    """


bug("mlp_backward_gelu_at_output", "mlp_backward",
    """GELU's derivative is taken at its output instead of its input: the slope belongs to the point GELU was
    applied at, the pre-activation x W_1 + b_1.""",
    _mlp_source(grad_pre="gelu_backward(hidden, grad_hidden)"), tests=_MLP)

bug("mlp_backward_skips_gelu", "mlp_backward",
    """The gradient goes from the hidden layer straight to W_1, b_1 and x without passing back through GELU: the
    hidden layer is GELU of the pre-activation, so multiply by GELU's slope at the pre-activation first.""",
    _mlp_source(grad_pre="grad_hidden"), tests=_MLP)

bug("mlp_backward_w1_from_grad_hidden", "mlp_backward",
    """W_1's gradient uses the gradient of the hidden layer (after GELU) instead of the pre-activation's (before
    GELU): W_1 produces the pre-activation, so its gradient pairs x with the pre-activation's gradient.""",
    _mlp_source(grad_W_1="flat(x).T @ flat(grad_hidden)"), tests=_MLP)

bug("mlp_backward_w2_from_pre_activation", "mlp_backward",
    """W_2's gradient pairs the output's gradient with the pre-activation: W_2 multiplies the hidden layer, GELU's
    output, so that is what its gradient pairs with.""",
    _mlp_source(grad_W_2="flat(pre).T @ flat(grad_out)"), tests=_MLP)

bug("mlp_backward_bias_not_summed", "mlp_backward",
    """The biases' gradients keep one row per position: a bias is added at every position (and every example), so
    its gradient is the sum over all of them, of the bias's shape.""",
    _mlp_source(grad_b_1="grad_pre", grad_b_2="grad_out"), tests=_MLP)

bug("mlp_backward_bias_summed_over_first_axis", "mlp_backward",
    """The biases' gradients are summed over the first axis only: on batched input (B, T, d_model) they keep the
    positions axis. Sum over every axis but the last.""",
    _mlp_source(grad_b_1="grad_pre.sum(axis=0)", grad_b_2="grad_out.sum(axis=0)"), tests=_MLP)

bug("mlp_backward_weights_not_summed_over_batch", "mlp_backward",
    """The weights' gradients keep a batch axis (one product per example): a weight is shared by every example and
    every position, so its gradient is the sum over all of them. Flatten every leading axis into one before the
    product.""",
    _mlp_source(grad_W_1="np.swapaxes(x, -1, -2) @ grad_pre", grad_W_2="np.swapaxes(hidden, -1, -2) @ grad_out"),
    tests=_MLP)

bug("mlp_backward_w2_grad_transposed", "mlp_backward",
    """W_2's gradient is transposed, (d_model, d_ff) instead of (d_ff, d_model): for y = h W, W's gradient is h^T
    times y's gradient, and a gradient has the shape of what it is the gradient of.""",
    _mlp_source(grad_W_2="flat(grad_out).T @ flat(hidden)"), tests=_MLP)

bug("mlp_backward_dot_T", "mlp_backward",
    """The weights' gradients transpose the activations with a plain transpose, which reverses every axis: right for
    one sequence (T, d_model), but on a batch (B, T, d_model) the shapes no longer fit. Flatten every leading axis
    into one (all the positions of all the examples as rows) before transposing.""",
    _mlp_source(grad_W_1="x.T @ grad_pre", grad_W_2="hidden.T @ grad_out"), tests=_MLP)

# --------------------------------------------------------------------------------------------- cross-entropy
_CE = ("cross_entropy_values",)


def _ce_source(shift="logits - logits.max(axis=-1, keepdims=True)",
               log_probs="shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))", loss="-picked.sum() / n",
               grad="(probs - one_hot) / n"):
    return f"""
    def cross_entropy(logits, targets):
        logits, targets = np.asarray(logits), np.asarray(targets)
        shifted = {shift}
        log_probs = {log_probs}
        picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
        n = targets.size
        probs = np.exp(log_probs)
        one_hot = np.eye(logits.shape[-1])[targets]
        return float({loss}), ({grad}).astype(logits.dtype)
    """


bug("cross_entropy_grad_not_divided", "cross_entropy",
    """The gradient is not divided by the number of positions: the loss is the mean over every position, so each
    position's share of the gradient is divided by that count too.""",
    _ce_source(grad="probs - one_hot"), tests=_CE)

bug("cross_entropy_grad_sign_flipped", "cross_entropy",
    """The gradient has the wrong sign (one-hot minus probabilities): raising the target's logit lowers the loss,
    so the target's entry of the gradient is negative, and the others, which only take probability away, are
    positive.""",
    _ce_source(grad="(one_hot - probs) / n"), tests=_CE)

bug("cross_entropy_loss_summed", "cross_entropy",
    """The loss is the sum over the positions instead of the mean: it then grows with the batch and the sequence
    length. Divide by the number of positions.""",
    _ce_source(loss="-picked.sum()"), tests=_CE)

bug("cross_entropy_mean_over_vocab", "cross_entropy",
    """The loss is averaged over the vocabulary axis too (the mean of one-hot times the log-probabilities over
    every entry): it is the mean over the positions only of minus the target's log-probability, so divide by the
    number of positions, not by positions times n_vocab.""",
    _ce_source(loss="-(one_hot * log_probs).mean()"), tests=_CE)

bug("cross_entropy_no_max_subtraction", "cross_entropy",
    """The exponentials are taken of the raw logits: logits around 1000 overflow to inf and the loss comes out inf
    or NaN. Subtract each row's largest logit first; the log-probabilities do not change.""",
    _ce_source(shift="logits"), tests=_CE)

bug("cross_entropy_log_of_softmax", "cross_entropy",
    """The log-probabilities are the log of the softmax: when logits are far apart a probability underflows to 0
    and its log is -inf, so the loss comes out inf. Compute them directly as the shifted logits minus the log of
    the sum of their exponentials.""",
    _ce_source(log_probs="np.log(softmax(logits))"), tests=_CE)

bug("cross_entropy_grad_without_one_hot", "cross_entropy",
    """The gradient is the probabilities alone: the loss is minus the target's log-probability, whose derivative
    subtracts 1 at the target's entry (the probabilities minus the one-hot target).""",
    _ce_source(grad="probs / n"), tests=_CE)

# ------------------------------------------------------------------------------------------ embedding backward
_EMB = ("embedding_backward_values",)


def _emb_source(body):
    return f"""
    def embedding_backward(tokens, grad_x, n_vocab):
        tokens, grad_x = np.asarray(tokens), np.asarray(grad_x)
        d_model = grad_x.shape[-1]
{body}
    """


bug("embedding_backward_fancy_index_add", "embedding_backward",
    """A token that appears at several positions collects only one of their gradients: adding through fancy
    indexing writes each row once, the last write winning. Accumulate with an unbuffered add (numpy's add.at) so
    a token seen twice collects twice.""",
    _emb_source("""        grad_E = np.zeros((n_vocab, d_model), dtype=grad_x.dtype)
        grad_E[tokens] += grad_x
        return grad_E"""), tests=_EMB)

bug("embedding_backward_table_per_position", "embedding_backward",
    """The gradient table has one row per position (the number of tokens) instead of one per vocabulary entry: it
    is the gradient of the embedding matrix, (n_vocab, d_model), and row v collects every position whose token
    is v.""",
    _emb_source("""        grad_E = np.zeros((tokens.size, d_model), dtype=grad_x.dtype)
        np.add.at(grad_E, tokens.reshape(-1), grad_x.reshape(-1, d_model))
        return grad_E"""), tests=_EMB)

bug("embedding_backward_sized_by_largest_token", "embedding_backward",
    """The table is sized by the largest token present instead of n_vocab: tokens that do not occur still have a
    row in the embedding matrix, with gradient 0, so the gradient always has n_vocab rows.""",
    _emb_source("""        grad_E = np.zeros((int(tokens.max()) + 1, d_model), dtype=grad_x.dtype)
        np.add.at(grad_E, tokens.reshape(-1), grad_x.reshape(-1, d_model))
        return grad_E"""), tests=_EMB)

bug("embedding_backward_summed_like_a_bias", "embedding_backward",
    """The positions' gradients are summed first, as for a bias, and the total given to every token that occurs:
    a row of the embedding matrix was used only at the positions holding its token, so it collects only their
    gradients.""",
    _emb_source("""        grad_E = np.zeros((n_vocab, d_model), dtype=grad_x.dtype)
        grad_E[np.unique(tokens)] = grad_x.reshape(-1, d_model).sum(axis=0)
        return grad_E"""), tests=_EMB)

bug("embedding_backward_averaged_over_repeats", "embedding_backward",
    """A token seen several times gets the mean of its positions' gradients: each use adds to the loss, so their
    gradients add up (the sum, not the mean).""",
    _emb_source("""        grad_E = np.zeros((n_vocab, d_model), dtype=grad_x.dtype)
        np.add.at(grad_E, tokens.reshape(-1), grad_x.reshape(-1, d_model))
        counts = np.bincount(tokens.reshape(-1), minlength=n_vocab)
        return grad_E / np.maximum(counts, 1)[:, None]"""), tests=_EMB)

bug("embedding_backward_transposed", "embedding_backward",
    """The gradient is transposed, (d_model, n_vocab): the lookup is a one-hot matrix times E, so E's gradient is
    the one-hot matrix transposed times x's gradient, of E's shape (n_vocab, d_model).""",
    _emb_source("""        one_hot = np.eye(n_vocab, dtype=grad_x.dtype)[tokens.reshape(-1)]
        return grad_x.reshape(-1, d_model).T @ one_hot"""), tests=_EMB)

# ------------------------------------------------------------------------------------------- block backward
_BLOCK = ("block_backward_values",)


def _block_source(mlp_in="h2", ln_2_in="x1", grad_x1="grad_out + grad_h2", attention_in="h1", attention_grad="grad_x1",
                  attention_mask="mask", ln_1_in="x", grad_x="grad_x1 + grad_h1"):
    return f"""
    def block_backward(x, block, n_heads, grad_out, mask=None):
        b = block
        x, grad_out = np.asarray(x), np.asarray(grad_out)
        h1 = layer_norm(x, b["gamma_1"], b["beta_1"])
        attended, _ = multi_head_attention(h1, b["W_Q"], b["W_K"], b["W_V"], b["W_O"], n_heads, mask)
        x1 = x + attended
        h2 = layer_norm(x1, b["gamma_2"], b["beta_2"])
        grads = {{}}
        through_mlp = mlp_backward({mlp_in}, b["W_1"], b["b_1"], b["W_2"], b["b_2"], grad_out)
        grad_h2, grads["gamma_2"], grads["beta_2"] = layer_norm_backward({ln_2_in}, b["gamma_2"], through_mlp["x"])
        grad_x1 = {grad_x1}
        through_attention = multi_head_attention_backward({attention_in}, b["W_Q"], b["W_K"], b["W_V"], b["W_O"],
                                                          n_heads, {attention_grad}, {attention_mask})
        grad_h1, grads["gamma_1"], grads["beta_1"] = layer_norm_backward({ln_1_in}, b["gamma_1"],
                                                                         through_attention["x"])
        grads["x"] = {grad_x}
        for key in ("W_Q", "W_K", "W_V", "W_O"):
            grads[key] = through_attention[key]
        for key in ("W_1", "b_1", "W_2", "b_2"):
            grads[key] = through_mlp[key]
        return grads
    """


bug("block_backward_no_residual_at_x1", "block_backward",
    """The residual path is forgotten after the MLP: x1 goes both into the MLP's branch and straight on to the
    output, so its gradient is the output's gradient plus what comes back through the MLP and its layer norm.""",
    _block_source(grad_x1="grad_h2"), tests=_BLOCK)

bug("block_backward_no_residual_at_x", "block_backward",
    """The residual path is forgotten after the attention: x goes both into the attention's branch and straight on
    to x1, so its gradient is x1's gradient plus what comes back through the attention and its layer norm.""",
    _block_source(grad_x="grad_h1"), tests=_BLOCK)

bug("block_backward_no_residuals", "block_backward",
    """Both residual paths are forgotten: where the stream splits (at x into the attention's branch, at x1 into the
    MLP's), the gradient that went straight on adds to the one that came back through the branch.""",
    _block_source(grad_x1="grad_h2", grad_x="grad_h1"), tests=_BLOCK)

bug("block_backward_attention_fed_grad_out", "block_backward",
    """The attention's backward pass is given the output's gradient instead of x1's: it misses the part that came
    back through the MLP's branch. Go backwards in order: the MLP's branch first, then add at x1, then the
    attention.""",
    _block_source(attention_grad="grad_out"), tests=_BLOCK)

bug("block_backward_ln_2_given_its_output", "block_backward",
    """The second layer norm's backward pass is given its own output instead of its input x1: a layer norm's
    backward recomputes the mean and standard deviation of the rows it normalised, so it needs what went in.""",
    _block_source(ln_2_in="h2"), tests=_BLOCK)

bug("block_backward_ln_1_given_its_output", "block_backward",
    """The first layer norm's backward pass is given its own output instead of its input x: a layer norm's backward
    recomputes the mean and standard deviation of the rows it normalised, so it needs what went in.""",
    _block_source(ln_1_in="h1"), tests=_BLOCK)

bug("block_backward_gamma_2_from_block_input", "block_backward",
    """The second layer norm's backward pass is given the block's input x: that layer norm normalises x1, the
    stream after the attention, and its gradients (gamma_2's, beta_2's and x1's) come from x1's rows.""",
    _block_source(ln_2_in="x"), tests=_BLOCK)

bug("block_backward_mlp_fed_the_stream", "block_backward",
    """The MLP's backward pass is given the stream x1 instead of its layer norm's output: in a pre-norm block the
    MLP reads the normalised stream, so its weights' gradients pair with that.""",
    _block_source(mlp_in="x1"), tests=_BLOCK)

bug("block_backward_attention_fed_the_stream", "block_backward",
    """The attention's backward pass is given the block's input x instead of its layer norm's output: in a pre-norm
    block the attention reads the normalised x, so its weights' gradients pair with that.""",
    _block_source(attention_in="x"), tests=_BLOCK)

bug("block_backward_mask_dropped", "block_backward",
    """The mask is not passed to the attention's backward pass: it recomputes unmasked weights, and gradient flows
    into the future positions the forward pass blocked.""",
    _block_source(attention_mask="None"), tests=_BLOCK)
