"""Accessibility of every lesson, read statically from its source (fast; no kernel).

Conventions the lessons follow, enforced here for every lesson in ``solutions/``:

- **Alt text.** Every code cell that draws a figure has, in the markdown cell just before it (or, failing that,
  just after it), a sentence of alt text written as ``*Figure (alt text): what the figure shows.*``: at least
  eight words saying what is plotted and what a sighted reader would notice. Each figure needs its own.
  A cell draws a figure when, outside a function body, it calls a matplotlib drawing function (``plt.show``,
  ``plt.subplots``, ``ax.imshow``, ``ax.plot``, ...), a function defined in the notebook that draws, a function
  named ``plot_...``, ``show_...``, ``draw_...`` or ``visualise_...`` (e.g. a plotting helper imported from a
  module), or an ipywidgets ``interact``/``interactive``/``interactive_output`` (also as a decorator) whose
  function draws. A widget that only prints numbers is not a figure.
- **Colour maps** named in the code are perceptually uniform: viridis, cividis, magma, inferno or plasma
  (reversed ``_r`` allowed). jet, rainbow, hsv and the other matplotlib maps are refused.
- **Headings form an outline:** the first heading is the only level-1 heading and no level is skipped.
- **The top of each lesson** (its first markdown cell, the one with the title) states the goals and the time
  needed ("**Time needed:** about 40 minutes").
"""

from __future__ import annotations

import ast
import re

import matplotlib
import nbformat
import pytest

from autograder import course
from autograder.course import notebooks

LESSONS = course.lesson_names()

ALT_TEXT = re.compile(r"\*Figure \(alt text\):\s*(.+?)\*(?!\*)", re.S)
MIN_ALT_WORDS = 8
UNIFORM_MAPS = {"viridis", "cividis", "magma", "inferno", "plasma"}
DRAWING_CALLS = {"show", "subplots", "subplot", "figure", "imshow", "matshow", "pcolormesh", "pcolor", "contour",
                 "contourf", "plot", "bar", "barh", "hist", "scatter", "errorbar", "fill_between", "stem", "step",
                 "boxplot", "violinplot", "heatmap"}
WIDGET_CALLS = {"interact", "interactive", "interact_manual", "interactive_output"}
DRAWING_NAME = re.compile(r"^(plot|show|draw|visuali[sz]e)_")  # e.g. plot_heads() imported from a helper module
TIME_NEEDED = re.compile(r"time needed\W*(?:about|around|roughly|~)?\s*\d+\s*(?:-\s*\d+\s*)?(?:min|minutes|hours?|h)\b",
                         re.I)
GOALS = re.compile(r"\bgoals?\b", re.I)


# ------------------------------------------------------------------------------------------------- figures
def _code(cell):
    """The cell's Python with IPython magics and shell escapes blanked out."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.splitlines())


def _call_name(node):
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _top_level_calls(tree):
    """Calls made when the cell runs: everything but function and class bodies (decorators included)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(node.decorator_list)
            continue
        if isinstance(node, ast.Call):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _draws(node, drawing_functions):
    """Whether running ``node`` (a function body, a lambda) would call something that draws."""
    return any(isinstance(n, ast.Call) and _is_drawing(_call_name(n), drawing_functions) for n in ast.walk(node))


def _is_drawing(name, drawing_functions):
    return bool(name) and (name in DRAWING_CALLS or name in drawing_functions or DRAWING_NAME.match(name))


def figure_cells(nb):
    """Indices of the code cells that draw a figure when they run (a widget counts when its function draws)."""
    drawing_functions = set()
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(_code(cell))
        except SyntaxError as exc:
            raise AssertionError(f"cell {i} is not valid Python: {exc}") from None
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for _ in range(2):  # a function that calls a drawing function defined in the same cell
            drawing_functions |= {f.name for f in functions if _draws(f, drawing_functions)}
        draws = False
        for call in _top_level_calls(tree):
            name = _call_name(call)
            if name in WIDGET_CALLS:
                target = call.args[0] if call.args else None
                draws |= (isinstance(target, ast.Name) and _is_drawing(target.id, drawing_functions)) or (
                    isinstance(target, ast.Lambda) and _draws(target, drawing_functions))
            elif _is_drawing(name, drawing_functions):
                draws = True
        for f in tree.body:  # @interact-decorated functions run (and draw) when the cell runs
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name in drawing_functions and any(
                    (_call_name(d) if isinstance(d, ast.Call) else getattr(d, "attr", getattr(d, "id", None)))
                    in WIDGET_CALLS for d in f.decorator_list):
                draws = True
        if draws:
            found.append(i)
    return found


