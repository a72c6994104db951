"""The LMS import files, filled into the instructor's own export and read back as the LMS's importer reads them.

The exports are built as Canvas and Moodle write them (``tests/helpers/lms_files.py`` cites the documented rules and
the code that applies them); ``lms_files.canvas_import`` and ``lms_files.moodle_import`` read the written file with
Python's csv module, not with the course's own parser. Each test proves that only the graded lessons' final scores
(and Moodle's feedback on late work) change: every other cell, the header, the byte-order mark, the delimiter and the
quoting stay byte for byte as exported. No kernel.
"""

from __future__ import annotations

import re
from datetime import datetime

import lms_files
import pytest

from autograder.grading.records import outcome
from autograder.grading.records.settings import Settings
from autograder.grading.reports import lms_export

WARMUP, EXERCISES = "01_warmup", "05_exercises"
MAXIMA = {WARMUP: 10.0, EXERCISES: 30.0}


def _cell(lesson, status, score, lms_id="", late=False, submitted=""):
    return {"status": status, "score": score, "max": MAXIMA[lesson], "auto": score, "manual": None, "pending": 0.0,
            "reason": "", "lms_id": lms_id, "late": late, "submitted": submitted}


def _row(student, lms_id, **lessons):
    return {"student": student, "folder": student, "lms_id": lms_id, "flags": [],
            "lessons": {lesson: _cell(lesson, *value) for lesson, value in lessons.items()}}


def _write(tmp_path, rows, templates: dict, **settings) -> tuple:
    """(notes, {file name: bytes} of lms-import/) of ``lms_export.write`` with ``templates`` in lms-templates/."""
    folder = tmp_path / lms_export.TEMPLATES
    folder.mkdir(exist_ok=True)
    for name, data in templates.items():
        (folder / name).write_bytes(data)
    notes = lms_export.write(Settings(out=str(tmp_path), lessons=[WARMUP, EXERCISES], **settings), rows)
    written = tmp_path / lms_export.FOLDER
    return notes, {p.name: p.read_bytes() for p in sorted(written.iterdir())} if written.exists() else {}


def _raw_records(text: str, delimiter: str) -> list:
    """The records of a CSV text as lists of fields as they are written, quotes and all."""
    d = re.escape(delimiter)
    records, fields = [], []
    for m in re.finditer(f'("(?:[^"]|"")*"|[^{d}\r\n"]*)({d}|\r?\n|$)', text):
        fields.append(m[1])
        if m[2] != delimiter:
            records.append(fields)
            fields = []
            if m.end() == len(text):
                break
    return records


def _changed_cells(before: bytes, after: bytes, delimiter: str = ",") -> dict:
    """{(record, field): (old raw text, new raw text)} of every field that differs; the number of records and of
    fields in each must not."""
    old, new = (_raw_records(data.decode("utf-8"), delimiter) for data in (before, after))
    assert len(old) == len(new)
    changed = {}
    for i, (a, b) in enumerate(zip(old, new)):
        assert len(a) == len(b), (a, b)
        changed.update({(i, j): (x, y) for j, (x, y) in enumerate(zip(a, b)) if x != y})
    return changed


# ------------------------------------------------------------------------------------------------ Canvas

CANVAS_ASSIGNMENTS = [("Lesson 1: Warm-up", "101", 10.0), ("Lesson 5: Exercises", "105", 30.0), ("Project", "900", 50)]
CANVAS_STUDENTS = [("Ngada, Chi", 31, "s31", "ngada", "Section A", {}),
                   ("Okafor, Amaka", 42, "s42", "okafo", "Section A", {"101": "EX", "105": "3.00"}),
                   ("Ruiz, Carla", 57, "", "ruiz", "Section B, evening", {"101": "3.00", "105": "N/A"}),
                   ("Other, Person", 99, "s99", "other", "Section B", {"101": "4.00"})]


