"""Hidden tests of lesson 09 (a small GPT): a whole block's backward pass, the loss, sampling, generation, and the
tools that take a trained model apart.

One function per graded test cell, named by the cell's grade_id. Inputs are seeded random arrays whose sizes all
differ (B, T, d_model, d_ff, n_vocab), unbatched and batched, float64 and float32. Every other function of the lesson
stands in as the reference while a test runs (``checks/registry.py``), so a composite (``mlp_backward``,
``block_backward``, ``generate``) is graded for its own work only. None of these tests trains the lesson's model.

Sampling is graded by what it draws, not by which numbers: learners draw with ``rng.choice``, ``rng.random`` or
``rng.gumbel`` and all are right. ``sample_next`` is called thousands of times with one generator, in the kernel
through ``sample_probe`` (the lesson's self-check module: one call per draw through the grader would take seconds),
and its counts are tested against the reference's distribution: a draw outside the allowed tokens fails at once,
and a chi-square beyond its 1e-7 quantile fails (a correct sampler fails 1 time in 10 million). ``generate`` is
graded with the reference ``sample_next`` standing in: the same generator then gives the same tokens, which are
compared exactly.
"""

from __future__ import annotations

import math

import numpy as np

from autograder import course, reference
from autograder.checks import bug_match
from autograder.checks.registry import hidden_test
from autograder.checks.runner import Case, against_reference, call_learner, dtype_kept, rng_for
from autograder.checks.verdict import LearnerCall, WrongAnswer

_SIZES = (2, 3, 4, 5, 6, 7, 9)
MLP_GRADIENTS = ("x", "W_1", "b_1", "W_2", "b_2")
BLOCK_GRADIENTS = ("x", *reference.BLOCK_KEYS)


def _dims(rng):
    """B, T, d_model, d_ff: four different sizes (d_model even, so two heads split it)."""
    B, T, half, d_ff = (int(v) for v in rng.choice(_SIZES, size=4, replace=False))
    return {"B": B, "T": T, "d_model": 2 * half, "d_ff": d_ff}


def _cast(arrays, dtype):
    return tuple(a.astype(dtype) for a in arrays)


# ------------------------------------------------------------------------------------------------ layer norm
def _ln_inputs(rng, shape, constant_row=False):
    """x with rows of different means and spreads (one row constant: variance 0, where only eps keeps the division
    finite), gamma and beta away from 1 and 0."""
    x = rng.normal(size=shape) * rng.uniform(0.5, 3.0, size=(*shape[:-1], 1)) + rng.normal(size=(*shape[:-1], 1))
    if constant_row:
        x.reshape(-1, shape[-1])[0] = 1.5  # a view: the first row of every leading axis flattened
    return x, 1 + 0.5 * rng.normal(size=shape[-1]), 0.5 * rng.normal(size=shape[-1])


@hidden_test(uses=("layer_norm",), visible_check="check_layer_norm")
def layer_norm_values(layer_norm):
    """Unbatched and batched rows, one of them constant; eps given as another value; float32."""
    rng = rng_for("layer_norm_values")
    d = _dims(rng)
    cases = [Case(_ln_inputs(rng, (d["T"], d["d_model"])), label="unbatched (T, d_model)"),
             Case(_ln_inputs(rng, (d["B"], d["T"], d["d_model"]), constant_row=True),
                  label="batched (B, T, d_model), first row constant"),
             Case(_ln_inputs(rng, (d["T"], d["d_model"])), {"eps": 0.5}, label="eps=0.5")]
    against_reference("layer_norm", layer_norm, cases, rtol=1e-6, atol=1e-9)
    f32 = [Case(_cast(_ln_inputs(rng, (d["B"], d["T"], d["d_model"])), np.float32), label="float32")]
    against_reference("layer_norm", layer_norm, f32, rtol=1e-4, atol=1e-5)
    dtype_kept("layer_norm", layer_norm, [*f32, cases[0]])


def _ln_backward_case(rng, shape, dtype=np.float64, constant_row=False, eps=None, label=""):
    x, gamma, _ = _ln_inputs(rng, shape, constant_row)
    arrays = _cast((x, gamma, rng.normal(size=shape)), dtype)
    return Case(arrays, {} if eps is None else {"eps": eps}, label=label)


