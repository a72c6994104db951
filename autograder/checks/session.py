"""Guard the grading kernel against a submission that tampers with it.

During ``nbgrader autograde`` the learner's cells and the hidden tests share one Python process, and the
learner's cells run first. Each lesson's first cell is a locked, zero-point test cell whose hidden part calls
``start()`` *before any learner code runs*; it records the genuine numpy functions, the IPython methods that
report errors, and which grading modules are loaded. Every hidden test then calls ``verify(namespace)``, which
raises ``Tampered`` (an ``AssertionError``: the test scores 0) when:

* a numpy function or module attribute the checks rely on was rebound (``numpy.allclose = ...``);
* IPython's error reporting was replaced (a failing test must not look like a passing one);
* the notebook imported the course's reference or hidden checks, or holds an object taken from them.

Hidden test cells reach their checks only through ``run()``, which verifies first and unloads the reference
afterwards, so it is not importable from ``sys.modules`` by learner cells that run later.
"""

from __future__ import annotations

import sys
import types

import numpy as _np

_WATCHED_NUMPY = (
    "allclose", "isclose", "array_equal", "asarray", "array", "max", "sum", "exp", "where", "isfinite",
    "swapaxes", "matmul", "sqrt", "divide", "zeros_like", "errstate", "random", "testing", "ndarray",
)
_WATCHED_IPYTHON = ("showtraceback", "_showtraceback", "showsyntaxerror", "run_cell", "run_code",
                    "run_cell_async", "set_custom_exc")
_OWN_MODULES = ("autograder", "autograder.checks", "autograder.checks.session")

_baseline = None


class Tampered(AssertionError):
    """The notebook's own code changed the grading machinery; the message says what to remove."""


def _ipython():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _ipython_methods(ip):
    if ip is None:
        return {}
    return {name: getattr(ip, name, None) for name in _WATCHED_IPYTHON}


def start():
    """Record the genuine state of the kernel. Called by each lesson's setup cell, before learner code."""
    global _baseline
    _baseline = {
        "numpy": {name: getattr(_np, name, None) for name in _WATCHED_NUMPY},
        "testing": dict(vars(_np.testing)),
        "ipython": _ipython_methods(_ipython()),
        "modules": {m for m in sys.modules if m.startswith("autograder")},
    }


def _from_grading_package(obj) -> bool:
    if isinstance(obj, types.ModuleType):
        return obj.__name__.startswith("autograder")
    mod = getattr(obj, "__module__", None)
    if isinstance(mod, str) and mod.startswith("autograder"):
        return True
    code = getattr(obj, "__code__", None)
    if code is not None and "/autograder/" in code.co_filename.replace("\\", "/"):
        return True
    return False


def _borrowed(namespace) -> list:
    """Names in the learner's namespace that hold (or close over) something from the grading package."""
    found = []
    for name, value in list(namespace.items()):
        if name.startswith("__") or value is judged_by_hidden_tests:  # placed there by ``run`` itself
            continue
        suspects = [value]
        suspects += [c.cell_contents for c in (getattr(value, "__closure__", None) or ()) if _has_contents(c)]
        suspects += list(getattr(value, "__defaults__", None) or ())
        if any(_from_grading_package(s) for s in suspects):
            found.append(name)
    return found


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def verify(namespace=None):
    """Raise ``Tampered`` if the kernel can no longer be trusted to grade. ``namespace``: the notebook's globals."""
    problems = []
    if _baseline is None:
        problems.append("the lesson's first (setup) cell did not run before the tests; keep it and run it first")
    else:
        for name, original in _baseline["numpy"].items():
            if getattr(_np, name, None) is not original:
                problems.append(f"numpy.{name} was reassigned; remove the line that assigns it")
        for name, original in _baseline["testing"].items():
            if not name.startswith("_") and getattr(_np.testing, name, None) is not original:
                problems.append(f"numpy.testing.{name} was reassigned; remove the line that assigns it")
        ip = _ipython()
        for name, original in _baseline["ipython"].items():
            if getattr(ip, name, None) != original:
                problems.append(f"IPython's {name} was replaced; the grader needs errors to be reported")
        if ip is not None and getattr(ip, "custom_exceptions", ()):
            problems.append("a custom IPython exception handler was installed with set_custom_exc; remove it")
        extra = sorted(m for m in sys.modules if m.startswith("autograder") and m not in _baseline["modules"])
        if extra:
            problems.append("the notebook imported the course's grading code (" + ", ".join(extra)
                            + "); submit your own implementation")
    if namespace is not None:
        borrowed = _borrowed(namespace)
        if borrowed:
            problems.append("these names hold code from the course's grading package: " + ", ".join(borrowed)
                            + "; submit your own implementation")
    if problems:
        raise Tampered("Grading stopped, this notebook changed the grader: " + "; ".join(problems) + ".")


