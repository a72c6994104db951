"""Wrong-number signatures through the real grading command (``autograder/checks/signature.py``): three students whose
lesson-01 softmax is wrong in a way no catalogued bug explains, two with the same code (one with its variables
renamed and its independent lines reordered), one with other code, graded in one run of ``autograder.grade.run``.

Their state records' items of the failing tests are ``unnamed`` with a signature: equal for the shared code, another
for the other code, and the one the same test gives in this process at any grading salt (comparable across grading
processes and runs). The scores are what they are without signatures: the failing tests score 0, the rest full.
"""

from __future__ import annotations

import pytest
from grading_helpers import grade, lost

from autograder.checks import registry
from autograder.checks.signature import signature_of
from autograder.checks.verdict import UNNAMED
from autograder.course import answers
from autograder.grading.records import state
from autograder.grading.records.settings import Settings

LESSON = "01_warmup"
FAILING = ("softmax_values", "softmax_stable")
pytestmark = pytest.mark.grading

SHIFTED = '''
def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=axis, keepdims=True) + 0.1
'''
SHIFTED_RENAMED = '''
def softmax(scores, axis=-1):
    peak = scores.max(axis=axis, keepdims=True)
    offset = 0.1
    exps = np.exp(scores - peak)
    total = exps.sum(axis=axis, keepdims=True)
    return exps / total + offset
'''
DAMPED = '''
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / (e.sum(axis=axis, keepdims=True) + 1.0)
'''
STUDENTS = {"alice": SHIFTED, "bob": SHIFTED_RENAMED, "carol": DAMPED}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    out = tmp_path_factory.mktemp("signatures")
    results = grade(out, LESSON, {s: answers.fill(LESSON, {"softmax": code}) for s, code in STUDENTS.items()},
                    feedback=False)
    s = Settings(out=str(out), lessons=[LESSON])
    return results, {student: state.read(s, student, LESSON) for student in STUDENTS}


def test_the_failing_tests_score_as_without_signatures(graded):
    results, _ = graded
    for student in STUDENTS:
        assert lost(results[student]) == set(FAILING), results[student]["errors"]
        assert results[student]["total"] == (5.0, 8.0)
        assert all(results[student]["tests"][gid][0] == 0.0 for gid in FAILING)
        assert "differs from the expected values" in results[student]["errors"]["softmax_values"]


@pytest.mark.parametrize("grade_id", FAILING)
def test_shared_wrong_numbers_share_a_signature_and_other_numbers_do_not(graded, grade_id):
    _, records = graded
    items = {student: records[student].items[grade_id] for student in STUDENTS}
    assert {item.result for item in items.values()} == {UNNAMED}
    assert all(item.score == 0.0 and item.bug is None for item in items.values())
    signatures = {student: item.signature for student, item in items.items()}
    assert None not in signatures.values()
    assert signatures["alice"] == signatures["bob"] != signatures["carol"]
    passed = [item for gid, item in records["alice"].items.items() if gid not in FAILING]
    assert passed and all(item.signature is None for item in passed)


def test_a_signature_is_the_same_in_any_grading_process(graded, monkeypatch):
    _, records = graded
    test = registry.find(LESSON, "softmax_values")
    for salt in ("5", "123456789"):  # this process's salts, never the grading run's
        monkeypatch.setenv("MHA_GRADING_SALT", salt)
        for student, code in STUDENTS.items():
            namespace: dict = {}
            exec("import numpy as np\n" + code, namespace)
            assert signature_of(test, {"softmax": namespace["softmax"]}) == \
                records[student].items["softmax_values"].signature
