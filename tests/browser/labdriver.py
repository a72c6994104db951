"""Drive a notebook in JupyterLab the way a learner does: open it, use the Run menu, read what is on screen,
move the widgets. Page-level helpers shared by the browser tests; every wait has a timeout and a message.

The DOM selectors are JupyterLab 4's (``.jp-Cell``, ``.jp-InputPrompt``, ``.jp-Notebook-ExecutionIndicator``)
and ipywidgets 8's (``.widget-slider``, ``.widget-output``, ...). The server runs with notebook windowing off,
so every cell is in the DOM.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import nbformat

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
STDERR_MIME = "application/vnd.jupyter.stderr"  # JupyterLab renders both stderr and errors with it

_CELLS_JS = """() => Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell'))"""


# ------------------------------------------------------------------------------------------ opening, running
def open_notebook(page, server, path, timeout=60_000):
    """Open ``path`` (relative to the server's root) and wait until its kernel is idle."""
    page.goto(server.lab_url(path))
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=timeout)
    wait_kernel_idle(page, timeout)


def wait_kernel_idle(page, timeout=60_000):
    page.wait_for_function(
        """() => {
            const ind = document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator');
            const bar = document.querySelector('#jp-main-statusbar');
            return ind && ind.dataset.status === 'idle' && bar && /\\|\\s*Idle/.test(bar.textContent);
        }""", timeout=timeout)


def run_menu(page, label):
    """Click Run in the menu bar, then the item called ``label`` (e.g. "Run All Cells")."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    item = page.locator(".lm-Menu-item", has=page.locator(".lm-Menu-itemLabel",
                                                          has_text=re.compile(rf"^{re.escape(label)}$")))
    item.click()


def prompts(page):
    """For every cell on screen, in order: its type ('code', 'markdown', 'raw', or 'hidden code' for a code cell
    whose input is collapsed, such as the self-check files cell: its placeholder never shows an execution count,
    so whether it ran is read from the saved notebook) and its input prompt text."""
    return page.evaluate(f"""() => ({_CELLS_JS})().map(c => [
        c.classList.contains('jp-CodeCell') ? (c.querySelector('.jp-InputPlaceholder') ? 'hidden code' : 'code')
            : (c.classList.contains('jp-MarkdownCell') ? 'markdown' : 'raw'),
        (c.querySelector('.jp-InputPrompt') || {{textContent: ''}}).textContent.trim()])""")


def _kernel_status(page):
    return page.evaluate("() => (document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator')"
                         " || {dataset: {}}).dataset.status")


def _executed(prompt):
    return re.fullmatch(r"\[\d+\]:", prompt) is not None


def wait_settled(page, must_run, timeout_s, or_error=False):
    """Wait until the cell at index ``must_run`` has an execution count (or, with ``or_error``, an error is on
    screen), no cell is queued or running ([*]) and the kernel is idle."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = prompts(page)
        busy = [i for i, (kind, p) in enumerate(state) if kind == "code" and "*" in p]
        status = _kernel_status(page)
        done = _executed(state[must_run][1]) or (or_error and on_screen_errors(page))
        if done and not busy and status == "idle":
            time.sleep(0.3)  # a last output message may still be on its way
            if prompts(page) == state:
                return state
        if time.monotonic() > deadline:
            raise AssertionError(f"cells still running or queued after {timeout_s} s: cells {busy}, kernel "
                                 f"{status}, cell {must_run} prompt {state[must_run][1]!r}")
        time.sleep(0.25)


def select_cell(page, index):
    page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index).locator(".jp-InputPrompt").click()


def run_all(page, timeout_s):
    """Run → Run All Cells, then wait. Like a learner, it stops at the first error (the kernel's
    stop-on-error aborts the queue). Returns the prompts."""
    last_code = [i for i, (kind, _) in enumerate(prompts(page)) if kind == "code"][-1]
    run_menu(page, "Run All Cells")
    return wait_settled(page, last_code, timeout_s, or_error=True)


