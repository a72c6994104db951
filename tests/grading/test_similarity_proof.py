"""The measured proof that the search for similar work finds copies and spares independent work
(``autograder/grading/similarity``), over a synthetic class of every lesson.

Each lesson's class: ``STUDENTS`` independent learners, each writing every graded answer cell their own way
(``tests/helpers/learner_code.py``: one version of the cell from its pool, the model answer, a catalogued correct
alternative or, with probability ``BUGGY``, a catalogued bug, rewritten structurally as another learner would write
it), and ``COPIERS`` who hand in a randomly chosen learner's whole lesson disguised (locals renamed, independent
statements reordered, comments and spacing changed). A buggy cell's bug is named by its tests, as the hidden tests
name it, so catalogued bugs held together count as they do in grading. The search runs as the report runs it
(``pairs.search``), with the course's own code weighing nothing.

The figures are printed (``pytest -s``) and the docs quote them (docs/grading.md, "Similar work"): at least
``RECALL`` of the copies of judgeable work listed (work whose learner wrote at least ``pairs.MIN_UNUSUAL`` unusual
fingerprints: short, common answers cannot tell a copy from independent work, and most of lessons 01, 03 and 04
are that; the figure over all copies is printed beside it), and at most ``FALSE_PER_100`` listed pair that is not
a copy per 100 independent students, over all lessons together.
"""

from __future__ import annotations

import functools
import random

import pytest

from autograder import bugs as catalog
from autograder import course
from autograder.grading.similarity import code_prints, evidence, pairs
import learner_code

pytestmark = pytest.mark.slow

STUDENTS = 100  # independent learners per lesson
COPIERS = 10  # per lesson, each the disguised copy of one learner's lesson
BUGGY = 0.2  # the chance that a learner's cell is one of its catalogued bugs
RECALL = 0.9
FALSE_PER_100 = 1.0


def _student(rng, lesson: str, pools: dict, student: str) -> evidence.Work:
    code, bugs = {}, {}
    for gid, entries in sorted(pools.items()):
        wrong = [e for e in entries if e[0] == "bug"]
        right = [e for e in entries if e[0] != "bug"]
        kind, ident, source = rng.choice(wrong if wrong and rng.random() < BUGGY else right)
        code[gid] = learner_code.independent(source, rng)
        if kind == "bug":
            for test in catalog.by_id(ident).tests:
                bugs[test] = ident
    return _work(student, lesson, code, bugs)


def _work(student, lesson, code, bugs) -> evidence.Work:
    return evidence.Work(student, lesson, code=code, bugs=dict(bugs),
                         prints={gid: set(code_prints.prints(src)) for gid, src in code.items()})


@functools.lru_cache(maxsize=None)
def lesson_class(lesson: str, seed: int = 0) -> tuple:
    """(works, the copied pairs) of one lesson's synthetic class."""
    rng = random.Random(f"{lesson}-{seed}")
    pools = learner_code.labelled_versions(lesson)
    works = [_student(rng, lesson, pools, f"s{i:03d}") for i in range(STUDENTS)]
    copied = set()
    for c in range(COPIERS):
        source = rng.choice(works[:STUDENTS])
        copy = _work(f"c{c:02d}", lesson, {gid: learner_code.disguised(src, rng) for gid, src in source.code.items()},
                     source.bugs)
        works.append(copy)
        copied.add(tuple(sorted((copy.student, source.student))))
    return works, copied


def measured(lessons) -> dict:
    """{lesson: (copied pairs listed, copied pairs, listed pairs that are no copy, copies of judgeable work listed,
    copies of judgeable work)}: judgeable when the learner copied wrote at least ``pairs.MIN_UNUSUAL`` unusual
    fingerprints (counted without the copy, in the class of the independent learners alone)."""
    figures = {}
    for lesson in lessons:
        works, copied = lesson_class(lesson)
        alone = pairs.search(lesson, works[:STUDENTS]).unusual
        found = pairs.search(lesson, works)
        listed = {(p.a, p.b) for p in found.pairs}
        judgeable = {pair for pair in copied if alone[pair[1]] >= pairs.MIN_UNUSUAL}
        # two copies of one learner are a copied pair too: they share the same learner's work
        sources = {}
        for a, b in copied:
            sources.setdefault(b, set()).add(a)
        related = set(copied) | {tuple(sorted((x, y))) for group in sources.values() for x in group for y in group
                                 if x != y}
        figures[lesson] = (len(listed & copied), len(copied), len(listed - related), len(listed & judgeable),
                           len(judgeable))
    return figures


def test_copies_are_listed_and_independent_work_is_not():
    lessons = course.lesson_names()
    figures = measured(lessons)
    found, total, false, judged_found, judged = (sum(f[k] for f in figures.values()) for k in range(5))
    students = STUDENTS * len(lessons)
    for lesson, (hit, of, wrong, judged_hit, judged_of) in figures.items():
        print(f"{lesson}: {hit}/{of} copied pairs listed ({judged_hit}/{judged_of} of judgeable work), {wrong} other "
              "pairs listed")
    print(f"all: {found}/{total} copied pairs listed ({found / total:.0%}); of judgeable work {judged_found}/{judged} "
          f"({judged_found / judged:.0%}); {false} other pairs listed among {students} independent students "
          f"({100 * false / students:.2f} per 100)")
    assert judged_found >= RECALL * judged
    assert judged >= total / 2  # most lessons' code can be judged: the claim is not about a few
    assert false <= FALSE_PER_100 * students / 100
