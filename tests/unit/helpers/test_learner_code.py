"""The synthetic learners of ``tests/helpers/learner_code.py`` hand in working code: every catalogued version of every
graded answer cell, every ``independent`` rewrite of it and every ``disguised`` copy (20 seeds each) parses, defines
the cell's functions and behaves as the version it came from; independent rewrites really differ in structure, and
disguised copies really differ in text.

Behaviour is checked two ways, without a kernel:

* replay: the hidden tests of a cell run once, at grading salt 0, on the model answer, recording every input they
  hand the cell's functions (a few per kind of input); each version and each of its rewrites is then called on
  those inputs, in the lesson's model namespace, and must return the same values (bit for bit, or within 1e-12
  relative), raise the same kind of error, and leave its arguments as the original leaves them;
* verdict: the hidden tests themselves (``salt_sweep.verdict_of``, salt 0) give a rewritten version the verdict they
  give the version (passed stays passed, a bug stays that bug), for the model answer, an alternative and two bugs of
  every cell (every version in the ``slow`` test, which also covers every lesson).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import io
import math
import random
import time
import warnings

import numpy as np
import pytest

import learner_code
from autograder import course
from autograder.checks import registry
from autograder.course import answers
from autograder.proofs import salt_sweep
from autograder.proofs.salt_sweep import defined_names

pytestmark = pytest.mark.slow  # with the proof that uses it (tests/grading/test_similarity_proof.py), in `make test`

LESSONS = ("01_warmup", "04_dk_scaling", "09_small_gpt")
SEEDS = range(20)
CALLS_PER_KIND = 2  # inputs recorded per kind of input (arguments of one shape, dtype and plain value)
BUDGET = 0.003  # seconds of the model answer's time on the inputs kept per hidden test (at least one is kept)
VERSION_BUDGET = 0.0005  # seconds of a version's time on the inputs its rewrites are replayed on (at least one)


# ============================================================================================= recording and replay

class _Recorder:
    """Stands in for a learner function in a hidden test: records what it is called with, then calls it."""

    def __init__(self, name, fn, calls, kinds):
        self._name, self._fn, self._calls, self._kinds = name, fn, calls, kinds

    @property
    def __globals__(self):  # where the hidden test binds its stand-ins (``runner.standing_in``)
        return self._fn.__globals__

    def __call__(self, *args, **kwargs):
        kind = (self._name, _kind(args), _kind(kwargs))
        self._kinds[kind] = self._kinds.get(kind, 0) + 1
        if self._kinds[kind] <= CALLS_PER_KIND:
            self._calls.append((self._name, copy.deepcopy(args), copy.deepcopy(kwargs)))
        return self._fn(*args, **kwargs)


def _kind(value):
    if isinstance(value, np.ndarray):
        return ("array", value.shape, str(value.dtype))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_kind(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _kind(v)) for k, v in value.items()))
    if isinstance(value, (int, float, str, bool, type(None), np.generic)):
        return value
    return type(value).__name__


@contextlib.contextmanager
def _quiet():
    with np.errstate(all="ignore"), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _namespace(lesson, source):
    """The lesson's model namespace with ``source`` (text, or its compiled code) run in it, as a notebook runs it."""
    values = salt_sweep.model_namespace(lesson)
    with _quiet():
        exec(compile(source, "<learner>", "exec") if isinstance(source, str) else source, values)
    return values


def _tests_of(lesson, source):
    defined = defined_names(source)
    return {tid: t for tid, t in sorted(registry.tests_of(lesson).items()) if defined & {*t.uses, *t.together}}


@functools.lru_cache(maxsize=None)
def _inputs(lesson, cell):
    """[(function, args, kwargs)]: inputs the hidden tests of ``cell`` hand its functions, at salt 0, on the model
    answer (which passes, so every test runs to its end): the cheapest of each kind first, the kinds taken in
    turn, while the model answer's time on them stays within ``BUDGET`` per test."""
    source = learner_code.code_cells(lesson)[cell]
    values = _namespace(lesson, source)
    defined = defined_names(source)
    per_test = []
    for test in _tests_of(lesson, source).values():
        found = []
        per_test.append(found)
        calls, kinds = [], {}
        notebook = {n: _Recorder(n, values[n], calls, kinds) if n in defined and callable(values[n]) else values[n]
                    for n in test.names}
        verdict = salt_sweep.verdict_of(test, notebook, values, 0)
        assert verdict.passed, (lesson, cell, test.name, verdict)
        by_kind = {}
        for call in calls:
            started = time.perf_counter()
            _outcome(lesson, source, [call], values)
            by_kind.setdefault(_coarse(call), []).append((time.perf_counter() - started, call))
        queues = [sorted(timed, key=lambda t: t[0]) for timed in by_kind.values()]
        spent, turn = 0.0, 0
        while any(queues):
            queue = queues[turn % len(queues)]
            turn += 1
            if queue:
                seconds, call = queue.pop(0)
                if spent and spent + seconds > BUDGET:
                    continue
                spent += seconds
                found.append(call)
    return tuple(_in_turn(per_test))


