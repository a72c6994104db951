"""Hidden tests of lesson 02 (the multi-head mechanism).

One function per graded test cell, named by the cell's grade_id. Inputs are seeded random arrays whose sizes
are all different (B, L, n_heads, T, d_head), unbatched and batched, float64 and float32 (each dtype kept).

Isolation: a function's test binds the reference version of every helper it may call (``stand_ins=``), so a wrong
``split_heads`` costs only ``split_heads_values``. ``mha_composition`` then checks the learner's own pieces
together, and charges only a failure that no single piece explains.
"""

from __future__ import annotations

import math

import numpy as np

from autograder import reference
from autograder.checks import compare
from autograder.checks.runner import Case, against_reference, distinct_dims, dtype_kept, rng_for, random_mask
from autograder.checks.verdict import WrongAnswer
from autograder.checks.registry import hidden_test

_MHA = "multi_head_attention"
_HELPERS = ("split_heads", "concat_heads", "output_projection", "scaled_dot_product_attention", "softmax")
_REFERENCE_HELPERS = {name: getattr(reference, name) for name in _HELPERS}
_LESSON01 = {name: getattr(reference, name) for name in ("scaled_dot_product_attention", "softmax")}
_DTYPES = (np.float32, np.float64)
_INSPECT = {
    "split_heads": "the shape you reshape to (which axis is cut into heads) and which two axes are swapped, counted "
                   "from the end",
    "concat_heads": "which two axes are swapped back, counted from the end, before the reshape",
    "output_projection": "how the heads are joined (side by side, head 0 first) before W_O, and how W_O is applied",
    _MHA: "the projections (x @ W), the split into heads, the per-head scale, where the mask enters and the "
          "output projection",
}


def _dims(rng):
    d = distinct_dims(rng, ("B", "L", "n_heads", "T", "d_head"))
    d["d_model"] = d["n_heads"] * d["d_head"]
    return d


@hidden_test(uses=('split_heads',), visible_check='check_split_heads')
def split_heads_values(split_heads):
    """Columns i*d_head:(i+1)*d_head of every token land in head i; any leading axes; dtype kept; ValueError."""
    rng = rng_for("split_heads_values")
    d = _dims(rng)
    T, d_model, h = d["T"], d["d_model"], d["n_heads"]
    cases = [
        Case((rng.normal(size=(T, d_model)), h), label="unbatched (T, d_model)"),
        Case((rng.normal(size=(d["B"], T, d_model)), h), label="batched (B, T, d_model)"),
        Case((rng.normal(size=(d["B"], d["L"], T, d_model)), h), label="two leading axes"),
        Case((rng.normal(size=(d["B"], T, d_model)).astype(np.float32), h), label="float32"),
    ]
    against_reference("split_heads", split_heads, cases, inspect=_INSPECT["split_heads"])
    dtype_kept("split_heads", split_heads, [Case((rng.normal(size=(T, d_model)).astype(dt), h), label=dt.__name__)
                                            for dt in _DTYPES], rtol=0.0, atol=0.0)
    bad_width = d_model + 1
    try:
        split_heads(rng.normal(size=(T, bad_width)), h)
    except ValueError:
        pass
    except Exception as exc:
        raise WrongAnswer(f"split_heads(x, {h}) with d_model={bad_width} raised {type(exc).__name__}; it "
                          f"should raise ValueError because {h} heads do not divide {bad_width}") from None
    else:
        raise WrongAnswer(f"split_heads(x, {h}) with d_model={bad_width} returned a result; it should raise "
                          f"ValueError because {h} heads do not divide {bad_width} columns equally")


@hidden_test(uses=('concat_heads',), visible_check='check_concat_heads')
def concat_heads_values(concat_heads):
    """The exact inverse of split_heads, on any leading axes."""
    rng = rng_for("concat_heads_values")
    d = _dims(rng)
    h, T, dh = d["n_heads"], d["T"], d["d_head"]
    cases = [
        Case((rng.normal(size=(h, T, dh)),), label="unbatched (n_heads, T, d_head)"),
        Case((rng.normal(size=(d["B"], h, T, dh)),), label="batched (B, n_heads, T, d_head)"),
        Case((rng.normal(size=(d["B"], d["L"], h, T, dh)),), label="two leading axes"),
        Case((rng.normal(size=(d["B"], h, T, dh)).astype(np.float32),), label="float32"),
    ]
    against_reference("concat_heads", concat_heads, cases, inspect=_INSPECT["concat_heads"])
    dtype_kept("concat_heads", concat_heads, [Case((rng.normal(size=(h, T, dh)).astype(dt),), label=dt.__name__)
                                              for dt in _DTYPES], rtol=0.0, atol=0.0)
    x = rng.normal(size=(d["B"], T, d["d_model"]))
    back = concat_heads(reference.split_heads(x, h))
    if not compare.unchanged(x, back):
        raise WrongAnswer("concat_heads(split_heads(x, n_heads)) does not give x back exactly; concat must undo "
                          "the split: swap the n_heads and T axes back, then reshape")


