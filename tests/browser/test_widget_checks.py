"""The widget assertions of the lesson tests, proven on a small notebook made here: they pass on widgets that
work, and they fail on a widget whose output never changes, one that shows an error once moved, one whose view
cannot render, and a red box.

Lessons with widgets are checked by the same functions (``labdriver.check_widgets_move_outputs``), so these
tests show that check can both pass and fail.
"""

from __future__ import annotations

import nbformat
import pytest

import labdriver as lab
from autograder.course import notebooks

pytestmark = pytest.mark.browser

SETUP = "import ipywidgets as widgets\nimport matplotlib.pyplot as plt\nimport numpy as np"
FIGURE = '''\
@widgets.interact(n=widgets.IntSlider(min=2, max=6, value=3, description="n"),
                  cmap=widgets.Dropdown(options=["viridis", "cividis"], description="colour map"))
def show(n, cmap):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.imshow(np.arange(n * n).reshape(n, n), cmap=cmap)
    ax.set_title(f"n = {n}, {cmap}")
    plt.show()'''
TEXT = '''\
widgets.interact(lambda flag, k, mode: print(f"flag={flag} k={k} mode={mode}"),
                 flag=widgets.Checkbox(value=False, description="flag"),
                 k=widgets.IntText(value=2, description="k"),
                 mode=widgets.ToggleButtons(options=["a", "b"], description="mode"));'''
MORE = '''\
widgets.interact(lambda scale, d_k, unit, lr: print(scale, d_k, unit, lr),
                 scale=widgets.FloatSlider(min=0.5, max=2.0, step=0.5, value=1.0, description="scale"),
                 d_k=widgets.SelectionSlider(options=[8, 16, 64], value=16, description="d_k"),
                 unit=widgets.RadioButtons(options=["nats", "bits"], description="unit"),
                 lr=widgets.FloatLogSlider(value=1e-3, base=10, min=-4, max=-1, description="lr"));'''
MANUAL = '''\
widgets.interact_manual(lambda h: print(f"d_head = {48 // h}"),
                        h=widgets.Dropdown(options=[2, 4, 8], value=4, description="h"));'''
FAILS_AT_END = '''\
widgets.interact(lambda n: print(1 / (5 - n)), n=widgets.IntSlider(min=0, max=5, value=1, description="n"));'''
FROZEN = '''\
widgets.interact(lambda n: print("this never changes"), n=widgets.IntSlider(min=0, max=5, value=1, description="n"));'''


@pytest.fixture
def demo(lab_server):
    folder = lab_server.root / "fixtures"
    folder.mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in (SETUP, FIGURE, TEXT, FROZEN, FAILS_AT_END, MORE, MANUAL)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    notebooks.write_notebook(nb, folder / "widget_demo.ipynb")
    return folder / "widget_demo.ipynb"


def test_widget_checks_pass_on_working_widgets_and_fail_on_frozen_ones(lab_server, demo, new_page):
    page = new_page(lab_server)
    lab.open_notebook(page, lab_server, "fixtures/widget_demo.ipynb")
    state = lab.run_all(page, 120)
    assert all(lab._executed(p) for kind, p in state if kind == "code"), state
    nb = lab.save_and_read(page, demo, state)

    views = lab.widget_cells(nb)
    assert list(views) == [1, 2, 3, 4, 5, 6], "every interact cell should have saved a widget view"
    assert [kind for kind, _, _ in lab.controls_in(page, 1)] == ["slider", "dropdown"]
    assert [kind for kind, _, _ in lab.controls_in(page, 5)] == ["slider", "slider", "radio", "slider"]
    assert [kind for kind, _, _ in lab.controls_in(page, 6)] == ["dropdown", "button"]
    moved = lab.check_widgets_move_outputs(page, {i: views[i] for i in (1, 2, 5, 6)})
    assert [label for _, label in moved] == ["n", "colour map", "flag", "k", "mode", "scale", "d_k", "unit", "lr",
                                             "h"], moved

    with pytest.raises(AssertionError, match=r"did not change any output.*\(3, 'n'\)"):
        lab.check_widgets_move_outputs(page, {3: views[3]}, timeout_s=3)
    with pytest.raises(AssertionError, match=r"moving 'n' in cell 4 put an error on screen.*ZeroDivisionError"):
        lab.check_widgets_move_outputs(page, {4: views[4]})


def test_widget_checks_fail_on_a_view_that_does_not_render(lab_server, new_page):
    """A saved widget view whose model no kernel knows (as after a widget that failed to display)."""
    folder = lab_server.root / "fixtures"
    folder.mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("1 / 0", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        lab.WIDGET_MIME: {"model_id": "0123456789abcdef", "version_major": 2, "version_minor": 0},
        "text/plain": "IntSlider(value=0)"})]
    nb.cells = [cell]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    notebooks.write_notebook(nb, folder / "broken_widget.ipynb")
    page = new_page(lab_server)
    lab.open_notebook(page, lab_server, "fixtures/broken_widget.ipynb")
    with pytest.raises(AssertionError, match="did not render"):
        lab.wait_widgets_rendered(page, 0, [0], timeout_s=5)

    lab.run_all(page, 60)  # the cell raises ZeroDivisionError: the red box must be seen
    assert [i for i, _ in lab.on_screen_errors(page)] == [0]
    assert "ZeroDivisionError" in lab.on_screen_errors(page)[0][1]
