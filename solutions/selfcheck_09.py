"""Self-checks of lesson 09: a small GPT, built (layer norm, the MLP, a block), trained (their backward passes, the
loss, the embedding's gradient), sampled (sample_next, generate) and taken apart (ablate_head, k_composition).

A gradient is checked as in lesson 07: by central differences of the forward pass, along a random direction or
entry by entry; the checks test properties (a row of layer norm's gradient sums to 0, a repeated token collects
every gradient) and small known values, and hold no backward formula. Sampling is checked by what it draws. The
shared part (how a check calls your function, fails and passes) is in ``selfcheck_common.py``.
"""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np

from selfcheck_common import SelfCheckFailed, _blame_callee, _checked, call, close, fail, ok, own

__all__ = ["check_layer_norm", "check_layer_norm_backward", "check_gelu_backward", "check_mlp_backward",
           "check_cross_entropy", "check_embedding_backward", "check_block_backward", "check_sample_next",
           "check_generate", "check_ablate_head", "check_k_composition", "sample_probe", "sample_probe_with"]

BLOCK_KEYS = ("gamma_1", "beta_1", "W_Q", "W_K", "W_V", "W_O", "gamma_2", "beta_2", "W_1", "b_1", "W_2", "b_2")
MLP_KEYS = ("x", "W_1", "b_1", "W_2", "b_2")


# ------------------------------------------------------------------------------------------------ shared helpers
def _gelu(x):
    """The lesson's GELU (its tanh form), as the lesson gives it."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _mlp(x, W_1, b_1, W_2, b_2):
    """The lesson's MLP, as the lesson gives it."""
    return _gelu(x @ W_1 + b_1) @ W_2 + b_2


