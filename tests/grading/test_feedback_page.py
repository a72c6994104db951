"""The feedback pages of a graded batch (tests/helpers/feedback_batch.py, through the real command) show the learner the
diagnosis first and nothing of the grader: no path of the grading machine, no grading-code file, no source line
of the reference or the hidden checks; no script, no MathJax; a notice page where there was no notebook."""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest

from autograder import course
from feedback_batch import (FIRST_DIAGNOSIS, INJECTIONS, LESSON, SCORES, SYNTAX_ERROR_CODE, TIMEOUT, graded_batch,
                            page, syntax_error_softmax)

pytestmark = pytest.mark.grading


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return graded_batch(tmp_path_factory)


def _pages(batch):
    pages = sorted((batch["out"] / "feedback").glob("*/*.html"))
    assert len(pages) == len(SCORES) + len(INJECTIONS) + 2, pages
    return pages


def _text(path: Path) -> str:
    raw = path.read_text(encoding="utf-8")
    body = raw[raw.index("<body"):]
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def _grading_source_lines() -> set:
    """Lines of the reference and the hidden checks that a learner's own notebook would not contain."""
    files = [*sorted((course.ROOT / "autograder" / "reference").glob("*.py")),
             *sorted((course.ROOT / "autograder" / "checks").glob("*.py"))]
    public = (course.SOLUTIONS / f"{LESSON}.py").read_text() + "".join((course.LESSONS / h).read_text() for h in course.SELFCHECK_FILES)
    public_lines = {line.strip() for line in public.splitlines()}
    lines = set()
    for path in files:
        for line in path.read_text().splitlines():
            line = line.strip()
            if len(line) >= 24 and line not in public_lines and not line.startswith(("#", '"""')):
                lines.add(line)
    return lines


def test_scores_are_what_the_work_earns(batch):
    for student, score in SCORES.items():
        assert batch["scores"][student] == score, (student, batch["scores"])
    assert all(batch["scores"][f"inject_{kind}"] == 8.0 for kind in INJECTIONS)


def test_no_page_shows_a_path_grading_code_or_a_hidden_source_line(batch):
    machine = {str(course.ROOT), str(batch["out"]), str(batch["root"]), sys.prefix,
               str(Path(sys.prefix).resolve()), str(Path.home())}
    hidden = _grading_source_lines()
    assert len(hidden) > 200  # the scan has something to find
    for path in _pages(batch):
        raw = path.read_text(encoding="utf-8")
        text = _text(path)
        for where in machine:
            assert where not in raw, f"{path} shows the path {where}"
        assert not re.search(r"autograder[/.]", raw), f"{path} names grading code"
        assert "HIDDEN TESTS" not in raw, path
        assert not re.search(r"File \S+\.py", text), f"{path} shows a frame of a file (only the learner's cells)"
        leaked = [line for line in hidden if line in text]
        assert not leaked, f"{path} shows grading source lines: {leaked[:3]}"


@pytest.mark.parametrize("student", sorted(FIRST_DIAGNOSIS))
def test_the_diagnosis_comes_first(batch, student):
    text = _text(page(batch, student))
    first_failed = text.index("Tests that lost points")
    assert first_failed < text.index("Lesson 01"), "the failed tests lead the page, before the notebook"
    summary = text[first_failed:text.index("Test cell")]
    assert "lost" in summary and "points" in summary
    assert FIRST_DIAGNOSIS[student] in summary, summary[:1500]


def test_an_uncatalogued_failure_says_what_the_self_check_says_then_which_output_differs(batch):
    text = _text(page(batch, "uncatalogued"))
    said, found = text.index("Your self-check says:"), text.index("The hidden tests found:")
    assert said < found and "on input" in text[found:found + 400]


def test_a_learner_error_keeps_only_the_learners_frames(batch):
    text = _text(page(batch, "learner_error"))
    assert "Where, in your code:" in text
    assert "in normalise: return e / e.sum(axis=axis, keepdims=True)[5]" in text
    assert "site-packages" not in text and "runner" not in text


def test_a_notebook_that_does_not_run_says_first_what_stopped_it(batch):
    """A softmax cell that does not parse: the page leads with its SyntaxError, the line and the offending code, and
    says that softmax was never defined, before the tests that failed on it with NameError."""
    text = " ".join(_text(page(batch, "syntax_error")).split())
    stopped, failed = text.index("What stopped your notebook"), text.index("Tests that lost points")
    assert stopped < failed
    lead = text[stopped:failed]
    assert f"SyntaxError at line {syntax_error_softmax()[1]}:" in lead and SYNTAX_ERROR_CODE in lead, lead
    assert "softmax was never defined" in lead and "NameError" in lead, lead
    assert "NameError" in text[failed:text.index("Lesson 01")]  # what it explains
    for student in FIRST_DIAGNOSIS:  # only a cell that does not parse leads a page this way
        assert "What stopped your notebook" not in _text(page(batch, student)), student


def test_a_timeout_is_one_sentence_naming_the_function(batch):
    text = _text(page(batch, "timeout"))
    assert f"scaled_dot_product_attention did not finish within {TIMEOUT} s" in text
    assert "KeyboardInterrupt" not in text and "No reply from kernel" not in text
    assert any(": timeout:" in flag for flag in batch["flags"]["timeout"]), batch["flags"]["timeout"]


