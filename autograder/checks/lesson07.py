"""Hidden tests of lesson 07 (heads that learn): the backward pass of attention, the gradient check, positions.

One function per graded test cell, named by the cell's grade_id. Inputs are seeded random arrays whose sizes all
differ (B, n_heads, T_q, T_k, d_k, d_v), unbatched and batched, masked and not, float64 and float32. A composite
function is graded with the reference versions of the functions it calls (``stand_ins=``). None of these tests trains
the lesson's model: training is not graded.

``gradient_check`` takes a function, which cannot be sent into the learner's kernel; in grading it is called
through ``gradient_check_probe`` (the lesson's self-check module), which runs the notebook's ``gradient_check`` on
``scale * probe_loss``, a loss both sides share.
"""

from __future__ import annotations

import math

import numpy as np

from autograder import bugs as bug_catalog
from autograder import course, reference
from autograder.checks import bug_match, compare
from autograder.checks.registry import hidden_test
from autograder.checks.runner import Case, against_reference, standing_in, call_learner, rng_for
from autograder.checks.verdict import LearnerCall, WrongAnswer

GRADIENTS = ("x", "W_Q", "W_K", "W_V", "W_O")
_SIZES = (2, 3, 4, 5, 6, 7)


def _dims(rng):
    """B, n_heads, T_q, T_k, d_k, d_v: six different sizes."""
    return dict(zip(("B", "n_heads", "T_q", "T_k", "d_k", "d_v"), (int(v) for v in rng.permutation(_SIZES))))


def _mask(rng, T_q, T_k):
    """About a third of the pairs blocked, at least one (a small mask could otherwise block none, and a backward
    pass that ignores the mask would pass), and every query keeps a key. T_k >= 2 (``_SIZES``)."""
    mask = rng.random((T_q, T_k)) < 0.35
    kept = rng.integers(0, T_k, T_q)
    q = rng.integers(0, T_q)
    mask[q, (kept[q] + rng.integers(1, T_k)) % T_k] = True  # a key other than the one query q keeps
    mask[np.arange(T_q), kept] = False  # every query keeps a key
    return mask


# ------------------------------------------------------------------------------------------- softmax Jacobian
@hidden_test(uses=("softmax_jacobian",), visible_check="check_softmax_jacobian")
def softmax_jacobian_values(softmax_jacobian):
    """Rows of several lengths (one weight, a blocked key with weight 0), float64 and float32."""
    rng = rng_for("softmax_jacobian_values")
    n = [int(v) for v in rng.permutation(_SIZES)[:2]]
    blocked = rng.normal(size=n[1]) * 2
    blocked[rng.integers(0, n[1])] = -np.inf
    rows = [(np.array([rng.normal()]), "one weight"), (rng.normal(size=n[0]) * 2, f"{n[0]} weights"),
            (blocked, f"{n[1]} weights, one key blocked (weight 0)")]
    cases = [Case((reference.softmax(s),), label=label) for s, label in rows]
    against_reference("softmax_jacobian", softmax_jacobian, cases, rtol=1e-9, atol=1e-12)
    f32 = [Case((reference.softmax(rows[1][0]).astype(np.float32),), label=f"{n[0]} weights, float32")]
    against_reference("softmax_jacobian", softmax_jacobian, f32, rtol=1e-5, atol=1e-7)
    _dtype_kept("softmax_jacobian", softmax_jacobian, f32[0], {})


# ------------------------------------------------------------------------------------------- softmax backward
def _softmax_case(rng, shape, axis, dtype, blocked_row=False, label=""):
    scores = rng.normal(size=shape) * 2
    if blocked_row:
        scores[..., 0, :] = -np.inf  # every key of the first query blocked: all-zero weights
    weights = reference.softmax(scores, axis=axis)
    grad = rng.normal(size=shape)
    return Case((weights.astype(dtype), grad.astype(dtype)), {"axis": axis} if axis != -1 else {}, label=label)


@hidden_test(uses=("softmax_backward",), visible_check="check_softmax_backward", forbids=("softmax_jacobian",),
             because="step 3: the backward function, without the Jacobian")
