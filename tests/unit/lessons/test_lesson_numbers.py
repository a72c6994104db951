"""Every number the figure descriptions of lessons 04 and 07 state is what the lesson's own code computes: each is
recomputed here from the lesson's cells (``notebooks.run_code_cells``), so a change to the code or the text that
leaves the other behind fails. Lesson 08's: ``tests/unit/lessons/test_lesson08_numbers.py``; lesson 07's trained heads:
``tests/unit/lessons/test_lesson07_training.py``."""

import re

from autograder.course import notebooks

ALT_TEXT = re.compile(r"\*Figure \(alt text\):\s*(.+?)\*(?!\*)", re.S)
FOLD = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


def _alt_texts(lesson: str) -> str:
    nb = notebooks.read_source(notebooks.SOLUTIONS / f"{lesson}.py")
    found = [m.group(1) for c in nb.cells if c.cell_type == "markdown" for m in ALT_TEXT.finditer(c.source)]
    return " ".join(" ".join(found).split())


def test_lesson_04_s_gradient_curve_is_described_by_its_own_numbers():
    ns = notebooks.run_code_cells("04_dk_scaling", until="saturation_figure")
    d_k, unscaled, scaled = ns["D_K_OPTIONS"], ns["grad_curve"][False], ns["grad_curve"][True]
    at = {d: i for i, d in enumerate(d_k)}
    text = _alt_texts("04_dk_scaling")
    start = unscaled[at[1]]
    assert f"stays near {start:.2f} up to d_k = 4" in text
    assert all(abs(unscaled[at[d]] - start) < 0.01 for d in (1, 2, 4))
    assert f"drops about {FOLD[round(unscaled[at[4]] / unscaled[at[512]])]}-fold by d_k = 512" in text
    assert "rises again at 1024" in text and unscaled[at[1024]] > unscaled[at[512]]
    level = float(re.search(r"scaled curve stays flat near (\d\.\d\d)", text).group(1))
    assert all(abs(v - level) <= 0.015 for v in scaled), (level, scaled)
