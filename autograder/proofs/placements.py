"""Submissions proving that a cell's score depends only on the function it grades.

The mutation harness (``autograder/proofs/mutation.py``) grades one submission per catalogued bug, placed in the cell of
the function it belongs to. A lesson also holds functions it does not grade: lesson 01's pasted into lessons 02
and 06, lesson 02's pasted into lesson 06, lesson 05's ungraded softmax. ``for_lesson`` places every catalogued
bug of such a function in that lesson's cell: the submission must lose no point at all (the hidden tests put the
reference in place of the pasted function, and the visible self-check gives way when the hidden test passes).
``PROBES`` are wrong functions, outside the catalog, that once cost points in other functions' tests; each must
cost exactly its own ``tests``.

Bugs are placed in rounds: round r puts the r-th catalogued bug of every ungraded function of the lesson into one
submission (a notebook defines each function once), so a lesson needs as many extra submissions as its ungraded
function with the most bugs, not one per bug.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass

from autograder import bugs as catalog
from autograder import course
from autograder.checks import registry
from autograder.course import answers


@dataclass(frozen=True)
class Placement:
    id: str  # the submission's student id
    lesson: str  # "06_going_further"
    bugs: tuple  # the catalog.Bug objects placed, each in the answer cell that defines its function
    tests: tuple = ()  # grade_ids that must lose points: exactly these

    def notebook(self):
        cells = answers.model_answers(self.lesson)
        where = defining_cells(cells)
        changed = {}
        for b in self.bugs:
            gid = where[b.function]
            changed[gid] = replace_function(changed.get(gid, cells[gid]), b.function, b.source)
        return answers.fill(self.lesson, changed)


def defining_cells(cells: dict) -> dict:
    """{function name: grade_id of the answer cell defining it} from {grade_id: source} (markdown answers
    define none)."""
    return {node.name: gid for gid, source in cells.items() for node in _statements(source)
            if isinstance(node, ast.FunctionDef)}


def _statements(source: str) -> list:
    try:
        return ast.parse(source).body
    except SyntaxError:  # a markdown answer
        return []


def replace_function(cell: str, name: str, source: str) -> str:
    """``cell`` with the top-level definition of ``name`` replaced by ``source`` (the rest of the cell kept)."""
    for node in ast.parse(cell).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            lines = cell.splitlines(keepends=True)
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            return "".join(lines[:start]) + textwrap.dedent(source).strip() + "\n" + "".join(lines[node.end_lineno:])
    raise KeyError(f"the cell defines no function {name!r}")


def ungraded_functions(lesson: str) -> list:
    """The functions of ``lesson``'s answer cells that none of its hidden tests grades, in notebook order."""
    tests = registry.tests_of(lesson).values()
    graded = {n for t in tests for n in (*t.uses, *t.together)}
    return [f for f in defining_cells(answers.model_answers(lesson)) if f not in graded]


def _probe(id, number, function, source, tests):
    """A probe of the lesson numbered ``number``: a wrong function outside the catalog."""
    return catalog.Bug(id, course.lesson_numbered(number), function, "", textwrap.dedent(source).strip() + "\n",
                       tuple(tests))


PROBES = (
    _probe("causal_mask_diagonal_blocked_k0", "06", "causal_mask", """
        def causal_mask(T, convention="course"):
            blocked = np.triu(np.ones((T, T), dtype=bool), k=0)  # the diagonal blocked too
            if convention in ("course", "nn.MultiheadAttention"):
                return blocked
            if convention == "F.scaled_dot_product_attention":
                return ~blocked
            if convention == "masked_fill":
                return (~blocked).astype(float)
            raise ValueError(f"unknown mask convention {convention!r}")
        """, tests=("mask_conventions",)),
    _probe("gqa_mask_ignored", "06", "grouped_query_attention", """
        def grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None):
            group = n_heads // n_kv_heads
            Q = split_heads(x @ W_Q, n_heads)
            K = repeat_kv(split_heads(x @ W_K, n_kv_heads), group)
            V = repeat_kv(split_heads(x @ W_V, n_kv_heads), group)
            heads, weights = scaled_dot_product_attention(Q, K, V)  # the mask is never passed on
            return concat_heads(heads) @ W_O, weights
        """, tests=("gqa_values",)),
)


def for_lesson(lesson: str) -> list:
    """The extra submissions of ``lesson`` (a name such as ``06_going_further``): rounds of placed bugs, then
    the probes of that lesson."""
    by_function = [catalog.for_function(f) for f in ungraded_functions(lesson)]
    rounds = max((len(bs) for bs in by_function), default=0)
    placed = [Placement(f"placed-{course.lesson_number(lesson)}-{r + 1}", lesson, tuple(bs[r] for bs in by_function if r < len(bs)))
              for r in range(rounds)]
    probes = [Placement(f"probe-{p.id}", lesson, (p,), p.tests) for p in PROBES if p.lesson == lesson]
    return placed + probes


def all_placements() -> list:
    return [p for lesson in course.lesson_names() for p in for_lesson(lesson)]
