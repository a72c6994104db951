# Built from solutions/selfcheck_05.py by `make lessons`; edit that file, not this one.
"""Self-checks of lesson 05: the exercises.

The answer checks validate the *form* of an answer (a whole number, one letter); the function checks use
probes whose right result follows from the definition (an arange input shows which column went where;
W_Q = 0 makes every score 0, so every weight must be 1/T). The shared part is in ``selfcheck_common.py``.
"""

from __future__ import annotations

import math

import numpy as np

# lesson 01's check, for the warm-up
from selfcheck_01 import check_softmax, check_softmax_stable
from selfcheck_common import call, check_pasted, close, effective_scale, fail, ok, own, pasted

# the paste cell's softmax, from lesson 01: a failure of it is reported as coming from lesson 01
pasted("01", "softmax", check_softmax, check_softmax_stable)

__all__ = ["check_pasted",
           "check_softmax", "check_head_width", "check_param_count_answers", "check_choice", "check_split_merge",
           "check_head_weights", "check_mha_from_scratch", "check_masked_attention", "check_attention_layer"]


def _not_answered(name):
    raise NotImplementedError(f"{name} is not implemented yet: replace None with your answer in the cell above, "
                              "run that cell, then run this check again.")


def _whole(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_head_width(d_head, d_model, n_heads, name="d_head"):
    """d_head is a whole number of columns and n_heads heads of that width tile d_model exactly."""
    if d_head is None:
        _not_answered(name)
    if not _whole(d_head):
        fail(f"{name} = {d_head!r} is a {type(d_head).__name__}; a head is a whole number of columns, so "
             "give an int (in code, d_model // n_heads divides without leaving a float)")
    if d_head * n_heads != d_model:
        fail(f"{n_heads} heads of {d_head} columns hold {d_head * n_heads} columns, but a token has "
             f"d_model = {d_model}: every column belongs to exactly one head")
    ok(f"{name}: {n_heads} heads x {d_head} columns = d_model = {d_model}")


def check_param_count_answers(count_many_heads, count_one_head, n_heads=16):
    """Both counts are positive whole numbers and the same: the head count does not change the parameters."""
    for name, v in ((f"param_count_{n_heads}_heads", count_many_heads), ("param_count_1_head", count_one_head)):
        if v is None:
            _not_answered(name)
        if not _whole(v) or v <= 0:
            fail(f"{name} = {v!r} should be a positive whole number (an int)")
    if count_many_heads != count_one_head:
        fail(f"{n_heads} heads give {count_many_heads} parameters and 1 head gives {count_one_head}; splitting W_Q, "
             "W_K and W_V into heads cuts each matrix into column slices, it does not add or remove any entry")
    ok(f"parameter counts: whole numbers, and the same for {n_heads} heads and for 1 head (graded when submitted)")


def check_choice(answer, name="mc_answer"):
    """Only the form of a multiple-choice answer: one letter from a to d, as a string."""
    if answer is None:
        raise NotImplementedError(f"{name} is not implemented yet: set it to the letter of your choice, as a "
                                  "string, in the cell above, run it, then run this check again.")
    if type(answer) is not str or answer.strip().lower() not in tuple("abcd"):
        fail(f"{name} = {answer!r}: record a single letter from a to d as a string")
    ok(f"{name}: one letter recorded ({answer.strip().lower()}); it is graded when the notebook is graded")


# ------------------------------------------------------------------------------------------ split / merge
def _split_is_right(split_into_heads):
    """True when split_into_heads passes the arange probe (used to decide whether later probes can run)."""
    try:
        with np.errstate(all="ignore"):
            x = np.arange(120.0).reshape(5, 3, 8)  # (B, T, d_model)
            got = split_into_heads(x, 2)
            one = split_into_heads(x[0], 2)
        return (close(got, np.stack([x[..., :4], x[..., 4:]], axis=1), 0.0)
                and close(one, np.stack([x[0, :, :4], x[0, :, 4:]]), 0.0))
    except Exception:
        return False


def _merge_is_right(merge_heads):
    try:
        heads = np.arange(120.0).reshape(5, 2, 3, 4)  # (B, n_heads, T, d_head)
        got = merge_heads(heads)
        one = merge_heads(heads[0])
        return (close(got, np.concatenate([heads[:, 0], heads[:, 1]], axis=-1), 0.0)
                and close(one, np.concatenate([heads[0, 0], heads[0, 1]], axis=-1), 0.0))
    except Exception:
        return False


def check_split_merge(split_into_heads, merge_heads):
    """Head i holds columns i*d_head:(i+1)*d_head of every token, batches work, and the round trip is exact."""
    T, n_heads, d_head = 3, 2, 4
    d_model = n_heads * d_head
    x = np.arange(T * d_model, dtype=float).reshape(T, d_model)  # entry = d_model * token + column
    heads = call(split_into_heads, "split_into_heads", x, n_heads)
    if not np.array_equal(x, np.arange(T * d_model, dtype=float).reshape(T, d_model)):
        fail("split_into_heads changed its input in place; return a new array (or a view) instead")
    if np.shape(heads) == (T, n_heads, d_head):
        fail(f"split_into_heads(x of shape (T, d_model) = {x.shape}, n_heads={n_heads}) has shape (T, n_heads, "
             f"d_head) = {np.shape(heads)}: you reshaped but did not move the head axis in front of T "
             "(swap the T and n_heads axes)")
    if np.shape(heads) != (n_heads, T, d_head):
        fail(f"split_into_heads gave shape {np.shape(heads)}, expected (n_heads, T, d_head) = "
             f"{(n_heads, T, d_head)}")
    heads = np.asarray(heads)
    token, column = heads // d_model, heads % d_model
    if not np.array_equal(token, np.broadcast_to(np.arange(T)[None, :, None], heads.shape)):
        fail(f"row t of every head should come from token t, but with x = np.arange({T * d_model}).reshape({T}, "
             f"{d_model}) (entry = {d_model} * token + column) your head 0 is {heads[0].astype(int).tolist()}: "
             f"its rows come from tokens {token[0, :, 0].astype(int).tolist()}. Did you reshape straight to "
             "(n_heads, T, d_head)? Reshape to (T, n_heads, d_head) first, then swap the T and n_heads axes")
    if np.array_equal(column[0, 0], np.arange(0, d_model, n_heads)):
        fail(f"head 0 holds columns {column[0, 0].tolist()} of token 0: did you reshape to (T, d_head, n_heads)? "
             "Head i must hold the contiguous block of columns i*d_head:(i+1)*d_head, so reshape to "
             "(T, n_heads, d_head)")
    if not np.array_equal(column, np.broadcast_to(np.arange(d_model).reshape(n_heads, 1, d_head), heads.shape)):
        fail(f"head 0 holds columns {column[0, 0].tolist()} of token 0, expected {list(range(d_head))}: head i "
             "holds columns i*d_head:(i+1)*d_head")
    B = 5
    xb = np.arange(B * T * d_model, dtype=float).reshape(B, T, d_model)
    try:
        heads_b = split_into_heads(xb, n_heads)
    except NotImplementedError:
        raise
    except Exception as exc:
        fail(f"split_into_heads fails on a batch x of shape (B, T, d_model) = {xb.shape}: {exc}. Use negative "
             "axes (counted from the end) so leading batch axes pass through")
    if np.shape(heads_b) != (B, n_heads, T, d_head) or not all(
            np.array_equal(heads_b[b], np.asarray(split_into_heads(xb[b], n_heads))) for b in range(B)):
        fail(f"on a batch of shape {xb.shape} split_into_heads should give (B, n_heads, T, d_head) = "
             f"{(B, n_heads, T, d_head)} with each example split as on its own, got shape {np.shape(heads_b)}: "
             "swap the two axes just before d_head, counted from the end, not fixed axes 0 and 1")
    merged = call(merge_heads, "merge_heads", heads)
    if np.shape(merged) != (T, d_model):
        fail(f"merge_heads of shape (n_heads, T, d_head) = {heads.shape} gave {np.shape(merged)}, expected "
             f"(T, d_model) = {(T, d_model)}")
    if not np.array_equal(merged, x):
        fail("merge_heads(split_into_heads(x)) is not x: merge must undo the split in reverse order, moving the "
             "head axis back behind T *before* the reshape to (T, d_model)")
    merged_b = call(merge_heads, "merge_heads", np.asarray(heads_b))
    if np.shape(merged_b) != xb.shape or not np.array_equal(merged_b, xb):
        fail("merge_heads does not undo the split on a batch (B, n_heads, T, d_head): use negative axes")
    rng = np.random.default_rng(5)
    x32 = rng.normal(size=(4, 7, 18)).astype(np.float32)  # (B, T, d_model), d_model = 3 heads x 6 columns
    back = call(merge_heads, "merge_heads", call(split_into_heads, "split_into_heads", x32, 3))
    if getattr(back, "dtype", None) != np.float32 or not np.array_equal(back, x32):
        fail("on a random float32 batch the round trip did not return x bit for bit (or changed the dtype); "
             "splitting and merging only move numbers, so nothing may be computed on them")
    ok("split_into_heads / merge_heads: head i holds columns i*d_head:(i+1)*d_head, batches work, and "
       "merge(split(x)) == x exactly")


# ------------------------------------------------------------------------------------------ head weights
def _probe_layer(T=5, d_model=12, seed=11):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, d_model))
    W_Q = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    W_K = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    return x, W_Q, W_K


