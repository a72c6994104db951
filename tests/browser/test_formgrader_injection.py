"""formgrader is safe to open: a hostile submission graded through the real grading command
(tests/helpers/formgrader_class.py: script, ``<img onerror>``, ``<svg onload>`` and a ``javascript:`` link in a
written answer; ``text/html``, ``application/javascript`` and SVG outputs carrying script) is opened in formgrader as
`make formgrader` serves it, in Chromium, with every request to another server refused. formgrader opens with no
warning (its exchange folder exists) and asks for nothing outside the Jupyter server. Nothing the learner wrote runs:
no global set, no dialog, no file written through the server's ``/api/contents``; her answer's text and maths, and
her outputs' text, are on screen, every formula of the page laid out as MathML with no TeX left raw; and formgrader's
own scripts still work: the instructor's score is saved to the gradebook.
"""

from __future__ import annotations

import re
import secrets
import time

import pytest

import page_maths
from autograder import course
from autograder.grading.records.settings import COURSE_ID
from formgrader_class import ANSWER, ANSWER_TEXT, LESSON, OUTPUT_TEXT, STUDENT, graded
from labserver import LabServer, free_port, lab_args

pytestmark = [pytest.mark.browser, pytest.mark.grading]
SCORE = 2.0


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    result = graded(tmp_path_factory)
    assert result["rc"] == 0, result["output"]
    return result


def _injected_files(server):
    return sorted(item["name"] for item in server.api("contents")["content"] if item["name"].startswith("injected"))


def _manual_score(out):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:
        return gb.find_grade(ANSWER, LESSON, LESSON, STUDENT).manual_score


def test_formgrader_shows_a_hostile_submission_inert(browser, batch, tmp_path, new_page):
    out = batch["out"]
    # formgrader serves the files beside a graded notebook as they are (/formgrader/submissions/<id>/<file>): the
    # page the notebook wrote stayed in its kernel's throw-away folder (docs/sandbox.md), so none is there to serve
    folder = out / "course" / "autograded" / STUDENT / LESSON
    assert sorted(p.name for p in folder.iterdir()) == [f"{LESSON}.ipynb"]
    port, token = free_port(), secrets.token_hex(16)
    cmd = ["make", "formgrader", f"OUT={out}", f"LAB_ARGS={' '.join(lab_args(port, token, allow_root=False))}"]
    server = LabServer(cmd, cwd=course.ROOT, root=out / "course", home=tmp_path, port=port, token=token)
    try:
        server.wait_ready()
        page = new_page(server)
        dialogs, console, elsewhere = [], [], []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(server.url + "/")
                   else (elsewhere.append(route.request.url), route.abort()))  # offline but for the server

        page.goto(f"{server.url}/?token={token}")  # `make formgrader` opens formgrader itself
        assert "/formgrader/" in page.url, page.url
        page.wait_for_load_state("networkidle")
        assert page.locator(".alert").all_inner_texts() == []  # no warning: the exchange, the course id
        assert page.locator("#config").count() == 0  # nor the settings (a gradebook password among them)
        page.goto(f"{server.url}/formgrader/gradebook/{LESSON}/{LESSON}")
        page.locator("a[href*='/formgrader/submissions/']").first.click()  # Manual Grading: the one submission
        page.wait_for_url("**/formgrader/submissions/**")
        page.wait_for_load_state("load")
        page.get_by_text("open this link").click()  # the javascript: link, as a curious instructor would
        page.wait_for_timeout(1500)  # timers and requests would have happened by now

        ran = {"globals": page.evaluate("window.mhaInjected || []"), "dialogs": dialogs,
               "files": _injected_files(server)}
        assert ran == {"globals": [], "dialogs": [], "files": []}, ran
        assert page.locator('meta[http-equiv="Content-Security-Policy"]').count() == 1
        assert console == [], console  # nothing refused: formgrader's own scripts and styles all load and run

        answer = page.locator(".nbgrader_cell", has_text=ANSWER_TEXT)
        assert answer.count() == 1 and answer.is_visible()
        assert answer.locator("img[alt='sketch']").is_visible()  # the pasted image: the page is whole
        assert page.evaluate("document.querySelectorAll('[onerror]').length") == 0  # no width became a handler
        assert answer.locator("math").count() >= 3 and answer.locator("math").first.is_visible()
        maths = page_maths.read(page)
        assert page_maths.problems(maths) == [] and len(maths["maths"]) > 50  # the lesson's own formulas too
        assert "<script>(window.mhaInjected=" in answer.inner_text()  # the injected markup shown as text
        assert page.locator(".output_subarea pre", has_text=OUTPUT_TEXT).is_visible()
        assert page.locator(".output_html b", has_text="bold output").is_visible()

        # formgrader's own scripts run: a score typed for the written answer reaches the gradebook
        box = page.locator(f"input#{ANSWER}")
        box.fill(f"{SCORE:g}")
        box.press("Tab")
        deadline = time.monotonic() + 15
        while _manual_score(out) != SCORE and time.monotonic() < deadline:
            time.sleep(0.25)
        assert _manual_score(out) == SCORE
        assert [page.evaluate("window.mhaInjected || []"), dialogs, _injected_files(server), console] == [[]] * 4
        assert elsewhere == []  # nothing asked of the network: no MathJax, no font, no style sheet from a CDN
        warned = re.findall(r"^\[[WEC] .*", server.log.read_text(errors="replace"), re.M)
        assert warned == [], warned  # the server logged no warning either
    finally:
        server.stop()
