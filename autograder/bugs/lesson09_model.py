"""Catalogued learner bugs of lesson 09, its model: sampling with temperature and top-k, generation with the KV
cache, ablating a head and K-composition (the block's bugs: ``lesson09.py``)."""

import math  # noqa: F401 - used inside the bug sources' namespace

import numpy as np  # noqa: F401

from autograder.bugs import declarer

bug = declarer(__name__)

# ------------------------------------------------------------------------------------------------- sampling
_SAMPLE = ("sample_next_values",)


def _sample_source(zero="if temperature == 0:\n            return int(np.argmax(logits))", z="logits / temperature",
                   kept="np.argsort(z)[-top_k:]", top="masked = np.full_like(z, -np.inf)\n"
                   "            masked[kept] = z[kept]\n            z = masked", probs="softmax(z)",
                   draw="int(rng.choice(len(p), p=p))"):
    return f"""
    def sample_next(logits, rng, temperature=1.0, top_k=None):
        logits = np.asarray(logits, dtype=np.float64)
        {zero}
        z = {z}
        if top_k is not None:
            kept = {kept}
            {top}
        p = {probs}
        return {draw}
    """


# shows with top_k 3 and 5
bug("sample_next_top_k_plus_one", "sample_next",
    """top_k keeps k + 1 tokens: only the k largest logits stay candidates, every other token gets probability
    0.""",
    _sample_source(kept="np.argsort(z)[-top_k - 1:]"), tests=_SAMPLE)

# shows with top_k 3 and 5
bug("sample_next_top_k_smallest", "sample_next",
    """top_k keeps the k smallest logits: the sort is ascending, so the k largest are at its end.""",
    _sample_source(kept="np.argsort(z)[:top_k]"), tests=_SAMPLE)

# shows with top_k 3 and 5
bug("sample_next_ignores_top_k", "sample_next",
    """top_k is ignored: with top_k given, only the k most likely tokens may be drawn, the others get probability
    0.""",
    _sample_source(top=""), tests=_SAMPLE)

# shows with top_k 3 and 5
bug("sample_next_top_k_masked_with_zero", "sample_next",
    """The logits outside the top k are set to 0 instead of minus infinity: a logit of 0 still has probability
    e^0 over the sum, so the other tokens can still be drawn. Give them -inf, whose exponential is exactly 0.""",
    _sample_source(top="z = np.where(np.isin(np.arange(len(z)), kept), z, 0.0)"), tests=_SAMPLE)

# shows with top_k 3 and 5
bug("sample_next_uniform_over_top_k", "sample_next",
    """With top_k, the token is drawn uniformly among the k kept ones: they keep their softmax probabilities
    (renormalised over the k), so a more likely token stays more likely.""",
    _sample_source(top="return int(rng.choice(kept))"), tests=_SAMPLE)

# shows with temperature 0.5 and 1.5
bug("sample_next_temperature_after_softmax", "sample_next",
    """The temperature divides the probabilities after the softmax, and renormalising undoes it: it has no effect.
    Divide the logits by the temperature before the softmax.""",
    _sample_source(z="logits", probs="softmax(z) / temperature", draw="int(rng.choice(len(p), p=p / p.sum()))"),
    tests=_SAMPLE)

# shows with temperature 0.5 and 1.5
bug("sample_next_temperature_multiplied", "sample_next",
    """The logits are multiplied by the temperature instead of divided: a temperature above 1 must flatten the
    distribution (more random) and one below 1 sharpen it.""",
    _sample_source(z="logits * temperature"), tests=_SAMPLE)

# shows in every case (it never uses rng)
bug("sample_next_always_greedy", "sample_next",
    """The largest logit is always taken: sampling draws a token at random, with the generator rng, from the
    softmax of the logits divided by the temperature; only temperature 0 means the largest.""",
    _sample_source(draw="int(np.argmax(p))"), tests=_SAMPLE)

# shows with temperature 0 only (it then draws at temperature 1); on 0.5 and 1.5 it draws as the reference does
bug("sample_next_temperature_zero_as_default", "sample_next",
    """Temperature 0 is replaced by the default 1 (0 is false in Python, so a default given with "or" replaces it):
    temperature 0 means greedy, all the probability on the largest logit. Test for 0 explicitly and return the
    largest logit's index.""",
    _sample_source(zero="temperature = temperature or 1.0"), tests=_SAMPLE)

# ------------------------------------------------------------------------------------------------ generation
_GENERATE = ("generate_values",)


def _generate_source(fill="for token in tokens:\n            logits, cache = model_step(params, n_heads, token, cache)",
                     count="n_new",
                     body="tokens.append(sample_next(logits, rng, temperature, top_k))\n"
                          "            logits, cache = model_step(params, n_heads, tokens[-1], cache)",
                     out="tokens"):
    return f"""
    def generate(params, n_heads, prompt, n_new, rng, temperature=1.0, top_k=None):
        tokens = [int(t) for t in prompt]
        if not tokens:
            raise ValueError("the prompt needs at least one token")
        if len(tokens) + n_new > params["P"].shape[0]:
            raise ValueError("the prompt and the new tokens do not fit in the model's positions")
        cache = empty_cache(params, n_heads)
        {fill}
        for _ in range({count}):
            {body}
        return {out}
    """