def _scale_probe(T=5, d_model=12, n_heads=3, seed=3):
    """x non-zero only in head 0's columns and W_Q = W_K = identity: head 0's raw scores are known."""
    d_head = d_model // n_heads
    rng = np.random.default_rng(seed)
    x = np.zeros((T, d_model))
    x[:, :d_head] = rng.normal(size=(T, d_head))
    return x, np.eye(d_model), x[:, :d_head] @ x[:, :d_head].T, d_head


def _scale_message(c, d_head, d_model):
    if c is None:
        return ("head 0's weights are not a softmax of its own scores Q_0 K_0^T (each row along the keys): check "
                "the order of the matmul and the softmax axis")
    for scale, message in (
            (1.0, "the scores are not scaled: divide them by sqrt(d_head)"),
            (1 / d_head, "the scores are divided by d_head; divide by sqrt(d_head), the standard deviation"),
            (1 / math.sqrt(d_model), "the scores are divided by sqrt(d_model); each head's scores take the scale "
                                     "of that head's own width: divide by sqrt(d_head) (lesson 04 measures why)")):
        if abs(c - scale) < 1e-6:
            return message
    return f"head 0's scores are multiplied by {c:.4g}; expected 1/sqrt(d_head) = {1 / math.sqrt(d_head):.4g}"