def _in_turn(lists) -> list:
    """The first of each list, then the second of each, ..."""
    return [x[i] for i in range(max(map(len, lists), default=0)) for x in lists if i < len(x)]


def _replayed(lesson, source, calls):
    """(the inputs among ``calls`` that ``source`` runs within ``VERSION_BUDGET``, in order, and its outcomes)."""
    values = _namespace(lesson, source)
    chosen, outcomes, spent = [], [], 0.0
    for call in calls:
        started = time.perf_counter()
        [outcome] = _outcome(lesson, source, [call], values)
        seconds = time.perf_counter() - started
        if chosen and spent + seconds > VERSION_BUDGET:
            continue
        spent += seconds
        chosen.append(call)
        outcomes.append(outcome)
    return chosen, outcomes


def _coarse(call):
    """A call's kind of input, sizes left out: arrays by rank and dtype, other values as they are."""
    def kind(value):
        if isinstance(value, np.ndarray):
            return ("array", value.ndim, str(value.dtype))
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, len(value) > 0 and kind(value[0]))
        if isinstance(value, dict):
            return ("dict", tuple(value))
        if isinstance(value, (float, str, bool, type(None))):
            return value
        return type(value).__name__
    name, args, kwargs = call
    return name, tuple(map(kind, args)), tuple((k, kind(v)) for k, v in kwargs.items())


def _outcome(lesson, source, calls, values=None):
    """What ``source``'s functions do on each recorded input: ("returned", value, args after) or ("raised", type)."""
    values = values or _namespace(lesson, source)
    found = []
    with _quiet():
        for name, args, kwargs in calls:
            args, kwargs = copy.deepcopy(args), copy.deepcopy(kwargs)
            np.random.seed(0)  # a version that draws from numpy's global generator draws alike
            random.seed(0)
            try:
                result = values[name](*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - a bug may raise: a rewrite of it must raise alike
                found.append(("raised", type(exc).__name__))
            else:
                found.append(("returned", result, args, kwargs))
    return found


def _same(a, b) -> bool:
    """Equal values of the same types: arrays of one shape and dtype, floats within 1e-12 relative."""
    if isinstance(a, (np.ndarray, np.generic)) or isinstance(b, (np.ndarray, np.generic)):
        if type(a) is not type(b) or np.shape(a) != np.shape(b) or a.dtype != b.dtype:
            return False
        if a.dtype.kind != "O" and a.tobytes() == b.tobytes():  # bit for bit (the common case, and fast)
            return True
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind not in "fc":
            return bool(np.array_equal(a, b))
        finite = np.isfinite(a)
        scale = float(np.max(np.abs(a[finite]), initial=0.0)) if finite.any() else 0.0
        return bool(np.array_equal(np.isnan(a), np.isnan(b)) and np.allclose(
            a, b, rtol=1e-12, atol=1e-12 * scale, equal_nan=True))
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.random.Generator):  # as many draws made from it
        return a.bit_generator.state == b.bit_generator.state
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def _differences(expected, got) -> list:
    return [i for i, (e, g) in enumerate(zip(expected, got)) if not _same(e, g)] + (
        ["count"] if len(expected) != len(got) else [])


@functools.lru_cache(maxsize=None)
def _verdicts(lesson, source) -> dict:
    """{test: (result, bug, error raised, name undefined)} of the hidden tests of ``source``'s cell, at salt 0."""
    values = _namespace(lesson, source)
    return {tid: (v.result, v.bug, v.raised, v.undefined) for tid, t in _tests_of(lesson, source).items()
            for v in [salt_sweep.verdict_of(t, {n: values[n] for n in t.names}, values, 0)]}


# ============================================================================================= the rewrites, made once

