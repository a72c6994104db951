"""Correct alternatives of lesson 08: RoPE, ALiBi, the sliding window, streaming, MLA (plain and absorbed) and the
KV cache's count."""

from autograder.alternatives import declarer

alternative = declarer(__name__)

alternative("rope_complex_numbers", "rope",
            """each column pair as one complex number, turned by multiplying with exp(i angle); the angles in
            float64, the result back in x's dtype""",
            """
            def rope(x, positions, base=10000.0, interleaved=True):
                d_head = x.shape[-1]
                if d_head % 2:
                    raise ValueError("RoPE turns pairs of columns: d_head must be even")
                half = d_head // 2
                angle = np.outer(np.asarray(positions, dtype=np.float64),
                                 base ** (-2.0 * np.arange(half) / d_head))  # (T, d_head/2)
                if interleaved:
                    z = x[..., 0::2] + 1j * x[..., 1::2]
                else:
                    z = x[..., :half] + 1j * x[..., half:]
                turned = z * np.exp(1j * angle)  # (..., T, d_head/2)
                if interleaved:
                    out = np.stack([turned.real, turned.imag], axis=-1).reshape(x.shape)  # pairs side by side
                else:
                    out = np.concatenate([turned.real, turned.imag], axis=-1)
                return out.astype(x.dtype)
            """)

alternative("rope_rotate_half", "rope",
            """x * cos + rotate(x) * sin with the cosines and sines repeated over each pair's two columns, as
            Hugging Face's rotate_half does, for both layouts""",
            """
            def rope(x, positions, base=10000.0, interleaved=True):
                d_head = x.shape[-1]
                inv_freq = 1.0 / base ** (np.arange(0, d_head, 2, dtype=np.float64) / d_head)  # (d_head/2,)
                angle = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]  # (T, d_head/2)
                if interleaved:
                    cos = np.repeat(np.cos(angle), 2, axis=-1).astype(x.dtype)  # (T, d_head): c0 c0 c1 c1 ...
                    sin = np.repeat(np.sin(angle), 2, axis=-1).astype(x.dtype)
                    rotated = np.empty_like(x)
                    rotated[..., 0::2], rotated[..., 1::2] = -x[..., 1::2], x[..., 0::2]
                else:
                    cos = np.concatenate([np.cos(angle)] * 2, axis=-1).astype(x.dtype)  # c0 c1 ... c0 c1 ...
                    sin = np.concatenate([np.sin(angle)] * 2, axis=-1).astype(x.dtype)
                    rotated = np.concatenate([-x[..., d_head // 2:], x[..., :d_head // 2]], axis=-1)
                return x * cos + rotated * sin
            """)

alternative("alibi_closest_power_of_two", "alibi",
            """the slopes as the reference code writes them: the closest power of two below n_heads, then every
            other slope of twice as many heads""",
            """
            def alibi_bias(n_heads, T):
                closest = 2 ** math.floor(math.log2(n_heads))
                start = 2.0 ** (-8.0 / closest)
                slopes = [start ** (h + 1) for h in range(closest)]
                if closest < n_heads:
                    extra = 2.0 ** (-4.0 / closest)  # the start of 2 * closest heads
                    slopes += [extra ** (2 * h + 1) for h in range(n_heads - closest)]
                distance = np.abs(np.subtract.outer(np.arange(T), np.arange(T))).astype(np.float64)  # (T, T)
                return -np.asarray(slopes)[:, None, None] * distance  # (n_heads, T, T)
            """)

alternative("alibi_loops", "alibi",
            """the bias filled entry by entry in a float64 array, the slopes by a recursive rule""",
            """
            def alibi_bias(n_heads, T):
                def slopes(n):
                    if n & (n - 1) == 0:
                        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
                    c = 1 << (n.bit_length() - 1)
                    return slopes(c) + slopes(2 * c)[::2][:n - c]

                m = slopes(n_heads)
                bias = np.zeros((n_heads, T, T), dtype=np.float64)
                for h in range(n_heads):
                    for i in range(T):
                        for j in range(T):
                            bias[h, i, j] = -m[h] * abs(i - j)
                return bias
            """)

alternative("window_tril_triu", "window",
            """the open keys as a band between np.tril and np.triu, the mask its complement""",
            """
            def sliding_window_mask(T, window):
                if window < 1:
                    raise ValueError("a window holds at least the query itself")
                ones = np.ones((T, T), dtype=bool)
                open_keys = np.tril(ones) & np.triu(ones, k=-(window - 1))  # (T, T): j in i - window + 1 .. i
                return ~open_keys
            """)

