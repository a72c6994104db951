"""A second, independent implementation of the contract, written differently on purpose: explicit loops over
heads and batch elements, einsum instead of matmul, column slices instead of reshape. The reference is tested
against it, so a mistake would have to be made twice, in two different ways, to go unnoticed."""

import itertools
import math

import numpy as np


def softmax(x, axis=-1):
    x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    out = np.empty_like(x)
    for idx in itertools.product(*map(range, x.shape[:-1])):
        row = x[idx]
        finite = row[np.isfinite(row)]
        if finite.size == 0:
            out[idx] = 0.0
            continue
        e = np.exp(row - finite.max())
        out[idx] = e / e.sum()
    return np.moveaxis(out, -1, axis)


def attention(Q, K, V, mask=None):
    lead = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    T_q, T_k = Q.shape[-2], K.shape[-2]
    Q, K, V = (np.broadcast_to(a, lead + a.shape[-2:]) for a in (Q, K, V))
    m = np.zeros(lead + (T_q, T_k), bool) if mask is None else np.broadcast_to(mask, lead + (T_q, T_k))
    out = np.zeros(lead + (T_q, V.shape[-1]))
    weights = np.zeros(lead + (T_q, T_k))
    for idx in itertools.product(*map(range, lead)):
        scores = np.einsum("qd,kd->qk", Q[idx].astype(float), K[idx].astype(float)) / math.sqrt(Q.shape[-1])
        scores[m[idx]] = -np.inf
        weights[idx] = softmax(scores, axis=-1)
        out[idx] = np.einsum("qk,kv->qv", weights[idx], V[idx].astype(float))
    return out, weights


def split_heads(x, n_heads):
    d_head = x.shape[-1] // n_heads
    return np.stack([x[..., h * d_head:(h + 1) * d_head] for h in range(n_heads)], axis=-3)


def concat_heads(x):
    return np.concatenate([x[..., h, :, :] for h in range(x.shape[-3])], axis=-1)


def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """Per-head loop: each head has its own column slice of W_Q, W_K, W_V and row slice of W_O; the output is
    the sum over heads of head_i @ W_O^i (ARENA's form), not Concat(heads) @ W_O."""
    d_model = x.shape[-1]
    d_head = d_model // n_heads
    out = 0.0
    all_weights = []
    for h in range(n_heads):
        cols = slice(h * d_head, (h + 1) * d_head)
        q = np.einsum("...td,de->...te", x, W_Q[:, cols])
        k = np.einsum("...td,de->...te", x, W_K[:, cols])
        v = np.einsum("...td,de->...te", x, W_V[:, cols])
        head_out, w = attention(q, k, v, mask)
        out = out + np.einsum("...te,ed->...td", head_out, W_O[cols, :])
        all_weights.append(w)
    return out, np.stack(all_weights, axis=-3)


def mha_param_count(d_model, n_heads, bias=False):
    d_head = d_model // n_heads
    per_head = 3 * (d_model * d_head + (d_head if bias else 0))
    return n_heads * per_head + d_model * d_model + (d_model if bias else 0)


# ------------------------------------------------------------------ lesson 07: the backward pass, written differently
def softmax_backward(weights, grad_weights, axis=-1):
    """Builds each row's Jacobian diag(p) - p p^T explicitly (what the lesson says never to do) and applies it."""
    p = np.moveaxis(np.asarray(weights, dtype=np.float64), axis, -1)
    g = np.moveaxis(np.asarray(grad_weights, dtype=np.float64), axis, -1)
    out = np.empty_like(p)
    for idx in itertools.product(*map(range, p.shape[:-1])):
        row = p[idx]
        jacobian = np.diag(row) - np.outer(row, row)  # symmetric: d p_j / d s_i
        out[idx] = jacobian @ g[idx]
    return np.moveaxis(out, -1, axis)


def attention_backward(Q, K, V, weights, grad_out):
    """A loop over the leading axes, einsum for every product, the scale applied to the keys' copy of Q."""
    lead = Q.shape[:-2]
    dQ, dK, dV = (np.zeros(a.shape) for a in (Q, K, V))
    scale = 1 / math.sqrt(Q.shape[-1])
    for idx in itertools.product(*map(range, lead)):
        p, g = weights[idx].astype(float), grad_out[idx].astype(float)
        dV[idx] = np.einsum("qk,qv->kv", p, g)
        dS = softmax_backward(p, np.einsum("qv,kv->qk", g, V[idx].astype(float)))
        dQ[idx] = np.einsum("qk,kd->qd", dS, K[idx].astype(float) * scale)
        dK[idx] = np.einsum("qk,qd->kd", dS, Q[idx].astype(float) * scale)
    return dQ, dK, dV


