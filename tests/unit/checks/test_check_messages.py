"""What the hidden and visible checks say: a bug is named only when it alone reproduces every case; numpy's shape
errors come with a sentence on what they usually mean. No kernel: the checks are called directly."""

import math
import sys

import numpy as np
import pytest

from autograder import bugs, course, reference
from autograder.checks import lesson01, runner


def _case(rng, T_q, T_k, d_k, d_v, lead=()):
    return runner.Case(tuple(rng.normal(size=(*lead, *shape)) for shape in ((T_q, d_k), (T_k, d_k), (T_k, d_v))))


def test_two_bugs_that_agree_on_every_case_are_not_named():
    """d_k = 2 and T_k = 4: dividing by d_k and by sqrt(T_k) give the same numbers; a second size tells them apart."""
    rng = np.random.default_rng(0)
    wrong = bugs.by_id("attention_scaled_by_seq_len").make()
    labels = ("out", "weights")
    alike = _case(rng, 3, 4, 2, 5)
    observed = [(alike, wrong(*alike.args), None)]
    assert runner.matching_bug("scaled_dot_product_attention", observed, labels, rtol=1e-6, atol=1e-9) is None
    other = _case(rng, 3, 7, 3, 5)
    observed.append((other, wrong(*other.args), None))
    named = runner.matching_bug("scaled_dot_product_attention", observed, labels, rtol=1e-6, atol=1e-9)
    assert named is not None and named.id == "attention_scaled_by_seq_len"


def test_k_transposed_from_the_front_is_named_by_what_it_does(monkeypatch):
    """K.T and K.swapaxes(0, 1) behave alike on every case (right unbatched, a ValueError on every batch), so both
    get the diagnosis of attention_K_T, which names both."""
    monkeypatch.setenv("MHA_GRADING_SALT", "1")
    with pytest.raises(runner.WrongAnswer, match=r"reverses \*all\* its axes.*\[attention_K_T\]"):
        lesson01.attention_values(bugs.by_id("attention_K_T").make())

    def swapped_front(Q, K, V, mask=None):  # right for one sequence only: K.swapaxes(0, 1)
        scores = Q @ K.swapaxes(0, 1) / np.sqrt(Q.shape[-1]).item()
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights = weights / weights.sum(-1, keepdims=True)
        return weights @ V, weights

    with pytest.raises(runner.WrongAnswer, match=r"swapaxes\(0, 1\).*\[attention_K_T\]"):
        lesson01.attention_values(swapped_front)


def _toy_cases(rng):
    """Two unbatched cases, then two batched ones, of a function no catalogued bug belongs to."""
    return [runner.Case((rng.normal(size=lead + (3, 4)),), label=f"{len(lead)} batch axes")
            for lead in ((), (), (2,), (5,))]


def _fails_on(batched_only):
    def toy(x):
        if x.ndim > 2 or not batched_only:
            return x @ x  # (3, 4) @ (3, 4): the shapes do not fit
        return x * 2
    return toy


@pytest.mark.parametrize("batched_only", [True, False])
def test_the_batch_axis_hint_comes_only_when_fewer_axes_passed(batched_only):
    """".T reverses all axes ... fails on a batch" is said only when the function gave right results on input with
    fewer axes; a function that fails on one sequence as well hears only that two shapes do not fit."""
    rng = np.random.default_rng(0)
    with pytest.raises(runner.WrongAnswer) as err:
        runner.against_reference("toy", _fails_on(batched_only), _toy_cases(rng), ref=lambda x: x * 2)
    said = str(err.value).split("Where")[0]
    assert "raised ValueError" in said and "do not fit" in said
    assert ("Count axes from the end" in said) is batched_only, said


