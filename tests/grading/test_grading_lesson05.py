"""Lesson 05 graded for real: one course, one ``nbgrader autograde`` call over every submission below; scores and
manual-grading flags read back from the gradebook. Plus the fast checks that need no kernel: every catalogued
lesson-05 bug fails its hidden test with its diagnosis, the visible self-checks catch what they claim to, and the
student notebook does not give away the multiple-choice answer."""

import hashlib
import re

import nbformat
import numpy as np
import pytest
from nbgrader.api import Gradebook

from autograder.course import answers
from autograder import course
from autograder.bugs import by_id, for_function
from autograder.checks import lesson05 as hidden
from autograder.checks import registry
from autograder.checks.verdict import WrongAnswer
import lessons_class
from grading_helpers import lost

LESSON = "05_exercises"
# d_head_1024 1, param_count_1024 1, d_head_small 1, roundtrip 3, heads_differ 3, mha 3, the two fixes 2 + 2, mc 1
AUTO_POINTS = 17.0
MANUAL = {"explain_reshape": 3.0, "symptom_masked_attention": 1.0, "symptom_attention_layer": 1.0,
          "explain_w_o": 2.0, "explain_scale": 2.0}
GIVEN = ("masked_attention_as_given", "attention_layer_as_given")  # the find-the-bug exercises
TOTAL = AUTO_POINTS + sum(MANUAL.values())
MC_CELL_STUB = "mc_answer = None  # one letter, as a string\n"
grading = pytest.mark.grading


def _bugs(*ids):
    return {by_id(i).function: by_id(i).source for i in ids}


