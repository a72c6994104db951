"""Every catalogued learner bug is caught, costed exactly and named, through the real grading path; the same
grading run proves that a bug placed where a lesson does not grade it (a pasted or ungraded cell) costs nothing."""

import time

import pytest

from autograder.publish import bug_table
from autograder import bugs, course
from autograder.proofs import mutation, placements

pytestmark = pytest.mark.grading


@pytest.fixture(scope="module")
def verdicts():
    t0 = time.perf_counter()
    found = {v.name: v for v in mutation.run(workers=2)}
    print("\n" + mutation.report(list(found.values()), time.perf_counter() - t0))
    return found


def test_catalog_covers_every_lesson_with_graded_functions():
    lessons_with_bugs = {b.lesson for b in bugs.CATALOG}
    assert {"01_warmup"} <= lessons_with_bugs <= set(course.lesson_names())
    for b in bugs.CATALOG:
        assert b.tests, f"{b.id} must name the tests it breaks"


@pytest.mark.parametrize("bug_id", [b.id for b in bugs.CATALOG])
def test_bug_is_caught_costed_and_named(verdicts, bug_id):
    v = verdicts[bug_id]
    assert v.caught, f"{bug_id}: " + "; ".join(v.problems)


@pytest.mark.parametrize("fair_id", [f.id for lesson in course.lesson_names() for f in mutation.fair_rounds(lesson)])
def test_correct_alternatives_earn_full_marks_through_the_grading_command(verdicts, fair_id):
    """Every catalogued correct alternative (``autograder/alternatives/``), graded by ``autograder.grade.run`` in
    the same run as the bugs, loses no point (``tests/unit/proofs/test_alternatives.py`` runs them at 200 salts)."""
    v = verdicts[fair_id]  # caught: no autograded point lost (written answers await the instructor)
    assert v.caught and v.total[1] > 0, f"{fair_id} ({v.line()}): " + "; ".join(v.problems)


@pytest.mark.parametrize("placement_id", [p.id for p in placements.all_placements()])
def test_placed_bug_costs_only_its_own_tests(verdicts, placement_id):
    v = verdicts[placement_id]
    assert v.caught, f"{placement_id} ({', '.join(b.id for b in v.placement.bugs)}): " + "; ".join(v.problems)


def test_every_catalogued_bug_of_an_ungraded_function_is_placed_in_each_lesson_that_holds_it():
    placed = {(p.lesson, b.id) for p in placements.all_placements() for b in p.bugs}
    for lesson in course.lesson_names():
        for function in placements.ungraded_functions(lesson):
            for b in bugs.for_function(function):
                assert (lesson, b.id) in placed, f"{b.id} is not placed in {lesson}"
    # cases that each cost points in other functions' tests before isolation
    for lesson, bug_id in (("06_going_further", "attention_scaled_by_d_k"),
                           ("06_going_further", "mha_scaled_by_d_model"),
                           ("05_exercises", "softmax_ignores_axis"), ("02_multi_head", "attention_scaled_by_d_k"),
                           ("06_going_further", "causal_mask_diagonal_blocked_k0"),
                           ("06_going_further", "gqa_mask_ignored")):
        assert (lesson, bug_id) in placed, f"{bug_id} is not placed in {lesson}"


def test_rounds_grade_every_bug_once_and_keep_apart_the_bugs_they_could_not_tell_apart():
    submissions = 0
    for lesson, bug_list in mutation.bugs_by_lesson().items():
        rounds = mutation.mutants_for(lesson, bug_list)
        submissions += len(rounds)
        assert sorted(b.id for m in rounds for b in m.bugs) == sorted(b.id for b in bug_list)
        tests = mutation.tests_of_functions(bug_list)
        for m in rounds:
            for i, b in enumerate(m.bugs):
                for other in m.bugs[i + 1:]:
                    assert not tests[b.function] & tests[other.function], (m.id, b.id, other.id)
                    assert b.diagnosis[:60] != other.diagnosis[:60], (m.id, b.id, other.id)
        assert len({m.id for m in rounds}) == len(rounds)
    # lesson 05's split_into_heads and merge_heads share the roundtrip test: never in one round
    assert not any({"split_into_heads", "merge_heads"} <= {b.function for b in m.bugs}
                   for m in mutation.mutants_for("05_exercises", mutation.bugs_by_lesson()["05_exercises"]))
    assert submissions < len(bugs.CATALOG) / 2


