"""LMS downloads read into the class: Canvas, Moodle, Blackboard, Brightspace and nbgrader's exchange, as folders
and as zips, with each student's LMS id kept; a folder no layout fits gets a hint. No kernel."""

from __future__ import annotations

import csv
import zipfile
from pathlib import Path

import pytest

from autograder.grading.intake import class_folder, class_roster, lms_layouts

LESSONS = ["01_warmup", "02_multi_head"]
NOTEBOOK = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def _class(root: Path, files) -> Path:
    for rel in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(NOTEBOOK if rel.endswith(".ipynb") else "receipt")
    return root


def _summary(roster) -> dict:
    """{display name: (LMS ids, {lesson: (status, file name)})}"""
    return {roster.folders[sid]: (roster.lms_ids.get(sid, ""),
                                  {lesson: (e.status, e.path.name if e.path else None) for lesson, e in es.items()})
            for sid, es in roster.entries.items()}


CANVAS = ["abcxyz_12345_9001_01_warmup.ipynb", "abcxyz_12345_9002_02_multi_head.ipynb",
          "doejane_LATE_777_9003_01_warmup-1.ipynb", "doejane_777_9004_02-Multi-Head.ipynb"]


def test_canvas_flat_download_is_read_per_user_id(tmp_path):
    roster = class_folder.collect(_class(tmp_path / "c", CANVAS), LESSONS, tmp_path / "out")
    assert roster.lms == "canvas"
    assert _summary(roster) == {
        "abcxyz_12345": ("12345", {"01_warmup": ("ok", CANVAS[0]), "02_multi_head": ("ok", CANVAS[1])}),
        # Canvas's "-1" of a resubmission is Canvas's, not the learner's misnaming
        "doejane_777": ("777", {"01_warmup": ("ok", CANVAS[2]), "02_multi_head": ("misnamed", CANVAS[3])}),
    }


def test_canvas_zip_is_read_the_same_and_a_refused_one_leaves_nothing(tmp_path):
    folder = _class(tmp_path / "c", CANVAS)
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in folder.iterdir():
            zf.write(path, path.name)
    roster = class_folder.collect(archive, LESSONS, tmp_path / "out")
    assert {k: v[0] for k, v in _summary(roster).items()} == {"abcxyz_12345": "12345", "doejane_777": "777"}
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("notes.txt", "no notebook here")
    with pytest.raises(class_roster.LayoutError):
        class_folder.collect(bad, LESSONS, tmp_path / "out2")
    assert not (tmp_path / "out2" / class_folder.UNZIPPED).exists()


def test_moodle_folders_and_flat_files(tmp_path):
    folders = _class(tmp_path / "m", ["Jane Doe_4211_assignsubmission_file_/01_warmup.ipynb",
                                      "Ivan Petrov_4212_assignsubmission_file_/02_multi_head.ipynb"])
    roster = class_folder.collect(folders, LESSONS, tmp_path / "out")
    assert roster.lms == "moodle"
    got = _summary(roster)
    assert got["Jane Doe"] == ("4211", {"01_warmup": ("ok", "01_warmup.ipynb"),
                                        "02_multi_head": ("missing", None)})
    assert got["Ivan Petrov"][0] == "4212"
    flat = _class(tmp_path / "mf", ["Jane Doe_4211_assignsubmission_file_01_warmup.ipynb",
                                    "Jane Doe_4211_assignsubmission_file_02_multi_head.ipynb"])
    roster = class_folder.collect(flat, LESSONS, tmp_path / "out")
    assert _summary(roster) == {"Jane Doe": ("4211", {"01_warmup": ("ok", "Jane Doe_4211_assignsubmission_file_"
                                                                           "01_warmup.ipynb"),
                                                      "02_multi_head": ("ok", "Jane Doe_4211_assignsubmission_file_"
                                                                              "02_multi_head.ipynb")})}


def test_blackboard_grades_the_latest_attempt_and_skips_receipts(tmp_path):
    root = _class(tmp_path / "b", [
        "Lesson 1_jdoe_attempt_2026-11-02-09-00-00_01_warmup.ipynb",
        "Lesson 1_jdoe_attempt_2026-11-03-10-30-00_01_warmup.ipynb",
        "Lesson 1_jdoe_attempt_2026-11-03-10-30-00.txt"])
    roster = class_folder.collect(root, LESSONS, tmp_path / "out")
    assert roster.lms == "blackboard"
    ids, lessons = _summary(roster)["jdoe"]
    assert ids == "jdoe" and lessons["01_warmup"] == ("ok", "Lesson 1_jdoe_attempt_2026-11-03-10-30-00_"
                                                            "01_warmup.ipynb")
    assert any("2026-11-02" in note and "earlier copy" in note for note in roster.notes)