def test_an_error_names_a_bug_by_behaviour_never_by_its_text(monkeypatch):
    """dK computed as dS @ Q and dV as weights @ grad_out raise the same ValueError, word for word, wherever
    T_q != T_k; where T_q = T_k their values differ, and each gets its own diagnosis."""
    from autograder.checks import lesson07

    for salt in ("0", "1"):
        monkeypatch.setenv("MHA_GRADING_SALT", salt)
        for bug_id in ("attention_backward_dk_untransposed", "attention_backward_dv_untransposed"):
            with pytest.raises(runner.WrongAnswer) as err:
                lesson07.attention_backward_values(bugs.by_id(bug_id).make())
            assert err.value.bug_id == bug_id and "raised ValueError" in str(err.value), str(err.value)


def test_a_function_that_raises_on_every_case_is_named_by_no_bug():
    """softmax without keepdims raises a ValueError on every 2-D input; a softmax that raises a ValueError of its
    own on every input behaves alike there, and is still not that bug: errors alone name nothing."""
    def raising(x, axis=-1):
        raise ValueError("operands could not be broadcast together")

    rng = np.random.default_rng(0)
    cases = [runner.Case((rng.normal(size=shape),), label=str(shape)) for shape in ((3, 5), (4, 2), (6, 7))]
    no_keepdims = bugs.by_id("softmax_no_keepdims").make()
    for fn in (raising, no_keepdims):
        with pytest.raises(runner.WrongAnswer) as err:
            runner.against_reference("softmax", fn, cases)
        assert err.value.bug_id is None and "[" not in str(err.value).split("Where")[0], str(err.value)
    with pytest.raises(runner.WrongAnswer) as err:  # one 1-D case, where it returns, and it is named
        runner.against_reference("softmax", no_keepdims, [*cases, runner.Case((rng.normal(size=4),), label="1-D")])
    assert err.value.bug_id == "softmax_no_keepdims"


def test_an_error_alone_names_no_bug():
    """One call that raises is too little to name a bug by: numpy words the error alike for several mistakes."""
    rng = np.random.default_rng(0)
    case = runner.Case(tuple(rng.normal(size=s) for s in ((3, 2), (4, 2), (4, 5), (3, 4), (3, 5))))
    with pytest.raises(runner.WrongAnswer) as err:
        runner.call_learner(bugs.by_id("attention_backward_dv_untransposed").make(), case,
                            "scaled_dot_product_attention_backward")
    assert err.value.bug_id is None and "[" not in str(err.value).split("Where")[0]


def test_a_self_check_explains_numpy_shape_errors():
    sys.path.insert(0, str(course.SOLUTIONS))
    try:
        import selfcheck_01
        import selfcheck_common

        def k_dot_T(Q, K, V, mask=None):
            return bugs.by_id("attention_K_T").make()(Q, K, V, mask)

        with pytest.raises(selfcheck_common.SelfCheckFailed, match="count axes from the end"):
            selfcheck_01.check_attention_mask(k_dot_T)
    finally:
        sys.path.remove(str(course.SOLUTIONS))


@pytest.mark.parametrize("bug_id, batch_hint", [("attention_backward_dot_T", True),
                                                ("attention_backward_dv_untransposed", False)])
def test_a_self_check_says_the_batch_is_the_problem_only_when_one_sequence_runs(bug_id, batch_hint):
    """.T fails only on a batch: the self-check says so. dV untransposed fails on one sequence already: it hears
    only that two shapes do not fit."""
    selfcheck_07 = course.import_selfcheck("selfcheck_07")
    import selfcheck_common

    with pytest.raises(selfcheck_common.SelfCheckFailed) as err:
        selfcheck_07.check_attention_backward(bugs.by_id(bug_id).make())
    assert "do not fit" in str(err.value)
    assert ("count axes from the end" in str(err.value)) is batch_hint, str(err.value)


_UPSTREAM = [b for f in ("softmax_backward", "scaled_dot_product_attention_backward") for b in bugs.for_function(f)]


