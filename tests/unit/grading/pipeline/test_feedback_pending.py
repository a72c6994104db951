"""The feedback page of a notebook with points awaiting the instructor, written as ``generate_feedback`` writes it
(``feedback_page.GetGradesAndPending`` reading a real nbgrader gradebook, then ``FeedbackExporter``), without a
kernel: each unmarked written answer, and each whose mark went back to pending, says "awaiting your instructor"
instead of a score of 0; the title gives the score so far without them and the points awaited; a marked answer
shows its score. The same through the grading command: ``tests/grading/test_marks.py``."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.grading.pipeline import feedback_page

LESSON, STUDENT = "05_exercises", "alice"
BOOTSTRAP_CSS = "server_extensions/formgrader/static/node_modules/bootstrap/dist/css"  # as GenerateFeedback sets
# grade_id -> (points, cell kind, auto score, manual score, awaiting the instructor)
CELLS = {
    "test_split": (3.0, "test", 3.0, None, False),
    "test_concat": (2.0, "test", 0.0, None, False),
    "explain_unmarked": (2.0, "written", None, None, True),
    "explain_marked": (1.0, "written", None, 1.0, False),
    "explain_reopened": (2.0, "written", None, 2.0, True),  # its text changed: the old mark kept, pending again
}


def _meta(gid, points, kind):
    return {"nbgrader": {"grade_id": gid, "grade": True, "solution": kind == "written", "locked": kind == "test",
                         "points": points, "schema_version": 3}}


def _render(url: str) -> str:
    """The page ``generate_feedback`` writes (its exporter finds bootstrap's CSS where nbgrader tells it to)."""
    from traitlets.config import Config

    css = Path(__import__("nbgrader").__file__).parent / BOOTSTRAP_CSS
    config = Config({"HTMLExporter": {"extra_template_paths": [str(css)]}})
    resources = {"nbgrader": {"notebook": LESSON, "assignment": LESSON, "student": STUDENT, "db_url": url}}
    nb, resources = feedback_page.GetGradesAndPending().preprocess(_notebook(), resources)
    return feedback_page.FeedbackExporter(config=config).from_notebook_node(nb, resources)[0]


def _notebook():
    cells = [new_markdown_cell("# Exercises")]
    for gid, (points, kind, *_rest) in CELLS.items():
        cell = (new_markdown_cell(f"My answer to {gid}.") if kind == "written"
                else new_code_cell("assert True", execution_count=1))
        cell.metadata.update(_meta(gid, points, kind))
        cells.append(cell)
    nb = new_notebook(cells=cells)
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def _gradebook(url):
    from nbgrader.api import Gradebook

    with Gradebook(url, "course") as gb:
        gb.add_assignment(LESSON)
        gb.add_notebook(LESSON, LESSON)
        for gid, (points, kind, *_rest) in CELLS.items():
            gb.add_grade_cell(gid, LESSON, LESSON, max_score=points, cell_type="markdown" if kind == "written"
                              else "code")
            if kind == "written":
                gb.add_solution_cell(gid, LESSON, LESSON)
        gb.add_student(STUDENT)
        gb.add_submission(LESSON, STUDENT)
        for gid, (_points, _kind, auto, manual, waiting) in CELLS.items():
            grade = gb.find_grade(gid, LESSON, LESSON, STUDENT)
            grade.auto_score, grade.manual_score, grade.needs_manual_grade = auto, manual, waiting
        gb.db.commit()


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('gradebook') / 'gradebook.db'}"
    _gradebook(url)
    return _render(url)


def _text(markup: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def _score_line(page: str, gid: str) -> str:
    """The text of the heading of the answer or test cell ``gid`` (its score line)."""
    found = re.search(rf'<a name="{gid}"></a>\s*<div class="panel-heading">(.*?)</div>', page, re.S)
    assert found, gid
    return _text(found.group(1))


def _toc_line(page: str, gid: str) -> str:
    found = re.search(rf'<li><a href="#{gid}">(.*?)</li>', page, re.S)
    assert found, gid
    return _text(found.group(1))


def test_each_answer_awaiting_the_instructor_says_so_and_never_shows_a_score_of_0(page):
    for gid in ("explain_unmarked", "explain_reopened"):
        points = CELLS[gid][0]
        assert _score_line(page, gid) == f"Student's answer awaiting your instructor ({points:.1f} points) (Top)"
        assert _toc_line(page, gid) == f"Written response {gid} (awaiting your instructor ({points:.1f} points))"
        assert "Score:" not in _score_line(page, gid) + _toc_line(page, gid)


def test_marked_answers_and_tests_show_their_scores(page):
    assert _score_line(page, "explain_marked") == "Student's answer Score: 1.0 / 1.0 (Top)"
    assert _toc_line(page, "explain_marked") == "Written response explain_marked (Score: 1.0 / 1.0)"
    assert "Score: 3.0 / 3.0" in _score_line(page, "test_split")
    assert "Score: 0.0 / 2.0" in _score_line(page, "test_concat")  # a failed test does score 0


def test_the_title_gives_the_score_so_far_without_the_awaited_points_and_says_how_many_await(page):
    title = _text(re.search(r'<h1 class="page-title">(.*?)</h1>', page, re.S).group(1))
    # 3 (test) + 1 (marked); not the 2 of the reopened answer's old mark, which nbgrader's own total holds
    assert title == f"{LESSON} (Score so far: 4.0 / 10.0; 4.0 points awaiting your instructor)"
    assert "this score is not final" in _text(page)


def test_a_page_with_nothing_awaited_shows_its_score_as_final(tmp_path):
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    _gradebook(url)
    from nbgrader.api import Gradebook

    with Gradebook(url, "course") as gb:
        for gid in ("explain_unmarked", "explain_reopened"):  # marked as formgrader marks
            grade = gb.find_grade(gid, LESSON, LESSON, STUDENT)
            grade.manual_score, grade.needs_manual_grade = 1.5, False
        gb.db.commit()
    body = _render(url)
    assert "awaiting your instructor" not in body and "not final" not in body
    assert _score_line(body, "explain_reopened") == "Student's answer Score: 1.5 / 2.0 (Top)"
    assert f"{LESSON} (Score: 7.0 / 10.0)" in _text(body)
