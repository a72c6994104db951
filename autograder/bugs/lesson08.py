"""Catalogued learner bugs of lesson 08: RoPE, ALiBi, the sliding-window mask, the streaming decoder with
attention sinks, multi-head latent attention (plain and absorbed) and the KV cache count."""

import math  # noqa: F401 - used inside the bug sources' namespace

import numpy as np  # noqa: F401

from autograder.bugs import declarer

bug = declarer(__name__)

# ------------------------------------------------------------------------------------------------------ RoPE
_ROPE = ("rope_values",)


def _rope_source(freq="base ** (-np.arange(0, d_head, 2) / d_head)", angle="positions", turn="a * cos - b * sin, "
                 "a * sin + b * cos", pairs="interleaved", cast=".astype(x.dtype)"):
    return f"""
    def rope(x, positions, base=10000.0, interleaved=True):
        d_head = x.shape[-1]
        freq = {freq}
        angle = np.asarray({angle}, dtype=np.float64)[:, None] * freq
        cos, sin = np.cos(angle){cast}, np.sin(angle){cast}
        if {pairs}:
            a, b = x[..., 0::2], x[..., 1::2]
        else:
            a, b = x[..., :d_head // 2], x[..., d_head // 2:]
        r1, r2 = {turn}
        if not ({pairs}):
            return np.concatenate([r1, r2], axis=-1)
        out = np.empty(x.shape, dtype=r1.dtype)
        out[..., 0::2], out[..., 1::2] = r1, r2
        return out
    """


bug("rope_layouts_swapped", "rope",
    """The two layouts are swapped: with interleaved=True pair i must be columns 2i and 2i + 1 (the paper, GPT-J),
    with interleaved=False columns i and i + d_head/2 (GPT-NeoX, rotate_half). Both keep lengths and look
    plausible, so only which columns turn together tells them apart.""",
    _rope_source(pairs="not interleaved"), tests=_ROPE)

bug("rope_positions_from_one", "rope",
    """The positions are shifted by one (counted from 1): the row at position 0 must not turn at all. Use the
    positions you are given as they are.""",
    _rope_source(angle="np.asarray(positions) + 1"), tests=_ROPE)

bug("rope_exponent_per_pair_index", "rope",
    """The frequencies use the pair index i in the exponent, base^(-i/d_head), instead of base^(-2i/d_head): the
    slowest pair then turns far too fast (base^(-1/2) instead of about 1/base). The exponent is 2i/d_head, i.e. the
    index of the pair's first column over d_head.""",
    _rope_source(freq="base ** (-np.arange(d_head // 2) / d_head)"), tests=_ROPE)

bug("rope_turns_clockwise", "rope",
    """Each pair turns clockwise, by minus the angle: the rotation of (a, b) by phi is (a cos phi - b sin phi,
    a sin phi + b cos phi). Scores would still depend only on the distance, but keys and queries no longer match a
    checkpoint trained with the paper's rotation.""",
    _rope_source(turn="a * cos + b * sin, -a * sin + b * cos"), tests=_ROPE)

bug("rope_float64_cos_sin", "rope",
    """float32 input comes back as float64: the cosines and sines are float64 (the angles are), and multiplying by
    them promotes x. Cast them to x.dtype.""",
    _rope_source(cast=""), tests=_ROPE)

bug("rope_angles_in_float32", "rope",
    """The angles are computed in float32 for float32 input: float32 keeps about 7 significant digits, so far
    into a long context (positions in the hundreds of thousands or millions) an angle of thousands of radians is
    off by thousandths of a radian or more. Compute positions times frequencies in float64 and cast only the
    cosines and sines to x.dtype.""",
    _rope_source(freq="(base ** (-np.arange(0, d_head, 2) / d_head)).astype(x.dtype)").replace(
        "dtype=np.float64", "dtype=x.dtype"), tests=_ROPE)

# ----------------------------------------------------------------------------------------------------- ALiBi
_ALIBI = ("alibi_values",)


