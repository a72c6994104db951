"""Reading a class back from the gradebook a lesson at a time, without a kernel: ``marks.lesson_grades``,
``lesson_comments`` and ``lesson_fingerprints`` give every submission's marks and fingerprint as nbgrader's objects
give them one submission at a time; ``results.read_rows`` reads them so; nbgrader's own export writes the same file
through ``report.ExportView``; ``gradebook.ensure_indexes`` adds the indexes nbgrader's schema lacks, once. The class
at scale is ``bench/instructor_scale.py``."""

from __future__ import annotations

import hashlib

import pytest
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins.export import CsvExportPlugin
from sqlalchemy import text

from autograder.grading.intake import class_roster
from autograder.grading.records import gradebook, marks, outcome, state
from autograder.grading.records.settings import COURSE_ID, Settings
from autograder.grading.reports import report, results

LESSONS = ["01_warmup", "05_exercises"]
STUDENTS = ["ann", "bob", "cat", "dan"]


def _class(tmp_path, db_url: str = "") -> Settings:
    """A gradebook of two lessons (two tests, a written answer, an answer cell) and four students, every way a mark
    can stand: autograded, pending, marked, marked with extra credit and a comment, no answer; dan never handed 05
    in; a notebook of another assignment has a lesson's name. SQLite in the course folder, or ``db_url``."""
    s = Settings(out=str(tmp_path), lessons=LESSONS, db_url=db_url)
    s.course_root.mkdir(parents=True)
    with Gradebook(s.gradebook_url, COURSE_ID) as gb:
        for lesson in [*LESSONS, "extra"]:
            gb.add_assignment(lesson)
            notebook = "01_warmup" if lesson == "extra" else lesson
            gb.add_notebook(notebook, lesson)
            gb.add_grade_cell("test_a", notebook, lesson, max_score=2, cell_type="code")
            gb.add_grade_cell("test_b", notebook, lesson, max_score=1, cell_type="code")
            gb.add_grade_cell("written", notebook, lesson, max_score=3, cell_type="markdown")
            gb.add_solution_cell("written", notebook, lesson)
            gb.add_solution_cell("answer", notebook, lesson)
        for student in STUDENTS:
            gb.add_student(student)
        for lesson in LESSONS:
            for student in STUDENTS:
                if (student, lesson) == ("dan", "05_exercises"):
                    continue
                with gb.db.no_autoflush:  # nbgrader's add_submission would warn, under SQLAlchemy 2.1
                    gb.add_submission(lesson, student, timestamp="2026-10-01 10:00:00.000000 UTC")
                grade = {g: gb.find_grade(g, lesson, lesson, student) for g in ("test_a", "test_b", "written")}
                grade["test_a"].auto_score, grade["test_a"].needs_manual_grade = 2.0, False
                grade["test_b"].auto_score = 0.0 if student == "cat" else 1.0
                grade["test_b"].needs_manual_grade = False
                if student == "bob":  # marked, with extra credit and a comment
                    grade["written"].manual_score, grade["written"].needs_manual_grade = 2.5, False
                    grade["test_a"].extra_credit = 0.5
                    gb.find_comment("written", lesson, lesson, student).manual_comment = "good"
                elif student == "dan":  # the stub: 0, no manual grade needed
                    grade["written"].auto_score, grade["written"].needs_manual_grade = 0.0, False
                    gb.find_comment("answer", lesson, lesson, student).auto_comment = "No response."
                gb.find_submission_notebook(lesson, lesson, student).late_submission_penalty = \
                    1.0 if student == "cat" else None
                gb.db.commit()
        with gb.db.no_autoflush:
            gb.add_submission("extra", "ann")
        gb.db.commit()
    return s


def _reads_agree(s: Settings) -> None:
    """Each lesson read at once gives what nbgrader's objects give, submission by submission."""
    with gradebook.opened(s) as gb:
        for lesson in LESSONS:
            grades, prints = marks.lesson_grades(gb, lesson), marks.lesson_fingerprints(gb, lesson)
            handed = [st for st in STUDENTS if (st, lesson) != ("dan", "05_exercises")]
            assert sorted(grades) == sorted(prints) == handed
            for student in handed:
                nb = gb.find_submission_notebook(lesson, lesson, student)  # nbgrader's objects, a query for each
                assert marks.tally(grades[student]) == marks.tally(nb.grades) == marks.marks(gb, lesson, student)
                assert prints[student] == marks.fingerprint_of(nb.grades, nb.comments) == \
                    marks.fingerprint(gb, lesson, student)
        assert marks.tally(marks.lesson_grades(gb, "05_exercises")["bob"])["manual"] == 2.5
        for read in (marks.marks, marks.fingerprint):  # as nbgrader's find_submission_notebook says it
            with pytest.raises(MissingEntry):
                read(gb, "05_exercises", "dan")


