"""Correct alternatives of lesson 09, its block: layer norm, the backward passes of layer norm, GELU, the MLP and a
whole block, cross-entropy and the embedding's backward pass (sampling, generation, ablation and K-composition:
``lesson09_model.py``)."""

from autograder.alternatives import declarer

alternative = declarer(__name__)

# ------------------------------------------------------------------------------------------------ layer_norm
alternative("layer_norm_var_float64", "layer_norm",
            """np.var (the biased variance, ddof=0) in float64 inside, the result cast back to the inputs' dtype""",
            """
            def layer_norm(x, gamma, beta, eps=1e-5):
                \"\"\"Each row of x (..., d_model) to mean 0 and variance 1, then * gamma + beta.\"\"\"
                dtype = np.result_type(x, gamma, beta)
                x64 = np.asarray(x, dtype=np.float64)
                mean = np.mean(x64, axis=-1, keepdims=True)  # (..., 1)
                var = np.var(x64, axis=-1, keepdims=True)  # (..., 1): divides by d_model, as PyTorch
                x_hat = (x64 - mean) / np.sqrt(var + eps)  # (..., d_model)
                return (x_hat * gamma + beta).astype(dtype)
            """)

alternative("layer_norm_row_loop_checked", "layer_norm",
            """a loop over the rows (every leading axis flattened) with math.sqrt per row, and a check that raises
            when gamma or beta is not (d_model,)""",
            """
            def layer_norm(x, gamma, beta, eps=1e-5):
                \"\"\"Each row of x (..., d_model) to mean 0 and variance 1, then * gamma + beta.\"\"\"
                x = np.asarray(x)
                d_model = x.shape[-1]
                if np.shape(gamma) != (d_model,) or np.shape(beta) != (d_model,):
                    raise ValueError(f"gamma and beta must be ({d_model},), got {np.shape(gamma)} and {np.shape(beta)}")
                rows = x.reshape(-1, d_model)  # (N, d_model): every leading axis into one
                out = np.empty(rows.shape, dtype=np.result_type(x, gamma, beta))  # (N, d_model)
                for n in range(rows.shape[0]):
                    centred = rows[n] - rows[n].sum() / d_model
                    sigma = math.sqrt(float((centred * centred).sum()) / d_model + eps)
                    out[n] = centred / sigma * gamma + beta
                return out.reshape(x.shape)  # (N, d_model) -> (..., d_model)
            """)

alternative("layer_norm_second_moment", "layer_norm",
            """the variance as E[x^2] - E[x]^2 by einsum, in float64 (where the subtraction loses nothing that
            matters), multiplied by the reciprocal square root; cast back""",
            """
            def layer_norm(x, gamma, beta, eps=1e-5):
                \"\"\"Each row of x (..., d_model) to mean 0 and variance 1, then * gamma + beta.\"\"\"
                dtype = np.result_type(x, gamma, beta)
                x64 = np.asarray(x, dtype=np.float64)
                d_model = x64.shape[-1]
                mean = np.einsum("...d->...", x64)[..., None] / d_model  # (..., 1)
                second = np.einsum("...d,...d->...", x64, x64)[..., None] / d_model  # (..., 1): E[x^2]
                inv_sigma = 1.0 / np.sqrt(np.maximum(second - mean * mean, 0.0) + eps)  # (..., 1)
                return ((x64 - mean) * inv_sigma * gamma + beta).astype(dtype)
            """)

# --------------------------------------------------------------------------------------- layer_norm_backward
alternative("layer_norm_backward_full_jacobian", "layer_norm_backward",
            """the full Jacobian of x_hat per row, (I - 1/d - x_hat x_hat^T / d) / sigma, applied to
            grad_out * gamma row by row; float64 inside, every result cast back""",
            """
            def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
                \"\"\"(grad_x, grad_gamma, grad_beta) of out = layer_norm(x, gamma, beta, eps), given dL/dout.\"\"\"
                dtype = np.result_type(x, gamma, grad_out)
                x = np.asarray(x, dtype=np.float64)
                d = x.shape[-1]
                rows = x.reshape(-1, d)  # (N, d_model)
                g_rows = np.asarray(grad_out, dtype=np.float64).reshape(-1, d)  # (N, d_model)
                grad_x = np.zeros_like(rows)  # (N, d_model)
                grad_gamma, grad_beta = np.zeros(d), np.zeros(d)
                for n in range(rows.shape[0]):
                    centred = rows[n] - rows[n].mean()
                    sigma = np.sqrt((centred ** 2).mean() + eps)
                    x_hat = centred / sigma  # (d_model,)
                    J = (np.eye(d) - 1.0 / d - np.outer(x_hat, x_hat) / d) / sigma  # (d_model, d_model): dx_hat/dx
                    grad_x[n] = J.T @ (g_rows[n] * gamma)  # (d_model, d_model) @ (d_model,)
                    grad_gamma += g_rows[n] * x_hat
                    grad_beta += g_rows[n]
                return grad_x.reshape(x.shape).astype(dtype), grad_gamma.astype(dtype), grad_beta.astype(dtype)
            """)