# ------------------------------------------------------------------------------------------ through nbgrader
def submissions():
    wrong_letter = next(c for c in "abcd" if c != hidden._CHOICE)
    return {
        "complete": answers.fill(LESSON),
        "untouched": answers.student_notebook(LESSON),
        "wrong_choice": answers.fill(LESSON, {"answer_mc": MC_CELL_STUB + f"mc_answer = {wrong_letter!r}"}),
        "bare_reshape": answers.fill(LESSON, _bugs("split_into_heads_bare_reshape", "merge_heads_bare_reshape")),
        # one layer handed to the other, whose given code is still buggy
        "calls_attention_layer": answers.fill(LESSON, _bugs("attention_layer_as_given",
                                                            "mha_from_scratch_calls_attention_layer")),
        "random_heads": answers.fill(LESSON, _bugs("head_weights_random_patterns")),
        # three independent mistakes in one notebook: each costs its own cell and nothing else
        "three_bugs": answers.fill(LESSON, {
            **_bugs("head_weights_same_columns", "mha_from_scratch_no_w_o"),
            "answer_param_count_1024": "param_count_16_heads = 3 * 1024 * 1024\n"
                                       "param_count_1_head = 3 * 1024 * 1024\n"}),
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(course root, results): every submission graded in the one class of every lesson (``lessons_class``)."""
    return lessons_class.course_root(tmp_path_factory), lessons_class.results(tmp_path_factory, LESSON)


def _manual_grades(root, student):
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        sub = gb.find_submission_notebook(LESSON, LESSON, student)
        grades = {g.name: (g.needs_manual_grade, g.auto_score, g.max_score) for g in sub.grades if g.name in MANUAL}
        return grades, gb.find_submission(LESSON, student).needs_manual_grade


@grading
def test_completed_notebook_gets_full_autograded_marks_and_is_flagged_for_manual_grading(graded):
    root, results = graded
    r = results["complete"]
    assert r["total"] == (AUTO_POINTS, TOTAL)
    assert lost(r) == set(), r["errors"]
    assert set(r["tests"]) >= {"d_head_1024", "param_count_1024", "d_head_small", "roundtrip", "heads_differ",
                               "mha_from_scratch_test", "masked_attention_test", "attention_layer_test",
                               "multiple_choice"}
    grades, flagged = _manual_grades(root, r["student"])
    assert flagged is True
    assert grades == {name: (True, None, pts) for name, pts in MANUAL.items()}


@grading
def test_untouched_notebook_gets_zero_and_needs_no_manual_grading(graded):
    root, results = graded
    r = results["untouched"]
    assert r["total"] == (0.0, TOTAL)
    assert "not implemented yet" in r["feedback"]
    for bug_id in GIVEN:  # the find-the-bug cells hold the given code: its hidden test names the bug
        assert f"[{bug_id}]" in r["feedback"]
    grades, flagged = _manual_grades(root, r["student"])
    assert flagged is False  # unchanged answer cells score 0 automatically
    assert grades == {name: (False, 0.0, pts) for name, pts in MANUAL.items()}


@grading
def test_wrong_multiple_choice_loses_exactly_its_point(graded):
    r = graded[1]["wrong_choice"]
    assert lost(r) == {"multiple_choice"}, r["errors"]
    assert r["total"] == (AUTO_POINTS - 1, TOTAL)
    assert "is not the true statement" in r["feedback"]
    assert f"({hidden._CHOICE})" not in r["feedback"]  # the feedback explains the mistake, not the answer


@grading
def test_a_layer_that_calls_the_other_layer_gets_no_credit_for_it(graded):
    """mha_from_scratch returns attention_layer(...), still the given buggy code: both cells lose their points,
    each with its own diagnosis; the stand-in of attention_layer refuses to answer while mha_from_scratch is graded."""
    r = graded[1]["calls_attention_layer"]
    assert lost(r) == {"mha_from_scratch_test", "attention_layer_test"}, r["errors"]
    assert "[mha_from_scratch_calls_attention_layer]" in r["feedback"]
    assert "[attention_layer_as_given]" in r["feedback"]


@grading
def test_round_trip_with_a_bare_reshape_loses_exactly_the_round_trip_points(graded):
    r = graded[1]["bare_reshape"]
    assert lost(r) == {"roundtrip"}, r["errors"]
    assert r["total"] == (AUTO_POINTS - 3, TOTAL)
    assert "[split_into_heads_bare_reshape]" in r["feedback"]


@grading
def test_heads_differ_passed_with_random_patterns_loses_exactly_its_points(graded):
    r = graded[1]["random_heads"]
    assert lost(r) == {"heads_differ"}, r["errors"]
    assert r["total"] == (AUTO_POINTS - 3, TOTAL)
    assert "[head_weights_random_patterns]" in r["feedback"]


@grading
def test_independent_mistakes_each_cost_only_their_own_cell(graded):
    r = graded[1]["three_bugs"]
    assert lost(r) == {"heads_differ", "mha_from_scratch_test", "param_count_1024"}, r["errors"]
    assert r["total"] == (AUTO_POINTS - 7, TOTAL)
    assert "heads 0 and 1 of head_weights give the same weights" in r["feedback"]
    assert "[mha_from_scratch_no_w_o]" in r["feedback"]
    assert "counts only W_Q, W_K and W_V" in r["feedback"]


# ------------------------------------------------------------------------------------------ the answer stays hidden
def _released_texts():
    """Everything a learner receives: the lesson's cells and every file in lessons/."""
    nb = nbformat.read(course.LESSONS / f"{LESSON}.ipynb", as_version=4)
    files = [p.read_text(encoding="utf-8") for p in sorted(course.LESSONS.iterdir()) if p.is_file()]
    return ["\n".join(c.source for c in nb.cells), *files]


def test_student_notebook_does_not_contain_the_multiple_choice_answer():
    answer = hidden._CHOICE
    for text in _released_texts():
        assert not re.search(r"mc_answer\s*=\s*['\"][a-dA-D]['\"]", text)
        for variant in {answer, answer.upper(), answer + "\n", f"'{answer}'", f'"{answer}"'}:
            for algo in ("md5", "sha1", "sha224", "sha256", "sha512", "blake2b"):
                assert hashlib.new(algo, variant.encode()).hexdigest() not in text
    # the answer cell was released as a stub that records nothing
    answer_cell = next(c for c in nbformat.read(course.LESSONS / f"{LESSON}.ipynb", as_version=4).cells
                       if c.metadata.get("nbgrader", {}).get("grade_id") == "answer_mc")
    assert "raise NotImplementedError()" in answer_cell.source
    assert re.findall(r"mc_answer\s*=\s*(\S+)", answer_cell.source) == ["None"]


def test_visible_multiple_choice_check_only_validates_the_format(capsys):
    selfcheck = _selfcheck()
    printed = []
    for letter in "abcd":
        selfcheck.check_choice(letter)
        printed.append(capsys.readouterr().out.replace(f"({letter})", "(?)"))
    assert len(set(printed)) == 1  # the same message whatever the letter: nothing to learn from it
    for bad in ("e", "ab", 3, "", ["c"]):
        with pytest.raises(AssertionError):
            selfcheck.check_choice(bad)
    with pytest.raises(NotImplementedError, match="not implemented yet"):
        selfcheck.check_choice(None)


# ------------------------------------------------------------------------------------------ fast, no kernel
def _selfcheck():
    return course.import_selfcheck(course.selfcheck_module(LESSON))


LESSON05_BUGS = [b for name in ("split_into_heads", "merge_heads", "head_weights", "mha_from_scratch",
                                 "masked_attention", "attention_layer")
                 for b in for_function(name) if b.lesson == LESSON]


def _model_functions():
    """The model answers of the lesson's function cells, defined in one namespace as in the notebook."""
    ns = {"np": np, "math": __import__("math")}
    for gid, src in answers.model_answers(LESSON).items():
        if re.search(r"^def ", src, re.M):  # a function cell (the paste cell opens with its marker comment)
            exec(compile(src, gid, "exec"), ns)
    return ns


def _run_hidden(ns):
    """The lesson's function tests as the grader runs them: with the stand-ins of the functions each does not grade."""
    for name in ("roundtrip", "heads_differ", "mha_from_scratch_test", "masked_attention_test", "attention_layer_test"):
        test = registry.find(LESSON, name)
        test({n: ns[n] for n in test.names})


def test_model_answers_pass_the_hidden_checks_and_self_checks(capsys):
    ns = _model_functions()
    _run_hidden(ns)
    hidden.d_head_1024(64)
    hidden.param_count_1024(4 * 1024 * 1024, 4 * 1024 * 1024)
    hidden.d_head_small(16, 4)
    hidden.multiple_choice(hidden._CHOICE.upper())
    sc = _selfcheck()
    sc.check_split_merge(ns["split_into_heads"], ns["merge_heads"])
    sc.check_head_weights(ns["head_weights"], ns["split_into_heads"])
    sc.check_mha_from_scratch(ns["mha_from_scratch"], ns["split_into_heads"], ns["merge_heads"])
    sc.check_masked_attention(ns["masked_attention"])
    sc.check_attention_layer(ns["attention_layer"])
    assert capsys.readouterr().out.count("\u2714") == 5


@pytest.mark.parametrize("bug", LESSON05_BUGS, ids=lambda b: b.id)
def test_each_lesson05_bug_fails_its_hidden_test_with_its_diagnosis(bug):
    ns = _model_functions()
    exec(compile(bug.source, bug.id, "exec"), ns)  # the learner's wrong cell replaces the model answer
    with pytest.raises(WrongAnswer) as exc:
        _run_hidden(ns)
    message = str(exc.value)
    if bug.id != "head_weights_same_columns":  # caught earlier, by the "heads are identical" step
        assert f"[{bug.id}]" in message, message


_VISIBLE = {  # graded cell -> its visible self-check, as the cell calls it
    "roundtrip": lambda sc, ns: sc.check_split_merge(ns["split_into_heads"], ns["merge_heads"]),
    "heads_differ": lambda sc, ns: sc.check_head_weights(ns["head_weights"], ns["split_into_heads"]),
    "mha_from_scratch_test": lambda sc, ns: sc.check_mha_from_scratch(ns["mha_from_scratch"], ns["split_into_heads"],
                                                                      ns["merge_heads"]),
    "masked_attention_test": lambda sc, ns: sc.check_masked_attention(ns["masked_attention"]),
    "attention_layer_test": lambda sc, ns: sc.check_attention_layer(ns["attention_layer"]),
}


@pytest.mark.parametrize("bug", LESSON05_BUGS, ids=lambda b: b.id)
def test_each_lesson05_bug_fails_its_own_self_check_and_no_other(bug):
    """A graded cell scores 0 when its visible part fails too, so a bug must not fail another cell's self-check."""
    ns = _model_functions()
    exec(compile(bug.source, bug.id, "exec"), ns)
    sc = _selfcheck()
    assert set(bug.tests) <= set(_VISIBLE)
    for cell, run in _VISIBLE.items():
        if cell in bug.tests and bug.visible:  # a bug only the hidden tests can see passes the self-checks
            with pytest.raises(AssertionError):
                run(sc, ns)
        else:
            run(sc, ns)


def test_a_wrong_split_does_not_fail_the_later_self_checks(capsys):
    """The visible checks of composite functions defer their per-head probes while the split is wrong, so a
    split bug costs only the round-trip cell (the hidden tests put the reference split in as a stand-in)."""
    ns = _model_functions()
    exec(compile(by_id("split_into_heads_bare_reshape").source, "bug", "exec"), ns)
    exec(compile(by_id("merge_heads_bare_reshape").source, "bug", "exec"), ns)
    sc = _selfcheck()
    sc.check_head_weights(ns["head_weights"], ns["split_into_heads"])
    sc.check_mha_from_scratch(ns["mha_from_scratch"], ns["split_into_heads"], ns["merge_heads"])
    assert capsys.readouterr().out.count("run once split_into_heads") == 2


@pytest.mark.parametrize("answers, fragment", [
    ((None, None), "not implemented yet"),
    ((3 * 1024 * 1024, 3 * 1024 * 1024), "counts only W_Q, W_K and W_V"),
    ((16 * 4 * 1024 * 1024, 4 * 1024 * 1024), "multiplied by the head count"),
    ((4 * 1024 * 64, 4 * 1024 * 1024), "one head's slices"),
    ((4 * 1024 * 1024 + 4096, 4 * 1024 * 1024 + 4096), "includes biases"),
    ((4.0 * 1024 * 1024, 4 * 1024 * 1024), "whole number"),
])
def test_parameter_count_answers_are_diagnosed(answers, fragment):
    with pytest.raises(WrongAnswer, match=fragment):
        hidden.param_count_1024(*answers)


@pytest.mark.parametrize("check, args", [
    (hidden.d_head_1024, (63,)), (hidden.d_head_1024, (64.0,)), (hidden.d_head_1024, (True,)),
    (hidden.d_head_small, (16, 8)), (hidden.d_head_small, (8, 4)), (hidden.d_head_small, (None, 4)),
])
def test_wrong_head_widths_fail(check, args):
    with pytest.raises(WrongAnswer):
        check(*args)


def test_multiple_choice_rejects_other_letters_and_impostors():
    class Always(str):
        def __eq__(self, other):
            return True
    for bad in [c for c in "abcd" if c != hidden._CHOICE] + [Always("x"), 3, "cc"]:
        with pytest.raises(WrongAnswer):
            hidden.multiple_choice(bad)


def test_the_find_the_bug_cells_hand_out_the_given_bugs_and_only_they():
    from autograder.publish import given_code

    released = {c.metadata["nbgrader"]["grade_id"]: c.source for c in answers.student_notebook(LESSON).cells
                if c.metadata.get("nbgrader", {}).get("solution")}
    given = given_code.given_bugs(LESSON)
    assert sorted(b.id for b in given) == sorted(GIVEN)
    for b in given:
        assert released[b.function] == b.source  # working-looking code, not a stub
        assert "NotImplementedError" not in b.source and b.visible
        model = answers.model_answers(LESSON)[b.function]
        changed = [line for line in b.source.splitlines() if line.strip() and line not in model.splitlines()]
        assert 1 <= len(changed) <= 2, changed  # one mistake: the fix changes a line or two, not the function
    assert given_code.expected_failures(LESSON) == {"masked_attention_test", "attention_layer_test"}
