"""How fast is multi-head attention in numpy, written three ways, on this machine?

    make bench                                  # runs every bench/*.py
    PYTHONPATH=. python bench/attention_speed.py [--quick] [--threads N]

Prints, for a lesson-sized layer and two real-sized ones, the best-of-N wall time of

* ``loop``    a Python loop over heads: 3 * n_heads small (d_model, d_head) projections, one attention per head;
* ``batched`` three (d_model, d_model) projections, reshape/transpose into heads, one batched attention;
* ``fused``   one (d_model, 3 * d_model) projection W_QKV = [W_Q | W_K | W_V] that reads x once;
* ``reference`` ``autograder.reference.multi_head_attention`` (what the hidden tests grade against),

each also as achieved GFLOP/s and as a fraction of this machine's matmul peak, measured in the same run on a
large square matmul of the same dtype. It then prints how the reference compares with the best variant on the
two large shapes (the course keeps it within 1.5x), and the peak memory of naive attention (which holds the
(n_heads, T, T) weights) against tiled attention (one (T, block) block at a time), measured with tracemalloc.
Last, the attention core alone in float32: plain, tiled, and tiled with its query blocks on threads (lesson 06),
against PyTorch's ``F.scaled_dot_product_attention`` when PyTorch is installed (``requirements-bench.txt``), and
the floor of the fastest numpy kernel: its matmuls alone, then with its exp pass.
These are figures to read, not a timed test. On a shared machine other processes disturb them: the script prints
the load average, and ``--threads 1`` keeps BLAS threads from waiting for each other when the CPUs are busy.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

if "--threads" in sys.argv:  # must be set before numpy loads its BLAS
    _n = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _n

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir)))
from autograder import reference  # noqa: E402

SHAPES = [  # (label, B, T, d_model, n_heads)
    ("lesson size", 2, 32, 64, 4),
    ("B=8 T=128 d_model=512 h=8", 8, 128, 512, 8),
    ("B=1 T=2048 d_model=768 h=12", 1, 2048, 768, 12),
]
LARGE = SHAPES[1:]
MAX_RATIO = 1.5
SDPA_TARGET = 1.3  # numpy tiled attention on threads against PyTorch's SDPA, float32, at T=2048 (SDPA_SHAPE)
SDPA_SHAPE = "B=1 T=2048 d_model=768 h=12"


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def mha_loop(x, W_Q, W_K, W_V, W_O, n_heads):
    """One head at a time: 3 small matmuls per head, then concatenate the heads and project."""
    *lead, T, d_model = x.shape
    d_head = d_model // n_heads
    scale = 1.0 / math.sqrt(d_head)
    heads = []
    weights = np.empty((*lead, n_heads, T, T), dtype=x.dtype)  # (..., n_heads, T, T)
    for h in range(n_heads):
        cols = slice(h * d_head, (h + 1) * d_head)
        q = x @ W_Q[:, cols]  # (..., T, d_head)
        k = x @ W_K[:, cols]
        v = x @ W_V[:, cols]
        w = softmax((q * scale) @ np.swapaxes(k, -1, -2))  # (..., T, T)
        weights[..., h, :, :] = w
        heads.append(w @ v)  # (..., T, d_head)
    return np.concatenate(heads, axis=-1) @ W_O, weights  # (..., T, d_model)


def _split(y, n_heads):
    *lead, T, d_model = y.shape
    return np.swapaxes(y.reshape(*lead, T, n_heads, d_model // n_heads), -3, -2)  # (..., n_heads, T, d_head)


def _merge(heads):
    *lead, n_heads, T, d_head = heads.shape
    return np.swapaxes(heads, -3, -2).reshape(*lead, T, n_heads * d_head)  # (..., T, d_model)


def mha_batched(x, W_Q, W_K, W_V, W_O, n_heads):
    """All heads at once: 3 full-width projections, reshape/transpose into heads, batched matmuls."""
    d_head = x.shape[-1] // n_heads
    Q = _split(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    K = _split(x @ W_K, n_heads)
    V = _split(x @ W_V, n_heads)
    w = softmax((Q * (1.0 / math.sqrt(d_head))) @ np.swapaxes(K, -1, -2))  # (..., n_heads, T, T)
    return _merge(w @ V) @ W_O, w


def mha_fused(x, W_QKV, W_O, n_heads):
    """One (d_model, 3*d_model) projection: x is read once; the (..., T, 3*d_model) result is as large as the
    three separate ones together, so it saves calls and passes over x, not memory."""
    *lead, T, d_model = x.shape
    d_head = d_model // n_heads
    qkv = x @ W_QKV  # (..., T, 3*d_model), columns [Q | K | V]
    qkv = qkv.reshape(*lead, T, 3, n_heads, d_head)  # (..., T, 3, n_heads, d_head)
    qkv = np.moveaxis(qkv, (-3, -2), (0, -3))  # (3, ..., n_heads, T, d_head)
    Q, K, V = qkv[0], qkv[1], qkv[2]
    w = softmax((Q * (1.0 / math.sqrt(d_head))) @ np.swapaxes(K, -1, -2))  # (..., n_heads, T, T)
    return _merge(w @ V) @ W_O, w


def mha_flops(B, T, d_model, n_heads):
    """Multiply-adds counted as 2 flops: 4 projections (2 B T d_model^2 each) + Q K^T and weights @ V
    (2 B T^2 d_model each). Softmax's exp and divisions are not counted."""
    return 8 * B * T * d_model ** 2 + 4 * B * T * T * d_model


