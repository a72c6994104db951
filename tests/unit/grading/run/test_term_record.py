"""The term OUT keeps (``autograder/grading/run/term.py``), without a kernel: downloads taken in one after another keep
every earlier hand-in; a lesson not handed in is ``not handed in`` (no score) until it is closed; an older copy never
replaces a later one; an OUT of an earlier version becomes a term without grading anything again."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest

from autograder.grading.intake import class_roster
from autograder.grading.records import outcome
from autograder.grading.run import term

WARMUP, EXERCISES = "01_warmup", "05_exercises"


def _download(tmp_path: Path, name: str, handed: dict, **extra) -> class_roster.Roster:
    """A roster as intake gives it: {student: {lesson: bytes or a status}} for the lessons WARMUP and EXERCISES."""
    root = tmp_path / name
    roster = class_roster.Roster(root=root, lms=extra.get("lms", ""))
    for sid, work in handed.items():
        roster.folders[sid] = roster.names[sid] = sid.upper()
        roster.lms_ids[sid] = extra.get("ids", {}).get(sid, "")
        roster.flags[sid] = []
        roster.entries[sid] = {}
        for lesson in (WARMUP, EXERCISES):
            got = work.get(lesson)
            if isinstance(got, bytes):
                path = root / sid / f"{lesson}.ipynb"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(got)
                entry = class_roster.Entry(sid, lesson, path, "ok", "")
            elif got is None:
                entry = class_roster.Entry(sid, lesson, None, "missing", f"no {lesson}.ipynb")
            else:
                entry = class_roster.Entry(sid, lesson, None, got, "a link")
            entry.submitted = extra.get("when", {}).get((sid, lesson), "")
            entry.late = (sid, lesson) in extra.get("late", ())
            roster.entries[sid][lesson] = entry
    return roster


def _statuses(out, t) -> dict:
    whole = term.roster(out, t, class_roster.Roster(root=out))
    return {(sid, lesson): e.status for sid, es in whole.entries.items() for lesson, e in es.items()}


def test_a_second_download_of_another_lesson_keeps_every_hand_in_of_the_first(tmp_path):
    out = tmp_path / "out"
    t = term.load(out)
    first = _download(tmp_path, "canvas-01", {"ann": {WARMUP: b"ann 01"}, "bob": {WARMUP: b"bob 01"}}, lms="canvas")
    term.take_in(out, t, first, [WARMUP])
    term.save(out, t)
    second = _download(tmp_path, "canvas-05", {"ann": {EXERCISES: b"ann 05"}, "cat": {EXERCISES: b"cat 05"}},
                       lms="canvas")
    t = term.load(out)
    term.take_in(out, t, second, [EXERCISES])
    term.save(out, t)
    t = term.load(out)
    assert t.lessons == [WARMUP, EXERCISES] and sorted(t.students) == ["ann", "bob", "cat"] and t.lms == "canvas"
    assert _statuses(out, t) == {("ann", WARMUP): "ok", ("ann", EXERCISES): "ok", ("bob", WARMUP): "ok",
                                 ("bob", EXERCISES): outcome.NOT_HANDED_IN, ("cat", WARMUP): outcome.NOT_HANDED_IN,
                                 ("cat", EXERCISES): "ok"}
    whole = term.roster(out, t, class_roster.Roster(root=out))
    assert whole.entries["bob"][WARMUP].path.read_bytes() == b"bob 01"  # kept in OUT: the download may be gone
    assert not whole.entries["bob"][EXERCISES].gradable and whole.folders["bob"] == "BOB"


def test_a_lesson_counts_missing_only_once_it_is_closed_and_the_students_are_listed(tmp_path):
    out = tmp_path / "out"
    t = term.load(out)
    term.take_in(out, t, _download(tmp_path, "d", {"ann": {WARMUP: b"a"}, "bob": {EXERCISES: b"b"}}),
                 [WARMUP, EXERCISES])
    before = copy.deepcopy(t)
    term.close(t, [WARMUP])
    assert _statuses(out, t)[("bob", WARMUP)] == "missing" and _statuses(out, t)[("ann", WARMUP)] == "ok"
    assert _statuses(out, t)[("ann", EXERCISES)] == outcome.NOT_HANDED_IN
    assert term.newly_missing(before, t) == [("bob", WARMUP)]
    assert term.newly_missing(t, t) == []  # closing again lists no one twice
    late = _download(tmp_path, "late", {"bob": {WARMUP: b"b late"}})
    term.take_in(out, t, late, [WARMUP])
    assert _statuses(out, t)[("bob", WARMUP)] == "ok"  # handed in after the close: graded, not missing


def test_a_refused_hand_in_replaces_the_earlier_one_which_is_kept_and_a_missing_one_never_does(tmp_path):
    out = tmp_path / "out"
    t = term.load(out)
    term.take_in(out, t, _download(tmp_path, "a", {"ann": {WARMUP: b"good"}}), [WARMUP])
    term.take_in(out, t, _download(tmp_path, "b", {"ann": {}}), [WARMUP])  # not in this download
    assert _statuses(out, t)[("ann", WARMUP)] == "ok"
    term.take_in(out, t, _download(tmp_path, "a2", {"ann": {WARMUP: b"good"}}), [WARMUP])  # the same bytes again
    assert not (term.folder(out) / "ann" / "earlier").exists()
    term.take_in(out, t, _download(tmp_path, "c", {"ann": {WARMUP: "refused"}}), [WARMUP])
    assert _statuses(out, t)[("ann", WARMUP)] == "refused"
    assert not (term.folder(out) / "ann" / f"{WARMUP}.ipynb").exists()
    kept = list((term.folder(out) / "ann" / "earlier").glob("*.ipynb"))  # the replaced hand-in is never dropped
    assert [p.read_bytes() for p in kept] == [b"good"] and kept[0].with_suffix(".json").exists()


def test_an_older_copy_graded_again_never_replaces_a_later_one(tmp_path):
    out = tmp_path / "out"
    t = term.load(out)
    new = {("ann", WARMUP): "2026-10-02T10:00:00+00:00"}
    old = {("ann", WARMUP): "2026-10-01T10:00:00+00:00"}
    term.take_in(out, t, _download(tmp_path, "new", {"ann": {WARMUP: b"v2"}}, when=new, late={("ann", WARMUP)}),
                 [WARMUP])
    notes = term.take_in(out, t, _download(tmp_path, "old", {"ann": {WARMUP: b"v1"}}, when=old), [WARMUP])
    assert len(notes) == 1 and "the later one is kept" in notes[0]
    whole = term.roster(out, t, class_roster.Roster(root=out))
    entry = whole.entries["ann"][WARMUP]
    assert entry.path.read_bytes() == b"v2" and entry.late and entry.submitted == new[("ann", WARMUP)]


def test_an_unreadable_term_record_stops_the_run_with_what_to_do(tmp_path):
    (tmp_path / term.FILE).write_text("{not json")
    with pytest.raises(class_roster.LayoutError, match="restore it from a backup"):
        term.load(tmp_path)


def test_an_out_of_an_earlier_version_becomes_the_term_with_nothing_to_grade_again(tmp_path):
    out = tmp_path
    graded = out / "course" / "submitted" / "ann" / WARMUP / f"{WARMUP}.ipynb"
    graded.parent.mkdir(parents=True)
    graded.write_bytes(b"the graded copy")
    record = out / "state" / "ann" / f"{WARMUP}.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"graded": True, "hash": "of-the-original", "score": 8}))
    (out / "course.json").write_text(json.dumps({"key": "k", "lessons": [WARMUP]}))
    (out / "student_ids.csv").write_text("student,folder,lms id\nann,Ann A,123\n")
    t = term.load(out)
    assert t.lessons == [WARMUP] and t.students["ann"] == {"folder": "Ann A", "lms_id": "123", "flags": []}
    assert json.loads(record.read_text())["hash"] == hashlib.sha256(b"the graded copy").hexdigest()
    assert _statuses(out, term.load(out)) == {("ann", WARMUP): "ok"}  # written down: read the same way again


def test_a_copy_the_grading_folder_lost_is_a_grading_error_never_a_score(tmp_path):
    from autograder.grading.records.settings import Settings
    from autograder.grading.reports import results

    out = tmp_path / "out"
    t = term.load(out)
    term.take_in(out, t, _download(tmp_path, "a", {"ann": {WARMUP: b"good"}}), [WARMUP])
    (term.folder(out) / "ann" / f"{WARMUP}.ipynb").unlink()  # OUT lost it, not the learner
    whole = term.roster(out, t, class_roster.Roster(root=out))
    assert whole.entries["ann"][WARMUP].status == outcome.GRADING_ERROR
    cell, flags = results._lesson_result(None, Settings(out=str(out), lessons=[WARMUP]), whole, "ann", WARMUP, 8.0)
    assert (cell["status"], cell["score"]) == (outcome.GRADING_ERROR, None) and "restore it" in cell["reason"]
    assert results.grading_errors([{"student": "ann", "lessons": {WARMUP: cell}}])  # exit 4, listed first


def test_a_file_that_vanishes_before_it_is_copied_is_the_learners_malformed_hand_in(tmp_path):
    out = tmp_path / "out"
    t = term.load(out)
    roster = _download(tmp_path, "a", {"ann": {WARMUP: b"good"}})
    roster.entries["ann"][WARMUP].path.unlink()
    term.take_in(out, t, roster, [WARMUP])
    assert _statuses(out, t)[("ann", WARMUP)] == "malformed"
