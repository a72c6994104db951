"""Lesson 06's text states what its own cells compute: the peak memories its figure describes, the sizes of the
(T, T) arrays it names, the Llama-2 70B shapes its cache cell uses, and the bench table of section 5 (each fraction
of the peak is the lesson's flop count over the time and the stated peak, and the prose's ranking is the table's)
are recomputed here from the lesson's cells (``notebooks.run_code_cells``), so a change to the code or the text that
leaves the other behind fails. Its timings are not tested: the cells print them, and the text gives the range
measured on the machine used to prepare the course."""

import functools
import re

import pytest

from autograder.course import notebooks

LESSON = "06_going_further"
ALT_TEXT = re.compile(r"\*Figure \(alt text\):\s*(.+?)\*(?!\*)", re.S)
FOLD = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
ROW = re.compile(r"^\| (?P<label>[^|]*B=(?P<B>\d+) T=(?P<T>\d+) d_model=(?P<d>\d+) h=(?P<h>\d+)) \|(?P<cells>.*)\|$",
                 re.M)


@functools.lru_cache(maxsize=1)
def _lesson() -> dict:
    """The lesson's namespace after its memory cell (the threads and speed cells after it take seconds)."""
    return notebooks.run_code_cells(LESSON, until="peak_mb")


@functools.lru_cache(maxsize=1)
def _source():
    return notebooks.read_source(notebooks.SOLUTIONS / f"{LESSON}.py")