def _alibi_source(power="[2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]",
                  other="slopes(c) + slopes(2 * c)[0::2][:n - c]", sign="-", order=""):
    return f"""
    def alibi_bias(n_heads, T):
        def slopes(n):
            if n & (n - 1) == 0:
                return {power}
            c = 2 ** int(math.log2(n))
            return {other}

        t = np.arange(T)
        distance = np.abs(t[:, None] - t[None, :])
        return {sign}np.array(slopes(n_heads){order})[:, None, None] * distance
    """


bug("alibi_slopes_reversed", "alibi_bias",
    """The slopes are in reverse order: head 0 gets the largest slope, 2^(-8/n_heads), and each next head a
    smaller one.""",
    _alibi_source(order="[::-1]"), tests=_ALIBI)

bug("alibi_slopes_start_at_one", "alibi_bias",
    """The slopes start at 2^0 = 1: the paper's geometric sequence starts at 2^(-8/n) and has that same ratio, so
    head h (from 0) has slope 2^(-8(h + 1)/n).""",
    _alibi_source(power="[2.0 ** (-8.0 * h / n) for h in range(n)]",
                  other="[2.0 ** (-8.0 * h / c) for h in range(c)] + "
                        "[2.0 ** (-8.0 * h / (2 * c)) for h in range(2 * c)][0::2][:n - c]"), tests=_ALIBI)

bug("alibi_geometric_for_any_n", "alibi_bias",
    """For a head count that is not a power of 2 the slopes are the plain sequence 2^(-8(h + 1)/n); the paper's
    reference code instead takes the slopes of the closest smaller power of 2, c, then every other slope of 2c
    heads (the 1st, 3rd, ...), n - c of them.""",
    _alibi_source(other="[2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]"), tests=_ALIBI)

bug("alibi_positive_bias", "alibi_bias",
    """The bias is positive, +slope * |i - j|: far keys are then *favoured*. ALiBi penalises distance: the bias
    is -slope * |i - j|.""",
    _alibi_source(sign=""), tests=_ALIBI)

# -------------------------------------------------------------------------------------------- sliding window
_WINDOW = ("window_values",)


def _window_source(blocked):
    return f"""
    def sliding_window_mask(T, window):
        i = np.arange(T)[:, None]
        j = np.arange(T)[None, :]
        return {blocked}
    """


bug("window_one_too_wide", "sliding_window_mask",
    """Each query sees window + 1 keys, from i - window to i: the window counts the query itself, so the oldest
    open key is i - window + 1 and key i - window is blocked.""",
    _window_source("(j > i) | (j < i - window)"), tests=_WINDOW)

bug("window_one_too_narrow", "sliding_window_mask",
    """Each query sees only window - 1 keys: the window counts the query itself and the window - 1 keys before
    it, so key i - window + 1 is still open.""",
    _window_source("(j > i) | (j <= i - window + 1)"), tests=_WINDOW)

bug("window_not_causal", "sliding_window_mask",
    """The window is open on both sides, so a query sees keys after it: a sliding window in a decoder is also
    causal (block j > i).""",
    _window_source("np.abs(i - j) >= window"), tests=_WINDOW)

bug("window_polarity_inverted", "sliding_window_mask",
    """The mask marks the keys a query may see; in this course True marks a *blocked* pair (the convention of
    lesson 06's table), so the open keys must be False.""",
    _window_source("(j <= i) & (j > i - window)"), tests=_WINDOW)

# -------------------------------------------------------------------------------------------- streaming decoder
_STREAM = ("streaming_values",)


def _stream_source(cut, before="cut(cache_k), cut(cache_v)", after="cache_k, cache_v"):
    return f"""
    def streaming_decode(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, n_sink, window):
        def cut(cache):
            T_past = cache.shape[-2]
{cut}
        *lead, T, d_model = x.shape
        d_head = d_model // n_heads
        cache_k = np.zeros((*lead, n_kv_heads, 0, d_head), dtype=x.dtype)
        cache_v = np.zeros((*lead, n_kv_heads, 0, d_head), dtype=x.dtype)
        outs = []
        for t in range(T):
            out_t, cache_k, cache_v = decode_step(x[..., t:t + 1, :], {before}, W_Q, W_K, W_V, W_O, n_heads,
                                                  n_kv_heads)
            cache_k, cache_v = {after}
            outs.append(out_t)
        return np.concatenate(outs, axis=-2), cache_k, cache_v
    """


