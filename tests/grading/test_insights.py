"""The instructor's insights (``autograder/grading/reports/insights.py``): every count of ``misconceptions.csv`` and
every difficulty figure of a synthetic class graded through the real command, marked, and graded again
(tests/helpers/insights_class.py), and the pieces that need no kernel (how a failed test names a bug, the
point-biserial correlation)."""

from __future__ import annotations

import csv
import html as html_text
import re

import numpy as np
import pytest

from autograder import course
from autograder.checks import registry
from autograder.checks.runner import Case, call_learner
from autograder.checks.verdict import WrongAnswer
from autograder.course import answers
from autograder.grading.records import items
from autograder.grading.records.settings import Settings
from autograder.grading.reports import insights
from insights_class import (ATTENTION_BUGS, CLASS_BUGS, LEFT_AS_GIVEN, LESSON, LESSON01_STUDENTS, LESSON05,
                            LESSON05_STUDENTS, MARKS, PARTIAL, SOFTMAX_BUGS, SYNTAX_ERROR, UNNAMED_STUDENTS, UNTOUCHED,
                            graded_class, softmax_tests, written_points)


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    return graded_class(tmp_path_factory)


def _csv(out):
    with (out / "misconceptions.csv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _section(html: str, anchor: str) -> str:
    return html.split(f'<h2 id="{anchor}">')[1].split("<h2")[0]


def _item_rows(html: str, lesson: str) -> dict:
    """item -> the texts of its row in the item analysis of ``lesson``."""
    table = _section(html, "items")
    return {gid: [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for gid, row in re.findall(rf'<tr id="item-{lesson}-(\w+)">(.*?)</tr>', table, re.S)}


def _report_flags(out) -> dict:
    """student -> the flags report.html lists for them."""
    html = (out / "report.html").read_text(encoding="utf-8")
    rows = re.findall(r"<tr><td>([^<]+)(?:<br>.*?)?</td>.*?<td><ul>(.*?)</ul></td></tr>", html, re.S)
    return {student: re.findall(r"<li>(.*?)</li>", flags) for student, flags in rows}


def expected_rows() -> set:
    """(student, test, bug) of every failure the class must show: each bug costs its catalogued tests."""
    rows = {(st, gid, b.id) for st, wrong in CLASS_BUGS.items() for b in wrong for gid in b.tests}
    rows |= {(st, gid, "unnamed") for st in UNNAMED_STUDENTS for gid in softmax_tests()}
    return rows


# ------------------------------------------------------------------------------------------------ no kernel
def test_a_failed_check_names_its_bug_only_when_the_test_decided_it():
    b = SOFTMAX_BUGS[0]
    assert WrongAnswer(f"{b.diagnosis} [{b.id}] (on input x)").bug_id is None  # a message's words name nothing
    named = WrongAnswer.naming(b, "on input x")
    assert named.bug_id == b.id and str(named) == f"{b.diagnosis} [{b.id}] (on input x)"
    assert not WrongAnswer("softmax is not implemented yet: replace ...").unanswered  # nor make it unanswered


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
    assert {r["lesson"] for r in rows} == {LESSON, LESSON05}
    lesson01 = [r for r in rows if r["lesson"] == LESSON]
    assert sorted((r["student"], r["test"], r["bug"]) for r in lesson01) == sorted(expected_rows())
    assert not any(r["student"] in ("perfect", UNTOUCHED) for r in rows)
    assert {r["student"] for r in rows if r["lesson"] == LESSON05} == {PARTIAL}
    for r in rows:
        assert r["feedback"] == f"feedback/{r['student']}/{r['lesson']}.html"
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
    found = {gid: (int(row[2]), int(row[3]), row[5]) for gid, row in _item_rows(html, LESSON).items()}
    attempted = len(CLASS_BUGS)  # each answered every test; the untouched notebook answered none
    expected = {gid: (attempted, 1, f"{100 * (1 - len(failed.get(gid, ())) / attempted):.0f}%")
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
    changed = {(c["student"], c["lesson"]): c for c in klass["changed"]}
    assert set(changed) == {*((st, LESSON) for st in [*CLASS_BUGS, UNTOUCHED]), *((st, LESSON05) for st in
                                                                                  LESSON05_STUDENTS)}
    for lesson in (LESSON, LESSON05):
        assert changed[UNTOUCHED, lesson]["attempted"] is False and changed["perfect", lesson]["attempted"] is True
    assert changed[PARTIAL, LESSON05]["attempted"] is True
    assert all(not c["graded_before"] for c in changed.values())
    assert changed["perfect", LESSON]["new"] == klass["scores"]["perfect"] == 8
    lines = insights.change_lines(klass["changed"])
    assert f"  {UNTOUCHED} {LESSON}: - -> 0 (not attempted)" in lines
    html = (klass["out"] / "insights.html").read_text(encoding="utf-8")
    help_section = _section(html, "help")
    assert f"{LESSON}</a>: not attempted" in help_section and f"{LESSON05}</a>: not attempted" in help_section
    assert "perfect" not in help_section and "attention_and_softmax" in help_section


@pytest.mark.grading
def test_the_page_is_rebuilt_from_the_state_alone(klass):
    """What a resumed run does: the outputs written again from the gradebook and the state are the same."""
    from autograder.grading.intake import class_folder
    from autograder.grading.reports import results
    from autograder.grading.run import term

    out = klass["out"]
    before = {name: (out / name).read_text(encoding="utf-8") for name in ("insights.html", "misconceptions.csv")}
    s = Settings(out=str(out), lessons=[LESSON, LESSON05])
    roster = term.roster(out, term.load(out), class_folder.collect(out.parent / "class", [LESSON, LESSON05], out))
    insights.write(s, results.read_rows(s, roster), klass["changed_by_marks"])
    assert {name: (out / name).read_text(encoding="utf-8") for name in before} == before
    assert 'href="insights.html"' in (out / "report.html").read_text(encoding="utf-8")


@pytest.mark.grading
def test_untouched_and_handed_out_code_is_not_attempted_never_a_misconception(klass):
    """Lesson 05 hands out code with a bug to find: left as given, it is work not done, not the learner's bug."""
    rows = _csv(klass["out"])
    assert not [r for r in rows if r["student"] == UNTOUCHED]
    assert not [r for r in rows if r["student"] == PARTIAL and r["test"] in LEFT_AS_GIVEN.tests]
    assert not [r for r in rows if r["bug"] != "unnamed" and r["lesson"] == LESSON05]
    html = (klass["out"] / "insights.html").read_text(encoding="utf-8")
    assert f'id="bug-{LESSON05}-' not in html
    lesson05 = _section(html, "distributions").split(f"<h3>{LESSON05}</h3>")[1].split("<h3>")[0]
    assert f"{len(LESSON05_STUDENTS)} notebooks graded (1 not attempted" in lesson05, lesson05


@pytest.mark.grading
def test_the_manual_points_have_their_histogram_marked_apart_from_pending(klass):
    html = (klass["out"] / "insights.html").read_text(encoding="utf-8")
    lesson05 = _section(html, "distributions").split(f"<h3>{LESSON05}</h3>")[1].split("<h3>")[0]
    alt = html_text.unescape(re.search(r'alt="([^"]*)"', lesson05).group(1))
    marked = [st for st, given in MARKS.items() if set(given) == set(written_points())]
    pending = [st for st, given in MARKS.items() if set(given) != set(written_points())]
    manual = re.search(r"Histogram of the manual scores of (\d+) students in lesson \w+: median ([\d.]+) of ([\d.]+) "
                       r"points", alt)
    assert manual, alt
    assert (int(manual.group(1)), float(manual.group(2)), float(manual.group(3))) == (
        len(marked), float(np.median([sum(MARKS[st].values()) for st in marked])), sum(written_points().values()))
    assert f"{len(pending)} students' written answers still await the instructor" in alt


@pytest.mark.grading
def test_item_analysis_covers_answered_items_only_and_uses_the_marks(klass):
    html = (klass["out"] / "insights.html").read_text(encoding="utf-8")
    found = _item_rows(html, LESSON05)
    points = written_points()
    tests = registry.tests_of(LESSON05)
    assert set(found) == set(tests) | set(points)
    for gid in tests:  # the untouched notebook answers nothing, the partial one all but the code left as given
        answered = len(LESSON05_STUDENTS) - (2 if gid in LEFT_AS_GIVEN.tests else 1)
        assert (found[gid][1], int(found[gid][2]), int(found[gid][3]), int(found[gid][4])) == (
            "hidden test", answered, len(LESSON05_STUDENTS) - answered, 0), (gid, found[gid])
    syntax_tests = [gid for gid, t in tests.items() if SYNTAX_ERROR[0] in t.uses]  # the perfect student passes
    assert syntax_tests and all(found[gid][5] == "50%" for gid in syntax_tests)
    for gid, maximum in points.items():  # answered by two students; the marks decide, a pending one is left out
        marks = [MARKS[st][gid] / maximum for st in MARKS if gid in MARKS[st]]
        blank = len(LESSON05_STUDENTS) - len(MARKS)  # the untouched notebook
        assert (found[gid][1], int(found[gid][2]), int(found[gid][3]), int(found[gid][4])) == (
            "written answer", len(marks), blank, len(MARKS) - len(marks)), (gid, found[gid])
        assert found[gid][5] == f"{100 * sum(marks) / len(marks):.0f}%"


@pytest.mark.grading
def test_failures_are_named_by_what_they_are(klass):
    rows = {(r["student"], r["lesson"], r["test"]): r["result"] for r in _csv(klass["out"])}
    syntax_tests = [gid for gid, t in registry.tests_of(LESSON05).items() if SYNTAX_ERROR[0] in t.uses]
    assert syntax_tests and all(rows[PARTIAL, LESSON05, gid] == "SyntaxError" for gid in syntax_tests)
    for gid in softmax_tests():
        assert rows["attention_and_uncatalogued", LESSON, gid] == "wrong result"
        assert rows["attention_and_forged", LESSON, gid] == "ValueError"  # what the learner's softmax raised
    for st, wrong in CLASS_BUGS.items():
        for b in wrong:
            assert all(rows[st, LESSON, gid] == "catalogued bug" for gid in b.tests)
    unnamed = _section((klass["out"] / "insights.html").read_text(encoding="utf-8"), "unnamed")
    assert f"{PARTIAL}</a> (SyntaxError)" in unnamed


@pytest.mark.grading
def test_marks_that_came_in_are_what_the_run_after_them_changed(klass):
    changed = {(c["student"], c["lesson"]): c for c in klass["changed_by_marks"]}
    assert set(changed) == {(st, LESSON05) for st in MARKS}
    before, after = klass["marked"]["before"], klass["marked"]["after"]
    lines = insights.change_lines(klass["changed_by_marks"])
    html = _section((klass["out"] / "insights.html").read_text(encoding="utf-8"), "changed")
    for st, given in MARKS.items():
        assert after[st] - before[st] == sum(given.values())  # the written answers scored 0 until marked
        assert (changed[st, LESSON05]["old"], changed[st, LESSON05]["new"]) == (before[st], after[st])
        assert f"  {st} {LESSON05}: {before[st]:g} -> {after[st]:g} (attempted; " in "\n".join(lines)
        told = next(line for line in lines if line.startswith(f"  {st} {LESSON05}: "))
        assert told.endswith("your marks)"), told
        assert re.search(rf'{st}</td>.*?{LESSON05}</a></td>\s*<td class="num">{before[st]:g}( \([a-z ]+\))?</td>\s*'
                         rf'<td class="num">{after[st]:g}( \([a-z ]+\))?</td>', html, re.S), html
    assert "graded no notebook" not in html


@pytest.mark.grading
def test_every_student_with_nothing_handed_in_or_an_untouched_notebook_is_flagged(klass):
    flags = _report_flags(klass["out"])
    with (klass["out"] / "grades.csv").open(encoding="utf-8") as fh:
        csv_flags = {r["student"]: r["flags"] for r in csv.DictReader(fh)}
    assert set(flags) == set(csv_flags) == {*CLASS_BUGS, UNTOUCHED, PARTIAL}
    for lesson in (LESSON, LESSON05):
        assert any(f.startswith(f"{lesson}: not attempted") for f in flags[UNTOUCHED]), flags[UNTOUCHED]
        assert f"{lesson}: not attempted" in csv_flags[UNTOUCHED]
    for lesson, students in ((LESSON, LESSON01_STUDENTS), (LESSON05, LESSON05_STUDENTS)):
        for st in set(flags) - set(students):  # nothing handed in for the lesson
            assert any(f.startswith(f"{lesson}: not handed in yet") for f in flags[st]), (st, flags[st])
    assert not any("not attempted" in f for st in flags if st != UNTOUCHED for f in flags[st])


def test_every_hidden_test_grades_names_that_an_answer_cell_defines_as_handed_out():
    """What makes a test left as handed out "not answered": its graded names are found in the answer cells the
    learner received, and an untouched notebook leaves every one of them as it was."""
    for lesson in course.lesson_names():
        handed = answers.student_notebook(lesson)
        defined = items.defined_in(handed)
        for gid, test in registry.tests_of(lesson).items():
            assert {*test.uses, *test.together} <= set(defined), (lesson, gid)
        cells = set(defined.values())
        assert cells <= items.untouched(answers.fill(lesson, complete=False), handed)
        assert not cells & items.untouched(answers.fill(lesson), handed), lesson