def run_everything(page, timeout_s):
    """Run All Cells; after an error, select the first cell that did not run and use Run → Run Selected Cell
    and All Below, until every code cell has run (what a learner does to see every self-check)."""
    state = run_all(page, timeout_s)
    for _ in range(len(state)):
        todo = [i for i, (kind, p) in enumerate(state) if kind == "code" and not _executed(p)]
        if not todo:
            return state
        select_cell(page, todo[0])
        run_menu(page, "Run Selected Cell and All Below")
        state = wait_settled(page, todo[0], timeout_s)
    raise AssertionError(f"some code cells never ran: {state}")


def save_and_read(page, path, state, timeout_s=30):
    """File → Save (Ctrl+S), wait until the file on disk holds the execution counts on screen and one for every
    collapsed code cell (so a collapsed cell that did not run times out here), read it."""
    path = Path(path)
    page.locator(".jp-NotebookPanel .jp-Notebook").first.focus()
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    want = sum(1 for kind, p in state if (kind == "code" and _executed(p)) or kind == "hidden code")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            nb = nbformat.read(path, as_version=4)
            got = sum(1 for c in nb.cells if c.cell_type == "code" and c.get("execution_count") is not None)
            if got == want:
                return nb
        except (OSError, json.JSONDecodeError, nbformat.reader.NotJSONError):
            got = None
        if time.monotonic() > deadline:
            raise AssertionError(f"the saved {path.name} shows {got} executed code cells, the screen {want}")
        time.sleep(0.25)


# ------------------------------------------------------------------------------------------------ reading
def on_screen_errors(page):
    """(cell index, text) of every red (stderr or error) output box on screen."""
    return page.evaluate(f"""() => ({_CELLS_JS})().flatMap((c, i) =>
        Array.from(c.querySelectorAll('.jp-OutputArea-output[data-mime-type="{STDERR_MIME}"]'))
             .map(o => [i, o.innerText]))""")


def saved_errors(nb):
    """(cell index, grade_id, ename, evalue, is a graded test cell) of every error output in a saved notebook."""
    found = []
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append((i, meta.get("grade_id"), out["ename"], out["evalue"], bool(meta.get("grade"))))
    return found


def saved_stderr(nb):
    return [(i, out.get("text", "")) for i, cell in enumerate(nb.cells) for out in cell.get("outputs", [])
            if out.get("output_type") == "stream" and out.get("name") == "stderr"]


def widget_cells(nb):
    """{cell index: positions of its outputs that are widget views} for every cell with a saved widget view."""
    found = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            views = [j for j, out in enumerate(cell.get("outputs", [])) if WIDGET_MIME in out.get("data", {})]
            if views:
                found[i] = views
    return found


def image_cells(nb):
    return [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            and any("image/png" in out.get("data", {}) for out in cell.get("outputs", []))]


def images_on_screen(page, index):
    """Number of images that loaded (non-zero natural width) in the outputs of cell ``index``."""
    return page.evaluate(f"""(i) => Array.from(({_CELLS_JS})()[i].querySelectorAll('.jp-OutputArea img'))
        .filter(im => im.complete && im.naturalWidth > 0).length""", index)


# -------------------------------------------------------------------------------------------------- widgets
# Control kinds the tests know how to move; any other focusable thing in a widget output fails the test, so a
# new kind of control is never silently left unchecked.
CONTROLS = {
    "slider": ".widget-slider",
    "dropdown": ".widget-dropdown",
    "checkbox": ".widget-checkbox",
    "toggle-buttons": ".widget-toggle-buttons",
    "toggle-button": ".widget-toggle-button",
    "radio": ".widget-radio",
    "text": ".widget-text",
    "button": "button.widget-button",
}
_OUTPUT_PARTS = ".widget-output, .widget-html-content, .widget-htmlmath-content, .widget-image, .widget-valid"


