"""What a hidden test cell runs in the learner's kernel: ``run("<test>")``. It holds no answer. It is one module,
longer than most, because it is all the kernel side of the hidden tests may import: the values on the wire, the
protocol and the local mode.

During grading (the kernel's environment says ``MHA_HIDDEN_TESTS=grader``) the hidden test itself runs in the
grader's own process (``autograder/grading/pipeline/hidden_tests.py``), where the reference, the hidden inputs and the bug
catalog are; none of them is in the kernel, which can read only this module and the learner's helper module. The
two talk over the kernel's stdin channel, one message at a time, each a line of JSON (``encode``/``decode``):

    kernel  -> grader   {"op": "ready", "test": name, "values": {name: value or {"function": true}}}
    grader  -> kernel   {"op": "call", "name": f, "args": [...], "kwargs": {...}, "stand_ins": [names]}
                        (and "quiet": true in the grader's second run of a test, for a signature: no print shows)
    kernel  -> grader   {"op": "stand_in", "name": h, "args": [...], "kwargs": {...}}   (a stand-in was called)
    grader  -> kernel   {"op": "stand_in_result", ...}
    kernel  -> grader   {"op": "result", "value": ..., "changed": {arg index: new value}} or {"op": "raised", ...}
    grader  -> kernel   {"op": "done", "passed": bool}

The kernel only runs the learner's functions on the inputs it is sent and returns what they return; while a
function runs, the functions the grader names (``stand_ins``) are replaced, in the learner's namespace, by stand-ins that
ask the grader for the reference result, so an earlier bug never costs points twice (or, for a function whose work
the graded one must do itself, raise the grader's refusal; the grader remembers it). Nothing is measured here:
the kernel's own word about its memory would be the notebook's to rewrite. The grader decides the
score and writes it into the cell itself: nothing the kernel says can turn a failed test into a passed one.

Anywhere else (an instructor's notebook, nbval), ``run`` imports the hidden tests and runs them here, directly.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import sys
import warnings

import numpy as np

from autograder.kernel.protocol import (_NDARRAY, MAX_MESSAGE, PASSED, decode, decode_value, encode, encode_value,
                                        exception_named, learner_frames)

# ------------------------------------------------------------------ the kernel side

def _namespace():
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else sys.modules["__main__"].__dict__


def _ask(message: dict) -> dict:
    return decode(builtins.input(encode(message)))


def _learner_traceback(exc) -> list:
    return learner_frames(exc.__traceback__) + [f"{type(exc).__name__}: {exc}"]


class _StandIn:
    """Stands in for a learner's helper while a graded function runs: the grader answers with the reference."""

    def __init__(self, name):
        self.__name__ = self.name = name

    def __call__(self, *args, **kwargs):
        request = encode({"op": "stand_in", "name": self.name, "args": [encode_value(a) for a in args],
                          "kwargs": {k: encode_value(v) for k, v in kwargs.items()}})
        if len(request) > MAX_MESSAGE:  # the grader would never read it, and this kernel would wait for a reply
            raise MemoryError(f"{self.name} was called with {len(request) / 2**20:.0f} MB of arguments (encoded); "
                              f"while a hidden test runs, the grader answers calls to {self.name} and takes at most "
                              f"{MAX_MESSAGE >> 20} MB per call")
        reply = decode(builtins.input(request))
        while reply.get("op") == "call":  # the grader's helper is itself one of the learner's functions
            reply = _ask(_call(_namespace(), reply))
        if reply.get("op") == "stand_in_raised":
            raise exception_named(reply.get("type", "RuntimeError"), reply.get("message", ""))
        for index, data in (reply.get("changed") or {}).items():  # a generator the grader's helper drew from
            i, new = int(index), decode_value(data)
            if i < len(args) and type(args[i]) is type(new) is np.random.Generator:
                args[i].bit_generator.state = new.bit_generator.state
        return decode_value(reply["value"])