def _on_batch(fn, name, x, *args):
    """fn(x, *args) on a batched x; an error there is reported as what it is: code written for one sequence."""
    try:
        return fn(x, *args)
    except NotImplementedError:
        return call(fn, name, x, *args)
    except Exception as exc:
        fail(f"{name} fails on a batch x of shape (B, T, d_model) = {x.shape} ({type(exc).__name__}: {exc}) though "
             "it works on one sequence: some axis is counted from the front (x.shape[0], K.T, transpose(0, 2, 1), "
             "a fixed batch size); count the axes from the end so leading batch axes pass through")


def _projection_probe(T=5, d_model=12, n_heads=3, seed=7):
    """A layer with W_K = identity and a W_Q that is not symmetric: x @ W_Q and x @ W_Q.T differ, so head 0's
    raw scores tell which one was used. Returns x, W_Q, W_K, head 0's raw scores with x @ W and with x @ W.T."""
    d_head = d_model // n_heads
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, d_model))
    W_Q = np.eye(d_model) + np.triu(rng.normal(size=(d_model, d_model)), k=1)  # not symmetric
    W_K = np.eye(d_model)
    K0 = x[:, :d_head]  # head 0's keys (W_K = identity)
    return x, W_Q, W_K, (x @ W_Q)[:, :d_head] @ K0.T, (x @ W_Q.T)[:, :d_head] @ K0.T


