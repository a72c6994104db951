"""Correct alternatives of lesson 07: the backward pass of attention, the gradient check, sinusoidal positions."""

from autograder.alternatives import declarer

alternative = declarer(__name__)

# ------------------------------------------------------------------------------------------- softmax_jacobian
alternative("softmax_jacobian_eye_broadcast", "softmax_jacobian",
            """p_j (delta_ij - p_i) by broadcasting: a column of p times (an identity of p's dtype minus a row of
            p)""",
            """
            def softmax_jacobian(p):
                \"\"\"J[j, i] = dp_j / ds_i for one row of weights p = softmax(s), shape (T_k,) -> (T_k, T_k).\"\"\"
                p = np.asarray(p)
                eye = np.eye(p.shape[0], dtype=p.dtype)  # (T_k, T_k) delta_ij, in p's dtype: float32 stays float32
                return p[:, None] * (eye - p[None, :])  # (T_k, 1) * ((T_k, T_k) - (1, T_k)) -> (T_k, T_k)
            """)

alternative("softmax_jacobian_loop_checked", "softmax_jacobian",
            """two loops over j and i with the two cases of the derivation written out, and a check that raises on
            anything but one row""",
            """
            def softmax_jacobian(p):
                \"\"\"J[j, i] = dp_j / ds_i for one row of weights p = softmax(s), shape (T_k,) -> (T_k, T_k).\"\"\"
                p = np.asarray(p)
                if p.ndim != 1:
                    raise ValueError(f"softmax_jacobian takes one row of weights, shape (T_k,), got {p.shape}")
                n = p.shape[0]
                J = np.zeros((n, n), dtype=p.dtype)  # (T_k, T_k)
                for j in range(n):
                    for i in range(n):
                        if i == j:
                            J[j, i] = p[j] * (1 - p[j])  # the diagonal: p_j (1 - p_j)
                        else:
                            J[j, i] = -p[j] * p[i]  # off the diagonal: -p_j p_i
                return J
            """)

alternative("softmax_jacobian_via_backward", "softmax_jacobian",
            """reuses the learner's softmax_backward: column i of J is J applied to the unit vector e_i, all
            columns at once with an identity as the rows' dL/dweights (J is symmetric)""",
            """
            def softmax_jacobian(p):
                \"\"\"J[j, i] = dp_j / ds_i for one row of weights p = softmax(s), shape (T_k,) -> (T_k, T_k).\"\"\"
                p = np.asarray(p)
                n = p.shape[0]
                rows = np.broadcast_to(p, (n, n))  # (T_k, T_k): row k is p
                # row k: p * (e_k - p_k) = column k of diag(p) - p p^T, which is symmetric
                return softmax_backward(rows, np.eye(n, dtype=p.dtype), axis=-1)  # (T_k, T_k)
            """)

# ------------------------------------------------------------------------------------------- softmax_backward
alternative("softmax_backward_einsum_moveaxis", "softmax_backward",
            """the softmax axis moved last, the per-row dot product g . p by einsum, moved back""",
            """
            def softmax_backward(weights, grad_weights, axis=-1):
                \"\"\"dL/dscores from weights = softmax(scores, axis) and dL/dweights (same shape).\"\"\"
                p = np.moveaxis(weights, axis, -1)  # (..., n): the softmax axis last
                g = np.moveaxis(grad_weights, axis, -1)  # (..., n)
                dot = np.einsum("...n,...n->...", g, p)[..., None]  # (..., 1): one g . p per row
                return np.moveaxis(p * (g - dot), -1, axis)  # back to the input's layout
            """)

alternative("softmax_backward_float64_checked", "softmax_backward",
            """p*g minus p times its row sum, computed in float64 and cast back to the input's dtype, with a check
            that raises when the two arrays' shapes differ""",
            """
            def softmax_backward(weights, grad_weights, axis=-1):
                \"\"\"dL/dscores from weights = softmax(scores, axis) and dL/dweights (same shape).\"\"\"
                weights, grad_weights = np.asarray(weights), np.asarray(grad_weights)
                if weights.shape != grad_weights.shape:
                    raise ValueError(f"weights {weights.shape} and grad_weights {grad_weights.shape} need one shape")
                p = weights.astype(np.float64)
                pg = p * grad_weights.astype(np.float64)  # elementwise p_i g_i
                out = pg - p * pg.sum(axis=axis, keepdims=True)  # p_i g_i - p_i sum_j g_j p_j
                return out.astype(np.result_type(weights, grad_weights))
            """)

