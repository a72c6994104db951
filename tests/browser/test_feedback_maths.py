"""Maths renders everywhere on the feedback pages, in Chromium: every lesson's page (its model answers graded
through the real command, in the class of tests/helpers/lessons_class.py), opened as the instructor opens it from
report.html, shows no escaped markup (``<ns0:math``, ``<math``) and no TeX left raw outside code, and every formula
of the lesson's markdown, headings included, is a MathML element the browser lays out.
"""

from __future__ import annotations

import re

import pytest

import page_maths
from autograder import course
from autograder.course import answers
from lessons_class import graded, pages

pytestmark = [pytest.mark.browser, pytest.mark.grading]
_FORMULA = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.S)  # a formula of the lesson's markdown, as its author wrote it


@pytest.fixture(scope="module")
def opened(browser, tmp_path_factory):
    batch = graded(tmp_path_factory)
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    tab = context.new_page()
    seen = {}
    for lesson, path in pages(batch).items():
        tab.goto(path.as_uri(), wait_until="load")
        seen[lesson] = page_maths.read(tab)
    context.close()
    return seen


def _markdown(lesson: str) -> str:
    return "\n\n".join(c.source for c in answers.fill(lesson).cells if c.cell_type == "markdown")


@pytest.mark.parametrize("lesson", course.lesson_names())
def test_every_formula_is_mathml_the_browser_lays_out(opened, lesson):
    page, source = opened[lesson], _markdown(lesson)
    assert page_maths.problems(page) == [], lesson
    assert len(page["maths"]) >= len(_FORMULA.findall(source)) > 0
    math_headings = [line for line in source.splitlines() if line.startswith("#") and "$" in line]
    shown = [h for h in page["headings"] if h["maths"]]
    assert len(shown) == len(math_headings), (math_headings, [h["text"] for h in page["headings"]])
    assert all(w > 0 and h > 0 for heading in shown for w, h in heading["maths"]), shown