alternative("layer_norm_backward_mean_variance_chain", "layer_norm_backward",
            """the chain rule step by step through the variance and the mean (CS231n's staged form): dL/dvar, then
            dL/dmean, then each path into x""",
            """
            def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
                \"\"\"(grad_x, grad_gamma, grad_beta) of out = layer_norm(x, gamma, beta, eps), given dL/dout.\"\"\"
                x, grad_out = np.asarray(x), np.asarray(grad_out)
                d = x.shape[-1]
                mu = x.mean(axis=-1, keepdims=True)  # (..., 1)
                xc = x - mu  # (..., d_model)
                var = (xc ** 2).mean(axis=-1, keepdims=True)  # (..., 1)
                inv_std = 1.0 / np.sqrt(var + eps)  # (..., 1)
                x_hat = xc * inv_std
                dx_hat = grad_out * gamma  # (..., d_model)
                dvar = (dx_hat * xc).sum(axis=-1, keepdims=True) * -0.5 * inv_std ** 3  # (..., 1)
                dmu = (-(dx_hat * inv_std).sum(axis=-1, keepdims=True)  # (..., 1): through x - mean directly
                       + dvar * (-2.0 / d) * xc.sum(axis=-1, keepdims=True))  # and through the variance
                grad_x = dx_hat * inv_std + dvar * 2.0 * xc / d + dmu / d
                lead = tuple(range(x.ndim - 1))  # every leading axis
                return grad_x, (grad_out * x_hat).sum(axis=lead), grad_out.sum(axis=lead)
            """)

alternative("layer_norm_backward_einsum_via_layer_norm", "layer_norm_backward",
            """x_hat from the learner's layer_norm with gamma 1 and beta 0, the closed form with sums instead of
            means, grad_gamma and grad_beta by einsum over the flattened rows, and a check that raises when
            grad_out's shape is not x's""",
            """
            def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
                \"\"\"(grad_x, grad_gamma, grad_beta) of out = layer_norm(x, gamma, beta, eps), given dL/dout.\"\"\"
                x, grad_out = np.asarray(x), np.asarray(grad_out)
                if grad_out.shape != x.shape:
                    raise ValueError(f"grad_out {grad_out.shape} must have x's shape {x.shape}")
                d = x.shape[-1]
                x_hat = layer_norm(x, np.ones(d, dtype=x.dtype), np.zeros(d, dtype=x.dtype), eps)  # (..., d_model)
                sigma = np.sqrt(x.var(axis=-1, keepdims=True) + eps)  # (..., 1)
                g = grad_out * gamma  # (..., d_model)
                sum_g = np.einsum("...d->...", g)[..., None]  # (..., 1)
                sum_gx = np.einsum("...d,...d->...", g, x_hat)[..., None]  # (..., 1)
                grad_x = (d * g - sum_g - x_hat * sum_gx) / (d * sigma)
                g_rows, x_hat_rows = grad_out.reshape(-1, d), x_hat.reshape(-1, d)  # (N, d_model) each
                return grad_x, np.einsum("nd,nd->d", g_rows, x_hat_rows), np.einsum("nd->d", g_rows)
            """)

