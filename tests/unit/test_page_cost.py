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
from autograder.grading.pipeline import feedback_page, page_safety

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
