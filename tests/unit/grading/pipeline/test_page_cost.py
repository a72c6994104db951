"""What a feedback or formgrader page costs to make from markup a learner controls (``page_safety.clean``): HTML
built to make the sanitiser's parser quadratic is shown as text, in time linear in its size; a lesson's own markdown
is still rendered.

The same markup in a real notebook, graded and given its feedback page by the grading command, is in
``tests/grading/test_swamp.py``.
"""

from __future__ import annotations

import json

import pytest
from cost import fastest

from autograder import course
from autograder.grading.pipeline import feedback_page, formgrader_page, linear_markdown, page_safety

COSTLY = {
    "nested": lambda n: "<div>" * (1_000 * n),  # every tag open at once
    "misnested": lambda n: "<b><i></b></i>" * (1_500 * n),  # formatting tags closed out of order
}


@pytest.mark.parametrize("name", sorted(COSTLY))
def test_markup_built_to_make_the_sanitiser_quadratic_is_shown_as_text_in_linear_time(name):
    small, small_seconds = fastest(page_safety.clean, COSTLY[name](1))
    big, big_seconds = fastest(page_safety.clean, COSTLY[name](8))
    assert "<" not in big and big.startswith(COSTLY[name](1)[:20].replace("<", "&lt;").replace(">", "&gt;"))
    ratio = big_seconds / small_seconds
    assert ratio < 24, ratio  # 8 times the markup: about 8 times the time when linear, 64 when quadratic


def test_a_lessons_own_markdown_is_still_rendered():
    cells = [cell for path in sorted(course.LESSONS.glob("*.ipynb"))
             for cell in json.loads(path.read_text(encoding="utf-8"))["cells"] if cell["cell_type"] == "markdown"]
    pages = [feedback_page.markdown_html("".join(cell["source"]), "¶", False) for cell in cells]
    assert not any(page_safety.too_much_markup(page) for page in pages)
    richest = max(pages, key=lambda page: page.count("<"))
    assert page_safety.clean(richest).count("<") > page_safety.MAX_TAGS // 10


def test_the_linear_maths_parsers_render_every_lesson_s_markdown_as_nbconvert_does():
    """``linear_markdown``'s parsers change how long maths takes to find, not what is found: every markdown cell of
    every lesson, and maths of each kind nbconvert reads, renders to the same HTML as with nbconvert's own parsers."""
    from nbconvert.filters.markdown_mistune import MarkdownWithMath

    from autograder.grading.pipeline.feedback_page import MathMLRenderer

    cells = ["".join(cell["source"]) for path in sorted(course.LESSONS.glob("*.ipynb"))
             for cell in json.loads(path.read_text(encoding="utf-8"))["cells"] if cell["cell_type"] == "markdown"]
    cells += ["$$a$$ and $$b$$ on one line, then $x$", "\\\\[x^2\\\\] and \\\\(y\\\\)",
              "\\begin{align}a &= b\\\\ c &= d\\end{align}", "text\n\n\\begin{equation*}\ne\n\\end{equation*}\nafter",
              "$$\na\n$$\n\npara *em* $b$"]

    def render(source, **parsers):
        return MarkdownWithMath(renderer=MathMLRenderer(escape=False), **parsers).render(source)

    differ = [c for c in cells if render(c) != render(c, **linear_markdown.parsers())]
    assert len(cells) > 100 and differ == [], differ[:3]


# every page transform student text passes through, fed text built to make a pattern start again and again
SHAPES = {"font face": "@font-face{", "style attribute": ' style="', "coloured span": '<span style="color: rgb(1,1,1); ',
          "open tag": "<", "emphasis": "*a", "underscore": "_a", "bracket": "[", "backtick": "`", "dollar": "$",
          "link": "[](", "comment": "<!--", "entity": "&#", "href": '<a href="', "maths": "\\(", "display maths": "$$x",
          "handler": ' onclick="', "url": "url(", "end of head": "</head>", "script": "<script>", "blockquote": "> ",
          "environment": "\\begin{x}", "display latex": "\\\\[", "inline latex": "\\\\(", "maths pieces": "$$a$$",
          "image": "<img "}


def _feedback_page(text: str) -> str:
    """A markdown cell as its feedback page shows it: rendered, sanitised, and the page protected."""
    body = page_safety.clean(feedback_page.markdown_html(text, "¶", False))
    return page_safety.protect(f"<html><head><style>a {{}}</style></head><body>{body}</body></html>")


def _formgrader_page(text: str) -> str:
    """Output text as formgrader's page holds it, with formgrader's own markup below it."""
    own = '<div id="nav"><script>go()</script><button onclick="toggle_name(true);">x</button></div>'
    return formgrader_page.page(f"<html><head></head><body><pre>{text}</pre>{own}</body></html>", own)


def _sized(transform, unit: str) -> int:
    """How many units make the transform take at least 20 ms (at most a million: a shorter time is a timer's
    noise), and the text too long to be remembered (``page_safety.remembered``), so each run makes the page
    afresh."""
    n = max(1_000, page_safety.REMEMBERED_CHARS // len(unit) + 1)
    while n < 1_000_000 and fastest(transform, unit * n, runs=1)[1] < 0.02:
        n *= 2
    return n


def _ratio(transform, unit: str) -> float:
    """The time of 8 times the text over the time of the text, both the fastest of two runs."""
    n = _sized(transform, unit)
    return fastest(transform, unit * (8 * n), runs=2)[1] / fastest(transform, unit * n, runs=2)[1]


@pytest.mark.slow
@pytest.mark.parametrize("transform", [_feedback_page, _formgrader_page], ids=["feedback", "formgrader"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_page_transform_costs_time_linear_in_the_text(transform, shape):
    """One 380 KB markdown cell of ``@font-face{`` once took 80 s to grade and blocked formgrader's server for 75 s
    (a pattern over the whole page, started again at every ``@font-face``); 144 KB of ``\\begin{x}`` took 24 s
    (nbconvert's maths patterns, each searching to the end of the text): 8 times the text must cost about 8 times
    the time, not 64."""
    ratios = [_ratio(transform, SHAPES[shape])]
    while ratios[-1] >= 24 and len(ratios) < 3:  # a busy machine slows one run: a quadratic cost is 64 every time
        ratios.append(_ratio(transform, SHAPES[shape]))
    assert min(ratios) < 24, (shape, ratios)