_CUT = """            if T_past <= n_sink + window - 1:
                return cache
            return np.concatenate([cache[..., :n_sink, :], cache[..., T_past - (window - 1):, :]], axis=-2)"""

bug("stream_sinks_evicted", "streaming_decode",
    """The cache keeps only the most recent tokens: the first n_sink tokens (the attention sinks) are evicted
    with the rest. Keep them for good, and the window's tokens after them.""",
    _stream_source("""            keep = n_sink + window - 1
            return cache[..., max(0, T_past - keep):, :]"""), tests=_STREAM)

bug("stream_window_plus_one", "streaming_decode",
    """Each token sees window + 1 recent tokens: the cache is cut to the sinks and the last `window` tokens
    before the step, and the step then adds the new one. Cut to window - 1, so that with the new token the window
    holds `window`.""",
    _stream_source("""            if T_past <= n_sink + window:
                return cache
            return np.concatenate([cache[..., :n_sink, :], cache[..., T_past - window:, :]], axis=-2)"""),
    tests=_STREAM)

bug("stream_cut_before_full", "streaming_decode",
    """The cache is cut before it is full: while it holds fewer than n_sink + window - 1 tokens, taking its first
    n_sink and its last window - 1 tokens repeats some tokens twice. Cut only a cache that is longer than that.""",
    _stream_source("""            recent = cache[..., max(0, T_past - (window - 1)):, :]
            return np.concatenate([cache[..., :n_sink, :], recent], axis=-2)"""), tests=_STREAM)

bug("stream_cut_wrong_axis", "streaming_decode",
    """The cut counts axes from the front (cache[:, :n_sink]): on a batched cache (B, n_kv_heads, T, d_head) that
    slices the KV heads, not time. Slice the time axis, -2, with cache[..., :n_sink, :].""",
    _stream_source("""            if T_past <= n_sink + window - 1:
                return cache
            return np.concatenate([cache[:, :n_sink], cache[:, T_past - (window - 1):]], axis=1)"""),
    tests=_STREAM)

bug("stream_negative_slice_window_1", "streaming_decode",
    """With window = 1 the cache should keep no recent token (the new one is added by the step), but
    cache[..., -(window - 1):, :] is cache[..., -0:, :], the whole cache. Slice from T_past - (window - 1).""",
    _stream_source("""            if T_past <= n_sink + window - 1:
                return cache
            return np.concatenate([cache[..., :n_sink, :], cache[..., -(window - 1):, :]], axis=-2)"""),
    tests=_STREAM)

# ------------------------------------------------------------------------------------------------------- MLA
_MLA = ("mla_values",)


def _mla_source(k_c="split_heads(c_kv @ W_UK, n_heads)", k_r="rope(x @ W_KR, positions)",
                q_r="rope(split_heads(x @ W_QR, n_heads), positions)", attend="""
        heads, weights = scaled_dot_product_attention(q, k, v, mask)"""):
    return f"""
    def mla_attention(x, W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O, n_heads, mask=None):
        positions = np.arange(x.shape[-2])
        c_kv = x @ W_DKV
        k_c = {k_c}
        v = split_heads(c_kv @ W_UV, n_heads)
        k_r = np.expand_dims({k_r}, -3)
        k_r = np.broadcast_to(k_r, (*k_c.shape[:-1], k_r.shape[-1]))
        q_c = split_heads(x @ W_Q, n_heads)
        q_r = {q_r}
        q, k = np.concatenate([q_c, q_r], axis=-1), np.concatenate([k_c, k_r], axis=-1){attend}
        return concat_heads(heads) @ W_O, weights
    """


bug("mla_scaled_by_d_head", "mla_attention",
    """The scores are divided by sqrt(d_head): each head's query and key are [content, rotary], d_head + d_rope
    numbers wide, and a dot product of that width is divided by sqrt(d_head + d_rope).""",
    _mla_source(attend="""
        scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q_c.shape[-1])
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores)
        heads = weights @ v"""), tests=_MLA)