# ---------------------------------------------------------------------------------------------- gelu_backward
alternative("gelu_backward_sech_float64", "gelu_backward",
            """the product rule with sech^2 = 1 / cosh^2 instead of 1 - tanh^2, in float64 inside, cast back""",
            """
            def gelu_backward(x, grad_out):
                \"\"\"dL/dx of out = gelu(x), given dL/dout, entry by entry.\"\"\"
                dtype = np.result_type(x, grad_out)
                x = np.asarray(x, dtype=np.float64)
                c = math.sqrt(2 / math.pi)
                u = c * (x + 0.044715 * x ** 3)  # the tanh's argument
                du = c * (1 + 3 * 0.044715 * x ** 2)  # its derivative
                slope = 0.5 * (1 + np.tanh(u)) + 0.5 * x * du / np.cosh(u) ** 2
                return (np.asarray(grad_out, dtype=np.float64) * slope).astype(dtype)
            """)

alternative("gelu_backward_sigmoid_form", "gelu_backward",
            """0.5 (1 + tanh u) written as sigmoid(2u), so gelu(x) = x sigmoid(2u) and its derivative
            s + x s (1 - s) 2u'; the sigmoid as exp(-logaddexp(0, -2u)), which never overflows""",
            """
            def gelu_backward(x, grad_out):
                \"\"\"dL/dx of out = gelu(x), given dL/dout, entry by entry.\"\"\"
                x = np.asarray(x)
                c = math.sqrt(2 / math.pi)
                u = c * (x + 0.044715 * x * x * x)
                s = np.exp(-np.logaddexp(0, -2 * u))  # sigmoid(2u) = 0.5 (1 + tanh u)
                slope = s + x * s * (1 - s) * 2 * c * (1 + 0.134145 * x * x)  # 3 * 0.044715 = 0.134145
                return grad_out * slope
            """)

alternative("gelu_backward_checked_inline", "gelu_backward",
            """one expression with the tanh computed once, the constant from np.pi as a Python float, and a check
            that raises when grad_out's shape is not x's""",
            """
            def gelu_backward(x, grad_out):
                \"\"\"dL/dx of out = gelu(x), given dL/dout, entry by entry.\"\"\"
                x, grad_out = np.asarray(x), np.asarray(grad_out)
                if x.shape != grad_out.shape:
                    raise ValueError(f"grad_out {grad_out.shape} must have x's shape {x.shape}")
                k = float(np.sqrt(2 / np.pi))  # a Python float: float32 stays float32
                th = np.tanh(k * (x + 0.044715 * x ** 3))
                return grad_out * (0.5 + 0.5 * th + 0.5 * k * x * (1 - th ** 2) * (1 + 0.134145 * x ** 2))
            """)

# ----------------------------------------------------------------------------------------------- mlp_backward
alternative("mlp_backward_einsum", "mlp_backward",
            """einsum for every product, which names the summed axis instead of transposing; the weights'
            gradients summed over the rows of every leading axis flattened; the learner's gelu_backward""",
            """
            def mlp_backward(x, W_1, b_1, W_2, b_2, grad_out):
                \"\"\"Gradients of mlp's output w.r.t. x, W_1, b_1, W_2, b_2, given dL/dout: a dict.\"\"\"
                pre = np.einsum("...d,df->...f", x, W_1) + b_1  # (..., d_ff)
                grad_hidden = np.einsum("...m,fm->...f", grad_out, W_2)  # (..., d_ff)
                grad_pre = gelu_backward(pre, grad_hidden)  # (..., d_ff)
                d_model, d_ff = W_1.shape
                xs, hs = x.reshape(-1, d_model), gelu(pre).reshape(-1, d_ff)  # (N, d_model), (N, d_ff)
                gs, ps = grad_out.reshape(-1, d_model), grad_pre.reshape(-1, d_ff)  # (N, d_model), (N, d_ff)
                return {"x": np.einsum("...f,df->...d", grad_pre, W_1),
                        "W_1": np.einsum("nd,nf->df", xs, ps),
                        "b_1": np.einsum("nf->f", ps),
                        "W_2": np.einsum("nf,nm->fm", hs, gs),
                        "b_2": np.einsum("nm->m", gs)}
            """)