def softmax_backward_values(softmax_backward):
    """Unbatched, batched, along axis 0, a fully blocked row, float32."""
    rng = rng_for("softmax_backward_values")
    d = _dims(rng)
    cases = [
        _softmax_case(rng, (d["T_q"], d["T_k"]), -1, np.float64, label="unbatched (T_q, T_k)"),
        _softmax_case(rng, (d["B"], d["n_heads"], d["T_q"], d["T_k"]), -1, np.float64, blocked_row=True,
                      label="batched (B, n_heads, T_q, T_k), first query fully blocked"),
        _softmax_case(rng, (d["T_k"], d["T_q"]), 0, np.float64, label="softmax along axis 0"),
    ]
    against_reference("softmax_backward", softmax_backward, cases, rtol=1e-6, atol=1e-9)
    f32 = [_softmax_case(rng, (d["B"], d["T_q"], d["T_k"]), -1, np.float32, label="float32")]
    against_reference("softmax_backward", softmax_backward, f32, rtol=1e-4, atol=1e-6)
    _dtype_kept("softmax_backward", softmax_backward, f32[0], {})


def _dtype_kept(name, fn, case, stand_ins):
    with standing_in(fn, stand_ins):
        out = call_learner(fn, case, name)
    outs = out.values() if isinstance(out, dict) else out if isinstance(out, tuple) else (out,)
    if any(getattr(o, "dtype", None) != np.float32 for o in outs):
        raise WrongAnswer(f"{name} turned float32 input into {[str(getattr(o, 'dtype', type(o))) for o in outs]}: "
                          "scale by math.sqrt(d_k), a Python float (np.sqrt gives a numpy float64, which promotes "
                          "float32 arrays), and create no float64 arrays")


# ---------------------------------------------------------------------------------------- attention backward
_ATTENTION_BIND = {"softmax_backward": reference.softmax_backward}


def _row_case(rng, d, dtype=np.float64):
    q, K, V, grad_out = (rng.normal(size=shape) for shape in ((d["d_k"],), (d["T_k"], d["d_k"]),
                                                             (d["T_k"], d["d_v"]), (d["d_v"],)))
    label = f"one query, T_k={d['T_k']}, d_k={d['d_k']}, d_v={d['d_v']}, {np.dtype(dtype).name}"
    return Case(tuple(a.astype(dtype) for a in (q, K, V, grad_out)), label=label)


@hidden_test(uses=("attention_row_backward",), helpers=("softmax_backward",),
             visible_check="check_attention_row_backward", forbids=("scaled_dot_product_attention_backward",),
             because="the row is derived here, not handed to the matrix form")
def attention_row_backward_values(attention_row_backward, softmax_backward=None):
    """One query against T_k keys, sizes all different, float64 and float32; graded with the reference
    softmax_backward bound in. The matrix form refuses: this cell grades the row derivation itself."""
    rng = rng_for("attention_row_backward_values")
    d = _dims(rng)
    against_reference("attention_row_backward", attention_row_backward, [_row_case(rng, d), _row_case(rng, d)],
                      outputs=("dq", "dK", "dV"), rtol=1e-6, atol=1e-9, stand_ins=_ATTENTION_BIND)
    f32 = [_row_case(rng, d, np.float32)]
    against_reference("attention_row_backward", attention_row_backward, f32, outputs=("dq", "dK", "dV"),
                      rtol=1e-3, atol=1e-5, stand_ins=_ATTENTION_BIND)
    _dtype_kept("attention_row_backward", attention_row_backward, f32[0], _ATTENTION_BIND)


def _attention_case(rng, lead, d, masked, dtype=np.float64):
    Q, K, V = (rng.normal(size=(*lead, t, w)) for t, w in ((d["T_q"], d["d_k"]), (d["T_k"], d["d_k"]),
                                                             (d["T_k"], d["d_v"])))
    mask = _mask(rng, d["T_q"], d["T_k"]) if masked else None
    out, weights = reference.scaled_dot_product_attention(Q, K, V, mask)
    grad_out = rng.normal(size=out.shape)
    arrays = tuple(a.astype(dtype) for a in (Q, K, V, weights, grad_out))
    label = (f"{'batched' if lead else 'unbatched'}{', masked' if masked else ''}, {np.dtype(dtype).name}"
             + (", T_q = T_k" if d["T_q"] == d["T_k"] else ""))
    return Case(arrays, {"mask": mask} if masked else {}, label=label)


