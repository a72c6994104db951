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
    np.testing.assert_allclose(bench.tiled_unshifted(Q, K, V, block_size), expected, atol=1e-5)
    for tiled in (reference.tiled_attention, bench.tiled_in_place, bench.tiled_unshifted):
        got = bench.attention_on_threads(Q, K, V, block_size, n_threads, tiled, query_rows)
        assert got.shape == expected.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_rows_whose_scores_could_overflow_are_computed_exactly():
    """A long query beside a long key: its bound |q| max|k| / sqrt(d) is far above SAFE_BOUND, and exp of its
    scores overflows float32 (inf / inf without the exact recomputation)."""
    d = 16
    Q = np.zeros((2, 5, d), np.float32)  # (n_heads, T_q, d_head)
    Q[:, :, 0] = 200.0
    Q[1, :2, 0] = 1.0  # ordinary rows beside the loose ones
    K = np.random.default_rng(0).normal(size=(2, 9, d)).astype(np.float32) * 0.01  # (n_heads, T_k, d_head)
    K[:, 3, 0] = 300.0  # the longest key, along every query
    V = np.random.default_rng(1).normal(size=(2, 9, d)).astype(np.float32)
    expected = reference.scaled_dot_product_attention(Q, K, V)[0]
    bound = 200.0 * 300.0 / np.sqrt(d)
    assert bound > bench.SAFE_BOUND and np.isinf(np.exp(np.float32(bound)))  # unshifted, exp would overflow
    got = bench.tiled_unshifted(Q, K, V, 4)
    np.testing.assert_allclose(got, expected, atol=1e-5)