alternative("window_loops", "window",
            """a loop over queries, each row blocked everywhere and then opened on its window""",
            """
            def sliding_window_mask(T, window):
                mask = np.ones((T, T), dtype=bool)
                for i in range(T):
                    mask[i, max(0, i - window + 1):i + 1] = False
                return mask
            """)

alternative("streaming_index_arrays", "streaming",
            """the tokens the cache keeps chosen as an index array (sinks, then the window's last tokens) and
            taken with np.take""",
            """
            def streaming_decode(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, n_sink, window):
                *lead, T, _ = x.shape
                d_head = W_K.shape[-1] // n_kv_heads
                cache_k = np.zeros((*lead, n_kv_heads, 0, d_head), dtype=x.dtype)  # (..., n_kv_heads, 0, d_head)
                cache_v = np.zeros((*lead, n_kv_heads, 0, d_head), dtype=x.dtype)
                outs = []
                for t in range(T):
                    held = cache_k.shape[-2]
                    keep = np.r_[0:min(n_sink, held), max(n_sink, held - (window - 1)):held]  # sinks, then recent
                    cache_k, cache_v = np.take(cache_k, keep, axis=-2), np.take(cache_v, keep, axis=-2)
                    out_t, cache_k, cache_v = decode_step(x[..., t:t + 1, :], cache_k, cache_v, W_Q, W_K, W_V, W_O,
                                                          n_heads, n_kv_heads)
                    outs.append(out_t)  # (..., 1, d_model)
                return np.concatenate(outs, axis=-2), cache_k, cache_v
            """)

alternative("streaming_sinks_and_recent_apart", "streaming",
            """the sinks and the recent tokens kept as two caches, joined before each step and split again
            after it""",
            """
            def streaming_decode(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, n_sink, window):
                T = x.shape[-2]
                if window < 1 or n_sink < 0:
                    raise ValueError("the window holds at least the new token; n_sink is not negative")
                d_head = W_K.shape[-1] // n_kv_heads
                empty = np.zeros(x.shape[:-2] + (n_kv_heads, 0, d_head), dtype=x.dtype)
                sink_k = sink_v = recent_k = recent_v = empty
                outs = []
                for t in range(T):
                    start = recent_k.shape[-2] - min(recent_k.shape[-2], window - 1)  # the last window - 1 kept
                    k = np.concatenate([sink_k, recent_k[..., start:, :]], axis=-2)
                    v = np.concatenate([sink_v, recent_v[..., start:, :]], axis=-2)
                    out_t, k, v = decode_step(x[..., t:t + 1, :], k, v, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)
                    outs.append(out_t)
                    n = min(n_sink, k.shape[-2])
                    sink_k, sink_v, recent_k, recent_v = k[..., :n, :], v[..., :n, :], k[..., n:, :], v[..., n:, :]
                return np.concatenate(outs, axis=-2), k, v
            """)

alternative("cache_table", "cache",
            """a table of what one layer caches for each kind, looked up, with checks that raise on a GQA
            configuration that splits a group or an unknown kind""",
            """
            def kv_cache_elements_per_token(config):
                kind = config["attention"]
                if kind == "GQA" and config["n_heads"] % config["n_kv_heads"]:
                    raise ValueError("each KV head serves a whole group of query heads")
                per_layer = {
                    "MHA": lambda c: 2 * c["n_heads"] * c["d_head"],
                    "GQA": lambda c: 2 * c["n_kv_heads"] * c["d_head"],
                    "MQA": lambda c: 2 * c["d_head"],
                    "MLA": lambda c: c["d_c"] + c["d_rope"],
                }
                if kind not in per_layer:
                    raise ValueError(f"unknown attention {kind!r}")
                return int(config["n_layers"] * per_layer[kind](config))
            """)

alternative("cache_kv_heads_first", "cache",
            """the number of key/value heads first (MQA one, MHA all, GQA its own), then keys and values""",
            """
            def kv_cache_elements_per_token(config):
                kind, layers = config["attention"], config["n_layers"]
                if kind == "MLA":
                    return int(layers * (config["d_c"] + config["d_rope"]))
                kv_heads = {"MHA": config["n_heads"], "MQA": 1}.get(kind) or config["n_kv_heads"]
                return int(layers * kv_heads * config["d_head"] * 2)
            """)

