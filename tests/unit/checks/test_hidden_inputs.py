"""Every input a hidden test sends is one the lesson's contract allows, at every grading salt: a correct function
that checks its input (and raises on what the lesson rules out) must never lose points to an impossible input.
The contracts: ``autograder/checks/contracts.py``; the sweep: ``salt_sweep.contract_sweep``."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from autograder import course
from autograder.checks import contracts, lesson08, registry
from autograder.checks.runner import rng_for
from autograder.proofs import salt_sweep
from autograder.proofs.salt_sweep import grading_salt

SALTS = range(200)
QUICK_SALTS = range(2)  # the inner loop; the slow test takes all 200


def _graded_functions() -> dict:
    """{name: (lesson, the model answer)} of every function a hidden test grades."""
    found = {}
    for lesson in course.lesson_names():
        values = salt_sweep.model_namespace(lesson)
        for test in registry.tests_of(lesson).values():
            for name in test.uses:
                if callable(values.get(name)) and not isinstance(values[name], type):
                    found.setdefault(name, (lesson, values[name]))
    return found


def test_every_graded_function_has_a_contract_with_its_own_parameters():
    graded = _graded_functions()
    assert set(graded) == contracts.GRADED, set(graded) ^ contracts.GRADED
    for name, (lesson, fn) in graded.items():
        contract = contracts.of(name)
        assert contract is not None, name
        assert list(inspect.signature(contract).parameters)[:len(inspect.signature(fn).parameters)] == \
            list(inspect.signature(fn).parameters), (name, lesson)


def test_every_graded_function_states_its_contract_in_its_docstring():
    """The learner reads the contract where the function is written; the contract the sweep checks is the same text."""
    for name, (lesson, fn) in _graded_functions().items():
        if name == "exercise_512":
            continue  # it takes no arguments
        stated = " ".join((fn.__doc__ or "").split())
        assert "Contract: " + " ".join(contracts.of(name).__doc__.split()) in stated, (lesson, name, stated)


def _rng():
    return np.random.default_rng(0)


def _layer(d_model=8, n_heads=2, kv=8, T=3, dtype=np.float64):
    r = _rng()
    return (r.normal(size=(T, d_model)).astype(dtype), *(r.normal(size=s).astype(dtype) for s in
            ((d_model, d_model), (d_model, kv), (d_model, kv), (d_model, d_model))), n_heads)


def _mla(T=4, d_rope=2):
    """x (T, 6) and MLA's weights for 2 heads of d_head 4, d_c 5."""
    r = _rng()
    x = r.normal(size=(T, 6))
    W = {"W_DKV": (6, 5), "W_UK": (5, 8), "W_UV": (5, 8), "W_KR": (6, d_rope), "W_Q": (6, 8), "W_QR": (6, 2 * d_rope),
         "W_O": (8, 6)}
    W = {k: r.normal(size=s) for k, s in W.items()}
    return x, W