def _neighbour_markdown(nb, i, step, figures):
    """The nearest markdown cell before (step -1) or after (+1) cell i, passing only code cells that draw
    nothing; None when another figure or the notebook's edge comes first."""
    j = i + step
    while 0 <= j < len(nb.cells):
        if nb.cells[j].cell_type == "markdown":
            return j
        if j in figures:
            return None
        j += step
    return None


def missing_alt_text(nb):
    """[(cell index, problem)] for every figure without its own alt text beside it."""
    figures = figure_cells(nb)
    available = {i: [m.group(1) for m in ALT_TEXT.finditer(c.source)]
                 for i, c in enumerate(nb.cells) if c.cell_type == "markdown"}
    problems = []
    for i in figures:
        for step in (-1, 1):
            j = _neighbour_markdown(nb, i, step, set(figures))
            if j is not None and available.get(j):
                text = available[j].pop(0)
                words = len(text.split())
                if words < MIN_ALT_WORDS:
                    problems.append((i, f"its alt text has {words} words ({text!r}); describe what is plotted "
                                        f"and what stands out in at least {MIN_ALT_WORDS}"))
                break
        else:
            problems.append((i, "no '*Figure (alt text): ...*' sentence in the markdown cell just before or just "
                                "after it (each figure needs its own)"))
    return problems


# ----------------------------------------------------------------------------------------------- colour maps
_CMAP_PATTERNS = [
    re.compile(r"""cmap\s*=\s*["']([\w.]+)["']"""),
    re.compile(r"""\b(?:cm|colormaps)\.(\w+)\b"""),
    re.compile(r"""colormaps\[\s*["']([\w.]+)["']\s*\]"""),
    re.compile(r"""(?:get_cmap|set_cmap|colormaps\.get)\(\s*["']([\w.]+)["']"""),
    re.compile(r"""\bplt\.(\w+)\(\s*\)"""),  # plt.jet(), plt.viridis(): set the default map
]
_OPTIONS = re.compile(r"""options\s*=\s*[\[(]([^\])]*)[\])]""")
_STRING = re.compile(r"""["']([\w.]+)["']""")


def _registered(name):
    base = name[:-2] if name.endswith("_r") else name
    return base if base in matplotlib.colormaps else None


def colour_maps(nb):
    """[(cell index, colour map name)] of every matplotlib colour map named in the code."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        names = [m.group(1) for p in _CMAP_PATTERNS for m in p.finditer(cell.source)]
        for options in _OPTIONS.finditer(cell.source):  # a widget offering colour maps to choose from
            strings = _STRING.findall(options.group(1))
            if any(_registered(s) for s in strings):
                names += strings
        found += [(i, base) for base in (_registered(n) for n in names) if base]
    return found


def bad_colour_maps(nb):
    return [(i, name) for i, name in colour_maps(nb) if name not in UNIFORM_MAPS]


# ------------------------------------------------------------------------------------------ headings, intro
def headings(nb):
    """[(cell index, level, text)] of the markdown headings, skipping fenced code blocks."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        fenced = False
        for line in cell.source.splitlines():
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
                continue
            m = re.match(r"^(#{1,6})\s+(\S.*)$", line)
            if m and not fenced:
                found.append((i, len(m.group(1)), m.group(2).strip()))
    return found


def outline_problems(nb):
    hs = headings(nb)
    if not hs:
        return ["the lesson has no headings"]
    problems = []
    if hs[0][1] != 1:
        problems.append(f"the first heading {hs[0][2]!r} is level {hs[0][1]}; the lesson title must be level 1")
    problems += [f"a second level-1 heading {text!r} (cell {i}); only the title is level 1"
                 for i, level, text in hs[1:] if level == 1]
    for (_, prev, _), (i, level, text) in zip(hs, hs[1:]):
        if level > prev + 1:
            problems.append(f"heading {text!r} (cell {i}) is level {level} right after level {prev}: a level is "
                            "skipped")
    return problems


def intro_problems(nb):
    """The first markdown cell with a heading (the top of the lesson) states goals and time needed."""
    top = next((c for c in nb.cells if c.cell_type == "markdown" and re.search(r"^#\s", c.source, re.M)), None)
    if top is None:
        return ["no title cell"]
    first_md = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"]
    problems = []
    if first_md and nb.cells[first_md[0]] is not top:
        problems.append("the title cell is not the first markdown cell")
    if not GOALS.search(top.source):
        problems.append("the top of the lesson does not state its goals ('**Goals.** By the end ...')")
    if not TIME_NEEDED.search(top.source):
        problems.append("the top of the lesson does not state the time needed ('**Time needed:** about N minutes')")
    return problems


# -------------------------------------------------------------------------------------------------- lessons
def _lesson(name):
    return notebooks.read_source(course.SOLUTIONS / f"{name}.py")


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_figure_has_alt_text_beside_it(lesson):
    assert missing_alt_text(_lesson(lesson)) == []


