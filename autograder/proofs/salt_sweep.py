"""Every catalogued bug against each hidden test it must fail, and every catalogued correct alternative against
every hidden test of its lesson, which it must pass, over many grading salts, without a kernel.

    python -m autograder.proofs.salt_sweep [--salts 200] [--lessons 01_warmup 04 ...] [--alternatives]

A hidden test draws its inputs from ``rng_for(test_id)``, seeded by the grading salt that each grading run draws
afresh; a test that catches a bug for one salt may pass it for another. The sweep calls each hidden test's
function directly, in this process, with the model answers of the lesson and the one catalogued bug in place of
its function, once per salt, and counts for each (bug, test) pair how often the test failed (detection) and how
often its message gave that bug's diagnosis (its id, or the id of a bug sharing its diagnosis).
``tests/unit/proofs/test_salt_sweep.py`` asks for 100 % of both.

``--alternatives``: each correct solution of ``autograder/alternatives/`` (an answer cell written differently from
the model answer) is run, as a notebook defines it, in place of the model answer, and every hidden test of its
lesson must pass at every salt (``Fairness``; ``tests/unit/proofs/test_alternatives.py`` asks for all of them).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from autograder import alternatives as correct
from autograder import bugs as catalog
from autograder import course, reference
from autograder.checks import registry
from autograder.checks.verdict import PASSED, UNNAMED, Verdict, WrongAnswer
from autograder.course import answers

SALT_VARIABLE = "MHA_GRADING_SALT"


@dataclass
class Rate:
    """How one hidden test fared against one catalogued bug over ``salts`` grading salts."""

    bug: catalog.Bug
    test: str
    salts: int = 0
    detected: int = 0
    named: int = 0
    examples: list = field(default_factory=list)  # (salt, what happened) for the first few misses

    @property
    def perfect(self) -> bool:
        return self.detected == self.named == self.salts

    def line(self) -> str:
        return (f"{self.bug.id:38} {self.test:26} detected {self.detected}/{self.salts}, "
                f"named {self.named}/{self.salts}")


def model_namespace(lesson: str) -> dict:
    """Every name the lesson's model answers define (functions and values), as a completed notebook has them,
    with the names its setup cell imports from the lesson's self-check module."""
    return dict(_model_namespace(lesson))


@functools.lru_cache(maxsize=None)
def _model_namespace(lesson: str) -> dict:
    namespace = {"np": np, "math": math, "__name__": "__model__"}
    namespace.update({n: getattr(reference, n) for n in reference.__all__})
    selfcheck = course.import_selfcheck(course.selfcheck_module(lesson))
    namespace.update({n: getattr(selfcheck, n) for n in getattr(selfcheck, "__all__", ())})
    for grade_id, source in answers.model_answers(lesson).items():
        try:
            code = compile(source, f"<model answer {grade_id}>", "exec")
        except SyntaxError:  # a written answer (markdown), not code
            continue
        exec(code, namespace)
    return namespace


@contextlib.contextmanager
def grading_salt(salt: int):
    saved = os.environ.get(SALT_VARIABLE)
    os.environ[SALT_VARIABLE] = str(salt)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(SALT_VARIABLE, None)
        else:
            os.environ[SALT_VARIABLE] = saved


class _Shell:
    def __init__(self, user_ns):
        self.user_ns = user_ns


@contextlib.contextmanager
def notebook_namespace(values: dict):
    """A self-check probe that reads the notebook's names through ``get_ipython().user_ns`` reads ``values``."""
    import IPython

    saved = IPython.get_ipython
    IPython.get_ipython = lambda: _Shell(values)
    try:
        yield
    finally:
        IPython.get_ipython = saved


def verdict_of(test, notebook: dict, values: dict, salt: int) -> Verdict:
    """How ``test`` ends on the functions ``notebook`` at the grading salt ``salt``, run here (the names a self-check
    probe reads through the notebook's namespace: ``values``), typed as the grader records it."""
    with grading_salt(salt), np.errstate(all="ignore"), contextlib.redirect_stdout(None), notebook_namespace(values):
        try:
            test(notebook)
        except WrongAnswer as exc:
            return exc.verdict
        except AssertionError as exc:
            return Verdict(UNNAMED, message=str(exc))
    return Verdict(PASSED)


def sweep(bug_list=None, salts=range(200), lessons=None) -> list:
    """One ``Rate`` per (catalogued bug, hidden test it must fail)."""
    bug_list = [b for b in (bug_list or catalog.CATALOG) if not lessons or b.lesson in lessons]
    namespaces, rates = {}, []
    for b in bug_list:
        lesson = b.lesson
        if lesson not in namespaces:
            namespaces[lesson] = model_namespace(lesson)
        values = dict(namespaces[lesson])
        values[b.function] = b.make()
        for test_id in b.tests:
            test = registry.find(lesson, test_id)
            if test is None:
                raise LookupError(f"bug {b.id} names the test {test_id!r}, which {lesson} does not register")
            rate = Rate(b, test_id)
            notebook = {n: values[n] for n in test.names}
            # the bug's own id, or the id of a bug that shares its diagnosis (two ways to one wrong result)
            names = {o.id for o in catalog.CATALOG if o.function == b.function and o.diagnosis == b.diagnosis}
            for salt in salts:
                rate.salts += 1
                ended = verdict_of(test, notebook, values, salt)
                if not ended.passed:
                    rate.detected += 1
                if ended.bug in names:
                    rate.named += 1
                elif len(rate.examples) < 3:
                    rate.examples.append((salt, (ended.message or ended.result)[:300]))
            rates.append(rate)
    return rates


