"""The attention variants `make bench` times against PyTorch (bench/attention_speed.py) compute attention: the
in-place tiled kernel and the query blocks on threads agree with the reference, for sizes that blocks and threads
do not divide."""

import sys

import numpy as np
import pytest

from autograder import course, reference

sys.path.insert(0, str(course.ROOT / "bench"))
import attention_speed as bench  # noqa: E402


@pytest.mark.parametrize("T_q, T_k, block_size, n_threads, query_rows", [
    (37, 53, 8, 3, 10), (128, 128, 512, 2, 512), (5, 70, 16, 8, 2), (64, 9, 4, 2, 7), (6, 20, 4, 2, 13)])
def test_tiled_variants_on_threads_agree_with_plain_attention(T_q, T_k, block_size, n_threads, query_rows):
    rng = np.random.default_rng(T_q * 1000 + T_k)
    Q = rng.normal(size=(2, 3, T_q, 16)).astype(np.float32)  # (B, n_heads, T_q, d_head)
    K, V = rng.normal(size=(2, 2, 3, T_k, 16)).astype(np.float32)  # each (B, n_heads, T_k, d_head)
    expected = reference.scaled_dot_product_attention(Q, K, V)[0]
    np.testing.assert_allclose(bench.tiled_in_place(Q, K, V, block_size), expected, atol=1e-5)
    for tiled in (reference.tiled_attention, bench.tiled_in_place):
        got = bench.attention_on_threads(Q, K, V, block_size, n_threads, tiled, query_rows)
        assert got.shape == expected.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, expected, atol=1e-5)