def best_times(runs, rounds=5, budget=6.0):
    """Best wall time of each ``fn(*args)`` in ``runs`` ({name: (fn, args)}), timed round-robin.

    Every round times each variant once, in a rotating order, so a burst of load from other processes on a
    shared machine hits all variants alike; the minimum over the rounds is the figure least disturbed by it.
    Stops early (after at least 2 rounds) once ``budget`` seconds have passed.
    """
    names = list(runs)
    times = {n: [] for n in names}
    start = time.perf_counter()
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            fn, args = runs[n]
            t0 = time.perf_counter()
            fn(*args)
            times[n].append(time.perf_counter() - t0)
        if r >= 1 and time.perf_counter() - start > budget:
            break
    return {n: min(t) for n, t in times.items()}


def matmul_peak(dtype, sizes=(512, 1024, 2048), rounds=7):
    """Best GFLOP/s of an (n, n) @ (n, n) matmul over ``sizes``: this machine's practical ceiling for the dtype.

    The largest size usually sets it on a quiet machine; on a busy one the smaller products, which finish within
    one time slice, are disturbed less, so the best over all sizes is the steadiest estimate.
    """
    rng = np.random.default_rng(0)
    best = 0.0
    for n in sizes:
        a, b = rng.normal(size=(n, n)).astype(dtype), rng.normal(size=(n, n)).astype(dtype)
        seconds = best_times({"matmul": (np.matmul, (a, b))}, rounds=rounds, budget=30)["matmul"]
        best = max(best, 2 * n ** 3 / seconds / 1e9)
    return best


def layer(B, T, d_model, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, T, d_model)).astype(dtype)
    Ws = [(rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)).astype(dtype) for _ in range(4)]
    return x, Ws


def measure(B, T, d_model, n_heads, dtype, repeat=5):
    """Seconds per call of each variant (same inputs; their outputs are checked to agree first)."""
    x, (W_Q, W_K, W_V, W_O) = layer(B, T, d_model, dtype)
    W_QKV = np.concatenate([W_Q, W_K, W_V], axis=1)  # (d_model, 3*d_model), built once like a model's weights
    runs = {
        "loop": (mha_loop, (x, W_Q, W_K, W_V, W_O, n_heads)),
        "batched": (mha_batched, (x, W_Q, W_K, W_V, W_O, n_heads)),
        "fused": (mha_fused, (x, W_QKV, W_O, n_heads)),
        "reference": (reference.multi_head_attention, (x, W_Q, W_K, W_V, W_O, n_heads)),
    }
    expected = reference.multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads)[0]
    tol = 1e-3 if dtype == np.float32 else 1e-9
    for name, (fn, args) in runs.items():
        err = float(np.max(np.abs(fn(*args)[0] - expected)))
        assert err < tol, f"{name} disagrees with the reference by {err:.3g}"
    return best_times(runs, rounds=repeat)


