"""One class graded through the real command for the feedback-page tests (tests/grading/test_feedback_page.py and
tests/browser/test_feedback_injection.py): failed hidden tests, a learner error, a timeout, a cell that does not
parse, outputs and markdown carrying injected script, a missing and an unreadable notebook. ``graded_batch`` grades
it once per session.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from autograder import grade
from autograder.course.notebooks import write_notebook
from autograder.course import answers
from run_once import once

LESSON = "01_warmup"
TIMEOUT = 6
# Each injection runs console.log and marks the page if it ever runs; the browser test watches for both.
INJECTIONS = {
    "script": "<script>console.log('injected');document.body.dataset.injected='script'</script>",
    "img": "<img src=x onerror=\"console.log('injected');document.body.dataset.injected='img'\">",
    "iframe": "<iframe src=\"http://127.0.0.1:9/injected\" onload=\"document.body.dataset.injected='iframe'\">"
              "</iframe>",
    "form": "<form action=\"http://127.0.0.1:9/injected\" method=\"post\"><input name=\"answer\" value=\"42\">"
            "<button id=\"injected-submit\" autofocus onfocus=\"this.form.submit()\">send</button></form>",
}
# what each student's feedback must lead with (the first failed test's diagnosis)
FIRST_DIAGNOSIS = {
    "uncatalogued": "Your self-check says:",
    "learner_error": "softmax raised IndexError",
    "timeout": "scaled_dot_product_attention did not finish within",
    "known_bug": "[attention_softmax_query_axis]",
}
SCORES = {"uncatalogued": 5.0, "learner_error": 5.0, "timeout": 3.0, "known_bug": 3.0, "syntax_error": 5.0}
# the line of "syntax_error"'s softmax answer cell that does not parse
SYNTAX_ERROR_CODE = "total = np.sum(e, axis=axis keepdims=True)"


def syntax_error_softmax() -> tuple:
    """(source, line number): lesson 01's model softmax with a comma missing on one line."""
    model = answers.model_answers(LESSON)["softmax"]
    source = model.replace(SYNTAX_ERROR_CODE.replace("axis ", "axis, "), SYNTAX_ERROR_CODE)
    assert source != model, "the model softmax no longer has the line the syntax error is made in"
    return source, 1 + next(i for i, line in enumerate(source.splitlines()) if SYNTAX_ERROR_CODE in line)


def _with_cells(nb, after_grade_id, *cells):
    index = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == after_grade_id)
    nb.cells[index + 1:index + 1] = list(cells)
    for i, cell in enumerate(nb.cells):
        cell["id"] = cell.get("id") or f"extra-{i}"
    return nb


def _injected(html: str):
    """A complete notebook whose learner added a markdown cell and a code cell that displays ``html``."""
    code = ("from IPython.display import HTML, Javascript, display\n"
            f"display(HTML({html!r}))\n"
            "display(Javascript(\"console.log('injected')\"))\n"
            "import os\nprint('working in', os.getcwd())\n")
    return _with_cells(answers.fill(LESSON), "softmax", nbformat.v4.new_markdown_cell(f"My notes: {html}"),
                       nbformat.v4.new_code_cell(code))


def notebooks() -> dict:
    scaled = "def softmax(x, axis=-1):\n    e = np.exp(x - x.max(axis=axis, keepdims=True))\n" \
             "    return 1.01 * e / e.sum(axis=axis, keepdims=True)\n"
    raising = "def softmax(x, axis=-1):\n    e = np.exp(x - x.max(axis=axis, keepdims=True))\n" \
              "    return normalise(e, axis)\n\ndef normalise(e, axis):\n" \
              "    return e / e.sum(axis=axis, keepdims=True)[5]\n"
    looping = "def scaled_dot_product_attention(Q, K, V, mask=None):\n    while True:\n        pass\n"
    from autograder.bugs import by_id

    nbs = {
        "uncatalogued": answers.fill(LESSON, {"softmax": scaled}),
        "learner_error": answers.fill(LESSON, {"softmax": raising}),
        "timeout": answers.fill(LESSON, {"scaled_dot_product_attention": looping}),
        "known_bug": answers.fill(LESSON, {
            "scaled_dot_product_attention": by_id("attention_softmax_query_axis").source}),
        "syntax_error": answers.fill(LESSON, {"softmax": syntax_error_softmax()[0]}),
    }
    nbs.update({f"inject_{kind}": _injected(html) for kind, html in INJECTIONS.items()})
    return nbs


def _grade(base: Path) -> dict:
    root, out = base / "class", base / "out"
    for student, nb in notebooks().items():
        write_notebook(nb, root / student / f"{LESSON}.ipynb")
    (root / "unreadable").mkdir(parents=True)
    (root / "unreadable" / f"{LESSON}.ipynb").write_text('{"cells": [ not json', encoding="utf-8")
    write_notebook(nbformat.v4.new_notebook(), root / "missing" / "scratch.ipynb")
    settings = grade.Settings(out=str(out), lessons=[LESSON], workers=2, timeout=TIMEOUT,
                              close=[LESSON])  # past its deadline: the student with no notebook gets a notice page
    outcome = grade.run(root, settings, progress=False, log=lambda *a: None)
    scores = {row["student"]: row["lessons"][LESSON]["score"] for row in outcome["rows"]}
    flags = {row["student"]: row["flags"] for row in outcome["rows"]}
    return {"root": str(root), "out": str(out), "scores": scores, "flags": flags}


def graded_batch(tmp_path_factory) -> dict:
    result = once(tmp_path_factory, "feedback-pages", _grade)
    return {**result, "root": Path(result["root"]), "out": Path(result["out"])}


def page(batch, student: str) -> Path:
    return batch["out"] / "feedback" / student / f"{LESSON}.html"
