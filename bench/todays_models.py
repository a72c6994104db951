"""Lesson 08's speed and memory figures: a streaming KV cache stays flat, and absorbed MLA decodes faster.

    make bench                                  # runs every bench/*.py
    PYTHONPATH=. python bench/todays_models.py

1. The reference ``streaming_decode`` (4 attention sinks and a window of 60) against ``decode_with_kv_cache`` (the
   full cache) for streams of 250 to 4,000 tokens: the KV cache's bytes after the last token and the peak memory
   Python allocated during the run (tracemalloc).
2. One MLA decoding step at DeepSeek-V2's head width (d_head 128, d_c 512, d_rope 64; 16 heads instead of 128):
   naive (every cached latent expanded to every head's key and value, as ``mla_attention`` does) against absorbed
   (W_UK folded into the query and W_UV into W_O, as ``mla_absorbed`` does), milliseconds per token against the
   context length. Both steps are checked against the last row of the reference ``mla_attention`` first.
"""

from __future__ import annotations

import math
import os
import time
import tracemalloc

import numpy as np

from autograder import reference as ref


def streaming_memory():
    rng = np.random.default_rng(0)
    n_heads, n_kv_heads, d_head = 8, 2, 16
    d_model = n_heads * d_head
    Ws = [rng.normal(size=(d_model, w)) / math.sqrt(d_model)
          for w in (d_model, n_kv_heads * d_head, n_kv_heads * d_head, d_model)]
    print("streaming KV cache (4 sinks + window 60) vs the full cache, float64, "
          f"n_kv_heads={n_kv_heads}, d_head={d_head}")
    print("peak: what Python allocated at most during the run, less what collecting the T output rows alone takes")
    print(f"{'stream length':>13} {'cache kB (stream)':>18} {'peak kB (stream)':>17} {'cache kB (full)':>16} "
          f"{'peak kB (full)':>15}")
    for T in (250, 1000, 2000, 4000):
        x = rng.normal(size=(T, d_model))
        outputs_only = _peak(lambda: np.concatenate([np.empty((1, d_model)) for _ in range(T)]))[1]
        row = []
        for run in (lambda: ref.streaming_decode(x, *Ws, n_heads, n_kv_heads, 4, 60),
                    lambda: ref.decode_with_kv_cache(x, *Ws, n_heads, n_kv_heads)):
            (_, cache_k, cache_v), peak = _peak(run)
            row += [(cache_k.nbytes + cache_v.nbytes) / 1024, (peak - outputs_only) / 1024]
        print(f"{T:>13} {row[0]:>18.1f} {row[1]:>17.1f} {row[2]:>16.1f} {row[3]:>15.1f}")


def _peak(run):
    """(run's result, the peak bytes Python allocated while it ran)."""
    tracemalloc.start()
    try:
        result = run()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class MLADecoder:
    """One decoding step of MLA for the newest token, from the cache (c_KV, k_R), in both forms."""

    def __init__(self, Ws, n_heads):
        self.W_DKV, self.W_UK, self.W_UV, self.W_KR, self.W_Q, self.W_QR, self.W_O = Ws
        self.n_heads = n_heads
        self.d_c, self.d_rope = self.W_DKV.shape[1], self.W_KR.shape[1]
        self.d_head = self.W_UK.shape[1] // n_heads
        self.scale = 1.0 / math.sqrt(self.d_head + self.d_rope)
        W_UK_h = np.swapaxes(self.W_UK.reshape(self.d_c, n_heads, self.d_head), 0, 1)  # (n_heads, d_c, d_head)
        W_UV_h = np.swapaxes(self.W_UV.reshape(self.d_c, n_heads, self.d_head), 0, 1)  # (n_heads, d_c, d_head)
        W_Q_h = np.swapaxes(self.W_Q.reshape(-1, n_heads, self.d_head), 0, 1)  # (n_heads, d_model, d_head)
        self.W_Q_absorbed = W_Q_h @ np.swapaxes(W_UK_h, -1, -2)  # (n_heads, d_model, d_c): computed once
        self.W_OV = W_UV_h @ self.W_O.reshape(n_heads, self.d_head, -1)  # (n_heads, d_c, d_model): computed once

    def _query_rotary(self, x_t, t):
        return ref.rope(ref.split_heads(x_t @ self.W_QR, self.n_heads), np.array([t]))  # (n_heads, 1, d_rope)

    def naive(self, x_t, t, c_kv, k_r):
        K_c = ref.split_heads(c_kv @ self.W_UK, self.n_heads)  # (n_heads, T, d_head): rebuilt every step
        V = ref.split_heads(c_kv @ self.W_UV, self.n_heads)  # (n_heads, T, d_head)
        q_c = ref.split_heads(x_t @ self.W_Q, self.n_heads)  # (n_heads, 1, d_head)
        scores = (q_c @ np.swapaxes(K_c, -1, -2) + self._query_rotary(x_t, t) @ k_r.T) * self.scale
        return ref.concat_heads(ref.softmax(scores) @ V) @ self.W_O  # (1, d_model)

    def absorbed(self, x_t, t, c_kv, k_r):
        q_latent = x_t @ self.W_Q_absorbed  # (n_heads, 1, d_c)
        scores = (q_latent @ c_kv.T + self._query_rotary(x_t, t) @ k_r.T) * self.scale  # (n_heads, 1, T)
        return np.sum((ref.softmax(scores) @ c_kv) @ self.W_OV, axis=0)  # (1, d_model)


def best_ms(fn, *args, repeat=5):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return 1e3 * min(times)


def mla_decode_speed():
    rng = np.random.default_rng(1)
    n_heads, d_head, d_c, d_rope, d_model = 16, 128, 512, 64, 2048
    shapes = [(d_model, d_c), (d_c, n_heads * d_head), (d_c, n_heads * d_head), (d_model, d_rope),
              (d_model, n_heads * d_head), (d_model, n_heads * d_rope), (n_heads * d_head, d_model)]
    Ws = [rng.normal(size=s) / math.sqrt(s[0]) for s in shapes]
    decoder = MLADecoder(Ws, n_heads)
    x = rng.normal(size=(64, d_model))  # a short sequence to check both steps against the reference
    expected = ref.mla_attention(x, *Ws, n_heads)[0][-1:]
    c_kv, k_r = x @ decoder.W_DKV, ref.rope(x @ decoder.W_KR, np.arange(64))
    for form in (decoder.naive, decoder.absorbed):
        assert np.allclose(form(x[-1:], 63, c_kv, k_r), expected, rtol=1e-9, atol=1e-9), form.__name__
    print(f"\nMLA, one decoding step: n_heads={n_heads}, d_head={d_head}, d_c={d_c}, d_rope={d_rope}, "
          f"d_model={d_model}, float64 (both equal the reference's last row)")
    print(f"{'context T':>9} {'naive ms/token':>15} {'absorbed ms/token':>18} {'speed-up':>9}")
    for T in (512, 2048, 8192):
        c_kv = rng.normal(size=(T, d_c))  # the cache: one latent and one rotary key per token
        k_r = rng.normal(size=(T, d_rope))
        x_t = rng.normal(size=(1, d_model))
        naive = best_ms(decoder.naive, x_t, T, c_kv, k_r, repeat=3)
        absorbed = best_ms(decoder.absorbed, x_t, T, c_kv, k_r)
        print(f"{T:>9} {naive:>15.2f} {absorbed:>18.2f} {naive / absorbed:>8.1f}x")


def main():
    print(f"lesson 08, numpy {np.__version__}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    streaming_memory()
    mla_decode_speed()


if __name__ == "__main__":
    main()