bug("mla_key_not_rotated", "mla_attention",
    """The shared rotary key part x @ W_KR is not rotated: only the queries' rotary parts carry positions, so the
    score no longer depends on the distance between query and key. Rotate k_R with rope too.""",
    _mla_source(k_r="x @ W_KR"), tests=_MLA)

bug("mla_query_not_rotated", "mla_attention",
    """The queries' rotary parts x @ W_QR are not rotated: RoPE turns both the query and the key, and only then
    does their dot product depend on the distance m - n.""",
    _mla_source(q_r="split_heads(x @ W_QR, n_heads)"), tests=_MLA)

bug("mla_keys_split_without_transpose", "mla_attention",
    """The heads' keys are cut out of c_KV @ W_UK by a bare reshape to (..., n_heads, T, d_head): that mixes
    tokens into heads. Use split_heads (reshape to (..., T, n_heads, d_head), then swap the two middle axes).""",
    _mla_source(k_c="(c_kv @ W_UK).reshape(*x.shape[:-2], n_heads, x.shape[-2], -1)"), tests=_MLA)

# --------------------------------------------------------------------------------------------------- absorbed
_ABSORBED = ("absorbed_values",)


def _absorbed_source(W_UK_h="np.swapaxes(W_UK.reshape(d_c, n_heads, d_head), 0, 1)",
                     W_O_h="W_O.reshape(n_heads, d_head, d_model)", rotary=" + q_r @ np.swapaxes(k, -1, -2)",
                     width="d_head + d_rope", positions="np.arange(T - T_q, T)"):
    return f"""
    def mla_absorbed(x, c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, mask=None):
        T_q, T = x.shape[-2], c_kv.shape[-2]
        positions = {positions}
        d_c, d_model, d_rope = c_kv.shape[-1], x.shape[-1], k_r.shape[-1]
        d_head = W_UK.shape[-1] // n_heads
        c = np.expand_dims(c_kv, -3)
        k = np.expand_dims(k_r, -3)
        W_UK_h = {W_UK_h}
        W_UV_h = np.swapaxes(W_UV.reshape(d_c, n_heads, d_head), 0, 1)
        W_OV = W_UV_h @ {W_O_h}
        q_latent = split_heads(x @ W_Q, n_heads) @ np.swapaxes(W_UK_h, -1, -2)
        q_r = rope(split_heads(x @ W_QR, n_heads), positions)
        scores = (q_latent @ np.swapaxes(c, -1, -2){rotary}) / math.sqrt({width})
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores)
        return np.sum((weights @ c) @ W_OV, axis=-3), weights
    """


bug("absorbed_W_UK_not_transposed", "mla_absorbed",
    """W_UK's per-head blocks are cut by a bare reshape to (n_heads, d_c, d_head): head h's block is its columns
    h*d_head ... (h+1)*d_head - 1, so reshape to (d_c, n_heads, d_head) and then move the head axis to the front.""",
    _absorbed_source(W_UK_h="W_UK.reshape(n_heads, d_c, d_head)"), tests=_ABSORBED)

bug("absorbed_W_O_strided", "mla_absorbed",
    """W_O's per-head blocks are cut as (d_head, n_heads, d_model) with the head axis moved: that gives head h the
    rows h, h + n_heads, ... (strided). Head h's rows of W_O are h*d_head ... (h+1)*d_head - 1: reshape straight to
    (n_heads, d_head, d_model).""",
    _absorbed_source(W_O_h="np.swapaxes(W_O.reshape(d_head, n_heads, d_model), 0, 1)"), tests=_ABSORBED)

bug("absorbed_scaled_by_d_c", "mla_absorbed",
    """The scores are divided by sqrt(d_c), the width of the absorbed dot product. Absorbing W_UK only regroups
    the same products: the scores are still q_h . k_h over d_head + d_rope numbers, divided by
    sqrt(d_head + d_rope).""",
    _absorbed_source(width="d_c"), tests=_ABSORBED)

