"""The attention variants `make bench` times against PyTorch (bench/attention_speed.py) compute attention: the
in-place and unshifted tiled kernels and the query blocks on threads agree with the reference, for sizes that blocks
and threads do not divide; the floors it prints compute the products they claim to."""

import io
import os
import sys

import numpy as np
import pytest

from autograder import course, reference

sys.path.insert(0, str(course.ROOT / "bench"))
import attention_speed as bench  # noqa: E402


@pytest.mark.parametrize("T_q, T_k, block_size, n_threads, query_rows", [
    (37, 53, 8, 3, 10), (128, 128, 512, 2, 512), (5, 70, 16, 8, 2), (64, 9, 4, 2, 7), (6, 20, 4, 2, 13),
    (37, 53, 512, 2, 4096)])  # the last: one task of every head (a group larger than the number of heads)
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


def test_unshifted_kernel_broadcasts_keys_and_values_over_the_batch():
    rng = np.random.default_rng(5)
    Q = rng.normal(size=(2, 3, 11, 8)).astype(np.float32)  # (B, n_heads, T_q, d_head)
    K, V = rng.normal(size=(2, 3, 19, 8)).astype(np.float32)  # each (n_heads, T_k, d_head), shared by the batch
    K[1, 4, 0] = 300.0  # and one long key, so that head 1's rows are computed again, for both batch entries
    Q[:, 1, :3, 0] = 50.0
    expected = reference.scaled_dot_product_attention(Q, K, V)[0]
    np.testing.assert_allclose(bench.tiled_unshifted(Q, K, V, 4), expected, atol=1e-5)
    np.testing.assert_allclose(bench.attention_on_threads(Q, K, V, 4, 2, bench.tiled_unshifted, 5), expected,
                               atol=1e-5)


def test_rows_just_below_the_bound_are_exact_without_recomputation(monkeypatch):
    """Scores close to SAFE_BOUND, unshifted: exp of them is about 2**53, and the rows are still exact to float32
    tolerance; they are not handed to the shifted kernel (which here raises)."""
    d, T_k = 16, 300
    rng = np.random.default_rng(7)
    K = rng.normal(size=(T_k, d)).astype(np.float32) * 0.3  # (T_k, d_head)
    K[17] = 0.0
    K[17, 0] = 20.0  # the longest key
    Q = rng.normal(size=(8, d))  # (T_q, d_head), mostly along the longest key
    Q[:, 0] = np.abs(Q[:, 0]) + 10.0
    Q = (Q * (0.995 * bench.SAFE_BOUND * np.sqrt(d) / 20.0 / np.linalg.norm(Q, axis=-1, keepdims=True))).astype(
        np.float32)  # |q| * max |k| / sqrt(d) = 0.995 SAFE_BOUND
    bound = np.linalg.norm(Q, axis=-1) * 20.0 / np.sqrt(d)
    assert np.all(bound < bench.SAFE_BOUND)
    assert np.max(Q @ K.T / np.sqrt(d)) > 0.9 * bench.SAFE_BOUND  # the largest scores are close to the bound
    V = rng.normal(size=(T_k, d)).astype(np.float32)
    expected = reference.scaled_dot_product_attention(Q.astype(np.float64), K.astype(np.float64),
                                                      V.astype(np.float64))[0]

    def shifted(*args):
        raise AssertionError("a row below the bound was computed again")
    monkeypatch.setattr(bench, "tiled_in_place", shifted)
    np.testing.assert_allclose(bench.tiled_unshifted(Q, K, V, 64), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("exp", [False, True])
def test_the_floors_compute_the_products_they_time(exp):
    """block_products (the printed floors): the sum over key blocks of s @ V, s the scaled scores or exp of them."""
    rng = np.random.default_rng(11)
    Q = rng.normal(size=(2, 3, 37, 16)).astype(np.float32)  # (B, n_heads, T_q, d_head)
    K, V = rng.normal(size=(2, 2, 3, 53, 16)).astype(np.float32)  # each (B, n_heads, T_k, d_head)
    scores = Q.astype(np.float64) @ np.swapaxes(K, -1, -2).astype(np.float64) / 4.0  # (B, n_heads, T_q, T_k)
    expected = (np.exp(scores) if exp else scores) @ V.astype(np.float64)  # (B, n_heads, T_q, d_head)
    got = bench.block_products(Q, K, V, 8, exp=exp)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    on_threads = bench.attention_on_threads(Q, K, V, 8, 2, lambda *a: bench.block_products(*a, exp=exp), 10)
    np.testing.assert_allclose(on_threads, expected, rtol=1e-4, atol=1e-4)


def test_the_cpu_time_of_other_processes_is_the_machine_busy_time_less_this_process(monkeypatch):
    """The bench's disturbance figure: /proc/stat's busy time (idle and iowait left out) less this process's own."""
    tick = os.sysconf("SC_CLK_TCK")
    stat = f"cpu  {3 * tick} {tick} {2 * tick} {50 * tick} {4 * tick} 0 0 {tick} 0 0\ncpu0 ...\n"
    monkeypatch.setattr(bench, "open", lambda path: io.StringIO(stat), raising=False)
    monkeypatch.setattr(bench.os, "times", lambda: os.times_result((1.5, 0.5, 0.0, 0.0, 0.0)))
    assert bench.cpu_seconds_of_others() == pytest.approx(3 + 1 + 2 + 1 - 2.0)