alternative("mla_einsum", "mla",
            """every product an einsum on (..., T, n_heads, d_head) arrays, the rotary key shared by all heads,
            the scale written out""",
            """
            def mla_attention(x, W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O, n_heads, mask=None):
                T = x.shape[-2]
                positions = np.arange(T)
                d_head, d_rope = W_UK.shape[1] // n_heads, W_KR.shape[1]
                c = x @ W_DKV  # (..., T, d_c)
                k_c = (c @ W_UK).reshape(*c.shape[:-1], n_heads, d_head)  # (..., T, n_heads, d_head)
                v = (c @ W_UV).reshape(*c.shape[:-1], n_heads, d_head)  # (..., T, n_heads, d_head)
                q_c = (x @ W_Q).reshape(*x.shape[:-1], n_heads, d_head)  # (..., T, n_heads, d_head)
                q_r = rope(np.swapaxes((x @ W_QR).reshape(*x.shape[:-1], n_heads, d_rope), -2, -3),
                           positions)  # (..., n_heads, T, d_rope)
                k_r = rope(x @ W_KR, positions)  # (..., T, d_rope): one for every head
                scores = (np.einsum("...thd,...shd->...hts", q_c, k_c)
                          + np.einsum("...htr,...sr->...hts", q_r, k_r)) / math.sqrt(d_head + d_rope)
                if mask is not None:
                    scores = np.where(mask, -np.inf, scores)
                weights = softmax(scores, axis=-1)  # (..., n_heads, T, T)
                heads = np.einsum("...hts,...shd->...thd", weights, v)  # (..., T, n_heads, d_head)
                concat = heads.reshape(*heads.shape[:-2], -1)  # (..., T, n_heads * d_head)
                return concat @ W_O, weights
            """)

alternative("mla_loop_over_heads", "mla",
            """a loop over heads on column slices, each head's query and key joined from its content and rotary
            parts and handed to the lesson's attention; the heads' outputs summed through their rows of W_O""",
            """
            def mla_attention(x, W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O, n_heads, mask=None):
                T = x.shape[-2]
                positions = np.arange(T)
                d_head, d_rope = W_UK.shape[1] // n_heads, W_KR.shape[1]
                c = x @ W_DKV  # (..., T, d_c)
                k_r = rope(x @ W_KR, positions)  # (..., T, d_rope)
                if mask is not None:  # (..., n_heads, T, T): one mask per head
                    mask = np.broadcast_to(mask, np.broadcast_shapes(mask.shape, x.shape[:-2] + (n_heads, T, T)))
                out, weights = 0, []
                for h in range(n_heads):
                    cols, rcols = slice(h * d_head, (h + 1) * d_head), slice(h * d_rope, (h + 1) * d_rope)
                    q = np.concatenate([x @ W_Q[:, cols], rope(x @ W_QR[:, rcols], positions)], axis=-1)
                    k = np.concatenate([c @ W_UK[:, cols], k_r], axis=-1)  # (..., T, d_head + d_rope)
                    o, w = scaled_dot_product_attention(q, k, c @ W_UV[:, cols],
                                                        None if mask is None else mask[..., h, :, :])
                    out = out + o @ W_O[cols]  # (..., T, d_model)
                    weights.append(w)
                return out, np.stack(weights, axis=-3)
            """)

alternative("absorbed_through_attention", "absorbed",
            """the lesson's scaled_dot_product_attention over the shared latent keys (latent and rotary key
            joined), the queries rescaled so its sqrt(width) scale becomes sqrt(d_head + d_rope); W_UV folded
            into W_O""",
            """
            def mla_absorbed(x, c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, mask=None):
                T_q, T = x.shape[-2], c_kv.shape[-2]
                if T_q > T:
                    raise ValueError(f"{T_q} new tokens but only {T} cached: the cache holds them all")
                d_c, d_rope = c_kv.shape[-1], k_r.shape[-1]
                d_head = W_UK.shape[1] // n_heads
                W_UK_h = np.moveaxis(W_UK.reshape(d_c, n_heads, d_head), 1, 0)  # (n_heads, d_c, d_head)
                q_latent = split_heads(x @ W_Q, n_heads) @ np.swapaxes(W_UK_h, -1, -2)  # (..., n_heads, T_q, d_c)
                q_r = rope(split_heads(x @ W_QR, n_heads), np.arange(T - T_q, T))  # (..., n_heads, T_q, d_rope)
                rescale = math.sqrt((d_c + d_rope) / (d_head + d_rope))
                q = np.concatenate([q_latent, q_r], axis=-1) * rescale  # (..., n_heads, T_q, d_c + d_rope)
                keys = np.expand_dims(np.concatenate([c_kv, k_r], axis=-1), -3)  # (..., 1, T, d_c + d_rope)
                c = np.expand_dims(c_kv, -3)  # (..., 1, T, d_c): the values are the latents themselves
                mixed, weights = scaled_dot_product_attention(q, keys, c, mask)  # (..., n_heads, T_q, d_c)
                W_UV_h = np.moveaxis(W_UV.reshape(d_c, n_heads, d_head), 1, 0)  # (n_heads, d_c, d_head)
                W_OV = W_UV_h @ W_O.reshape(n_heads, d_head, -1)  # (n_heads, d_c, d_model)
                return np.sum(mixed @ W_OV, axis=-3), weights
            """)