def judged_by_hidden_tests(*args, **kwargs):
    """Stands in for a visible self-check once the hidden tests of its cell have passed (grading only)."""
    print("\u2714 passed the hidden tests of this cell")


def run(lesson: str, test: str, *learner_functions, visible_check=None, **learner_helpers):
    """Run the hidden test ``test`` of ``lesson`` (e.g. ``"lesson01"``) on the learner's functions.

    Hidden test cells call this. It checks the kernel first, then imports the checks and the reference, and
    removes them from ``sys.modules`` again afterwards, so learner cells that run later cannot import or find
    them there.

    ``visible_check``: the name of the self-check that follows in the same cell. When the hidden test passes,
    that name is bound to ``judged_by_hidden_tests`` in the notebook's namespace: the hidden test, which grades
    with reference helpers bound, is the judge, so a bug in an earlier function (which the visible check, run
    on the learner's own helpers, would also see) does not cost this cell's points a second time.
    """
    import importlib

    namespace = {}
    for fn in (*learner_functions, *learner_helpers.values()):
        namespace.update(getattr(fn, "__globals__", {}))
    verify(namespace)
    before = set(sys.modules)
    uncatalogued = None
    try:
        module = importlib.import_module(f"autograder.checks.{lesson}")
        record = importlib.import_module("autograder.checks.record")
        arguments = [record.Recorder(a) if callable(a) else a for a in learner_functions]
        keywords = {k: record.Recorder(v) if callable(v) else v for k, v in learner_helpers.items()}
        getattr(module, test)(*arguments, **keywords)
        record.emit(test, record.encode(arguments, keywords))  # re-checked outside this kernel (autograder.verify)
        ip = _ipython()
        if visible_check and ip is not None:
            ip.user_ns[visible_check] = judged_by_hidden_tests
    except AssertionError as exc:
        if not getattr(exc, "uncatalogued", False):
            raise
        uncatalogued = exc
    finally:
        for name in set(sys.modules) - before:
            if name.startswith("autograder"):
                del sys.modules[name]
                parent, _, child = name.rpartition(".")
                if parent in sys.modules and getattr(sys.modules[parent], child, None) is not None:
                    delattr(sys.modules[parent], child)
    if uncatalogued is not None:  # the grading modules are unloaded again before the learner's check runs
        raise type(uncatalogued)(f"{_self_check_verdict()}\nThe hidden tests found: {uncatalogued}") from None


def _self_check_verdict() -> str:
    """What the visible self-check of the running cell (the lines after its hidden tests) says, in one line."""
    import contextlib
    import io

    ip = _ipython()
    cell = ""
    try:
        cell = ip.history_manager.input_hist_raw[-1]
    except (AttributeError, IndexError):
        pass
    visible = cell.split("### END HIDDEN TESTS", 1)[-1] if "### END HIDDEN TESTS" in cell else ""
    if ip is None or not visible.strip():
        return "Your self-check was not run."
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(visible, "self-check", "exec"), ip.user_ns)  # noqa: S102 - the notebook's own lines
    except Exception as exc:  # noqa: BLE001 - whatever the learner's check reports is the verdict
        said = str(exc) if isinstance(exc, AssertionError) else f"{type(exc).__name__}: {exc}"
        return f"Your self-check says: {_short(said)}"
    said = printed.getvalue().strip()
    return f"Your self-check passes{' (' + _short(said) + ')' if said else ''}, but it tries fewer inputs."


def _short(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