@hidden_test(uses=("scaled_dot_product_attention_backward",), helpers=("softmax_backward",),
             visible_check="check_attention_backward")
def attention_backward_values(scaled_dot_product_attention_backward, softmax_backward=None):
    """T_q != T_k, unbatched and batched (B, n_heads), with and without a mask, then T_q = T_k (where a product
    with one operand untransposed runs, so its values tell which one it is); float32. Graded with the reference
    softmax_backward bound in, so a bug there costs only its own cell."""
    rng = rng_for("attention_backward_values")
    d = _dims(rng)
    cases = [_attention_case(rng, (), d, False), _attention_case(rng, (d["B"], d["n_heads"]), d, False),
             _attention_case(rng, (d["B"], d["n_heads"]), d, True), _attention_case(rng, (), d, True),
             _attention_case(rng, (d["B"],), {**d, "T_k": d["T_q"]}, False)]
    against_reference("scaled_dot_product_attention_backward", scaled_dot_product_attention_backward, cases,
          outputs=("dQ", "dK", "dV"), rtol=1e-6, atol=1e-9, stand_ins=_ATTENTION_BIND)
    f32 = [_attention_case(rng, (d["B"],), d, True, np.float32)]
    against_reference("scaled_dot_product_attention_backward", scaled_dot_product_attention_backward, f32,
          outputs=("dQ", "dK", "dV"), rtol=1e-3, atol=1e-5, stand_ins=_ATTENTION_BIND)
    _dtype_kept("scaled_dot_product_attention_backward", scaled_dot_product_attention_backward, f32[0],
                _ATTENTION_BIND)


# ------------------------------------------------------------------------------------ multi-head backward
_MHA = "multi_head_attention_backward"
_MHA_BIND = {"scaled_dot_product_attention_backward": reference.scaled_dot_product_attention_backward,
             "softmax_backward": reference.softmax_backward, "split_heads": reference.split_heads,
             "concat_heads": reference.concat_heads,
             "scaled_dot_product_attention": reference.scaled_dot_product_attention}


def _mha_case(rng, lead, d, masked, dtype=np.float64):
    n_heads, d_head = d["n_heads"], d["d_k"]
    d_model = n_heads * d_head
    T = d["T_q"]
    x = rng.normal(size=(*lead, T, d_model))
    Ws = [rng.normal(size=(d_model, d_model)) / math.sqrt(d_model) for _ in range(4)]
    grad_out = rng.normal(size=x.shape)
    mask = _mask(rng, T, T) if masked else None
    args = (x.astype(dtype), *(W.astype(dtype) for W in Ws), n_heads, grad_out.astype(dtype))
    label = f"{'batched' if lead else 'unbatched'}{', masked' if masked else ''}, {np.dtype(dtype).name}"
    return Case(args, {"mask": mask} if masked else {}, label=label)


def _keyed(result, on):
    """The five gradients in GRADIENTS order, from the dict the function must return."""
    if not isinstance(result, dict) or sorted(result) != sorted(GRADIENTS):
        got = sorted(result) if isinstance(result, dict) else type(result).__name__
        raise WrongAnswer(f"{_MHA} should return a dict with the keys {list(GRADIENTS)}, got {got} on input {on}")
    return tuple(result[k] for k in GRADIENTS)


def _mha_bug(case, got, rtol, atol):
    """The catalogued bug of the multi-head backward whose five gradients on ``case`` equal ``got``, or None."""

    def fits(bug) -> bool:
        wrong = bug.make()(*[compare.snapshot(a) if compare.is_array(a) else a for a in case.args], **case.kwargs)
        return all(compare.same_values(g, w, rtol=rtol, atol=atol)
                   for g, w in zip(got, tuple(wrong[k] for k in GRADIENTS)))

    return bug_match.first_fit(_MHA, fits)


