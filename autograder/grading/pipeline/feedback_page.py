"""The feedback page a learner receives, written by nbgrader's ``generate_feedback`` with this exporter.

``autograder/nbgrader_config.py`` (loaded by every course folder the tools create) calls ``configure``, so every
feedback page, also one regenerated later with ``nbgrader generate_feedback``, is:

* without the hidden tests' source (only the learner-visible part of each test cell is shown) and without the
  self-check modules the first code cell carries (``autograder/course/helper_cell.py``: only its note is shown);
* led by what stopped the notebook, when a cell of the learner's could not be read (its ``SyntaxError``, the
  line, and the names it left undefined: ``learner_errors.unread_cells``); then by the tests that lost points: each
  test's name, the points lost and the diagnosis (the error text that ``autograder.grading.pipeline.learner_errors``
  left in the cell), wrapped to the page; then nbgrader's view of the notebook, with the zero-point setup cell shown
  without a score;
* sanitised (nbconvert's ``sanitize_html`` for outputs, and the markdown too, which nbgrader's own template
  leaves raw) with ``autograder.grading.pipeline.page_safety.clean``;
* self-contained and offline: maths is MathML written into the page, there is no script at all, and a strict
  Content-Security-Policy heads the page.

Where the pages are copied to and what is added to them after nbgrader wrote them (what changed since the learner's
last page, the notice a learner gets instead when their notebook was missing or unreadable) is the grading run's:
``autograder/grading/run/feedback_files.py``.
"""

from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path

import jinja2
from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.filters.strings import _convert_header_id
from nbgrader.preprocessors import GetGrades
from traitlets.config import Config

from autograder.course import helper_cell
from autograder.grading.pipeline import learner_errors, linear_markdown, page_safety

TEMPLATES = Path(__file__).parent / "templates"
_HIDDEN_TESTS = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS\n.*?^[ \t]*### END HIDDEN TESTS[ \t]*(\n|$)", re.S | re.M)
TEMPLATE_NAME = "mha_feedback"
NBGRADER_TEMPLATES = Path(__import__("nbgrader").__path__[0]) / "server_extensions" / "formgrader" / "templates"


def without_hidden_tests(source: str) -> str:
    """A test cell's source as the learner saw it: the hidden tests (the grading code's calls) left out."""
    return _HIDDEN_TESTS.sub("", source)


def shown_source(cell) -> str:
    """A code cell's source as its feedback page shows it: without hidden tests, and for the first code cell only
    its note (the self-check modules it carries are no feedback)."""
    return helper_cell.summary(cell.source) if helper_cell.is_cell(cell) else without_hidden_tests(cell.source)


_TAG = re.compile(r"<[^>]*>")


class MathMLRenderer(IPythonRenderer):
    """nbconvert's markdown renderer with maths written as MathML instead of TeX left for MathJax.

    Headings get their anchor here, on the text (the id nbconvert's ``_convert_header_id`` makes of it): nbconvert's
    ``add_anchor`` parses a heading with ElementTree, whose output writes MathML's namespace as a prefix
    (``<ns0:math>``), markup no browser renders as maths."""

    def heading(self, text: str, level: int, **attrs) -> str:
        if self.exclude_anchor_links:
            return f"<h{level}>{text}</h{level}>\n"
        anchor = html.escape(_convert_header_id(html.unescape(_TAG.sub("", text))))
        return (f'<h{level} id="{anchor}">{text}<a class="anchor-link" href="#{anchor}">{self.anchor_link_text}</a>'
                f"</h{level}>\n")

    def block_math(self, body: str) -> str:
        return page_safety.math_html(body, display=True)

    def inline_math(self, body: str) -> str:
        return page_safety.math_html(body)

    def latex_environment(self, name: str, body: str) -> str:
        return page_safety.math_html(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)


@page_safety.remembered
def _highlighted(source: str, lexer: str, language, metadata: str, options: str) -> str:
    return Highlight2HTML(pygments_lexer=lexer, extra_formatter_options=json.loads(options))(
        source, language, json.loads(metadata))


class RememberedHighlight(Highlight2HTML):
    """nbconvert's code highlighting, remembered per process (``page_safety.remembered``): most code cells of a
    class's notebooks are the lesson's own, the same in every submission a worker grades."""

    def __call__(self, source, language=None, metadata=None):
        return _highlighted(source, self.pygments_lexer, language,
                            json.dumps(metadata or {}, sort_keys=True, default=str),
                            json.dumps(self.extra_formatter_options, sort_keys=True, default=str))


@page_safety.remembered
def markdown_html(source: str, anchor_link_text: str, exclude_anchor_links: bool) -> str:
    renderer = MathMLRenderer(escape=False, attachments={}, embed_images=False, anchor_link_text=anchor_link_text,
                              exclude_anchor_links=exclude_anchor_links)
    return MarkdownWithMath(renderer=renderer, **linear_markdown.parsers()).render(source)


