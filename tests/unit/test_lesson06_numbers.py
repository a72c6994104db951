"""Every number lesson 06 states in its text, captions and alt text is computed by the lesson's own code or checked
here: the memory figure's growth and ratios are recomputed from the lesson's cells (``notebooks.run_code_cells``),
the sizes it names are recomputed from their shapes, and the table of ``make bench`` figures it quotes is checked
against the lesson's own flop count and against every sentence that reads it. Timings on the learner's machine are
printed by the cells that measure them, never stated as facts. (Lessons 04 and 07: ``test_lesson_numbers.py``.)"""

import re

import pytest

from autograder.course import notebooks

LESSON = "06_going_further"
ALT_TEXT = re.compile(r"\*Figure \(alt text\):\s*(.+?)\*(?!\*)", re.S)
FOLD = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def _markdown(grade_id: str) -> str:
    """One markdown cell's text, without the comment prefixes, on one line."""
    nb = notebooks.read_source(notebooks.SOLUTIONS / f"{LESSON}.py")
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return " ".join(cell.source.split())
    raise LookupError(grade_id)


def _alt_text(grade_id: str) -> str:
    return " ".join(m.group(1) for m in ALT_TEXT.finditer(_markdown(grade_id)))


@pytest.fixture(scope="module")
def memory_run():
    """The lesson's memory measurement, as its cell runs it (tracemalloc counts every numpy allocation exactly)."""
    return notebooks.run_code_cells(LESSON, until="peak_mb")


def _ratios(values):
    return [b / a for a, b in zip(values, values[1:])]


def test_the_memory_figure_is_described_by_its_own_measurement(memory_run):
    naive, tiled, one = memory_run["naive_mb"], memory_run["tiled_mb"], memory_run["one_matrix_mb"]
    T_values, block_size = memory_run["T_values"], memory_run["block_size"]
    alt = _alt_text("memory_plot_intro")
    assert f"T from {T_values[0]} to {T_values[-1]}" in alt
    assert "plain attention rises about four-fold for each doubling of T" in alt
    assert all(3.5 <= r <= 4.5 for r in _ratios(naive)), _ratios(naive)
    assert "three to four times above it" in alt and all(3 <= n / o <= 4 for n, o in zip(naive, one))
    assert f"rises two-fold per doubling once T is past the block size of {block_size}" in alt
    past = [t for T, t in zip(T_values, tiled) if T >= block_size]  # from the first T past one block on
    assert all(1.8 <= r <= 2.2 for r in _ratios(past[1:])) and _ratios(past)[0] > 2.2, _ratios(tiled)
    gap = [n / t for n, t in zip(naive, tiled)]
    assert f"ends more than five times lower at T = {T_values[-1]}" in alt and 5 < gap[-1] < 6, gap
    assert "a gap that widens with every doubling" in alt and all(b > a for a, b in zip(gap, gap[1:])), gap


def test_the_memory_reading_states_what_the_measurement_shows(memory_run):
    naive, tiled, one = memory_run["naive_mb"], memory_run["tiled_mb"], memory_run["one_matrix_mb"]
    text = _markdown("memory_read")
    assert "its peak is three to four times the dashed line and quadruples with each doubling of $T$" in text
    assert all(3 <= n / o <= 4 for n, o in zip(naive, one))
    assert "once $T$ is past the block size, it only doubles" in text
    assert all(r <= 2.2 for r in _ratios(tiled[1:]))


def _mb(n_bytes: float) -> int:
    return round(n_bytes / 1e6)


def test_the_sizes_the_text_names_are_their_shapes():
    full = 12 * 2048 * 2048 * 8  # (n_heads, T, T) float64 at T = 2048 with 12 heads
    assert _mb(full) == 403  # "400 MB" in round figures
    assert "At $T = 2048$ with 12 heads in float64 that is 400 MB for the weights alone" in _markdown("tiled_intro")
    speed = _markdown("speed_read")
    assert "the $(n\\_heads, T, T)$ scores are 400 MB in float64" in speed
    assert "a 400 MB `(12, 2048, 2048)` array, while the loop works on one 32 MB `(T, T)` matrix" in speed
    assert _mb(2048 * 2048 * 8) == 34 and 2048 * 2048 * 8 / 2**20 == 32  # 32 MiB