alternative("mlp_backward_row_loop", "mlp_backward",
            """every leading axis flattened into rows, the weights' gradients as a sum of one outer product per
            row, GELU's derivative written inline""",
            """
            def mlp_backward(x, W_1, b_1, W_2, b_2, grad_out):
                \"\"\"Gradients of mlp's output w.r.t. x, W_1, b_1, W_2, b_2, given dL/dout: a dict.\"\"\"
                x, grad_out = np.asarray(x), np.asarray(grad_out)
                d_model, d_ff = W_1.shape
                xs = x.reshape(-1, d_model)  # (N, d_model)
                gs = grad_out.reshape(-1, d_model)  # (N, d_model)
                c = math.sqrt(2 / math.pi)
                grads = {"x": np.zeros_like(xs), "W_1": np.zeros_like(W_1), "b_1": np.zeros_like(b_1),
                         "W_2": np.zeros_like(W_2), "b_2": np.zeros_like(b_2)}
                for n in range(xs.shape[0]):
                    a = xs[n] @ W_1 + b_1  # (d_ff,)
                    t = np.tanh(c * (a + 0.044715 * a ** 3))
                    h = 0.5 * a * (1 + t)  # gelu(a)
                    dh = W_2 @ gs[n]  # (d_ff, d_model) @ (d_model,) -> (d_ff,)
                    da = dh * (0.5 * (1 + t) + 0.5 * a * (1 - t ** 2) * c * (1 + 3 * 0.044715 * a ** 2))
                    grads["x"][n] = W_1 @ da  # (d_model, d_ff) @ (d_ff,) -> (d_model,)
                    grads["W_1"] += np.outer(xs[n], da)
                    grads["b_1"] += da
                    grads["W_2"] += np.outer(h, gs[n])
                    grads["b_2"] += gs[n]
                grads["x"] = grads["x"].reshape(x.shape)  # (N, d_model) -> (..., d_model)
                return grads
            """)

alternative("mlp_backward_float64_tensordot_checked", "mlp_backward",
            """float64 inside, the weights' gradients by tensordot over every leading axis, .T on the 2-D weights,
            every result cast back to x's dtype, and checks that raise when the weights' shapes do not chain""",
            """
            def mlp_backward(x, W_1, b_1, W_2, b_2, grad_out):
                \"\"\"Gradients of mlp's output w.r.t. x, W_1, b_1, W_2, b_2, given dL/dout: a dict.\"\"\"
                dtype = np.result_type(x, W_1, b_1, W_2, b_2, grad_out)
                x, W_1, b_1, W_2, b_2, g = (np.asarray(a, dtype=np.float64) for a in (x, W_1, b_1, W_2, b_2, grad_out))
                d_model, d_ff = W_1.shape
                if (x.shape[-1], b_1.shape, W_2.shape, b_2.shape) != (d_model, (d_ff,), (d_ff, d_model), (d_model,)):
                    raise ValueError(f"x (..., {x.shape[-1]}), W_1 {W_1.shape}, b_1 {b_1.shape}, W_2 {W_2.shape}, "
                                     f"b_2 {b_2.shape} do not chain as (d_model, d_ff), (d_ff,), (d_ff, d_model), "
                                     "(d_model,)")
                pre = x @ W_1 + b_1  # (..., d_ff)
                grad_pre = gelu_backward(pre, g @ W_2.T)  # (..., d_model) @ (d_model, d_ff) -> (..., d_ff)
                lead = list(range(x.ndim - 1))  # the axes the weights' gradients sum over
                grads = {"x": grad_pre @ W_1.T,  # (..., d_ff) @ (d_ff, d_model) -> (..., d_model)
                         "W_1": np.tensordot(x, grad_pre, axes=(lead, lead)),  # (d_model, d_ff)
                         "b_1": grad_pre.sum(axis=tuple(lead)),
                         "W_2": np.tensordot(gelu(pre), g, axes=(lead, lead)),  # (d_ff, d_model)
                         "b_2": g.sum(axis=tuple(lead))}
                return {k: v.astype(dtype) for k, v in grads.items()}
            """)