# One call per contract that the lesson rules out (and the clause it breaks).
A = np.ones((3, 4))
BROKEN = {
    "softmax": lambda: ((np.array([1, 2, 3]),), "float32 or float64"),
    "scaled_dot_product_attention": lambda: ((A, np.ones((3, 5)), A), "one d_k"),
    "split_heads": lambda: ((A, 0), "n_heads must be an integer >= 1"),
    "concat_heads": lambda: ((A,), "at least 3 axes"),
    "output_projection": lambda: ((np.ones((2, 3, 4)), np.ones((7, 5))), "rows"),
    "multi_head_attention": lambda: ((*_layer(), np.ones((3, 3))), "bool"),
    "mha_param_count": lambda: ((8, 2, "no"), "True or False"),
    "gqa_param_count": lambda: ((12, 6, 4), "n_kv_heads must divide n_heads"),
    "kv_cache_bytes_per_token": lambda: ((2, 0, 4), "n_kv_heads must be an integer"),
    "exercise_512": None,
    "multi_head_scores": lambda: ((*_layer()[:3], 3), "n_heads must divide d_model"),
    "dot_product_std": lambda: ((4, 100, True, 0), "Generator"),
    "split_into_heads": lambda: ((A, 3), "n_heads must divide d_model"),
    "merge_heads": lambda: ((A,), "at least 3 axes"),
    "head_weights": lambda: ((A, np.ones((4, 4)), np.ones((4, 3)), 2), "W_K must be (4, 4)"),
    "mha_from_scratch": lambda: ((*_layer(n_heads=3),), "n_heads must divide d_model"),
    "masked_attention": lambda: ((A, A, A, None), "mask is required"),
    "attention_layer": lambda: ((*_layer(dtype=np.float32)[:4], _layer()[4], 2), "share one dtype"),
    "repeat_kv": lambda: ((np.ones((2, 3, 4)), 0), "n_rep must be an integer"),
    "grouped_query_attention": lambda: ((*_layer(d_model=12, kv=8, n_heads=3), 2), "n_kv_heads must divide n_heads"),
    "causal_mask": lambda: ((4, "tril"), "convention must be one of"),
    "causal_self_attention": lambda: ((*_layer(kv=6), 1), "W_K must be (8, 4)"),
    "kv_cache_append": lambda: ((np.ones((2, 3, 4)), np.ones((2, 3, 4)), np.ones((3, 1, 4)), np.ones((3, 1, 4))),
                                "every axis but time"),
    "decode_step": lambda: ((_layer()[0][:1], np.ones((1, 3, 5)), np.ones((1, 3, 5)), *_layer(kv=4)[1:], 1),
                            "the caches must be"),
    "decode_with_kv_cache": lambda: ((*_layer(kv=4), 3), "n_kv_heads must divide n_heads"),
    "tiled_attention": lambda: ((A, A, A, 0), "block_size must be an integer >= 1"),
    "cross_attention": lambda: ((_layer()[0], *_layer(T=5), np.ones((2, 3, 3), dtype=bool)), "must broadcast"),
    "softmax_jacobian": lambda: ((np.array([0.5, 0.6]),), "summing to 1"),
    "softmax_backward": lambda: ((np.ones((2, 3)) / 3, np.ones((3, 2))), "share a shape"),
    "attention_row_backward": lambda: ((np.ones(4), A, A, np.ones(3)), "shapes must agree"),
    "scaled_dot_product_attention_backward": lambda: ((A, A, A, np.ones((3, 2)), A), "weights must be"),
    "multi_head_attention_backward": lambda: ((*_layer(), np.ones((3, 7))), "grad_out must have x's shape"),
    "gradient_check": lambda: ((np.sum, [A], [A], 0.0), "eps must be positive"),
    "sinusoidal_positions": lambda: ((10, 7), "d_model must be even"),
    "rope": lambda: ((A, np.array([0.0, 1.0, 2.0])), "whole numbers"),
    "alibi_bias": lambda: ((0, 4), "n_heads must be an integer"),
    "sliding_window_mask": lambda: ((4, 0), "window must be an integer"),
    "streaming_decode": lambda: ((*_layer(kv=4), 1, -1, 2), "n_sink must be an integer >= 0"),
    "mla_attention": lambda: ((_mla(d_rope=3)[0], *_mla(d_rope=3)[1].values(), 2), "d_rope must be even"),
    "mla_absorbed": lambda: ((_mla()[0], np.ones((3, 5)), np.ones((3, 2)),
                              *(_mla()[1][k] for k in ("W_UK", "W_UV", "W_Q", "W_QR", "W_O")), 2),
                             "more than the cache"),
    "kv_cache_elements_per_token": lambda: (({"attention": "GQA", "n_layers": 2, "n_heads": 11, "d_head": 4,
                                              "n_kv_heads": 3},), "n_kv_heads must divide n_heads"),
    "layer_norm": lambda: ((A, np.ones(3), np.zeros(4)), "gamma must be (d_model,)"),
    "layer_norm_backward": lambda: ((A, np.ones(4), np.ones((3, 5))), "grad_out must have x's shape"),
    "gelu_backward": lambda: ((A, A.astype(np.float32)), "share one dtype"),
    "mlp_backward": lambda: ((A, np.ones((4, 6)), np.ones(5), np.ones((6, 4)), np.ones(4), A), "b_1 must be"),
    "cross_entropy": lambda: ((A, np.array([0, 1, 4])), "in 0 .. n_vocab - 1"),
    "embedding_backward": lambda: ((np.array([0, 1]), np.ones((2, 3)), 0), "n_vocab must be an integer >= 1"),
    "block_backward": lambda: ((np.ones((3, 4)), {"W_Q": A}, 2, np.ones((3, 4))), "block must hold exactly"),
    "sample_next": lambda: ((np.ones(5), np.random.default_rng(0), 1.0, 6), "top_k must be in 1 .. n_vocab"),
    "generate": lambda: (({"E": A, "P": A, "blocks": [], "gamma_f": A, "beta_f": A, "W_U": A}, 2, [], 1,
                          np.random.default_rng(0)), "at least one token"),
    "ablate_head": lambda: ((A, 2, 2), "head must be in 0 .. 1"),
    "k_composition": lambda: ((np.ones((4, 4)), np.ones((4, 4)), np.ones((4, 4)), np.ones((4, 4)), 3),
                              "n_heads must divide d_model"),
}