_ROW = re.compile(r"\| (?P<layer>[^|]+?) \| (?P<cells>(?:[\d.]+ ms, \d+% \|\s*){4})")


def _bench_table():
    """{layer label: {variant: (ms, percent, ms as written)}} from the speed reading's table, and the peak it states."""
    text = _markdown("speed_read")
    peak = float(re.search(r"matmul peak (\d+) GFLOP/s on one core", text).group(1))
    header = re.search(r"\| layer \(float64[^|]*\| (.+?) \|\s*\|---", text).group(1)
    variants = [v.strip() for v in header.split("|")]
    table = {}
    for m in _ROW.finditer(text):
        cells = re.findall(r"([\d.]+) ms, (\d+)%", m.group("cells"))
        table[m.group("layer").strip()] = {v: (float(ms), int(pct), ms) for v, (ms, pct) in zip(variants, cells)}
    return peak, table


def _shape(label: str):
    """(B, T, d_model, n_heads) from a row label such as 'B=8 T=128 d_model=512 h=8'."""
    found = dict(re.findall(r"(B|T|d_model|h)=(\d+)", label))
    return tuple(int(found[k]) for k in ("B", "T", "d_model", "h"))


def test_the_quoted_bench_table_agrees_with_the_lesson_s_flop_count():
    """Each fraction of peak is the row's flop count (the lesson's formula, 8 B T d^2 + 4 B T^2 d) over its time and
    the stated peak; the shapes are the ones the lesson's speed cell measures."""
    source = (notebooks.SOLUTIONS / f"{LESSON}.py").read_text(encoding="utf-8")
    assert "flop_counts[label] = 8 * B * T * d_model**2 + 4 * B * T * T * d_model" in source
    peak, table = _bench_table()
    assert len(table) == 3 and all(len(row) == 4 for row in table.values()), table
    for label, row in table.items():
        B, T, d_model, _ = _shape(label)
        assert f"({B}, {T}, {d_model}, {_shape(label)[3]})" in source  # a shape the lesson's cell measures
        flops = 8 * B * T * d_model**2 + 4 * B * T * T * d_model
        for variant, (ms, pct, written) in row.items():
            half = 0.5 * 10.0 ** -len(written.partition(".")[2])  # the time's rounding
            lowest = flops / ((ms + half) / 1e3) / 1e9 / (peak + 0.5) * 100  # the peak is rounded too
            highest = flops / ((ms - half) / 1e3) / 1e9 / (peak - 0.5) * 100
            assert lowest - 0.5 <= pct <= highest + 0.5, (label, variant, ms, pct, lowest, highest)


def test_every_sentence_that_reads_the_bench_table_is_true_of_it():
    _, table = _bench_table()
    text = _markdown("speed_read")
    mid = next(row for label, row in table.items() if _shape(label)[:2] == (8, 128))
    big = next(row for label, row in table.items() if _shape(label)[1] == 2048)
    small = next(row for label, row in table.items() if _shape(label)[1] == 32)
    saved = 1 - mid["batched"][0] / mid["loop"][0]
    assert "batching saves about a quarter of the loop's time" in text and 0.2 <= saved <= 0.3, saved
    assert "fusing QKV adds nothing measurable on top" in text
    assert abs(mid["fused QKV"][0] / mid["batched"][0] - 1) <= 0.05
    assert "the loop over heads *beats* the batched version" in text and big["loop"][0] < big["batched"][0]
    assert "was the fastest there" in text and min(big.values())[0] == big["course reference"][0]
    assert max(small.values())[0] == small["loop"][0]  # on the lesson-sized layer the loop is the slowest
    assert "no variant comes near the peak there" in text and max(cell[1] for cell in big.values()) <= 30


def test_the_threads_cell_gives_each_thread_one_blas_thread():
    """The speedup the threads reading promises needs one BLAS thread per Python thread (with BLAS's own threads
    on top, two Python threads ran at 0.31-1.13x one thread on 2 cores); the lesson sets it before numpy loads."""
    source = (notebooks.SOLUTIONS / f"{LESSON}.py").read_text(encoding="utf-8")
    setup = source[: source.index("import numpy as np")]
    assert 'os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")' in setup
    assert 'os.environ.setdefault("OMP_NUM_THREADS", "1")' in setup
    text = _markdown("threads_read")
    assert "two threads should take clearly less time than one (not quite half" in text