def _projections_transposed(weights0, raw, raw_t):
    """True when head 0's weights are a softmax of the scores x @ W.T would give and not of those x @ W gives."""
    return effective_scale(weights0, raw) is None and effective_scale(weights0, raw_t) is not None


_TRANSPOSED = ("the queries and keys are projected with the transposed weights (x @ W.T): on a W_Q that is not "
               "symmetric, head 0's weights follow x @ W_Q.T. The course applies every projection as x @ W, the "
               "rows of W taking the input's d_model features (the identity and zero probes cannot tell the two "
               "apart)")


def check_head_weights(head_weights, split_into_heads=None):
    """Shape, rows sum to 1, same input same output, W_Q = 0 gives uniform weights; then per-head probes."""
    T, d_model, n_heads = 5, 12, 3
    x, W_Q, W_K = _probe_layer(T, d_model)
    copies = [a.copy() for a in (x, W_Q, W_K)]
    w = call(head_weights, "head_weights", x, W_Q, W_K, n_heads)
    if any(not np.array_equal(a, b) for a, b in zip((x, W_Q, W_K), copies)):
        fail("head_weights changed one of its inputs in place; compute new arrays instead")
    if np.shape(w) == (T, n_heads, T):
        fail(f"head_weights gave shape (T, n_heads, T) = {np.shape(w)}: the head axis must come first, "
             f"(n_heads, T, T) = {(n_heads, T, T)}")
    if np.shape(w) != (n_heads, T, T):
        fail(f"head_weights gave shape {np.shape(w)}, expected (n_heads, T, T) = {(n_heads, T, T)}")
    w = np.asarray(w, float)
    if np.any(w < 0) or not close(w.sum(axis=-1), np.ones((n_heads, T))):
        fail("every row of every head should be a probability distribution over the keys (non-negative, sums "
             "to 1): apply softmax along the last axis")
    again = call(head_weights, "head_weights", x, W_Q, W_K, n_heads)
    if not np.array_equal(np.asarray(again, float), w):
        fail("head_weights returned different weights for the same x, W_Q and W_K: the weights must be "
             "computed from the layer, with no random numbers. Two random patterns always 'differ', which "
             "proves nothing about the layer")
    flat = call(head_weights, "head_weights", x, np.zeros_like(W_Q), W_K, n_heads)
    if not close(flat, np.full((n_heads, T, T), 1 / T), 1e-9):
        fail(f"with W_Q = 0 every query is 0, so every score is 0 and every weight must be 1/T = {1 / T:.3g}; "
             "yours are not: the weights must be softmax of the scores Q_h K_h^T / sqrt(d_head) of the layer")
    if split_into_heads is not None and not _split_is_right(split_into_heads):
        ok("head_weights: shape, rows sum to 1, deterministic, W_Q = 0 gives uniform weights (the batch and "
           "per-head probes run once split_into_heads passes its check)")
        return
    B = 2
    xb = np.stack([x, x[::-1]])
    wb = _on_batch(head_weights, "head_weights", xb, W_Q, W_K, n_heads)
    if np.shape(wb) != (B, n_heads, T, T) or not close(wb[1], head_weights(x[::-1], W_Q, W_K, n_heads), 1e-9):
        fail(f"on a batch x of shape (B, T, d_model) = {xb.shape} head_weights should give (B, n_heads, T, T) = "
             f"{(B, n_heads, T, T)}, each example as on its own (got shape {np.shape(wb)}): use negative axes")
    x_p, W_Q_p, W_K_p, raw, raw_t = _projection_probe(T, d_model, n_heads)
    w_p = np.asarray(call(head_weights, "head_weights", x_p, W_Q_p, W_K_p, n_heads), float)
    if _projections_transposed(w_p[0], raw, raw_t):
        fail(_TRANSPOSED)
    w32 = call(head_weights, "head_weights", x.astype(np.float32), W_Q.astype(np.float32), W_K.astype(np.float32),
               n_heads)
    if getattr(w32, "dtype", None) != np.float32 or getattr(again, "dtype", None) != np.float64:
        fail(f"float32 input gave {getattr(w32, 'dtype', type(w32))} weights and float64 input "
             f"{getattr(again, 'dtype', type(again))}: the weights must keep the input's dtype (a numpy float64 "
             "scale such as np.sqrt(d_head) promotes float32; math.sqrt does not)")
    d_head = d_model // n_heads
    for j in range(n_heads):
        W_Q_j = W_Q.copy()
        W_Q_j[:, j * d_head:(j + 1) * d_head] = 0.0  # head j's queries become 0
        wj = np.asarray(call(head_weights, "head_weights", x, W_Q_j, W_K, n_heads), float)
        if not close(wj[j], np.full((T, T), 1 / T), 1e-9):
            fail(f"zeroing the columns {j * d_head}:{(j + 1) * d_head} of W_Q (head {j}'s queries) should make "
                 f"head {j}'s weights uniform, but it does not: head {j} must use exactly columns "
                 f"j*d_head:(j+1)*d_head of Q and K (reshape to (T, n_heads, d_head), then swap axes)")
        others = [i for i in range(n_heads) if i != j]
        if not close(wj[others], w[others], 1e-9):
            fail(f"zeroing head {j}'s columns of W_Q changed the weights of other heads: each head must see only "
                 "its own columns")
    if np.allclose(w[0], w[1], atol=1e-3):
        fail("heads 0 and 1 give the same weights on a random layer: each head must use its own column slice")
    x_s, eye, raw0, d_head = _scale_probe(T, d_model, n_heads)
    ws = np.asarray(call(head_weights, "head_weights", x_s, eye, eye, n_heads), float)
    c = effective_scale(ws[0], raw0)
    if c is None or abs(c - 1 / math.sqrt(d_head)) > 1e-6:
        fail(_scale_message(c, d_head, d_model))
    ok("head_weights: shape (n_heads, T, T), rows sum to 1, computed from the layer with x @ W, each head uses "
       "only its own columns, scale 1/sqrt(d_head), batches work, the input's dtype kept")


