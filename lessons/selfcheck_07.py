# Built from solutions/selfcheck_07.py by `make lessons`; edit that file, not this one.
"""Self-checks of lesson 07: the backward pass of attention, the gradient check, sinusoidal positions.

A gradient is checked here by a directional derivative: for a random direction D, the loss changes along D at the
rate sum(grad * D), which a central difference of the whole array along D measures. That needs no gradient
formula and no entry-by-entry loop. The shared part (how a check calls your function, fails and passes) is in
``selfcheck_common.py``.
"""

from __future__ import annotations

import math

import numpy as np

from selfcheck_common import SelfCheckFailed, _blame_callee, _checked, call, close, fail, ok, own

__all__ = ["check_numeric_jacobian", "check_softmax_jacobian", "check_softmax_backward", "check_gradient_check",
           "check_attention_row_backward", "check_attention_backward", "check_mha_backward",
           "check_sinusoidal_positions", "gradient_check_probe", "probe_loss"]


def _softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])  # (..., T_q, T_k)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    weights = _softmax(scores)  # (..., T_q, T_k)
    return weights @ V, weights


def _along(f, arrays, directions, eps=1e-5):
    """The rate at which f(*arrays) changes when every array moves along its direction (central difference)."""
    plus = f(*[a + eps * d for a, d in zip(arrays, directions)])
    minus = f(*[a - eps * d for a, d in zip(arrays, directions)])
    return (plus - minus) / (2 * eps)


def _agree(rate, grads, directions, what):
    predicted = sum(float(np.sum(np.asarray(g, float) * d)) for g, d in zip(grads, directions))
    if not abs(predicted - rate) <= 1e-6 * max(1.0, abs(rate)):
        fail(f"{what}: your gradient predicts the loss changes at rate {predicted:.6g} along a random direction, "
             f"but it changes at {rate:.6g}")


def _same_shape(got, like, name):
    if np.shape(got) != np.shape(like):
        fail(f"{name} has shape {np.shape(got)}; a gradient has the shape of what it is the gradient of, "
             f"{np.shape(like)}")


def _jacobian_by_differences(s, eps=1e-6):
    """(n, n): column i is how softmax(s) moves when s_i moves (central differences)."""
    steps = np.eye(len(s)) * eps
    return np.stack([(_softmax(s + e) - _softmax(s - e)) / (2 * eps) for e in steps], axis=1)


def check_numeric_jacobian(J, s):
    """The learner's measured Jacobian of softmax at s: shape, and agreement with central differences."""
    expected = _jacobian_by_differences(np.asarray(s, float))
    if np.shape(J) != expected.shape:
        fail(f"J_numeric has shape {np.shape(J)}; a Jacobian of n weights by n scores is {expected.shape}")
    J = np.asarray(J, float)
    if close(J, expected.T, tol=1e-7) and not close(J, expected, tol=1e-7):
        fail("J_numeric is transposed: column i should hold how every weight moves when score i moves")
    if close(J, expected * 2, tol=1e-7):
        fail("J_numeric is twice too big: a central difference spans 2 eps, so divide by 2 eps")
    if not close(J, expected, tol=1e-7):
        fail("J_numeric differs from central differences of softmax at s: move score i by +eps and by -eps, and "
             "put the change of the whole weight vector, divided by 2 eps, in column i")
    ok("J_numeric: the softmax Jacobian at s, measured by central differences")