@pytest.mark.parametrize("bug", _UPSTREAM, ids=[b.id for b in _UPSTREAM])
def test_the_multi_head_backward_check_names_the_wrong_function_it_calls(bug):
    """A right multi_head_attention_backward that calls a catalogued wrong softmax or attention backward: its
    self-check names that function (the one to fix) instead of a multi-head step. It passes only where the bug
    leaves the layer's gradients right."""
    import contextlib
    import io

    from autograder.course import answers
    from autograder.proofs import placements

    cells = answers.model_answers("07_heads_that_learn")  # the model answers, the bug in its function's place
    where = placements.defining_cells(cells)[bug.function]
    cells[where] = placements.replace_function(cells[where], bug.function, bug.source)
    notebook = {"np": np, "math": math, **{n: getattr(reference, n) for n in reference.__all__}}
    for gid, source in cells.items():
        if gid in placements.defining_cells({gid: source}).values():
            exec(compile(source, f"<{gid}>", "exec"), notebook)
    mha_backward = notebook["multi_head_attention_backward"]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            course.import_selfcheck("selfcheck_07").check_mha_backward(mha_backward, notebook["multi_head_attention"])
    except AssertionError as exc:
        assert str(exc).startswith(f"This comes from your `{bug.function}`, which multi_head_attention_backward "
                                   "calls"), str(exc)
    else:
        rng = np.random.default_rng(0)
        x, *Ws = (rng.normal(size=s) for s in ((2, 5, 6), (6, 6), (6, 6), (6, 6), (6, 6)))
        causal = np.triu(np.ones((5, 5), dtype=bool), k=1)
        got = mha_backward(x, *Ws, 3, np.ones_like(x), causal)
        right = reference.multi_head_attention_backward(x, *Ws, 3, np.ones_like(x), causal)
        assert all(np.allclose(got[k], right[k]) for k in right), f"{bug.id} passed the check with wrong gradients"


def test_a_hidden_test_says_nothing_of_a_batch_axis_when_one_sequence_fails(monkeypatch):
    """Lesson 07's attention backward with dQ = dS @ K.T (no catalogued bug does this) fails on one sequence
    already: the message says that two shapes do not fit, and nothing of batch axes."""
    from autograder.checks import lesson07

    def dq_with_K_T(Q, K, V, weights, grad_out, mask=None):
        scale = 1.0 / math.sqrt(Q.shape[-1])
        grad_scores = reference.softmax_backward(weights, grad_out @ np.swapaxes(V, -1, -2))  # (..., T_q, T_k)
        return (grad_scores @ K.T * scale, np.swapaxes(grad_scores, -1, -2) @ Q * scale,
                np.swapaxes(weights, -1, -2) @ grad_out)

    monkeypatch.setenv("MHA_GRADING_SALT", "0")
    with pytest.raises(runner.WrongAnswer) as err:
        lesson07.attention_backward_values(dq_with_K_T)
    said = str(err.value).split("Where")[0]
    assert "raised ValueError" in said and "do not fit" in said, said
    assert "Count axes from the end" not in said and "[" not in said, said


def test_the_multi_head_backward_check_of_an_untouched_notebook_says_not_implemented():
    notebook = {}
    exec("def softmax_backward(weights, grad_weights, axis=-1):\n    raise NotImplementedError()\n"
         "def scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None):\n"
         "    raise NotImplementedError()\n"
         "def multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None):\n"
         "    raise NotImplementedError()\n", notebook)
    with pytest.raises(NotImplementedError, match="^multi_head_attention_backward is not implemented yet"):
        course.import_selfcheck("selfcheck_07").check_mha_backward(notebook["multi_head_attention_backward"],
                                                                reference.multi_head_attention)


def test_a_self_check_names_the_stub_a_function_calls():
    """Lesson 05's given masked_attention calls the paste cell's softmax: while that is still the stub, the check
    says so (and the function itself is not called a stub)."""
    notebook = {"np": np, "math": math}
    exec("def softmax(x, axis=-1):\n    raise NotImplementedError()\n", notebook)
    exec(bugs.by_id("masked_attention_as_given").source, notebook)
    with pytest.raises(AssertionError, match="masked_attention calls `softmax`, which is not implemented yet"):
        course.import_selfcheck("selfcheck_05").check_masked_attention(notebook["masked_attention"])