# --------------------------------------------------------------------------------------------- gradient_check
alternative("gradient_check_ndindex_explicit_nan", "gradient_check",
            """np.ndindex over each input's entries, the numeric gradient filled entry by entry; a non-finite
            gradient or loss returns nan explicitly, and the largest error is kept with a loop""",
            """
            def gradient_check(f, inputs, grad, eps=1e-6):
                \"\"\"Largest relative error of the analytic gradients `grad` against central differences of f.\"\"\"
                xs = [np.array(a, dtype=np.float64) for a in inputs]  # float64 copies: the caller's arrays stay
                worst = 0.0
                for x, analytic in zip(xs, grad):
                    analytic = np.array(analytic, dtype=np.float64)
                    numeric = np.empty_like(x)
                    for index in np.ndindex(x.shape):
                        old = x[index]
                        x[index] = old + eps
                        f_plus = float(f(*xs))
                        x[index] = old - eps
                        f_minus = float(f(*xs))
                        x[index] = old  # put it back exactly
                        numeric[index] = (f_plus - f_minus) / (2 * eps)
                    if not (np.all(np.isfinite(analytic)) and np.all(np.isfinite(numeric))):
                        return float("nan")  # NaN or inf somewhere: never a small error
                    size = max(np.abs(analytic).max(), np.abs(numeric).max(), 1e-12)
                    err = float(np.abs(analytic - numeric).max() / size)
                    if err > worst:
                        worst = err
                return worst
            """)

alternative("gradient_check_new_arrays_checked", "gradient_check",
            """each perturbed input is a new array (x + eps e_i from an identity row) instead of an entry moved and
            put back; the errors collected in a list and their maximum taken with np.max (a NaN stays); raises when
            inputs and gradients do not pair up""",
            """
            def gradient_check(f, inputs, grad, eps=1e-6):
                \"\"\"Largest relative error of the analytic gradients `grad` against central differences of f.\"\"\"
                if len(inputs) != len(grad):
                    raise ValueError(f"{len(grad)} gradients for {len(inputs)} inputs: give one per input")
                xs = [np.array(a, dtype=np.float64) for a in inputs]  # float64 copies
                errors = []
                for k, (x, analytic) in enumerate(zip(xs, grad)):
                    analytic = np.asarray(analytic, dtype=np.float64)
                    if analytic.shape != x.shape:
                        raise ValueError(f"gradient {k} has shape {analytic.shape}, its input {x.shape}")
                    numeric = np.zeros(x.size)
                    for i, e in enumerate(np.eye(x.size)):
                        step = (eps * e).reshape(x.shape)  # one entry moved, the same shape as x
                        plus = xs[:k] + [x + step] + xs[k + 1:]
                        minus = xs[:k] + [x - step] + xs[k + 1:]
                        numeric[i] = (float(f(*plus)) - float(f(*minus))) / (2 * eps)
                    numeric = numeric.reshape(x.shape)  # (x.size,) -> x's shape
                    size = np.max([np.abs(analytic).max(), np.abs(numeric).max(), 1e-12])  # np.max keeps a NaN
                    errors.append(np.abs(analytic - numeric).max() / size)
                return float(np.max(errors)) if errors else 0.0
            """)

# ------------------------------------------------------------------------------------- attention_row_backward
alternative("row_backward_reuses_forward_einsum", "attention_row_backward",
            """the weights from the given scaled_dot_product_attention on q as a one-query matrix, then einsum for
            every product and the learner's softmax_backward""",
            """
            def attention_row_backward(q, K, V, grad_out):
                \"\"\"(dq, dK, dV) of one query's attention o = softmax(K q / sqrt(d_k)) V, given dL/do (d_v,).\"\"\"
                d_k = q.shape[-1]
                _, weights = scaled_dot_product_attention(q[None, :], K, V)  # q as (1, d_k): weights (1, T_k)
                p = weights[0]  # (T_k,)
                dV = np.einsum("j,v->jv", p, grad_out)  # (T_k, d_v): row j is p_j g
                ds = softmax_backward(p, np.einsum("jv,v->j", V, grad_out))  # (T_k,)
                dq = np.einsum("j,jk->k", ds, K) / math.sqrt(d_k)  # (d_k,)
                dK = np.einsum("j,k->jk", ds, q) / math.sqrt(d_k)  # (T_k, d_k)
                return dq, dK, dV
            """)