def check_softmax_jacobian(softmax_jacobian):
    """The closed form against central differences on rows of 1 to 5 weights (a blocked key included)."""
    rng = np.random.default_rng(2)
    rows = [np.array([0.3]), rng.normal(size=3), rng.normal(size=5) * 2, np.array([0.5, -np.inf, 1.0, -0.2])]
    for s in rows:
        p = _softmax(s)
        before = p.copy()
        got = call(softmax_jacobian, "softmax_jacobian", p)
        if not np.array_equal(p, before):
            fail("softmax_jacobian changed its input in place; compute a new array instead")
        _same_shape(got, np.outer(p, p), f"softmax_jacobian of {len(p)} weights")
        got = np.asarray(got, float)
        expected = _jacobian_by_differences(np.where(np.isfinite(s), s, -1e9))
        if close(got, expected, tol=1e-7):
            continue
        if close(np.diag(got), np.diag(expected), tol=1e-7):
            fail(f"on the weights {np.round(p, 3).tolist()} your diagonal is right but the entries off the diagonal "
                 "are not: moving score i moves every other weight j too (by how much, and with which sign?)")
        if close(got - np.diag(np.diag(got)), expected - np.diag(np.diag(expected)), tol=1e-7):
            fail(f"on the weights {np.round(p, 3).tolist()} your entries off the diagonal are right but the diagonal "
                 "is not: for i = j the derivative of e^(s_j) itself also counts (the delta_ij term)")
        fail(f"on the weights {np.round(p, 3).tolist()} your Jacobian differs from central differences; compare "
             "it with the J_numeric you measured, entry by entry")
    got32 = call(softmax_jacobian, "softmax_jacobian", _softmax(rows[1]).astype(np.float32))
    if getattr(got32, "dtype", None) != np.float32:
        fail(f"float32 weights gave a {getattr(got32, 'dtype', type(got32))} Jacobian; keep float32")
    ok("softmax_jacobian: matches central differences on rows of 1, 3, 4 and 5 weights, a blocked key included")


def check_softmax_backward(softmax_backward):
    """Rows sum to 0; agrees with a directional derivative of softmax (blocked keys included); float32 kept."""
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(3, 4, 5))  # (B, T_q, T_k)
    scores[0, 1, [2, 4]] = -np.inf
    weights, G = _softmax(scores), rng.normal(size=(3, 4, 5))
    copies = weights.copy(), G.copy()
    got = call(softmax_backward, "softmax_backward", weights, G)
    if not (np.array_equal(weights, copies[0]) and np.array_equal(G, copies[1])):
        fail("softmax_backward changed its inputs in place; compute new arrays instead")
    _same_shape(got, weights, "softmax_backward's result")
    got = np.asarray(got, float)
    if close(got, weights * G):
        fail("you returned weights * grad_weights: the term that subtracts sum(grad_weights * weights) along each "
             "row is missing (the -p p^T part of the Jacobian)")
    if not np.allclose(got.sum(axis=-1), 0, atol=1e-10):
        fail("the rows of your gradient do not sum to 0; adding a constant to a row of scores changes no weight, "
             "so they must. Is the sum taken along `axis`, with keepdims=True?")
    if np.any(got[0, 1, [2, 4]] != 0):
        fail("a blocked key (weight 0) got a nonzero gradient")
    D = rng.normal(size=scores.shape)
    D[0, 1, [2, 4]] = 0
    finite = np.where(np.isfinite(scores), scores, -1e9)
    _agree(_along(lambda s: float(np.sum(G * _softmax(s))), [finite], [D]), [got], [D], "softmax_backward")
    w0 = _softmax(rng.normal(size=(5, 4)), axis=0)  # (T_k, T_q): softmax along axis 0
    g0 = np.asarray(call(softmax_backward, "softmax_backward", w0, G[0].T, axis=0), float)
    if not np.allclose(g0.sum(axis=0), 0, atol=1e-10):
        fail("with axis=0 the columns of the gradient should sum to 0: use the `axis` argument in your sum")
    got32 = call(softmax_backward, "softmax_backward", weights.astype(np.float32), G.astype(np.float32))
    if getattr(got32, "dtype", None) != np.float32:
        fail(f"float32 input came back as {getattr(got32, 'dtype', type(got32))}; keep float32")
    ok("softmax_backward: rows sum to 0, blocked keys get 0, agrees with a directional derivative, float32 kept")