def test_brightspace_flat_download(tmp_path):
    root = _class(tmp_path / "d", ["151039-459402 - Jane Doe- Dec 3, 2026 1005 AM - 01_warmup.ipynb",
                                   "151040-459403 - Ivan Petrov - Dec 2, 2026 905 PM - 01_warmup.ipynb",
                                   "index.html"])
    roster = class_folder.collect(root, LESSONS, tmp_path / "out")
    assert roster.lms == "brightspace"
    assert {name: lessons["01_warmup"][0] for name, (_, lessons) in _summary(roster).items()} == {
        "Jane Doe": "ok", "Ivan Petrov": "ok"}


def test_nbgrader_exchange_inbound_takes_the_latest_submission(tmp_path):
    root = _class(tmp_path / "x", ["alice+01_warmup+2026-11-01 10:00:00.000000 UTC+aa/01_warmup.ipynb",
                                   "alice+01_warmup+2026-11-02 10:00:00.000000 UTC+bb/01_warmup.ipynb",
                                   "bob+02_multi_head+2026-11-02 11:00:00.000000 UTC+cc/02_multi_head.ipynb"])
    roster = class_folder.collect(root, LESSONS, tmp_path / "out")
    assert roster.lms == "nbgrader-exchange"
    entries = roster.entries["alice"]
    assert entries["01_warmup"].path.parent.name.endswith("+bb")
    assert roster.entries["bob"]["02_multi_head"].status == "ok"


def test_a_plain_class_of_student_folders_is_not_an_lms_download(tmp_path):
    root = _class(tmp_path / "p", ["alice/01_warmup.ipynb", "bob_12_34_x/01_warmup.ipynb"])
    roster = class_folder.collect(root, LESSONS, tmp_path / "out")
    assert roster.lms == "" and roster.students == ["alice", "bob_12_34_x"]


def test_one_student_cannot_make_the_class_an_lms_download(tmp_path):
    """A layout is taken only when every name at the top follows it: a student folder named like Moodle's does not
    turn the others' folders into something else."""
    root = _class(tmp_path / "p", ["alice/01_warmup.ipynb", "Eve_1_assignsubmission_file_/01_warmup.ipynb"])
    roster = class_folder.collect(root, LESSONS, tmp_path / "out")
    assert roster.lms == "" and set(roster.folders.values()) == {"alice", "Eve_1_assignsubmission_file_"}


def test_flat_notebooks_that_follow_no_layout_get_a_hint_for_the_nearest(tmp_path):
    root = _class(tmp_path / "h", ["abcxyz_12345_9001_01_warmup.ipynb", "renamed by hand.ipynb"])
    with pytest.raises(class_roster.LayoutError) as err:
        class_folder.collect(root, LESSONS, tmp_path / "out")
    message = str(err.value)
    assert "1 of 2 names follow Canvas's download layout" in message and "'renamed by hand.ipynb'" in message
    assert "<name>_<user id>_<submission id>_<lesson>.ipynb" in message  # the accepted layouts are listed


@pytest.mark.parametrize("name,is_dir,system,student,lms_id", [
    ("abcxyz_12345_9001_01_warmup.ipynb", False, "canvas", "abcxyz_12345", "12345"),
    ("Jane Doe_4211_assignsubmission_file_", True, "moodle", "Jane Doe", "4211"),
    ("Jane Doe_4211_assignsubmission_file", True, "moodle", "Jane Doe", "4211"),
    ("A_b_jdoe_attempt_2026-11-03-10-30-00_01_warmup.ipynb", False, "blackboard", "jdoe", "jdoe"),
])
def test_each_layout_names_the_student_and_the_lms_id(name, is_dir, system, student, lms_id):
    download = lms_layouts.recognise({name: is_dir})
    assert download.system == system
    assert (download.files[0].student, download.files[0].lms_id) == (student, lms_id)