def peak_bytes(fn, *args):
    """Peak bytes allocated (numpy reports its buffers to tracemalloc) while ``fn(*args)`` runs."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        fn(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def memory_table(n_heads=8, d_head=16, block_size=64, Ts=(256, 512, 1024, 2048)):
    print(f"\nPeak memory of one attention call, float64, n_heads={n_heads}, d_head={d_head}, "
          f"block_size={block_size} (tracemalloc):")
    print(f"  {'T':>6} {'(h,T,T) bytes':>14} {'naive peak':>12} {'tiled peak':>12} {'naive/tiled':>12}")
    rng = np.random.default_rng(1)
    for T in Ts:
        Q, K, V = (rng.normal(size=(n_heads, T, d_head)) for _ in range(3))
        naive = peak_bytes(reference.scaled_dot_product_attention, Q, K, V)
        tiled = peak_bytes(reference.tiled_attention, Q, K, V, block_size)
        print(f"  {T:>6} {n_heads * T * T * 8 / 2**20:>11.1f} MB {naive / 2**20:>9.1f} MB {tiled / 2**20:>9.2f} MB "
              f"{naive / tiled:>11.1f}x")


def tiled_in_place(Q, K, V, block_size):
    """reference.tiled_attention for unmasked, finite inputs, with its passes over each (..., T_q, block) block cut
    to the fewest: Q scaled once, no -inf handling (every running maximum is finite), the shift and exp in place."""
    Q_scaled = Q * Q.dtype.type(1.0 / math.sqrt(Q.shape[-1]))  # (..., T_q, d_k)
    m = np.full((*Q.shape[:-1], 1), -np.inf, dtype=Q.dtype)  # (..., T_q, 1) running max
    total = np.zeros_like(m)  # (..., T_q, 1) running sum of exp(score - m)
    acc = np.zeros((*Q.shape[:-1], V.shape[-1]), dtype=Q.dtype)  # (..., T_q, d_v)
    for start in range(0, K.shape[-2], block_size):
        s = Q_scaled @ np.swapaxes(K[..., start:start + block_size, :], -1, -2)  # (..., T_q, block)
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        s -= m_new
        np.exp(s, out=s)
        alpha = np.exp(m - m_new)  # 0 for the first block (m = -inf)
        total *= alpha
        total += s.sum(axis=-1, keepdims=True)
        acc *= alpha
        acc += s @ V[..., start:start + block_size, :]
        m = m_new
    acc /= total
    return acc


SAFE_BOUND = 40.0  # exp of a score in [-40, 40] is a normal float32, and sums of 2**60 of them do not overflow
LOG2_E = 1.0 / math.log(2.0)  # exp(x) = exp2(x * log2(e)); numpy's float32 exp2 takes half the time of its exp


def tiled_unshifted(Q, K, V, block_size):
    """tiled_in_place with three passes over each (..., T_q, block) block instead of seven: matmul, exp, matmul.

    Softmax subtracts each row's maximum only so that exp cannot overflow. Every score of query row i is at most
    |q_i| * max_j |k_j| / sqrt(d_k) in size (Cauchy-Schwarz); where that bound is below SAFE_BOUND, exp(score)
    needs no shift at all, so there is no running maximum and no block rescales what came before. Q is scaled once
    by log2(e) / sqrt(d_k), so that the exp pass is numpy's exp2, the faster of the two on float32. Each block's
    row sums are a matrix-vector product with a vector of ones, kept apart (T_k / block_size numbers per query)
    and added once at the end. Rows whose bound is too large are computed again with the shifted kernel."""
    lead = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    T_q, T_k, d_v = Q.shape[-2], K.shape[-2], V.shape[-1]
    dtype = np.result_type(Q, K, V)
    scale = 1.0 / math.sqrt(Q.shape[-1])
    k_sq = np.einsum("...jd,...jd->...j", K, K).max(axis=-1, keepdims=True)  # (..., 1) the longest key, squared
    q_sq = np.einsum("...id,...id->...i", Q, Q)  # (..., T_q) each query's length, squared
    unsafe = np.broadcast_to(q_sq * k_sq * dtype.type(scale * scale) >= SAFE_BOUND ** 2, (*lead, T_q))  # (..., T_q)
    Q_scaled = Q * dtype.type(scale * LOG2_E)  # (..., T_q, d_k): scores in base 2, exp(score) = exp2(score * log2 e)
    width = min(block_size, T_k)
    s = np.empty((*lead, T_q, width), dtype)  # (..., T_q, block) one block of scores, reused
    ones = np.ones(width, dtype)
    out, part = np.empty((*lead, T_q, d_v), dtype), np.empty((*lead, T_q, d_v), dtype)  # sum of exp(s) @ V, one term
    sums = np.empty((-(-T_k // block_size), *lead, T_q), dtype)  # each block's row sums of exp(s)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # only in unsafe rows, computed again below
        for i, start in enumerate(range(0, T_k, block_size)):
            block = s[..., :min(block_size, T_k - start)]  # (..., T_q, block)
            np.matmul(Q_scaled, np.swapaxes(K[..., start:start + block_size, :], -1, -2), out=block)
            np.exp2(block, out=block)
            np.matmul(block, V[..., start:start + block_size, :], out=part if i else out)  # (..., T_q, d_v)
            np.matmul(block, ones[:block.shape[-1]], out=sums[i])  # (..., T_q)
            if i:
                out += part
        out /= sums.sum(axis=0)[..., None]
    if unsafe.any():
        Q, K, V = (np.broadcast_to(x, (*lead, *x.shape[-2:])) for x in (Q, K, V))
        for index in np.ndindex(lead):
            rows = unsafe[index]  # (T_q,)
            if rows.any():
                out[index][rows] = tiled_in_place(Q[index][rows], K[index], V[index], block_size)
    return out


def block_products(Q, K, V, block_size, exp=False):
    """What tiled_unshifted cannot go below: its two matmuls over each (..., T_q, block) block and nothing else
    (with ``exp``, its exp2 pass as well), in the same blocks and buffers. Not attention: the sum over the blocks of
    s @ V, where s is Q K^T / sqrt(d_k), or exp(Q K^T / sqrt(d_k)) with ``exp``; no row sums, no division, no
    bound. A numpy kernel that forms the scores block by block and multiplies them by V through numpy's matmul
    runs at least these products, and for softmax an exp pass over every score."""
    lead = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    T_q, T_k, d_v = Q.shape[-2], K.shape[-2], V.shape[-1]
    dtype = np.result_type(Q, K, V)
    Q_scaled = Q * dtype.type((LOG2_E if exp else 1.0) / math.sqrt(Q.shape[-1]))  # (..., T_q, d_k)
    s = np.empty((*lead, T_q, min(block_size, T_k)), dtype)  # (..., T_q, block) one block of scores, reused
    out, part = np.empty((*lead, T_q, d_v), dtype), np.empty((*lead, T_q, d_v), dtype)
    for start in range(0, T_k, block_size):
        block = s[..., :min(block_size, T_k - start)]  # (..., T_q, block)
        np.matmul(Q_scaled, np.swapaxes(K[..., start:start + block_size, :], -1, -2), out=block)
        if exp:
            np.exp2(block, out=block)
        np.matmul(block, V[..., start:start + block_size, :], out=out if start == 0 else part)  # (..., T_q, d_v)
        if start:
            out += part
    return out


def attention_on_threads(Q, K, V, block_size, n_threads, tiled=reference.tiled_attention, query_rows=512):
    """``tiled`` on every (head, block of ``query_rows`` queries) pair (several heads together when T_q is shorter
    than ``query_rows``), spread over ``n_threads`` threads: the work split of FlashAttention-2 (lesson 06,
    section 4 splits only the query axis). numpy releases the GIL inside its array operations, so the tasks run on
    separate cores, and each works on (query_rows, block_size) scores at a time, small enough to stay in the
    core's cache. Memory: one such block per thread."""
    lead = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    T_q, T_k = Q.shape[-2], K.shape[-2]
    Q_flat = np.broadcast_to(Q, (*lead, *Q.shape[-2:])).reshape(-1, T_q, Q.shape[-1])  # (heads, T_q, d_k)
    K_flat = np.broadcast_to(K, (*lead, *K.shape[-2:])).reshape(-1, T_k, K.shape[-1])  # (heads, T_k, d_k)
    V_flat = np.broadcast_to(V, (*lead, *V.shape[-2:])).reshape(-1, T_k, V.shape[-1])  # (heads, T_k, d_v)
    out = np.empty((Q_flat.shape[0], T_q, V.shape[-1]), dtype=np.result_type(Q, K, V))  # (heads, T_q, d_v)

    group = max(1, query_rows // T_q)  # short sequences: several heads per task, so that no task is tiny
    tasks = [(slice(h, h + group), slice(start, start + query_rows))
             for h in range(0, Q_flat.shape[0], group) for start in range(0, T_q, query_rows)]

    def one(task):
        heads, rows = task
        out[heads, rows] = tiled(Q_flat[heads, rows], K_flat[heads], V_flat[heads], block_size)

    with ThreadPoolExecutor(n_threads) as pool:  # list(): wait for every task, raise what a task raised
        list(pool.map(one, tasks))
    return out.reshape(*lead, T_q, V.shape[-1])  # (..., T_q, d_v)


def torch_sdpa():
    """PyTorch's F.scaled_dot_product_attention on numpy arrays, or None when PyTorch is not installed
    (requirements-bench.txt: the course itself never needs it)."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None

    # every core, as a model would run it (--threads also sets OMP_NUM_THREADS, which PyTorch would follow)
    torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)

    def sdpa(Q, K, V):
        with torch.inference_mode():
            return F.scaled_dot_product_attention(torch.from_numpy(Q), torch.from_numpy(K),
                                                  torch.from_numpy(V)).numpy()
    return sdpa


def cpu_seconds_of_others():
    """CPU seconds the whole machine has spent busy, less this process's own (Linux's /proc/stat; None elsewhere).
    The difference over a timing is the work of other processes: SDPA's threads wait for each other, so other work
    slows it more than numpy's tasks and flatters the ratios."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    except OSError:
        return None
    busy = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    own = os.times()
    return busy - own.user - own.system