def _check_mha_backward(fn, cases, rtol, atol):
    for case in cases:
        before = [compare.snapshot(a) if compare.is_array(a) else None for a in case.args]
        with standing_in(fn, _MHA_BIND), np.errstate(all="ignore"):
            got = _keyed(call_learner(fn, case, _MHA), case.describe())
        if any(b is not None and not compare.unchanged(b, a) for b, a in zip(before, case.args)):
            raise WrongAnswer(f"{_MHA} modified one of its inputs in place on {case.describe()}; work on new arrays "
                              "(e.g. `g = g @ W`, not `g @= W`)", uncatalogued=True)
        expected = _keyed(reference.multi_head_attention_backward(*case.args, **case.kwargs), case.describe())
        for key, g, e in zip(GRADIENTS, got, expected):
            why = compare.mismatch(g, e, rtol=rtol, atol=atol, what=f"the gradient of {key}")
            if why is None:
                continue
            bug = _mha_bug(case, got, rtol, atol)
            if bug is not None:
                raise WrongAnswer.naming(bug, f"on input {case.describe()}")
            raise WrongAnswer(f"{why} on input {case.describe()}", uncatalogued=True)


@hidden_test(uses=(_MHA,), helpers=("scaled_dot_product_attention_backward", "softmax_backward"),
             visible_check="check_mha_backward")
def mha_backward_values(multi_head_attention_backward, scaled_dot_product_attention_backward=None,
                        softmax_backward=None):
    """Unbatched and batched, with and without a (T, T) mask, float32; the five gradients of the returned dict.
    Graded with the reference attention backward, softmax backward and forward helpers bound in."""
    rng = rng_for("mha_backward_values")
    d = _dims(rng)
    cases = [_mha_case(rng, (), d, False), _mha_case(rng, (d["B"],), d, False), _mha_case(rng, (d["B"],), d, True),
             _mha_case(rng, (d["B"], 2), d, True)]
    _check_mha_backward(multi_head_attention_backward, cases, rtol=1e-6, atol=1e-9)
    f32 = [_mha_case(rng, (d["B"],), d, True, np.float32)]
    _check_mha_backward(multi_head_attention_backward, f32, rtol=1e-3, atol=1e-5)
    _dtype_kept(_MHA, multi_head_attention_backward, f32[0], _MHA_BIND)


# ------------------------------------------------------------------------------------------ gradient check
def _probe():
    return course.import_selfcheck("selfcheck_07")


def _gc_value(gradient_check, gradient_check_probe, inputs, grad, eps, scale, label):
    """The learner's gradient_check on scale * probe_loss: in grading through the kernel's probe, else directly."""
    arrays = (*inputs, *grad)
    before = [compare.snapshot(a) for a in arrays]
    case = Case((eps, scale, *arrays), label=label)
    if isinstance(gradient_check, LearnerCall):  # the notebook's function runs in the kernel: through its probe
        got = call_learner(gradient_check_probe, case, "gradient_check")
    else:
        loss = _probe().probe_loss
        got = call_learner(lambda e, s, *a: gradient_check(lambda *xs: s * loss(*xs), list(a[:len(inputs)]),
                                                    list(a[len(inputs):]), e), case, "gradient_check")
    if any(not compare.unchanged(b, a) for b, a in zip(before, arrays)):
        b = bug_catalog.by_id("gc_perturbs_inputs")
        raise WrongAnswer.naming(b, f"on input {label}")
    if type(got) not in (float, int) and type(got) not in (type(np.float64(0)), type(np.float32(0))):
        raise WrongAnswer(f"gradient_check should return one number (a float), got {type(got).__name__} on "
                          f"input {label}")
    return float(got)


