"""insights.html of a graded class (tests/helpers/insights_class.py), opened in Chromium as the instructor opens it from
report.html (a local file): every plot displays, every link to a feedback page resolves, clicking a bug lists its
students, nothing is logged on the console, and the page follows the accessibility rules of the lessons (alt text
of at least eight words on every figure, one level-1 heading and no skipped level, a language, headed tables).
A passing run leaves a screenshot in ``build/screenshots/insights.png`` (the README shows a copy,
``docs/insights.png``).
"""

from __future__ import annotations

import pytest

from insights_class import ATTENTION_BUGS, LESSON, graded_class
from labserver import SCREENSHOTS

pytestmark = [pytest.mark.browser, pytest.mark.grading]
MIN_ALT_WORDS = 8  # as tests/unit/publish/test_accessibility.py asks of every lesson figure


@pytest.fixture(scope="module")
def opened(browser, tmp_path_factory):
    out = graded_class(tmp_path_factory)["out"]
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    tab = context.new_page()
    console, requests = [], []
    tab.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    tab.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    tab.on("request", lambda r: requests.append(r.url))
    tab.goto((out / "insights.html").as_uri(), wait_until="load")
    tab.wait_for_timeout(300)
    # what insights.html itself logged and requested (a feedback page opened later logs on its own)
    yield {"tab": tab, "out": out, "console": list(console), "requests": list(requests)}
    context.close()


def test_every_plot_displays_with_its_alt_text(opened):
    images = opened["tab"].evaluate("""[...document.images].map(i => ({
        shown: i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().width > 0, alt: i.alt}))""")
    assert len(images) == 3  # the score distributions of lessons 01 and 05, and the misconceptions bar chart
    assert all(i["shown"] for i in images), images
    assert all(len(i["alt"].split()) >= MIN_ALT_WORDS for i in images), images


def test_every_feedback_link_resolves_and_a_bug_lists_its_students(opened):
    tab, out = opened["tab"], opened["out"]
    hrefs = tab.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))")
    pages = {h for h in hrefs if h.startswith("feedback/")}
    assert pages and all((out / h).is_file() for h in pages), pages
    assert "report.html" in hrefs and (out / "report.html").is_file()
    anchors = {h[1:] for h in hrefs if h.startswith("#")}
    assert all(tab.locator(f"[id='{a}']").count() == 1 for a in anchors), anchors

    row = tab.locator(f"[id='bug-{LESSON}-{ATTENTION_BUGS[0].id}']")
    students = row.locator("details li a")
    assert not students.first.is_visible()
    row.locator("summary").click()
    assert students.count() == 3 and students.first.is_visible()
    students.first.click()
    tab.wait_for_load_state("load")
    assert tab.title() == f"{LESSON}: feedback"
    tab.go_back(wait_until="load")


def test_no_console_error_and_no_request(opened):
    assert opened["console"] == []
    assert all(u.startswith(("file:", "data:")) for u in opened["requests"]), opened["requests"]


def test_headings_language_and_tables_follow_the_accessibility_rules(opened):
    tab = opened["tab"]
    levels = tab.evaluate("[...document.querySelectorAll('h1,h2,h3,h4,h5,h6')].map(h => +h.tagName[1])")
    assert levels[0] == 1 and levels.count(1) == 1
    assert all(b - a <= 1 for a, b in zip(levels, levels[1:])), levels
    assert tab.evaluate("document.documentElement.lang") == "en"
    assert tab.evaluate("[...document.querySelectorAll('table')].every(t => t.querySelector('thead th[scope=col]'))")
    assert tab.evaluate("[...document.querySelectorAll('a')].every(a => a.textContent.trim().length > 0)")


def test_a_screenshot_of_the_page(opened):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / "insights.png"
    opened["tab"].screenshot(path=str(path), clip={"x": 0, "y": 0, "width": 1200, "height": 1400}, full_page=True)
    assert path.stat().st_size > 10_000
