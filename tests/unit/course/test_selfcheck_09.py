"""Lesson 09's self-checks (solutions/selfcheck_09.py): each passes on the reference and fails, with a message that
names the mistake, on wrong versions written here. No kernel: the checks are called directly."""

from __future__ import annotations

import contextlib
import inspect
import io
import math
import types

import numpy as np
import pytest

from autograder import course
from autograder.reference import lesson09 as ref

sc = course.import_selfcheck("selfcheck_09")
SelfCheckFailed = course.import_selfcheck("selfcheck_common").SelfCheckFailed


# ------------------------------------------------------------------------------------------------ wrong versions
def ln_unbiased(x, gamma, beta, eps=1e-5):
    m = x.mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(x.var(axis=-1, ddof=1, keepdims=True) + eps) * gamma + beta


def ln_axis0(x, gamma, beta, eps=1e-5):
    return (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + eps) * gamma + beta


def ln_eps_outside(x, gamma, beta, eps=1e-5):
    m = x.mean(axis=-1, keepdims=True)
    return (x - m) / (x.std(axis=-1, keepdims=True) + eps) * gamma + beta


def ln_eps_ignored(x, gamma, beta, eps=1e-5):
    return ref.layer_norm(x, gamma, beta)


def ln_swapped(x, gamma, beta, eps=1e-5):
    return ref.layer_norm(x, beta, gamma, eps)


def _ln_parts(x, gamma, grad_out, eps):
    sigma = np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    x_hat = (x - x.mean(axis=-1, keepdims=True)) / sigma
    return sigma, x_hat, grad_out * gamma


def lnb_mean_sign(x, gamma, grad_out, eps=1e-5):
    sigma, x_hat, g = _ln_parts(x, gamma, grad_out, eps)
    grad_x = (g + g.mean(axis=-1, keepdims=True) - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) / sigma
    _, grad_gamma, grad_beta = ref.layer_norm_backward(x, gamma, grad_out, eps)
    return grad_x, grad_gamma, grad_beta


def lnb_no_x_hat(x, gamma, grad_out, eps=1e-5):
    sigma, x_hat, g = _ln_parts(x, gamma, grad_out, eps)
    _, grad_gamma, grad_beta = ref.layer_norm_backward(x, gamma, grad_out, eps)
    return (g - g.mean(axis=-1, keepdims=True)) / sigma, grad_gamma, grad_beta


def lnb_first_axis(x, gamma, grad_out, eps=1e-5):
    sigma, x_hat, g = _ln_parts(x, gamma, grad_out, eps)
    grad_x = ref.layer_norm_backward(x, gamma, grad_out, eps)[0]
    return grad_x, (grad_out * x_hat).sum(axis=0), grad_out.sum(axis=0)


def gelu_erf_backward(x, grad_out):
    return grad_out * (0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2))) + x * np.exp(-x * x / 2)
                       / math.sqrt(2 * math.pi))


def gelu_relu_backward(x, grad_out):
    return grad_out * (x > 0)


def gelu_no_product_rule(x, grad_out):
    return grad_out * 0.5 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_float64(x, grad_out):
    return ref.gelu_backward(x, grad_out).astype(np.float64)


def mlp_bias_first_axis(x, W_1, b_1, W_2, b_2, grad_out):
    grads = ref.mlp_backward(x, W_1, b_1, W_2, b_2, grad_out)
    pre = x @ W_1 + b_1
    grads["b_1"] = ref.gelu_backward(pre, grad_out @ W_2.T).sum(axis=0)
    grads["b_2"] = grad_out.sum(axis=0)
    return grads


def mlp_gelu_at_output(x, W_1, b_1, W_2, b_2, grad_out):
    hidden = ref.gelu(x @ W_1 + b_1)
    grad_pre = ref.gelu_backward(hidden, grad_out @ W_2.T)
    grads = ref.mlp_backward(x, W_1, b_1, W_2, b_2, grad_out)
    grads["x"] = grad_pre @ W_1.T
    return grads


def ce_not_divided(logits, targets):
    loss, grad = ref.cross_entropy(logits, targets)
    return loss, grad * targets.size


