"""Self-checks of lesson 03: parameter counts (MHA, GQA/MQA) and the KV cache's size.

The shared part (how a check calls your function, fails and passes) is in ``selfcheck_common.py``.
"""

from __future__ import annotations

import numpy as np

from selfcheck_common import call, fail, ok, own

__all__ = ["check_mha_param_count", "check_mha_param_count_bias", "check_exercise_512", "check_gqa_param_count",
           "check_kv_cache_bytes"]


def _count(fn, name, *args, **kwargs):
    got = call(fn, name, *args, **kwargs)
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
        kind = "a float" if isinstance(got, (float, np.floating)) else type(got).__name__
        fail(f"{name}{args} returned {kind} ({got!r}); a parameter count is a whole number: return an int "
             "(use // rather than /)")
    return int(got)


def check_mha_param_count(mha_param_count):
    """Known values (the paper's d_model=512 layer, BERT-base), no change with n_heads, bias = 4 vectors."""
    got = _count(mha_param_count, "mha_param_count", 512, 8)
    if got != 1_048_576:
        if got * 4 == 1_048_576 * 3:
            fail(f"mha_param_count(512, 8) = {got:,} = 3 * 512^2: W_O is missing. The layer owns four "
                 "(d_model, d_model) matrices: W_Q, W_K, W_V and W_O")
        if got == 8 * 1_048_576:
            fail(f"mha_param_count(512, 8) = {got:,} is 8 times too large: each head's projections are "
                 "(d_model, d_head) slices, not full (d_model, d_model) matrices")
        fail(f"mha_param_count(512, 8) = {got:,}, expected 4 * 512^2 = 1,048,576")
    counts = {h: _count(mha_param_count, "mha_param_count", 512, h) for h in (1, 2, 4, 16, 32)}
    if len(set(counts.values())) != 1 or counts[1] != got:
        fail(f"the count should not depend on n_heads, but for d_model=512 you get {counts}: the n_heads "
             "slices of d_model x d_head always add up to one d_model x d_model matrix per projection")
    if _count(mha_param_count, "mha_param_count", 1024, 8) != 4 * got:
        fail("doubling d_model should multiply the count by 4 (every matrix is d_model x d_model)")
    no_bias = _count(mha_param_count, "mha_param_count", 768, 12, bias=False)
    default = _count(mha_param_count, "mha_param_count", 768, 12)
    if default != no_bias or no_bias != 2_359_296:
        fail(f"mha_param_count(768, 12) = {default:,}; with bias left at its default (False) it should be "
             "4 * 768^2 = 2,359,296")
    try:
        got = mha_param_count(512, 3)
    except ValueError:
        pass
    except NotImplementedError:
        raise
    except Exception as exc:
        fail(f"mha_param_count(512, 3) raised {type(exc).__name__}; 3 heads do not divide 512 columns, and the "
             "lesson asks for a ValueError in that case")
    else:
        fail(f"mha_param_count(512, 3) returned {got!r}; 3 heads cannot share 512 columns equally, so there is no "
             "such layer: raise ValueError")
    ok("mha_param_count: 1,048,576 for d_model=512, the same for every n_heads, 4 * d_model^2 in general; "
       "ValueError when n_heads does not divide d_model")


def check_mha_param_count_bias(mha_param_count):
    """With bias=True: BERT-base's layer, one bias vector of length d_model per projection."""
    no_bias = _count(mha_param_count, "mha_param_count", 768, 12)
    with_bias = _count(mha_param_count, "mha_param_count", 768, 12, bias=True)
    extra = with_bias - no_bias
    if extra != 4 * 768:
        fail(f"bias=True adds {extra:,} parameters for d_model=768; each of the four projections has one bias "
             "vector of length d_model, so it should add 4 * 768 = 3,072")
    if with_bias != 2_362_368:
        fail(f"mha_param_count(768, 12, bias=True) = {with_bias:,}; BERT-base's attention layer has "
             "4 * 768^2 + 4 * 768 = 2,362,368 parameters")
    ok("mha_param_count(bias=True): 2,362,368 for BERT-base's layer, 4 * d_model biases")


