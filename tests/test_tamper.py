"""Submissions that attack the grading code inside their own kernel get no points for it.

Each attack is paired with wrong functions (zeros): an attack that worked would turn those into points.
"""

import pytest

from autograder import submissions
from grading_helpers import grade

LESSON = "01_warmup"
pytestmark = pytest.mark.grading

WRONG = '''
def softmax(x, axis=-1):
    return np.zeros_like(x)

def scaled_dot_product_attention(Q, K, V, mask=None):
    return np.zeros(Q.shape[:-1] + V.shape[-1:]), np.zeros(Q.shape[:-1] + K.shape[-2:-1])
'''

ATTACKS = {
    # the hidden tests call session.run: make it do nothing
    "run_replaced": "import sys\nsys.modules['autograder.checks.session'].run = lambda *a, **k: None\n",
    # make every comparison helper say "equal"
    "allclose_rebound": "np.allclose = lambda *a, **k: True\nnp.testing.assert_allclose = lambda *a, **k: None\n"
                        "np.array_equal = lambda *a, **k: True\n",
    # swallow the error display, so a failing hidden test shows no error output
    "errors_hidden": "get_ipython().showtraceback = lambda *a, **k: None\n",
    # swallow errors with a custom exception handler
    "custom_exc": "get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)\n",
    # turn off the guard and the re-check it relies on, in one go
    "guard_off": "import sys\ns = sys.modules['autograder.checks.session']\ns.verify = lambda *a, **k: None\n"
                 "s.run = lambda *a, **k: None\n",
}

FAKE_EQ = '''
class Anything(np.ndarray):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False

def softmax(x, axis=-1):
    return np.zeros_like(x).view(Anything)

def scaled_dot_product_attention(Q, K, V, mask=None):
    z = np.zeros(Q.shape[:-1] + V.shape[-1:]).view(Anything)
    return z, np.zeros(Q.shape[:-1] + K.shape[-2:-1]).view(Anything)
'''

IMPORT_REFERENCE = '''
from autograder.reference import softmax, scaled_dot_product_attention
'''


def _submission(code):
    # all of the learner's code goes in the first answer cell; the second one is left as a harmless no-op
    return submissions.fill(LESSON, {"softmax": code, "scaled_dot_product_attention": "pass"})


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    notebooks = {name: _submission(WRONG + attack) for name, attack in ATTACKS.items()}
    notebooks["fake_eq"] = _submission(FAKE_EQ)
    notebooks["imports_reference"] = _submission(IMPORT_REFERENCE)
    notebooks["honest"] = submissions.fill(LESSON)
    return grade(tmp_path_factory.mktemp("tamper"), LESSON, notebooks)


@pytest.mark.parametrize("attack", [*ATTACKS, "fake_eq", "imports_reference"])
def test_attack_earns_nothing(results, attack):
    assert results[attack]["total"] == (0.0, 8.0), results[attack]["errors"]


def test_honest_submission_in_the_same_batch_keeps_full_marks(results):
    assert results["honest"]["total"] == (8.0, 8.0)


def test_disabled_grader_is_explained_in_the_feedback(results):
    assert "left no record" in results["run_replaced"]["feedback"]
    assert "numpy.allclose was reassigned" in results["allclose_rebound"]["feedback"]
    assert "grading package" in results["imports_reference"]["feedback"]