@hidden_test(uses=("layer_norm_backward",), visible_check="check_layer_norm_backward")
def layer_norm_backward_values(layer_norm_backward):
    """(grad_x, grad_gamma, grad_beta): unbatched, batched (B, T, d_model) with a constant row, another eps;
    float32."""
    rng = rng_for("layer_norm_backward_values")
    d = _dims(rng)
    outputs = ("grad_x", "grad_gamma", "grad_beta")
    cases = [_ln_backward_case(rng, (d["T"], d["d_model"]), label="unbatched (T, d_model)"),
             _ln_backward_case(rng, (d["B"], d["T"], d["d_model"]), constant_row=True,
                               label="batched (B, T, d_model), first row constant"),
             _ln_backward_case(rng, (d["T"], d["d_model"]), eps=0.5, label="eps=0.5")]
    against_reference("layer_norm_backward", layer_norm_backward, cases, outputs=outputs, rtol=1e-6, atol=1e-8)
    f32 = [_ln_backward_case(rng, (d["B"], d["T"], d["d_model"]), np.float32, label="float32")]
    against_reference("layer_norm_backward", layer_norm_backward, f32, outputs=outputs, rtol=1e-3, atol=1e-4)
    dtype_kept("layer_norm_backward", layer_norm_backward, [*f32, cases[0]], outputs=outputs)


# ------------------------------------------------------------------------------------------------------- MLP
@hidden_test(uses=("gelu_backward",), visible_check="check_gelu_backward")
def gelu_backward_values(gelu_backward):
    """x across GELU's bend (-4 to 4, and 0 exactly) and far out (+-12), batched; float32."""
    rng = rng_for("gelu_backward_values")
    d = _dims(rng)
    x = rng.uniform(-4, 4, size=(d["B"], d["T"], d["d_ff"]))
    x.reshape(-1)[:3] = (0.0, 12.0, -12.0)  # a view: the first three entries, whatever d_ff is
    cases = [Case((x, rng.normal(size=x.shape)), label="batched (B, T, d_ff), -4 to 4 and 0, 12, -12"),
             Case((x[0], rng.normal(size=x.shape[1:])), label="unbatched (T, d_ff)")]
    against_reference("gelu_backward", gelu_backward, cases, rtol=1e-7, atol=1e-10)
    f32 = [Case(_cast(cases[0].args, np.float32), label="float32")]
    against_reference("gelu_backward", gelu_backward, f32, rtol=1e-4, atol=1e-5)
    dtype_kept("gelu_backward", gelu_backward, [*f32, cases[0]])


def _mlp_case(rng, lead, d, dtype=np.float64, label=""):
    d_model, d_ff = d["d_model"], d["d_ff"]
    x = rng.normal(size=(*lead, d["T"], d_model))
    W_1, W_2 = rng.normal(size=(d_model, d_ff)) / math.sqrt(d_model), rng.normal(size=(d_ff, d_model)) / math.sqrt(d_ff)
    b_1, b_2 = 0.5 * rng.normal(size=d_ff), 0.5 * rng.normal(size=d_model)
    return Case(_cast((x, W_1, b_1, W_2, b_2, rng.normal(size=x.shape)), dtype), label=label)


@hidden_test(uses=("mlp_backward",), visible_check="check_mlp_backward")
def mlp_backward_values(mlp_backward):
    """The five gradients of the returned dict: unbatched, batched (B, T, d_model), float32; graded with the
    reference gelu_backward standing in."""
    rng = rng_for("mlp_backward_values")
    d = _dims(rng)
    cases = [_mlp_case(rng, (), d, label="unbatched (T, d_model)"),
             _mlp_case(rng, (d["B"],), d, label="batched (B, T, d_model)")]
    against_reference("mlp_backward", mlp_backward, cases, outputs=MLP_GRADIENTS, rtol=1e-6, atol=1e-9)
    f32 = [_mlp_case(rng, (d["B"],), d, np.float32, label="float32")]
    against_reference("mlp_backward", mlp_backward, f32, outputs=MLP_GRADIENTS, rtol=1e-3, atol=1e-4)
    dtype_kept("mlp_backward", mlp_backward, [*f32, cases[0]], outputs=MLP_GRADIENTS)


