"""The pure parts of carrying the instructor's marks over a regrade (``autograder/grading/records/marks.py``): the
answer's hash, which marks hold and which go back to pending and why, and what the summary and a feedback page say. The
whole of it, through the grading command, is ``tests/grading/test_marks.py``."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

from autograder.grading.records import marks
from autograder.grading.reports import insights
from autograder.grading.run import feedback_files

ANSWER = "Reshape to (T, h, d_head), then\ntranspose to (h, T, d_head)."


def test_an_answer_saved_again_with_other_line_endings_spaces_or_unicode_form_keeps_its_hash():
    same = [ANSWER.replace("\n", "\r\n"), "\n" + ANSWER + "  \n\n", ANSWER.replace("\n", "   \n")]
    assert {marks.answer_hash(a) for a in same} == {marks.answer_hash(ANSWER)}
    assert marks.answer_hash("caf\u00e9") == marks.answer_hash("cafe\u0301")  # NFC and NFD
    assert marks.answer_hash(ANSWER.replace("then", "and")) != marks.answer_hash(ANSWER)
    assert marks.answer_hash("a  b") != marks.answer_hash("a b")  # spaces inside a line are the learner's text


def test_the_hash_of_a_plain_answer_is_the_one_earlier_records_hold():
    assert marks.answer_hash(ANSWER) == hashlib.sha256(ANSWER.strip().encode()).hexdigest()[:16]


def _grade(name, auto=None, manual=None, pending=True, max_score=2.0):
    return SimpleNamespace(name=name, auto_score=auto, manual_score=manual, extra_credit=None,
                           needs_manual_grade=pending, max_score=max_score)


def _gradebook(grades, comments):
    nb = SimpleNamespace(grades=grades, comments=comments)
    return SimpleNamespace(find_submission_notebook=lambda *a: nb, db=SimpleNamespace(commit=lambda: None)), nb


def _mark(score, answer, comment=None):
    return {"score": score, "extra_credit": None, "max": 2.0, "final": True, "answer": answer, "comment": comment}


def test_carry_keeps_marks_of_unchanged_answers_and_reopens_the_rest_with_the_reason():
    h = marks.answer_hash
    grades = [_grade("same"), _grade("changed"), _grade("deleted"), _grade("test", auto=1.0, pending=False),
              _grade("unknown")]
    comment = SimpleNamespace(name="same", manual_comment=None)
    gb, nb = _gradebook(grades, [comment])
    held = {"same": _mark(2.0, h("a"), "good"), "changed": _mark(1.0, h("b")), "deleted": _mark(1.0, h("c")),
            "test": _mark(0.5, None), "unknown": _mark(1.5, None), "gone": _mark(1.0, h("d"))}
    answers = {"same": h("a"), "changed": h("B"), "unknown": h("u")}
    reopened = marks.carry(gb, "05_exercises", "alice", held, answers)
    by_cell = {g.name: g for g in nb.grades}
    assert (by_cell["same"].manual_score, by_cell["same"].needs_manual_grade, comment.manual_comment) == \
        (2.0, False, "good")
    assert {r["cell"]: r["reason"] for r in reopened} == {
        "changed": marks.TEXT_CHANGED, "deleted": marks.CELL_GONE, "test": marks.TEST_REGRADED,
        "unknown": marks.ANSWER_UNKNOWN, "gone": marks.NOT_IN_LESSON}
    for name in ("changed", "deleted", "test", "unknown"):  # pending again, the mark kept in the gradebook
        assert by_cell[name].needs_manual_grade and by_cell[name].manual_score == held[name]["score"]


def test_a_mark_waiting_for_a_changed_answer_holds_again_when_the_marked_text_comes_back():
    gb, nb = _gradebook([_grade("w")], [])
    pending = {**_mark(1.0, marks.answer_hash("old")), "final": False}
    assert marks.carry(gb, "05", "bob", {"w": pending}, {"w": marks.answer_hash("old")}) == []
    assert not nb.grades[0].needs_manual_grade


def test_only_the_reopened_marks_still_pending_are_listed():
    reopened = [{"cell": c, "reason": r, "score": 1.0, "max": 2.0}
                for c, r in (("a", marks.TEXT_CHANGED), ("b", marks.TEXT_CHANGED), ("gone", marks.NOT_IN_LESSON))]
    assert [r["cell"] for r in marks.still_pending(reopened, {"pending_cells": ["a"]})] == ["a", "gone"]
    assert marks.reopened_lines(reopened[:1]) == [f"a: {marks.TEXT_CHANGED} (your mark, 1 of 2, is kept in the "
                                                  "gradebook and counts again once you grade it in formgrader)"]


def test_the_summary_shows_old_and_new_scores_and_the_marks_back_to_pending():
    reopened = [{"cell": "explain_w_o", "reason": marks.TEXT_CHANGED, "score": 1.0, "max": 2.0}]
    change = {"student": "alice", "lesson": "05_exercises", "old": 25.0, "old_status": "graded", "graded_before": True,
              "new": 24.0, "status": "pending manual", "attempted": True, "was_attempted": True,
              "why": "handed in again", "reopened": reopened}
    marked = {**change, "student": "bob", "old": 17.0, "old_status": "pending manual", "new": 17.0,
              "status": "graded", "why": "your marks", "reopened": []}
    closed = {**change, "student": "cy", "old": None, "old_status": "not handed in", "graded_before": False,
              "new": 0.0, "status": "missing", "attempted": None, "was_attempted": None,
              "why": "lesson closed: never handed in", "reopened": []}
    lines = insights.change_lines([change, marked, closed])
    assert lines[:3] == ["  alice 05_exercises: 25 -> 24 (attempted; graded -> pending manual; handed in again)",
                         "  bob 05_exercises: 17 -> 17 (attempted; pending manual -> graded; your marks)",
                         "  cy 05_exercises: - -> 0 missing (lesson closed: never handed in)"]
    assert lines[3].startswith("marks back to pending")
    assert lines[4:] == ["  alice 05_exercises " + marks.reopened_lines(reopened)[0]]


def test_a_feedback_page_says_what_changed_since_the_last_one_under_its_title():
    page = "<html><body><h1>05 (Score: 24.0 / 26.0)</h1><h1>other</h1></body></html>"
    assert feedback_files.with_changes(page, 24.0, 24.0, []) == page
    assert feedback_files.with_changes(page, None, 24.0, []) == page
    reopened = [{"cell": "explain<w_o>", "reason": marks.TEXT_CHANGED, "score": 1.0, "max": 2.0}]
    changed = feedback_files.with_changes(page, 25.0, 24.0, reopened)
    assert changed.startswith("<html><body><h1>05 (Score: 24.0 / 26.0)</h1>\n<div id=\"since-last\">")
    assert "Your score changed from 25 to 24" in changed and "<code>explain&lt;w_o&gt;</code>" in changed
    assert changed.count("since-last") == 1


def test_marks_given_to_another_s_hand_in_are_never_given_to_this_one_even_with_the_same_answers():
    """A hand-in by someone other than the one marked (``Entry.by`` differs: another Moodle participant or exchange
    user, another Brightspace submission under the same name) gets none of the marks, not even for answers copied
    word for word; nbgrader kept the score and comment through autograde, so they are taken off; each mark stays
    on record as reopened, with its reason."""
    h = marks.answer_hash
    kept = {"previous": {}, "marks": {"explain": _mark(2.0, h("a"), "Well argued."), "test": _mark(0.5, None)},
            "by": "user alice"}
    assert marks.for_hand_in(kept, "user alice") is kept and marks.for_hand_in(kept, "") is kept
    assert marks.for_hand_in({**kept, "by": ""}, "user mallory")["marks"] == kept["marks"]  # marked before it was known
    other = marks.for_hand_in(kept, "user mallory")
    assert marks.for_hand_in(other, "user mallory") == other  # a retry after a failed regrade decides the same
    written, test = _grade("explain", manual=2.0), _grade("test", auto=1.0, manual=0.5)
    comment = SimpleNamespace(name="explain", manual_comment="Well argued.")
    gb, _ = _gradebook([written, test], [comment])
    reopened = marks.carry(gb, "05_exercises", "alice", other["marks"], {"explain": h("a")})
    assert (written.manual_score, written.needs_manual_grade, comment.manual_comment) == (None, True, None)
    assert (test.manual_score, test.needs_manual_grade) == (None, False)  # its autograded score counts
    assert {r["cell"]: (r["reason"], r["score"], r.get("comment")) for r in reopened} == {
        "explain": (marks.OTHER_HAND_IN, 2.0, "Well argued."), "test": (marks.OTHER_HAND_IN, 0.5, None)}
    assert marks.reopened_lines(reopened)[0] == (
        f"explain: {marks.OTHER_HAND_IN} (your mark, 2 of 2, was for that hand-in and is not given to this one; "
        "mark it in formgrader)")
    assert kept["marks"]["explain"]["answer"] == h("a")  # the marks of the hand-in marked are left as they were