def ce_no_max(logits, targets):
    p = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    picked = np.take_along_axis(p, targets[..., None], axis=-1)
    return float(-np.log(picked).mean()), ref.cross_entropy(logits, targets)[1]


def ce_float64(logits, targets):
    loss, grad = ref.cross_entropy(logits, targets)
    return loss, grad.astype(np.float64)


def emb_buffered(tokens, grad_x, n_vocab):
    grad_E = np.zeros((n_vocab, grad_x.shape[-1]), dtype=grad_x.dtype)
    grad_E[tokens.reshape(-1)] += grad_x.reshape(-1, grad_x.shape[-1])
    return grad_E


def emb_float64(tokens, grad_x, n_vocab):
    return ref.embedding_backward(tokens, grad_x, n_vocab).astype(np.float64)


def block_no_residual_at_x(x, block, n_heads, grad_out, mask=None):
    grads = ref.block_backward(x, block, n_heads, grad_out, mask)
    grads["x"] = grads["x"] - grad_out
    return grads


def block_no_residual_at_x1(x, block, n_heads, grad_out, mask=None):
    b = block
    h1 = ref.layer_norm(x, b["gamma_1"], b["beta_1"])
    x1 = x + ref.multi_head_attention(h1, b["W_Q"], b["W_K"], b["W_V"], b["W_O"], n_heads, mask)[0]
    h2 = ref.layer_norm(x1, b["gamma_2"], b["beta_2"])
    through_mlp = ref.mlp_backward(h2, b["W_1"], b["b_1"], b["W_2"], b["b_2"], grad_out)
    grad_x1, g2, be2 = ref.layer_norm_backward(x1, b["gamma_2"], through_mlp["x"])  # grad_out's own path dropped
    through = ref.multi_head_attention_backward(h1, b["W_Q"], b["W_K"], b["W_V"], b["W_O"], n_heads, grad_x1, mask)
    grad_h1, g1, be1 = ref.layer_norm_backward(x, b["gamma_1"], through["x"])
    grads = {"x": grad_x1 + grad_h1, "gamma_1": g1, "beta_1": be1, "gamma_2": g2, "beta_2": be2}
    grads.update({k: through[k] for k in ("W_Q", "W_K", "W_V", "W_O")})
    grads.update({k: through_mlp[k] for k in ("W_1", "b_1", "W_2", "b_2")})
    return grads


def block_mask_dropped(x, block, n_heads, grad_out, mask=None):
    return ref.block_backward(x, block, n_heads, grad_out, None)


def _top(logits, temperature, k, drop):
    z = np.asarray(logits, float) / temperature
    if k is not None:
        z = np.where(z >= np.sort(z)[-k - drop], z, -np.inf)
    return z


def sample_k_plus_one(logits, rng, temperature=1.0, top_k=None):
    if temperature == 0:
        return int(np.argmax(logits))
    z = _top(logits, temperature, top_k, 1)
    return int(rng.choice(len(z), p=np.exp(z - z.max()) / np.exp(z - z.max()).sum()))


def sample_multiplied(logits, rng, temperature=1.0, top_k=None):
    if temperature == 0:
        return int(np.argmax(logits))
    return ref.sample_next(np.asarray(logits) * temperature * temperature, rng, temperature, top_k)


def sample_after_softmax(logits, rng, temperature=1.0, top_k=None):
    if temperature == 0:
        return int(np.argmax(logits))
    p = ref.next_token_probabilities(logits, 1.0, top_k) / temperature
    return int(rng.choice(len(p), p=p / p.sum()))


def sample_global(logits, rng, temperature=1.0, top_k=None):
    p = ref.next_token_probabilities(logits, temperature, top_k)
    return int(np.random.choice(len(p), p=p))


def sample_float(logits, rng, temperature=1.0, top_k=None):
    return float(ref.sample_next(logits, rng, temperature, top_k))


def generate_new_only(params, n_heads, prompt, n_new, rng, temperature=1.0, top_k=None):
    return ref.generate(params, n_heads, prompt, n_new, rng, temperature, top_k)[len(prompt):]