def _gc_cases(rng):
    """(label, inputs, grad, eps, scale, expected): the reference's value on each."""
    probe = _probe()
    x = rng.normal(size=(3, 4))
    y = rng.normal(size=(5,))
    z = rng.normal(size=(2, 3))
    cases = []

    def add(label, inputs, grad, eps=1e-6, scale=1.0):
        expected = reference.gradient_check(lambda *xs: scale * probe.probe_loss(*xs), inputs, grad, eps)
        cases.append((label, inputs, grad, eps, scale, expected))

    good = probe.probe_gradient(x, y, z)
    add("exact gradients of three inputs", [x, y, z], good)
    wrong = [g.copy() for g in good]
    wrong[0][1, 2] *= 1.3
    add("first input's gradient off at one entry", [x, y, z], wrong)
    wrong = [g.copy() for g in good]
    wrong[2][0, 1] += 0.4
    add("third input's gradient off at one entry", [x, y, z], wrong)
    wrong = [g.copy() for g in good]
    small = int(np.argmin(np.abs(wrong[1])))  # off at its smallest entry, towards 0: relative to that entry the
    wrong[1][small] -= np.sign(wrong[1][small]) * 0.05 * float(np.abs(wrong[1]).max())  # error exceeds 0.05
    add("second input's gradient off at its smallest entry", [x, y, z], wrong)
    big = [g * 1000.0 for g in good]
    big[1] = big[1].copy()
    big[1][3] += 500.0
    add("loss scaled by 1000, one entry off", [x, y, z], big, scale=1000.0)
    add("exact gradients, eps=1e-3", [x, y, z], good, eps=1e-3)
    add("exact gradients, float32 inputs", [x.astype(np.float32), y.astype(np.float32)],
        probe.probe_gradient(x.astype(np.float32).astype(np.float64), y.astype(np.float32).astype(np.float64)))
    for label, value in (("NaN", np.nan), ("inf", np.inf)):  # last: a number where nan is due is its own bug
        held = [g.copy() for g in good]
        # the middle input: a finite error before it catches max(worst, err), one after it max(err, worst)
        held[1].flat[int(rng.integers(held[1].size))] = value
        add(f"second input's gradient holding {label}", [x, y, z], held)
    return cases


def _gc_bug(label, inputs, grad, eps, scale, got):
    """The catalogued bug of ``gradient_check`` that reports ``got`` on these inputs (to 0.1 %), or None."""

    def fits(bug) -> bool:
        loss = _probe().probe_loss
        value = float(bug.make()(lambda *xs: scale * loss(*xs), [compare.snapshot(a) for a in inputs],
                                 [compare.snapshot(g) for g in grad], eps))
        return abs(value - got) <= 1e-3 * abs(value) + 1e-9

    return bug_match.first_fit("gradient_check", fits)


@hidden_test(uses=("gradient_check",), helpers=("gradient_check_probe",), visible_check="check_gradient_check")
def gradient_check_values(gradient_check, gradient_check_probe=None):
    """Exact gradients give an error below 1e-6 (central differences; float64 copies even for float32 inputs);
    wrong ones give the reference's relative error within 0.1% (every input checked, relative to the gradient's
    size); the caller's arrays are unchanged."""
    rng = rng_for("gradient_check_values")
    for label, inputs, grad, eps, scale, expected in _gc_cases(rng):
        got = _gc_value(gradient_check, gradient_check_probe, inputs, grad, eps, scale, label)
        if not math.isfinite(expected):  # a NaN or inf anywhere: the check must not pass it (nan; inf is as clear)
            right = not math.isfinite(got)
        else:
            right = got < 1e-6 if expected < 1e-7 else abs(got - expected) <= 1e-3 * expected
        if not right:
            # only a check right everywhere else reaches a NaN case, and a number there is the dropped NaN
            bug = (bug_catalog.by_id("gc_max_drops_nan") if not math.isfinite(expected)
                   else _gc_bug(label, inputs, grad, eps, scale, got))
            if bug is not None:
                raise WrongAnswer.naming(bug, f"on input: {label}; got {got:.4g}, expected "
                                              f"{expected:.4g}")
            raise WrongAnswer(f"gradient_check returned {got:.4g} on input: {label}; expected {expected:.4g}"
                              + (" (below 1e-6)" if expected < 1e-7 else ""), uncatalogued=True)


# ---------------------------------------------------------------------------------------------- positions
@hidden_test(uses=("sinusoidal_positions",), visible_check="check_sinusoidal_positions")
def positions_values(sinusoidal_positions):
    """Several (T, d_model), d_model even and different from T."""
    cases = [Case((T, d_model), label=f"T={T}, d_model={d_model}") for T, d_model in ((9, 6), (4, 16), (50, 128),
                                                                                        (1, 2))]
    against_reference("sinusoidal_positions", sinusoidal_positions, cases, rtol=1e-9, atol=1e-9)
