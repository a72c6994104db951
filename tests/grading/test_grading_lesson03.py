"""Lesson 03 graded for real: one course, one `nbgrader autograde` over a completed, an untouched and one
submission per catalogued bug of the lesson; every score is read back from the gradebook."""

import pytest

from autograder import bugs
from autograder.course import answers
import lessons_class
from grading_helpers import lost

LESSON = "03_param_count"
POINTS = {"setup": 0, "param_count": 2, "param_count_bias": 1, "exercise_values": 1, "gqa_count": 2,
          "kv_cache_bytes": 1}
LESSON_BUGS = [b for b in bugs.CATALOG if b.lesson == LESSON]
pytestmark = pytest.mark.grading


def submissions():
    return {
        "complete": answers.fill(LESSON),
        "untouched": answers.student_notebook(LESSON),
        # the worked exercise answered by hand, without calling mha_param_count
        "exercise_by_hand": answers.fill(LESSON, {"exercise_512": """
            def exercise_512():
                return 64, 4 * 512 * 512, 4 * 512 * 512
            """}),
    }
    # every catalogued bug is graded by tests/grading/test_mutations.py (autograder.proofs.mutation), in one batch


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return lessons_class.results(tmp_path_factory, LESSON)


def test_the_lesson_has_the_tests_and_points_we_think(results):
    assert {gid: mx for gid, (_, mx) in results["complete"]["tests"].items()} == POINTS


def test_completed_notebook_gets_full_marks(results):
    assert results["complete"]["total"] == (7.0, 7.0)
    assert lost(results["complete"]) == set(), results["complete"]["errors"]
    assert results["exercise_by_hand"]["total"] == (7.0, 7.0)


def test_untouched_notebook_gets_zero(results):
    assert results["untouched"]["total"] == (0.0, 7.0)
    assert "not implemented yet" in results["untouched"]["feedback"]


def test_the_required_bugs_are_catalogued():
    ids = {b.id for b in LESSON_BUGS}
    assert {"param_count_no_W_O", "param_count_times_heads", "param_count_bias_once",
            "gqa_kv_sized_with_query_heads"} <= ids


