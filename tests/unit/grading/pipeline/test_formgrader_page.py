"""formgrader's page of a submission (autograder/grading/pipeline/formgrader_page.py), rendered offline with the
``HTMLExporter`` formgrader makes from the course's config: the hostile submission of tests/helpers/formgrader_class.py
shows its written answer as text with its maths, and a formula it displays, as MathML, runs no script but formgrader's own (each carries the
page's nonce, drawn afresh per page), loads no MathJax and nothing from another server. In Chromium, through a real
graded batch and a real formgrader: tests/browser/test_formgrader_injection.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nbconvert.exporters import HTMLExporter
from nbgrader.server_extensions.formgrader.formgrader import FormgradeExtension
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from autograder import course
from autograder.grading.pipeline import feedback_page, page_safety
from formgrader_class import ANSWER_TEXT, LESSON, OUTPUT_TEXT, STUDENT, hostile_notebook, with_outputs

RESOURCES = {"assignment_id": LESSON, "notebook_id": LESSON, "submission_id": "0123abcd", "index": 0, "total": 1,
             "base_url": "", "student": STUDENT, "last_name": None, "first_name": None,
             "notebook_path": f"autograded/{STUDENT}/{LESSON}/{LESSON}.ipynb"}


def formgrader_config() -> Config:
    """The config formgrader's exporter gets: nbgrader's own settings, then the course's
    (``autograder/nbgrader_config.py``)."""
    config = Config()
    config.merge(FormgradeExtension().build_extra_config())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHA_GRADING_SALT", "1")  # the config file would otherwise draw one for this process
        config.merge(PyFileConfigLoader("nbgrader_config.py", path=str(course.ROOT / "autograder")).load_config())
    return config


@pytest.fixture(scope="module")
def pages():
    exporter = HTMLExporter(config=formgrader_config())  # as formgrader makes it, once
    nb = with_outputs(hostile_notebook())
    return [exporter.from_notebook_node(nb, resources=dict(RESOURCES))[0] for _ in range(2)]


def _policy(page):
    return re.search(r'<meta[^>]*content="([^"]*)"[^>]*http-equiv="Content-Security-Policy"', page).group(1)


def test_only_formgraders_own_scripts_carry_the_pages_nonce(pages):
    page = pages[0]
    policy = _policy(page)
    nonce = re.search(r"'nonce-([^']+)'", policy).group(1)
    assert "script-src 'nonce-" in policy and "'unsafe-inline'" not in policy and "default-src 'none'" in policy
    scripts = re.findall(r"<script\b[^>]*>", page)
    assert scripts and all(f'nonce="{nonce}"' in tag for tag in scripts), scripts
    assert len(scripts) == 15  # nbgrader's template's own: 11 files, 4 inline (the MathJax stand-in one of them)
    assert _policy(pages[1]) != policy  # a fresh nonce for every page


def test_the_learners_markup_is_text_and_her_maths_mathml(pages):
    page = pages[0]
    for attribute in ("onerror=", "onload=", "javascript:"):
        assert not re.search(rf"<[^<>]*\s{attribute}", page), attribute
    assert "&lt;script&gt;(window.mhaInjected=" in page  # shown as text
    answer = page[page.index(ANSWER_TEXT):]
    assert answer.index("<math") < answer.index("&lt;script&gt;")  # the answer's maths rendered, in the browser
    assert OUTPUT_TEXT in page and "<b>bold output</b>" in page
    latex = re.search(r'<div class="output_latex[^"]*">(.*?)</div>', page, re.DOTALL).group(1)
    assert "<math" in latex and "<mfrac>" in latex and "\\frac" not in latex  # a formula output, as MathML
    javascript = re.findall(r'<div[^>]*class="output_subarea output_javascript[^"]*"[^>]*>(.*?)</div>', page,
                            re.DOTALL)
    assert [js.strip() for js in javascript] == [""]  # the JavaScript output is left out
    assert "cdnjs" not in page and not re.search(r"<script[^>]*src=[^>]*mathjax", page, re.IGNORECASE)  # no MathJax
    assert not re.search(r"""<(script|link)[^>]*(src|href)=["']?(https?:)?//""", page)  # nothing from another server


def test_the_feedback_exporter_keeps_its_own_filters():
    config = formgrader_config()
    config.merge(Config({"FeedbackExporter": {}}))
    exporter = feedback_page.FeedbackExporter(config=config)
    assert exporter.filters == {} and exporter.template_name == feedback_page.TEMPLATE_NAME


def test_a_served_page_without_its_own_markup_is_refused():
    with pytest.raises(ValueError, match="own markup"):
        page_safety.protect("<html><head></head><body><p>x</p></body></html>", own_markup="<nav>missing</nav>")


PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgAAACAAFUok9dAAAAAElFTkSuQmCC")  # a 1x1 PNG


def _answer_with_a_pasted_image_and_a_sized_output():
    """A written answer with an image pasted into it (JupyterLab keeps it as the cell's attachment), and an image
    output whose display metadata carries markup in its width, as a notebook's ``display(..., metadata=...)`` can."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    answer = nbformat.v4.new_markdown_cell("My sketch of the heads: ![heads](attachment:heads.png)")
    answer.attachments = {"heads.png": {"image/png": PIXEL}}
    answer.metadata.nbgrader = {"grade_id": "explain", "solution": True, "grade": True, "points": 1, "score": 1.0,
                                "schema_version": 3}
    plot = nbformat.v4.new_code_cell("show()")
    plot.outputs = [nbformat.v4.new_output("display_data", data={"image/png": PIXEL}, metadata={
        "image/png": {"width": "1 onerror=toggle_name(true);", "height": 5}})]
    nb.cells = [answer, plot]
    return nb


def test_a_pasted_image_is_shown_and_an_images_size_is_only_a_number():
    nb = _answer_with_a_pasted_image_and_a_sized_output()
    formgrader = HTMLExporter(config=formgrader_config()).from_notebook_node(nb, resources=dict(RESOURCES))[0]
    from test_feedback_pending import BOOTSTRAP_CSS

    css = Path(__import__("nbgrader").__file__).parent / BOOTSTRAP_CSS  # where generate_feedback has it found
    feedback = feedback_page.FeedbackExporter(config=Config({"HTMLExporter": {"extra_template_paths": [str(css)]}})) \
        .from_notebook_node(nb, resources={"nbgrader": {"notebook": LESSON, "score": 1, "max_score": 1, "late_penalty": 0}})[0]
    for page in (formgrader, feedback):
        images = re.findall(r"<img\b[^>]*>", page)
        assert f'src="data:image/png;base64,{PIXEL}"' in images[0] and 'alt="heads"' in images[0], images
        assert re.search(r'\bheight="?5"?\s', images[1]) and "width" not in images[1], images
        assert "onerror=toggle_name(true);" not in page and not any("onerror" in tag for tag in images)


@pytest.mark.parametrize("value, shown", [(320, "320"), (12.5, "12.5"), ("240", "240"), ("1 onerror=x", None),
                                          (True, None), (-4, None), ("50%", None), ([1], None), (None, None)])
def test_display_sizes_are_numbers_or_nothing(value, shown):
    output = {"metadata": {"image/png": {"width": value}}}
    assert page_safety.output_metadata(output, "width", "image/png") == shown
    assert page_safety.output_metadata({"metadata": {"alt": "a plot"}}, "alt") == "a plot"  # other keys as they are