def _summed(per_example):
    """(..., m, n) -> (m, n): the sum over every leading axis."""
    return per_example.reshape(-1, *per_example.shape[-2:]).sum(axis=0)


def multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None):
    """Per-head loop over column slices (no split/concat): out = sum_h head_h @ W_O[rows of h], so each head's
    gradient is grad_out @ W_O[rows of h]^T and W_O's rows of h get head_h^T @ grad_out."""
    x, grad_out = x.astype(float), grad_out.astype(float)
    d_head = x.shape[-1] // n_heads
    grads = {name: np.zeros(W.shape) for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V), ("W_O", W_O))}
    grads["x"] = np.zeros(x.shape)
    for h in range(n_heads):
        cols = slice(h * d_head, (h + 1) * d_head)
        Ws = {n: W[:, cols].astype(float) for n, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V))}
        q, k, v = (np.einsum("...td,de->...te", x, Ws[n]) for n in ("W_Q", "W_K", "W_V"))
        head, w = attention(q, k, v, mask)
        grads["W_O"][cols, :] = _summed(np.einsum("...te,...td->...ed", head, grad_out))
        grad_head = np.einsum("...td,ed->...te", grad_out, W_O[cols, :].astype(float))
        dq, dk, dv = attention_backward(q, k, v, w, grad_head)
        for n, d in (("W_Q", dq), ("W_K", dk), ("W_V", dv)):
            grads[n][:, cols] = _summed(np.einsum("...td,...te->...de", x, d))
            grads["x"] += np.einsum("...te,de->...td", d, Ws[n])
    return grads


