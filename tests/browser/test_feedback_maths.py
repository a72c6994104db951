"""Maths renders everywhere on the feedback pages, in Chromium: every lesson's page (its model answers graded
through the real command, tests/helpers/lesson_pages.py), opened as the instructor opens it from report.html,
shows no escaped markup (``<ns0:math``, ``<math``) and no TeX left raw outside code, and every formula of the
lesson's markdown, headings included, is a MathML element the browser lays out.
"""

from __future__ import annotations

import re

import pytest

from autograder import course
from autograder.course import answers
from lesson_pages import graded, pages

pytestmark = [pytest.mark.browser, pytest.mark.grading]
_MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.S)  # a formula of the lesson's markdown, as its author wrote it
_RAW_TEX = re.compile(r"\$[^$\s][^$]*\$|\\(?:frac|sqrt|begin|end|mathbb|mathrm|top|cdot|sum|times|left|right)\b")

# Each heading and math element of the page; the page's text outside code; what a closed <details> hides is
# not laid out, so sizes are read only where the element is shown.
_READ = """() => {
  const shown = e => !e.closest('details:not([open])');
  const size = e => { const r = e.getBoundingClientRect(); return [r.width, r.height]; };
  const prose = document.body.cloneNode(true);
  prose.querySelectorAll('pre, code, .input_area, .highlight').forEach(e => e.remove());
  return {
    text: document.body.innerText,
    prose: prose.innerText,
    maths: [...document.querySelectorAll('math')].map(m => ({shown: shown(m), size: size(m)})),
    headings: [...document.querySelectorAll('.text_cell_render :is(h1, h2, h3, h4, h5, h6)')].map(h => ({
      text: h.innerText, maths: [...h.querySelectorAll('math')].map(size)})),
  };
}"""


@pytest.fixture(scope="module")
def opened(browser, tmp_path_factory):
    batch = graded(tmp_path_factory)
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    tab = context.new_page()
    seen = {}
    for lesson, path in pages(batch).items():
        tab.goto(path.as_uri(), wait_until="load")
        seen[lesson] = tab.evaluate(_READ)
    context.close()
    return seen


def _markdown(lesson: str) -> str:
    return "\n\n".join(c.source for c in answers.fill(lesson).cells if c.cell_type == "markdown")


@pytest.mark.parametrize("lesson", course.lesson_names())
def test_no_escaped_markup_and_no_raw_tex_outside_code(opened, lesson):
    page = opened[lesson]
    for escaped in ("ns0:", "<math", "&lt;math", "<mrow", "<mi>"):
        assert escaped not in page["text"], f"{lesson}: {escaped!r} shown as text"
    raw = _RAW_TEX.findall(page["prose"])
    assert not raw, f"{lesson}: TeX left raw outside code: {raw[:5]}"


@pytest.mark.parametrize("lesson", course.lesson_names())
def test_every_formula_is_mathml_the_browser_lays_out(opened, lesson):
    page, source = opened[lesson], _markdown(lesson)
    assert len(page["maths"]) >= len(_MATH.findall(source)) > 0
    flat = [m for m in page["maths"] if m["shown"] and not (m["size"][0] > 0 and m["size"][1] > 0)]
    assert not flat, f"{lesson}: {len(flat)} formulas are not laid out"
    math_headings = [line for line in source.splitlines() if line.startswith("#") and "$" in line]
    shown = [h for h in page["headings"] if h["maths"]]
    assert len(shown) == len(math_headings), (math_headings, [h["text"] for h in page["headings"]])
    assert all(w > 0 and h > 0 for heading in shown for w, h in heading["maths"]), shown