def wait_widgets_rendered(page, index, views, timeout_s=20):
    """The outputs at positions ``views`` of cell ``index`` (its widget views, as saved) are drawn by ipywidgets:
    a ``.jupyter-widgets`` element, not "Loading widget..." or "Error displaying widget"."""
    deadline = time.monotonic() + timeout_s
    while True:
        outputs = page.evaluate(f"""(i) => Array.from(({_CELLS_JS})()[i].querySelectorAll(
            '.jp-Cell-outputWrapper .jp-OutputArea-child')).filter(o => !o.parentElement.closest('.widget-output'))
            .map(o => [o.querySelectorAll('.jupyter-widgets').length, o.innerText.slice(0, 300)])""", index)
        bad = [(j, outputs[j][1] if j < len(outputs) else "(no such output on screen)") for j in views
               if j >= len(outputs) or outputs[j][0] == 0 or "Error displaying widget" in outputs[j][1]]
        if not bad:
            return len(views)
        if time.monotonic() > deadline:
            raise AssertionError(f"cell {index}: {len(bad)} of {len(views)} widget views did not render "
                                 f"(output position, text on screen): {bad}")
        time.sleep(0.25)


def output_signature(page):
    """What the notebook's outputs show, without the controls: the text and image sources of the widget outputs
    (Output widgets, HTML, images) and of every plain output (a figure or text that a control replaces in place
    through a display handle)."""
    return page.evaluate(f"""() => Array.from(document.querySelectorAll(
        '.jp-NotebookPanel .jp-Notebook :is({_OUTPUT_PARTS}), .jp-NotebookPanel .jp-Notebook .jp-OutputArea-output'))
        .filter(e => !e.matches('.jp-OutputArea-output') || !e.querySelector('.jupyter-widgets'))
        .map(e => e.innerText + ' ' +
        Array.from(e.querySelectorAll('img')).map(im => im.src).join(' ') + ' ' + (e.src || '')).join('\\n')""")


def wait_output_settled(page, before, timeout_s, quiet_s=0.6):
    """After a control moved: wait until the outputs differ from ``before`` and have stayed the same for
    ``quiet_s`` with the kernel idle (a redraw clears the output first), or ``timeout_s`` passes."""
    start = time.monotonic()
    last, since = None, start
    while True:
        sig, now = output_signature(page), time.monotonic()
        if sig != last:
            last, since = sig, now
        settled = _kernel_status(page) == "idle" and now - since >= quiet_s
        if settled and (sig != before or now - start >= timeout_s):
            return sig
        if now - start >= timeout_s + 10:
            return sig
        time.sleep(0.1)


def controls_in(page, index):
    """(kind, control id, label) of every control in cell ``index``; fails on controls it cannot move.

    Each control's root element gets a ``data-mha-control`` attribute so it can be found again."""
    result = page.evaluate(f"""([i, controls]) => {{
        const cell = ({_CELLS_JS})()[i];
        const sel = Object.values(controls).join(', ');
        const found = [];
        for (const el of cell.querySelectorAll('.jp-OutputArea-output :is(' + sel + ')')) {{  // document order
            if (el.parentElement.closest(sel)) continue;  // a part of a bigger control
            const kind = Object.keys(controls).find(k => el.matches(controls[k]));
            const id = el.getAttribute('data-mha-control') || `c${{i}}-${{found.length}}`;
            el.setAttribute('data-mha-control', id);
            const label = Array.from(el.querySelectorAll('.widget-label, .widget-label-basic, label'))
                .map(l => l.innerText.replace(/[\\u200b\\s]+/g, ' ').trim()).find(t => t);
            found.push([kind, id, label || `${{kind}} ${{found.length}}`]);
        }}
        const unknown = Array.from(cell.querySelectorAll(
            '.jp-OutputArea-output .jupyter-widgets :is(input, select, textarea, button, [tabindex])'))
            .filter(e => !e.closest('[data-mha-control]') && !e.closest('.widget-output'))
            .map(e => e.outerHTML.slice(0, 120));
        return [found, unknown];
    }}""", [index, CONTROLS])
    found, unknown = result
    if unknown:
        raise AssertionError(f"cell {index} has widget controls the tests cannot move yet: {unknown}; teach "
                             "tests/browser/labdriver.py (CONTROLS, move_control) about them")
    return [tuple(c) for c in found]