def cell_markdown_html(context, source: str, anchor_link_text: str, exclude_anchor_links: bool) -> str:
    """A markdown cell with the images pasted into it (its attachments, as JupyterLab stores them) as ``data:``
    images; a cell without any as ``markdown_html`` (remembered)."""
    attachments = context.get("cell", {}).get("attachments", {}) or {}
    if not attachments:  # the same text, the same page part
        return markdown_html(source, anchor_link_text, exclude_anchor_links)
    renderer = MathMLRenderer(escape=False, attachments=attachments, embed_images=False,
                              anchor_link_text=anchor_link_text, exclude_anchor_links=exclude_anchor_links)
    return MarkdownWithMath(renderer=renderer, **linear_markdown.parsers()).render(source)


class _CompiledTemplates(jinja2.BytecodeCache):
    """Compiled page templates kept in memory, shared by every page a process writes (nbgrader makes a new
    exporter, so a new jinja environment, for each notebook; jinja checks each template's source before reuse)."""

    def __init__(self):
        self.store = {}

    def load_bytecode(self, bucket):
        if bucket.key in self.store:
            bucket.bytecode_from_string(self.store[bucket.key])

    def dump_bytecode(self, bucket):
        self.store[bucket.key] = bucket.bytecode_to_string()


_COMPILED = _CompiledTemplates()


class FeedbackExporter(HTMLExporter):
    """nbgrader's feedback HTML, sanitised, with maths rendered at write time and a Content-Security-Policy."""

    def __init__(self, config=None, **kwargs):
        # Settings of this class outrank HTMLExporter's, which nbgrader's formgrader and API also set.
        config = copy.deepcopy(config) if config is not None else Config()
        config.FeedbackExporter.template_name = TEMPLATE_NAME
        config.FeedbackExporter.extra_template_basedirs = [str(TEMPLATES), str(NBGRADER_TEMPLATES)]
        config.FeedbackExporter.sanitize_html = True
        config.FeedbackExporter.filters = {}  # not formgrader's page filters (formgrader_page.py), set on HTMLExporter
        super().__init__(config=config, **kwargs)

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = _COMPILED
        return environment

    @pass_context  # the filter reads the cell's attachments from the template context
    def markdown2html(self, context, source):
        return cell_markdown_html(context, source, self.anchor_link_text, bool(self.exclude_anchor_links))

    def default_filters(self):
        yield from super().default_filters()
        yield "clean_html", page_safety.clean  # registered last, so it replaces nbconvert's
        yield "markdown2html", self.markdown2html
        yield "get_metadata", page_safety.output_metadata

    def from_notebook_node(self, nb, resources=None, **kw):
        nb = copy.deepcopy(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.source = shown_source(cell)
        resources = {**(resources or {}), "unread_cells": learner_errors.unread_cells(nb)}
        page, resources = self._render(nb, resources, **kw)
        return page_safety.protect(page), resources

    def _render(self, nb, resources=None, **kw):
        """HTMLExporter.from_notebook_node without its last pass, which parses the whole page again with
        BeautifulSoup (half the cost of a page) to give ``<img>`` an alt text, done here on the text
        (``page_safety.with_alt_text``), and to make
        JupyterLab-template cells focusable, which this classic template has none of."""
        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        self.register_filter("highlight_code",
                             self.filters.get("highlight_code", RememberedHighlight(pygments_lexer=lexer, parent=self)))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata,
                                                                       parent=self, resources=resources))
        page, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return page_safety.with_alt_text(page), resources


class GetGradesAndPending(GetGrades):
    """nbgrader's ``GetGrades`` (each graded cell's score and comment from the gradebook), which also marks each
    cell that awaits the instructor (``pending``: nbgrader's ``needs_manual_grade``, a written answer not marked yet
    or whose mark went back to pending) and gives the page's title the points awaited and the score without them,
    the score of ``marks.marks``: an unmarked answer is shown as awaiting the instructor, never as a score of 0, and
    a mark that awaits the instructor again is not counted (nbgrader's own total still holds it)."""

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        waiting = [c.metadata.nbgrader for c in nb.cells if c.metadata.get("nbgrader", {}).get("pending")]
        resources["nbgrader"]["pending"] = sum(meta.get("points") or 0 for meta in waiting)
        resources["nbgrader"]["score"] -= sum(meta.get("score") or 0 for meta in waiting)
        return nb, resources

    def _get_score(self, cell, resources) -> None:
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                          self.assignment_id, self.student_id)
        cell.metadata.nbgrader["score"] = grade.score
        cell.metadata.nbgrader["points"] = grade.max_score
        cell.metadata.nbgrader["pending"] = bool(grade.needs_manual_grade)


def configure(c) -> None:
    """Make nbgrader's generate_feedback write its pages with ``FeedbackExporter`` and read the grades with
    ``GetGradesAndPending`` (``c``: an nbgrader config)."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

    c.GenerateFeedback.exporter_class = FeedbackExporter
    c.GenerateFeedback.preprocessors = [GetGradesAndPending, CSSHTMLHeaderPreprocessor]