def probe_loss(*inputs):
    """A smooth loss of any arrays, with every input coupled to the others (used to test gradient_check)."""
    total = sum(np.sum(x) for x in inputs)
    return float(sum((k + 1) * np.sum(np.sin(x)) for k, x in enumerate(inputs)) + 0.5 * total ** 2)


def probe_gradient(*inputs):
    """The exact gradient of ``probe_loss``: (k + 1) cos(x_k) + the sum of every entry."""
    total = sum(np.sum(x) for x in inputs)
    return [(k + 1) * np.cos(x) + total for k, x in enumerate(inputs)]


def gradient_check_probe(eps, scale, *arrays):
    """Run the notebook's ``gradient_check`` on ``scale * probe_loss``: arrays are the inputs, then their gradients.

    The graded test of ``gradient_check`` calls this, because a function cannot be sent into your notebook."""
    from IPython import get_ipython

    namespace = get_ipython().user_ns
    n = len(arrays) // 2
    return namespace["gradient_check"](lambda *xs: scale * probe_loss(*xs), list(arrays[:n]), list(arrays[n:]), eps)


def check_gradient_check(gradient_check):
    """A right gradient gives a tiny error, a wrong one its known error; central differences; inputs kept."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(3, 4)), rng.normal(size=(5,))  # (T, d_k), (T_k,)
    copies = x.copy(), y.copy()
    good = probe_gradient(x, y)
    err = call(gradient_check, "gradient_check", probe_loss, [x, y], good)
    if not (np.array_equal(x, copies[0]) and np.array_equal(y, copies[1])):
        fail("gradient_check changed the caller's inputs: perturb float64 copies (np.array(a, dtype=np.float64))")
    if not isinstance(err, (float, np.floating)):
        fail(f"gradient_check should return one float, got {type(err).__name__}")
    if not err < 1e-7:
        fail(f"the exact gradient gives an error of {err:.3g}; expected below 1e-7. Use central differences "
             "(f(x + eps) - f(x - eps)) / (2 eps), put each entry back after moving it, and divide by the largest "
             "magnitude of the gradient")
    bad = [good[0], good[1].copy()]
    small = int(np.argmin(np.abs(good[1])))  # the smallest entry: relative to the whole gradient, not to itself
    bad[1][small] += 0.5
    size = max(np.max(np.abs(g)) for g in (good[1], bad[1]))
    expected = 0.5 / size
    err = call(gradient_check, "gradient_check", probe_loss, [x, y], bad)
    if abs(err - expected) > 1e-4 * expected:
        hint = " (did you check only the first input?)" if err < 1e-6 else ""
        fail(f"one entry of the second input's gradient is off by 0.5: expected an error of about "
             f"{expected:.4g} (0.5 / the largest magnitude of that whole gradient), got {err:.4g}{hint}")
    err = call(gradient_check, "gradient_check", probe_loss, [x, y], good, eps=1e-3)
    if err > 1e-5:
        fail(f"with eps=1e-3 the exact gradient gives an error of {err:.3g}: one-sided differences are off by "
             "O(eps); use central differences, (f(x + eps) - f(x - eps)) / (2 eps)")
    x32 = x.astype(np.float32)
    err = call(gradient_check, "gradient_check", probe_loss, [x32], probe_gradient(x32.astype(np.float64)))
    if not err < 1e-6:
        fail(f"float32 inputs with their exact gradient give an error of {err:.3g}: eps = 1e-6 is below float32's "
             "resolution; perturb float64 copies, np.array(a, dtype=np.float64)")
    for which in (1, 0):  # after a finite error (max(worst, err) drops it), then before one (max(err, worst))
        held = [g.copy() for g in good]
        held[which][1] = np.nan
        with np.errstate(all="ignore"):  # NaN in, NaN out: no warning is news here
            err = call(gradient_check, "gradient_check", probe_loss, [x, y], held)
        if np.isfinite(err):
            fail(f"a gradient holding NaN (input {which + 1} of 2) gives an error of {err:.3g}; it must give nan "
                 "(the table's last row), or a broken gradient passes: take np.max of the errors, since Python's "
                 "max drops a NaN")
    ok("gradient_check: exact gradient passes, a wrong entry is measured, NaN reported, central differences, inputs "
       "kept")


def check_attention_row_backward(attention_row_backward):
    """One query: dq, dK, dV against directional derivatives, the sqrt(d_k) factor, shapes, float32 kept."""
    rng = np.random.default_rng(4)
    d_k, T_k, d_v = 3, 5, 2
    q, K, V, g = rng.normal(size=d_k), rng.normal(size=(T_k, d_k)), rng.normal(size=(T_k, d_v)), rng.normal(size=d_v)

    def loss(q, K, V):
        return float(g @ _attention(q[None], K, V)[0][0])

    got = call(attention_row_backward, "attention_row_backward", q, K, V, g)
    if not isinstance(got, tuple) or len(got) != 3:
        fail("attention_row_backward should return a tuple (dq, dK, dV)")
    for grad, a, name in zip(got, (q, K, V), ("dq", "dK", "dV")):
        _same_shape(grad, a, name)
    for i, name in enumerate(("dq", "dK", "dV")):
        D = [rng.normal(size=a.shape) if j == i else np.zeros_like(a) for j, a in enumerate((q, K, V))]
        rate = _along(loss, [q, K, V], D)
        predicted = float(np.sum(np.asarray(got[i], float) * D[i]))
        if abs(predicted - rate) <= 1e-6 * max(1.0, abs(rate)):
            continue
        if name != "dV" and abs(predicted - rate * math.sqrt(d_k)) < 1e-6 * max(1.0, abs(rate)):
            fail(f"{name} is sqrt(d_k) times too big: the score is q . k / sqrt(d_k), so its gradient reaches q and "
                 "k divided by sqrt(d_k)")
        where = {"dV": "o = sum_j p_j v_j: how much of g does value j receive?",
                 "dq": "q meets every key: sum over the keys of (dL/ds_j) times ds_j/dq",
                 "dK": "key j meets only q: its row is dL/ds_j times ds_j/dk_j"}[name]
        fail(f"{name} disagrees with a directional derivative of one query's attention. {where} Did the step "
             "through softmax (your softmax_backward) happen?")
    f32 = [a.astype(np.float32) for a in (q, K, V, g)]
    got = call(attention_row_backward, "attention_row_backward", *f32)
    if any(getattr(a, "dtype", None) != np.float32 for a in got):
        fail("float32 input gave a result that is not float32: scale by math.sqrt(d_k), a Python float")
    ok("attention_row_backward: dq, dK, dV agree with directional derivatives, float32 kept")


def _attention_case(rng, lead, T_q, T_k, d_k, d_v, masked):
    Q, K, V = (rng.normal(size=(*lead, t, d)) for t, d in ((T_q, d_k), (T_k, d_k), (T_k, d_v)))
    mask = None
    if masked:
        mask = rng.random((T_q, T_k)) < 0.3
        mask[:, 0] = False  # every query keeps a key
    return Q, K, V, mask


def check_attention_backward(attention_backward, softmax_backward=None):
    """Shapes, directional derivatives (T_q != T_k, batched, masked), the sqrt(d_k) factor, float32."""
    rng = np.random.default_rng(5)
    for lead, masked in (((), False), ((2, 3), True)):
        Q, K, V, mask = _attention_case(rng, lead, 4, 6, 3, 2, masked)
        out, weights = _attention(Q, K, V, mask)
        G = rng.normal(size=out.shape)
        got = call(attention_backward, "scaled_dot_product_attention_backward", Q, K, V, weights, G, mask)
        if not isinstance(got, tuple) or len(got) != 3:
            fail("scaled_dot_product_attention_backward should return a tuple (dQ, dK, dV)")
        for g, a, name in zip(got, (Q, K, V), ("dQ", "dK", "dV")):
            _same_shape(g, a, name)
        D = [rng.normal(size=a.shape) for a in (Q, K, V)]
        rate = _along(lambda q, k, v: float(np.sum(G * _attention(q, k, v, mask)[0])), [Q, K, V], D)
        predicted = [float(np.sum(np.asarray(g, float) * d)) for g, d in zip(got, D)]
        for i, name in enumerate(("dQ", "dK", "dV")):  # one array at a time: which gradient is wrong?
            only = [d if j == i else np.zeros_like(d) for j, d in enumerate(D)]
            r = _along(lambda q, k, v: float(np.sum(G * _attention(q, k, v, mask)[0])), [Q, K, V], only)
            if abs(predicted[i] - r) > 1e-6 * max(1.0, abs(r)):
                if name != "dV" and abs(predicted[i] - r * math.sqrt(Q.shape[-1])) < 1e-6 * max(1.0, abs(r)):
                    fail(f"{name} is sqrt(d_k) times too big: the scores are divided by sqrt(d_k), so their gradient "
                         f"reaches Q and K divided by it too")
                where = " (with a mask: use the weights you are given, which are 0 on blocked pairs)" if masked else ""
                fail(f"{name} disagrees with a directional derivative of attention{where}: check its formula and "
                     "which axes you swap (np.swapaxes(a, -1, -2), never .T)")
        _agree(rate, got, D, "scaled_dot_product_attention_backward")
    Q, K, V, mask = _attention_case(rng, (2,), 3, 5, 4, 2, False)
    f32 = [a.astype(np.float32) for a in (Q, K, V)]
    out, weights = _attention(*f32)
    got = call(attention_backward, "scaled_dot_product_attention_backward", *f32, weights,
               np.ones_like(out, dtype=np.float32))
    if any(getattr(g, "dtype", None) != np.float32 for g in got):
        fail("float32 input gave a result that is not float32: scale by math.sqrt(d_k), a Python float")
    ok("scaled_dot_product_attention_backward: dQ, dK, dV agree with directional derivatives (masked, batched, "
       "T_q != T_k), float32 kept")


def check_mha_backward(mha_backward, multi_head_attention):
    """A dict of five gradients of the right shapes that agree with directional derivatives; float32 kept. When
    it fails, or crashes, the backward functions it calls are checked first, and one that fails its own check is
    named (selfcheck_common.own)."""
    try:
        _check_mha_backward(mha_backward, multi_head_attention)
    except NotImplementedError:  # the function itself is still the stub (a stub it calls is a failure, below)
        raise
    except SelfCheckFailed:  # its message already names a function it calls that fails its own check (fail)
        raise
    except Exception as exc:  # noqa: BLE001 - a crash: is a function it calls the cause?
        _checked[0] = mha_backward
        if _blame_callee():
            fail(f"{type(exc).__name__}: {exc}")
        raise


def _check_mha_backward(mha_backward, multi_head_attention):
    rng = np.random.default_rng(9)
    names = ("x", "W_Q", "W_K", "W_V", "W_O")
    B, T, n_heads, d_head = 2, 4, 3, 2
    d_model = n_heads * d_head
    for lead, mask in (((), None), ((B,), np.triu(np.ones((T, T), dtype=bool), k=1))):
        x = rng.normal(size=(*lead, T, d_model))
        Ws = [rng.normal(size=(d_model, d_model)) / math.sqrt(d_model) for _ in range(4)]
        G = rng.normal(size=x.shape)
        got = call(mha_backward, "multi_head_attention_backward", x, *Ws, n_heads, G, mask)
        if not isinstance(got, dict) or set(got) != set(names):
            fail(f"multi_head_attention_backward should return a dict with the keys {list(names)}, got "
                 f"{sorted(got) if isinstance(got, dict) else type(got).__name__}")
        for name, a in zip(names, (x, *Ws)):
            if name != "x" and np.shape(got[name]) == (*lead, d_model, d_model) and lead:
                fail(f"the gradient of {name} has a batch axis, {np.shape(got[name])}: a weight is shared by every "
                     "example and position, so sum over them (flatten to (B*T, d_model) before the matmul)")
            _same_shape(got[name], a, f"the gradient of {name}")

        def loss(x, *Ws):
            return float(np.sum(G * multi_head_attention(x, *Ws, n_heads, mask)[0]))

        for i, name in enumerate(names):
            D = [rng.normal(size=a.shape) if j == i else np.zeros_like(a) for j, a in enumerate((x, *Ws))]
            rate = _along(loss, [x, *Ws], D)
            predicted = float(np.sum(np.asarray(got[name], float) * D[i]))
            if abs(predicted - rate) > 1e-6 * max(1.0, abs(rate)):
                hints = {"W_O": " W_O's gradient is concat(heads)^T @ grad_out (not transposed the other way)",
                         "x": " x feeds W_Q, W_K and W_V: its gradient sums all three paths"}
                fail(f"the gradient of {name} disagrees with a directional derivative of the layer"
                     f"{' (batched, causal)' if lead else ''}.{hints.get(name, '')} Route the heads' gradients back "
                     "with split_heads and concat_heads, the inverses of how the forward pass moved them")
    x32 = rng.normal(size=(B, T, d_model)).astype(np.float32)
    W32 = [(rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)).astype(np.float32) for _ in range(4)]
    got = call(mha_backward, "multi_head_attention_backward", x32, *W32, n_heads, np.ones_like(x32))
    if any(getattr(got[n], "dtype", None) != np.float32 for n in names):
        fail("float32 input gave gradients that are not float32")
    ok("multi_head_attention_backward: five gradients of the right shapes agree with directional derivatives "
       "(batched, causal), float32 kept")


def check_sinusoidal_positions(sinusoidal_positions):
    """Shape (T, d_model), position 0 is (0, 1, 0, 1, ...), pair i has frequency 10000^(-2i/d_model)."""
    T, d_model = 7, 10
    pe = call(sinusoidal_positions, "sinusoidal_positions", T, d_model)
    if np.shape(pe) != (T, d_model):
        fail(f"the encoding has shape {np.shape(pe)}, expected (T, d_model) = ({T}, {d_model})")
    pe = np.asarray(pe, float)
    if not close(pe[0], np.tile([0.0, 1.0], d_model // 2)):
        if close(pe[0], np.r_[np.zeros(d_model // 2), np.ones(d_model // 2)]):
            fail("position 0 is (0, ..., 0, 1, ..., 1): you put all sines first and all cosines after; the paper "
                 "interleaves them, sine in column 2i and cosine in column 2i + 1")
        fail(f"position 0 should be (0, 1, 0, 1, ...) (sin 0 = 0, cos 0 = 1), got {np.round(pe[0], 3).tolist()}")
    if not close(pe[1, :2], [math.sin(1), math.cos(1)]):
        fail(f"columns 0 and 1 of position 1 should be sin(1) and cos(1) (frequency 1), got {pe[1, :2].tolist()}")
    t = np.arange(T)
    for i in range(d_model // 2):
        rate = 10000 ** (-2 * i / d_model)
        if not close(pe[:, 2 * i], np.sin(t * rate)) or not close(pe[:, 2 * i + 1], np.cos(t * rate)):
            fail(f"columns {2 * i} and {2 * i + 1} should be sin and cos of t / 10000^({2 * i}/{d_model}): both "
                 "columns of a pair share one frequency, set by the pair's first column index 2i")
    ok("sinusoidal_positions: shape, sine/cosine pairs interleaved, one frequency per pair")


# this lesson's functions, each with the checks that take it alone: a check of a function that calls one of
# them names it when it is the one that is wrong (selfcheck_common.own)
own("softmax_jacobian", check_softmax_jacobian)
own("softmax_backward", check_softmax_backward)
own("attention_row_backward", check_attention_row_backward)
own("scaled_dot_product_attention_backward", check_attention_backward)