alternative("row_backward_jacobian", "attention_row_backward",
            """the score gradient through the learner's softmax_jacobian (J^T g, as step 3 says gives the right
            numbers for one row), multiplications by broadcasting instead of outer products""",
            """
            def attention_row_backward(q, K, V, grad_out):
                \"\"\"(dq, dK, dV) of one query's attention o = softmax(K q / sqrt(d_k)) V, given dL/do (d_v,).\"\"\"
                scale = math.sqrt(q.shape[-1])
                p = softmax(K @ q / scale)  # (T_k,)
                dV = p[:, None] * grad_out[None, :]  # (T_k, 1) * (1, d_v) -> (T_k, d_v)
                dp = V @ grad_out  # (T_k,): g . v_j for each key
                ds = softmax_jacobian(p).T @ dp  # (T_k, T_k) @ (T_k,) -> (T_k,)
                dq = (ds[:, None] * K).sum(axis=0) / scale  # sum_j ds_j k_j: (d_k,)
                dK = ds[:, None] * q[None, :] / scale  # (T_k, 1) * (1, d_k) -> (T_k, d_k)
                return dq, dK, dV
            """)

alternative("row_backward_key_loop_float64", "attention_row_backward",
            """float64 inside and cast back to q's dtype, a loop over the keys for dV, dK and dq, the softmax's
            gradient written inline""",
            """
            def attention_row_backward(q, K, V, grad_out):
                \"\"\"(dq, dK, dV) of one query's attention o = softmax(K q / sqrt(d_k)) V, given dL/do (d_v,).\"\"\"
                dtype = np.result_type(q, K, V, grad_out)
                q64, K64, V64, g64 = (np.asarray(a, dtype=np.float64) for a in (q, K, V, grad_out))
                scale = math.sqrt(q64.shape[0])
                p = softmax(K64 @ q64 / scale)  # (T_k,)
                dp = V64 @ g64  # (T_k,)
                ds = p * (dp - np.dot(p, dp))  # (T_k,)
                dq = np.zeros_like(q64)  # (d_k,)
                dK = np.zeros_like(K64)  # (T_k, d_k)
                dV = np.zeros_like(V64)  # (T_k, d_v)
                for j in range(K64.shape[0]):
                    dV[j] = p[j] * g64
                    dK[j] = ds[j] * q64 / scale
                    dq += ds[j] * K64[j] / scale
                return dq.astype(dtype), dK.astype(dtype), dV.astype(dtype)
            """)

# ------------------------------------------------------------------------------------------ attention_backward
alternative("attention_backward_einsum", "attention_backward",
            """einsum for every product, which names the summed axis instead of transposing; the learner's
            softmax_backward""",
            """
            def scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None):
                \"\"\"(dQ, dK, dV) of softmax(Q K^T / sqrt(d_k)) V, given the forward pass's weights and dL/dout.\"\"\"
                scale = math.sqrt(Q.shape[-1])
                dV = np.einsum("...qk,...qv->...kv", weights, grad_out)  # (..., T_k, d_v): summed over queries
                dP = np.einsum("...qv,...kv->...qk", grad_out, V)  # (..., T_q, T_k)
                dS = softmax_backward(weights, dP)  # (..., T_q, T_k)
                dQ = np.einsum("...qk,...kd->...qd", dS, K) / scale  # (..., T_q, d_k)
                dK = np.einsum("...qk,...qd->...kd", dS, Q) / scale  # (..., T_k, d_k): summed over queries
                return dQ, dK, dV
            """)

alternative("attention_backward_loop_masked", "attention_backward",
            """a loop over every leading index (np.ndindex) with 2-D products and .T inside it, the score gradient
            set to 0 on blocked pairs explicitly through the mask, and a check that raises when the weights do
            not have the scores' shape""",
            """
            def scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None):
                \"\"\"(dQ, dK, dV) of softmax(Q K^T / sqrt(d_k)) V, given the forward pass's weights and dL/dout.\"\"\"
                if weights.shape[-2:] != (Q.shape[-2], K.shape[-2]):
                    raise ValueError(f"weights {weights.shape} should end in (T_q, T_k) = {(Q.shape[-2], K.shape[-2])}")
                scale = math.sqrt(Q.shape[-1])
                dQ, dK, dV = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)
                for lead in np.ndindex(Q.shape[:-2]):  # each (batch, head) pair; () once when unbatched
                    P, G = weights[lead], grad_out[lead]  # (T_q, T_k), (T_q, d_v)
                    dV[lead] = P.T @ G  # (T_k, T_q) @ (T_q, d_v) -> (T_k, d_v)
                    dS = softmax_backward(P, G @ V[lead].T)  # (T_q, T_k)
                    if mask is not None:
                        dS = np.where(mask, 0, dS).astype(dS.dtype)  # blocked pairs: no gradient
                    dQ[lead] = dS @ K[lead] / scale  # (T_q, d_k)
                    dK[lead] = dS.T @ Q[lead] / scale  # (T_k, T_q) @ (T_q, d_k) -> (T_k, d_k)
                return dQ, dK, dV
            """)