def _canvas_rows(late=False):
    return [_row("ngada_31", "31", **{WARMUP: (outcome.GRADED, 9.0, "31"), EXERCISES: (outcome.PENDING, 17.0, "31")}),
            _row("okafo_42", "42", **{WARMUP: (outcome.GRADED, 7.5, "42", late),
                                      EXERCISES: (outcome.GRADED, 20.0, "42")}),
            _row("ruiz_57", "57", **{WARMUP: (outcome.GRADED, 10.0, "57"), EXERCISES: (outcome.MISSING, 0.0, "")}),
            _row("khan_77", "77", **{WARMUP: (outcome.GRADED, 6.0, "77"), EXERCISES: (outcome.GRADING_ERROR, None)})]


def test_canvas_gradebook_export_is_filled_in_the_lessons_columns_only(tmp_path):
    export = lms_files.canvas_gradebook(CANVAS_STUDENTS, CANVAS_ASSIGNMENTS, manual_posting={"105"},
                                        custom_columns=["Notes"])
    notes, written = _write(tmp_path, _canvas_rows(), {"2026-10-05T1200_Grades-MHA.csv": export}, lms="canvas")
    got = written["canvas.csv"]
    assert got.startswith(b"\xef\xbb\xbf")  # the byte-order mark as exported
    lines = export.decode("utf-8").split("\n")
    # header, Manual Posting row, Points Possible row and the student no one graded here: byte for byte
    assert got.decode("utf-8").split("\n")[:3] == lines[:3] and lines[6] in got.decode("utf-8")
    # only the lesson columns' cells of the graded students changed; nothing else, not even its quoting
    column = {"101": 6, "105": 7}
    assert _changed_cells(export, got) == {(3, column["101"]): ('""', "9"),  # ngada 01; 05 pending: as exported
                                           (4, column["105"]): ("3.00", "20"),  # okafo 01 is excused in Canvas
                                           (5, column["101"]): ("3.00", "10")}  # ruiz 05: not assigned (N/A)
    read = lms_files.canvas_import(got, custom_columns=["Notes"])
    assert {col: title for col, title in read["assignments"].items()} == {
        6: ("Lesson 1: Warm-up", "101"), 7: ("Lesson 5: Exercises", "105"), 8: ("Project", "900")}
    assert read["points"] == {6: "10.00", 7: "30.00", 8: "50.00"}
    assert {sid: (cells[6], cells[7]) for sid, cells in read["students"].items()} == {
        "31": ("9", ""), "42": ("EX", "20"), "57": ("10", "N/A"), "99": ("4.00", "")}
    [note] = notes
    assert "01_warmup -> 'Lesson 1: Warm-up (101)' (matched by name)" in note
    assert "05_exercises -> 'Lesson 5: Exercises (105)' (matched by name)" in note
    assert "okafo_42 05_exercises 3.00 -> 20" in note and "ruiz_57 01_warmup 3.00 -> 10" in note  # what it replaces
    assert "excused" in note and "not assigned" in note
    assert "not in the export, so not imported: khan_77" in note  # a student the export does not list


def test_a_semicolon_export_with_decimal_commas_stays_so(tmp_path):
    students = [(*s[:5], {aid: score.replace(".", ",") for aid, score in s[5].items()}) for s in CANVAS_STUDENTS]
    export = lms_files.canvas_gradebook(students, CANVAS_ASSIGNMENTS, delimiter=";", decimal=",", bom=False)
    rows = _canvas_rows()
    rows[1]["lessons"][EXERCISES]["score"] = 20.5
    _, written = _write(tmp_path, rows, {"grades.csv": export})
    got = written["canvas.csv"]
    assert not got.startswith(b"\xef\xbb\xbf")
    read = lms_files.canvas_import(got)
    assert read["delimiter"] == ";" and read["students"]["42"][5] == "EX" and read["students"]["31"][5] == "9"
    assert _changed_cells(export, got, ";")[(3, 6)] == ("3,00", "20,5")  # okafo 05, as Canvas writes numbers
    assert read["points"][5] == "10,00"