def _output_cases(rng, d):
    h, T, dh, dm = d["n_heads"], d["T"], d["d_head"], d["d_model"]
    W_O = rng.normal(size=(dm, dm)) / math.sqrt(dm)
    return [
        Case((rng.normal(size=(h, T, dh)), W_O), label="unbatched"),
        Case((rng.normal(size=(d["B"], h, T, dh)), W_O), label="batched"),
        Case((rng.normal(size=(d["B"], h, T, dh)).astype(np.float32), W_O.astype(np.float32)), label="float32"),
    ]


@hidden_test(uses=('output_projection',), helpers=('concat_heads',))
def output_projection_values(output_projection, concat_heads=None, split_heads=None):
    """Concat(heads) @ W_O, graded with the reference concat_heads bound in place of the learner's."""
    rng = rng_for("output_projection_values")
    d = _dims(rng)
    stand_ins = {"concat_heads": reference.concat_heads, "split_heads": reference.split_heads}
    against_reference("output_projection", output_projection, _output_cases(rng, d), rtol=1e-5, atol=1e-7, stand_ins=stand_ins,
          inspect=_INSPECT["output_projection"])
    h, T, dh, dm = d["n_heads"], d["T"], d["d_head"], d["d_model"]
    dtype_kept("output_projection", output_projection,
               [Case((rng.normal(size=(h, T, dh)).astype(dt), rng.normal(size=(dm, dm)).astype(dt)), label=dt.__name__)
                for dt in _DTYPES], stand_ins=stand_ins)


def _weights(rng, d_model, dtype=np.float64):
    return tuple((rng.normal(size=(d_model, d_model)) / math.sqrt(d_model)).astype(dtype) for _ in range(4))


@hidden_test(
    uses=('multi_head_attention',),
    helpers=('split_heads', 'concat_heads', 'output_projection', 'scaled_dot_product_attention', 'softmax'))
def mha_values(multi_head_attention, **learner_helpers):
    """The whole layer without a mask, with the reference helpers and attention bound in place."""
    rng = rng_for("mha_values")
    d = _dims(rng)
    T, dm, h, B = d["T"], d["d_model"], d["n_heads"], d["B"]
    cases = [
        Case((rng.normal(size=(T, dm)), *_weights(rng, dm), h), label="unbatched (T, d_model)"),
        Case((rng.normal(size=(B, T, dm)), *_weights(rng, dm), h), label="batched (B, T, d_model)"),
        Case((rng.normal(size=(B, T, dm)).astype(np.float32), *_weights(rng, dm, np.float32), h),
             label="float32"),
    ]
    against_reference(_MHA, multi_head_attention, cases, outputs=("out", "weights"), rtol=1e-4, atol=1e-6,
          stand_ins=_REFERENCE_HELPERS, inspect=_INSPECT[_MHA])
    dtype_kept(_MHA, multi_head_attention,
               [Case((rng.normal(size=(T, dm)).astype(dt), *_weights(rng, dm, dt), h),
                     label=f"unbatched, {dt.__name__}") for dt in _DTYPES],
               outputs=("out", "weights"), stand_ins=_REFERENCE_HELPERS)


@hidden_test(
    uses=('multi_head_attention',),
    helpers=('split_heads', 'concat_heads', 'output_projection', 'scaled_dot_product_attention', 'softmax'))