def generate_appends_to_prompt(params, n_heads, prompt, n_new, rng, temperature=1.0, top_k=None):
    out = ref.generate(params, n_heads, prompt, n_new, rng, temperature, top_k)
    prompt.extend(out[len(prompt):])
    return prompt


def generate_new_rng(params, n_heads, prompt, n_new, rng, temperature=1.0, top_k=None):
    return ref.generate(params, n_heads, prompt, n_new, np.random.default_rng(), temperature, top_k)


def ablate_strided(heads, n_heads, head):
    heads = np.array(heads)
    heads[..., head::n_heads] = 0
    return heads


def ablate_row(heads, n_heads, head):
    heads = np.array(heads)
    heads[..., head, :] = 0
    return heads


def ablate_in_place(heads, n_heads, head):
    d_head = heads.shape[-1] // n_heads
    heads[..., head * d_head:(head + 1) * d_head] = 0
    return heads


def k_comp_transposed(W_Q, W_K, W_V_prev, W_O_prev, n_heads):
    return ref.k_composition(W_Q, W_K, W_V_prev, W_O_prev, n_heads).T


def k_comp_unnormalised(W_Q, W_K, W_V_prev, W_O_prev, n_heads):
    d_head = W_Q.shape[0] // n_heads
    cols = [slice(h * d_head, (h + 1) * d_head) for h in range(n_heads)]
    return np.array([[np.linalg.norm(W_Q[:, i] @ W_K[:, i].T @ (W_V_prev[:, j] @ W_O_prev[j, :]).T) for j in cols]
                     for i in cols])


# ------------------------------------------------------------------------------------------------------ the checks
CHECKS = {  # check -> the arguments besides the learner's function (the functions the lesson gives)
    "check_layer_norm": (ref.layer_norm, ()),
    "check_layer_norm_backward": (ref.layer_norm_backward, (ref.layer_norm,)),
    "check_gelu_backward": (ref.gelu_backward, ()),
    "check_mlp_backward": (ref.mlp_backward, ()),
    "check_cross_entropy": (ref.cross_entropy, ()),
    "check_embedding_backward": (ref.embedding_backward, ()),
    "check_block_backward": (ref.block_backward, (ref.block_forward,)),
    "check_sample_next": (ref.sample_next, ()),
    "check_generate": (ref.generate, (ref.gpt_logits,)),
    "check_ablate_head": (ref.ablate_head, ()),
    "check_k_composition": (ref.k_composition, ()),
}


@pytest.mark.parametrize("check", CHECKS)
def test_each_check_passes_on_the_reference(check, capsys):
    fn, given = CHECKS[check]
    getattr(sc, check)(fn, *given)
    out = capsys.readouterr().out.strip()
    assert out.startswith("\u2714 " + fn.__name__ + ":") and "\n" not in out, out
    assert "unchanged" in out