# ------------------------------------------------------------------ lesson 08: today's models, written differently
def rope(x, positions, base=10000.0, interleaved=True):
    """Each column pair as one complex number, multiplied by e^(i * position * theta): RoFormer's equation (34)
    read as a product in the complex plane."""
    x = np.asarray(x, dtype=np.float64)
    d_head = x.shape[-1]
    order = np.r_[0:d_head:2, 1:d_head:2] if interleaved else np.arange(d_head)  # as split halves
    halves = x[..., order]
    z = halves[..., : d_head // 2] + 1j * halves[..., d_head // 2:]
    theta = np.array([base ** (-2 * i / d_head) for i in range(d_head // 2)])
    z = z * np.exp(1j * np.outer(np.asarray(positions, dtype=np.float64), theta))
    turned = np.concatenate([z.real, z.imag], axis=-1)
    out = np.empty_like(turned)
    out[..., order] = turned
    return out


def alibi_slopes(n_heads):
    """The slopes as closed formulas: for c = 2^floor(log2 n), head h < c has 2^(-8(h+1)/c), and the k-th extra
    head (k = 0 .. n-c-1) has slope 2k+1 of 2c heads, 2^(-8(2k+1)/(2c))."""
    c = 1 << (n_heads.bit_length() - 1)
    return [2.0 ** (-8.0 * (h + 1) / c) for h in range(c)] + [2.0 ** (-4.0 * (2 * k + 1) / c)
                                                             for k in range(n_heads - c)]


def alibi_bias(n_heads, T):
    bias = np.zeros((n_heads, T, T))
    for h, m in enumerate(alibi_slopes(n_heads)):
        for i in range(T):
            for j in range(T):
                bias[h, i, j] = -m * abs(i - j)
    return bias


def mla_by_loops(x, W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O, n_heads, mask=None):
    """Multi-head latent attention without absorption, one batch element and one head at a time, keys and values
    of every head built in full, RoPE by complex numbers."""
    x = np.asarray(x, dtype=np.float64)
    lead, (T, d_model) = x.shape[:-2], x.shape[-2:]
    d_head, d_rope = W_UK.shape[1] // n_heads, W_KR.shape[1]
    out = np.zeros(x.shape)
    weights = np.zeros((*lead, n_heads, T, T))
    positions = np.arange(T)
    for idx in itertools.product(*map(range, lead)):
        c = x[idx] @ W_DKV
        k_r = rope(x[idx] @ W_KR, positions)
        for h in range(n_heads):
            cols, rot = slice(h * d_head, (h + 1) * d_head), slice(h * d_rope, (h + 1) * d_rope)
            q = np.concatenate([x[idx] @ W_Q[:, cols], rope(x[idx] @ W_QR[:, rot], positions)], axis=1)
            k = np.concatenate([c @ W_UK[:, cols], k_r], axis=1)
            head, w = attention(q, k, c @ W_UV[:, cols], mask)
            out[idx] += head @ W_O[cols, :]
            weights[idx + (h,)] = w
    return out, weights


# ------------------------------------------------------------------ lesson 09: a small GPT, written differently
def layer_norm(x, gamma, beta, eps=1e-5):
    """Row by row with Python sums: the mean, then the biased variance as the mean squared deviation."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty(x.shape)
    d = x.shape[-1]
    for idx in itertools.product(*map(range, x.shape[:-1])):
        row = [float(v) for v in x[idx]]
        mean = sum(row) / d
        var = sum((v - mean) ** 2 for v in row) / d
        out[idx] = [(v - mean) / math.sqrt(var + eps) * float(g) + float(b) for v, g, b in zip(row, gamma, beta)]
    return out


def layer_norm_jacobian(row, gamma, eps=1e-5):
    """d out_i / d x_j of one row, entry by entry from the quotient rule on (x_i - mean) / sqrt(var + eps):
    gamma_i ((delta_ij - 1/d) / s - (x_i - mean)(x_j - mean) / (d s^3))."""
    row = [float(v) for v in row]
    d = len(row)
    mean = sum(row) / d
    s = math.sqrt(sum((v - mean) ** 2 for v in row) / d + eps)
    J = np.empty((d, d))
    for i in range(d):
        for j in range(d):
            J[i, j] = float(gamma[i]) * (((i == j) - 1 / d) / s - (row[i] - mean) * (row[j] - mean) / (d * s ** 3))
    return J


def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
    """Each row's explicit Jacobian transposed times its grad_out; grad_gamma and grad_beta summed by loops."""
    x, grad_out = np.asarray(x, dtype=np.float64), np.asarray(grad_out, dtype=np.float64)
    d = x.shape[-1]
    grad_x = np.empty(x.shape)
    grad_gamma, grad_beta = np.zeros(d), np.zeros(d)
    x_hat = layer_norm(x, np.ones(d), np.zeros(d), eps)
    for idx in itertools.product(*map(range, x.shape[:-1])):
        grad_x[idx] = layer_norm_jacobian(x[idx], gamma, eps).T @ grad_out[idx]
        grad_gamma += grad_out[idx] * x_hat[idx]
        grad_beta += grad_out[idx]
    return grad_x, grad_gamma, grad_beta


def gelu(x):
    """The tanh form, in float64 or complex (np.tanh takes complex numbers)."""
    x = np.asarray(x)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_derivative(x):
    """GELU's derivative by the complex step: Im gelu(x + ih) / h, exact to rounding for h = 1e-30 (no
    subtraction, so no cancellation), with no formula for the derivative written anywhere."""
    h = 1e-30
    return gelu(np.asarray(x, dtype=np.float64) + 1j * h).imag / h


def mlp_backward(x, W_1, b_1, W_2, b_2, grad_out):
    """Position by position: the Jacobian of the position's output with respect to its input, W_2^T diag(gelu')
    W_1^T, and each weight's gradient as a sum of outer products, all in float64."""
    x, grad_out = np.asarray(x, dtype=np.float64), np.asarray(grad_out, dtype=np.float64)
    W_1, b_1, W_2, b_2 = (np.asarray(a, dtype=np.float64) for a in (W_1, b_1, W_2, b_2))
    grads = {"x": np.empty(x.shape), "W_1": np.zeros(W_1.shape), "b_1": np.zeros(b_1.shape),
             "W_2": np.zeros(W_2.shape), "b_2": np.zeros(b_2.shape)}
    for idx in itertools.product(*map(range, x.shape[:-1])):
        pre = np.einsum("d,df->f", x[idx], W_1) + b_1
        slope = gelu_derivative(pre)
        jacobian = np.einsum("fo,f,df->od", W_2, slope, W_1)  # d out_o / d x_d
        grads["x"][idx] = np.einsum("od,o->d", jacobian, grad_out[idx])
        grad_pre = slope * np.einsum("fo,o->f", W_2, grad_out[idx])
        grads["W_1"] += np.einsum("d,f->df", x[idx], grad_pre)
        grads["b_1"] += grad_pre
        grads["W_2"] += np.einsum("f,o->fo", gelu(pre), grad_out[idx])
        grads["b_2"] += grad_out[idx]
    return grads


def cross_entropy(logits, targets):
    """Position by position with Python floats: log-sum-exp from the row's maximum, the loss summed then averaged;
    the gradient p - one_hot written entry by entry."""
    logits = np.asarray(logits, dtype=np.float64)
    targets = np.asarray(targets)
    grad = np.empty(logits.shape)
    total, n = 0.0, 0
    for idx in itertools.product(*map(range, targets.shape)):
        row = [float(v) for v in logits[idx]]
        top = max(row)
        lse = top + math.log(sum(math.exp(v - top) for v in row))
        t = int(targets[idx])
        total += lse - row[t]
        grad[idx] = [math.exp(v - lse) - (k == t) for k, v in enumerate(row)]
        n += 1
    return total / max(n, 1), grad / max(n, 1)


def embedding_backward(tokens, grad_x, n_vocab):
    """Token kind by token kind: row v is the sum of grad_x over the positions whose token is v (a boolean mask)."""
    tokens, grad_x = np.asarray(tokens), np.asarray(grad_x, dtype=np.float64)
    grad_E = np.zeros((n_vocab, grad_x.shape[-1]))
    for v in range(n_vocab):
        grad_E[v] = grad_x[tokens == v].sum(axis=0)
    return grad_E


def block_forward(x, block, n_heads, mask=None):
    """A pre-norm block from the independent parts: the per-head attention loop, the row-loop layer norm, the MLP
    with einsum."""
    b = {k: np.asarray(v, dtype=np.float64) for k, v in block.items()}
    attended, _ = multi_head_attention(layer_norm(x, b["gamma_1"], b["beta_1"]), b["W_Q"], b["W_K"], b["W_V"],
                                       b["W_O"], n_heads, mask)
    x1 = np.asarray(x, dtype=np.float64) + attended
    hidden = gelu(np.einsum("...d,df->...f", layer_norm(x1, b["gamma_2"], b["beta_2"]), b["W_1"]) + b["b_1"])
    return x1 + np.einsum("...f,fd->...d", hidden, b["W_2"]) + b["b_2"]


def gpt_logits(params, n_heads, tokens):
    """The whole model with no causal mask trusted: each block's output at position s is the last row of the block
    run, unmasked, on the previous layer's states of positions 0 .. s (all that position may see)."""
    tokens = list(np.asarray(tokens))
    states = np.stack([params["E"][tok] + params["P"][s] for s, tok in enumerate(tokens)]).astype(np.float64)
    for block in params["blocks"]:
        states = np.stack([block_forward(states[:s + 1], block, n_heads)[-1] for s in range(len(tokens))])
    return layer_norm(states, params["gamma_f"], params["beta_f"]) @ params["W_U"]


def next_token_probabilities(logits, temperature=1.0, top_k=None):
    """Python's sorted for the top k (the first on a tie, as a stable sort), exp with Python floats."""
    logits = [float(v) for v in logits]
    n = len(logits)
    order = sorted(range(n), key=lambda i: -logits[i])
    if temperature == 0:
        return np.array([1.0 if i == order[0] else 0.0 for i in range(n)])
    kept = order[: n if top_k is None else top_k]
    top = max(logits[i] for i in kept)
    w = {i: math.exp((logits[i] - top) / temperature) for i in kept}
    total = sum(w.values())
    return np.array([w.get(i, 0.0) / total for i in range(n)])


def k_composition(W_Q, W_K, W_V_prev, W_O_prev, n_heads):
    """Each pair of heads' circuits as full (d_model, d_model) matrices summed from rank-one terms, every Frobenius
    norm as sqrt(trace(A A^T))."""
    d_model = W_Q.shape[0]
    d_head = d_model // n_heads

    def fro(A):
        return math.sqrt(np.trace(A @ A.T))

    scores = np.empty((n_heads, n_heads))
    for i in range(n_heads):
        W_QK = sum(np.outer(W_Q[:, c], W_K[:, c]) for c in range(i * d_head, (i + 1) * d_head))
        for j in range(n_heads):
            W_OV = sum(np.outer(W_V_prev[:, c], W_O_prev[c, :]) for c in range(j * d_head, (j + 1) * d_head))
            scores[i, j] = fro(W_QK @ W_OV.T) / (fro(W_QK) * fro(W_OV))
    return scores