def move_control(page, kind, control_id):
    """Change one control's value the way a learner would: keyboard on a slider, pick another option, tick."""
    el = page.locator(f'[data-mha-control="{control_id}"]')
    el.scroll_into_view_if_needed()
    if kind == "slider":
        handle = el.locator(".noUi-handle").last
        readout = el.locator(".widget-readout")
        before = readout.inner_text() if readout.count() else None
        handle.focus()
        page.keyboard.press("End")
        if readout.count() and readout.inner_text() == before:  # already at the end of its range
            page.keyboard.press("Home")
    elif kind == "dropdown":
        select = el.locator("select")
        options = select.locator("option").all_text_contents()
        current = select.evaluate("s => s.selectedIndex")
        if len(options) < 2:
            raise AssertionError(f"dropdown {control_id} has fewer than two options: {options}")
        select.select_option(index=(current + 1) % len(options))
    elif kind == "checkbox":
        el.locator("input").click()
    elif kind == "toggle-buttons":
        el.locator("button:not(.mod-active)").first.click()
    elif kind == "radio":
        el.locator("input:not(:checked)").first.click()
    elif kind == "text":
        box = el.locator("input, textarea").first
        old = box.input_value()
        try:
            new = str(float(old) + 1) if "." in old else str(int(old) + 1)
        except ValueError:
            new = old + " x"
        box.fill(new)
        box.press("Enter")
    elif kind in ("toggle-button", "button"):
        el.click()


def check_widgets_move_outputs(page, cells, timeout_s=20):
    """Every widget in ``cells`` ({cell index: widget view positions}, from ``widget_cells``) rendered, and
    moving each control changes what the widget outputs show.

    Returns [(cell, control label)] of the controls moved. Raises AssertionError naming each control whose
    move left every output unchanged."""
    moved, frozen = [], []
    for index, views in cells.items():
        wait_widgets_rendered(page, index, views)
        controls = controls_in(page, index)
        if not controls:
            raise AssertionError(f"cell {index} shows a widget with no control to move")
        # A button beside other controls (interact_manual's "Run Interact") applies their values: press it after
        # each move instead of checking it alone. A button on its own (e.g. "new sample") must change the output.
        run_buttons = [cid for kind, cid, _ in controls if kind == "button"]
        if len(run_buttons) < len(controls):
            controls = [c for c in controls if c[0] != "button"]
        else:
            run_buttons = []
        for kind, control_id, label in controls:
            wait_kernel_idle(page)
            before = output_signature(page)
            move_control(page, kind, control_id)
            if run_buttons:
                move_control(page, "button", run_buttons[0])
            if wait_output_settled(page, before, timeout_s) == before:
                frozen.append((index, label))
            else:
                moved.append((index, label))
            red = on_screen_errors(page)
            if red:
                raise AssertionError(f"moving {label!r} in cell {index} put an error on screen: "
                                     f"{[(i, t[-500:]) for i, t in red]}")
    if frozen:
        raise AssertionError(f"moving these widgets did not change any output within {timeout_s} s: {frozen}")
    return moved


def scroll_to_cell(page, index):
    page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index).scroll_into_view_if_needed()


def hide_left_sidebar(page):
    """View → Show Left Sidebar off (Ctrl+B), so a screenshot shows more of the notebook."""
    if page.locator("#jp-left-stack:visible").count():
        page.evaluate("document.activeElement && document.activeElement.blur()")  # a widget's text box keeps keys
        page.keyboard.press("Escape")
        page.keyboard.press("Control+b")
        page.locator("#jp-left-stack").wait_for(state="hidden", timeout=5_000)
