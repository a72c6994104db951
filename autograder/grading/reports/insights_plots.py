"""The figures of ``insights.html``: matplotlib PNGs embedded as ``data:`` images, each with its alt text.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global state, no display), in colours of the
viridis map, small enough to keep the page light.
"""

from __future__ import annotations

import base64
import io
import statistics

COLOURS = ("#31688e", "#35b779")  # from viridis: autograded, manual
DPI = 80


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _figure(width, height):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _points(x) -> str:
    return f"{x:g}"


def _histogram(ax, scores, maximum, colour, title):
    top = max(maximum, max(scores, default=0))
    bins = [b - 0.5 for b in range(int(top) + 2)] if top <= 40 else 20
    ax.hist(scores, bins=bins, color=colour, edgecolor="white")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(f"points (of {_points(maximum)})")
    ax.set_ylabel("students")
    ax.yaxis.get_major_locator().set_params(integer=True)


def summary(kind: str, lesson: str, scores: list, maximum: float) -> str:
    """One sentence on a score distribution: how many students, median, at full marks, at zero."""
    if not scores:
        return f"No {kind} scores in lesson {lesson} yet."
    full = sum(1 for x in scores if x >= maximum)
    zero = sum(1 for x in scores if x <= 0)
    return (f"Histogram of the {kind} scores of {len(scores)} students in lesson {lesson}: median "
            f"{_points(statistics.median(scores))} of {_points(maximum)} points, {full} at full marks, {zero} at "
            "zero.")


def distribution(lesson: str, auto: list, auto_max: float, manual: list, manual_max: float, pending: int):
    """(PNG data URI, alt text) of one lesson's score distribution: autograded and manual points apart; the manual
    panel shows the notebooks whose written answers are all marked, and says how many have a mark pending."""
    panels = [("autograded", auto, auto_max, COLOURS[0], f"{lesson}: autograded")]
    if manual_max > 0:
        panels.append(("manual", manual, manual_max, COLOURS[1], f"{lesson}: manual, marked ({pending} pending)"))
    fig = _figure(3.6 * len(panels), 2.4)
    for i, (_, scores, maximum, colour, title) in enumerate(panels, 1):
        _histogram(fig.add_subplot(1, len(panels), i), scores, maximum, colour, title)
    alt = " ".join(summary(kind, lesson, scores, maximum) for kind, scores, maximum, _, _ in panels)
    if manual_max > 0 and pending:
        alt += f" {pending} students' written answers still await the instructor and are not in the manual plot."
    return _png(fig), alt


def misconception_bars(labels: list, counts: list, total_students: int):
    """(PNG data URI, alt text) of a horizontal bar chart: students per catalogued bug, most frequent on top."""
    fig = _figure(7, 0.6 + 0.3 * len(labels))
    ax = fig.add_subplot(1, 1, 1)
    positions = list(range(len(labels)))[::-1]
    ax.barh(positions, counts, color=COLOURS[0])
    ax.set_yticks(positions, labels, fontsize=8)
    ax.set_xlabel(f"students (of up to {total_students} who attempted the lesson)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    first = ", ".join(f"{label} ({n})" for label, n in zip(labels[:3], counts[:3]))
    alt = (f"Bar chart of the {len(labels)} catalogued bugs seen in this class, by the number of students whose work "
           f"showed each, most frequent first: {first}.")
    return _png(fig), alt