alternative("attention_backward_float64", "attention_backward",
            """float64 inside with matmul and swapaxes, the softmax's gradient written inline, every result cast
            back to the inputs' dtype""",
            """
            def scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None):
                \"\"\"(dQ, dK, dV) of softmax(Q K^T / sqrt(d_k)) V, given the forward pass's weights and dL/dout.\"\"\"
                dtype = np.result_type(Q, K, V, weights, grad_out)
                Q, K, V, P, G = (np.asarray(a, dtype=np.float64) for a in (Q, K, V, weights, grad_out))
                dV = np.matmul(np.swapaxes(P, -1, -2), G)  # (..., T_k, d_v)
                dP = np.matmul(G, np.swapaxes(V, -1, -2))  # (..., T_q, T_k)
                dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True))  # (..., T_q, T_k)
                dS = dS / math.sqrt(Q.shape[-1])  # the scale once, on the score gradient
                dQ = np.matmul(dS, K)  # (..., T_q, d_k)
                dK = np.matmul(np.swapaxes(dS, -1, -2), Q)  # (..., T_k, d_k)
                return dQ.astype(dtype), dK.astype(dtype), dV.astype(dtype)
            """)

# ----------------------------------------------------------------------------------------------- mha_backward
alternative("mha_backward_head_loop_slices", "mha_backward",
            """a loop over heads with column slices of the projections instead of split/concat, the learner's
            attention backward per head, the weight gradients by einsum over the flattened rows""",
            """
            def multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None):
                \"\"\"Gradients of multi_head_attention's out w.r.t. x and the four weights, as a dict.\"\"\"
                d_model = x.shape[-1]
                d_head = d_model // n_heads
                Qa, Ka, Va = x @ W_Q, x @ W_K, x @ W_V  # each (..., T, d_model)
                concat = np.zeros_like(Qa)  # (..., T, d_model)
                dQa, dKa, dVa = np.zeros_like(Qa), np.zeros_like(Ka), np.zeros_like(Va)
                grad_concat = grad_out @ W_O.T  # (..., T, d_model)
                for h in range(n_heads):
                    cols = slice(h * d_head, (h + 1) * d_head)  # head h's columns
                    Q, K, V = Qa[..., cols], Ka[..., cols], Va[..., cols]  # each (..., T, d_head)
                    out, weights = scaled_dot_product_attention(Q, K, V, mask)  # (..., T, d_head), (..., T, T)
                    concat[..., cols] = out
                    dQ, dK, dV = scaled_dot_product_attention_backward(Q, K, V, weights, grad_concat[..., cols], mask)
                    dQa[..., cols], dKa[..., cols], dVa[..., cols] = dQ, dK, dV

                def flat(a):  # (..., T, d_model) -> (B*T, d_model): every example's positions as rows
                    return a.reshape(-1, d_model)

                return {"x": dQa @ W_Q.T + dKa @ W_K.T + dVa @ W_V.T,
                        "W_Q": np.einsum("nc,no->co", flat(x), flat(dQa)),  # summed over batch and positions
                        "W_K": np.einsum("nc,no->co", flat(x), flat(dKa)),
                        "W_V": np.einsum("nc,no->co", flat(x), flat(dVa)),
                        "W_O": np.einsum("nc,no->co", flat(concat), flat(grad_out))}
            """)

alternative("mha_backward_moveaxis_tensordot", "mha_backward",
            """heads split and merged by reshape and np.moveaxis written out, the weight gradients by tensordot over
            every leading axis, swapaxes for the transposed weights, a check that raises when d_model is not a
            multiple of n_heads""",
            """
            def multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None):
                \"\"\"Gradients of multi_head_attention's out w.r.t. x and the four weights, as a dict.\"\"\"
                *lead, T, d_model = x.shape
                if d_model % n_heads:
                    raise ValueError(f"d_model={d_model} is not a multiple of n_heads={n_heads}")
                d_head = d_model // n_heads

                def split(a):  # (..., T, d_model) -> (..., n_heads, T, d_head)
                    return np.moveaxis(a.reshape(*lead, T, n_heads, d_head), -2, -3)

                def merge(a):  # (..., n_heads, T, d_head) -> (..., T, d_model)
                    return np.moveaxis(a, -3, -2).reshape(*lead, T, d_model)

                def summed(a, b):  # sum over every leading axis and T of a^T b: (d_model, d_model)
                    axes = list(range(a.ndim - 1))
                    return np.tensordot(a, b, axes=(axes, axes))

                Q, K, V = split(x @ W_Q), split(x @ W_K), split(x @ W_V)  # each (..., n_heads, T, d_head)
                heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # (..., n_heads, T, T) weights
                grad_heads = split(grad_out @ np.swapaxes(W_O, 0, 1))  # (..., n_heads, T, d_head)
                dQ, dK, dV = (merge(g) for g in scaled_dot_product_attention_backward(Q, K, V, weights, grad_heads,
                                                                                       mask))  # each (..., T, d_model)
                grad_x = dQ @ np.swapaxes(W_Q, 0, 1) + dK @ np.swapaxes(W_K, 0, 1) + dV @ np.swapaxes(W_V, 0, 1)
                return {"x": grad_x, "W_Q": summed(x, dQ), "W_K": summed(x, dK), "W_V": summed(x, dV),
                        "W_O": summed(merge(heads), grad_out)}
            """)

