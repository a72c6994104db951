"""One glossary of names for the whole course: ``lessons/glossary.md``, built from ``solutions/glossary.md``,
linked from every lesson's opening cell, and defining every name a shape comment in the lessons' code or their
self-checks uses (``# (..., n_heads, T, d_head)``)."""

from __future__ import annotations

import io
import re
import tokenize

import nbformat

from autograder import course
from autograder.course import notebooks

GLOSSARY = course.SOLUTIONS / "glossary.md"
DIM = r"(?:\.\.\.|[A-Za-z_]\w*|\d+)(?:\s*[*+\-/]\s*(?:[A-Za-z_]\w*|\d+))*"
SHAPE_COMMENT = re.compile(r"#\s*\(\s*(" + DIM + r"(?:\s*,\s*" + DIM + r")+)\s*,?\s*\)")


def glossary_names(text: str) -> set:
    """The names a glossary defines: every `code` name in the first column of its tables."""
    names = set()
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            first = line.strip("|").split("|")[0]
            names |= set(re.findall(r"`([A-Za-z_]\w*)`", first))
    return names


def shape_names(code: str) -> set:
    """The dimension names of every shape comment (a comment that starts with a tuple) in Python code."""
    found = set()
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        m = SHAPE_COMMENT.match(tok.string) if tok.type == tokenize.COMMENT else None
        if m:
            found |= set(re.findall(r"[A-Za-z_]\w*", m.group(1)))
    return found


def course_code():
    """(where, Python source) of every code cell of every lesson and of every self-check module."""
    for lesson in course.lesson_names():
        for i, cell in enumerate(notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells):
            if cell.cell_type == "code":
                code = "\n".join("" if l.lstrip().startswith(("%", "!")) else l for l in cell.source.splitlines())
                yield f"solutions/{lesson}.py cell {i + 1}", code
    for helper in course.SELFCHECK_FILES:
        yield f"solutions/{helper}", (course.SOLUTIONS / helper).read_text(encoding="utf-8")


def test_the_glossary_is_released_with_the_lessons():
    assert "glossary.md" in course.PAGES
    built = (course.LESSONS / "glossary.md").read_text(encoding="utf-8")
    assert built.startswith("<!-- Built from solutions/glossary.md by `make lessons`")
    assert built.endswith(GLOSSARY.read_text(encoding="utf-8")), "run `make lessons`"


def test_every_lesson_links_the_glossary_from_its_opening_cell():
    for lesson in course.lesson_names():
        first = nbformat.read(course.LESSONS / f"{lesson}.ipynb", as_version=4).cells[0]
        assert first.source.startswith("# Lesson") and "](glossary.md)" in first.source, lesson


def test_every_shape_comment_uses_glossary_names():
    defined = glossary_names(GLOSSARY.read_text(encoding="utf-8"))
    assert {"B", "T", "d_model", "n_heads", "d_head", "T_q", "T_k", "n_kv_heads"} <= defined
    unknown, used = [], set()
    for where, code in course_code():
        names = shape_names(code)
        used |= names
        unknown += [f"{where}: {n}" for n in sorted(names - defined)]
    assert len(used) >= 10, f"too few shape comments found ({sorted(used)}): is the scanner broken?"
    assert not unknown, ("shape comments use names the glossary does not define (add them to "
                         "solutions/glossary.md or use its names):\n" + "\n".join(unknown))


def test_the_name_check_can_fail():
    code = "y = x.reshape(a, b)  # (..., n_heads, T, d_head)\nz = y.T  # (width, T_q)\nw = 1  # (not a shape)\n"
    assert shape_names(code) == {"n_heads", "T", "d_head", "width", "T_q"}
    assert glossary_names("| `T`, `B` | $n$ | `not_this` |\n|---|---|---|\n") == {"T", "B"}