def _handed_in(roster, folder, lesson) -> tuple:
    sid = next(sid for sid, name in roster.folders.items() if name == folder)
    e = roster.entries[sid][lesson]
    return e.submitted, e.late, e.lms_id


def test_late_marks_and_submission_times_are_kept(tmp_path):
    """Canvas's _LATE_ marks the lesson late (its names carry no time); Blackboard's attempt time, Brightspace's date
    and the exchange's timestamp are the submission time, of the copy graded; Moodle's participant id is kept per
    lesson."""
    canvas = class_folder.collect(_class(tmp_path / "c", CANVAS), LESSONS, tmp_path / "out")
    assert _handed_in(canvas, "doejane_777", "01_warmup") == ("", True, "777")
    assert _handed_in(canvas, "doejane_777", "02_multi_head") == ("", False, "777")
    assert _handed_in(canvas, "abcxyz_12345", "01_warmup") == ("", False, "12345")
    board = class_folder.collect(_class(tmp_path / "b", ["Lesson 1_jdoe_attempt_2026-11-02-09-00-00_01_warmup.ipynb",
                                                         "Lesson 1_jdoe_attempt_2026-11-03-10-30-00_01_warmup.ipynb"]),
                                 LESSONS, tmp_path / "out")
    assert _handed_in(board, "jdoe", "01_warmup") == ("2026-11-03T10:30:00", False, "jdoe")
    space = class_folder.collect(
        _class(tmp_path / "d", ["151039-459402 - Jane Doe - Dec 3, 2026 1005 PM - 01_warmup.ipynb"]), LESSONS,
        tmp_path / "out")
    assert _handed_in(space, "Jane Doe", "01_warmup")[0] == "2026-12-03T22:05:00"
    exchange = class_folder.collect(_class(tmp_path / "x", [
        "alice+01_warmup+2026-11-01 10:00:00.000000 UTC+aa/01_warmup.ipynb",
        "alice+01_warmup+2026-11-02 10:00:00.000000 UTC+bb/01_warmup.ipynb"]), LESSONS, tmp_path / "out")
    assert _handed_in(exchange, "alice", "01_warmup")[0] == "2026-11-02T10:00:00+00:00"
    first = class_folder.collect(_class(tmp_path / "m1", ["Jane Doe_4211_assignsubmission_file_/01_warmup.ipynb"]),
                                 LESSONS, tmp_path / "out")
    second = class_folder.collect(_class(tmp_path / "m2", ["Jane Doe_5211_assignsubmission_file_/02_multi_head.ipynb"]),
                                  LESSONS, tmp_path / "out", earlier={"Jane Doe": {"01_warmup": "4211"}})
    assert _handed_in(first, "Jane Doe", "01_warmup")[2] == "4211"  # each assignment's download: its own ids,
    assert _handed_in(second, "Jane Doe", "02_multi_head")[2] == "5211"  # one student across assignments
    assert list(second.flags.values()) == [[]]


def test_nbgrader_collect_keeps_its_timestamp(tmp_path):
    root = _class(tmp_path / "course" / "submitted", ["alice/01_warmup/01_warmup.ipynb",
                                                      "bob/01_warmup/01_warmup.ipynb"])
    (root / "alice" / "01_warmup" / "timestamp.txt").write_text("2026-10-02 08:30:00.123456 UTC")
    (root / "bob" / "01_warmup" / "timestamp.txt").write_text("not a time")
    roster = class_folder.collect(root, LESSONS, tmp_path / "out")
    assert roster.entries["alice"]["01_warmup"].submitted == "2026-10-02T08:30:00.123456+00:00"
    assert roster.entries["bob"]["01_warmup"].submitted == ""
    assert roster.entries["bob"]["01_warmup"].flags == [
        "timestamp.txt ignored (not a date and time (ParserError)): graded without a submission time"]