def test_every_contract_can_refuse_and_says_which_clause():
    assert set(BROKEN) == contracts.GRADED
    for name, make in BROKEN.items():
        if make is None:
            continue  # exercise_512 takes nothing
        args, clause = make()
        with pytest.raises(contracts.ContractBroken, match=clause.replace("(", r"\(").replace(")", r"\)")):
            contracts.of(name)(*args)


def test_the_sweep_sees_a_hidden_input_that_breaks_a_clause(monkeypatch):
    """A stricter contract (no position past 1000, which RoPE's far case sends) is broken at once: the sweep can
    fail."""
    strict = contracts.rope

    def rope(x, positions, base=10000.0, interleaved=True):
        strict(x, positions, base, interleaved)
        if np.max(positions) > 1000:
            raise contracts.ContractBroken("positions past 1000")

    monkeypatch.setattr(contracts, "rope", rope)
    broken = salt_sweep.contract_sweep(QUICK_SALTS, lessons=["08_todays_models"])
    assert {(test, clause) for _, test, _, clause in broken} == {("rope_values", "rope: positions past 1000")}


def test_every_hidden_input_keeps_its_contract_quick():
    assert salt_sweep.contract_sweep(QUICK_SALTS) == []


@pytest.mark.slow
def test_every_hidden_input_keeps_its_contract_at_every_salt():
    assert salt_sweep.contract_sweep(SALTS) == []


def test_every_gqa_configuration_of_the_cache_counts_groups_whole_heads():
    """Lesson 08: each KV head serves a group of n_heads // n_kv_heads query heads, so n_kv_heads divides n_heads;
    two different primes (11 heads over 3 KV heads) once made a count that checks it lose 2/2."""
    seen = set()
    for salt in SALTS:
        with grading_salt(salt):
            configs = lesson08.cache_configs(rng_for("cache_values"))
        for config in configs:
            sizes = [v for k, v in config.items() if k != "attention"]
            if config["attention"] == "GQA":
                assert config["n_heads"] % config["n_kv_heads"] == 0 and config["n_heads"] > config["n_kv_heads"], \
                    (salt, config)
                seen.add((config["n_heads"], config["n_kv_heads"]))
            if config["n_layers"] != 60:  # the salted ones: a size in the wrong place changes the count
                assert len(set(sizes)) == len(sizes), (salt, config)
    assert len(seen) > 20  # the salts still vary the configurations
