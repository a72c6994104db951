"""The page nbgrader's formgrader shows the instructor for one submission, made as inert as a feedback page.

formgrader renders a submission with nbconvert's ``HTMLExporter`` (one made when JupyterLab starts, from the course's
``nbgrader_config.py``) and nbgrader's ``formgrade`` template, which puts a written answer's markdown on the page
raw and leaves maths to MathJax from a CDN; the page runs in the Jupyter server's own origin, where a learner's
script could use the server's API as the instructor. ``configure`` (called by ``autograder/nbgrader_config.py``) sets
that exporter, through its configurable settings alone, to:

* the template ``mha_formgrade`` (``templates/mha_formgrade/``): nbgrader's own page (its navigation, score and
  comment boxes and their scripts), passed whole through ``page``, which heads it with the Content-Security-Policy
  of ``page_safety.protect``: the scripts of ``<head>`` and of nbgrader's navigation bar, written before any learner
  content, get a nonce drawn afresh for each page; any other script does not run. No MathJax is loaded: a small
  script stands in for the part of it nbgrader's scripts call;
* ``sanitize_html``, so every output goes through ``clean_html``, here ``page_safety.clean`` (JavaScript outputs
  and widgets are left out);
* ``markdown2html``: ``markdown_html`` below, markdown with maths as MathML (the feedback pages' renderer) and a
  written answer's pasted images (its attachments), then ``page_safety.clean``: a written answer's markup is shown as
  text, its maths still rendered;
* ``get_metadata``: ``page_safety.output_metadata``: an image's width and height only as numbers (nbconvert writes
  them unquoted into the tag: a string there could add an attribute, a handler formgrader's policy allows).
"""

from __future__ import annotations

from jinja2 import pass_context

from autograder.grading.pipeline import feedback_page, page_safety

TEMPLATE_NAME = "mha_formgrade"
FILTERS = {
    "markdown2html": f"{__name__}.markdown_html",
    "clean_html": f"{page_safety.__name__}.clean",
    "get_metadata": f"{page_safety.__name__}.output_metadata",
    "mha_formgrader_page": f"{__name__}.page",
}


@pass_context  # a written answer's pasted images are its cell's attachments, read from the template's context
def markdown_html(context, source: str) -> str:
    """A markdown cell or output as the formgrader shows it: maths as MathML, pasted images shown, then
    sanitised."""
    return page_safety.clean(feedback_page.cell_markdown_html(context, source, "¶", False))


def page(html: str, own_markup: str) -> str:
    """The whole submission page, headed by its Content-Security-Policy, every figure with an alt text (nbconvert
    would add it after, with a warning on the server's log); ``own_markup``: nbgrader's navigation bar, the page's
    own markup in ``<body>``."""
    return page_safety.protect(page_safety.with_alt_text(html), own_markup=own_markup)


def configure(c) -> None:
    """Make formgrader's ``HTMLExporter`` write the inert page (``c``: the nbgrader config a course folder loads)."""
    c.HTMLExporter.template_name = TEMPLATE_NAME
    c.HTMLExporter.extra_template_basedirs = [str(feedback_page.TEMPLATES), str(feedback_page.NBGRADER_TEMPLATES)]
    # nbgrader's formgrade template itself, included by name ('formgrade/index.html.j2') by ours
    c.HTMLExporter.extra_template_paths = [str(feedback_page.NBGRADER_TEMPLATES)]
    c.HTMLExporter.sanitize_html = True
    c.HTMLExporter.filters = dict(FILTERS)
    # no "Current configuration" panel on Manage Assignments: it would print the settings, a gradebook URL's
    # password included, and warn on the server's log that they are not serializable
    c.FormgradeExtension.debug = False
