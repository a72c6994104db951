"""One hostile lesson-05 submission, for formgrader's page of a submission
(``autograder/grading/pipeline/formgrader_page.py``): ``eve`` wrote her first written answer with maths and
injected markup (a script, an ``<img onerror>``, an ``<svg onload>``, a ``javascript:`` link) and pasted an image into
it, and added a code cell whose outputs carry more (``text/html`` with a script and an ``onerror``,
``application/javascript``, an SVG with ``onload``, an image that cannot load whose width is formgrader's own
``toggle_name`` handler) and a formula (``text/latex``), and which writes an HTML page beside the notebook. Every injection, if it
ever runs, adds its name to ``window.mhaInjected``, opens a dialog and writes a file through the Jupyter server's
``/api/contents``.

``tests/unit/grading/pipeline/test_formgrader_page.py`` renders it offline as formgrader does;
``tests/browser/test_formgrader_injection.py`` grades it through the real grading command (``graded``) and opens
its page in formgrader.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat

from autograder import course
from autograder.course import answers, notebooks
from run_once import once

LESSON = "05_exercises"
STUDENT = "eve"
ANSWER = "explain_reshape"  # a written answer (3 points) the instructor marks
ANSWER_TEXT = "My answer: head h holds the columns"
OUTPUT_TEXT = "my outputs end here"
MATH_OUTPUT = r"\frac{QK^\top}{\sqrt{d_k}}"  # a formula the cell displays (IPython's Math: text/latex)
SKETCH = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgAAACAAFUok9dAAAAAElFTkSuQmCC")  # 1x1 PNG, pasted
UNSHOWABLE = "bm90IGFuIGltYWdl"  # base64 of "not an image": its <img> fails to load, so an onerror would fire
SIZED = {"image/png": {"width": "1 onerror=toggle_name(true);"}}  # formgrader's own handler, as an attribute


def payload(kind: str) -> str:
    """JavaScript that leaves every mark an injection could: a global, a dialog, a file written through the API."""
    return (f"(window.mhaInjected=window.mhaInjected||[]).push('{kind}');alert('injected {kind}');"
            f"fetch('/api/contents/injected-{kind}.txt',{{method:'PUT',headers:{{'Content-Type':'application/json',"
            "'X-XSRFToken':(document.cookie.split('_xsrf=')[1]||'').split(';')[0]},"
            f"body:JSON.stringify({{type:'file',format:'text',content:'{kind}'}})}})")


def written_answer() -> str:
    return "\n\n".join([
        f"{ANSWER_TEXT} $h d_k$ to $(h+1) d_k - 1$ of every token, "
        "so that $\\frac{QK^T}{\\sqrt{d_k}}$ is per head.",
        f'<img src=x onerror="{payload("img")}">',
        f"<script>{payload('script')}</script>",
        f'<svg width="20" height="20" onload="{payload("svg")}"><circle r="5"/></svg>',
        f'<a href="javascript:{payload("link")}">open this link</a>',
    ])


def _displayed():
    """(name, data, IPython display class) of each display the hostile cell makes, in order; the last, maths
    (``text/latex``), is harmless."""
    from IPython.display import HTML, SVG, Javascript, Math

    html = f'<b>bold output</b><img src=x onerror="{payload("html_img")}"><script>{payload("html_script")}</script>'
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20" onload="{payload("svg_output")}">'
           '<circle r="5"/></svg>')
    return [("HTML", html, HTML), ("Javascript", payload("javascript_output"), Javascript), ("SVG", svg, SVG),
            ("Math", MATH_OUTPUT, Math)]


def output_cell_source() -> str:
    shown = "".join(f"display({name}({data!r}))\n" for name, data, _ in _displayed())
    page = f"<script>{payload('file_beside')}</script>"
    beside = ("try:  # a page of her own beside the notebook, for formgrader to serve\n"
              f"    open('injected.html', 'w').write({page!r})\nexcept OSError:\n    pass\n")
    sized = f"display(Image(data=base64.b64decode({UNSHOWABLE!r}), format='png'), metadata={SIZED!r})\n"
    return (f"import base64\nfrom IPython.display import HTML, SVG, Image, Javascript, Math, display\n{shown}{sized}"
            f"{beside}print({OUTPUT_TEXT!r})\n")


def hostile_notebook():
    """Lesson 05 with the model answers but the hostile written answer (with an image pasted into it, kept as its
    attachment) and output cell."""
    nb = answers.fill(LESSON, {ANSWER: written_answer() + "\n\n![sketch](attachment:sketch.png)"})
    at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == ANSWER)
    nb.cells[at].attachments = {"sketch.png": {"image/png": SKETCH}}
    cell = nbformat.v4.new_code_cell(output_cell_source())
    cell["id"] = "eve-outputs"
    nb.cells.insert(at + 1, cell)
    return nb


def with_outputs(nb):
    """``nb`` with the outputs its hostile cell gives when run, for rendering without a kernel."""
    from IPython.core.formatters import DisplayFormatter

    formatter = DisplayFormatter()
    outputs = [nbformat.v4.new_output("display_data", data=formatter.format(kind(data))[0])
               for _, data, kind in _displayed()]
    outputs.append(nbformat.v4.new_output("display_data", data={"image/png": UNSHOWABLE}, metadata=SIZED))
    outputs.append(nbformat.v4.new_output("stream", name="stdout", text=OUTPUT_TEXT + "\n"))
    for cell in nb.cells:
        if cell.get("id") == "eve-outputs":
            cell.outputs = outputs
    return nb


def _grade(base: Path) -> dict:
    root, out = base / "class", base / "out"
    notebooks.write_notebook(hostile_notebook(), root / STUDENT / f"{LESSON}.ipynb")
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(root), "--out", str(out), "--lessons", LESSON,
                           "--timeout", "60", "--workers", "1", "--quiet"], cwd=course.ROOT,
                          env=notebooks.nbgrader_env(), capture_output=True, text=True, timeout=900, check=False)
    return {"rc": proc.returncode, "output": (proc.stdout + proc.stderr)[-4000:], "out": str(out)}


def graded(tmp_path_factory) -> dict:
    """eve's submission graded once per session through ``python -m autograder.grade`` (what `make grade` runs)."""
    result = once(tmp_path_factory, "formgrader-class", _grade)
    return {**result, "out": Path(result["out"])}