def mha_mask(multi_head_attention, **learner_helpers):
    """A (T, T) mask reaches every head; a causal mask; a (B, 1, T, T) per-example mask; a fully blocked query
    (all-zero weights)."""
    rng = rng_for("mha_mask")
    d = _dims(rng)
    T, dm, h, B = d["T"], d["d_model"], d["n_heads"], d["B"]
    causal = np.triu(np.ones((T, T), dtype=bool), k=1)
    cases = [
        Case((rng.normal(size=(T, dm)), *_weights(rng, dm), h), {"mask": random_mask(rng, (T, T))},
             label="unbatched, random (T, T) mask"),
        Case((rng.normal(size=(B, T, dm)), *_weights(rng, dm), h), {"mask": causal},
             label="batched, causal (T, T) mask"),
        Case((rng.normal(size=(B, T, dm)), *_weights(rng, dm), h), {"mask": random_mask(rng, (B, 1, T, T))},
             label="batched, per-example (B, 1, T, T) mask"),
        Case((rng.normal(size=(B, T, dm)), *_weights(rng, dm), h),
             {"mask": random_mask(rng, (B, 1, T, T), blocked_row=True)},
             label="batched, per-example mask, one query with every key blocked"),
    ]
    against_reference(_MHA, multi_head_attention, cases, outputs=("out", "weights"), rtol=1e-4, atol=1e-6,
          stand_ins=_REFERENCE_HELPERS, inspect=_INSPECT[_MHA])


def _passes(*args, **kwargs):
    """Run ``check``; None if it passes, else its message. A missing implementation is never excused."""
    try:
        against_reference(*args, **kwargs)
    except WrongAnswer as exc:
        if "not implemented yet" in str(exc):
            raise
        return str(exc)
    return None


@hidden_test(
    uses=('multi_head_attention',),
    helpers=('split_heads', 'concat_heads', 'output_projection', 'scaled_dot_product_attention', 'softmax'),
    together=('split_heads', 'concat_heads', 'output_projection'))
def mha_composition(multi_head_attention, split_heads=None, concat_heads=None, output_projection=None,
                    **lesson01):
    """The learner's own split_heads, concat_heads, output_projection and multi_head_attention together.

    Only lesson 01's attention is bound to the reference. A failure already charged by another test (a wrong
    helper, or a layer that is wrong even with the reference helpers) is reported but not charged again.
    """
    rng = rng_for("mha_composition")
    d = _dims(rng)
    T, dm, h, B = d["T"], d["d_model"], d["n_heads"], d["B"]
    x = rng.normal(size=(B, T, dm))
    W_Q, W_K, W_V, W_O = _weights(rng, dm)
    causal = np.triu(np.ones((T, T), dtype=bool), k=1)
    layer = [Case((x, W_Q, W_K, W_V, W_O, h), {"mask": causal}, label="batched, causal mask")]
    for name, fn in (("split_heads", split_heads), ("concat_heads", concat_heads),
                     ("output_projection", output_projection)):
        if not callable(fn):
            raise WrongAnswer(f"{name} is not defined: run its cell (and every cell above this one) first")

    charged_elsewhere = []
    why = _passes(_MHA, multi_head_attention, layer, outputs=("out", "weights"), rtol=1e-4, atol=1e-6,
                  stand_ins=_REFERENCE_HELPERS)
    if why:
        charged_elsewhere.append("multi_head_attention (its own tests)")
    Q = reference.split_heads(x @ W_Q, h)
    helper_checks = (
        ("split_heads", split_heads, [Case((x @ W_Q, h), label="x @ W_Q")], {}),
        ("concat_heads", concat_heads, [Case((Q,), label="heads")], {}),
        ("output_projection", output_projection, [Case((Q, W_O), label="heads, W_O")],
         {"concat_heads": reference.concat_heads, "split_heads": reference.split_heads}),
    )
    for name, fn, cases, stand_ins in helper_checks:
        if _passes(name, fn, cases, stand_ins=stand_ins, rtol=1e-6, atol=1e-9):
            charged_elsewhere.append(name)
    if charged_elsewhere:
        print("Composition not charged: " + ", ".join(charged_elsewhere) + " already lost points in its own "
              "test; fix that first, then this test checks your pieces together.")
        return
    why = _passes(_MHA, multi_head_attention, layer, outputs=("out", "weights"), rtol=1e-4, atol=1e-6,
                  stand_ins=_LESSON01)
    if why:
        raise WrongAnswer("split_heads, concat_heads, output_projection and multi_head_attention each pass on "
                          "their own, but multi_head_attention calling *your* helpers does not: check that it "
                          "calls them exactly as the contract says (split_heads(x, n_heads), concat_heads(x), "
                          f"output_projection(heads, W_O)). Details: {why}")
