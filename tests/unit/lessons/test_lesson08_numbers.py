"""Lesson 08's figure descriptions state what the course's code computes: the RoPE wavelengths, the ALiBi slopes
and the KV cache sizes its alt texts give are recomputed here from ``autograder.reference`` and the lesson's own
``MODELS`` table, so a change to either that leaves the text behind fails."""

import ast
import math
import re

import numpy as np

from autograder import reference
from autograder.course import notebooks

LESSON = "08_todays_models"
ALT_TEXT = re.compile(r"\*Figure \(alt text\):\s*(.+?)\*(?!\*)", re.S)


def _alt_texts() -> str:
    nb = notebooks.read_source(notebooks.SOLUTIONS / f"{LESSON}.py")
    found = [m.group(1) for c in nb.cells if c.cell_type == "markdown" for m in ALT_TEXT.finditer(c.source)]
    return " ".join(" ".join(found).split())  # one line: the source wraps sentences anywhere


def _models() -> dict:
    """The lesson's ``MODELS`` table, evaluated from its assignment alone (literals and ``dict(...)`` calls)."""
    source = (notebooks.SOLUTIONS / f"{LESSON}.py").read_text(encoding="utf-8")
    node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "MODELS" for t in n.targets))
    return eval(compile(ast.Expression(node.value), LESSON, "eval"), {"dict": dict})  # noqa: S307 - our source


def _sig(x: float, digits: int = 2) -> str:
    """``x`` to ``digits`` significant digits, written as the lesson writes numbers (thousands with commas)."""
    rounded = float(f"{x:.{digits}g}")
    return f"{rounded:,.0f}" if rounded >= 100 else f"{rounded:g}"


def _slopes(n_heads: int) -> np.ndarray:
    return -reference.alibi_bias(n_heads, 2)[:, 0, 1]  # the bias at distance 1 is minus the slope


def test_the_rope_wavelengths_are_the_reference_frequencies():
    text, d = _alt_texts(), 128
    wavelength = {base: 2 * math.pi / base ** (-2 * (d // 2 - 1) / d) for base in (10_000, 500_000)}
    assert f"starts at {2 * math.pi:.1f} tokens" in text
    assert f"about {_sig(wavelength[10_000])} tokens" in text
    assert f"about {_sig(wavelength[500_000] / 1e6)} million" in text


def test_the_alibi_slopes_are_the_reference_slopes():
    text, eight, twelve = _alt_texts(), _slopes(8), _slopes(12)
    assert np.allclose(twelve[:8], eight)
    assert f"halve from {_sig(eight[0])} to {_sig(eight[-1])}" in text
    extra = ", ".join(_sig(s) for s in twelve[8:-1]) + f" and {_sig(twelve[-1])}"
    assert f"four in between ({extra})" in text
    assert f"about {_sig(math.exp(-eight[-1] * 64))} at 64" in text


def test_the_cache_sizes_are_the_table_s():
    text, models = _alt_texts(), _models()
    for name, config in models.items():
        tokens = min(2 ** 17, config.get("cache_window", 2 ** 17))  # 128K tokens; a rolling cache holds its window
        gib = 2 * reference.kv_cache_elements_per_token(config) * tokens / 2 ** 30  # bfloat16
        short = re.sub(r" \d+B$", "", name)  # the text may drop the parameter count: "BLOOM", "Llama 2"
        said = re.search(rf"{re.escape(short)}\b[^;]*?(\d[\d.,]*) GiB", text)  # the first size after the name
        assert said and said.group(1) == _sig(gib), (name, _sig(gib), said and said.group(0))


def test_only_a_rolling_cache_stops_growing_and_every_extrapolation_is_marked():
    """Mistral 7B's 4,096-token rolling cache caps it at 0.5 GiB (it once read 16 GiB at 128K); a model whose
    context is shorter than 128K is drawn dashed beyond it."""
    text, models = _alt_texts(), _models()
    assert [n for n, c in models.items() if "cache_window" in c] == ["Mistral 7B"]
    mistral = models["Mistral 7B"]
    gib = 2 * reference.kv_cache_elements_per_token(mistral) * mistral["cache_window"] / 2 ** 30
    assert f"at {_sig(gib)} GiB" in text and "4,096-token window" in text
    assert all(isinstance(c["context"], int) for c in models.values())
    assert "dashed beyond it" in text and any(c["context"] < 2 ** 17 for c in models.values())