# ------------------------------------------------------------------------------------ mha from raw operations
def check_mha_from_scratch(mha_from_scratch, split_into_heads=None, merge_heads=None):
    """Output (T, d_model) for every head count; W_O applied; W_Q = 0 gives a known output; the per-head scale."""
    T, d_model = 5, 12
    x, W_Q, W_K = _probe_layer(T, d_model, seed=21)
    rng = np.random.default_rng(22)
    W_V = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    W_O = rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)
    args = (x, W_Q, W_K, W_V, W_O)
    copies = [a.copy() for a in args]
    for n_heads in (1, 2, 3, 4, 6, 12):
        result = call(mha_from_scratch, "mha_from_scratch", *args, n_heads)
        if not isinstance(result, tuple) or len(result) != 2:
            fail("mha_from_scratch must return a pair: (out, weights)")
        out, weights = result
        if np.shape(out) != (T, d_model):
            fail(f"with n_heads={n_heads} the output has shape {np.shape(out)}, expected (T, d_model) = "
                 f"{(T, d_model)} whatever the head count: concatenate the heads, then apply W_O")
        if np.shape(weights) != (n_heads, T, T):
            fail(f"with n_heads={n_heads} the weights have shape {np.shape(weights)}, expected (n_heads, T, T) = "
                 f"{(n_heads, T, T)}")
        if not close(np.asarray(weights, float).sum(axis=-1), np.ones((n_heads, T))):
            fail("each row of each head's weights should sum to 1: softmax over the keys (last axis)")
    if any(not np.array_equal(a, b) for a, b in zip(args, copies)):
        fail("mha_from_scratch changed one of its inputs in place; compute new arrays instead")
    n_heads = 3
    out, _ = mha_from_scratch(*args, n_heads)
    zero_out, _ = call(mha_from_scratch, "mha_from_scratch", x, W_Q, W_K, W_V, np.zeros_like(W_O), n_heads)
    if not close(zero_out, np.zeros((T, d_model)), 1e-12):
        fail("with W_O = 0 the output should be 0, but it is not: the output is Concat(heads) @ W_O, so W_O "
             "must be applied last")
    helpers_ok = ((split_into_heads is None or _split_is_right(split_into_heads))
                  and (merge_heads is None or _merge_is_right(merge_heads)))
    if not helpers_ok:
        ok("mha_from_scratch: shapes for every head count, W_O applied (the batch and value probes run "
           "once split_into_heads and merge_heads pass their check)")
        return
    xb = np.stack([x, x[::-1], 2 * x])
    outb, wb = _on_batch(mha_from_scratch, "mha_from_scratch", xb, W_Q, W_K, W_V, W_O, n_heads)
    if np.shape(outb) != (3, T, d_model) or np.shape(wb) != (3, n_heads, T, T) or not close(outb[0], out, 1e-9):
        fail(f"on a batch x of shape (B, T, d_model) = {xb.shape} the result should be out (B, T, d_model) and "
             f"weights (B, n_heads, T, T), each example as on its own: use negative axes")
    flat_out, flat_w = call(mha_from_scratch, "mha_from_scratch", x, np.zeros_like(W_Q), W_K, W_V, W_O, n_heads)
    expected = np.broadcast_to((x @ W_V).mean(axis=0) @ W_O, (T, d_model))
    if not close(flat_w, np.full((n_heads, T, T), 1 / T), 1e-9):
        fail("with W_Q = 0 every score is 0 and every weight must be 1/T; yours are not")
    if not close(flat_out, expected, 1e-9):
        if close(flat_out, np.broadcast_to((x @ W_V).mean(axis=0) @ W_O.T, (T, d_model)), 1e-9):
            fail("W_O is applied transposed: the output is Concat(heads) @ W_O, with W_O of shape "
                 "(n_heads*d_head, d_model)")
        fail("with W_Q = 0 each head averages its values over all tokens, so every output row must be "
             "mean_t(x @ W_V) @ W_O; yours is not: check that V is split into heads like Q and K, and that the "
             "heads are concatenated (not summed or averaged) before W_O")
    x_p, W_Q_p, W_K_p, raw, raw_t = _projection_probe(T, d_model, n_heads)
    _, w_p = call(mha_from_scratch, "mha_from_scratch", x_p, W_Q_p, W_K_p, W_V, W_O, n_heads)
    if _projections_transposed(np.asarray(w_p, float)[0], raw, raw_t):
        fail(_TRANSPOSED)
    out32, _ = call(mha_from_scratch, "mha_from_scratch", *(a.astype(np.float32) for a in args), n_heads)
    if getattr(out32, "dtype", None) != np.float32 or getattr(out, "dtype", None) != np.float64:
        fail(f"float32 input gave a {getattr(out32, 'dtype', type(out32))} output and float64 input "
             f"{getattr(out, 'dtype', type(out))}: the output must keep the input's dtype (a numpy float64 scale "
             "such as np.sqrt(d_head) promotes float32; math.sqrt does not)")
    x_s, eye, raw0, d_head = _scale_probe(T, d_model, n_heads)
    _, ws = call(mha_from_scratch, "mha_from_scratch", x_s, eye, eye, W_V, W_O, n_heads)
    c = effective_scale(np.asarray(ws, float)[0], raw0)
    if c is None or abs(c - 1 / math.sqrt(d_head)) > 1e-6:
        fail(_scale_message(c, d_head, d_model))
    ok("mha_from_scratch: out is (T, d_model) for 1, 2, 3, 4, 6 and 12 heads, W_O applied, the W_Q = 0 output "
       "is right, x @ W, scale 1/sqrt(d_head), batches work, the input's dtype kept")