def test_a_lesson_is_matched_to_one_canvas_assignment_or_the_file_is_refused(tmp_path):
    assignments = [("Warm-up", "101", 10.0), ("Warm-up quiz", "102", 10.0), ("Exercises", "105", 30.0)]
    export = lms_files.canvas_gradebook(CANVAS_STUDENTS, assignments)
    notes, written = _write(tmp_path, _canvas_rows(), {"grades.csv": export})
    assert written == {}  # never a file whose grades could land in the wrong assignment
    assert "01_warmup matches 2 assignments" in notes[0] and "'Warm-up quiz (102)'" in notes[0]
    assert 'CANVAS_ASSIGNMENTS="01=101"' in notes[0]
    notes, written = _write(tmp_path, _canvas_rows(), {}, canvas_assignments={WARMUP: "101"})
    read = lms_files.canvas_import(written["canvas.csv"])
    assert read["students"]["31"][5] == "9" and read["students"]["31"][6] == ""  # the quiz left as exported
    assert "01_warmup -> 'Warm-up (101)' (--canvas-assignments 01=101)" in notes[0]
    notes, written = _write(tmp_path, _canvas_rows(), {}, canvas_assignments={WARMUP: "555"})
    assert written == {} and "given the Canvas assignment 555" in notes[0]


def test_a_canvas_assignment_worth_other_points_is_refused(tmp_path):
    export = lms_files.canvas_gradebook(CANVAS_STUDENTS, [("Warm-up", "101", 100.0), ("Exercises", "105", 30.0)])
    notes, written = _write(tmp_path, _canvas_rows(), {"grades.csv": export})
    assert written == {}
    assert "'Warm-up (101)' is worth 100 points in Canvas but 01_warmup is out of 10" in notes[0]


def test_two_gradebook_exports_are_refused_and_other_files_noted(tmp_path):
    export = lms_files.canvas_gradebook(CANVAS_STUDENTS, CANVAS_ASSIGNMENTS)
    notes, written = _write(tmp_path, _canvas_rows(), {"a.csv": export, "b.csv": export, "notes.csv": b"x,y\n1,2\n",
                                                       "grades.xlsx": b"PK"})
    assert written == {}
    assert any("2 Canvas gradebook exports" in n for n in notes)
    assert any("notes.csv ignored: neither Canvas's gradebook export" in n for n in notes)
    assert any("grades.xlsx ignored: not a .csv" in n for n in notes)


def test_without_an_export_canvas_gets_the_minimal_file_and_the_note_says_what_it_lacks(tmp_path):
    notes, written = _write(tmp_path, _canvas_rows(), {}, lms="canvas", canvas_assignments={WARMUP: "101"})
    read = lms_files.canvas_import(written["canvas.csv"])
    assert read["assignments"] == {5: ("01_warmup", "101"), 6: (EXERCISES, None)}  # 01 into its assignment by id
    assert read["points"] == {5: "10", 6: "30"}
    assert {sid: (cells[5], cells[6]) for sid, cells in read["students"].items()} == {
        "31": ("9", ""), "42": ("7.5", "20"), "57": ("10", "0"), "77": ("6", "")}
    [note] = notes
    assert "without your gradebook export" in note and f"{EXERCISES} would each be created as a new assignment" in note
    assert "Export Entire Gradebook" in note and lms_export.TEMPLATES in note


# ------------------------------------------------------------------------------------------------ Moodle

SUBMITTED, MARKED = datetime(2026, 10, 2, 9, 0), datetime(2026, 10, 3, 14, 5)


def _worksheet(ids=("4211", "4212", "4213", "4214"), maximum=10.0, **options) -> bytes:
    a, b, c, d = ids
    return lms_files.moodle_worksheet([
        (a, "Jane Doe", "jane@example.org", "Submitted for grading - 9 hours late", None, True, SUBMITTED, None, ""),
        (b, "Ivan Petrov", "ivan@example.org", "Submitted for grading - Graded", 5.0, True, SUBMITTED, MARKED,
         "<p>See me, please</p>"),
        (c, "Li Wei", "li@example.org", "Submitted for grading - Graded", 8.0, False, SUBMITTED, MARKED, ""),
        (d, "No One", "no@example.org", "No submission", None, True, None, None, ""),
    ], maximum, **options)