def _softmax(z):
    e = np.exp(z - np.max(z, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def _along(f, arrays, directions, eps=1e-5):
    """The rate at which f(*arrays) changes when every array moves along its direction (central difference)."""
    plus = f(*[a + eps * d for a, d in zip(arrays, directions)])
    minus = f(*[a - eps * d for a, d in zip(arrays, directions)])
    return (plus - minus) / (2 * eps)


def _numeric_gradient(f, a, eps=1e-6):
    """The gradient of the number f(a), entry by entry (central differences)."""
    grad = np.zeros(a.shape)
    for i in np.ndindex(a.shape):
        step = np.zeros(a.shape)
        step[i] = eps
        grad[i] = (f(a + step) - f(a - step)) / (2 * eps)
    return grad


def _agrees(grad, direction, rate, tol=1e-6):
    predicted = float(np.sum(np.asarray(grad, float) * direction))
    return abs(predicted - rate) <= tol * max(1.0, abs(rate))


def _copies(*arrays):
    return [np.array(a, copy=True) for a in arrays]


def _unchanged(name, arrays, copies, what="its inputs", how="compute new arrays (np.array(a) or a.copy() first, "
                                                             "if you assign into one)"):
    if not all(np.array_equal(a, c) for a, c in zip(arrays, copies)):
        fail(f"{name} changed {what} in place; the caller's inputs must stay as they were: {how}")


def _float32_kept(results, name, hint=""):
    wrong = [label for label, r in results.items() if getattr(r, "dtype", None) != np.float32]
    if wrong:
        got = results[wrong[0]]
        fail(f"{name}: float32 input gave {', '.join(wrong)} as {getattr(got, 'dtype', type(got).__name__)}; keep "
             f"float32 (scale by Python floats, and create new arrays with the input's dtype){hint}")


def _naming_callee(check, fn, *args):
    """Run ``check(fn, *args)``; when ``fn`` crashes, name a function of the lesson it calls that fails its own check
    (selfcheck_common.own), as lesson 07's check of the multi-head backward pass does."""
    try:
        check(fn, *args)
    except (NotImplementedError, SelfCheckFailed):  # a stub, or a failure whose message already names a callee
        raise
    except Exception as exc:  # noqa: BLE001 - a crash: is a function it calls the cause?
        _checked[0] = fn
        if _blame_callee():
            fail(f"{type(exc).__name__}: {exc}")
        raise


# ---------------------------------------------------------------------------------------------------- layer norm
def _rows(rng, shape):
    """Rows of different means and spreads."""
    return rng.normal(size=shape) * rng.uniform(0.5, 3.0, size=(*shape[:-1], 1)) + rng.normal(size=(*shape[:-1], 1))


def check_layer_norm(layer_norm):
    """Rows to mean 0 and biased variance 1 - tiny, the last axis; gamma and beta after; a constant row gives beta;
    eps inside the square root and honoured; batched; float32 kept; inputs unchanged."""
    rng = np.random.default_rng(90)
    T, d = 5, 6  # T != d_model: a mean along the wrong axis shows
    x = _rows(rng, (T, d))
    ones, zeros = np.ones(d), np.zeros(d)
    copies = _copies(x, ones, zeros)
    out = call(layer_norm, "layer_norm", x, ones, zeros)
    _unchanged("layer_norm", (x, ones, zeros), copies)
    if np.shape(out) != x.shape:
        fail(f"layer_norm returned shape {np.shape(out)} for x of shape {x.shape}; the shape must not change. Use "
             "keepdims=True in the mean and the variance, so they broadcast against x")
    out = np.asarray(out, float)
    if not np.all(np.isfinite(out)):
        fail("layer_norm gave nan or inf on rows that are not constant")
    if not np.allclose(out.mean(axis=-1), 0, atol=1e-9):
        if close(out, np.ones_like(out), tol=1e-9):
            fail("with gamma = 1 and beta = 0 every entry came out 1, x_hat * 0 + 1: gamma and beta are swapped. "
                 "gamma scales the normalised row and beta shifts it, x_hat * gamma + beta")
        if np.allclose(out.mean(axis=0), 0, atol=1e-9):
            fail("with gamma = 1 and beta = 0 the columns of the result have mean 0, not the rows: you normalised "
                 "along axis 0, across positions. Layer norm normalises each token's vector on its own: the mean "
                 "and the variance along the last axis (axis=-1, keepdims=True)")
        if abs(out.mean()) < 1e-9 and np.allclose(out.var(), 1, atol=1e-4):
            fail("with gamma = 1 and beta = 0 the whole array has mean 0 and variance 1, but its rows do not: the "
                 "mean and the variance were taken over every entry at once (no axis). Take them per row: "
                 "axis=-1, keepdims=True")
        fail("with gamma = 1 and beta = 0 each row (the last axis) should have mean 0; subtract each row's mean "
             "(its mean along axis -1, kept as a column with keepdims=True)")
    var_in, var_out = x.var(axis=-1), out.var(axis=-1)
    if np.allclose(var_out, (d - 1) / d, atol=1e-3):
        fail(f"with gamma = 1 and beta = 0 each row's variance is {(d - 1) / d:.4f} = (d_model - 1) / d_model, not "
             "1: you used the unbiased variance (ddof=1, dividing by d_model - 1). Layer norm uses the biased one, "
             "the plain mean of the squared deviations (np.var's default, ddof=0), as PyTorch does")
    r = 3.0 + np.tile([1.0, -1.0], d // 2)[None]  # one row of mean 3 and variance exactly 1
    got = np.asarray(call(layer_norm, "layer_norm", r, ones, zeros, eps=1.0), float)
    if not close(got, (r - 3) / math.sqrt(2), tol=1e-9):
        if close(np.abs(got), np.ones_like(got), tol=1e-4):
            fail("with eps=1.0, a row of variance 1 should be divided by sqrt(1 + 1) = 1.414; yours was divided by "
                 "about 1: the `eps` argument is ignored (a fixed 1e-5 used instead?)")
        if close(np.abs(got), np.full_like(got, 0.5), tol=1e-9):
            r4 = 3.0 + np.tile([2.0, -2.0], d // 2)[None]  # variance 4: sqrt(4) + 1 = 3, but 4 + 1 = 5
            got4 = np.asarray(call(layer_norm, "layer_norm", r4, ones, zeros, eps=1.0), float)
            if close(np.abs(got4), np.full_like(got4, 2 / 5), tol=1e-9):
                fail("with eps=1.0, a row of variance 4 should be divided by sqrt(4 + 1) = 2.236; yours was divided "
                     "by 4 + 1 = 5: you divided by the variance; divide by the standard deviation, sqrt(var + eps)")
            fail("with eps=1.0, a row of variance 1 should be divided by sqrt(1 + 1) = 1.414; yours was divided by "
                 "sqrt(1) + 1 = 2: eps belongs inside the square root, sqrt(var + eps)")
        fail(f"with eps=1.0, the row {r[0].tolist()} (mean 3, variance 1) should become (x - 3) / sqrt(1 + 1) = "
             f"+-0.7071; got {np.round(got[0], 4).tolist()}")
    gamma, beta = 1 + 0.5 * rng.normal(size=d), 0.5 * rng.normal(size=d)
    flat = np.full((1, d), 1.5)  # a constant row: variance 0
    with np.errstate(all="ignore"):
        got = np.asarray(call(layer_norm, "layer_norm", flat, gamma, beta), float)
    if not np.all(np.isfinite(got)):
        fail("a constant row (variance 0) gave nan or inf: divide by sqrt(var + eps), with eps inside the square "
             "root, so nothing is ever divided by 0")
    if not close(got[0], beta, tol=1e-9):
        fail(f"a constant row should give beta (it normalises to 0, then * gamma + beta); got "
             f"{np.round(got[0], 4).tolist()}, beta is {np.round(beta, 4).tolist()}")
    if not np.allclose(var_out, var_in / (var_in + 1e-5), rtol=0, atol=1e-9):
        fail("with gamma = 1 and beta = 0 each row's variance should be var / (var + eps), just below 1; yours is off "
             "by more than rounding. Divide by sqrt(var + eps), with var the biased variance and eps inside the "
             "square root")
    scaled = np.asarray(call(layer_norm, "layer_norm", x, gamma, beta), float)
    if not close(scaled, out * gamma + beta, tol=1e-9):
        if close(scaled, out * beta + gamma, tol=1e-9):
            fail("gamma and beta are swapped: gamma scales the normalised row and beta shifts it, x_hat * gamma + "
                 "beta")
        fail("with gamma and beta given, the result should be the normalised rows times gamma plus beta (both "
             "applied after normalising, column by column)")
    xb = _rows(rng, (2, 3, d))
    got = np.asarray(call(layer_norm, "layer_norm", xb, ones, zeros), float)
    if np.shape(got) != xb.shape or not (np.allclose(got.mean(axis=-1), 0, atol=1e-9)
                                         and np.allclose(got.var(axis=-1), 1, atol=1e-4)):
        fail(f"on a batch x of shape {xb.shape} every row (the last axis) should get mean 0 and variance 1: take the "
             "mean and the variance along axis=-1 with keepdims=True")
    x32 = [a.astype(np.float32) for a in (xb, gamma, beta)]
    _float32_kept({"the result": call(layer_norm, "layer_norm", *x32)}, "layer_norm")
    ok("layer_norm: rows to mean 0 and variance 1 (the last axis, biased variance), eps inside the square root, a "
       "constant row gives beta, gamma and beta after, batched, float32 kept, inputs unchanged")


def check_layer_norm_backward(layer_norm_backward, layer_norm):
    """Your layer_norm first; then grad_x against central differences of sum(G * layer_norm(x, gamma, beta)), rows
    of grad_x summing to 0, grad_gamma and grad_beta (d_model,) summed over every leading axis; another eps; a
    constant row; float32; inputs unchanged."""
    probe = np.random.default_rng(90).normal(size=(2, 3))  # (T, d_model): a first call says "not implemented yet"
    call(layer_norm_backward, "layer_norm_backward", probe, np.ones(3), np.ones((2, 3)))  # before layer_norm's check
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check_layer_norm(layer_norm)
    except (SelfCheckFailed, NotImplementedError) as exc:
        raise SelfCheckFailed(f"this check measures the gradient with your layer_norm, which fails its own check: fix "
                              f"layer_norm first (run its cell and check_layer_norm). What that check saw: {exc}") \
            from None
    rng = np.random.default_rng(91)
    d = 5
    for lead in ((), (2,)):
        x, G = _rows(rng, (*lead, 3, d)), rng.normal(size=(*lead, 3, d))
        gamma, beta = 1 + 0.5 * rng.normal(size=d), 0.5 * rng.normal(size=d)
        where = f" (x of shape {x.shape})"
        copies = _copies(x, gamma, G)
        got = call(layer_norm_backward, "layer_norm_backward", x, gamma, G)
        _unchanged("layer_norm_backward", (x, gamma, G), copies)
        if not isinstance(got, tuple) or len(got) != 3:
            fail("layer_norm_backward should return a tuple (grad_x, grad_gamma, grad_beta)")
        grad_x, grad_gamma, grad_beta = got
        if np.shape(grad_x) != x.shape:
            fail(f"grad_x has shape {np.shape(grad_x)}{where}; a gradient has the shape of what it is the gradient "
                 "of")
        for name, g in (("grad_gamma", grad_gamma), ("grad_beta", grad_beta)):
            if np.shape(g) != (d,):
                fail(f"{name} has shape {np.shape(g)}{where}, expected (d_model,) = ({d},): gamma and beta are "
                     "shared by every position (and every sequence of a batch), so sum over every leading axis, "
                     "e.g. reshape to (-1, d_model) and sum over axis 0")
        grad_x = np.asarray(grad_x, float)

        def loss(x_):
            return float(np.sum(G * layer_norm(x_, gamma, beta)))

        sums = grad_x.sum(axis=-1)
        if not np.allclose(sums, 0, atol=1e-9):
            sigma = np.sqrt(x.var(axis=-1) + 1e-5)
            m = (G * gamma).mean(axis=-1) / sigma  # a row's share of the mean term, to name a wrong one
            if np.allclose(sums, 2 * d * m, rtol=1e-6, atol=1e-9):
                why = (" Here each row sums to twice the mean term: the mean term has the wrong sign (subtract the "
                       "row's mean of grad_out * gamma, do not add it)")
            elif np.allclose(sums, d * m, rtol=1e-6, atol=1e-9):
                why = (" Here each row sums to exactly the mean term: it is missing (every entry moved the row's "
                       "mean, so each entry's gradient loses the row's mean of grad_out * gamma)")
            else:
                why = ""
            fail(f"the rows of grad_x{where} do not sum to 0. Adding a constant to a row of x changes nothing "
                 f"(layer norm subtracts the mean), so the loss's rate along (1, 1, ..., 1) is 0.{why}")
        D = rng.normal(size=x.shape)
        if not _agrees(grad_x, D, _along(loss, [x], [D])):
            num = _numeric_gradient(loss, x)
            off = grad_x - num
            xc = x - x.mean(axis=-1, keepdims=True)
            k = (off * xc).sum(axis=-1, keepdims=True) / (xc * xc).sum(axis=-1, keepdims=True)
            if np.allclose(off, k * xc, atol=1e-6) and not np.allclose(off, 0, atol=1e-6):
                fail(f"grad_x{where} is off by a multiple of x_hat in each row: the x_hat term is missing (or wrong). "
                     "Every entry of a row also moved the row's variance, so each entry's gradient loses x_hat times "
                     "the row's mean of (grad_out * gamma * x_hat)")
            sigma = np.sqrt(x.var(axis=-1, keepdims=True) + 1e-5)
            if np.allclose(grad_x, num * sigma, atol=1e-6):
                fail(f"grad_x{where} is sigma times too big (sigma = sqrt(var + eps), per row): it is not divided by "
                     "sigma. The forward pass divides by sigma, so the gradient reaching x is divided by it too")
            if np.allclose(grad_x, num * sigma ** 2, atol=1e-6):
                fail(f"grad_x{where} is sigma^2 times too big: the normalisation divides by sigma = sqrt(var + eps), "
                     "so the gradient is divided by it once, not multiplied")
            if np.allclose(grad_x, _numeric_gradient(lambda x_: float(np.sum(G * layer_norm(x_, np.ones(d), beta))),
                                                     x), atol=1e-6):
                fail(f"grad_x{where} is the gradient for gamma = 1: gamma is missing. The gradient that reaches the "
                     "normalised x_hat is grad_out * gamma (the forward pass multiplied x_hat by gamma)")
            if np.allclose(grad_x, _numeric_gradient(lambda x_: float(np.sum(G * layer_norm(x_, gamma, beta,
                                                                                              eps=0.0))), x),
                           atol=1e-6):
                fail(f"grad_x{where} is the gradient of layer norm without eps: use sigma = sqrt(var + eps), with the "
                     "`eps` argument, exactly as the forward pass does")
            fail(f"grad_x{where} disagrees with central differences of sum(grad_out * layer_norm(x, gamma, beta)) "
                 "(with your layer_norm). Each entry of a row moved the row's mean and variance too, so its gradient "
                 "gathers terms from the whole row")
        for name, got_g, f in (("grad_gamma", grad_gamma, lambda g_: float(np.sum(G * layer_norm(x, g_, beta)))),
                               ("grad_beta", grad_beta, lambda b_: float(np.sum(G * layer_norm(x, gamma, b_))))):
            D = rng.normal(size=d)
            if _agrees(got_g, D, _along(f, [gamma if name == "grad_gamma" else beta], [D])):
                continue
            other = grad_beta if name == "grad_gamma" else grad_gamma
            if _agrees(other, D, _along(f, [gamma if name == "grad_gamma" else beta], [D])):
                fail("grad_gamma and grad_beta are swapped: return (grad_x, grad_gamma, grad_beta), in that order")
            hint = ("gamma multiplies the normalised x_hat (not x), at every position" if name == "grad_gamma" else
                    "beta is added at every position")
            fail(f"{name}{where} disagrees with central differences of the loss: {hint}, so its gradient collects "
                 "from every position (and every sequence)")
    x, G, gamma = _rows(rng, (3, d)), rng.normal(size=(3, d)), 1 + 0.5 * rng.normal(size=d)
    grad_x = np.asarray(call(layer_norm_backward, "layer_norm_backward", x, gamma, G, eps=0.5)[0], float)
    D = rng.normal(size=x.shape)
    if not _agrees(grad_x, D, _along(lambda x_: float(np.sum(G * layer_norm(x_, gamma, np.zeros(d), eps=0.5))),
                                     [x], [D])):
        fail("with eps=0.5, grad_x disagrees with central differences of layer_norm(..., eps=0.5): use the `eps` "
             "argument wherever sigma = sqrt(var + eps) appears")
    x[0] = 1.5  # a constant row: variance 0
    with np.errstate(all="ignore"):
        got = call(layer_norm_backward, "layer_norm_backward", x, gamma, G)
    if not all(np.all(np.isfinite(np.asarray(g, float))) for g in got):
        fail("a constant row (variance 0) gave nan or inf: sigma = sqrt(var + eps), with eps inside the square "
             "root, is never 0")
    f32 = [a.astype(np.float32) for a in (_rows(rng, (2, 3, d)), gamma, rng.normal(size=(2, 3, d)))]
    got = call(layer_norm_backward, "layer_norm_backward", *f32)
    _float32_kept(dict(zip(("grad_x", "grad_gamma", "grad_beta"), got)), "layer_norm_backward")
    ok("layer_norm_backward: grad_x agrees with central differences of your layer_norm and its rows sum to 0; "
       "grad_gamma and grad_beta (d_model,) summed over every leading axis; eps used; constant row finite; batched; "
       "float32 kept; inputs unchanged")


# ------------------------------------------------------------------------------------------------------------ MLP
def _erf_gelu_slope(x):
    """The derivative of the exact GELU, x Phi(x): Phi(x) + x phi(x) (to name it when it is used by mistake)."""
    phi_cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    return phi_cdf + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def check_gelu_backward(gelu_backward):
    """0.5 at 0, 1 far right, 0 far left; central differences of the tanh form; the erf form and ReLU named;
    batched; float32 kept; inputs unchanged."""
    one = call(gelu_backward, "gelu_backward", np.zeros(1), np.ones(1))
    if np.shape(one) != (1,):
        fail(f"gelu_backward(x, grad_out) should have the shape of x; x of shape (1,) gave {np.shape(one)}")
    at0 = float(np.asarray(one, float)[0])
    if not abs(at0 - 0.5) < 1e-9:
        ones = np.asarray(call(gelu_backward, "gelu_backward", np.array([1.0, -1.0]), np.ones(2)), float)
        if at0 in (0, 1) and close(ones, [1, 0]):
            why = " That is a ReLU's step (0 or 1); GELU bends smoothly: differentiate its tanh form."
        elif at0 == 0:
            why = (" At 0 only the term 0.5 (1 + tanh(...)) remains, the derivative of the 0.5 x in front: by the "
                   "product rule GELU's slope is that term plus 0.5 x times the derivative of (1 + tanh(...)).")
        else:
            why = ""
        fail(f"with grad_out = 1, gelu_backward at x = 0 should be GELU's slope there, 0.5; got {at0:.6g}.{why}")
    far = np.asarray(call(gelu_backward, "gelu_backward", np.array([12.0, -12.0]), np.ones(2)), float)
    if not (abs(far[0] - 1) < 1e-6 and abs(far[1]) < 1e-6):
        fail(f"far out GELU is x on the right and 0 on the left: its slope at x = 12 should be 1 and at x = -12 be "
             f"0; got {far[0]:.6g} and {far[1]:.6g}. The derivative of tanh(u) is 1 - tanh(u)^2, which vanishes "
             "far out")
    rng = np.random.default_rng(92)
    x = rng.uniform(-4, 4, size=(2, 3, 7))  # (B, T, d_ff)
    x[0, 0, :3] = (0.0, 12.0, -12.0)
    G = rng.normal(size=x.shape)
    copies = _copies(x, G)
    got = call(gelu_backward, "gelu_backward", x, G)
    _unchanged("gelu_backward", (x, G), copies)
    if np.shape(got) != x.shape:
        fail(f"gelu_backward returned shape {np.shape(got)} for x of shape {x.shape}; it works entry by entry, so the "
             "shape must not change")
    got = np.asarray(got, float)
    h = 1e-5
    slope = (_gelu(x + h) - _gelu(x - h)) / (2 * h)  # central differences of GELU, entry by entry
    if not np.allclose(got, G * slope, rtol=1e-7, atol=1e-8):
        if np.allclose(got, slope, rtol=1e-7, atol=1e-8):
            fail("gelu_backward returned GELU's slope alone: multiply it by grad_out (the chain rule)")
        if np.allclose(got, G * _erf_gelu_slope(x), rtol=1e-7, atol=1e-8):
            fail("that is the derivative of the exact GELU, x Phi(x) with Phi from erf; the lesson's gelu is the "
                 "tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), whose slope differs by up to ~1e-3: "
                 "differentiate that one")
        if np.allclose(got, G * (x > 0), atol=1e-12):
            fail("that is a ReLU's step, grad_out * (x > 0); GELU bends smoothly: differentiate its tanh form")
        bend = np.divide(_gelu(x), x, out=np.full_like(x, 0.5), where=x != 0)
        if np.allclose(got, G * bend, rtol=1e-7, atol=1e-8):
            fail("you returned grad_out * 0.5 (1 + tanh(...)), the derivative of x's factor only: by the product rule "
                 "x times the derivative of 0.5 (1 + tanh(u(x))) is missing too (tanh' = 1 - tanh^2, and u'(x))")
        worst = np.unravel_index(np.argmax(np.abs(got - G * slope)), x.shape)
        fail(f"gelu_backward disagrees with central differences of gelu, e.g. at x = {x[worst]:.4f} "
             f"(grad_out {G[worst]:.4f}): expected {G[worst] * slope[worst]:.6g}, got {got[worst]:.6g}. Check the "
             "chain rule through tanh (1 - tanh^2) and the derivative of x + 0.044715 x^3")
    got2 = np.asarray(call(gelu_backward, "gelu_backward", x[0], G[0]), float)
    if not close(got2, got[0], tol=1e-12):
        fail("gelu_backward gives another result on one sequence (T, d_ff) than on the same sequence inside a batch")
    _float32_kept({"the result": call(gelu_backward, "gelu_backward", x.astype(np.float32), G.astype(np.float32))},
                  "gelu_backward", "; np.sqrt(2 / np.pi) is a float64 array scalar, math.sqrt a Python float")
    ok("gelu_backward: 0.5 at 0, 1 and 0 far out, agrees with central differences of the tanh form, batched, "
       "float32 kept, inputs unchanged")


def _mlp_case(rng, lead, T, d_model, d_ff, dtype=np.float64):
    x = rng.normal(size=(*lead, T, d_model))
    W_1, W_2 = rng.normal(size=(d_model, d_ff)) / math.sqrt(d_model), rng.normal(size=(d_ff, d_model)) / math.sqrt(d_ff)
    b_1, b_2 = 0.5 * rng.normal(size=d_ff), 0.5 * rng.normal(size=d_model)
    return [a.astype(dtype) for a in (x, W_1, b_1, W_2, b_2, rng.normal(size=x.shape))]


def check_mlp_backward(mlp_backward):
    """A dict of five gradients, each the shape of its input, agreeing with central differences of the lesson's mlp
    (unbatched and batched, bias gradients summed over B and T); float32 kept; inputs unchanged. When it fails or
    crashes, a function of the lesson it calls that fails its own check (gelu_backward) is named."""
    _naming_callee(_check_mlp_backward, mlp_backward)


def _check_mlp_backward(mlp_backward):
    rng = np.random.default_rng(93)
    for lead in ((), (2,)):
        arrays = _mlp_case(rng, lead, 3, 4, 6)
        x, W_1, b_1, W_2, b_2, G = arrays
        where = f" (x of shape {x.shape})" if lead else ""
        copies = _copies(*arrays)
        got = call(mlp_backward, "mlp_backward", *arrays)
        _unchanged("mlp_backward", arrays, copies)
        if not isinstance(got, dict) or set(got) != set(MLP_KEYS):
            fail(f"mlp_backward should return a dict with the keys {list(MLP_KEYS)}, got "
                 f"{sorted(got) if isinstance(got, dict) else type(got).__name__}")
        for name, a in zip(MLP_KEYS, arrays):
            if np.shape(got[name]) != a.shape:
                summed = (name != "x" and np.ndim(got[name]) > a.ndim)
                fail(f"the gradient of {name}{where} has shape {np.shape(got[name])}, expected {a.shape}, the shape "
                     f"of {name}" + (": a weight is shared by every position and every sequence, so its gradient "
                                     "sums over every leading axis (reshape to (-1, width) first)" if summed else ""))

        def loss(*xs):
            return float(np.sum(G * _mlp(*xs)))

        for i, name in enumerate(MLP_KEYS):
            D = [rng.normal(size=a.shape) if j == i else np.zeros(a.shape) for j, a in enumerate(arrays[:5])]
            if _agrees(got[name], D[i], _along(loss, arrays[:5], D)):
                continue
            hints = {"x": "x's gradient goes back through W_2, then gelu (your gelu_backward, at the pre-activation "
                          "x @ W_1 + b_1, not at gelu's output), then W_1, transposed each time",
                     "W_1": "W_1 meets x at every position: x^T times the gradient that reaches x @ W_1 + b_1 (after "
                            "gelu_backward)",
                     "b_1": "b_1 is added at every position: its gradient collects what reaches x @ W_1 + b_1 (after "
                            "gelu_backward) from each of them",
                     "W_2": "W_2 meets gelu's output (not its input) at every position",
                     "b_2": "b_2 is added at every position: its gradient collects grad_out from each of them"}
            fail(f"the gradient of {name}{where} disagrees with central differences of sum(grad_out * mlp(x, W_1, "
                 f"b_1, W_2, b_2)). {hints[name]}")
    f32 = _mlp_case(rng, (2,), 3, 4, 6, np.float32)
    got = call(mlp_backward, "mlp_backward", *f32)
    _float32_kept({name: got[name] for name in MLP_KEYS}, "mlp_backward")
    ok("mlp_backward: the gradients of x, W_1, b_1, W_2, b_2 have their inputs' shapes and agree with central "
       "differences (unbatched and batched, summed over B and T), float32 kept, inputs unchanged")


# ------------------------------------------------------------------------------------------------------ the loss
def _ce(cross_entropy, logits, targets, what):
    got = call(cross_entropy, "cross_entropy", logits, targets)
    if not isinstance(got, tuple) or len(got) != 2:
        fail("cross_entropy should return a tuple (loss, grad_logits)")
    loss, grad = got
    if np.ndim(loss) != 0 or not np.isrealobj(loss):
        fail(f"the loss{what} has shape {np.shape(loss)}; it is one float, the mean over every position of -log of "
             "the target's probability")
    if np.shape(grad) != np.shape(logits):
        fail(f"grad_logits{what} has shape {np.shape(grad)}; it has the shape of logits, {np.shape(logits)}")
    return float(loss), grad


def check_cross_entropy(cross_entropy):
    """Equal logits give ln(n_vocab); a known value; the mean over every position (batched); grad rows sum to 0 and
    equal central differences of the loss; logits near 1000; float32 kept; inputs unchanged."""
    n = 5
    rng = np.random.default_rng(94)
    logits, targets = np.zeros((4, n)), np.array([0, 3, 1, 3])
    copies = _copies(logits, targets)
    loss, _ = _ce(cross_entropy, logits, targets, " of logits (4, 5)")
    _unchanged("cross_entropy", (logits, targets), copies)
    if not abs(loss - math.log(n)) < 1e-9:
        how = ""
        if abs(loss - 4 * math.log(n)) < 1e-9:
            how = ": that is the sum over the 4 positions; take the mean"
        elif abs(loss + math.log(n)) < 1e-9:
            how = ": the sign is flipped (the loss is -log of the target's probability, positive)"
        elif abs(loss * n - math.log(n)) < 1e-9:
            how = (f": {n} = n_vocab times too small, a mean over the vocabulary axis too. The loss is the mean "
                   "over the positions only of -log(the target's probability)")
        fail(f"equal logits give every token probability 1/{n}, so the loss should be ln {n} = {math.log(n):.5f}; got "
             f"{loss:.5f}{how}")
    known = np.log(np.array([[1.0, 2, 3, 4], [4, 3, 2, 1]])) + np.array([[0.0], [7.0]])  # probabilities (k / 10)
    loss, _ = _ce(cross_entropy, known, np.array([3, 1]), "")
    expected = -(math.log(0.4) + math.log(0.3)) / 2
    if not abs(loss - expected) < 1e-9:
        fail(f"two rows of probabilities (0.1, 0.2, 0.3, 0.4) and (0.4, 0.3, 0.2, 0.1) with targets 3 and 1 should "
             f"give the mean of -ln 0.4 and -ln 0.3, {expected:.6f}; got {loss:.6f}. Is the target's "
             "log-probability picked per row (np.take_along_axis, or logp[np.arange(N), targets])?")
    B, T = 2, 3
    logits, targets = np.zeros((B, T, n)), rng.integers(0, n, size=(B, T))
    loss, _ = _ce(cross_entropy, logits, targets, " of batched logits (B, T, n_vocab) = (2, 3, 5)")
    if not abs(loss - math.log(n)) < 1e-9:
        ratio = loss / math.log(n)
        how = (f": {ratio:g} times that, so it is divided by the wrong count. The mean is over every position, "
               f"B * T = {B * T} of them (targets.size)") if abs(ratio - round(ratio)) < 1e-9 else ""
        fail(f"batched (B, T, n_vocab) = (2, 3, 5) equal logits should still give ln {n} = {math.log(n):.5f}; got "
             f"{loss:.5f}{how}")
    logits = 2.0 * rng.normal(size=(B, T, n))
    copies = _copies(logits, targets)
    loss, grad = _ce(cross_entropy, logits, targets, " of batched logits (B, T, n_vocab) = (2, 3, 5)")
    _unchanged("cross_entropy", (logits, targets), copies)
    grad = np.asarray(grad, float)
    if not np.allclose(grad.sum(axis=-1), 0, atol=1e-12):
        fail("the rows of grad_logits do not sum to 0: each row is (the probabilities minus the one-hot of the "
             "target) divided by the number of positions, and both of those sum to 1")

    def own_loss(l_):
        return _ce(cross_entropy, l_, targets, "")[0]

    num = _numeric_gradient(own_loss, logits)
    if not close(grad, num, tol=1e-7):
        for k, how in ((B * T, f"{B * T} = B * T times too large: it is not divided by the number of positions "
                               "(the loss is a mean, so each position's gradient is divided by B * T)"),
                       (B, f"{B} = B times too large: divided by T only; the mean is over every position, B * T"),
                       (T, f"{T} = T times too large: divided by B only; the mean is over every position, B * T"),
                       (-1, "of the wrong sign: it is softmax(logits) minus the one-hot of the targets")):
            if close(grad, k * num, tol=1e-7):
                fail(f"grad_logits is {how}")
        fail("grad_logits (batched (2, 3, 5)) disagrees with central differences of your loss: it is (softmax(logits) "
             "- one_hot(targets)) / (number of positions)")
    big = logits[0] + 1000.0
    with np.errstate(all="ignore"):
        loss_big, grad_big = _ce(cross_entropy, big, targets[0], " of logits near 1000")
        loss_small, grad_small = _ce(cross_entropy, logits[0], targets[0], "")
    if not (np.isfinite(loss_big) and np.all(np.isfinite(np.asarray(grad_big, float)))):
        fail("logits near 1000 gave an infinite or nan loss or gradient: exp(1000) overflows. Subtract each row's "
             "largest logit first (it changes no probability), and compute log-probabilities as shifted - "
             "log(sum(exp(shifted)))")
    if not (abs(loss_big - loss_small) < 1e-9 and close(grad_big, grad_small, tol=1e-12)):
        fail("adding 1000 to every logit should change neither the loss nor its gradient (the probabilities stay); "
             f"got loss {loss_big:.6g} instead of {loss_small:.6g}. Subtract each row's largest logit first")
    apart = np.array([[0.0, -800.0, 0.0]])  # the target's probability, 2e-348 / 2, underflows to 0 in float64
    with np.errstate(all="ignore"):
        loss, _ = _ce(cross_entropy, apart, np.array([1]), " of logits [[0, -800, 0]]")
    if not abs(loss - (800 + math.log(2))) < 1e-9:
        fail(f"logits [[0, -800, 0]] with target 1 should give -log p = 800 + ln 2 = {800 + math.log(2):.4f}; got "
             f"{loss:.6g}. A probability of e^-800 underflows to 0 and log(0) = -inf: compute the log-probabilities "
             "directly, shifted - log(sum(exp(shifted))) with shifted = logits - each row's largest, not "
             "log(softmax(logits))")
    _, grad32 = _ce(cross_entropy, logits.astype(np.float32), targets, " of float32 logits")
    _float32_kept({"grad_logits": grad32}, "cross_entropy", " (divide by the count as a Python int or float)")
    ok("cross_entropy: ln(n_vocab) for equal logits, a known value, the mean over every position (batched), grad "
       "rows sum to 0 and agree with central differences, logits near 1000 and far apart fine, float32 kept, inputs "
       "unchanged")


def check_embedding_backward(embedding_backward):
    """A token seen three times collects all three gradients; unseen tokens get zero rows; (n_vocab, d_model);
    batched tokens; float32 kept; inputs unchanged."""
    tokens = np.array([2, 0, 2, 4, 2])
    grad_x = np.array([[1.0, 2, 0], [0, 1, 0], [10, 20, 0], [0, 0, 5], [100, 200, 0]])  # (T, d_model)
    copies = _copies(tokens, grad_x)
    got = call(embedding_backward, "embedding_backward", tokens, grad_x, 6)
    _unchanged("embedding_backward", (tokens, grad_x), copies)
    if np.shape(got) != (6, 3):
        fail(f"embedding_backward(tokens, grad_x, n_vocab=6) with d_model 3 should have shape (n_vocab, d_model) = "
             f"(6, 3), the shape of the embedding table E (n_vocab rows, even for tokens never seen, here 1, 3 and "
             f"5); got {np.shape(got)}")
    got = np.asarray(got, float)
    if not close(got[2], [111, 222, 0]):
        if any(close(got[2], grad_x[i]) for i in (0, 2, 4)):
            fail("token 2 appears three times (positions 0, 2 and 4), so its row should be the sum of their three "
                 f"gradients, [111, 222, 0]; got {got[2].tolist()}, one of them. That is `grad_E[tokens] += grad_x`: "
                 "numpy's fancy-index assignment is buffered, so of repeated indices one write wins. Use "
                 "np.add.at(grad_E, tokens, grad_x), which adds every one")
        if close(got[2], [37, 74, 0]):
            fail("token 2 appears three times, so its row should be the sum of their three gradients, [111, 222, 0]; "
                 "got their mean, [37, 74, 0]. Every use of a token adds to the loss, so the gradients add up")
        fail(f"token 2 appears three times, so its row should be the sum of their gradients, [111, 222, 0]; got "
             f"{got[2].tolist()}")
    if not (close(got[0], [0, 1, 0]) and close(got[4], [0, 0, 5])):
        fail(f"tokens 0 and 4 appear once: their rows should be the gradients at their positions, [0, 1, 0] and "
             f"[0, 0, 5]; got {got[0].tolist()} and {got[4].tolist()}")
    if np.any(got[[1, 3, 5]] != 0):
        fail("tokens 1, 3 and 5 never appear, so their rows should be 0: start from np.zeros((n_vocab, d_model))")
    tokens = np.array([[1, 1], [1, 3]])  # (B, T)
    grad_x = np.array([[[1.0, 0], [2, 0]], [[4, 0], [0, 8]]])  # (B, T, d_model)
    got = call(embedding_backward, "embedding_backward", tokens, grad_x, 4)
    if np.shape(got) != (4, 2) or not close(got, [[0, 0], [7, 0], [0, 0], [0, 8]]):
        fail(f"batched tokens [[1, 1], [1, 3]] (B, T) should collect token 1's three gradients across the batch: "
             f"expected [[0, 0], [7, 0], [0, 0], [0, 8]], got {np.round(np.asarray(got, float), 4).tolist()} of shape "
             f"{np.shape(got)}. Flatten tokens to (N,) and grad_x to (N, d_model) first")
    got = call(embedding_backward, "embedding_backward", tokens, grad_x.astype(np.float32), 4)
    _float32_kept({"the result": got}, "embedding_backward", " (np.zeros(..., dtype=grad_x.dtype))")
    ok("embedding_backward: a token seen three times collects all three gradients, unseen tokens get 0, shape "
       "(n_vocab, d_model), batched, float32 kept, inputs unchanged")


# ---------------------------------------------------------------------------------------------------------- block
def _random_block(rng, d_model, d_ff, dtype=np.float64):
    s = 1 / math.sqrt(d_model)
    block = {"gamma_1": 1 + 0.3 * rng.normal(size=d_model), "beta_1": 0.3 * rng.normal(size=d_model),
             "gamma_2": 1 + 0.3 * rng.normal(size=d_model), "beta_2": 0.3 * rng.normal(size=d_model),
             "W_1": rng.normal(size=(d_model, d_ff)) * s, "b_1": 0.3 * rng.normal(size=d_ff),
             "W_2": rng.normal(size=(d_ff, d_model)) / math.sqrt(d_ff), "b_2": 0.3 * rng.normal(size=d_model)}
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        block[name] = rng.normal(size=(d_model, d_model)) * s
    return {k: block[k].astype(dtype) for k in BLOCK_KEYS}


def check_block_backward(block_backward, block_forward):
    """A dict of thirteen gradients (x and each of the block's arrays) agreeing with central differences of
    sum(G * block_forward(...)[0]) on a tiny causal block (unbatched and batched); the residual's straight paths
    named; float32 kept; inputs unchanged. When it fails or crashes, a function of the lesson it calls that fails
    its own check is named."""
    _naming_callee(_check_block_backward, block_backward, block_forward)


def _check_block_backward(block_backward, block_forward):
    rng = np.random.default_rng(95)
    T, d_model, d_ff, n_heads = 4, 4, 6, 2
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    names = ("x", *BLOCK_KEYS)
    for lead in ((), (2,)):
        x, block = rng.normal(size=(*lead, T, d_model)), _random_block(rng, d_model, d_ff)
        G = rng.normal(size=x.shape)
        where = " (batched, causal)" if lead else " (causal)"
        arrays = (x, G, mask, *block.values())
        copies = _copies(*arrays)
        got = call(block_backward, "block_backward", x, block, n_heads, G, mask=mask)
        _unchanged("block_backward", arrays, copies, "its inputs (x, grad_out, the mask or an array of the block)")
        if not isinstance(got, dict) or set(got) != set(names):
            fail(f"block_backward should return a dict with the keys {list(names)}, got "
                 f"{sorted(got) if isinstance(got, dict) else type(got).__name__}")
        for name in names:
            like = x if name == "x" else block[name]
            if np.shape(got[name]) != like.shape:
                fail(f"the gradient of {name}{where} has shape {np.shape(got[name])}, expected {like.shape}, the "
                     f"shape of {name}" + ("; a weight is shared by every sequence and position, so its gradient "
                                           "sums over them" if name != "x" else ""))

        def loss(x_, **changed):
            return float(np.sum(G * block_forward(x_, {**block, **changed}, n_heads, mask)[0]))

        wrong, D, rates = [], {}, {}
        for name in names:
            a = x if name == "x" else block[name]
            D[name] = rng.normal(size=a.shape)
            if name == "x":
                rates[name] = _along(lambda x_: loss(x_), [x], [D[name]])
            else:
                rates[name] = _along(lambda a_, name=name: loss(x, **{name: a_}), [a], [D[name]])
            if not _agrees(got[name], D[name], rates[name]):
                wrong.append(name)
        if wrong:
            _block_diagnosis(got, block, block_forward, x, G, n_heads, mask, wrong, D, rates, where)
    x32, block32 = rng.normal(size=(2, T, d_model)).astype(np.float32), _random_block(rng, d_model, d_ff, np.float32)
    got = call(block_backward, "block_backward", x32, block32, n_heads, np.ones_like(x32), mask=mask)
    _float32_kept({name: got[name] for name in names}, "block_backward")
    ok("block_backward: the gradients of x and of the block's 12 arrays agree with central differences (causal, "
       "unbatched and batched), float32 kept, inputs unchanged")


def _block_diagnosis(got, block, block_forward, x, G, n_heads, mask, wrong, D, rates, where):
    """Which step of the block's backward pass is wrong, measured by central differences of block_forward with a
    branch switched off (W_2 = b_2 = 0: out = x1, the stream after attention; W_O = 0: out = x1 + MLP(LN_2(x1)))."""
    zero = {k: np.zeros_like(block[k]) for k in ("W_2", "b_2", "W_O")}

    def x1_of(x_, mask_=mask, **changed):  # x + attention(LN_1(x))
        return block_forward(x_, {**block, **changed, "W_2": zero["W_2"], "b_2": zero["b_2"]}, n_heads, mask_)[0]

    def top(x1_):  # x1 + MLP(LN_2(x1)), as a number
        return float(np.sum(G * block_forward(x1_, {**block, "W_O": zero["W_O"]}, n_heads, mask)[0]))

    x1 = x1_of(x)
    said = f"the gradients of {', '.join(wrong)}{where} disagree with central differences of sum(grad_out * " \
           "block_forward(x, block, n_heads, mask)[0])"
    if "x" in wrong:
        straight = float(np.sum(np.asarray(got["x"], float) * D["x"]))
        if abs(straight + float(np.sum(G * D["x"])) - rates["x"]) <= 1e-6 * max(1.0, abs(rates["x"])):
            fail(f"the gradient of x{where} is off by exactly grad_out: the residual's straight path is missing; "
                 "where the stream splits the gradients add: x's gradient is grad_out plus what comes back through "
                 "the branch (in a block, x1's gradient plus what comes back through attention and LN_1)")
        if abs(straight + _along(top, [x1], [D["x"]]) - rates["x"]) <= 1e-6 * max(1.0, abs(rates["x"])):
            fail(f"the gradient of x{where} is off by exactly x1's gradient: the residual's straight path from x1 "
                 "back to x is missing; where the stream splits the gradients add: x's gradient is grad_out plus "
                 "what comes back through the branch. Here x goes both straight on to x1 and into LN_1 and the "
                 "attention, so its gradient is x1's gradient plus what comes back through LN_1")
    attention = [k for k in ("W_Q", "W_K", "W_V", "W_O", "gamma_1", "beta_1") if k in wrong]
    if attention and not [k for k in ("gamma_2", "beta_2", "W_1", "b_1", "W_2", "b_2") if k in wrong]:
        grad_x1 = _numeric_gradient(top, x1)  # x1's gradient, measured

        def reached_by(upstream, mask_=mask):  # the attention's gradients had `upstream` reached x1
            return all(_agrees(got[k], D[k], _along(
                lambda a_, k=k: float(np.sum(upstream * x1_of(x, mask_, **{k: a_}))), [block[k]], [D[k]]))
                for k in attention)

        if reached_by(grad_x1 - G):
            fail(f"{said}: they are what comes back through the MLP's branch alone. Where the stream splits the "
                 "gradients add: x1 = x + attention goes both straight on and into LN_2 and the MLP, so x1's "
                 "gradient is grad_out plus what comes back through the MLP's branch (layer_norm_backward at x1); "
                 "the attention's backward pass starts from that sum")
        if reached_by(G):
            fail(f"{said}: they are what grad_out alone gives. The attention's backward pass starts from x1's "
                 "gradient, grad_out plus what comes back through the MLP's branch: go backward in order, the MLP's "
                 "branch first, then add at x1, then the attention")
        if mask is not None and reached_by(grad_x1, None):
            fail(f"{said}: they are the gradients of attention without the mask. Pass the mask on to "
                 "multi_head_attention_backward, which recomputes the attention weights")
    if mask is not None and all(_agrees(got[k], D[k], _along(
            lambda a_, k=k: float(np.sum(G * block_forward(x, {**block, k: a_}, n_heads, None)[0])), [block[k]],
            [D[k]])) for k in BLOCK_KEYS):
        fail(f"{said}: they are the gradients of the block without its mask. Pass the mask on to every step that "
             "uses it: the attention recomputed in the backward pass and multi_head_attention_backward")
    if any(k in wrong for k in ("W_1", "b_1", "W_2", "b_2")):
        step = ("the MLP's: mlp_backward at h2 = LN_2(x1), what the MLP read (not x1), given grad_out; its "
                "\"x\" is the gradient of h2")
    elif any(k in wrong for k in ("gamma_2", "beta_2")):
        step = ("LN_2's: layer_norm_backward at x1 = x + attention, what LN_2 normalised (not its output h2, nor "
                "the block's input), with gamma_2, given the MLP's gradient of h2")
    elif any(k in wrong for k in ("W_Q", "W_K", "W_V", "W_O")):
        step = ("the attention's: multi_head_attention_backward at h1 = LN_1(x), what the attention read (not x), "
                "with the mask, given x1's gradient")
    else:
        step = ("LN_1's: layer_norm_backward at the block's input x, what LN_1 normalised (not its output h1), with "
                "gamma_1, given the attention's gradient of h1; x's gradient adds x1's")
    fail(f"{said}. The first wrong step, going backward, looks like {step}")


# ------------------------------------------------------------------------------------------------------- sampling
_LOGITS = np.array([1.0, 2.5, 0.2, 2.0, -0.5, 1.6])  # the largest: token 1, then 3, 5, 0, 2, 4


def _draw(sample_next, n, rng, temperature, top_k, logits=_LOGITS):
    return [call(sample_next, "sample_next", logits, rng, temperature, top_k) for _ in range(n)]


def _fits(counts, p, n):
    """Whether the frequencies ``counts / n`` are near p, within a generous bound (5 standard deviations)."""
    f = np.asarray(counts) / n
    return bool(np.all(np.abs(f - p) <= 5 * np.sqrt(p * (1 - p) / n) + 0.005))


def check_sample_next(sample_next):
    """An int; temperature 0 and top_k=1 give the argmax; top_k=3 draws only the 3 largest; frequencies near
    softmax(logits / temperature) at 0.5 and 2; randomness from `rng` only; logits unchanged."""
    logits, n_vocab = _LOGITS.copy(), len(_LOGITS)
    best = int(np.argmax(_LOGITS))
    rng = np.random.default_rng(96)
    first = call(sample_next, "sample_next", logits, rng, 1.0, None)
    if isinstance(first, bool) or not isinstance(first, (int, np.integer)):
        fail(f"sample_next should return one token, an int; got {first!r} ({type(first).__name__}). Convert with "
             "int(...), e.g. int(rng.choice(n_vocab, p=p))")
    if not 0 <= first < n_vocab:
        fail(f"sample_next returned token {first}, outside 0 .. {n_vocab - 1}")
    try:
        with np.errstate(all="ignore"):
            greedy = _draw(sample_next, 30, rng, 0.0, None, logits)
    except SelfCheckFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - dividing by a temperature of 0 breaks the draw
        fail(f"with temperature 0 sample_next failed ({type(exc).__name__}: {exc}): temperature 0 means greedy, the "
             "largest logit every time; handle it before dividing by the temperature")
    if any(t != best for t in greedy):
        fail(f"with temperature 0 every draw should be the largest logit's token, {best}; got {sorted(set(greedy))}")
    _unchanged("sample_next", (logits,), (_LOGITS,), "the logits")
    order = np.argsort(-_LOGITS)
    top1 = _draw(sample_next, 30, rng, 1.0, 1, logits)
    if any(t != best for t in top1):
        plus_one = (": k+1 tokens kept (an off-by-one). Keep the logits at least as large as the k-th largest, "
                    "np.sort(z)[-k], and set the others to -inf") if set(top1) == set(order[:2].tolist()) else ""
        fail(f"with top_k=1 only the largest logit's token, {best}, may be drawn; got {sorted(set(top1))}{plus_one}")
    n = 3000
    draws = _draw(sample_next, n, rng, 1.0, 3, logits)
    _unchanged("sample_next", (logits,), (_LOGITS,), "the logits", "with top_k, set -inf in a copy")
    kept, fourth = set(order[:3].tolist()), int(order[3])
    seen = set(int(t) for t in draws)
    if seen - kept:
        if seen - kept == {fourth}:
            fail(f"with top_k=3, {n} draws gave token {fourth}, the 4th largest: k+1 tokens kept (an off-by-one). "
                 "Keep the logits at least as large as the k-th largest, np.sort(z)[-k], and set the others to -inf")
        fail(f"with top_k=3 only tokens {sorted(kept)} (the 3 largest logits) may be drawn; {n} draws gave "
             f"{sorted(seen - kept)} too")
    p = np.where(np.isin(np.arange(n_vocab), list(kept)), _softmax(_LOGITS), 0)
    if not _fits(np.bincount(draws, minlength=n_vocab), p / p.sum(), n):
        fail(f"with top_k=3 the {n} draws do not fit softmax over the 3 largest logits (the others at -inf): "
             f"frequencies {np.round(np.bincount(draws, minlength=n_vocab) / n, 3).tolist()}, expected "
             f"{np.round(p / p.sum(), 3).tolist()}")
    n = 1500
    for temperature in (0.5, 2.0):
        counts = np.bincount(_draw(sample_next, n, rng, temperature, None, logits), minlength=n_vocab)
        if _fits(counts, _softmax(_LOGITS / temperature), n):
            continue
        said = (f"at temperature {temperature} the frequencies of {n} draws, "
                f"{np.round(counts / n, 3).tolist()}, should be near softmax(logits / {temperature}), "
                f"{np.round(_softmax(_LOGITS / temperature), 3).tolist()}")
        if _fits(counts, _softmax(_LOGITS), n):
            fail(f"{said}; they are those of temperature 1: the temperature changes nothing, temperature applied "
                 "after softmax (dividing the probabilities, then renormalising, undoes it). Divide the logits by the "
                 "temperature first, then take the softmax")
        if _fits(counts, _softmax(_LOGITS * temperature), n):
            fail(f"{said}; they are those of softmax(logits * {temperature}): multiplied instead of divided, so a "
                 "low temperature flattens instead of sharpening")
        fail(f"{said}. Divide the logits by the temperature, take the softmax, draw with rng")
    a = _draw(sample_next, 20, np.random.default_rng(5), 1.0, None, logits)
    b = _draw(sample_next, 20, np.random.default_rng(5), 1.0, None, logits)
    if a != b:
        fail("two generators seeded alike gave different draws: draw only with the `rng` you are given "
             "(rng.choice(n_vocab, p=p) or rng.random()), never with np.random's global functions (np.random.choice, "
             "np.random.rand) nor a new np.random.default_rng()")
    ok("sample_next: an int; greedy at temperature 0 and top_k=1; top_k=3 draws only the 3 largest; frequencies near "
       "softmax(logits / temperature) at 0.5 and 2; the same draws from generators seeded alike; inputs unchanged")


def sample_probe_with(sample_next):
    """A function (n, seed, logits, temperature, top_k) -> n tokens drawn with ``sample_next`` from one generator,
    np.random.default_rng(seed): a list, numpy integers as Python ints, anything else as returned."""
    def probe(n, seed, logits, temperature, top_k):
        rng = np.random.default_rng(seed)
        draws = []
        for _ in range(n):
            token = sample_next(np.array(logits, copy=True), rng, temperature, top_k)
            draws.append(int(token) if isinstance(token, np.integer) else token)
        return draws
    return probe


def sample_probe(n, seed, logits, temperature, top_k):
    """Draw n tokens with the notebook's ``sample_next`` (``sample_probe_with``). The graded test of ``sample_next``
    calls this: thousands of draws, one call into your notebook."""
    from IPython import get_ipython

    return sample_probe_with(get_ipython().user_ns["sample_next"])(n, seed, logits, temperature, top_k)


# ------------------------------------------------------------------------------------------------------- generate
def _random_model(rng, n_vocab=7, d_model=4, d_ff=8, n_blocks=2, T_max=12):
    return {"E": rng.normal(size=(n_vocab, d_model)), "P": 0.5 * rng.normal(size=(T_max, d_model)),
            "blocks": [_random_block(rng, d_model, d_ff) for _ in range(n_blocks)],
            "gamma_f": 1 + 0.3 * rng.normal(size=d_model), "beta_f": 0.3 * rng.normal(size=d_model),
            "W_U": rng.normal(size=(d_model, n_vocab)) * 2 / math.sqrt(d_model)}


def _model_arrays(params):
    return [params[k] for k in ("E", "P", "gamma_f", "beta_f", "W_U")] + [a for b in params["blocks"]
                                                                          for a in b.values()]


def check_generate(generate, gpt_logits):
    """Greedy generation equals argmax decoding with gpt_logits, step by step (a prompt of 3 tokens; one token up
    to the model's last position); the prompt kept; len(prompt) + n_new tokens; generators seeded alike give the
    same output; inputs unchanged. When it fails or crashes, a function of the lesson it calls that fails its own
    check (sample_next) is named."""
    _naming_callee(_check_generate, generate, gpt_logits)


def _check_generate(generate, gpt_logits):
    rng = np.random.default_rng(97)
    params, n_heads = _random_model(rng), 2
    T_max = params["P"].shape[0]
    arrays = _model_arrays(params)
    copies = _copies(*arrays)
    for prompt, n_new in (([3, 1, 4], 5), ([5], T_max - 1)):
        given = list(prompt)
        got = call(generate, "generate", params, n_heads, prompt, n_new, np.random.default_rng(0), temperature=0.0)
        if prompt != given:
            fail("generate changed the caller's prompt (a list) in place: start from a new list, "
                 "a list of the prompt's tokens, then append to that")
        _unchanged("generate", arrays, copies, "the model's arrays")
        what = f"generate(params, 2, prompt={prompt}, n_new={n_new}, rng, temperature=0.0)"
        if not isinstance(got, (list, tuple, np.ndarray)):
            fail(f"{what} should return a list of ints, got {type(got).__name__}")
        got = list(got)
        if len(got) != len(prompt) + n_new:
            also = (": only the new tokens; the list starts with the prompt" if len(got) == n_new else "")
            fail(f"{what} returned {len(got)} tokens; expected len(prompt) + n_new = {len(prompt) + n_new}{also}")
        if any(isinstance(t, bool) or not isinstance(t, (int, np.integer)) for t in got):
            fail(f"{what} should return ints; got {[type(t).__name__ for t in got][:3]}...")
        got = [int(t) for t in got]
        if got[:len(prompt)] != prompt:
            fail(f"{what} returned {got}: it should start with the prompt, {prompt}, unchanged")
        expected = list(prompt)
        for _ in range(n_new):  # greedy decoding, the whole model recomputed at each step
            expected.append(int(np.argmax(gpt_logits(params, n_heads, np.array(expected))[-1])))
        if got != expected:
            i = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
            fail(f"{what} returned {got}; greedy decoding (the argmax of the model's logits after each token) gives "
                 f"{expected}, first differing at position {i}. Feed every token of the prompt through model_step "
                 "once (it fills the cache), draw the first new token from the logits after the prompt's last token, "
                 "then feed each new token once, drawing the next from its logits")
    runs = [call(generate, "generate", params, n_heads, [2, 6], 8, np.random.default_rng(11), temperature=1.0)
            for _ in range(2)]
    if [int(t) for t in runs[0]] != [int(t) for t in runs[1]]:
        fail(f"two generators seeded alike gave different outputs at temperature 1, {list(runs[0])} and "
             f"{list(runs[1])}: every draw must come from the `rng` given to generate, passed on to sample_next")
    if len(runs[0]) != 10 or any(not 0 <= int(t) < 7 for t in runs[0]):
        fail(f"sampling 8 tokens after the prompt [2, 6] gave {list(runs[0])}: expected 10 tokens in 0 .. 6")
    greedy = [int(t) for t in call(generate, "generate", params, n_heads, [2, 6], 8, np.random.default_rng(0),
                                   temperature=0.0)]
    sampled = [[int(t) for t in call(generate, "generate", params, n_heads, [2, 6], 8, np.random.default_rng(seed),
                                     temperature=1.0)] for seed in range(12, 16)]
    if all(s == greedy for s in sampled):
        fail(f"at temperature 1, four generators seeded differently all gave the greedy output {greedy}: the new "
             "tokens must be drawn with sample_next(logits, rng, temperature, top_k), with the settings generate "
             "was called with, not taken as the argmax")
    ok("generate: greedy decoding equals the argmax of gpt_logits step by step, the prompt kept, len(prompt) + n_new "
       "tokens up to the model's last position, the same output from generators seeded alike, inputs unchanged")


# ----------------------------------------------------------------------------------------------------- take apart
def check_ablate_head(ablate_head):
    """Head h's columns h*d_head:(h+1)*d_head zero, every other entry unchanged; the first, middle and last head;
    batched; float32 kept; input unchanged."""
    rng = np.random.default_rng(98)
    n_heads, d_head = 3, 2
    d_model = n_heads * d_head
    for shape, head in (((4, d_model), 1), ((2, 5, d_model), 0), ((2, 2, 4, d_model), 2)):
        heads = rng.normal(size=shape)
        copy = heads.copy()
        got = call(ablate_head, "ablate_head", heads, n_heads, head)
        _unchanged("ablate_head", (heads,), (copy,), "the heads it was given", "zero a copy, np.array(heads)")
        if np.shape(got) != shape:
            fail(f"ablate_head returned shape {np.shape(got)} for heads of shape {shape}; the shape must not change")
        got = np.asarray(got, float)
        cols = np.arange(d_model)
        block = (cols >= head * d_head) & (cols < (head + 1) * d_head)
        what = f"heads of shape {shape}, n_heads={n_heads}, head={head}"
        if np.all(got[..., block] == 0) and np.array_equal(got[..., ~block], heads[..., ~block]):
            continue
        strided = cols % n_heads == head
        if np.all(got[..., strided] == 0) and np.array_equal(got[..., ~strided], heads[..., ~strided]):
            fail(f"{what}: columns {cols[strided].tolist()} were zeroed, every n_heads-th column (`head::n_heads`). "
                 f"concat_heads puts head h's d_head columns side by side: columns h*d_head to (h+1)*d_head, here "
                 f"{cols[block].tolist()}")
        rows = np.zeros(shape, dtype=bool)
        rows[..., head, :] = True
        if np.all(got[rows] == 0) and np.array_equal(got[~rows], heads[~rows]):
            fail(f"{what}: row {head} (a position) was zeroed; a head is a block of columns (the last axis), "
                 f"h*d_head to (h+1)*d_head, here {cols[block].tolist()}, at every position")
        fail(f"{what}: columns {cols[block].tolist()} (head {head}'s d_head = {d_head} columns) should be 0 at every "
             "position and every other entry unchanged")
    got = call(ablate_head, "ablate_head", rng.normal(size=(3, d_model)).astype(np.float32), n_heads, 1)
    _float32_kept({"the result": got}, "ablate_head")
    ok("ablate_head: head h's block of d_head columns zeroed at every position, the rest unchanged (first, middle "
       "and last head, batched), float32 kept, input unchanged")


def check_k_composition(k_composition):
    """Known values: identity layers give 1/sqrt(2) on the diagonal; a W_O_prev that swaps the two heads' rows moves
    them off it; [i, j] is head i reading head j (not transposed); scaling W_Q changes nothing; between 0 and 1;
    inputs unchanged."""
    eye = np.eye(4)
    args = [eye.copy() for _ in range(4)]
    copies = _copies(*args)
    got = call(k_composition, "k_composition", *args, 2)
    _unchanged("k_composition", args, copies)
    if np.shape(got) != (2, 2):
        fail(f"k_composition with n_heads=2 should return an (n_heads, n_heads) = (2, 2) array, got shape "
             f"{np.shape(got)}")
    got = np.asarray(got, float)
    r = 1 / math.sqrt(2)
    if not close(got, [[r, 0], [0, r]], tol=1e-9):
        how = ""
        if close(got, [[math.sqrt(2), 0], [0, math.sqrt(2)]], tol=1e-9):
            how = ": not normalised; divide ||W_QK W_OV^T||_F by ||W_QK||_F ||W_OV||_F"
        elif close(got, np.eye(2), tol=1e-9):
            how = (": with ord=2 np.linalg.norm gives the largest singular value; the score uses the Frobenius norm "
                   "(np.linalg.norm's default for a matrix)")
        fail(f"with W_Q = W_K = W_V_prev = W_O_prev = I (d_model 4, n_heads 2) each head's circuits are the "
             f"projection on its own 2 columns: expected [[0.7071, 0], [0, 0.7071]], got "
             f"{np.round(got, 4).tolist()}{how}")
    swap = np.block([[np.zeros((2, 2)), np.eye(2)], [np.eye(2), np.zeros((2, 2))]])  # head 0 writes where 1 reads
    got = np.asarray(call(k_composition, "k_composition", eye, eye, eye, swap, 2), float)
    if not close(got, [[0, r], [r, 0]], tol=1e-9):
        fail("when W_O_prev swaps the two blocks of rows (head 0 of the layer before writes where head 1 reads, and "
             f"head 1 where head 0 reads) expected [[0, 0.7071], [0.7071, 0]], got {np.round(got, 4).tolist()}. "
             "Head j's OV circuit is W_V_prev[:, j's columns] @ W_O_prev[j's rows, :]")
    both = np.block([[np.zeros((2, 2)), np.eye(2)], [np.zeros((2, 2)), np.eye(2)]])  # both heads write where 1 reads
    got = np.asarray(call(k_composition, "k_composition", eye, eye, eye, both, 2), float)
    if not close(got, [[0, 0], [r, r]], tol=1e-9):
        if close(got, [[0, r], [0, r]], tol=1e-9):
            fail("your result is transposed ([j, i]): when both heads of the layer before write where head 1 reads, "
                 "row 1 ([1, j], head 1 reading head j) should hold the two scores, [[0, 0], [0.7071, 0.7071]]. "
                 "[i, j] is head i of this layer (its W_QK) reading head j of the layer before (its W_OV)")
        fail("when both heads of the layer before write where head 1 reads, expected [[0, 0], [0.7071, 0.7071]] "
             f"([i, j]: head i reading head j), got {np.round(got, 4).tolist()}")
    W_K = np.zeros((4, 4))
    W_K[:2, :2] = W_K[:2, 2:] = np.eye(2)  # both heads' keys read where head 0 writes; head 1's queries, head 1's
    got = np.asarray(call(k_composition, "k_composition", eye, W_K, eye, eye, 2), float)
    if not close(got, [[r, 0], [r, 0]], tol=1e-9):
        if close(got, [[r, 0], [0, r]], tol=1e-9):
            fail("when both heads' keys read where head 0 of the layer before writes (W_K's columns of both heads on "
                 "rows 0 and 1) but head 1's queries read where head 1 writes, expected [[0.7071, 0], [0.7071, 0]]; "
                 "got [[0.7071, 0], [0, 0.7071]], what the queries read: that is Q-composition (or W_QK transposed). "
                 "K-composition is read by the keys, the right side of W_QK: ||W_QK W_OV^T||_F")
        fail("when both heads' keys read where head 0 of the layer before writes, expected [[0.7071, 0], [0.7071, "
             f"0]], got {np.round(got, 4).tolist()}")
    rng = np.random.default_rng(99)
    Ws = [rng.normal(size=(6, 6)) for _ in range(4)]
    base = np.asarray(call(k_composition, "k_composition", *Ws, 3), float)
    if np.shape(base) != (3, 3):
        fail(f"with n_heads=3 the result should have shape (3, 3), got {np.shape(base)}")
    if np.any(base < 0) or np.any(base > 1 + 1e-12):
        fail(f"a K-composition score lies between 0 and 1 (a Frobenius norm of a product over the product of the "
             f"norms); got {np.round(base, 4).tolist()} on random layers")
    scaled = np.asarray(call(k_composition, "k_composition", 3 * Ws[0], *Ws[1:], 3), float)
    if not close(scaled, base, tol=1e-9):
        fail("scaling W_Q by 3 changed the scores: both the product and ||W_QK||_F grow by 3, so the score must not "
             "change. Normalise by the norms of the same matrices that enter the product")
    ok("k_composition: 1/sqrt(2) on the diagonal for identity layers, the swap moves it off, [i, j] = head i's keys "
       "reading head j, unchanged by scaling W_Q, between 0 and 1, inputs unchanged")


# this lesson's functions, each with the checks that take it alone: a check of a function that calls one of them
# names it when it is the one that is wrong (selfcheck_common.own). A check that needs a function the lesson gives
# (or another of yours) finds it beside yours, in the notebook; without it, it has nothing to say.
def _with_notebook(check, name):
    def alone(fn):
        other = getattr(fn, "__globals__", {}).get(name)
        if callable(other):
            check(fn, other)
    return alone


own("layer_norm", check_layer_norm)
own("layer_norm_backward", _with_notebook(check_layer_norm_backward, "layer_norm"))
own("gelu_backward", check_gelu_backward)
own("mlp_backward", check_mlp_backward)
own("cross_entropy", check_cross_entropy)
own("embedding_backward", check_embedding_backward)
own("block_backward", _with_notebook(check_block_backward, "block_forward"))
own("sample_next", check_sample_next)
own("generate", _with_notebook(check_generate, "gpt_logits"))
own("ablate_head", check_ablate_head)
own("k_composition", check_k_composition)
