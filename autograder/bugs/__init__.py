"""The catalog of realistic learner bugs: data, not prose.

Each entry is the wrong function a learner writes, the lesson and contract function it belongs to, and the
diagnosis the learner should read. The hidden tests use the catalog to name a bug (a learner's result that
equals a catalogued bug's result on the same input gets that bug's diagnosis); the mutation tests build one
submission per entry and prove, through ``nbgrader autograde``, that it loses points with that diagnosis.

``source`` is executed with ``np``, ``math`` and the reference functions in scope, so a bug in a composite
function (``multi_head_attention``) calls correct helpers and differs only by its own mistake.
"""

from __future__ import annotations

import functools
import math
import textwrap
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Bug:
    id: str
    lesson: str  # the lesson's id (01_warmup), from the module that declares the bug
    function: str
    diagnosis: str
    source: str
    # grade_ids of the test cells that must lose points (the broken function's tests); () = derive from lesson
    tests: tuple = ()
    # False when only the hidden tests can see the bug (e.g. values hard-coded for the visible inputs)
    visible: bool = True
    # True: a find-the-bug exercise hands learners this bug as the starting code of its answer cell
    # (autograder/publish/given_code.py); the hidden tests grade their fix
    given: bool = False

    def make(self):
        """The wrong function itself, defined with correct reference helpers around it."""
        return _made(self.id, self.function, self.source)


@functools.lru_cache(maxsize=None)
def _made(bug_id, function, source):
    """Compiled once per bug: the hidden tests rebuild bugs for every wrong result they try to name."""
    from autograder import reference
    namespace = {"np": np, "math": math}
    namespace.update({n: getattr(reference, n) for n in reference.__all__})
    exec(compile(textwrap.dedent(source), f"<bug {bug_id}>", "exec"), namespace)
    return namespace[function]


CATALOG: list = []
LESSON_MODULES = []  # filled by _load_lessons(): autograder/bugs/lessonNN.py, one per lesson


def declarer(module: str):
    """The ``bug(id, function, diagnosis, source, ...)`` that a lesson's module (``bugs/lesson01.py``, named by
    ``__name__``) declares its bugs with: each is filed under that lesson's id."""
    from autograder import course

    lesson = course.lesson_numbered(module)

    def bug(id, function, diagnosis, source, tests=(), visible=True, given=False):
        CATALOG.append(Bug(id, lesson, function, " ".join(diagnosis.split()), textwrap.dedent(source).strip() + "\n",
                           tuple(tests), visible, given))

    return bug


def for_function(name: str) -> list:
    return [b for b in CATALOG if b.function == name]


def by_id(bug_id: str) -> Bug:
    for b in CATALOG:
        if b.id == bug_id:
            return b
    raise KeyError(f"no bug {bug_id!r} in the catalog; known: {', '.join(b.id for b in CATALOG)}")




def _load_lessons():
    import importlib
    import pkgutil

    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("lesson"):
            LESSON_MODULES.append(importlib.import_module(f"{__name__}.{info.name}"))


_load_lessons()
