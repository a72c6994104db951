"""Every catalogued learner bug is caught, costed exactly and named, through the real grading path."""

import time

import pytest

from autograder import bug_table, bugs, course, mutation

pytestmark = pytest.mark.grading


@pytest.fixture(scope="module")
def verdicts():
    t0 = time.perf_counter()
    found = {v.bug.id: v for v in mutation.run(workers=2)}
    print("\n" + mutation.report(list(found.values()), time.perf_counter() - t0))
    return found


def test_catalog_covers_every_lesson_with_graded_functions():
    lessons_with_bugs = {b.lesson for b in bugs.CATALOG}
    assert {"01"} <= lessons_with_bugs
    for b in bugs.CATALOG:
        assert b.tests, f"{b.id} must name the tests it breaks"
        mutation.lesson_of(b)  # raises if the lesson does not exist


@pytest.mark.parametrize("bug_id", [b.id for b in bugs.CATALOG])
def test_bug_is_caught_costed_and_named(verdicts, bug_id):
    v = verdicts[bug_id]
    assert v.caught, f"{bug_id}: " + "; ".join(v.problems)


def test_bug_table_is_in_sync_with_the_catalog():
    assert bug_table.TARGET.read_text(encoding="utf-8") == bug_table.render(), "run `make docs`"