@pytest.mark.parametrize("when,due,late", [
    ("2026-10-02T00:00:01+00:00", "2026-10-01T23:59Z", True),
    ("2026-10-01T23:58:00+00:00", "2026-10-01T23:59Z", False),
    ("2026-10-01T23:00:00", "2026-10-01", False),  # a date alone is the end of that day
    ("2026-10-02T00:00:00", "2026-10-01", True),
    ("2026-10-01T22:30:00+00:00", "2026-10-02T00:00+02:00", True),  # offsets compared as times
    ("", "2026-10-01", False),  # no time: only the LMS's own mark says late
])
def test_a_due_date_marks_later_work_late(when, due, late):
    from autograder.grading.records.settings import Settings
    from autograder.grading.reports import results

    s = Settings(out="unused", lessons=LESSONS, due={"01_warmup": due})
    entry = class_roster.Entry("alice", "01_warmup", submitted=when)
    assert results.handed_in(s, entry) == {"lms_id": "", "late": late, "submitted": when}
    assert results.handed_in(s, class_roster.Entry("alice", "01_warmup", late=True))["late"]  # Canvas's _LATE_ stays


def _row(student, folder, lms_id, **lessons):
    return {"student": student, "folder": folder, "lms_id": lms_id, "lessons": {
        lesson: {"status": status, "score": score, "max": 10.0, "lms_id": pid, "late": False, "submitted": ""}
        for lesson, (status, score, pid) in lessons.items()}}


def test_an_import_file_never_holds_a_provisional_score(tmp_path):
    """Points pending, a grading error or a lesson not graded yet: the lesson is left empty, never a number an LMS
    would take for final; missing work is a final 0. (Without the instructor's export: the files the rows alone
    make; tests/unit/grading/reports/test_lms_import_files.py fills the exports.)"""
    from dataclasses import replace

    from autograder.grading.records import outcome
    from autograder.grading.records.settings import Settings
    from autograder.grading.reports import lms_export

    s = Settings(out=str(tmp_path), lessons=["01_warmup", "05_exercises"])
    rows = [_row("ngada_31", "ngada_31", "31", **{"01_warmup": (outcome.GRADED, 9.0, "31"),
                                                  "05_exercises": (outcome.PENDING, 17.0, "31")}),
            _row("okafo_42", "okafo_42", "42", **{"01_warmup": (outcome.GRADING_ERROR, None, "42"),
                                                  "05_exercises": (outcome.MISSING, 0.0, "")}),
            _row("ruiz_57", "ruiz_57", "57", **{"01_warmup": (outcome.NOT_YET, None, "57"),
                                                "05_exercises": (outcome.GRADED, 26.0, "57")})]
    notes = lms_export.write(replace(s, lms="canvas"), rows)
    with (tmp_path / lms_export.FOLDER / "canvas.csv").open(newline="") as fh:
        _, _, *got = list(csv.reader(fh))
    assert {r[1]: r[5:] for r in got} == {"31": ["9", ""], "42": ["", "0"], "57": ["", "26"]}
    assert any("without your gradebook export" in note for note in notes)
    for row, moodle_ids in zip(rows, (("4211", "5211"), ("4212", ""), ("4213", "5214"))):
        for lesson, pid in zip(("01_warmup", "05_exercises"), moodle_ids):
            row["lessons"][lesson]["lms_id"] = pid  # Moodle: the participant id of that assignment's download
    lms_export.write(replace(s, lms="moodle"), rows)
    assert sorted(p.name for p in (tmp_path / lms_export.FOLDER).iterdir()) == [
        "moodle-01_warmup.csv", "moodle-05_exercises.csv"]  # canvas.csv of the earlier call is gone
    with (tmp_path / lms_export.FOLDER / "moodle-05_exercises.csv").open(newline="") as fh:
        header, *got = list(csv.reader(fh))
    assert header == ["Identifier", "Full name", "Grade", "Maximum grade", "Last modified (grade)"]
    # okafo_42 handed nothing in to that assignment: no participant id, so no row Moodle could match
    assert got == [["Participant 5211", "ngada_31", "", "10", ""], ["Participant 5214", "ruiz_57", "26", "10", ""]]


@pytest.mark.parametrize("option,value,says", [
    ("--due", "01=next friday", "Invalid isoformat string"),
    ("--due", "42=2026-10-01", "unknown lesson '42'"),
    ("--canvas-assignments", "01=Warm-up", "the number in its address"),
])
def test_a_bad_due_date_or_canvas_assignment_stops_the_command_before_grading(tmp_path, capsys, option, value, says):
    from autograder import grade

    with pytest.raises(SystemExit) as stopped:
        grade.main([str(tmp_path / "class"), "--out", str(tmp_path / "out"), option, value])
    assert stopped.value.code == grade.EXIT_LAYOUT and says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

