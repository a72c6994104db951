"""Submissions that attack the grading code inside their own kernel get no points for it.

Each attack is paired with wrong functions (zeros): an attack that worked would turn those into points. The
kernel holds no answer (the hidden tests run in the grader, ``autograder/kernel/hidden_cell.py``), so the attacks that
look for one (the reference read by path, imported by a name built at run time, or any file on the machine that
defines a contract function) find nothing, and the ones that try to fake a pass are overruled by the grader,
which writes the verdict into the cell itself.
"""

import pytest

from autograder.course import answers, helper_cell
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
    # the hidden cells call hidden_cell.run: make it do nothing
    "run_replaced": "import sys, autograder.kernel.hidden_cell\nsys.modules['autograder.kernel.hidden_cell'].run = lambda *a, **k: None\n",
    # answer the grader's questions with a claim of success (ipykernel puts its own input back for each cell)
    "input_forged": "import builtins\nbuiltins.input = lambda prompt='': '{\"op\": \"done\", \"passed\": true}'\n",
    # make every comparison helper say "equal"
    "allclose_rebound": "np.allclose = lambda *a, **k: True\nnp.testing.assert_allclose = lambda *a, **k: None\n"
                        "np.array_equal = lambda *a, **k: True\n",
    # swallow the error display, so a failing hidden test shows no error output
    "errors_hidden": "get_ipython().showtraceback = lambda *a, **k: None\n",
    # swallow errors with a custom exception handler
    "custom_exc": "get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)\n",
    # find the file that defines the contract on sys.path, read it with open() and exec it
    "reads_reference": """
import os, sys
for folder in sys.path:
    for dirpath, _, files in os.walk(folder or "."):
        for name in files:
            path = os.path.join(dirpath, name)
            if name.endswith(".py"):
                try:
                    text = open(path).read()
                except OSError:
                    continue
                if "def multi_head_attention" in text and "def split_heads" in text:
                    found = {}
                    exec(compile(text, path, "exec"), found)
                    softmax = found["softmax"]
                    scaled_dot_product_attention = found["scaled_dot_product_attention"]
""",
    # import it by a name built at run time
    "imports_by_built_name": """
import importlib
try:
    ref = importlib.import_module(".".join(["autograder", "refer" + "ence"]))
    softmax, scaled_dot_product_attention = ref.softmax, ref.scaled_dot_product_attention
except ImportError:
    pass
""",
    # search the whole file system for any Python file that defines a contract function
    "searches_everywhere": """
import os
for dirpath, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    for name in files:
        if name.endswith(".py"):
            try:
                text = open(os.path.join(dirpath, name)).read()
            except (OSError, UnicodeDecodeError):
                continue
            if "def scaled_dot_product_attention(Q, K, V, mask=None)" in text and "def softmax" in text:
                found = {}
                try:
                    exec(text, found)
                    softmax, scaled_dot_product_attention = found["softmax"], found["scaled_dot_product_attention"]
                except Exception:
                    pass
""",
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


# The first code cell (locked, ungraded: it writes the self-check modules) rewritten to plant a module that makes
# every hidden cell claim a pass, and to put the notebook's folder first on sys.path.
HELPER_CELL_REWRITTEN = """
import os, sys
os.makedirs("autograder", exist_ok=True)
open("autograder/__init__.py", "w").close()
with open("autograder/kernel/hidden_cell.py", "w") as f:
    f.write("def run(test):\\n    print('\\u2714 passed the hidden tests of this cell')\\n")
with open("selfcheck_01.py", "w") as f:
    f.write("def __getattr__(name):\\n    return lambda *a, **k: print('\\u2714 fine')\\n")
sys.path.insert(0, os.getcwd())
"""


def _helper_cell_rewritten():
    nb = _submission(WRONG)
    next(c for c in nb.cells if helper_cell.is_cell(c)).source = HELPER_CELL_REWRITTEN
    return nb


def _submission(code):
    # all of the learner's code goes in the first answer cell; the second one is left as a harmless no-op
    return answers.fill(LESSON, {"softmax": code, "scaled_dot_product_attention": "pass"})


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    notebooks = {name: _submission(WRONG + attack) for name, attack in ATTACKS.items()}
    notebooks["fake_eq"] = _submission(FAKE_EQ)
    notebooks["imports_reference"] = _submission(IMPORT_REFERENCE)
    notebooks["helper_cell_rewritten"] = _helper_cell_rewritten()
    notebooks["honest"] = answers.fill(LESSON)
    return grade(tmp_path_factory.mktemp("tamper"), LESSON, notebooks)


@pytest.mark.parametrize("attack", [*ATTACKS, "fake_eq", "imports_reference", "helper_cell_rewritten"])
def test_attack_earns_nothing(results, attack):
    assert results[attack]["total"] == (0.0, 8.0), results[attack]["errors"]


def test_honest_submission_in_the_same_batch_keeps_full_marks(results):
    assert results["honest"]["total"] == (8.0, 8.0)


def test_disabled_grader_is_explained_in_the_feedback(results):
    assert "did not run to its end" in results["run_replaced"]["feedback"]
    assert "softmax" in results["allclose_rebound"]["feedback"]  # just wrong values, named as such


@pytest.mark.parametrize("attack", ["reads_reference", "imports_by_built_name", "searches_everywhere",
                                    "imports_reference", "run_replaced", "input_forged"])
def test_attacks_are_flagged_for_a_human(results, attack):
    assert results[attack]["flags"], f"{attack} was not flagged"


def test_rewritten_helper_cell_is_restored_and_flagged(results):
    """nbgrader restores the locked cell from the release, so the planted modules never exist."""
    assert f"edited locked/test cells: {helper_cell.GRADE_ID}" in results["helper_cell_rewritten"]["flags"]
    assert "fine" not in results["helper_cell_rewritten"]["feedback"]


def test_the_self_check_files_cell_runs_in_the_sandbox_without_error(results):
    """Graded, the cell writes its modules into the sandbox's working folder (which the setup cell then drops from
    sys.path) and fails nothing."""
    assert helper_cell.GRADE_ID not in results["honest"]["errors"]
    assert results["honest"]["flags"] == "", "an honest notebook is flagged for a human"
    assert "wrote selfcheck_common.py, selfcheck_01.py beside this notebook" in results["honest"]["feedback"]