bug("absorbed_rotary_part_dropped", "mla_absorbed",
    """The scores come from the latent alone: the rotary part q_R . k_R is missing, and with it every position.
    Add it to the content part before the scale.""",
    _absorbed_source(rotary=""), tests=_ABSORBED)

bug("absorbed_queries_from_position_0", "mla_absorbed",
    """The queries are rotated at positions 0 ... T_q - 1. They are the newest T_q of the T cached tokens, at
    positions T - T_q ... T - 1 (in a decoding step, the one query is at T - 1): rotate them there, or their
    rotary scores measure the wrong distances.""",
    _absorbed_source(positions="np.arange(T_q)"), tests=_ABSORBED)

bug("absorbed_builds_cached_keys", "mla_absorbed",
    """Every head's keys and values of the cached tokens are built from the latent (c_KV @ W_UK and c_KV @ W_UV):
    the values are right, but the cache then saves nothing at decode time. Fold W_UK into the query (score
    (q_h W_UK_h^T) . c_j) and W_UV into W_O (mix the latents with the weights, then W_UV_h W_O_h), so nothing
    per head is ever as long as the cache.""",
    """
    def mla_absorbed(x, c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, mask=None):
        T_q, T = x.shape[-2], c_kv.shape[-2]
        positions = np.arange(T - T_q, T)
        k_c = split_heads(c_kv @ W_UK, n_heads)
        v = split_heads(c_kv @ W_UV, n_heads)
        k = np.broadcast_to(np.expand_dims(k_r, -3), (*k_c.shape[:-1], k_r.shape[-1]))
        q = np.concatenate([split_heads(x @ W_Q, n_heads), rope(split_heads(x @ W_QR, n_heads), positions)], axis=-1)
        heads, weights = scaled_dot_product_attention(q, np.concatenate([k_c, k], axis=-1), v, mask)
        return concat_heads(heads) @ W_O, weights
    """, tests=("absorbed_memory",))

# ----------------------------------------------------------------------------------------------- cache counts
_CACHE = ("cache_values",)


def _cache_source(mha="2 * config['n_heads'] * config['d_head']", gqa="2 * config['n_kv_heads'] * config['d_head']",
                  mqa="2 * config['d_head']", mla="config['d_c'] + config['d_rope']", layers="config['n_layers']"):
    return f"""
    def kv_cache_elements_per_token(config):
        per_layer = {{"MHA": lambda: {mha}, "GQA": lambda: {gqa}, "MQA": lambda: {mqa},
                     "MLA": lambda: {mla}}}[config["attention"]]()
        return int(per_layer * {layers})
    """


bug("cache_mla_latent_per_head", "kv_cache_elements_per_token",
    """MLA's latent is counted once per head: one latent c_KV (d_c) and one rotary key (d_rope) per token and
    layer serve every head, for keys and values alike.""",
    _cache_source(mla="config['n_heads'] * (config['d_c'] + config['d_rope'])"), tests=_CACHE)

bug("cache_mla_rotary_key_per_head", "kv_cache_elements_per_token",
    """MLA's rotary key is counted once per head: DeepSeek-V2's decoupled RoPE key k_R is one d_rope-wide vector
    per token, shared by all heads (only the queries have a rotary part per head).""",
    _cache_source(mla="config['d_c'] + config['n_heads'] * config['d_rope']"), tests=_CACHE)

bug("cache_gqa_counts_query_heads", "kv_cache_elements_per_token",
    """GQA is counted with n_heads: only the n_kv_heads key/value heads are cached; the query heads that share them
    cache nothing.""",
    _cache_source(gqa="2 * config['n_heads'] * config['d_head']"), tests=_CACHE)

bug("cache_keys_only", "kv_cache_elements_per_token",
    """MHA, GQA and MQA are counted without the factor 2: every cached head stores a key *and* a value.""",
    _cache_source(mha="config['n_heads'] * config['d_head']", gqa="config['n_kv_heads'] * config['d_head']",
                  mqa="config['d_head']"), tests=_CACHE)

bug("cache_one_layer", "kv_cache_elements_per_token",
    """The count is for one layer: every layer has its own keys and values (or latent), so multiply by
    n_layers.""",
    _cache_source(layers="1"), tests=_CACHE)