def test_every_mask_of_lesson_07s_backward_tests_blocks_a_pair_and_leaves_each_query_a_key():
    """With T_q, T_k as small as 2, a random mask can block nothing; a backward pass that ignores the mask
    (attention_backward_unmasked_weights) then passed for 16 grading salts in 20,000."""
    from autograder.checks import lesson07

    for seed in range(3000):
        rng = np.random.default_rng(seed)
        T_q, T_k = (int(v) for v in rng.choice(lesson07._SIZES, 2))
        mask = lesson07._mask(rng, T_q, T_k)
        assert mask.shape == (T_q, T_k) and mask.any() and not mask.all(axis=-1).any(), (seed, mask)


def test_a_result_right_only_to_float32_s_precision_is_told_its_dtype_never_got_x_expected_x():
    """Lesson 08's alibi_bias in float32 once read "got -2.12132, expected -2.12132" with no word of its dtype."""
    import numpy as np

    from autograder.checks import compare

    expected = np.array([[-2.1213203435596424, -0.5], [0.0, -1.4142135623730951]])
    said = compare.mismatch(expected.astype(np.float32), expected, rtol=1e-12, atol=1e-12, what="alibi_bias")
    assert said.startswith("alibi_bias has dtype float32, expected float64")
    close = compare.mismatch(expected + 1e-9, expected, rtol=1e-12, atol=1e-12, what="alibi_bias")
    got, wanted = close.split("(got ")[1].rstrip(")").split(", expected ")
    assert got != wanted, close


def test_an_mla_on_split_half_rope_fails_its_self_check():
    """With d_rope = 2 (one pair) both RoPE layouts agree: a split-half MLA got a tick from its self-check, then
    lost 3/3 in grading."""
    from autograder import reference
    from autograder.course import answers, import_selfcheck
    from autograder.proofs import salt_sweep

    lesson = "08_todays_models"
    ns = dict(salt_sweep.model_namespace(lesson))
    ns["rope"] = lambda x, positions, base=10000.0, interleaved=True: reference.rope(x, positions, base,
                                                                                     interleaved=False)
    exec(answers.model_answers(lesson)["mla"], ns)
    with pytest.raises(AssertionError, match="rotary parts"):
        import_selfcheck("selfcheck_08").check_mla_attention(ns["mla_attention"])


@pytest.mark.slow
def test_no_self_check_blames_a_correct_caller_for_a_catalogued_bug_of_its_callee():
    """Every visible catalogued bug of a function, against every other self-check of its lesson: one that fails
    names the wrong function (a softmax_backward bug once made the attention-backward check say "dQ disagrees ...
    check which axes you swap", a concat_heads bug the output_projection check "do not sum or average them")."""
    from autograder import bugs
    from autograder.proofs import mutation

    found = {b.id: mutation.misblamed(b) for b in bugs.CATALOG if b.visible}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_blame_proof_can_fail():
    """Without the lesson's declarations of its functions (selfcheck_common.own), a softmax_backward bug is blamed
    on the attention backward pass."""
    from autograder import bugs
    from autograder.course import import_selfcheck
    from autograder.proofs import mutation

    common = import_selfcheck("selfcheck_common")
    saved = dict(common._OWN)
    common._OWN.clear()
    try:
        found = mutation.misblamed(bugs.by_id("softmax_backward_global_sum"))
    finally:
        common._OWN.update(saved)
    assert "check_attention_backward" in [check for check, _ in found]
    assert mutation.misblamed(bugs.by_id("softmax_backward_global_sum")) == []


def test_a_split_half_rope_that_turns_clockwise_is_told_so_not_that_its_columns_are_paired_wrong():
    import numpy as np

    from autograder import reference
    from autograder.course import import_selfcheck

    def clockwise_split_half(x, positions, base=10000.0, interleaved=True):
        return reference.rope(x, positions if interleaved else -np.asarray(positions), base, interleaved)

    with pytest.raises(AssertionError, match="interleaved=False, column pair 0 .* turned clockwise"):
        import_selfcheck("selfcheck_08").check_rope(clockwise_split_half)
