"""Every markdown cell of every student notebook, and the glossary, render as intended: CommonMark plus GFM tables
(markdown-it-py), every table recognised as one, and every row of a table with as many cells as its header.

A table whose delimiter row has a different number of cells from its header is not a table for GFM: it renders
as one paragraph of pipes. A body row with more cells than the header loses the extra ones silently, and one
with fewer gets empty cells. Both are found here from the source lines of each table markdown-it-py parsed.
"""

from __future__ import annotations

import re

import nbformat
import pytest
from markdown_it import MarkdownIt

from autograder import course

MARKDOWN = MarkdownIt("commonmark").enable("table")
PAGES = sorted(p.name for p in course.LESSONS.glob("*.md"))


def row_cells(line: str) -> list:
    """The cells of one table row, split as GFM splits them: at every pipe that is not escaped as \\|."""
    row = line.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return re.split(r"(?<!\\)\|", row)


def table_problems(source: str) -> list:
    """What is wrong with the tables of one markdown text: rows that render as no table, and rows whose number
    of cells differs from the header's. Empty when every table renders with every cell."""
    tokens = MARKDOWN.parse(source)
    lines = source.splitlines()
    in_table, in_code = set(), set()
    problems = []
    for token in tokens:
        if token.type in ("fence", "code_block", "html_block") and token.map:
            in_code.update(range(*token.map))
        if token.type == "table_open":
            start, stop = token.map
            in_table.update(range(start, stop))
            header = len(row_cells(lines[start]))
            for n in range(start + 1, stop):
                cells = len(row_cells(lines[n]))
                if cells != header:
                    problems.append(f"line {n + 1} has {cells} cells, its table's header {header}: "
                                    f"{lines[n].strip()[:80]!r}")
    for n, line in enumerate(lines):
        if line.lstrip().startswith("|") and n not in in_table and n not in in_code:
            problems.append(f"line {n + 1} looks like a table row but renders as text (does the delimiter row "
                            f"have as many cells as the header?): {line.strip()[:80]!r}")
    return problems


def markdown_texts():
    """(where, markdown source) of every markdown cell of every student notebook and of every page in lessons/."""
    for lesson in course.lesson_names():
        nb = nbformat.read(course.LESSONS / f"{lesson}.ipynb", as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "markdown":
                yield f"lessons/{lesson}.ipynb cell {i + 1} ({cell.get('id')})", cell.source
    for page in PAGES:
        yield f"lessons/{page}", (course.LESSONS / page).read_text(encoding="utf-8")


def test_every_markdown_cell_renders_its_tables_whole():
    texts = list(markdown_texts())
    assert len(texts) > 60, "expected every lesson's markdown cells"
    problems = []
    tables = 0
    for where, source in texts:
        MARKDOWN.render(source)  # renders without an error
        tables += sum(t.type == "table_open" for t in MARKDOWN.parse(source))
        problems += [f"{where}: {p}" for p in table_problems(source)]
    assert not problems, "tables that do not render as written:\n" + "\n".join(problems)
    assert tables >= 8, f"only {tables} tables rendered: is the table extension enabled?"


def test_the_check_finds_a_delimiter_row_of_the_wrong_length():
    broken = "| layer | loop | batched |\n|---|---|---|---|\n| small | 1 ms | 2 ms |\n"
    problems = table_problems(broken)
    assert len(problems) == 3 and all("renders as text" in p for p in problems), problems
    assert table_problems(broken.replace("|---|---|---|---|", "|---|---|---|")) == []


@pytest.mark.parametrize("row", ["| small | 1 ms |", "| small | 1 ms | 2 ms | 3 ms |"])
def test_the_check_finds_a_body_row_of_the_wrong_length(row):
    table = f"text\n\n| layer | loop | batched |\n|:---|---:|---|\n{row}\n| big | 9 ms | 8 ms |\n"
    assert table_problems(table) == [f"line 5 has {len(row_cells(row))} cells, its table's header 3: {row!r}"]


def test_escaped_pipes_and_code_blocks_are_not_rows():
    text = ("| a | b |\n|---|---|\n| `x \\| y` | 2 |\n\n```\n| not | a | table |\n```\n\n"
            "    | indented code |\n")
    assert table_problems(text) == []