def test_a_round_blames_lost_points_on_the_function_that_owns_them(monkeypatch):
    """judge, on made-up grades: each bug answers for its own function's tests, and a test lost outside the
    round's functions fails every bug of the round."""
    lesson = "02_multi_head"
    split = bugs.for_function("split_heads")[0]
    mha = next(b for b in bugs.for_function("multi_head_attention") if len(b.tests) == 1)
    round_ = mutation.Mutant("mutant-02-01", lesson, (split, mha))
    tests = mutation.tests_of_functions(mutation.bugs_by_lesson()[lesson])
    every_test = set().union(*tests.values())
    lost = {}
    monkeypatch.setattr(mutation.results, "cell_scores", lambda s, l, student: {
        t: (0.0 if t in lost.get(student, ()) else 1.0, 1.0) for t in every_test})
    monkeypatch.setattr(mutation.results, "submission_total",
                        lambda s, l, student: (len(every_test) - len(lost.get(student, ())), len(every_test)))
    monkeypatch.setattr(mutation.results, "feedback_text",
                        lambda s, l, student: f"{split.diagnosis} and {mha.diagnosis}")
    monkeypatch.setattr(mutation, "_visible_check_fails", lambda lesson, b: True)

    def verdicts(lost_by_round):
        lost.clear()
        lost.update({round_.id: set(lost_by_round)})
        return {v.bug.id: v for v in mutation.judge(None, lesson, [round_])}

    assert all(v.caught for v in verdicts({*split.tests, *mha.tests}).values())
    missed = verdicts(split.tests)
    assert missed[split.id].caught and not missed[mha.id].caught
    assert "missed it" in missed[mha.id].problems[0]
    other = sorted(tests["output_projection"])[0]
    leaked = verdicts({*split.tests, *mha.tests, other})
    for v in leaked.values():
        assert not v.caught and other in v.problems[0], v.problems
    too_many = verdicts({*split.tests, *tests["multi_head_attention"]})  # mha's other test lost as well
    assert too_many[split.id].caught and not too_many[mha.id].caught
    assert "expected exactly" in too_many[mha.id].problems[0]


def test_a_submission_the_grader_failed_on_proves_nothing(monkeypatch):
    """A grading error (no score at all) fails the bugs of that submission instead of passing for 'no point lost'."""
    from autograder import grade

    lesson = "03_param_count"
    first = mutation.mutants_for(lesson, mutation.bugs_by_lesson()[lesson])[0]
    monkeypatch.setattr(grade, "run", lambda *a, **k: {"errors": [(first.id, lesson, "the kernel died")]})
    monkeypatch.setattr(mutation, "judge", lambda s, l, mutants: [
        mutation.Verdict(b, m.id) for m in mutants for b in m.bugs])
    monkeypatch.setattr(mutation, "judge_placements", lambda s, l, placed: [])  # no gradebook was made
    verdicts = mutation.run(lessons=[lesson])
    failed = [v for v in verdicts if not v.caught]
    assert {v.bug.id for v in failed} == {b.id for b in first.bugs}
    assert all(f"{first.id} was not graded (grading error: the kernel died)" in v.problems[0] for v in failed)


def test_bug_table_is_in_sync_with_the_catalog():
    assert bug_table.TARGET.read_text(encoding="utf-8") == bug_table.render(), "run `make docs`"