WRONG = [
    ("check_layer_norm", ln_unbiased, "unbiased variance \\(ddof=1"),
    ("check_layer_norm", ln_axis0, "columns of the result have mean 0.*axis 0"),
    ("check_layer_norm", ln_eps_outside, "eps belongs inside the square root"),
    ("check_layer_norm", ln_eps_ignored, "`eps` argument is ignored"),
    ("check_layer_norm", ln_swapped, "gamma and beta are swapped"),
    ("check_layer_norm_backward", lnb_mean_sign, "the mean term has the wrong sign"),
    ("check_layer_norm_backward", lnb_no_x_hat, "the x_hat term is missing"),
    ("check_layer_norm_backward", lnb_first_axis, "sum over every leading axis"),
    ("check_gelu_backward", gelu_erf_backward, "exact GELU.*erf"),
    ("check_gelu_backward", gelu_relu_backward, "ReLU's step"),
    ("check_gelu_backward", gelu_no_product_rule, "product rule"),
    ("check_gelu_backward", gelu_float64, "float32"),
    ("check_mlp_backward", mlp_bias_first_axis, "gradient of b_1 .* sums over every leading axis"),
    ("check_mlp_backward", mlp_gelu_at_output, "gradient of x .*at the pre-activation"),
    ("check_cross_entropy", ce_not_divided, "not divided by the number of positions"),
    ("check_cross_entropy", ce_no_max, "exp\\(1000\\) overflows.*largest logit first"),
    ("check_cross_entropy", ce_float64, "float32"),
    ("check_embedding_backward", emb_buffered, "grad_E\\[tokens\\] \\+= grad_x.*np.add.at"),
    ("check_embedding_backward", emb_float64, "float32"),
    ("check_block_backward", block_no_residual_at_x,
     "where the stream splits the gradients add: x's gradient is grad_out plus what comes back through the branch"),
    ("check_block_backward", block_no_residual_at_x1, "through the MLP's branch alone.*x1's gradient is grad_out "
                                                      "plus what comes back through the MLP's branch"),
    ("check_block_backward", block_mask_dropped, "gradients of the block without its mask"),
    ("check_sample_next", sample_k_plus_one, "k\\+1 tokens kept"),
    ("check_sample_next", sample_multiplied, "multiplied instead of divided"),
    ("check_sample_next", sample_after_softmax, "temperature applied after softmax"),
    ("check_sample_next", sample_global, "np.random's global functions"),
    ("check_sample_next", sample_float, "an int"),
    ("check_generate", generate_new_only, "only the new tokens"),
    ("check_generate", generate_appends_to_prompt, "changed the caller's prompt"),
    ("check_generate", generate_new_rng, "seeded alike gave different outputs"),
    ("check_ablate_head", ablate_strided, "`head::n_heads`"),
    ("check_ablate_head", ablate_row, "row 1 \\(a position\\) was zeroed"),
    ("check_ablate_head", ablate_in_place, "changed the heads it was given in place"),
    ("check_k_composition", k_comp_transposed, "transposed \\(\\[j, i\\]\\)"),
    ("check_k_composition", k_comp_unnormalised, "not normalised"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG, ids=[w[1].__name__ for w in WRONG])
def test_each_check_names_a_wrong_version(check, wrong, message):
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SelfCheckFailed, match=message):
        getattr(sc, check)(wrong, *CHECKS[check][1])


def test_the_layer_norm_backward_check_asks_for_layer_norm_first():
    """A right backward pass measured with a wrong layer_norm: the check says to fix layer_norm first."""
    with pytest.raises(SelfCheckFailed, match="fix layer_norm first.*ddof=1"):
        sc.check_layer_norm_backward(ref.layer_norm_backward, ln_unbiased)


def test_a_check_names_the_wrong_function_it_calls():
    """The reference mlp_backward in a notebook whose gelu_backward is the ReLU's step: its check names
    gelu_backward (selfcheck_common.own)."""
    notebook = {"np": np, "gelu": ref.gelu, "gelu_backward": gelu_relu_backward, "_summed_outer": ref._summed_outer}
    exec(compile(inspect.getsource(ref.mlp_backward), "<notebook>", "exec"), notebook)
    with pytest.raises(SelfCheckFailed, match="^This comes from your `gelu_backward`, which mlp_backward calls"):
        sc.check_mlp_backward(notebook["mlp_backward"])


def test_the_sampling_probes_draw_from_one_generator(monkeypatch):
    """sample_probe_with draws n tokens with one generator (ints, other types as returned); sample_probe uses the
    notebook's sample_next."""
    logits = np.array([0.5, 2.0, -1.0, 1.0])
    drawn = sc.sample_probe_with(ref.sample_next)(50, 3, logits, 0.8, 2)
    rng = np.random.default_rng(3)
    assert drawn == [ref.sample_next(logits, rng, 0.8, 2) for _ in range(50)]
    assert all(type(t) is int for t in drawn) and set(drawn) <= {1, 3}
    numpy_ints = sc.sample_probe_with(lambda *a: np.int64(ref.sample_next(*a)))(5, 3, logits, 1.0, None)
    assert all(type(t) is int for t in numpy_ints)
    assert all(type(t) is float for t in sc.sample_probe_with(sample_float)(3, 3, logits, 1.0, None))
    import IPython

    shell = types.SimpleNamespace(user_ns={"sample_next": ref.sample_next})
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    assert sc.sample_probe(50, 3, logits, 0.8, 2) == drawn
    assert {"sample_probe", "sample_probe_with"} <= set(sc.__all__)