bug("generate_returns_new_tokens_only", "generate",
    """Only the new tokens are returned: generate returns the prompt followed by the n_new tokens drawn after it.""",
    _generate_source(out="tokens[len(prompt):]"), tests=_GENERATE)

bug("generate_first_token_from_prompt_start", "generate",
    """The first new token is drawn from the logits that followed the prompt's first token: it must follow the
    whole prompt, so keep the logits of the last prompt token's step.""",
    _generate_source(fill="logits, cache = model_step(params, n_heads, tokens[0], cache)\n"
                          "        for token in tokens[1:]:\n"
                          "            _, cache = model_step(params, n_heads, token, cache)"), tests=_GENERATE)

bug("generate_last_prompt_token_twice", "generate",
    """The prompt's last token goes through the model twice: the prompt's pass already gave the logits of the
    first new token. In the loop, draw a token first, then step it (each token goes through the model once).""",
    _generate_source(body="logits, cache = model_step(params, n_heads, tokens[-1], cache)\n"
                          "            tokens.append(sample_next(logits, rng, temperature, top_k))"),
    tests=_GENERATE)

bug("generate_cache_not_kept", "generate",
    """The cache model_step returns is thrown away: model_step does not modify the cache it is given, it returns a
    longer one, so each token is processed alone at position 0. Keep the returned cache for the next step.""",
    _generate_source(fill="for token in tokens:\n            logits, _ = model_step(params, n_heads, token, cache)",
                     body="tokens.append(sample_next(logits, rng, temperature, top_k))\n"
                          "            logits, _ = model_step(params, n_heads, tokens[-1], cache)"), tests=_GENERATE)

bug("generate_logits_not_updated", "generate",
    """Every new token is drawn from the logits that followed the prompt: after a new token goes through the model,
    its logits are the ones that predict the next token. Keep both outputs of each step.""",
    _generate_source(body="tokens.append(sample_next(logits, rng, temperature, top_k))\n"
                          "            _, cache = model_step(params, n_heads, tokens[-1], cache)"), tests=_GENERATE)

bug("generate_ignores_sampling_settings", "generate",
    """temperature and top_k are not passed on to sample_next: each new token must be drawn with the settings
    generate was called with (temperature 0 for greedy decoding).""",
    _generate_source(body="tokens.append(sample_next(logits, rng))\n"
                          "            logits, cache = model_step(params, n_heads, tokens[-1], cache)"),
    tests=_GENERATE)

bug("generate_always_greedy", "generate",
    """Every new token is the largest logit's, whatever the temperature: draw it with sample_next, the generator rng
    and the settings generate was called with.""",
    _generate_source(body="tokens.append(int(np.argmax(logits)))\n"
                          "            logits, cache = model_step(params, n_heads, tokens[-1], cache)"),
    tests=_GENERATE)

bug("generate_one_token_short", "generate",
    """One new token too few: the prompt is followed by exactly n_new drawn tokens.""",
    _generate_source(count="n_new - 1"), tests=_GENERATE)

# ---------------------------------------------------------------------------------------------- take apart
_ABLATE = ("ablate_head_values",)


def _ablate_source(copy="np.array(heads)", zero="heads[..., head * d_head:(head + 1) * d_head] = 0"):
    return f"""
    def ablate_head(heads, n_heads, head):
        heads = {copy}
        d_head = heads.shape[-1] // n_heads
        if not 0 <= head < n_heads:
            raise ValueError("head must be one of the heads")
        {zero}
        return heads
    """


bug("ablate_head_strided_columns", "ablate_head",
    """Every n_heads-th column is zeroed: concat_heads puts each head's d_head columns side by side, so head h owns
    one contiguous block of columns, from h d_head up to (h + 1) d_head.""",
    _ablate_source(zero="heads[..., head::n_heads] = 0"), tests=_ABLATE)

bug("ablate_head_zeroes_a_position", "ablate_head",
    """A row (one position) is zeroed instead of the head's columns: the heads are side by side along the last
    axis, each d_head columns wide, and every position has all of them.""",
    _ablate_source(zero="heads[..., head, :] = 0"), tests=_ABLATE)

bug("ablate_head_in_place", "ablate_head",
    """The caller's array is modified: the same heads are ablated one head at a time, so work on a copy and leave
    the input as it was.""",
    _ablate_source(copy="np.asarray(heads)"), tests=_ABLATE)

bug("ablate_head_keeps_only_that_head", "ablate_head",
    """Every head but the chosen one is zeroed: ablating a head removes that head alone and keeps the others.""",
    _ablate_source(zero="kept = heads[..., head * d_head:(head + 1) * d_head].copy()\n"
                        "        heads[...] = 0\n"
                        "        heads[..., head * d_head:(head + 1) * d_head] = kept"), tests=_ABLATE)