# ---------------------------------------------------------------------------------------------- cross_entropy
alternative("cross_entropy_logaddexp_reduce", "cross_entropy",
            """the log-sum-exp by np.logaddexp.reduce (stable without subtracting the maximum) in float64, the
            probabilities as exp(logits - lse), the one-hot subtracted by fancy indexing on flattened rows, the
            gradient cast back to the logits' dtype""",
            """
            def cross_entropy(logits, targets):
                \"\"\"(loss, grad_logits): mean over positions of -log softmax(logits)[target]; its gradient.\"\"\"
                logits, targets = np.asarray(logits), np.asarray(targets)
                if targets.shape != logits.shape[:-1]:
                    raise ValueError(f"targets must have shape {logits.shape[:-1]}, got {targets.shape}")
                n_vocab = logits.shape[-1]
                z = logits.astype(np.float64)  # float32's spacing near 1000 would blur logits - lse
                lse = np.logaddexp.reduce(z, axis=-1, keepdims=True)  # (..., 1): log sum exp
                rows = (z - lse).reshape(-1, n_vocab)  # (N, n_vocab): log-probabilities
                t = targets.reshape(-1)  # (N,)
                N = max(t.size, 1)
                loss = -rows[np.arange(t.size), t].sum() / N
                grad = np.exp(rows)  # (N, n_vocab): probabilities
                grad[np.arange(t.size), t] -= 1
                return float(loss), (grad / N).reshape(logits.shape).astype(logits.dtype)  # back to (..., n_vocab)
            """)

alternative("cross_entropy_row_loop_float64", "cross_entropy",
            """a loop over the positions in float64 with the maximum subtracted per row, the loss summed as a Python
            float, the gradient cast back to the logits' dtype; a check that raises on a target outside the
            vocabulary""",
            """
            def cross_entropy(logits, targets):
                \"\"\"(loss, grad_logits): mean over positions of -log softmax(logits)[target]; its gradient.\"\"\"
                logits = np.asarray(logits)
                n_vocab = logits.shape[-1]
                rows = logits.reshape(-1, n_vocab).astype(np.float64)  # (N, n_vocab)
                targets = np.asarray(targets)
                if targets.shape != logits.shape[:-1]:
                    raise ValueError(f"targets must have shape {logits.shape[:-1]}, got {targets.shape}")
                t = targets.reshape(-1)  # (N,)
                if t.size and (t.min() < 0 or t.max() >= n_vocab):
                    raise ValueError(f"targets must be in 0 .. {n_vocab - 1}")
                N = max(t.size, 1)
                loss = 0.0
                grad = np.zeros_like(rows)  # (N, n_vocab)
                for n in range(rows.shape[0]):
                    m = rows[n].max()
                    log_z = m + math.log(np.exp(rows[n] - m).sum())  # log sum exp, stable
                    loss += log_z - rows[n, t[n]]
                    grad[n] = np.exp(rows[n] - log_z)
                    grad[n, t[n]] -= 1.0
                return float(loss / N), (grad / N).reshape(logits.shape).astype(logits.dtype)  # (..., n_vocab)
            """)

alternative("cross_entropy_softmax_one_hot", "cross_entropy",
            """the learner's softmax for the probabilities, a one-hot from np.eye, the loss from log-probabilities
            computed with the maximum subtracted; targets of the wrong shape raise""",
            """
            def cross_entropy(logits, targets):
                \"\"\"(loss, grad_logits): mean over positions of -log softmax(logits)[target]; its gradient.\"\"\"
                logits, targets = np.asarray(logits), np.asarray(targets)
                if targets.shape != logits.shape[:-1]:
                    raise ValueError(f"targets {targets.shape} must be logits' shape without the last axis, "
                                     f"{logits.shape[:-1]}")
                shifted = logits - np.max(logits, axis=-1, keepdims=True)  # (..., n_vocab)
                log_p = shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))  # (..., n_vocab)
                one_hot = np.eye(logits.shape[-1], dtype=logits.dtype)[targets]  # (..., n_vocab)
                N = max(targets.size, 1)
                loss = -np.sum(one_hot * log_p) / N
                return float(loss), (softmax(logits, axis=-1) - one_hot) / N
            """)

# ------------------------------------------------------------------------------------------- embedding_backward
alternative("embedding_backward_bincount_columns", "embedding_backward",
            """np.bincount per column of grad_x with the tokens as bins and the gradients as weights (a token seen
            twice adds twice), cast back to grad_x's dtype; n_vocab and the tokens checked""",
            """
            def embedding_backward(tokens, grad_x, n_vocab):
                \"\"\"dL/dE (n_vocab, d_model) of x = E[tokens], given dL/dx (..., d_model).\"\"\"
                grad_x = np.asarray(grad_x)
                if not isinstance(n_vocab, (int, np.integer)) or n_vocab <= 0:
                    raise ValueError(f"n_vocab must be a positive integer, got {n_vocab!r}")
                t = np.asarray(tokens).reshape(-1)  # (N,)
                if t.size and (t.min() < 0 or t.max() >= n_vocab):
                    raise ValueError(f"tokens must be in 0 .. {n_vocab - 1}")
                rows = grad_x.reshape(-1, grad_x.shape[-1])  # (N, d_model)
                columns = [np.bincount(t, weights=rows[:, c], minlength=n_vocab) for c in range(rows.shape[1])]
                return np.stack(columns, axis=1).astype(grad_x.dtype)  # (n_vocab, d_model)
            """)