def test_pages_run_no_script_load_nothing_and_render_maths(batch):
    from bs4 import BeautifulSoup

    for path in [*_pages(batch), batch["out"] / "report.html"]:
        raw = path.read_text(encoding="utf-8")
        head = raw[:raw.index("</head>")]
        assert '<meta http-equiv="Content-Security-Policy"' in head and "script-src 'none'" in head, path
        soup = BeautifulSoup(raw, "html.parser")
        assert not soup.find_all(["script", "iframe", "form", "object", "embed", "link", "base"]), path
        handlers = [(tag.name, a) for tag in soup.find_all(True) for a in tag.attrs if a.lower().startswith("on")]
        assert not handlers, (path, handlers[:3])
        assert not [img["src"][:30] for img in soup.find_all("img", src=True) if not img["src"].startswith("data:")]
        assert "mathjax" not in raw.lower()
        assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//|url\(\s*[\"']?(https?:)?//|@import", head), path
    graded = page(batch, "known_bug").read_text(encoding="utf-8")
    assert graded.count("<math") > 10  # the lesson's formulas, rendered when the page was written


@pytest.mark.parametrize("kind", sorted(INJECTIONS))
def test_injected_markup_is_shown_as_text(batch, kind):
    raw = page(batch, f"inject_{kind}").read_text(encoding="utf-8")
    body = raw.split("<body", 1)[1]
    assert "My notes:" in body
    tag = re.match(r"<(\w+)", INJECTIONS[kind]).group(1)
    assert not re.search(rf"<{tag}\b[^>]*\son\w+=", body, re.I), "an event handler survived"
    if tag != "img":
        assert f"&lt;{tag}" in body, "the markup should be visible to the instructor as text"


def test_the_setup_cell_shows_no_score(batch):
    for path in _pages(batch):
        assert "0.0 / 0.0" not in path.read_text(encoding="utf-8"), path


@pytest.mark.parametrize("student, says", [("missing", "No notebook for 01_warmup was found"),
                                           ("unreadable", "notebook could not be read")])
def test_a_notebook_that_could_not_be_graded_gets_a_notice_page(batch, student, says):
    text = _text(page(batch, student))
    assert says in text and ("re-submit" in text or "Submit your work" in text)
    assert f'href="feedback/{student}/{LESSON}.html"' in (batch["out"] / "report.html").read_text()


def test_traceback_colours_become_classes_the_policy_allows():
    import base64
    import hashlib

    from nbconvert.filters.ansi import ansi2html

    from autograder.grading.pipeline import page_safety

    coloured = ansi2html("\x1b[38;5;28;01mreturn\x1b[39;00m \x1b[31mx\x1b[39m")  # IPython's 256-colour keyword
    assert 'style="color: rgb(0,135,0)"' in coloured
    page = page_safety.protect(f'<html><head><style>p {{}}</style></head><body>{coloured}<p style="x">t</p>'
                               "</body></html>")
    head, body = page.split("</head>")
    assert 'style="' not in body
    assert '<span class="ansi-bold mha-colour-0">return</span>' in body and 'class="ansi-red-fg"' in body
    blocks = re.findall(r"<style>(.*?)</style>", head, re.S)
    assert ".mha-colour-0 { color: rgb(0,135,0); }" in blocks[-1]
    digest = base64.b64encode(hashlib.sha256(blocks[-1].encode()).digest()).decode()
    assert f"'sha256-{digest}'" in re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', head).group(1)


def test_page_parts_are_remembered_by_their_whole_text():
    """Code highlighting, markdown and cleaning are done once per distinct text in a grading process (most cells
    of a class's notebooks are the lesson's own): a remembered part is the part the text makes, and a text that
    differs by one character is made afresh."""
    from nbconvert.filters.highlight import Highlight2HTML
    from nbconvert.filters.markdown_mistune import MarkdownWithMath

    from autograder.grading.pipeline import feedback_page, page_safety

    highlight = feedback_page.RememberedHighlight(pygments_lexer="ipython3")
    for source in ("x = 1\n", "x = 2\n", "%%bash\necho hi\n", "y = 3\n" * 5000):
        for _ in range(2):
            assert highlight(source) == Highlight2HTML(pygments_lexer="ipython3")(source)
    assert highlight("x = 1\n") != highlight("x = 2\n")

    for text in ("$a^2$ and *b*", "$a^3$ and *b*", "<script>alert(1)</script>", "# T\n" + "word " * 5000):
        for _ in range(2):
            fresh = MarkdownWithMath(renderer=feedback_page.MathMLRenderer(
                escape=False, attachments={}, embed_images=False, anchor_link_text="¶",
                exclude_anchor_links=False)).render(text)
            assert feedback_page.markdown_html(text, "¶", False) == fresh
            assert page_safety.clean(fresh) == page_safety._CLEANER.clean(fresh)
    assert page_safety.clean("<b>1</b>") == "<b>1</b>" and page_safety.clean("<b>2</b>") == "<b>2</b>"
    assert "<script>" not in page_safety.clean("<script>alert(1)</script>")