bug("ablate_head_width_n_heads", "ablate_head",
    """The head's columns are counted in steps of n_heads instead of d_head: each head is d_model // n_heads
    columns wide, and head h starts at h times that width.""",
    _ablate_source(zero="heads[..., head * n_heads:(head + 1) * n_heads] = 0"), tests=_ABLATE)

bug("ablate_head_numbered_from_one", "ablate_head",
    """The heads are numbered from 1: head 0 is the first block of d_head columns, and head h starts at column
    h d_head.""",
    _ablate_source(zero="heads[..., (head - 1) * d_head:head * d_head] = 0"), tests=_ABLATE)

bug("ablate_head_rescales_the_rest", "ablate_head",
    """The other heads are scaled up to make up for the missing one, as dropout does: an ablation only zeroes the
    head, so that what changes is exactly that head's contribution.""",
    _ablate_source(zero="heads[..., head * d_head:(head + 1) * d_head] = 0\n"
                        "        heads = heads * (n_heads / max(n_heads - 1, 1))"), tests=_ABLATE)

# --------------------------------------------------------------------------------------------- K-composition
_KCOMP = ("k_composition_values",)


def _kcomp_source(ov="W_V_prev[:, c] @ W_O_prev[c, :]",
                  score="np.linalg.norm(W_QK @ W_OV.T) / (np.linalg.norm(W_QK) * np.linalg.norm(W_OV))", out="scores"):
    return f"""
    def k_composition(W_Q, W_K, W_V_prev, W_O_prev, n_heads):
        d_head = W_Q.shape[0] // n_heads
        scores = np.zeros((n_heads, n_heads))
        for i in range(n_heads):
            q = slice(i * d_head, (i + 1) * d_head)
            W_QK = W_Q[:, q] @ W_K[:, q].T
            for j in range(n_heads):
                c = slice(j * d_head, (j + 1) * d_head)
                W_OV = {ov}
                scores[i, j] = {score}
        return {out}
    """


bug("k_composition_q_composition", "k_composition",
    """This is Q-composition, the previous head's output read by the queries (the OV circuit before the QK
    circuit). K-composition is read by the keys: the key side of the QK circuit meets the OV circuit, so the
    product pairs W_QK with W_OV transposed.""",
    _kcomp_source(score="np.linalg.norm(W_OV @ W_QK) / (np.linalg.norm(W_QK) * np.linalg.norm(W_OV))"),
    tests=_KCOMP)

bug("k_composition_unnormalised", "k_composition",
    """The score is the raw Frobenius norm of the product: divide it by the product of the two circuits' norms, so
    that it lies between 0 and 1 and does not grow with the weights' scale.""",
    _kcomp_source(score="np.linalg.norm(W_QK @ W_OV.T)"), tests=_KCOMP)

bug("k_composition_w_o_columns", "k_composition",
    """Head j's part of W_O is taken as a block of its columns: W_O maps the concatenated heads back to d_model,
    so head j owns a block of its rows (the rows its d_head columns of the concatenation multiply).""",
    _kcomp_source(ov="W_V_prev[:, c] @ W_O_prev[:, c].T"), tests=_KCOMP)

bug("k_composition_transposed", "k_composition",
    """The matrix is transposed: entry [i, j] is head i of the later layer (reading, in its keys) against head j
    of the layer before (writing).""",
    _kcomp_source(out="scores.T"), tests=_KCOMP)

bug("k_composition_whole_layer", "k_composition",
    """The whole layers' matrices are used instead of each head's: every entry comes out the same. Each head has
    its own QK circuit (its d_head columns of W_Q and W_K) and its own OV circuit (its columns of W_V, its rows of
    W_O).""",
    """
    def k_composition(W_Q, W_K, W_V_prev, W_O_prev, n_heads):
        W_QK = W_Q @ W_K.T
        W_OV = W_V_prev @ W_O_prev
        score = np.linalg.norm(W_QK @ W_OV.T) / (np.linalg.norm(W_QK) * np.linalg.norm(W_OV))
        return np.full((n_heads, n_heads), score)
    """, tests=_KCOMP)

bug("k_composition_qk_transposed", "k_composition",
    """The transpose is on the QK circuit instead of the OV circuit: keys that read head j's output are x W_OV, and
    the score's bilinear form puts the key side on the right of W_QK, so the product is W_QK times W_OV
    transposed.""",
    _kcomp_source(score="np.linalg.norm(W_QK.T @ W_OV) / (np.linalg.norm(W_QK) * np.linalg.norm(W_OV))"),
    tests=_KCOMP)

bug("k_composition_no_transpose", "k_composition",
    """W_OV is not transposed: W_QK W_OV is the paper's formula, written for column vectors (W x). In this course's
    row convention (x W), keys that read head j's output are x W_OV, and in the score they stand transposed on the
    right of W_QK, so the product is W_QK times W_OV transposed.""",
    _kcomp_source(score="np.linalg.norm(W_QK @ W_OV) / (np.linalg.norm(W_QK) * np.linalg.norm(W_OV))"),
    tests=_KCOMP)