alternative("embedding_backward_position_loop", "embedding_backward",
            """a loop over every position (np.ndindex over the tokens' shape), adding its gradient to its token's
            row""",
            """
            def embedding_backward(tokens, grad_x, n_vocab):
                \"\"\"dL/dE (n_vocab, d_model) of x = E[tokens], given dL/dx (..., d_model).\"\"\"
                tokens, grad_x = np.asarray(tokens), np.asarray(grad_x)
                grad_E = np.zeros((n_vocab, grad_x.shape[-1]), dtype=grad_x.dtype)  # (n_vocab, d_model)
                for index in np.ndindex(tokens.shape):
                    grad_E[tokens[index]] += grad_x[index]
                return grad_E
            """)

alternative("embedding_backward_one_hot_matmul", "embedding_backward",
            """a one-hot matrix of the tokens (N, n_vocab) transposed times the gradients' rows: the sum over
            positions as a matrix product""",
            """
            def embedding_backward(tokens, grad_x, n_vocab):
                \"\"\"dL/dE (n_vocab, d_model) of x = E[tokens], given dL/dx (..., d_model).\"\"\"
                grad_x = np.asarray(grad_x)
                t = np.asarray(tokens).reshape(-1)  # (N,)
                one_hot = (t[:, None] == np.arange(n_vocab)[None, :]).astype(grad_x.dtype)  # (N, n_vocab)
                return one_hot.T @ grad_x.reshape(-1, grad_x.shape[-1])  # (n_vocab, N) @ (N, d_model)
            """)

# --------------------------------------------------------------------------------------------- block_backward
alternative("block_backward_dict_merge", "block_backward",
            """the forward pass through the given functions, each branch's gradients renamed into the result with
            dict comprehensions, the residual additions written as the sum of the two paths""",
            """
            def block_backward(x, block, n_heads, grad_out, mask=None):
                \"\"\"Every gradient of block_forward's out, given dL/dout: {"x", and each key of BLOCK_KEYS}.\"\"\"
                p = block
                a_in = layer_norm(x, p["gamma_1"], p["beta_1"])  # (..., T, d_model)
                x1 = x + multi_head_attention(a_in, p["W_Q"], p["W_K"], p["W_V"], p["W_O"], n_heads, mask)[0]
                m_in = layer_norm(x1, p["gamma_2"], p["beta_2"])  # (..., T, d_model)
                g_mlp = mlp_backward(m_in, p["W_1"], p["b_1"], p["W_2"], p["b_2"], grad_out)
                g_m_in, g_gamma_2, g_beta_2 = layer_norm_backward(x1, p["gamma_2"], g_mlp["x"])
                g_x1 = g_m_in + grad_out  # two paths out of x1
                g_att = multi_head_attention_backward(a_in, p["W_Q"], p["W_K"], p["W_V"], p["W_O"], n_heads, g_x1, mask)
                g_a_in, g_gamma_1, g_beta_1 = layer_norm_backward(x, p["gamma_1"], g_att["x"])
                grads = {k: g_att[k] for k in ("W_Q", "W_K", "W_V", "W_O")}
                grads.update({k: g_mlp[k] for k in ("W_1", "b_1", "W_2", "b_2")})
                grads.update(gamma_1=g_gamma_1, beta_1=g_beta_1, gamma_2=g_gamma_2, beta_2=g_beta_2)
                grads["x"] = g_a_in + g_x1  # two paths out of x
                return grads
            """)