# ------------------------------------------------------------------------------------------------- the loss
def _ce_case(rng, shape, n_vocab, scale=2.0, dtype=np.float64, label=""):
    logits = rng.normal(size=(*shape, n_vocab)) * scale
    targets = rng.integers(0, n_vocab, size=shape)
    return Case((logits.astype(dtype), targets), label=label)


@hidden_test(uses=("cross_entropy",), visible_check="check_cross_entropy")
def cross_entropy_values(cross_entropy):
    """(loss, grad_logits): unbatched (T, n_vocab), batched (B, T, n_vocab), logits near 1000 (exp overflows
    unless the row's largest is subtracted first), a target 800 below its row's largest (its probability underflows
    to 0, so the log must come from the shifted logits, not from softmax), float32."""
    rng = rng_for("cross_entropy_values")
    d = _dims(rng)
    n_vocab = int(rng.integers(10, 30))
    big = _ce_case(rng, (d["T"],), n_vocab, scale=3.0, label="logits near 1000")
    big.args[0][...] += 1000.0
    far = _ce_case(rng, (d["T"],), n_vocab, label="a target 800 below its row's largest logit")
    far.args[0][0, far.args[1][0]] -= 800.0  # its probability underflows to 0: log(softmax) would give -inf
    cases = [_ce_case(rng, (d["T"],), n_vocab, label="unbatched (T, n_vocab)"),
             _ce_case(rng, (d["B"], d["T"]), n_vocab, label="batched (B, T, n_vocab)"), big, far]
    outputs = ("loss", "grad_logits")
    against_reference("cross_entropy", cross_entropy, cases, outputs=outputs, rtol=1e-7, atol=1e-10)
    f32 = [_ce_case(rng, (d["B"], d["T"]), n_vocab, dtype=np.float32, label="float32")]
    against_reference("cross_entropy", cross_entropy, f32, outputs=outputs, rtol=1e-4, atol=1e-6)
    dtype_kept("cross_entropy", cross_entropy, [*f32, cases[0]], outputs=outputs)


