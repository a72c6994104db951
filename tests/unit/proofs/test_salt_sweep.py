"""Each hidden test catches each of its catalogued bugs, and names it, for every one of 200 grading salts.

No kernel: the hidden tests' functions are called directly (``autograder.proofs.salt_sweep``) with the lesson's model
answers and one bug in place. The whole catalog is swept, whichever lesson a bug belongs to. The bugs of the
lesson-04 experiment and of lesson 07's gradient check (finite differences) take seconds each, so they are marked
``slow`` (``make test`` runs them; ``make test-fast`` leaves them out).
"""

import os

import pytest

from autograder import bugs, reference
from autograder.proofs import salt_sweep
from autograder.checks import registry

SALTS = range(200)
FIRST_SALTS = SALTS[:10]  # `make test-fast` sweeps these; `make test` adds the other 190 (``slow``)


def _sweep(bug_id, salts):
    rates = salt_sweep.sweep([bugs.by_id(bug_id)], salts=salts)
    assert rates, f"{bug_id} names no test"
    for rate in rates:
        assert rate.perfect, rate.line() + "".join(f"\n  salt {s}: {what}" for s, what in rate.examples)


@pytest.mark.parametrize("bug_id", [b.id for b in bugs.CATALOG])
def test_the_first_ten_salts_catch_and_name_the_bug(bug_id):
    _sweep(bug_id, FIRST_SALTS)


@pytest.mark.slow
@pytest.mark.parametrize("bug_id", [b.id for b in bugs.CATALOG])
def test_every_other_salt_catches_and_names_the_bug(bug_id):
    _sweep(bug_id, SALTS[len(FIRST_SALTS):])


@pytest.mark.parametrize("lesson", sorted({b.lesson for b in bugs.CATALOG}))
def test_the_model_answers_pass_every_salt(lesson):
    """The other side of fairness: the hidden tests never fail a correct notebook, whatever the salt."""
    values = salt_sweep.model_namespace(lesson)
    tests = registry.tests_of(lesson)
    for salt in range(20):  # the bugs' sweep above runs every hidden test on these inputs too
        for test in tests.values():
            with salt_sweep.grading_salt(salt), salt_sweep.notebook_namespace(values):
                test({n: values[n] for n in test.names})


class _OneSaltBug(bugs.Bug):
    """A softmax that is wrong only when the grading salt is 3."""

    def make(self):
        def softmax(x, axis=-1):
            out = reference.softmax(x, axis)
            return out * 2 if os.environ.get(salt_sweep.SALT_VARIABLE) == "3" else out
        return softmax


def test_a_missed_salt_is_reported():
    """The sweep can fail: a bug that only one salt's inputs expose is counted as missed for the others."""
    rate, = salt_sweep.sweep([_OneSaltBug("one_salt", "01_warmup", "softmax", "never named", "", ("softmax_values",))],
                             salts=range(5))
    assert (rate.salts, rate.detected, rate.named) == (5, 1, 0) and not rate.perfect