SCORES_PER_TASK = 2 ** 19  # scores in one task's block: 2 MB of float32, one core's L2 cache on the machine
#                           measured; T=2048: 1,024 queries x 512 keys; T=128: 32 whole heads of 128 x 128


def library_table(repeat, block_size=512):
    """The attention core alone, float32, on the two large shapes: numpy plain, tiled (the course's reference),
    three tiled kernels on threads, and PyTorch's SDPA when it is installed; then the floors of the unshifted
    kernel (block_products: its matmuls alone, then with its exp pass), timed the same way. Run with one BLAS
    thread (``main`` starts it in a child process with ``--threads 1``): BLAS threads inside each Python thread
    would oversubscribe the cores. On threads, each task holds SCORES_PER_TASK scores at a time: a block of
    queries of one head, or several whole heads when the sequence is short."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    sdpa = torch_sdpa()
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "numpy default")
    torch_threads = f", PyTorch threads: {__import__('torch').get_num_threads()}" if sdpa is not None else ""
    print(f"\nAttention core (Q, K, V) -> out, float32, {cores} core(s), BLAS threads: {threads}{torch_threads}, "
          f"load average {os.getloadavg()[0]:.1f} at start; key blocks of {block_size}; on threads: tasks of "
          f"{SCORES_PER_TASK} scores over {cores} threads:")
    print(f"  {'shape':<30} {'variant':<36} {'time':>10} {'/ SDPA':>7}")
    rng = np.random.default_rng(3)
    ratios = []
    for label, B, T, d_model, n_heads in LARGE:
        Q, K, V = rng.normal(size=(3, B, n_heads, T, d_model // n_heads)).astype(np.float32)  # (B, n_heads, T, d_head)
        rows = SCORES_PER_TASK // min(block_size, T)  # queries per task (whole heads when T is shorter)
        on_threads = {"reference tiled, threads": reference.tiled_attention,
                      "in-place tiled, threads": tiled_in_place,
                      "unshifted exp, threads": tiled_unshifted,
                      "floor: matmuls only, threads": block_products,
                      "floor: matmuls + exp, threads": lambda *a: block_products(*a, exp=True)}
        runs = {"numpy plain (reference)": (lambda *a: reference.scaled_dot_product_attention(*a)[0], (Q, K, V)),
                "numpy tiled (reference)": (reference.tiled_attention, (Q, K, V, block_size))}
        runs.update({name: (attention_on_threads, (Q, K, V, block_size, cores, tiled, rows))
                     for name, tiled in on_threads.items()})
        if sdpa is not None:
            runs["PyTorch SDPA"] = (sdpa, (Q, K, V))
        expected = runs["numpy plain (reference)"][0](Q, K, V)
        for name, (fn, args) in runs.items():
            if not name.startswith("floor"):  # the floors are not attention
                err = float(np.max(np.abs(fn(*args) - expected)))
                assert err < 1e-4, f"{name} disagrees with plain attention by {err:.3g}"
        others, start = cpu_seconds_of_others(), time.perf_counter()
        times = best_times(runs, rounds=5 * repeat, budget=20)  # T=128: 35 rounds in 2 s; T=2048: ~18 in 20 s
        if others is not None:
            share = (cpu_seconds_of_others() - others) / ((time.perf_counter() - start) * cores)
            print(f"  {label:<30} other processes used {max(share, 0.0):.0%} of the CPUs while these were timed")
        for name, t in times.items():
            versus = f"{t / times['PyTorch SDPA']:>6.2f}x" if sdpa is not None else "      -"
            print(f"  {label:<30} {name:<36} {t * 1e3:>8.1f} ms {versus}")
        if sdpa is not None:
            ratios.append((label, {name: times[name] / times["PyTorch SDPA"] for name in
                                   ("unshifted exp, threads", "floor: matmuls only, threads",
                                    "floor: matmuls + exp, threads")}))
    if sdpa is None:
        print("  PyTorch is not installed: pip install -r requirements-bench.txt for the SDPA comparison")
    for label, r in ratios:
        target = (f" (target {SDPA_TARGET}: {'met' if r['unshifted exp, threads'] <= SDPA_TARGET else 'not met'})"
                  if label == SDPA_SHAPE else "")
        print(f"  unshifted exp on threads / PyTorch SDPA at {label}: {r['unshifted exp, threads']:.2f}{target}; "
              f"its matmuls alone {r['floor: matmuls only, threads']:.2f}, with its exp pass "
              f"{r['floor: matmuls + exp, threads']:.2f}")
    print(f"  load average {os.getloadavg()[0]:.1f} at the end")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (for a smoke run)")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS threads (default: numpy's own choice). On a machine busy with other work, "
                             "--threads 1 avoids BLAS threads waiting for each other and gives steadier figures")
    parser.add_argument("--core-only", action="store_true", help="only the attention core against PyTorch's SDPA")
    args = parser.parse_args(argv)
    repeat = 2 if args.quick else 7
    if args.core_only:
        library_table(repeat)
        return 0
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "numpy default") if args.threads else "numpy default"
    print(f"numpy {np.__version__}, {os.cpu_count()} CPUs visible, BLAS threads: {threads}, "
          f"load average {os.getloadavg()[0]:.1f} at start")
    ratios = []
    for dtype in (np.float32, np.float64):
        name = np.dtype(dtype).name
        before = matmul_peak(dtype)
        results = [(shape, measure(*shape[1:], dtype, repeat=repeat)) for shape in SHAPES]
        peak = max(before, matmul_peak(dtype))  # measured before and after the variants; the higher is the ceiling
        print(f"\n{name}: matmul peak {peak:.1f} GFLOP/s (best of 7 runs of n x n @ n x n for n = 512, 1024, "
              "2048, before and after the variants)")
        print(f"  {'shape':<30} {'variant':<10} {'time':>10} {'GFLOP/s':>9} {'of peak':>8}")
        for shape, times in results:
            label = shape[0]
            flops = mha_flops(*shape[1:])
            for variant, t in times.items():
                rate = flops / t / 1e9
                print(f"  {label:<30} {variant:<10} {t * 1e3:>8.2f} ms {rate:>9.2f} {rate / peak:>7.1%}")
            best_variant = min(("loop", "batched", "fused"), key=times.get)
            ratio = times["reference"] / times[best_variant]
            print(f"  {label:<30} reference / best ({best_variant}) = {ratio:.2f}")
            if shape in LARGE:
                ratios.append((name, label, ratio))
    memory_table()
    # the attention core with one BLAS thread, in a child process (BLAS reads its thread count when numpy loads)
    child = [sys.executable, os.path.abspath(__file__), "--core-only", "--threads", "1"] + (["--quick"] * args.quick)
    subprocess.run(child, check=True)
    worst = max(r for _, _, r in ratios)
    print(f"\nreference multi_head_attention vs the best variant on the large shapes: worst ratio {worst:.2f} "
          f"(limit {MAX_RATIO})")
    for name, label, ratio in ratios:
        print(f"  {name:<8} {label:<30} {ratio:.2f} {'ok' if ratio <= MAX_RATIO else 'ABOVE THE LIMIT'}")
    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1):
        print(f"load average {load:.1f} on {os.cpu_count()} CPUs at the end: other processes competed for the CPUs, "
              "so these figures are disturbed; rerun on a quiet machine (or with --threads 1)")
    return 0  # figures to read, not a timed test


if __name__ == "__main__":
    sys.exit(main())