@functools.lru_cache(maxsize=None)
def _rewrites(lesson):
    """[(cell, kind, id, source, [independent rewrites], [disguised copies])] over ``SEEDS``."""
    return [(cell, kind, vid, source, [learner_code.independent(source, s) for s in SEEDS],
             [learner_code.disguised(source, s) for s in SEEDS])
            for cell, pool in learner_code.labelled_versions(lesson).items() for kind, vid, source in pool]


def _functions(source) -> set:
    return set(learner_code.functions_of(source))


# ============================================================================================= the pool

@pytest.mark.parametrize("lesson", course.lesson_names())
def test_the_pool_holds_every_catalogued_version_of_every_answer_cell(lesson):
    from autograder import alternatives, bugs

    pool = learner_code.labelled_versions(lesson)
    model = learner_code.code_cells(lesson)
    assert set(pool) == set(model)
    assert learner_code.versions(lesson) == {c: [(k, s) for k, _, s in entries] for c, entries in pool.items()}
    for cell, entries in pool.items():
        assert entries[0] == ("model", "model", model[cell])
        assert {k for k, _, _ in entries} <= set(learner_code.KINDS)
        for kind, vid, source in entries:
            ast.parse(source)
            assert _functions(model[cell]) <= _functions(source), (cell, vid)  # the cell's functions, named so
    ids = {vid for entries in pool.values() for _, vid, _ in entries}
    assert {a.id for a in alternatives.of_lesson(lesson) if a.cell in model} <= ids
    assert {b.id for b in bugs.CATALOG if b.lesson == lesson} <= ids
    # a bug goes in the cell the mutation harness puts it in (answers.fill, given the bug's function)
    functions = sorted({b.function for b in bugs.CATALOG if b.lesson == lesson})
    filled = answers.fill(lesson, {f: f"# {f}\n" for f in functions}, complete=False)
    harness = {cell.source.strip()[2:]: cell.metadata["nbgrader"]["grade_id"] for cell in filled.cells
               if cell.source.startswith("# ") and cell.source.strip()[2:] in functions}
    for b in bugs.CATALOG:
        if b.lesson == lesson:
            [(cell, source)] = [(c, s) for c, entries in pool.items() for _, vid, s in entries if vid == b.id]
            assert b.function in _functions(model[cell])
            assert harness[b.function] == cell, b.id
            assert source.strip() == b.source.strip()  # a one-function cell: the bug is the whole cell


def test_a_cell_of_several_functions_keeps_the_model_answers_others():
    """Lesson 02's cell of lesson 01's functions: a version of softmax keeps scaled_dot_product_attention."""
    model = learner_code.code_cells("02_multi_head")["lesson01_functions"]
    version = "def my_softmax(x, axis=-1):\n    e = np.exp(x - x.max(axis=axis, keepdims=True))\n" \
              "    return e / e.sum(axis=axis, keepdims=True)\n"
    cell = learner_code._as_cell(model, version, "softmax")
    assert learner_code.functions_of(cell) == learner_code.functions_of(model) == ["softmax",
                                                                                    "scaled_dot_product_attention"]
    assert "e / e.sum(axis=axis, keepdims=True)" in cell and "my_softmax" not in cell
    sdpa = [s for s in ast.parse(model).body if getattr(s, "name", "") == "scaled_dot_product_attention"][0]
    assert ast.unparse(sdpa) in ast.unparse(ast.parse(cell))


def test_the_versions_get_their_verdicts():
    """The harness itself: model answers and alternatives pass, each bug fails a test of its cell (for the versions
    the verdict test below samples; the slow test runs every version)."""
    for lesson in LESSONS:
        for cell, entries in learner_code.labelled_versions(lesson).items():
            for kind, vid, source in entries:
                if vid not in _sampled(lesson, cell):
                    continue
                verdicts = _verdicts(lesson, source)
                assert verdicts, (cell, vid)
                if kind == "bug":
                    assert any(v[0] != "passed" for v in verdicts.values()), (vid, verdicts)
                else:
                    assert all(v[0] == "passed" for v in verdicts.values()), (vid, verdicts)


# ============================================================================================= rewrites that work

@functools.lru_cache(maxsize=None)
def _parsed(lesson):
    """{(cell, version id): ([(functions, structure, code)] of its independent rewrites, [(functions, names, code)]
    of its copies)}, each rewrite parsed once: the functions it defines, its program (``ast.dump``: no comments, no
    layout), the names it reads and binds, and its compiled code."""
    found = {}
    for cell, kind, vid, source, independents, copies in _rewrites(lesson):
        trees = [ast.parse(t) for t in independents]
        found[cell, vid] = ([(_defs(t), ast.dump(t), _code(t, vid)) for t in trees],
                            [(_defs(t), _names(t), _code(t, vid)) for t in map(ast.parse, copies)])
    return found