def _moodle_rows():
    late = "2026-10-02T09:00:00"
    return [_row("Jane Doe", "4211 5211", **{WARMUP: (outcome.GRADED, 9.0, "4211", True, late),
                                             EXERCISES: (outcome.PENDING, 17.0, "5211")}),
            _row("Ivan Petrov", "4212 5212", **{WARMUP: (outcome.GRADED, 7.5, "4212", True, late),
                                                EXERCISES: (outcome.GRADED, 24.0, "5212")}),
            _row("Li Wei", "4213", **{WARMUP: (outcome.GRADED, 10.0, "4213"), EXERCISES: (outcome.MISSING, 0.0)})]


def test_moodle_worksheet_is_filled_with_grades_and_late_feedback(tmp_path):
    sheet = _worksheet()
    notes, written = _write(tmp_path, _moodle_rows(), {"Grades-MHA-Warm-up-77.csv": sheet})
    got = written[f"moodle-{WARMUP}.csv"]
    read = lms_files.moodle_import(got)  # required columns, Identifier "Participant <id>", grades numbers
    assert {pid: r["grade"] for pid, r in read.items()} == {"4211": 9.0, "4212": 7.5, "4213": 8.0, "4214": None}
    assert read["4211"]["feedback"] == "Submitted late (2026-10-02T09:00:00)."
    assert read["4212"]["feedback"] == "<p>See me, please</p>\nSubmitted late (2026-10-02T09:00:00)."  # kept, added
    header = sheet.decode("utf-8").split("\n")[0]
    assert got.startswith(b"\xef\xbb\xbf") and got.decode("utf-8").split("\n")[0] == header
    grade, feedback = lms_files.MOODLE_COLUMNS.index("Grade"), lms_files.MOODLE_COLUMNS.index("Feedback comments")
    # Grade and Feedback comments of Jane and Ivan only: Li Wei's grade cannot be changed in Moodle, No One handed
    # nothing in here; Last modified (grade) and every other cell as exported, so Moodle's own check still holds
    assert set(_changed_cells(sheet, got)) == {(1, grade), (1, feedback), (2, grade), (2, feedback)}
    assert [r["modified"] for r in read.values()] == ["-", "Saturday, 3 October 2026, 2:05 PM",
                                                      "Saturday, 3 October 2026, 2:05 PM", "-"]
    assert "Ivan Petrov 5.00 -> 7.5" in notes[0] and "1 left: their grade cannot be changed" in notes[0]
    assert f"moodle-{EXERCISES}.csv" not in written  # no worksheet of 05 and not said to be a Moodle class


def test_worksheets_are_matched_to_their_lessons_by_participant_ids(tmp_path):
    templates = {"warmup.csv": _worksheet(), "exercises.csv": _worksheet(("5211", "5212", "5213", "5214"), 30.0),
                 "another.csv": _worksheet(("9911", "9912", "9913", "9914"))}
    notes, written = _write(tmp_path, _moodle_rows(), templates, lms="moodle")
    assert set(written) == {f"moodle-{WARMUP}.csv", f"moodle-{EXERCISES}.csv"}
    exercises = lms_files.moodle_import(written[f"moodle-{EXERCISES}.csv"])
    assert {pid: r["grade"] for pid, r in exercises.items()} == {"5211": None, "5212": 24.0, "5213": 8.0,
                                                                "5214": None}  # 5211 pending, 5213 not ours
    assert any("another.csv not used" in n for n in notes)
    notes, written = _write(tmp_path, _moodle_rows(), {"again.csv": _worksheet()}, lms="moodle")
    assert f"moodle-{WARMUP}.csv" not in written and any("2 worksheets of 01_warmup" in n for n in notes)


