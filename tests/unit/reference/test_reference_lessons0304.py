"""The lesson 03 and 04 reference functions against independent computations: parameter counts by building
the actual weight arrays and counting their entries, the KV cache by filling a cache for one token, the per-head
scores by a loop over heads with column slices and einsum, the experiment against its known distribution."""

import math

import numpy as np
import pytest

from autograder import reference as ref


def _count_by_building(d_model, n_heads, n_kv_heads, bias):
    """Build every weight (and bias) a GQA layer owns as arrays and count their entries."""
    d_head = d_model // n_heads
    shapes = {
        "W_Q": (d_model, n_heads * d_head),
        "W_K": (d_model, n_kv_heads * d_head),
        "W_V": (d_model, n_kv_heads * d_head),
        "W_O": (n_heads * d_head, d_model),
    }
    arrays = [np.zeros(s) for s in shapes.values()]
    if bias:
        arrays += [np.zeros(s[1]) for s in shapes.values()]
    return sum(a.size for a in arrays)


@pytest.mark.parametrize("d_model,n_heads", [(512, 8), (512, 1), (768, 12), (12, 3), (4096, 32), (30, 5)])
@pytest.mark.parametrize("bias", [False, True])
def test_mha_param_count_counts_the_entries_of_the_four_projections(d_model, n_heads, bias):
    assert ref.mha_param_count(d_model, n_heads, bias=bias) == _count_by_building(d_model, n_heads, n_heads, bias)


@pytest.mark.parametrize("d_model,n_heads,n_kv_heads", [
    (8192, 64, 8), (4096, 32, 32), (4096, 32, 1), (48, 6, 2), (60, 12, 3), (10, 5, 5)])
@pytest.mark.parametrize("bias", [False, True])
def test_gqa_param_count_counts_the_entries_of_the_four_projections(d_model, n_heads, n_kv_heads, bias):
    got = ref.gqa_param_count(d_model, n_heads, n_kv_heads, bias=bias)
    assert got == _count_by_building(d_model, n_heads, n_kv_heads, bias)
    assert type(got) is int


def test_gqa_with_as_many_kv_heads_as_query_heads_is_mha():
    for d_model, n_heads in [(512, 8), (96, 4), (35, 7)]:
        for bias in (False, True):
            assert ref.gqa_param_count(d_model, n_heads, n_heads, bias) == ref.mha_param_count(d_model, n_heads, bias)


def test_known_values():
    assert ref.mha_param_count(512, 8) == 1_048_576 == ref.mha_param_count(512, 1)
    assert ref.mha_param_count(768, 12, bias=True) == 4 * 768 * 768 + 4 * 768
    # Llama-2 70B: 64 query heads, 8 KV heads, d_head 128, 80 layers, 16-bit values
    assert ref.gqa_param_count(8192, 64, 8) == 2 * 8192**2 + 2 * 8192 * 1024
    assert ref.kv_cache_bytes_per_token(80, 8, 128) == 327_680
    assert ref.kv_cache_bytes_per_token(80, 64, 128) == 8 * 327_680


def test_kv_cache_bytes_by_filling_a_cache():
    for n_layers, n_kv_heads, d_head, nbytes in [(80, 8, 128, 2), (3, 5, 7, 4), (2, 1, 9, 1)]:
        dtype = {1: np.int8, 2: np.float16, 4: np.float32}[nbytes]
        cache = [(np.zeros((n_kv_heads, 1, d_head), dtype), np.zeros((n_kv_heads, 1, d_head), dtype))
                 for _ in range(n_layers)]  # one token: a K and a V of (n_kv_heads, T=1, d_head) per layer
        total = sum(k.nbytes + v.nbytes for k, v in cache)
        assert ref.kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_value=nbytes) == total


@pytest.mark.parametrize("bad", [(0, 8, 1), (512, 8, 3), (512, 7, 7), (512, 8, 16)])
def test_gqa_rejects_impossible_layouts(bad):
    with pytest.raises(ValueError):
        ref.gqa_param_count(*bad)


def _scores_by_loops(x, W_Q, W_K, n_heads):
    x = np.asarray(x, dtype=np.float64)
    lead = x.shape[:-2]
    T, d_model = x.shape[-2:]
    d_head = d_model // n_heads
    out = np.zeros(lead + (n_heads, T, T))
    for idx in np.ndindex(*lead):
        for h in range(n_heads):
            cols = slice(h * d_head, (h + 1) * d_head)
            q = np.einsum("td,de->te", x[idx], W_Q[:, cols])
            k = np.einsum("td,de->te", x[idx], W_K[:, cols])
            out[idx + (h,)] = np.einsum("ie,je->ij", q, k) / d_head ** 0.5
    return out


@pytest.mark.parametrize("lead,T,n_heads,d_head", [((), 5, 3, 4), ((2,), 6, 4, 3), ((3, 2), 7, 2, 5)])
def test_multi_head_scores_equal_a_per_head_loop(lead, T, n_heads, d_head):
    rng = np.random.default_rng(T * n_heads)
    d_model = n_heads * d_head
    x = rng.normal(size=(*lead, T, d_model))
    W_Q, W_K = rng.normal(size=(2, d_model, d_model))
    got = ref.multi_head_scores(x, W_Q, W_K, n_heads)
    assert got.shape == (*lead, n_heads, T, T)
    np.testing.assert_allclose(got, _scores_by_loops(x, W_Q, W_K, n_heads), rtol=1e-10, atol=1e-12)


def test_multi_head_scores_keep_float32_and_leave_inputs_alone():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 12)).astype(np.float32)
    W_Q, W_K = rng.normal(size=(2, 12, 12)).astype(np.float32)
    copies = [a.copy() for a in (x, W_Q, W_K)]
    got = ref.multi_head_scores(x, W_Q, W_K, 3)
    assert got.dtype == np.float32
    assert all(np.array_equal(a, b) for a, b in zip((x, W_Q, W_K), copies))


@pytest.mark.parametrize("d_k", [1, 4, 64, 1024])
def test_dot_product_std_matches_theory(d_k):
    n = 20_000
    unscaled = ref.dot_product_std(d_k, n, False, np.random.default_rng(d_k))
    scaled = ref.dot_product_std(d_k, n, True, np.random.default_rng(d_k))
    # q.k is a sum of d_k independent products of unit normals: variance d_k; the std estimate's relative
    # standard error is at most sqrt(2 / n) (kurtosis 9 at d_k = 1), so 5% is more than 7 standard errors
    assert unscaled == pytest.approx(math.sqrt(d_k), rel=0.05)
    assert scaled == pytest.approx(1.0, rel=0.05)
    assert unscaled == pytest.approx(scaled * math.sqrt(d_k), rel=1e-12)  # same draws, exact scale


def test_dot_product_std_by_an_explicit_loop():
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    q = rng_b.standard_normal((300, 16))
    k = rng_b.standard_normal((300, 16))
    dots = [sum(float(a) * float(b) for a, b in zip(q[i], k[i])) for i in range(300)]
    mean = sum(dots) / 300
    std = math.sqrt(sum((d - mean) ** 2 for d in dots) / 300)
    assert ref.dot_product_std(16, 300, False, rng_a) == pytest.approx(std, rel=1e-10)