@hidden_test(uses=("embedding_backward",), visible_check="check_embedding_backward")
def embedding_backward_values(embedding_backward):
    """Tokens that repeat within a sequence and across the batch, some token kinds never seen; unbatched and
    batched; float32."""
    rng = rng_for("embedding_backward_values")
    d = _dims(rng)
    n_vocab = int(rng.integers(12, 20))
    cases = []
    for lead, dtype in (((), np.float64), ((d["B"],), np.float64), ((d["B"],), np.float32)):
        tokens = rng.integers(0, n_vocab // 2, size=(*lead, d["T"] + 3))  # half the kinds: many repeats
        tokens.reshape(-1)[:2] = tokens.reshape(-1)[2]  # the same token three times in a row, at least once
        grad_x = rng.normal(size=(*tokens.shape, d["d_model"])).astype(dtype)
        cases.append(Case((tokens, grad_x, n_vocab), label=f"{'batched' if lead else 'unbatched'}, repeated "
                                                           f"tokens, {np.dtype(dtype).name}"))
    against_reference("embedding_backward", embedding_backward, cases[:2], rtol=1e-9, atol=1e-12)
    against_reference("embedding_backward", embedding_backward, cases[2:], rtol=1e-5, atol=1e-6)
    dtype_kept("embedding_backward", embedding_backward, [cases[2], cases[0]])


# ---------------------------------------------------------------------------------------------------- block
def random_block(rng, d_model, d_ff, dtype=np.float64):
    """A block's arrays (BLOCK_KEYS), scaled as a trained block's are, so no branch drowns the others."""
    s = 1 / math.sqrt(d_model)
    block = {"gamma_1": 1 + 0.3 * rng.normal(size=d_model), "beta_1": 0.3 * rng.normal(size=d_model),
             "gamma_2": 1 + 0.3 * rng.normal(size=d_model), "beta_2": 0.3 * rng.normal(size=d_model),
             "W_1": rng.normal(size=(d_model, d_ff)) * s, "b_1": 0.3 * rng.normal(size=d_ff),
             "W_2": rng.normal(size=(d_ff, d_model)) / math.sqrt(d_ff), "b_2": 0.3 * rng.normal(size=d_model)}
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        block[name] = rng.normal(size=(d_model, d_model)) * s
    return {k: block[k].astype(dtype) for k in reference.BLOCK_KEYS}


def _block_case(rng, lead, d, n_heads, masked, dtype=np.float64):
    T, d_model = d["T"], d["d_model"]
    x = rng.normal(size=(*lead, T, d_model)).astype(dtype)
    mask = np.triu(np.ones((T, T), dtype=bool), k=1) if masked else None
    label = f"{'batched' if lead else 'unbatched'}, {'causal mask' if masked else 'no mask'}, {np.dtype(dtype).name}"
    return Case((x, random_block(rng, d_model, d["d_ff"], dtype), n_heads, rng.normal(size=x.shape).astype(dtype)),
                {"mask": mask} if masked else {}, label=label)


@hidden_test(uses=("block_backward",), visible_check="check_block_backward")
def block_backward_values(block_backward):
    """The thirteen gradients of the returned dict (x and each of the block's arrays): unbatched and batched, with
    and without the causal mask, float32. Graded with the reference layer-norm, MLP and attention backward passes
    standing in, so only the wiring is graded: where the stream splits, the gradients add."""
    rng = rng_for("block_backward_values")
    d = _dims(rng)
    n_heads = 2
    cases = [_block_case(rng, (), d, n_heads, False), _block_case(rng, (d["B"],), d, n_heads, True),
             _block_case(rng, (), d, n_heads, True)]
    against_reference("block_backward", block_backward, cases, outputs=BLOCK_GRADIENTS, rtol=1e-6, atol=1e-9)
    f32 = [_block_case(rng, (d["B"],), d, n_heads, True, np.float32)]
    against_reference("block_backward", block_backward, f32, outputs=BLOCK_GRADIENTS, rtol=2e-3, atol=2e-4)
    dtype_kept("block_backward", block_backward, [*f32, cases[0]], outputs=BLOCK_GRADIENTS)


# ------------------------------------------------------------------------------------------------- sampling
DRAWS = 1000  # per case: enough to see every catalogued bug, cheap enough for 200 grading salts
_QUANTILE_Z = 5.2  # the standard normal's 1 - 1e-7 quantile


def chi2_limit(df: int) -> float:
    """The chi-square distribution's 1 - 1e-7 quantile with ``df`` degrees of freedom (Wilson and Hilferty's
    approximation, within a few per cent here)."""
    h = 2.0 / (9 * df)
    return df * (1 - h + _QUANTILE_Z * math.sqrt(h)) ** 3


def chi2_beyond(counts, probabilities) -> tuple:
    """(statistic, limit) of Pearson's test of ``counts`` against ``probabilities``; tokens whose expected count is
    below 5 are pooled into one cell, as the test needs."""
    counts, expected = np.asarray(counts, dtype=np.float64), np.asarray(probabilities) * float(np.sum(counts))
    small = expected < 5
    cells_c = [*counts[~small], counts[small].sum()] if small.any() else list(counts)
    cells_e = [*expected[~small], expected[small].sum()] if small.any() else list(expected)
    cells = [(c, e) for c, e in zip(cells_c, cells_e) if e > 0]
    statistic = sum((c - e) ** 2 / e for c, e in cells)
    return statistic, chi2_limit(max(len(cells) - 1, 1))


def chi2_two_samples(a, b) -> tuple:
    """(statistic, limit) of the chi-square test that two samples of one size, counted per token, come from one
    distribution: sum of (a - b)^2 / (a + b) over the tokens either drew."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    seen = (a + b) > 0
    statistic = float(np.sum((a[seen] - b[seen]) ** 2 / (a[seen] + b[seen])))
    return statistic, chi2_limit(max(int(seen.sum()) - 1, 1))


def _probe():
    return course.import_selfcheck("selfcheck_09")


def _draws(sample_next, sample_probe, logits, seed, temperature, top_k, label, n=DRAWS):
    """n tokens from the learner's sample_next with one generator: in the kernel through its probe, or here."""
    case = Case((n, seed, logits, temperature, top_k), label=label)
    if isinstance(sample_next, LearnerCall):
        got = call_learner(sample_probe, case, "sample_next")
    else:
        got = call_learner(_probe().sample_probe_with(sample_next), case, "sample_next")
    if not isinstance(got, list) or len(got) != n:
        raise WrongAnswer(f"sample_next should return one token (an int) per call on input {label}")
    bad = [t for t in got if not isinstance(t, int) or isinstance(t, bool)]
    if bad:
        raise WrongAnswer(f"sample_next returned {bad[0]!r} ({type(bad[0]).__name__}) on input {label}: return one "
                          "token as an int (e.g. `int(rng.choice(n_vocab, p=p))`)")
    return got


def _sampling_cases(rng):
    """(logits, temperature, top_k, label, draws): logits spread widely enough that the kept tokens' probabilities
    differ clearly (so uniform draws over them are told apart); greedy needs fewer draws."""
    n_vocab = int(rng.integers(12, 24))

    def spread():  # evenly spaced 0.6 apart, shuffled, a little noise: no two logits close, whatever the salt
        return rng.permutation(np.arange(n_vocab) * 0.6 - 0.3 * n_vocab) + rng.uniform(-0.1, 0.1, size=n_vocab)

    logits = [spread() for _ in range(4)]
    return [(logits[0], 1.0, None, "temperature 1, no top-k", DRAWS),
            (logits[1], 0.5, None, "temperature 0.5", DRAWS),
            (logits[2], 1.7, 5, "temperature 1.7, top_k=5", DRAWS),
            (logits[3] - 40.0, 1.0, 3, "top_k=3, logits near -40", DRAWS),
            (logits[0], 0.0, None, "temperature 0 (greedy)", 200)]


def _sampling_bug(name, failed):
    """The catalogued sample_next bug whose own draws pass the same test on every input the learner's failed, when
    every bug that does has one diagnosis; else None. ``failed``: [(logits, temperature, top_k, counts)]."""

    def fits(bug) -> bool:
        wrong, draws_rng = bug.make(), np.random.default_rng(0)
        for logits, temperature, top_k, counts in failed:
            theirs = np.bincount([int(wrong(logits.copy(), draws_rng, temperature, top_k))
                                  for _ in range(int(counts.sum()))], minlength=len(logits))
            statistic, limit = chi2_two_samples(counts, theirs)
            if statistic > limit:
                return False
        return True

    return bug_match.agreed_fit(name, fits)


def _sampling_problem(counts, p, temperature, top_k):
    """What is wrong with the learner's counts against the distribution p (a phrase), or None."""
    outside = np.flatnonzero((counts > 0) & (p == 0))
    if outside.size:
        allowed = ("the largest logit" if temperature == 0 else f"among the {top_k} largest logits" if top_k
                   else "a token of probability above 0")
        return f"drew token {int(outside[0])} ({int(counts[outside[0]])} times), which is not {allowed}"
    statistic, limit = chi2_beyond(counts, p)
    if statistic <= limit:
        return None
    return ("drew tokens with frequencies that do not fit softmax(logits / temperature)"
            + (f" over the {top_k} largest" if top_k else "") + f" (chi-square {statistic:.0f}, more than "
            f"{limit:.0f}: a right sampler goes that far 1 time in 10 million)")


@hidden_test(uses=("sample_next",), helpers=("sample_probe",), visible_check="check_sample_next")
def sample_next_values(sample_next, sample_probe=None):
    """1000 draws on each input (200 greedy ones): never a token outside the top k (or other than the largest, at
    temperature 0), frequencies within the chi-square test's 1e-7 quantile of softmax(logits / temperature) over
    the top k, and the same draws again from a generator seeded alike (randomness from ``rng`` only). A bug is
    named from every input the learner's draws failed on."""
    rng = rng_for("sample_next_values")
    seed = int(rng.integers(2 ** 31))
    cases = _sampling_cases(rng)
    first, failed, problem = {}, [], None
    for logits, temperature, top_k, label, n in cases:
        draws = first[label] = _draws(sample_next, sample_probe, logits, seed, temperature, top_k, label, n)
        n_vocab = len(logits)
        if any(not 0 <= t < n_vocab for t in draws):
            raise WrongAnswer(f"sample_next returned a token outside 0 .. {n_vocab - 1} on input {label}")
        counts = np.bincount(draws, minlength=n_vocab)
        what = _sampling_problem(counts, reference.next_token_probabilities(logits, temperature, top_k), temperature,
                                 top_k)
        if what is not None:
            failed.append((logits, temperature, top_k, counts))
            problem = problem or (label, n, what)
    if problem is not None:
        label, n, what = problem
        bug = _sampling_bug("sample_next", failed[:2])  # two inputs tell the catalogue's bugs apart
        if bug is not None:
            raise WrongAnswer.naming(bug, f"on input {label}: it {what}")
        raise WrongAnswer(f"sample_next {what}, on input {label} ({n} draws)", uncatalogued=True)
    logits, temperature, top_k, label, _ = cases[2]
    if _draws(sample_next, sample_probe, logits, seed, temperature, top_k, label, 200) != first[label][:200]:
        raise WrongAnswer("sample_next drew different tokens from two generators seeded alike: draw only from the "
                          "`rng` it is given (rng.choice, rng.random), never from np.random's global functions",
                          uncatalogued=True)


# --------------------------------------------------------------------------------------------------- generate
def random_model(rng, n_vocab, d_model, d_ff, n_blocks, T_max, dtype=np.float64):
    """A small GPT's parameters as the lesson lays them out, scaled so that the logits spread over a few units."""
    return {"E": (2 * rng.normal(size=(n_vocab, d_model))).astype(dtype),  # the current token weighs most
            "P": (0.5 * rng.normal(size=(T_max, d_model))).astype(dtype),
            "blocks": [random_block(rng, d_model, d_ff, dtype) for _ in range(n_blocks)],
            "gamma_f": (1 + 0.3 * rng.normal(size=d_model)).astype(dtype),
            "beta_f": np.zeros(d_model, dtype=dtype),  # a shift here favours one token everywhere: none
            "W_U": (rng.normal(size=(d_model, n_vocab)) * 4 / math.sqrt(d_model)).astype(dtype)}


def _telling_prompt(rng, params, n_heads, n_vocab):
    """A prompt of different tokens after which the model's likeliest next token depends on the whole prompt: it
    differs from the one after its first token alone and after its last token alone, so a loop that loses the
    prompt's context (or the cache) shows it at the first new token."""
    for _ in range(200):
        prompt = [int(t) for t in rng.choice(n_vocab, size=int(rng.integers(4, 7)), replace=False)]
        likeliest = [int(np.argmax(reference.gpt_logits(params, n_heads, np.array(p))[-1]))
                     for p in (prompt, prompt[:1], prompt[-1:])]
        if likeliest[0] not in likeliest[1:]:
            return prompt
    return prompt


@hidden_test(uses=("generate",), visible_check="check_generate", forbids=("gpt_logits", "block_forward"),
             because="generation reads the KV cache through model_step, never recomputing the whole model")
def generate_values(generate):
    """Greedy (temperature 0) and sampled (temperature 0.8; 1.2 with top_k=3) generation, each from two prompts of
    several different tokens (``_telling_prompt``) and from one's last token alone, up to the model's last position; graded with the reference sample_next, model_step and empty_cache
    standing in, so the same generator gives the same tokens: the list (prompt, then the new tokens) must equal
    the reference's exactly."""
    rng = rng_for("generate_values")
    n_vocab, T_max = int(rng.integers(11, 17)), int(rng.integers(14, 20))
    params = random_model(rng, n_vocab, 16, 12, 2, T_max)
    n_heads = 2
    prompts = [_telling_prompt(rng, params, n_heads, n_vocab) for _ in range(2)]
    settings = [({"temperature": 0.0}, "greedy"), ({"temperature": 0.8}, "temperature 0.8"),
                ({"temperature": 1.2, "top_k": 3}, "temperature 1.2, top_k=3")]
    runs = []  # each setting from two whole prompts and from one's last token, to the model's last position
    for kwargs, label in settings:
        for part in (*prompts, prompts[0][-1:]):
            runs.append(((params, n_heads, part, T_max - len(part)), kwargs, label))
    observed, problem = [], None
    for args, kwargs, label in runs:
        seed = int(rng.integers(2 ** 31))
        case = Case((*args, np.random.default_rng(seed)), kwargs,
                    label=f"{label}, prompt of {len(args[2])}, n_new={args[3]}")
        expected = reference.generate(*args, np.random.default_rng(seed), **kwargs)
        got = call_learner(generate, case, "generate")
        got = [int(t) for t in got] if isinstance(got, (list, tuple, np.ndarray)) else got
        observed.append((args, kwargs, seed, got))
        if got != expected and problem is None:
            problem = (case, got, expected)
    if problem is None:
        return
    case, got, expected = problem

    def same(bug) -> bool:  # the bug gives the learner's tokens on every run
        return all([int(t) for t in bug.make()(*args, np.random.default_rng(seed), **kwargs)] == tokens
                   for args, kwargs, seed, tokens in observed)

    bug = bug_match.agreed_fit("generate", same)
    if bug is not None:
        raise WrongAnswer.naming(bug, f"on input {case.describe()}")
    raise WrongAnswer(f"generate returned {got} on input {case.describe()}; expected {expected} (the prompt, then "
                      f"{len(expected) - len(case.args[2])} new tokens)", uncatalogued=True)


# ------------------------------------------------------------------------------------------------ take apart
@hidden_test(uses=("ablate_head",), visible_check="check_ablate_head")
def ablate_head_values(ablate_head):
    """Unbatched and batched concatenated heads, first, middle and last head, float32; the caller's array is
    unchanged."""
    rng = rng_for("ablate_head_values")
    d = _dims(rng)
    n_heads, d_head = 3, int(rng.choice((2, 4, 5)))  # d_head differs from n_heads: no slice of one fits the other
    d_model = n_heads * d_head
    cases = [Case((rng.normal(size=(d["T"], d_model)), n_heads, 0), label="unbatched, head 0"),
             Case((rng.normal(size=(d["B"], d["T"], d_model)), n_heads, 1), label="batched, head 1"),
             Case((rng.normal(size=(d["B"], 2, d["T"], d_model)), n_heads, 2), label="(B, 2, T, d_model), last head")]
    against_reference("ablate_head", ablate_head, cases, rtol=0, atol=0)
    f32 = [Case((rng.normal(size=(d["B"], d["T"], d_model)).astype(np.float32), n_heads, 1), label="float32")]
    dtype_kept("ablate_head", ablate_head, [*f32, cases[0]], rtol=0, atol=0)


@hidden_test(uses=("k_composition",), visible_check="check_k_composition")
def k_composition_values(k_composition):
    """Random layers with two, three and four heads (d_model different from every head count), and one layer whose
    head 1 reads, in its keys, exactly what head 0 of the layer before writes."""
    rng = rng_for("k_composition_values")
    cases = []
    for n_heads, d_head in ((2, 3), (3, 2), (4, 3)):
        d_model = n_heads * d_head
        Ws = [rng.normal(size=(d_model, d_model)) / math.sqrt(d_model) for _ in range(4)]
        cases.append(Case(tuple(Ws), {"n_heads": n_heads}, label=f"random, n_heads={n_heads}, d_model={d_model}"))
    W_Q, W_K, W_V, W_O = (rng.normal(size=(6, 6)) for _ in range(4))
    W_K[:, 2:4] = (W_V[:, 0:2] @ W_O[0:2, :]).T @ rng.normal(size=(6, 2))  # head 1's keys read head 0's output
    cases.append(Case((W_Q, W_K, W_V, W_O), {"n_heads": 3}, label="head 1 reading head 0 of the layer before"))
    against_reference("k_composition", k_composition, cases, rtol=1e-6, atol=1e-9)
