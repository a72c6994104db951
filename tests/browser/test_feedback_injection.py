"""Feedback pages run no learner code, in Chromium.

Each page comes from a notebook of the graded batch in tests/helpers/feedback_batch.py whose learner added a markdown
cell and an output carrying one injection (a script, an ``<img onerror>``, an ``<iframe>``, a form posting
elsewhere). Opened as the instructor opens them from report.html (a local file), they log nothing, request
nothing but the page itself and leave the injected code's mark nowhere. The same markup in an unprotected page
does run (so the watchers can see it), and the Content-Security-Policy alone stops it too.
"""

from __future__ import annotations

import pytest

from autograder.grading.pipeline import page_safety
from feedback_batch import INJECTIONS, graded_batch, page

pytestmark = [pytest.mark.browser, pytest.mark.grading]


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return graded_batch(tmp_path_factory)


def _open(browser, path):
    """Open ``path``; return what happened: console messages, page errors, requests, the injected mark, title."""
    context = browser.new_context()
    events = {"console": [], "requests": [], "refused": []}
    try:
        tab = context.new_page()
        tab.on("console", lambda m: events["console"].append(f"{m.type}: {m.text}"))
        tab.on("pageerror", lambda e: events["console"].append(f"pageerror: {e}"))
        tab.on("request", lambda r: events["requests"].append(r.url))
        tab.on("requestfailed", lambda r: "csp" in (r.failure or "").lower() and events["refused"].append(r.url))
        url = path.as_uri()
        tab.goto(url, wait_until="load")
        tab.wait_for_timeout(700)  # timers, frame loads and form submissions would have happened by now
        # a request the Content-Security-Policy refused never left the browser
        events["requests"] = [u for u in events["requests"]
                              if u != url and not u.startswith("data:") and u not in events["refused"]]
        events["mark"] = tab.evaluate("document.body && document.body.dataset.injected || null")
        events["title"] = tab.title()
        events["elements"] = tab.evaluate("document.querySelectorAll('script, iframe, form, object, embed').length")
        events["text"] = tab.inner_text("body")
    finally:
        context.close()
    return events


@pytest.mark.parametrize("kind", sorted(INJECTIONS))
def test_an_injected_feedback_page_runs_nothing(browser, batch, kind):
    seen = _open(browser, page(batch, f"inject_{kind}"))
    assert seen["console"] == [], seen["console"]
    assert seen["requests"] == [], seen["requests"]
    assert seen["mark"] is None and seen["elements"] == 0
    assert seen["title"] == "01_warmup: feedback"
    assert "My notes:" in seen["text"]


def test_the_report_runs_nothing(browser, batch):
    seen = _open(browser, batch["out"] / "report.html")
    assert seen["console"] == [] and seen["requests"] == [] and seen["elements"] == 0


@pytest.mark.parametrize("kind", ["script", "img", "iframe", "form"])
def test_the_watchers_see_the_same_markup_run_in_an_unprotected_page(browser, tmp_path, kind):
    path = tmp_path / "raw.html"
    path.write_text(f"<!DOCTYPE html><html><head><title>raw</title></head><body>{INJECTIONS[kind]}</body></html>")
    seen = _open(browser, path)
    assert seen["console"] or seen["requests"] or seen["mark"], seen


@pytest.mark.parametrize("kind", ["script", "img", "iframe", "form"])
def test_the_content_security_policy_alone_stops_it(browser, tmp_path, kind):
    path = tmp_path / "csp.html"
    raw = f"<!DOCTYPE html><html><head><title>csp</title></head><body>{INJECTIONS[kind]}</body></html>"
    path.write_text(page_safety.protect(raw))
    seen = _open(browser, path)
    assert seen["mark"] is None and seen["requests"] == [], seen
    assert not [m for m in seen["console"] if "injected" in m], seen["console"]


def test_a_page_with_a_learners_traceback_logs_nothing(browser, batch):
    seen = _open(browser, page(batch, "learner_error"))
    assert "IndexError" in seen["text"]
    assert seen["console"] == [], seen["console"]  # its colours are classes the policy allows, not style attributes