def _call(namespace: dict, message: dict) -> dict:
    """Run one learner function on the grader's inputs, with the named helpers bound; report what it did."""
    fn = namespace.get(message["name"])
    args = [decode_value(a) for a in message.get("args", [])]
    kwargs = {k: decode_value(v) for k, v in message.get("kwargs", {}).items()}
    before = [a.copy() if type(a) is _NDARRAY else
              encode_value(a) if type(a) is np.random.Generator else None for a in args]
    g = getattr(fn, "__globals__", None)
    missing = object()
    saved = {}
    if g is not None:
        for name in message.get("stand_ins", []):
            saved[name] = g.get(name, missing)
            g[name] = _StandIn(name)
    try:
        if not callable(fn):
            raise NameError(f"name {message['name']!r} is not defined as a function", name=message["name"])
        # a call of the grader's second run, for the wrong numbers' signature, prints nothing: the cell shows one run
        quiet = contextlib.redirect_stdout(io.StringIO()) if message.get("quiet") else contextlib.nullcontext()
        with quiet, np.errstate(all="ignore"), warnings.catch_warnings():
            # the grader's inputs (a NaN gradient, an overflow the test asks for) are no warning the learner's cell
            # should print: a cell's stderr makes nbgrader score it 0, as it does in the grader's own runs
            warnings.simplefilter("ignore")
            result = fn(*args, **kwargs)
    except Exception as exc:  # the learner's error: the grader reports it with the learner's own frames
        undefined = getattr(exc, "name", None) if isinstance(exc, NameError) else None
        return {"op": "raised", "type": type(exc).__name__, "message": str(exc)[:2000],
                "traceback": _learner_traceback(exc), "name": undefined if isinstance(undefined, str) else None}
    finally:
        for name, value in saved.items():
            if g is None:
                break
            if value is missing:
                g.pop(name, None)
            else:
                g[name] = value
    changed = {str(i): encode_value(a) for i, (a, b) in enumerate(zip(args, before)) if b is not None and (
        (type(a) is _NDARRAY and (a.shape != b.shape or a.tobytes() != b.tobytes()))
        or (type(a) is np.random.Generator and encode_value(a) != b))}
    return {"op": "result", "value": encode_value(result), "changed": changed}


def _passed(namespace: dict, visible_check) -> None:
    """The hidden test passed: the visible self-check after it in the cell (which runs the learner's own helpers)
    gives way, so that a bug elsewhere does not cost this cell's points a second time."""
    if visible_check:
        namespace[visible_check] = lambda *args, **kwargs: None
    print(PASSED)


def run(test: str) -> None:
    """Run the hidden test of this cell: through the grader when graded, else here (instructor, nbval)."""
    namespace = _namespace()
    if os.environ.get("MHA_HIDDEN_TESTS") != "grader":
        # the one import of the kernel package from a layer above (declared in tests/unit/proofs/test_layout.py): outside
        # grading the whole course is importable and the test runs here; in the sandbox this line is never reached
        from autograder.checks import registry

        return _passed(namespace, registry.run_here(test, namespace).visible_check)
    names = _ask({"op": "names", "test": test})["names"]
    values = {n: {"function": True} if callable(namespace.get(n)) else encode_value(namespace.get(n, _Absent()))
              for n in names}
    message = _ask({"op": "ready", "test": test, "values": values})
    while message["op"] == "call":
        message = _ask(_call(namespace, message))
    if message["op"] == "done" and message.get("passed"):
        return _passed(namespace, message.get("visible_check"))
    if message.get("self_check"):  # no known bug explains the failure: what does the learner's own check say?
        _ask({"op": "self_check", "said": _self_check_verdict(namespace)})
    raise HiddenTestFailed("the hidden tests of this cell did not pass")


class HiddenTestFailed(AssertionError):
    """Ends the cell (its visible self-check does not run); the grader writes the reason into the cell."""


def _self_check_verdict(namespace: dict) -> str:
    """What the visible self-check of the running cell (the lines after its hidden part) says, in one line."""
    import contextlib

    try:
        from IPython import get_ipython

        cell = get_ipython().history_manager.input_hist_raw[-1]
    except (AttributeError, IndexError):
        cell = ""
    visible = cell.split("### END HIDDEN TESTS", 1)[-1] if "### END HIDDEN TESTS" in cell else ""
    if not any(line.strip() and not line.lstrip().startswith("#") for line in visible.splitlines()):
        return ("This cell has no self-check of its own: the one with your function, above, tries fewer inputs than "
                "the hidden tests.")
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(visible, "self-check", "exec"), namespace)  # noqa: S102 - the notebook's own lines
    except Exception as exc:  # noqa: BLE001 - whatever the learner's check reports is its verdict
        said = str(exc) if isinstance(exc, AssertionError) else f"{type(exc).__name__}: {exc}"
        return f"Your self-check says: {_short(said)}"
    said = printed.getvalue().strip()
    return f"Your self-check passes{' (' + _short(said) + ')' if said else ''}, but it tries fewer inputs."


def _short(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


class _Absent:
    """A name the notebook does not define."""