@pytest.mark.parametrize("lesson", LESSONS)
def test_colour_maps_are_perceptually_uniform(lesson):
    bad = bad_colour_maps(_lesson(lesson))
    assert bad == [], f"{lesson}: colour maps that are not perceptually uniform (cell, map): {bad}; use one of " \
                      f"{sorted(UNIFORM_MAPS)}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_headings_form_an_outline(lesson):
    assert outline_problems(_lesson(lesson)) == []


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_states_goals_and_time_needed_at_the_top(lesson):
    assert intro_problems(_lesson(lesson)) == []


def test_lesson_01_figures_are_found_with_their_alt_text():
    """The detector sees lesson 01's two figures (so the per-lesson test is not vacuous)."""
    nb = _lesson("01_warmup")
    figures = figure_cells(nb)
    assert len(figures) == 2, figures
    assert all("plt.show()" in nb.cells[i].source for i in figures)
    assert sum(len(ALT_TEXT.findall(c.source)) for c in nb.cells if c.cell_type == "markdown") == 2
    assert {name for _, name in colour_maps(nb)} == {"viridis"}


# ---------------------------------------------------------------------------- the checks can fail
def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(src[3:]) if src.startswith("md:") else nbformat.v4.new_code_cell(src)
                for src in cells]
    return nb


ALT = "*Figure (alt text): a heatmap of six tokens attending to each other, brightest on the diagonal.*"


def test_alt_text_checks_catch_missing_short_and_shared_alt_text():
    assert missing_alt_text(_nb("md:# T", "x = 1", "plt.plot([1, 2]); plt.show()")) != []
    assert missing_alt_text(_nb(f"md:{ALT}", "fig, ax = plt.subplots()\nax.imshow(w)")) == []
    assert missing_alt_text(_nb("fig, ax = plt.subplots()", f"md:{ALT}")) == []
    assert missing_alt_text(_nb("md:*Figure (alt text): a plot.*", "plt.show()"))[0][1].startswith("its alt text")
    shared = _nb(f"md:{ALT}", "plt.show()", "plt.show()", "md:no alt text here")
    assert [i for i, _ in missing_alt_text(shared)] == [2]
    # a widget, a decorator, and a function from an earlier cell that draws
    assert figure_cells(_nb(
        "def draw(w):\n    plt.imshow(w)",                                   # 0 defines only
        "draw(w)",                                                            # 1 draws
        "interact(draw, w=(1, 5))",                                           # 2 a widget that draws
        "interact(lambda n: print(n), n=(1, 5))",                             # 3 a widget that prints: no figure
        "@widgets.interact(n=(1, 3))\ndef g(n):\n    fig, ax = plt.subplots()",  # 4 decorated, draws
        "@widgets.interact(n=(1, 3))\ndef h(n):\n    print(n)",              # 5 decorated, prints
        "def quiet():\n    return 1\nquiet()",                              # 6
        "plot_heads(w)",                                                      # 7 a helper from a module
        "out = widgets.interactive_output(draw, {'w': s})",                   # 8
        "def outer(n):\n    draw(n)\ninteract(outer, n=(1, 2))",             # 9 draws through a helper
        "x = show_value")) == [1, 2, 4, 7, 8, 9]


def test_colour_map_check_rejects_jet_rainbow_hsv():
    bad = _nb('ax.imshow(w, cmap="jet")', "c = plt.cm.rainbow(x)", "plt.hsv()",
              'interact(f, cmap=widgets.Dropdown(options=["viridis", "gist_rainbow"]))', 'cmap="viridis_r"',
              'ax.imshow(w, cmap="cividis")', "tokens = ['hot', 'cool']", "plt.cm.ScalarMappable()")
    assert bad_colour_maps(bad) == [(0, "jet"), (1, "rainbow"), (2, "hsv"), (3, "gist_rainbow")]


def test_outline_and_intro_checks_catch_bad_structure():
    assert outline_problems(_nb("md:## Start", "md:# Title")) != []
    assert any("skipped" in p for p in outline_problems(_nb("md:# T", "md:### Deep")))
    assert any("second level-1" in p for p in outline_problems(_nb("md:# T", "md:# Again")))
    assert outline_problems(_nb("md:# T\n```\n# not a heading\n```", "md:## A", "md:### B", "md:## C")) == []
    assert len(intro_problems(_nb("md:# T\nSome text."))) == 2
    assert intro_problems(_nb("md:# T\n**Goals.** softmax.\n\n**Time needed:** about 25 minutes.")) == []
    assert intro_problems(_nb("md:Intro first", "md:# T\nGoals; time needed: 30 min")) != []
