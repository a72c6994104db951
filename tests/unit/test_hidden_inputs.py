"""Every input a hidden test sends is one the lesson's contract allows, at every grading salt: a correct function
that checks its input (and raises on what the lesson rules out) must never lose points to an impossible input."""

from __future__ import annotations

from autograder.checks import lesson08
from autograder.checks.runner import rng_for
from autograder.proofs.salt_sweep import grading_salt

SALTS = range(200)


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