alternative("absorbed_loop_over_heads", "absorbed",
            """a loop over heads, each with its query projection and W_UK folded into one (d_model, d_c) matrix
            and its W_UV and rows of W_O into one (d_c, d_model) matrix""",
            """
            def mla_absorbed(x, c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, mask=None):
                T_q, T = x.shape[-2], c_kv.shape[-2]
                positions = np.arange(T)[-T_q:]
                d_head, d_rope = W_UK.shape[1] // n_heads, k_r.shape[-1]
                out, weights = 0, []
                for h in range(n_heads):
                    cols, rcols = slice(h * d_head, (h + 1) * d_head), slice(h * d_rope, (h + 1) * d_rope)
                    folded_q = W_Q[:, cols] @ W_UK[:, cols].T  # (d_model, d_c)
                    folded_o = W_UV[:, cols] @ W_O[cols]  # (d_c, d_model)
                    scores = ((x @ folded_q) @ np.swapaxes(c_kv, -1, -2)  # (..., T_q, d_c) @ (..., d_c, T)
                              + rope(x @ W_QR[:, rcols], positions) @ np.swapaxes(k_r, -1, -2))
                    scores = scores / math.sqrt(d_head + d_rope)  # (..., T_q, T)
                    if mask is not None:
                        scores = np.where(mask, -np.inf, scores)
                    w = softmax(scores, axis=-1)
                    out = out + (w @ c_kv) @ folded_o  # (..., T_q, d_model)
                    weights.append(w)
                return out, np.stack(weights, axis=-3)
            """)

alternative("absorbed_einsum", "absorbed",
            """einsum throughout, in float64 inside and cast back to the input's dtype; the heads' blocks of the
            weights named by reshape alone""",
            """
            def mla_absorbed(x, c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, mask=None):
                dtype = x.dtype
                x, c_kv, k_r = (a.astype(np.float64) for a in (x, c_kv, k_r))
                T_q, T = x.shape[-2], c_kv.shape[-2]
                d_c, d_rope = c_kv.shape[-1], k_r.shape[-1]
                d_head = W_UK.shape[1] // n_heads
                uk = W_UK.astype(np.float64).reshape(d_c, n_heads, d_head)  # (d_c, n_heads, d_head)
                uv = W_UV.astype(np.float64).reshape(d_c, n_heads, d_head)  # (d_c, n_heads, d_head)
                o = W_O.astype(np.float64).reshape(n_heads, d_head, -1)  # (n_heads, d_head, d_model)
                q = (x @ W_Q.astype(np.float64)).reshape(*x.shape[:-1], n_heads, d_head)  # (..., T_q, n_heads, d_head)
                q_lat = np.einsum("...thd,chd->...htc", q, uk)  # (..., n_heads, T_q, d_c)
                q_r = rope(split_heads(x @ W_QR.astype(np.float64), n_heads), np.arange(T - T_q, T))
                s = np.einsum("...htc,...sc->...hts", q_lat, c_kv) + np.einsum("...htr,...sr->...hts", q_r, k_r)
                s = s / math.sqrt(d_head + d_rope)  # (..., n_heads, T_q, T)
                if mask is not None:
                    s = np.where(mask, -np.inf, s)
                w = softmax(s, axis=-1)
                mixed = np.einsum("...hts,...sc->...htc", w, c_kv)  # (..., n_heads, T_q, d_c)
                out = np.einsum("...htc,chd,hde->...te", mixed, uv, o)  # (..., T_q, d_model)
                return out.astype(dtype), w.astype(dtype)
            """)