# ------------------------------------------------------------------------------------------ find the bug
def _pair(result, name):
    if not isinstance(result, tuple) or len(result) != 2:
        fail(f"{name} must return a pair: (out, weights)")
    return np.asarray(result[0]), np.asarray(result[1])


def check_masked_attention(masked_attention):
    """Symptoms only: blocked weights 0, every row of weights that keeps a key sums to 1, a query whose keys are all
    blocked gets all-zero weights, out = weights @ V, a mask per batch element and one for the whole batch, float32
    kept."""
    rng = np.random.default_rng(55)
    Q, K, V = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 6))  # (B, T_q, d_k), (B, T_k, d_k), (B, T_k, d_v)
    mask = np.zeros((2, 3, 5), dtype=bool)  # (B, T_q, T_k), True = blocked
    mask[0, 0, 1:] = True  # batch 0, query 0 may see key 0 only
    mask[1, 2, :2] = True  # batch 1, query 2 may not see keys 0 and 1
    mask[1, 1, :] = True  # batch 1, query 1 may see no key at all
    with np.errstate(all="ignore"):
        out, weights = _pair(call(masked_attention, "masked_attention", Q, K, V, mask), "masked_attention")
    if weights.shape != (2, 3, 5) or out.shape != (2, 3, 6):
        fail(f"expected out (B, T_q, d_v) = (2, 3, 6) and weights (B, T_q, T_k) = (2, 3, 5), got {out.shape} and "
             f"{weights.shape}")
    row = weights[1, 1]  # (T_k,): a query whose keys are all blocked
    if np.any(np.isnan(row)) or np.any(row != 0):
        fail(f"query 1 of batch 1 has every key blocked and got the weights {np.round(row, 4).tolist()}; lesson 01's "
             "contract gives such a query all-zero weights (and a zero output row). NaN there is 0/0; equal "
             "weights mean its blocked scores were all equal, but finite")
    if np.any(weights[mask] != 0):
        fail("some blocked pairs (mask True) have a weight that is not 0")
    open_rows = ~mask.all(axis=-1)  # (B, T_q): the queries that keep a key
    sums = weights.sum(axis=-1)  # (B, T_q)
    if not close(sums[open_rows], np.ones(int(open_rows.sum())), 1e-8):
        b, q = np.unravel_index(np.argmax(np.where(open_rows, np.abs(sums - 1), 0)), sums.shape)
        fail(f"the weights of batch {b}, query {q} sum to {sums[b, q]:.3f}, not 1 (that row has "
             f"{int(mask[b, q].sum())} blocked keys); rows without a blocked key sum to "
             f"{sums[~mask.any(axis=-1)].min():.3f}")
    if not close(out, weights @ V, 1e-8):
        fail("out is not weights @ V")
    shared = mask[0]  # (T_q, T_k): one mask for the whole batch, broadcast as in lesson 01
    try:
        with np.errstate(all="ignore"):
            w_shared = _pair(call(masked_attention, "masked_attention", Q, K, V, shared), "masked_attention")[1]
    except IndexError as exc:
        fail(f"with one (T_q, T_k) mask for a batch (B, T_q, T_k) of scores, masked_attention raised IndexError: "
             f"{exc}. A mask broadcasts over the batch, as in lesson 01; indexing with a boolean array does not")
    if not close(w_shared[0], weights[0], 1e-8):
        fail("one (T_q, T_k) mask for the whole batch gives batch 0 other weights than the same mask given per "
             "batch element")
    with np.errstate(all="ignore"):
        w32 = call(masked_attention, "masked_attention", *(a.astype(np.float32) for a in (Q, K, V)), mask)[1]
    if getattr(w32, "dtype", None) != np.float32:
        fail(f"float32 input gave {getattr(w32, 'dtype', type(w32))} weights: scale with math.sqrt")
    ok("masked_attention: blocked weights 0, every row that keeps a key sums to 1, a query with every key blocked "
       "gets zeros, one mask for a whole batch broadcasts, out = weights @ V, float32 kept")