def _code(tree, vid):
    return compile(tree, f"<rewrite of {vid}>", "exec")  # from the tree: the replay does not parse it again


def _defs(tree) -> set:
    return {s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _names(tree) -> set:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_rewrite_parses_and_defines_the_cells_functions(lesson):
    parsed = _parsed(lesson)  # a SyntaxError here names the rewrite's source in its traceback
    for cell, kind, vid, source, independents, copies in _rewrites(lesson):
        wanted = _functions(source)
        for how, found, texts in (("independent", parsed[cell, vid][0], independents),
                                  ("disguised", parsed[cell, vid][1], copies)):
            for seed, ((defined, _, _), text) in enumerate(zip(found, texts)):
                assert defined == wanted, f"{how}({vid}, seed {seed}) defines {sorted(defined)}:\n{text}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_rewrite_behaves_as_its_original_on_the_hidden_tests_inputs(lesson):
    checked = 0
    parsed = _parsed(lesson)
    for cell, kind, vid, source, independents, copies in _rewrites(lesson):
        assert _inputs(lesson, cell), f"the hidden tests hand {cell} no input"
        calls, expected = _replayed(lesson, source, _inputs(lesson, cell))
        for how, texts, found in (("independent", independents, parsed[cell, vid][0]),
                                  ("disguised", copies, parsed[cell, vid][1])):
            for seed, (text, (_, _, code)) in enumerate(zip(texts, found)):
                wrong = _differences(expected, _outcome(lesson, code, calls))
                assert not wrong, f"{how}({vid}, seed {seed}) differs on inputs {wrong}:\n{text}"
                checked += 1
    assert checked == 2 * len(SEEDS) * sum(map(len, learner_code.versions(lesson).values()))


SLOW_CELLS = ("sample_next", "generate")  # their hidden tests take a tenth of a second or more per run


def _sampled(lesson, cell) -> set:
    """The model answer, an alternative and two bugs of ``cell`` (one bug for a slow cell)."""
    entries = learner_code.labelled_versions(lesson)[cell]
    alternatives = [vid for kind, vid, _ in entries if kind == "alternative"]
    bugs = [vid for kind, vid, _ in entries if kind == "bug"]
    if cell in SLOW_CELLS:
        return {"model", *bugs[:1]}
    return {"model", *alternatives[:1], *bugs[:1], *bugs[-1:]}


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_rewrite_gets_the_verdict_of_its_original(lesson):
    for cell, kind, vid, source, independents, copies in _rewrites(lesson):
        if vid not in _sampled(lesson, cell):
            continue
        expected = _verdicts(lesson, source)
        for how, text in (("independent", independents[0]), ("disguised", copies[0])):
            assert _verdicts(lesson, text) == expected, f"{how}({vid}, seed 0):\n{text}"


@pytest.mark.parametrize("lesson", course.lesson_names())
def test_every_version_of_every_lesson_rewritten_gets_the_verdict_of_its_original(lesson):
    """Seed 0 of each version (every seed of every version took 5.5 minutes: replayed once, 18,200 rewrites, no
    difference)."""
    for cell, kind, vid, source, independents, copies in _rewrites(lesson):
        expected = _verdicts(lesson, source)
        for how, texts in (("independent", independents[:1]), ("disguised", copies[:1])):
            for seed, text in enumerate(texts):
                assert _verdicts(lesson, text) == expected, f"{how}({vid}, seed {seed}):\n{text}"


# ============================================================================================= rewrites that differ

@pytest.mark.parametrize("lesson", LESSONS)
def test_independent_rewrites_differ_in_structure(lesson):
    """Over 20 seeds, at least 5 different programs once comments and layout are stripped (``ast.dump``: the
    parentheses a copier adds do not count either)."""
    counts = {key: len({structure for _, structure, _ in independents})
              for key, (independents, _) in _parsed(lesson).items()}
    few = {key: n for key, n in counts.items() if n < 5}
    assert not few, f"fewer than 5 distinct rewrites: {few} (mean {np.mean(list(counts.values())):.1f})"


@pytest.mark.parametrize("lesson", LESSONS)
def test_disguised_copies_differ_in_text_and_names(lesson):
    parsed = _parsed(lesson)
    for cell, kind, vid, source, independents, copies in _rewrites(lesson):
        tree = ast.parse(source)
        renamable = any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in {
            a.arg for a in ast.walk(f.args) if isinstance(a, ast.arg)}
            for f in tree.body if isinstance(f, ast.FunctionDef) for n in ast.walk(f))
        for seed, (text, (_, names, _)) in enumerate(zip(copies, parsed[cell, vid][1])):
            assert text != source, (vid, seed)
            if renamable:  # a local variable: renamed
                assert names != _names(tree), f"disguised({vid}, seed {seed}) renames nothing:\n{text}"
        assert len(set(copies)) >= len(SEEDS) // 2, vid


