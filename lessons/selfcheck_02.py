# Built from solutions/selfcheck_02.py by `make lessons`; edit that file, not this one.
"""Self-checks of lesson 02: split_heads, concat_heads, output_projection, multi_head_attention.

The checks feed arrays whose entries say where they came from (entry (t, c) of x is 100*t + c), so a wrong
result can be read back as "which token and which column ended up here". Lesson 01's checks are here too, for
the attention you paste in; the shared part is in ``selfcheck_common.py``.
"""

from __future__ import annotations

import math

import numpy as np

# lesson 01's checks, for the pasted attention
from selfcheck_01 import check_attention, check_attention_mask, check_softmax, check_softmax_stable
from selfcheck_common import call, check_pasted, close, effective_scale, fail, ok, own, pasted

# the paste cell's functions, from lesson 01: a failure of theirs is reported as coming from lesson 01
pasted("01", "softmax", check_softmax, check_softmax_stable)
pasted("01", "scaled_dot_product_attention", check_attention, check_attention_mask)

__all__ = ["check_pasted",
           "check_softmax", "check_softmax_stable", "check_attention", "check_attention_mask", "column_probe",
           "check_split_heads", "check_concat_heads", "check_output_projection", "check_sum_over_heads",
           "check_multi_head_attention", "check_mha_mask", "check_round_trip"]


def column_probe(T, d_model, B=None):
    """x with x[..., t, c] = 100*t + c (plus 10000*b for batch element b): every entry names its token and column."""
    t = np.arange(T)[:, None]
    c = np.arange(d_model)[None, :]
    x = (100.0 * t + c)  # (T, d_model)
    if B is None:
        return x
    return x[None] + 10000.0 * np.arange(B)[:, None, None]  # (B, T, d_model)


def _split_expected(T, n_heads, d_head, B=None):
    """The split of column_probe written entry by entry: head i, token t, slot j holds column i*d_head + j."""
    i, t, j = np.indices((n_heads, T, d_head))
    e = 100.0 * t + i * d_head + j  # (n_heads, T, d_head)
    if B is None:
        return e
    return e[None] + 10000.0 * np.arange(B)[:, None, None, None]


