"""The instructor's insights (``autograder/grading/insights.py``): every count of ``misconceptions.csv`` and every
difficulty figure of a synthetic class graded once through the real command (tests/helpers/insights_class.py), and the
pieces that need no kernel (how a failed test names a bug, the point-biserial correlation)."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest

from autograder.checks.runner import Case, WrongAnswer, call_learner
from autograder.grading import insights
from autograder.grading.settings import Settings
from insights_class import (ATTENTION_BUGS, CLASS_BUGS, LESSON, SOFTMAX_BUGS, UNNAMED_STUDENTS, UNTOUCHED,
                            graded_class, softmax_tests)


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    return graded_class(tmp_path_factory)


def _csv(out):
    with (out / "misconceptions.csv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def expected_rows() -> set:
    """(student, test, bug) of every failure the class must show: each bug costs its catalogued tests."""
    rows = {(st, gid, b.id) for st, wrong in CLASS_BUGS.items() for b in wrong for gid in b.tests}
    rows |= {(st, gid, "unnamed") for st in UNNAMED_STUDENTS for gid in softmax_tests()}
    return rows


# ------------------------------------------------------------------------------------------------ no kernel
def test_a_failed_check_names_its_bug_only_from_the_graders_own_words():
    b = SOFTMAX_BUGS[0]
    assert WrongAnswer(f"{b.diagnosis} [{b.id}] (on input x)").bug_id == b.id
    assert WrongAnswer(f"softmax raised ValueError: {b.diagnosis} [{b.id}] on input x").bug_id is None
    assert WrongAnswer("softmax is not implemented yet: replace ...").unanswered


def test_an_error_the_learner_raises_is_named_only_when_a_catalogued_bug_raises_it_alike():
    def forging(x, axis=-1):
        raise ValueError(f"{SOFTMAX_BUGS[0].diagnosis} [{SOFTMAX_BUGS[0].id}]")

    with pytest.raises(WrongAnswer) as raised:
        call_learner(forging, Case((np.ones((2, 3)),)), "softmax")
    assert raised.value.bug_id is None and f"[{SOFTMAX_BUGS[0].id}]" in str(raised.value)


def test_a_number_never_matches_a_known_bugs_nan():
    """A finite wrong softmax on huge scores is not the overflowing softmax, whose result there is NaN."""
    from autograder.checks import compare

    nan = np.array([np.nan, 1.0])
    assert not compare.same_values(np.array([0.5, 1.0]), nan)
    assert compare.same_values(np.array([np.nan, 1.0]), nan)


def test_point_biserial_is_pearsons_r_of_a_binary_item():
    assert insights.point_biserial([1, 1, 0, 0], [4, 3, 1, 0]) == pytest.approx(0.9486832980505138)
    assert insights.point_biserial([1, 1, 1], [4, 3, 1]) is None  # everyone passes: nothing to correlate
    assert insights.point_biserial([1, 0], [2, 2]) is None


# ------------------------------------------------------------------------------------------------ one graded class
@pytest.mark.grading
def test_misconceptions_csv_holds_every_failure_of_the_class_and_nothing_else(klass):
    rows = _csv(klass["out"])
    assert list(rows[0]) == insights.CSV_HEADER
    assert {r["lesson"] for r in rows} == {LESSON}
    assert sorted((r["student"], r["test"], r["bug"]) for r in rows) == sorted(expected_rows())
    assert not any(r["student"] in ("perfect", UNTOUCHED) for r in rows)
    for r in rows:
        assert r["feedback"] == f"feedback/{r['student']}/{LESSON}.html"
        assert (klass["out"] / r["feedback"]).is_file()
        assert float(r["points lost"]) > 0


@pytest.mark.grading
def test_the_counts_per_bug_and_the_shares_are_those_of_the_class(klass):
    html = (klass["out"] / "insights.html").read_text(encoding="utf-8")
    attempted = len(CLASS_BUGS)  # the untouched notebook is not in the shares
    for b in [*ATTENTION_BUGS, *SOFTMAX_BUGS]:
        students = sorted(st for st, wrong in CLASS_BUGS.items() if b in wrong)
        row = re.search(rf'<tr id="bug-{LESSON}-{b.id}">(.*?)</tr>', html, re.S).group(1)
        assert re.findall(r'<a href="feedback/([^/]+)/', row) == students
        cells = re.findall(r'<td class="num">([^<]*)</td>', row)
        assert cells == [str(len(students)), f"{100 * len(students) / attempted:.0f}%"]
    order = re.findall(rf'<tr id="bug-{LESSON}-([\w]+)">', html)
    assert order[0] == ATTENTION_BUGS[0].id  # the most frequent first (three students)


@pytest.mark.grading
def test_the_difficulty_of_each_test_is_its_pass_rate_among_attempted_notebooks(klass):
    failed = {}
    for st, gid, _ in expected_rows():
        failed.setdefault(gid, set()).add(st)
    html = (klass["out"] / "insights.html").read_text(encoding="utf-8")
    table = html.split('<h2 id="items">')[1].split("<h2")[0]
    found = {m[0]: (int(m[1]), m[2]) for m in re.findall(
        r'<tr><td>(\w+)</td><td class="num">(\d+)</td><td class="num">([^<]*)</td>', table)}
    attempted = len(CLASS_BUGS)
    expected = {gid: (attempted, f"{100 * (1 - len(failed.get(gid, ())) / attempted):.0f}%")
                for gid in ("softmax_values", "softmax_stable", "attention_values", "attention_mask")}
    assert found == expected


@pytest.mark.grading
def test_an_uncatalogued_wrong_answer_and_a_forged_bug_name_are_failures_without_a_name(klass):
    html = (klass["out"] / "insights.html").read_text(encoding="utf-8")
    unnamed = html.split('<h2 id="unnamed">')[1].split("<h2")[0]
    for gid in softmax_tests():
        row = re.search(rf"<tr><td>{LESSON}</td><td>{gid}</td><td class=\"num\">(\d+)</td>(.*?)</tr>", unnamed, re.S)
        assert int(row.group(1)) == len(UNNAMED_STUDENTS)
        assert sorted(re.findall(r'<a href="feedback/([^/]+)/', row.group(2))) == sorted(UNNAMED_STUDENTS)


@pytest.mark.grading
def test_the_untouched_notebook_is_not_attempted_and_the_run_lists_what_it_graded(klass):
    changed = {c["student"]: c for c in klass["changed"]}
    assert set(changed) == {*CLASS_BUGS, UNTOUCHED}
    assert changed[UNTOUCHED]["attempted"] is False and changed["perfect"]["attempted"] is True
    assert all(not c["graded_before"] for c in changed.values())
    assert changed["perfect"]["new"] == klass["scores"]["perfect"] == 8
    lines = insights.change_lines(klass["changed"])
    assert f"  {UNTOUCHED} {LESSON}: - -> 0 (not attempted)" in lines
    html = (klass["out"] / "insights.html").read_text(encoding="utf-8")
    help_section = html.split('<h2 id="help">')[1].split("<h2")[0]
    assert f"{LESSON}</a>: not attempted" in help_section
    assert "perfect" not in help_section and "attention_and_softmax" in help_section


@pytest.mark.grading
def test_the_page_is_rebuilt_from_the_state_alone(klass):
    """What a resumed run does: the outputs written again from the gradebook and the state are the same."""
    from autograder.grading import intake, results

    out = klass["out"]
    before = {name: (out / name).read_text(encoding="utf-8") for name in ("insights.html", "misconceptions.csv")}
    s = Settings(out=str(out), lessons=[LESSON])
    roster = intake.collect(out.parent / "class", [LESSON], out)
    insights.write(s, results.read_rows(s, roster), klass["changed"])
    assert {name: (out / name).read_text(encoding="utf-8") for name in before} == before
    assert 'href="insights.html"' in (out / "report.html").read_text(encoding="utf-8")