def check_attention_layer(attention_layer):
    """Symptoms only: shapes; a probe whose Q and K live in head 0's columns only (every other head must attend
    uniformly); W_Q = W_K = 0 (every head uniform, so out is the mean over tokens of x @ W_V, times W_O);
    float32 kept."""
    rng = np.random.default_rng(56)
    T, n_heads, d_head = 5, 3, 4
    d_model = n_heads * d_head
    x = rng.normal(size=(2, T, d_model))  # (B, T, d_model)
    W_Q, W_K, W_V, W_O = rng.normal(size=(4, d_model, d_model)) / math.sqrt(d_model)  # each (d_model, d_model)
    out, weights = _pair(call(attention_layer, "attention_layer", x, W_Q, W_K, W_V, W_O, n_heads), "attention_layer")
    if out.shape != (2, T, d_model) or weights.shape != (2, n_heads, T, T):
        fail(f"expected out (B, T, d_model) = {(2, T, d_model)} and weights (B, n_heads, T, T) = "
             f"{(2, n_heads, T, T)}, got {out.shape} and {weights.shape}")
    # probe 1: Q and K are zero outside columns 0:d_head, which belong to head 0 alone
    only_head_0 = np.zeros(d_model)
    only_head_0[:d_head] = 1.0  # (d_model,)
    probe_w = _pair(call(attention_layer, "attention_layer", x, W_Q * only_head_0, W_K * only_head_0, W_V, W_O,
                         n_heads), "attention_layer")[1]
    uniform = [h for h in range(n_heads) if close(probe_w[:, h], np.full((2, T, T), 1 / T), 1e-8)]
    # probe 2: all scores 0, so every head averages its values over the tokens
    zero = np.zeros_like(W_Q)
    out0 = _pair(call(attention_layer, "attention_layer", x, zero, zero, W_V, W_O, n_heads), "attention_layer")[0]
    mean = np.broadcast_to((x @ W_V).mean(axis=-2, keepdims=True) @ W_O, out0.shape)  # (B, T, d_model)
    if uniform != list(range(1, n_heads)):
        undone = (" With W_Q = W_K = 0 your layer's output is right, so its merge puts every column back where its "
                  "split took it from: a merge changed to match the split cannot fix which columns a head reads; "
                  "only the split can") if close(out0, mean, 1e-8) else ""
        fail(f"with W_Q and W_K zero outside columns 0:{d_head} (head 0's block; d_model = {d_model}, n_heads = "
             f"{n_heads}), heads 1 and 2 should score every key 0 and attend uniformly (1/T), and head 0 should "
             f"not; the heads that attend uniformly are {uniform}. Which columns of Q and K does each head read?"
             + undone)
    if not close(out0, mean, 1e-8):
        fail("with W_Q = W_K = 0 every weight is 1/T, so every head averages its values and out should be the mean "
             "over tokens of x @ W_V, times W_O; yours differs: do the heads come back to the columns they were "
             "taken from?")
    out32 = call(attention_layer, "attention_layer", *(a.astype(np.float32) for a in (x, W_Q, W_K, W_V, W_O)),
                 n_heads)[0]
    if getattr(out32, "dtype", None) != np.float32:
        fail(f"float32 input gave {getattr(out32, 'dtype', type(out32))} output")
    ok("attention_layer: each head reads its own block of columns, and uniform weights give the mean of the values")


# this lesson's functions, each with the checks that take it alone: a check of a function that calls one of
# them names it when it is the one that is wrong (selfcheck_common.own)
own("head_weights", check_head_weights)
own("masked_attention", check_masked_attention)