def _describe_head0(got, d_head):
    """'row r holds token a's columns [...]' for the first rows of head 0 of a column_probe split."""
    head0 = np.asarray(got)[0]
    rows = []
    for r in range(min(2, head0.shape[0])):
        toks = sorted({int(v // 100) for v in head0[r]})
        cols = [int(v % 100) for v in head0[r]]
        who = f"token {toks[0]}" if len(toks) == 1 else "tokens " + ", ".join(map(str, toks))
        rows.append(f"row {r} holds columns {cols} of {who}")
    return "; ".join(rows)


def check_split_heads(split_heads):
    """Which columns land in which head, on one sequence and on a batch; ValueError; input and dtype kept."""
    T, n_heads, d_head = 5, 4, 3
    d_model = n_heads * d_head
    x = column_probe(T, d_model)
    before = x.copy()
    got = call(split_heads, "split_heads", x, n_heads)
    if not np.array_equal(x, before):
        fail("split_heads changed its input in place; return a new array (or a view), never write into x")
    if np.shape(got) == (T, n_heads, d_head):
        fail(f"split_heads gave shape (T, n_heads, d_head) = {np.shape(got)}: you reshaped but did not move "
             "the heads axis in front. Swap the T and n_heads axes, counted from the end")
    if np.shape(got) != (n_heads, T, d_head):
        fail(f"split_heads(x of shape (T, d_model) = {x.shape}, n_heads={n_heads}) should have shape "
             f"(n_heads, T, d_head) = {(n_heads, T, d_head)}, got {np.shape(got)}")
    expected = _split_expected(T, n_heads, d_head)
    if not np.array_equal(got, expected):
        head0 = np.asarray(got)[0]
        if np.array_equal(head0[0] % 100, np.arange(0, d_model, n_heads)):
            fail(f"head 0 holds columns {[int(v) for v in head0[0] % 100]} of each token (every "
                 f"{n_heads}th column): did you reshape to (T, d_head, n_heads)? Reshape to "
                 "(T, n_heads, d_head) so head 0 gets the contiguous block 0:d_head")
        if np.array_equal(np.asarray(got), x.reshape(n_heads, T, d_head)):
            fail("head 0 should hold columns 0:d_head of *every* token, but " + _describe_head0(got, d_head)
                 + ". You reshaped straight to (n_heads, T, d_head): reshape to (T, n_heads, d_head) "
                 "first, then swap the T and n_heads axes")
        fail("split_heads put the wrong entries in the heads; head 0 should hold columns 0:d_head of every "
             "token, but " + _describe_head0(got, d_head))
    B = 2
    xb = column_probe(T, d_model, B)
    gotb = call(split_heads, "split_heads", xb, n_heads)
    if np.shape(gotb) != (B, n_heads, T, d_head):
        fail(f"on a batch (B, T, d_model) = {xb.shape} the result should be (B, n_heads, T, d_head) = "
             f"{(B, n_heads, T, d_head)}, got {np.shape(gotb)}: count the axes from the end "
             "(-3 and -2) so the batch axis stays in front")
    if not np.array_equal(gotb, _split_expected(T, n_heads, d_head, B)):
        fail("split_heads is right for one sequence but wrong on a batch: axes were swapped counting from the "
             "front (0, 1) instead of from the end (-3, -2)")
    x32 = x.astype(np.float32)
    got32 = call(split_heads, "split_heads", x32, n_heads)
    if getattr(got32, "dtype", None) != np.float32:
        fail(f"float32 input came back as {getattr(got32, 'dtype', type(got32))}: keep the input's dtype")
    try:
        split_heads(np.zeros((T, 13)), n_heads)
    except ValueError:
        pass
    except NotImplementedError:
        raise
    except Exception as exc:
        fail(f"split_heads(x with d_model=13, n_heads=4) raised {type(exc).__name__}; raise ValueError "
             "with a message saying that n_heads must divide d_model")
    else:
        fail("split_heads(x with d_model=13, n_heads=4) returned a result; 4 heads cannot share 13 columns "
             "equally: raise ValueError")
    ok("split_heads: head i holds columns i*d_head:(i+1)*d_head of every token, batched too; ValueError when "
       "n_heads does not divide d_model")


def check_concat_heads(concat_heads):
    """Token t's row is head 0, head 1, ... of token t side by side; batches; exact inverse of the split."""
    T, n_heads, d_head = 5, 4, 3
    d_model = n_heads * d_head
    heads = _split_expected(T, n_heads, d_head)  # head i, token t, slot j holds 100*t + i*d_head + j
    before = heads.copy()
    got = call(concat_heads, "concat_heads", heads)
    if not np.array_equal(heads, before):
        fail("concat_heads changed its input in place; return a new array")
    if np.shape(got) != (T, d_model):
        fail(f"concat_heads of (n_heads, T, d_head) = {heads.shape} should be (T, n_heads*d_head) = "
             f"{(T, d_model)}, got {np.shape(got)}")
    expected = column_probe(T, d_model)
    if not np.array_equal(got, expected):
        if np.array_equal(got, heads.reshape(T, d_model)):
            row0 = sorted({int(v // 100) for v in np.asarray(got)[0]})
            fail(f"row 0 of the result holds pieces of tokens {row0} from head 0 instead of all heads of token "
                 "0: you reshaped without moving the heads axis back. Swap n_heads and T (axes -3 and -2, "
                 "counted from the end), then reshape")
        fail("concat_heads put the wrong entries in the rows: row t should be head 0, head 1, ... of token t "
             "side by side")
    B = 2
    gotb = call(concat_heads, "concat_heads", _split_expected(T, n_heads, d_head, B))
    if np.shape(gotb) != (B, T, d_model):
        fail(f"on a batch (B, n_heads, T, d_head) the result should be (B, T, d_model) = {(B, T, d_model)}, got "
             f"{np.shape(gotb)}; count the axes from the end (-3 and -2)")
    if not np.array_equal(gotb, column_probe(T, d_model, B)):
        rows = sorted({int(v // 10000) for v in np.asarray(gotb)[0].ravel()})
        fail(f"concat_heads is right for one sequence but mixes a batch: output example 0 holds numbers from input "
             f"examples {rows}. Swap axes -3 and -2 (counted from the end), not 0 and 1")
    ok("concat_heads: row t is head 0, head 1, ... of token t side by side, batched too; it undoes the split")


def _concat_by_hand(heads):
    """Concat(heads) written as a concatenation along the last axis (no reshape involved)."""
    heads = np.asarray(heads)
    return np.concatenate([heads[..., i, :, :] for i in range(heads.shape[-3])], axis=-1)


def check_output_projection(output_projection):
    """Concat(heads) @ W_O, probed with an identity W_O and a W_O that only reads one head."""
    rng = np.random.default_rng(3)
    n_heads, T, d_head = 4, 5, 3
    d_model = n_heads * d_head
    heads = rng.normal(size=(n_heads, T, d_head))
    W_O = rng.normal(size=(d_model, d_model))
    copies = heads.copy(), W_O.copy()
    got = call(output_projection, "output_projection", heads, W_O)
    if not (np.array_equal(heads, copies[0]) and np.array_equal(W_O, copies[1])):
        fail("output_projection changed heads or W_O in place; compute new arrays")
    if np.shape(got) != (T, d_model):
        fail(f"output_projection of heads (n_heads, T, d_head) = {heads.shape} with W_O {W_O.shape} should "
             f"be (T, d_model) = {(T, d_model)}, got {np.shape(got)}")
    concat = _concat_by_hand(heads)
    expected = concat @ W_O
    if not close(got, expected, 1e-9):
        if close(got, concat, 1e-9):
            fail("the result is the concatenated heads themselves: W_O was never applied. W_O is what mixes "
                 "the heads into each output column: revisit what Concat(heads) @ W_O means")
        if close(got, concat @ W_O.T, 1e-9):
            fail("the result is Concat(heads) @ W_O.T: W_O is transposed. Row block i of W_O belongs to head i, "
                 "so multiply by W_O as it is")
        if close(got, expected / n_heads, 1e-9):
            fail("the result is 1/n_heads of the right one: the heads' contributions were averaged. They add up")
        one = np.zeros_like(W_O)
        one[d_head:2 * d_head] = W_O[d_head:2 * d_head]  # only head 1's rows are non-zero
        probe = call(output_projection, "output_projection", heads, one)
        if not close(probe, heads[1] @ W_O[d_head:2 * d_head], 1e-9):
            fail("with only rows d_head:2*d_head of W_O non-zero (the rows that belong to head 1) the result "
                 "should be head_1 @ those rows; it is not, so the heads do not meet their own rows of W_O. "
                 "Concatenate the heads (do not sum or average them) before multiplying by W_O")
        fail("output_projection differs from Concat(heads) @ W_O; check the concatenation and the product")
    gotb = call(output_projection, "output_projection", heads[None].repeat(2, axis=0), W_O)
    if np.shape(gotb) != (2, T, d_model) or not close(gotb[1], expected, 1e-9):
        fail("output_projection works for one sequence but not for a batch (B, n_heads, T, d_head): the "
             "heads axis is -3, counted from the end")
    ok("output_projection: Concat(heads) @ W_O, each head meets its own rows of W_O, batched too")


def check_sum_over_heads(output_projection_per_head):
    """The per-head form, the sum over heads of head i times its own rows of W_O, equals Concat(heads) @ W_O."""
    rng = np.random.default_rng(11)
    n_heads, T, d_head = 3, 4, 2
    d_model = n_heads * d_head
    heads = rng.normal(size=(n_heads, T, d_head))
    W_O = rng.normal(size=(d_model, d_model))
    got = call(output_projection_per_head, "output_projection_per_head", heads, W_O)
    expected = _concat_by_hand(heads) @ W_O
    if np.shape(got) != (T, d_model):
        fail(f"the per-head sum should have shape (T, d_model) = {(T, d_model)}, got {np.shape(got)}")
    if not close(got, expected, 1e-9):
        if close(got, expected / n_heads, 1e-9):
            fail("you averaged the per-head terms; Concat(heads) @ W_O is their *sum*")
        fail("the per-head sum differs from Concat(heads) @ W_O: head i must meet rows "
             "i*d_head:(i+1)*d_head of W_O")
    ok(f"the sum over heads of head i times its rows i*d_head:(i+1)*d_head of W_O equals Concat(heads) @ W_O "
       f"(largest difference {np.abs(np.asarray(got) - expected).max():.1e})")


def _uniform(w, tol=1e-9):
    w = np.asarray(w, float)
    return bool(np.all(np.abs(w - 1.0 / w.shape[-1]) <= tol))


def check_multi_head_attention(multi_head_attention):
    """Shapes, per-head projections, the per-head scale, batches, inputs kept (the mask: check_mha_mask).

    Uses your scaled_dot_product_attention from lesson 01 (through your multi_head_attention): run that
    lesson's checks first if this one reports something odd about softmax or the weights.
    """
    rng = np.random.default_rng(5)
    T, n_heads, d_head = 5, 4, 3
    d_model = n_heads * d_head
    x = rng.normal(size=(T, d_model))
    eye = np.eye(d_model)
    # W_Q reads into head 1's columns only; the other heads get zero queries, so uniform weights
    W_Q = np.zeros((d_model, d_model))
    W_Q[:, d_head:2 * d_head] = rng.normal(size=(d_model, d_head))
    W_K = rng.normal(size=(d_model, d_model))
    args = [x, W_Q, W_K, eye.copy(), eye.copy()]
    copies = [a.copy() for a in args]
    result = call(multi_head_attention, "multi_head_attention", *args, n_heads)
    if not isinstance(result, tuple) or len(result) != 2:
        fail("multi_head_attention must return a pair: (out, weights)")
    out, weights = result
    if any(not np.array_equal(a, b) for a, b in zip(args, copies)):
        fail("multi_head_attention changed x or one of the W in place (e.g. `W_Q /= ...`); compute new arrays")
    if np.shape(weights) != (n_heads, T, T):
        fail(f"weights should be (n_heads, T, T) = {(n_heads, T, T)}, got {np.shape(weights)}")
    if np.shape(out) != (T, d_model):
        fail(f"out should be (T, d_model) = {(T, d_model)}, got {np.shape(out)}")
    weights = np.asarray(weights, float)
    if not close(weights.sum(-1), np.ones((n_heads, T))):
        fail("each row of every head's weights should sum to 1; run lesson 01's attention checks on your "
             "scaled_dot_product_attention")
    uniform = [_uniform(weights[i]) for i in range(n_heads)]
    if all(uniform):
        fail("every head's weights are uniform, though head 1 has non-zero query columns (W_Q[:, d_head:"
             "2*d_head]): all heads seem to use one shared projection (e.g. the first d_head columns). "
             "Project with the whole W_Q and split the result, so head i uses its own columns")
    if uniform != [i != 1 for i in range(n_heads)]:
        if np.allclose(weights, weights[:1]):
            fail("all heads have identical weights: they share one projection. Project with the whole W_Q, "
                 "W_K, W_V and then split_heads, so head i uses columns i*d_head:(i+1)*d_head")
        fail(f"only W_Q's columns d_head:2*d_head (head 1) are non-zero, so only head 1 should attend "
             f"non-uniformly, but heads {[i for i in range(n_heads) if not uniform[i]]} do. Are the weights "
             "applied as x @ W.T instead of x @ W, or the heads split by strided columns?")
    q = (x @ W_Q)[:, d_head:2 * d_head]
    k = (x @ W_K)[:, d_head:2 * d_head]
    c = effective_scale(weights[1], q @ k.T)
    if c is None:
        fail("head 1's weights are not a softmax of its own (x @ W_Q) and (x @ W_K) columns d_head:2*d_head")
    if abs(c - 1 / math.sqrt(d_head)) > 1e-6:
        if abs(c - 1 / math.sqrt(d_model)) < 1e-6:
            fail("the scores are divided by sqrt(d_model); inside a head the dot product sums over d_head = "
                 "d_model // n_heads terms, so divide by math.sqrt(d_head)")
        fail(f"head 1's scores are multiplied by {c:.4g}; expected 1/sqrt(d_head) = {1 / math.sqrt(d_head):.4g}")
    # with W_V = W_O = identity, head i's output is its weights times x's columns of head i
    expected = np.concatenate([weights[i] @ x[:, i * d_head:(i + 1) * d_head] for i in range(n_heads)], axis=-1)
    if not close(out, expected, 1e-8):
        fail("with W_V and W_O the identity, out should be each head's weights applied to its own columns of x, "
             "side by side; it is not: check W_V, the concatenation and W_O")
    _check_mha_W_O(multi_head_attention, rng, x, W_Q, W_K, out, n_heads, d_head)
    _check_mha_batch(multi_head_attention, rng, T, n_heads, d_model)
    ok("multi_head_attention: shapes, each head uses its own columns of W_Q, scale 1/sqrt(d_head), W_O applied "
       "to the concatenated heads, batches pass through, dtypes kept")


def _check_mha_W_O(multi_head_attention, rng, x, W_Q, W_K, out_eye, n_heads, d_head):
    """W_O enters only at the end: out with a random W_O is out with the identity W_O, times that W_O."""
    d_model = x.shape[-1]
    W_O = rng.normal(size=(d_model, d_model))
    out, _ = call(multi_head_attention, "multi_head_attention", x, W_Q, W_K, np.eye(d_model), W_O, n_heads)
    if close(out, out_eye, 1e-9):
        fail("out does not change when W_O changes: W_O is never applied. The layer ends with the output "
             "projection, which mixes the concatenated heads")
    if not close(out, np.asarray(out_eye) @ W_O, 1e-8):
        one = np.zeros_like(W_O)
        one[d_head:2 * d_head] = W_O[d_head:2 * d_head]  # only head 1's rows are non-zero
        probe, _ = call(multi_head_attention, "multi_head_attention", x, W_Q, W_K, np.eye(d_model), one, n_heads)
        if not close(probe, np.asarray(out_eye)[:, d_head:2 * d_head] @ W_O[d_head:2 * d_head], 1e-8):
            fail("with only rows d_head:2*d_head of W_O non-zero (the rows of head 1) the output should come from "
                 "head 1 alone; it does not, so a head meets rows of W_O that belong to another head. Row block i "
                 "of W_O belongs to head i, where head i's columns sit in the concatenation")
        fail("with a random W_O, out should be the concatenated heads (out with W_O the identity) times W_O; it "
             "is not: check how W_O is applied")


def check_mha_mask(multi_head_attention):
    """A (T, T) causal mask must block the future in every head, not just one."""
    rng = np.random.default_rng(6)
    T, n_heads, d_head = 5, 4, 3
    d_model = n_heads * d_head
    x = rng.normal(size=(T, d_model))
    eye = np.eye(d_model)
    causal = np.triu(np.ones((T, T), dtype=bool), k=1)
    _, wm = call(multi_head_attention, "multi_head_attention", x, rng.normal(size=(d_model, d_model)),
                 rng.normal(size=(d_model, d_model)), eye.copy(), eye.copy(), n_heads, mask=causal)
    wm = np.asarray(wm, float)
    blocked = [bool(np.all(wm[i][causal] == 0)) for i in range(n_heads)]
    if not all(blocked):
        if blocked[0]:
            fail(f"the (T, T) mask blocks pairs in head 0 only (heads {[i for i in range(n_heads) if not blocked[i]]}"
                 " still attend to the future): a (T, T) mask must reach every head; pass it as it is and it "
                 "broadcasts over (n_heads, T, T)")
        fail("with a causal (T, T) mask some blocked pairs have non-zero weight: pass the mask to the attention "
             "(True = blocked)")
    if np.shape(wm) != (n_heads, T, T) or not close(wm.sum(-1), np.ones((n_heads, T))):
        fail("with a causal mask every head's rows should still sum to 1 over the keys left open")
    xb = rng.normal(size=(2, T, d_model))
    Ws = [rng.normal(size=(d_model, d_model)) / math.sqrt(d_model) for _ in range(4)]
    _, wb = call(multi_head_attention, "multi_head_attention", xb, *Ws, n_heads, mask=causal)
    if np.shape(wb) != (2, n_heads, T, T) or np.any(np.asarray(wb, float)[..., causal] != 0):
        fail(f"on a batch (B, T, d_model) = {xb.shape} with a causal (T, T) mask the weights should be "
             f"{(2, n_heads, T, T)} with every blocked pair 0 in every head of every example; got shape "
             f"{np.shape(wb)}" + ("" if np.shape(wb) != (2, n_heads, T, T) else " and non-zero blocked weights"))
    every = causal.copy()
    every[2] = True  # query 2 may see no key at all
    with np.errstate(all="ignore"):
        _, we = call(multi_head_attention, "multi_head_attention", xb, *Ws, n_heads, mask=every)
    row = np.asarray(we, float)[..., 2, :]
    if np.any(np.isnan(row)) or np.any(row != 0):
        fail("a query whose keys are all blocked should get all-zero weights in every head; it gets "
             + ("NaN" if np.any(np.isnan(row)) else f"{np.round(row[0, 0], 4).tolist()} in head 0")
             + ". Blocked scores must be -inf (not a large negative number), and softmax must give a row of -inf "
             "all-zero weights (lesson 01)")
    ok("the (T, T) mask reaches every head, on one sequence and on a batch: no head attends to a blocked pair, "
       "and a fully blocked query gets all-zero weights")


def _check_mha_batch(multi_head_attention, rng, T, n_heads, d_model):
    xb = rng.normal(size=(2, T, d_model))
    Ws = [rng.normal(size=(d_model, d_model)) / math.sqrt(d_model) for _ in range(4)]
    outb, wb = call(multi_head_attention, "multi_head_attention", xb, *Ws, n_heads)
    if np.shape(outb) != (2, T, d_model) or np.shape(wb) != (2, n_heads, T, T):
        fail(f"on a batch (B, T, d_model) = {xb.shape}: out should be {(2, T, d_model)} and weights "
             f"{(2, n_heads, T, T)}, got {np.shape(outb)} and {np.shape(wb)}")
    out1, w1 = call(multi_head_attention, "multi_head_attention", xb[1], *Ws, n_heads)
    if not (close(outb[1], out1, 1e-9) and close(wb[1], w1, 1e-9)):
        fail("batch element 1 gives a different result inside a batch than on its own: some axis is counted "
             "from the front; count from the end (-3, -2, -1) so leading batch axes pass through")
    for dtype in (np.float32, np.float64):
        outd, wd = call(multi_head_attention, "multi_head_attention", xb.astype(dtype),
                        *(W.astype(dtype) for W in Ws), n_heads)
        for what, arr in (("out", outd), ("weights", wd)):
            if getattr(arr, "dtype", None) != dtype:
                fail(f"{np.dtype(dtype).name} inputs gave {what} of dtype {getattr(arr, 'dtype', type(arr))}: keep "
                     "the input's dtype. A numpy float64 scalar (np.sqrt of a number) promotes float32; math.sqrt "
                     "gives a Python float, which does not. And cast nothing to float32")


def check_round_trip(split_heads, concat_heads):
    """Your two helpers together: concat_heads(split_heads(x, n_heads)) gives x back exactly."""
    x = np.random.default_rng(9).normal(size=(2, 5, 12))  # (B, T, d_model)
    for n_heads in (1, 3, 4, 12):
        back = call(concat_heads, "concat_heads", call(split_heads, "split_heads", x, n_heads))
        if np.shape(back) != x.shape or not np.array_equal(back, x):
            fail(f"concat_heads(split_heads(x, {n_heads})) does not give x back exactly (shape {np.shape(back)}); "
                 "the two must be exact inverses: the same reshape and axis swap, in reverse order")
    ok("concat_heads(split_heads(x, n_heads)) == x exactly, for 1, 3, 4 and 12 heads")


# this lesson's functions, each with the checks that take it alone: a check of a function that calls one of
# them names it when it is the one that is wrong (selfcheck_common.own)
own("split_heads", check_split_heads)
own("concat_heads", check_concat_heads)
own("output_projection", check_output_projection)