@pytest.mark.parametrize("lesson", sorted(set(course.lesson_names()) - set(LESSONS)))
def test_the_other_lessons_rewrites_parse_define_and_differ(lesson):
    versions = [(vid, source) for entries in learner_code.labelled_versions(lesson).values()
                for _, vid, source in entries]
    for vid, source in versions[::3]:
        wanted = _functions(source)
        independents = [learner_code.independent(source, seed) for seed in SEEDS[:5]]
        copies = [learner_code.disguised(source, seed) for seed in SEEDS[:5]]
        for text in (*independents, *copies):
            assert _functions(text) == wanted, (vid, text)
            compile(text, f"<{vid}>", "exec")
        assert all(t != source for t in copies), vid


# ============================================================================================= the checks can fail

def _run(source, *args):
    namespace = {"np": np}
    exec(compile(source, "<test>", "exec"), namespace)
    return namespace["f"](*args)


def test_the_replay_catches_a_rewrite_that_changes_a_result():
    source = learner_code.code_cells("01_warmup")["softmax"]
    calls = _inputs("01_warmup", "softmax")
    expected = _outcome("01_warmup", source, calls)
    wrong = source.replace("np.sum(e, axis=axis, keepdims=True)", "np.sum(e, axis=axis, keepdims=True) * (1 + 1e-9)")
    assert wrong != source and _differences(expected, _outcome("01_warmup", wrong, calls))
    float32 = source.replace("e = np.exp(x - row_max)", "e = np.exp(x - row_max).astype(np.float64)")
    assert _differences(expected, _outcome("01_warmup", float32, calls))  # float32 in, float64 out: a dtype change


def test_statements_that_draw_from_a_generator_keep_their_order():
    source = ("def f(rng, x):\n    a = rng.normal(size=3)\n    b = rng.normal(size=3)\n    c = x * 2\n"
              "    d = np.sum(x) + np.max(x)\n    e = a * b + c + d\n    return e, a\n")
    x = np.arange(3.0)
    expected = _run(source, np.random.default_rng(0), x)
    swapped = 0
    for seed in range(40):
        for text in (learner_code.independent(source, seed), learner_code.disguised(source, seed)):
            got = _run(text, np.random.default_rng(0), x)
            assert _same(expected, got), text
        text = learner_code.disguised(source, seed)
        order = [ast.unparse(s.value) for s in ast.parse(text).body[0].body if isinstance(s, ast.Assign)]
        assert order[:2] == ["rng.normal(size=3)"] * 2, text
        swapped += order[2] == "np.sum(x) + np.max(x)"
    assert swapped  # the two statements that depend on nothing do move


def test_an_array_updated_in_place_stays_updated_in_place():
    """``acc += x`` on a float32 array keeps float32 (``acc = acc + x`` would not), and changes the caller's array."""
    source = ("def f(acc, x):\n    total = 0\n    for i in range(3):\n        acc += x\n        total = total + i\n"
              "    return acc, total\n")
    augmented = 0
    for seed in range(30):
        text = learner_code.independent(source, seed)
        acc = np.zeros(3, np.float32)
        got, total = _run(text, acc, np.ones(3))
        assert got is acc and got.dtype == np.float32 and total == 3, text
        assert "+= x" in text.replace("+=x", "+= x"), text
        augmented += "total += i" in text or "total+=i" in text
    assert augmented  # a Python number's ``total = total + i`` does become ``total += i``


def test_a_temporary_is_never_moved_past_a_call_that_changes_things():
    source = ("def f(cache, x):\n    n = len(cache)\n    y = kv_cache_append(cache, x) + len(cache)\n"
              "    return y, n\n")
    for seed in range(30):
        text = learner_code.independent(source, seed)
        namespace = {"np": np, "kv_cache_append": lambda c, x: c.append(x) or len(c)}
        exec(compile(text, "<test>", "exec"), namespace)
        assert namespace["f"]([], 1) == (2, 0), text