def _markdown(grade_id: str) -> str:
    return next(c.source for c in _source().cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _one_line(text: str) -> str:
    return " ".join(text.split())  # the source wraps sentences anywhere


def _flops(B, T, d_model):
    """The count the text gives and the speed cell applies to the shapes it runs (checked by the slow test below)."""
    return 8 * B * T * d_model**2 + 4 * B * T * T * d_model


def _code_containing(snippet: str) -> str:
    return next(c.source for c in _source().cells if c.cell_type == "code" and snippet in c.source)


def test_the_llama_2_70b_shapes_are_the_cache_cell_s():
    ns, text = _lesson(), _one_line(_markdown("gqa_ends"))
    shipped = int(re.search(r'\("GQA \(as shipped\)", (\d+)\)', _code_containing("as shipped")).group(1))
    assert (f"Llama-2 70B ({ns['layers']} layers, {ns['q_heads']} query heads, {shipped} KV heads, "
            f"`d_head = {ns['head_width']}`, {ns['bytes_per_number']}-byte numbers)") in text
    assert f"has {ns['q_heads']} query heads and {shipped} KV heads" in _one_line(_markdown("gqa_intro"))


def test_the_sizes_of_the_t_by_t_arrays_are_counted_as_the_memory_cell_counts_them():
    ns = _lesson()
    mb = lambda n_heads, T: 8 * n_heads * T * T / 2**20  # noqa: E731 - float64, MB of 2**20 bytes
    assert ns["one_matrix_mb"] == [mb(ns["n_heads"], T) for T in ns["T_values"]]  # the dashed line's count

    tiled_intro = _one_line(_markdown("tiled_intro"))
    said = re.search(r"At \$T = (\d+)\$ with (\d+) heads in float64 that is (\d+) MB", tiled_intro)
    assert said and int(said.group(3)) == mb(int(said.group(2)), int(said.group(1))), said and said.group(0)

    speed = _one_line(_markdown("speed_read"))
    scores = re.search(r"the \$\(n\\_heads, T, T\)\$ scores are (\d+) MB in float64", speed)
    softmax = re.search(r"streams a (\d+) MB `\((\d+), (\d+), \3\)` array", speed)
    one_head = re.search(r"one (\d+) MB `\(T, T\)` matrix", speed)
    assert scores and softmax and one_head, (scores, softmax, one_head)
    n_heads, T = int(softmax.group(2)), int(softmax.group(3))
    assert (n_heads, T) == (12, 2048)  # the real size of the table's last row
    assert int(scores.group(1)) == int(softmax.group(1)) == mb(n_heads, T)
    assert int(one_head.group(1)) == mb(1, T)


def test_the_memory_figure_is_described_by_its_own_peaks():
    ns = _lesson()
    T, plain, tiled, dashed = ns["T_values"], ns["naive_mb"], ns["tiled_mb"], ns["one_matrix_mb"]
    alt = _one_line(" ".join(ALT_TEXT.findall(_markdown("memory_plot_intro"))))
    read = _one_line(_markdown("memory_read"))
    assert all(b == 2 * a for a, b in zip(T, T[1:])), T  # "each doubling"
    assert f"sequence length T from {T[0]} to {T[-1]}" in alt

    assert all(round(b / a) == 4 for a, b in zip(plain, plain[1:])), plain
    assert "rises about four-fold for each doubling of T" in alt and "quadruples with each doubling" in read
    above = [p / d for p, d in zip(plain, dashed)]
    assert all(3 <= r < 4 for r in above) and max(above) / min(above) < 1.25, above  # (nearly) parallel
    assert "nearly parallel to the dashed line of one (n_heads, T, T) array and three to four times above it" in alt
    assert "its peak is three to four times the dashed line" in read

    assert abs(tiled[0] / plain[0] - 1) < 0.1, (tiled[0], plain[0])
    assert f"starts level with plain attention at T = {T[0]}" in alt
    growth = [b / a for a, b in zip(tiled, tiled[1:])]
    assert round(growth[0]) != 2 and all(round(g) == 2 for g in growth[1:]), growth
    assert f"rises about two-fold per doubling from T = {T[1]} on" in alt
    assert ns["block_size"] == T[0] and "once $T$ is longer than one block, it only doubles" in read

    gap = [p / t for p, t in zip(plain, tiled)]
    assert all(b > a for a, b in zip(gap, gap[1:])), gap
    assert f"ends more than {FOLD[int(gap[-1])]} times lower at T = {T[-1]}" in alt
    assert "the gap widens with every doubling" in alt


def _table() -> tuple[float, dict]:
    """The bench table of section 5: its stated peak, and {label: {variant: (ms as written, percent)}}."""
    text = _markdown("speed_read")
    peak = float(re.search(r"matmul peak (\d+) GFLOP/s on one core", text).group(1))
    header = next(line for line in text.splitlines() if "matmul peak" in line)
    variants = [v.strip() for v in header.strip("| ").split("|")[1:]]
    rows = {}
    for m in ROW.finditer(text):
        cells = [re.fullmatch(r"\s*([\d.]+) ms, (\d+)%\s*", c) for c in m.group("cells").split("|")]
        assert all(cells) and len(cells) == len(variants), m.group(0)
        rows[(int(m["B"]), int(m["T"]), int(m["d"]), int(m["h"]))] = {
            v: (c.group(1), int(c.group(2))) for v, c in zip(variants, cells)}
    return peak, rows


@pytest.mark.slow
def test_the_speed_cell_runs_the_table_s_shapes_and_counts_their_flops_as_the_text_does():
    ns, (_, rows) = notebooks.run_code_cells(LESSON, until="matmul_peak_gflops"), _table()
    shapes = [(2, 32, 64, 4), (8, 128, 512, 8), (1, 2048, 768, 12)]  # its RUN_LARGE list, which runs for seconds
    assert list(rows) == shapes and ns["shapes"] == shapes[:1] and ns["RUN_LARGE"] is False
    code = _code_containing("RUN_LARGE")
    assert f"shapes = [{shapes[0]}] + ([{shapes[1]}, {shapes[2]}] if RUN_LARGE else [])" in code
    assert ns["flop_counts"] == {"B=2 T=32 d_model=64 h=4": _flops(2, 32, 64)}


def test_the_speed_table_s_fractions_are_its_times_over_its_peak():
    peak, rows = _table()
    assert list(rows) == [(2, 32, 64, 4), (8, 128, 512, 8), (1, 2048, 768, 12)], list(rows)
    intro = _markdown("speed_intro")
    assert r"the four projections cost $8\,B\,T\,d_{model}^2$, the scores and the weighted sum" in _one_line(intro)
    assert r"$4\,B\,T^2 d_{model}$" in intro  # _flops
    for (B, T, d_model, _), cells in rows.items():
        for variant, (ms, percent) in cells.items():
            half = 0.5 * 10.0 ** -len(ms.partition(".")[2])  # the time as written is rounded to this, the peak to 0.5
            fractions = [_flops(B, T, d_model) / ((float(ms) + e) * 1e-3) / 1e9 / (peak + e_peak)
                         for e, e_peak in ((half, 0.5), (-half, -0.5))]
            assert 100 * fractions[0] - 0.5 <= percent <= 100 * fractions[1] + 0.5, (B, T, variant, ms, percent)


def test_the_speed_text_ranks_the_variants_as_its_table_does():
    _, rows = _table()
    _, mid, large = rows.values()
    ms = {k: {v: float(t) for v, (t, _) in row.items()} for k, row in zip(("lesson", "mid", "large"), rows.values())}
    text = _one_line(_markdown("speed_read"))
    for size in ("lesson", "mid"):  # "the loop ... is the slowest", "At B=8, T=128 the loop is still the slowest"
        assert max(ms[size], key=ms[size].get) == "loop", ms[size]
    assert "the loop, with `3 · n_heads` projections and `n_heads` attentions, is the slowest" in text
    assert abs(ms["lesson"]["fused QKV"] / ms["lesson"]["batched"] - 1) < 0.1  # "batched and fused ... are close"
    assert "At B=8, T=128 the loop is still the slowest, and fusing QKV gains nothing measurable over batched" in text
    assert abs(ms["mid"]["fused QKV"] / ms["mid"]["batched"] - 1) < 0.05, ms["mid"]
    B, T, d_model, _ = list(rows)[1]
    assert f"three `({B * T}, {d_model}) @ ({d_model}, {d_model})` products" in text
    assert "At T=2048 every variant reaches a smaller fraction of the peak than at B=8" in text
    assert all(large[v][1] < mid[v][1] for v in large), (large, mid)
    assert "the loop over heads *beats* the batched version" in text
    assert ms["large"]["loop"] < ms["large"]["batched"], ms["large"]