def check_exercise_512(exercise_512, mha_param_count=None):
    """The worked exercise: (d_head, params with 8 heads, params of one full-width head).

    A wrong total that merely repeats your ``mha_param_count`` is reported but not failed here: that function's
    own check already fails, and one mistake should not fail two checks.
    """
    got = call(exercise_512, "exercise_512")
    if not isinstance(got, tuple) or len(got) != 3:
        fail("exercise_512() should return a tuple of three numbers: (d_head, params_8_heads, params_1_head)")
    d_head, eight, one = got
    for label, value in (("d_head", d_head), ("params_8_heads", eight), ("params_1_head", one)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            fail(f"{label} is {value!r}, a {type(value).__name__}; widths and counts are whole numbers: return "
                 "ints (// divides to an int, / always gives a float)")
    if d_head != 64:
        fail(f"d_head = {d_head}; it is d_model // n_heads for d_model=512 and 8 heads")
    if eight != 4 * 512 * 512 or one != 4 * 512 * 512:
        try:
            echoes = mha_param_count is not None and (eight, one) == (mha_param_count(512, 8), mha_param_count(512, 1))
        except Exception:
            echoes = False
        if echoes:
            print(f"\u2718 exercise: {eight:,} and {one:,} come from your mha_param_count, which is wrong "
                  "(see its check above); fix it and run this cell again")
            return
        if eight != one:
            fail(f"8 heads give {eight:,} parameters and one full-width head {one:,}; they should be equal")
        fail(f"{eight:,} parameters: count all four projections W_Q, W_K, W_V, W_O of a 512-wide layer")
    ok("exercise: d_head = 64, and 8 heads cost exactly what one 512-wide head costs: 1,048,576")


def check_gqa_param_count(gqa_param_count):
    """n_kv_heads == n_heads is MHA; MQA and Llama-2 70B known values; bias widths."""
    mha = _count(gqa_param_count, "gqa_param_count", 512, 8, 8)
    if mha != 1_048_576:
        fail(f"gqa_param_count(512, 8, 8) = {mha:,}; with as many KV heads as query heads it is ordinary "
             "multi-head attention: 4 * 512^2 = 1,048,576")
    mqa = _count(gqa_param_count, "gqa_param_count", 512, 8, 1)
    if mqa == mha:
        fail("gqa_param_count(512, 8, 1) equals the full multi-head count: W_K and W_V are counted as wide as W_Q. "
             "They are (d_model, n_kv_heads * d_head) with d_head = d_model // n_heads, the width of a query head: "
             "check the head count and the head width you size them with")
    if mqa != 2 * 512 * 512 + 2 * 512 * 64:
        fail(f"gqa_param_count(512, 8, 1) = {mqa:,}; multi-query attention keeps W_Q and W_O at (512, 512) "
             "and shrinks W_K and W_V to (512, 64): 589,824")
    llama = _count(gqa_param_count, "gqa_param_count", 8192, 64, 8)
    if llama != 150_994_944:
        fail(f"Llama-2 70B's layer (d_model 8192, 64 query heads, 8 KV heads) should have 150,994,944 "
             f"attention parameters, got {llama:,}")
    extra = _count(gqa_param_count, "gqa_param_count", 512, 8, 2, bias=True) - _count(
        gqa_param_count, "gqa_param_count", 512, 8, 2)
    if extra != 2 * 512 + 2 * 128:
        fail(f"bias=True adds {extra:,}; the biases are as wide as each projection's output: d_model for W_Q "
             "and W_O, n_kv_heads * d_head for W_K and W_V (here 2 * 512 + 2 * 128 = 1,280)")
    ok("gqa_param_count: MHA when n_kv_heads == n_heads, MQA 589,824, Llama-2 70B 150,994,944 per layer")


def check_kv_cache_bytes(kv_cache_bytes_per_token):
    """Llama-2 70B's known cache size per token and linearity in each argument."""
    got = _count(kv_cache_bytes_per_token, "kv_cache_bytes_per_token", 80, 8, 128)
    if got * 2 == 327_680:
        fail(f"kv_cache_bytes_per_token(80, 8, 128) = {got:,} is half the answer: every layer caches a key "
             "AND a value vector per KV head (a factor of 2)")
    if got != 327_680:
        fail(f"kv_cache_bytes_per_token(80, 8, 128) = {got:,}; Llama-2 70B caches 327,680 bytes (320 KiB) "
             "per token in 16-bit values")
    if _count(kv_cache_bytes_per_token, "kv_cache_bytes_per_token", 80, 8, 128, bytes_per_value=4) != 2 * got:
        fail("bytes_per_value=4 (float32) should double the 16-bit size: use the bytes_per_value argument")
    if _count(kv_cache_bytes_per_token, "kv_cache_bytes_per_token", 40, 8, 128) * 2 != got:
        fail("half the layers should cache half the bytes: multiply by n_layers")
    ok("kv_cache_bytes_per_token: 327,680 bytes per token for Llama-2 70B, linear in every argument")


# this lesson's functions, each with the checks that take it alone: a check of a function that calls one of
# them names it when it is the one that is wrong (selfcheck_common.own)
own("mha_param_count", check_mha_param_count)