def test_a_lesson_read_at_once_gives_each_submissions_marks_and_fingerprint(tmp_path):
    s = _class(tmp_path)
    _reads_agree(s)
    with gradebook.opened(s) as gb:
        before = marks.lesson_fingerprints(gb, "01_warmup")
        gb.find_grade("written", "01_warmup", "01_warmup", "ann").manual_score = 1.0
        gb.find_comment("answer", "01_warmup", "01_warmup", "cat").manual_comment = "see me"
        gb.db.commit()
        after = marks.lesson_fingerprints(gb, "01_warmup")
    assert {st for st in STUDENTS if before[st] != after[st]} == {"ann", "cat"}


def test_the_rows_read_a_lesson_at_a_time_hold_each_submissions_marks(tmp_path):
    s = _class(tmp_path)
    roster = class_roster.Roster(root=tmp_path)
    for student in STUDENTS:
        roster.entries[student] = {}
        for lesson in LESSONS:
            roster.entries[student][lesson] = class_roster.Entry(student, lesson, tmp_path / "x.ipynb", "ok", "")
            state.write(s, state.Record(student, lesson, hash="h", key=s.key, graded=True, status=outcome.GRADED))
    rows = {r["student"]: r for r in results.read_rows(s, roster)}
    with gradebook.opened(s) as gb:
        for student in STUDENTS:
            for lesson in LESSONS:
                cell = rows[student]["lessons"][lesson]
                if (student, lesson) == ("dan", "05_exercises"):  # graded, but not in the gradebook
                    assert (cell["status"], cell["reason"]) == (outcome.GRADING_ERROR, "missing from the gradebook")
                    continue
                got = marks.marks(gb, lesson, student)
                assert (cell["score"], cell["auto"], cell["pending"]) == (got["score"], got["auto"], got["pending"])
                assert cell["status"] == (outcome.PENDING if got["pending"] else outcome.GRADED)
    assert rows["bob"]["lessons"]["01_warmup"]["manual"] == 2.5 and rows["ann"]["pending"] == 6.0


def _exports(s, folder) -> list:
    """nbgrader's export of the gradebook of ``s``, written from the gradebook itself and through ``ExportView``."""
    written = []
    for view in (lambda gb: gb, report.ExportView):
        path = folder / f"export-{len(written)}.csv"
        with gradebook.opened(s) as gb:
            CsvExportPlugin(to=str(path)).export(view(gb))
        written.append(path.read_bytes())
    return written


def test_nbgrader_export_writes_through_the_export_view_what_it_writes_from_the_gradebook(tmp_path):
    s = _class(tmp_path)
    written = _exports(s, tmp_path)
    assert written[0] == written[1]
    assert b"01_warmup,,2026-10-01 10:00:00,cat,,,,2.0,1.0,1.0,6.0" in written[0]  # a penalty, a timestamp
    assert b"05_exercises,,,dan,,,,0.0,0.0,0.0,6.0" in written[0]  # no submission
    assert report.write_nbgrader_export(s) == []
    assert (tmp_path / "nbgrader_export.csv").read_bytes().replace(b"\r\n", b"\n") == written[0]


def _plan(s: Settings, sql: str) -> str:
    with gradebook.opened(s) as gb:
        return " ".join(str(row[-1]) for row in gb.db.execute(text("EXPLAIN QUERY PLAN " + sql)))


def test_the_gradebook_gets_the_indexes_its_schema_lacks_once(tmp_path):
    s = _class(tmp_path)
    assert "SCAN grade" in _plan(s, "SELECT * FROM grade WHERE notebook_id = 'x'")
    assert gradebook.ensure_indexes(s) == []
    digest = hashlib.sha256((tmp_path / "course" / "gradebook.db").read_bytes()).hexdigest()
    assert gradebook.ensure_indexes(s) == []  # already there: nothing written
    assert hashlib.sha256((tmp_path / "course" / "gradebook.db").read_bytes()).hexdigest() == digest
    for name, (table, column) in gradebook.INDEXES.items():
        assert name in _plan(s, f"SELECT * FROM {table} WHERE {column} = 'x'")
    with gradebook.opened(s) as gb:  # nbgrader reads and writes it as before
        assert marks.marks(gb, "01_warmup", "ann")["score"] == 3.0
        gb.update_or_create_student("eve")


def test_indexes_that_cannot_be_added_are_a_note_not_a_failure(tmp_path):
    s = Settings(out=str(tmp_path), lessons=LESSONS, db_url=f"sqlite:///{tmp_path / 'no' / 'such' / 'gradebook.db'}")
    [note] = gradebook.ensure_indexes(s)
    assert note.startswith("the gradebook's indexes could not be added") and "CREATE INDEX IF NOT EXISTS" in note


@pytest.mark.server
def test_a_postgresql_gradebook_gets_its_indexes_and_is_read_a_lesson_at_a_time_alike(postgres_server, tmp_path):
    s = _class(tmp_path, postgres_server.database("lesson_reads"))
    assert gradebook.ensure_indexes(s) == [] and gradebook.ensure_indexes(s) == []
    with gradebook.opened(s) as gb:
        assert set(gradebook.INDEXES) <= {row[0] for row in gb.db.execute(text("SELECT indexname FROM pg_indexes"))}
    _reads_agree(s)
    written = _exports(s, tmp_path)
    assert written[0] == written[1] and b"cat,,,,2.0,1.0,1.0,6.0" in written[0]