@dataclass
class Fairness:
    """How one correct alternative fared against the hidden tests of its lesson over ``salts`` grading salts."""

    alternative: correct.Alternative
    salts: int = 0
    passed: int = 0
    examples: list = field(default_factory=list)  # (salt, test, what it said) for the first few failures

    @property
    def perfect(self) -> bool:
        return self.passed == self.salts

    def line(self) -> str:
        return f"{self.alternative.id:44} {self.alternative.cell:26} full marks at {self.passed}/{self.salts} salts"


def defined_names(source: str) -> set:
    """The names a cell's source defines at its top level (functions and assigned values)."""
    import ast

    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def fairness(alternative_list=None, salts=range(200), lessons=None) -> list:
    """One ``Fairness`` per correct alternative: its cell's source executed in the lesson's model namespace (as a
    notebook runs it: its functions look up the notebook's names), then every hidden test of the lesson that grades
    what it defines (every other test runs the reference in its place: ``stand_ins``)."""
    chosen = [a for a in (alternative_list or correct.CATALOG) if not lessons or a.lesson in lessons]
    found = []
    for alt in chosen:
        values = dict(model_namespace(alt.lesson))
        if not re.search(r"^import math$", (course.SOLUTIONS / f"{alt.lesson}.py").read_text(encoding="utf-8"),
                         re.M):
            values.pop("math")  # as the notebook has it: a learner who needs math imports it (lesson 03 does not)
        exec(compile(alt.source, f"<alternative {alt.id}>", "exec"), values)
        defined = defined_names(alt.source)
        tests = {tid: t for tid, t in registry.tests_of(alt.lesson).items()
                 if defined & {*t.uses, *t.together}}
        rate = Fairness(alt)
        for salt in salts:
            rate.salts += 1
            failed = None
            for test_id, test in sorted(tests.items()):
                ended = verdict_of(test, {n: values[n] for n in test.names}, values, salt)
                if not ended.passed:
                    failed = (salt, test_id, (ended.message or ended.result)[:400])
                    break
            if failed is None:
                rate.passed += 1
            elif len(rate.examples) < 3:
                rate.examples.append(failed)
        found.append(rate)
    return found


def contract_sweep(salts=range(200), lessons=None) -> list:
    """[(lesson, test id, salt, the clause broken)] for every input a hidden test sends, at each salt, that its
    lesson's contract does not allow (``autograder/checks/contracts.py``): each graded function runs behind its
    contract, then as the model answer. An input the contract rules out and the model answer refuses with
    ValueError is one the lesson asks the function to refuse (the test expects that error): allowed. Empty when
    every hidden input is one the lesson allows."""
    from autograder.checks import contracts

    broken = []
    for lesson in [name for name in course.lesson_names() if not lessons or name in lessons]:
        values = model_namespace(lesson)
        for test_id, test in sorted(registry.tests_of(lesson).items()):
            graded = {n: contracts.of(n) for n in test.uses}
            if not any(graded.values()):
                continue  # a graded value (a written number), not a function
            for salt in salts:
                seen = []

                def behind(name, fn, contract):
                    @functools.wraps(fn)
                    def checked(*args, **kwargs):
                        try:
                            contract(*args, **kwargs)
                        except contracts.ContractBroken as exc:
                            try:
                                result = fn(*args, **kwargs)
                            except ValueError:  # an input the lesson asks the function to refuse: allowed
                                raise
                            seen.append(f"{name}: {exc}")
                            return result
                        return fn(*args, **kwargs)
                    return checked

                notebook = {n: values[n] for n in test.names}
                notebook.update({n: behind(n, values[n], c) for n, c in graded.items() if c})
                ended = verdict_of(test, notebook, values, salt)
                if not ended.passed:
                    seen.append(f"the model answer failed: {(ended.message or ended.result)[:200]}")
                broken += [(lesson, test_id, salt, clause) for clause in dict.fromkeys(seen)]
    return broken


def report(rates, seconds) -> str:
    lines = [r.line() + ("" if r.perfect else f"  <- e.g. salt {r.examples[0][0]}: {r.examples[0][1]}")
             for r in rates]
    perfect = sum(r.perfect for r in rates)
    lines.append(f"{perfect}/{len(rates)} (bug, test) pairs detected and named for every salt, "
                 f"{len({r.bug.id for r in rates})} bugs, in {seconds:.1f} s")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--salts", type=int, default=200, help="grading salts 0 .. N-1")
    parser.add_argument("--lessons", nargs="*", help="lessons (names or numbers: 01_warmup or 01); default: all")
    parser.add_argument("--alternatives", action="store_true",
                        help="the correct alternatives instead of the bugs: each must pass every test at every salt")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    if args.alternatives:
        found = fairness(salts=range(args.salts), lessons=course.lessons_named(args.lessons) if args.lessons else None)
        for f in found:
            print(f.line() + ("" if f.perfect else "  <- e.g. salt {}, {}: {}".format(*f.examples[0])))
        print(f"{sum(f.perfect for f in found)}/{len(found)} correct alternatives earn full marks at every salt, "
              f"in {time.perf_counter() - t0:.1f} s")
        return 0 if all(f.perfect for f in found) else 1
    rates = sweep(salts=range(args.salts), lessons=course.lessons_named(args.lessons) if args.lessons else None)
    print(report(rates, time.perf_counter() - t0))
    return 0 if all(r.perfect for r in rates) else 1


if __name__ == "__main__":
    sys.exit(main())