alternative("block_backward_mlp_inline", "block_backward",
            """the MLP's backward pass written inline (the learner's gelu_backward, einsum over the flattened rows
            for the weights' sums), the layer norms' and attention's through the given functions; the mask passed
            by keyword""",
            """
            def block_backward(x, block, n_heads, grad_out, mask=None):
                \"\"\"Every gradient of block_forward's out, given dL/dout: {"x", and each key of BLOCK_KEYS}.\"\"\"
                b = block
                h1 = layer_norm(x, b["gamma_1"], b["beta_1"])
                att, _ = multi_head_attention(h1, b["W_Q"], b["W_K"], b["W_V"], b["W_O"], n_heads, mask=mask)
                x1 = x + att  # (..., T, d_model)
                h2 = layer_norm(x1, b["gamma_2"], b["beta_2"])
                pre = h2 @ b["W_1"] + b["b_1"]  # (..., T, d_ff)
                g_h = grad_out @ b["W_2"].T  # (..., T, d_model) @ (d_model, d_ff) -> (..., T, d_ff)
                g_pre = gelu_backward(pre, g_h)  # (..., T, d_ff)
                d_model, d_ff = b["W_1"].shape
                h2_rows, g_pre_rows = h2.reshape(-1, d_model), g_pre.reshape(-1, d_ff)  # (N, d_model), (N, d_ff)
                hidden_rows, g_rows = gelu(pre).reshape(-1, d_ff), grad_out.reshape(-1, d_model)  # the same
                out = {"W_1": np.einsum("ni,nj->ij", h2_rows, g_pre_rows), "b_1": np.einsum("nj->j", g_pre_rows),
                       "W_2": np.einsum("ni,nj->ij", hidden_rows, g_rows), "b_2": np.einsum("nj->j", g_rows)}
                g_h2 = g_pre @ b["W_1"].T  # (..., T, d_ff) @ (d_ff, d_model) -> (..., T, d_model)
                g_x1_ln, out["gamma_2"], out["beta_2"] = layer_norm_backward(x1, b["gamma_2"], g_h2)
                g_x1 = grad_out + g_x1_ln
                att_grads = multi_head_attention_backward(h1, b["W_Q"], b["W_K"], b["W_V"], b["W_O"], n_heads, g_x1,
                                                          mask=mask)
                g_x_ln, out["gamma_1"], out["beta_1"] = layer_norm_backward(x, b["gamma_1"], att_grads.pop("x"))
                out.update(att_grads)  # W_Q, W_K, W_V, W_O
                out["x"] = g_x1 + g_x_ln
                return out
            """)

alternative("block_backward_float64", "block_backward",
            """the input and every array of the block cast to float64 first, the same chain through the given
            backward passes, every gradient cast back to x's dtype at the end; a check that raises when a key of
            the block is missing""",
            """
            def block_backward(x, block, n_heads, grad_out, mask=None):
                \"\"\"Every gradient of block_forward's out, given dL/dout: {"x", and each key of BLOCK_KEYS}.\"\"\"
                keys = ("gamma_1", "beta_1", "W_Q", "W_K", "W_V", "W_O",
                        "gamma_2", "beta_2", "W_1", "b_1", "W_2", "b_2")
                missing = [k for k in keys if k not in block]
                if missing:
                    raise ValueError(f"the block lacks {missing}")
                dtype = np.asarray(x).dtype
                x, g = np.asarray(x, dtype=np.float64), np.asarray(grad_out, dtype=np.float64)
                b = {k: np.asarray(block[k], dtype=np.float64) for k in keys}
                Ws = (b["W_Q"], b["W_K"], b["W_V"], b["W_O"])
                h1 = layer_norm(x, b["gamma_1"], b["beta_1"])  # (..., T, d_model)
                x1 = x + multi_head_attention(h1, *Ws, n_heads, mask)[0]  # (..., T, d_model)
                h2 = layer_norm(x1, b["gamma_2"], b["beta_2"])
                grads = mlp_backward(h2, b["W_1"], b["b_1"], b["W_2"], b["b_2"], g)
                d_h2 = grads.pop("x")
                d_x1, grads["gamma_2"], grads["beta_2"] = layer_norm_backward(x1, b["gamma_2"], d_h2)
                d_x1 = d_x1 + g  # the residual's path
                grads.update(multi_head_attention_backward(h1, *Ws, n_heads, d_x1, mask))
                d_x, grads["gamma_1"], grads["beta_1"] = layer_norm_backward(x, b["gamma_1"], grads.pop("x"))
                grads["x"] = d_x + d_x1  # the residual's path
                return {k: v.astype(dtype) for k, v in grads.items()}
            """)