# --------------------------------------------------------------------------------------- sinusoidal_positions
alternative("positions_stack_interleave", "sinusoidal_positions",
            """the frequencies as exp(-ln(10000) 2i / d_model), sines and cosines stacked on a last axis and
            reshaped so that they interleave""",
            """
            def sinusoidal_positions(T, d_model):
                \"\"\"The paper's sinusoidal position encoding, (T, d_model).\"\"\"
                t = np.arange(T, dtype=np.float64)[:, None]  # (T, 1)
                freq = np.exp(-math.log(10000.0) * np.arange(0, d_model, 2) / d_model)  # (d_model // 2,)
                angles = t * freq  # (T, d_model // 2)
                pairs = np.stack([np.sin(angles), np.cos(angles)], axis=-1)  # (T, d_model // 2, 2): sine, cosine
                return pairs.reshape(T, d_model)  # (T, d_model): sin, cos, sin, cos, ...
            """)

alternative("positions_loop_checked", "sinusoidal_positions",
            """two loops over positions and pairs with math.sin and math.cos, and a check that raises on an odd
            d_model (the lesson's contract: d_model is even)""",
            """
            def sinusoidal_positions(T, d_model):
                \"\"\"The paper's sinusoidal position encoding, (T, d_model).\"\"\"
                if d_model % 2:
                    raise ValueError(f"d_model must be even, got {d_model}")
                pe = np.zeros((T, d_model))  # (T, d_model) float64
                for t in range(T):
                    for i in range(d_model // 2):
                        angle = t / 10000 ** (2 * i / d_model)
                        pe[t, 2 * i] = math.sin(angle)
                        pe[t, 2 * i + 1] = math.cos(angle)
                return pe
            """)

alternative("mha_backward_float64_six_steps", "mha_backward",
            """the hint's six steps in float64 (every input cast up, every gradient cast back to x's dtype), the
            transposed products through np.swapaxes and the weight sums through reshape(-1, d_model)""",
            """
            def multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None):
                \"\"\"Gradients of multi_head_attention's out w.r.t. x and the four weights, as a dict.\"\"\"
                dtype = np.result_type(x, W_Q, W_K, W_V, W_O, grad_out)
                x, W_Q, W_K, W_V, W_O, g = (np.asarray(a, dtype=np.float64) for a in (x, W_Q, W_K, W_V, W_O, grad_out))
                d_model = x.shape[-1]
                Q, K, V = (split_heads(x @ W, n_heads) for W in (W_Q, W_K, W_V))  # each (..., n_heads, T, d_head)
                heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # weights (..., n_heads, T, T)
                C = concat_heads(heads).reshape(-1, d_model)  # (B*T, d_model)
                g_rows = g.reshape(-1, d_model)  # (B*T, d_model)
                grads = {"W_O": np.swapaxes(C, 0, 1) @ g_rows}  # 1. (d_model, B*T) @ (B*T, d_model)
                dC = g @ np.swapaxes(W_O, 0, 1)  # 2. (..., T, d_model)
                d_heads = split_heads(dC, n_heads)  # 3. (..., n_heads, T, d_head)
                dQ, dK, dV = (concat_heads(d) for d in  # 4. each back to (..., T, d_model)
                              scaled_dot_product_attention_backward(Q, K, V, weights, d_heads, mask))
                x_rows = np.swapaxes(x.reshape(-1, d_model), 0, 1)  # (d_model, B*T)
                for name, d in (("W_Q", dQ), ("W_K", dK), ("W_V", dV)):  # 5.
                    grads[name] = x_rows @ d.reshape(-1, d_model)
                grads["x"] = sum(d @ np.swapaxes(W, 0, 1) for d, W in ((dQ, W_Q), (dK, W_K), (dV, W_V)))  # 6.
                return {k: v.astype(dtype) for k, v in grads.items()}
            """)