def test_a_worksheet_out_of_another_maximum_is_refused(tmp_path):
    notes, written = _write(tmp_path, _moodle_rows(), {"warmup.csv": _worksheet(maximum=100.0)})
    assert written == {} and "Maximum grade in lms-templates/warmup.csv is 100 but 01_warmup is out of 10" in notes[0]


def test_decimal_commas_of_a_worksheet_are_kept(tmp_path):
    _, written = _write(tmp_path, _moodle_rows(), {"warmup.csv": _worksheet(decimal=",")})
    assert lms_files.moodle_import(written[f"moodle-{WARMUP}.csv"])["4212"]["grade"] == 7.5
    assert b'"7,5"' in written[f"moodle-{WARMUP}.csv"]


def test_without_a_worksheet_moodle_gets_its_required_columns_and_the_note_says_what_is_missing(tmp_path):
    notes, written = _write(tmp_path, _moodle_rows(), {}, lms="moodle")
    read = lms_files.moodle_import(written[f"moodle-{WARMUP}.csv"])
    assert {pid: (r["grade"], r["modified"], r["feedback"]) for pid, r in read.items()} == {
        "4211": (9.0, "", "Submitted late (2026-10-02T09:00:00)."),
        "4212": (7.5, "", "Submitted late (2026-10-02T09:00:00)."), "4213": (10.0, "", "")}
    assert {pid: r["grade"] for pid, r in lms_files.moodle_import(written[f"moodle-{EXERCISES}.csv"]).items()} == {
        "5211": None, "5212": 24.0}
    assert all("without the assignment's grading worksheet" in n and "Download grading worksheet" in n
               for n in notes) and len(notes) == 2


@pytest.mark.parametrize("text", ["Identifier,Full name,Grade\nParticipant 1,A,3\n", "Student,Name\n1,2\n"])
def test_a_file_that_is_no_export_is_ignored_with_a_note(tmp_path, text):
    notes, written = _write(tmp_path, _moodle_rows(), {"other.csv": text.encode()})
    assert written == {} and "other.csv ignored" in notes[0]


def test_late_work_is_shown_in_grades_csv_and_the_report(tmp_path):
    import csv
    import html

    from autograder.grading.reports import report

    rows = _moodle_rows()
    for row in rows:
        row.update(total=None, max_total=40.0, pending=0.0)
    s = Settings(out=str(tmp_path), lessons=[WARMUP, EXERCISES])
    with report.write_csv(s, rows).open(newline="", encoding="utf-8") as fh:
        got = {r["student"]: r for r in csv.DictReader(fh)}
    assert (got["Jane Doe"][f"{WARMUP} late"], got["Jane Doe"][f"{WARMUP} submitted"]) == ("late",
                                                                                          "2026-10-02T09:00:00")
    assert (got["Li Wei"][f"{WARMUP} late"], got["Li Wei"][f"{WARMUP} submitted"]) == ("", "")
    page = html.unescape(report.write_report(s, rows, []).read_text())
    assert "9 / 10 late (submitted 2026-10-02T09:00:00)" in re.sub(r"<[^>]+>", "", page)
    assert "10 / 10 late" not in re.sub(r"<[^>]+>", "", page)  # Li Wei was on time


def test_with_nothing_final_the_export_is_copied_as_it_is_and_a_linked_one_is_not_read(tmp_path):
    export = lms_files.canvas_gradebook(CANVAS_STUDENTS, CANVAS_ASSIGNMENTS)
    rows = _canvas_rows()
    for row in rows:
        for cell in row["lessons"].values():
            cell["status"] = outcome.PENDING
    notes, written = _write(tmp_path, rows, {"grades.csv": export})
    assert written["canvas.csv"] == export and "no lesson has a final score yet" in notes[0]
    (tmp_path / lms_export.TEMPLATES / "grades.csv").unlink()
    (tmp_path / "elsewhere.csv").write_bytes(export)
    (tmp_path / lms_export.TEMPLATES / "linked.csv").symlink_to(tmp_path / "elsewhere.csv")
    notes, written = _write(tmp_path, rows, {})
    assert written == {} and "linked.csv ignored: it is a link" in notes[0]
