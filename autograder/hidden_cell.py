"""What a hidden test cell runs in the learner's kernel: ``run("<test>")``. It holds no answer. It is one module,
longer than most, because it is all the kernel side of the hidden tests may import: the values on the wire, the
protocol and the local mode.

During grading (the kernel's environment says ``MHA_HIDDEN_TESTS=grader``) the hidden test itself runs in the
grader's own process (``autograder/grading/hidden_tests.py``), where the reference, the hidden inputs and the bug
catalog are; none of them is in the kernel, which can read only this module and the learner's helper module. The
two talk over the kernel's stdin channel, one message at a time, each a line of JSON (``encode``/``decode``):

    kernel  -> grader   {"op": "ready", "test": name, "values": {name: value or {"function": true}}}
    grader  -> kernel   {"op": "call", "name": f, "args": [...], "kwargs": {...}, "bind": [helpers], ...}
    kernel  -> grader   {"op": "helper", "name": h, "args": [...], "kwargs": {...}}   (a bound helper was called)
    grader  -> kernel   {"op": "helper_result", ...}
    kernel  -> grader   {"op": "result", "value": ..., "changed": {arg index: new value}} or {"op": "raised", ...}
    grader  -> kernel   {"op": "done", "passed": bool}

The kernel only runs the learner's functions on the inputs it is sent and returns what they return; while a
function runs, the helpers the grader names (``bind``) are replaced, in the learner's namespace, by stand-ins that
ask the grader for the reference result, so an earlier bug never costs points twice. The grader decides the
score and writes it into the cell itself: nothing the kernel says can turn a failed test into a passed one.

Anywhere else (an instructor's notebook, nbval), ``run`` imports the hidden tests and runs them here, directly.
"""

from __future__ import annotations

import base64
import builtins
import io
import json
import os
import sys
import traceback

import numpy as np

PASSED = "\u2714 passed the hidden tests of this cell"
_NDARRAY = type(np.empty(0))


# ------------------------------------------------------------------ values on the wire (both sides use these)

def encode_value(value):
    """A JSON-able form of a value: arrays as .npy bytes (never pickled), plain scalars, None, tuples, lists."""
    if type(value) is _NDARRAY and value.dtype.kind in "biufcUS":
        buffer = io.BytesIO()
        np.save(buffer, value, allow_pickle=False)
        return {"array": base64.b64encode(buffer.getvalue()).decode("ascii")}
    if isinstance(value, (np.integer, np.floating, np.bool_)) and type(value).__module__ == "numpy":
        return {"numpy_scalar": encode_value(np.asarray(value))}
    if type(value) is np.random.Generator:  # its bit generator's state: the same draws on both sides
        bits = value.bit_generator
        return {"generator": {"bit_generator": type(bits).__name__, "state": _plain(bits.state)}}
    if value is None or type(value) in (bool, int, float, str):
        return {"plain": value} if not (type(value) is float and value != value) else {"nan": True}
    if type(value) in (tuple, list):
        return {type(value).__name__: [encode_value(v) for v in value]}
    if type(value) is dict and all(type(k) is str for k in value):
        return {"dict": {k: encode_value(v) for k, v in value.items()}}
    return {"unrecordable": type(value).__name__}


def _plain(state):
    """A bit generator's state with numpy integers and arrays as plain Python values (JSON-able)."""
    if isinstance(state, dict):
        return {k: _plain(v) for k, v in state.items()}
    if type(state) is _NDARRAY:
        return {"uint_array": state.tolist(), "dtype": str(state.dtype)}
    return int(state) if isinstance(state, np.integer) else state


def _unplain(state):
    if isinstance(state, dict) and set(state) == {"uint_array", "dtype"}:
        return np.array(state["uint_array"], dtype=np.dtype(state["dtype"]))
    if isinstance(state, dict):
        return {k: _unplain(v) for k, v in state.items()}
    return state


class Unrecordable:
    """Stands in for a value that cannot cross the channel (an object of the learner's own class, say): it never
    equals a reference result."""

    def __init__(self, kind):
        self.kind = kind

    def __repr__(self):
        return f"<{self.kind} object>"


def decode_value(data):
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError("malformed value")
    (kind, payload), = data.items()
    if kind == "array":
        return np.load(io.BytesIO(base64.b64decode(payload, validate=True)), allow_pickle=False)
    if kind == "numpy_scalar":
        return decode_value(payload)[()]
    if kind == "plain":
        if payload is not None and type(payload) not in (bool, int, float, str):
            raise ValueError("malformed value")
        return payload
    if kind == "nan":
        return float("nan")
    if kind in ("tuple", "list"):
        items = [decode_value(v) for v in payload]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {str(k): decode_value(v) for k, v in payload.items()}
    if kind == "generator":
        bits = payload["bit_generator"]
        if bits not in ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937"):
            raise ValueError(f"unknown bit generator {bits!r}")
        generator = np.random.Generator(getattr(np.random, bits)())
        generator.bit_generator.state = _unplain(payload["state"])
        return generator
    if kind == "unrecordable":
        return Unrecordable(str(payload))
    raise ValueError(f"unknown kind of value {kind!r}")


def encode(message: dict) -> str:
    return json.dumps(message, separators=(",", ":"))


def decode(text: str) -> dict:
    message = json.loads(text)
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        raise ValueError("malformed message")
    return message


# ------------------------------------------------------------------ the kernel side

def _namespace():
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else sys.modules["__main__"].__dict__


def _ask(message: dict) -> dict:
    return decode(builtins.input(encode(message)))


def learner_frames(tb, limit: int = 6) -> list:
    """The frames of a traceback that run the learner's notebook cells, as lines "cell In[3], line 6, in f: src".

    Frames of numpy, of this module or of any other file are left out: the learner can act on their own lines only.
    """
    import linecache

    try:
        from IPython import get_ipython

        cells = dict(getattr(getattr(get_ipython(), "compile", None), "_filename_map", None) or {})
    except ImportError:
        cells = {}
    lines = []
    for frame in traceback.extract_tb(tb):
        where = cells.get(frame.filename)
        if where is None and not (frame.filename.startswith("<ipython-input-") or "/ipykernel_" in frame.filename):
            continue
        source = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
        label = f"cell In[{where}]" if where is not None else "your cell"
        lines.append(f"  {label}, line {frame.lineno}, in {frame.name}: {source}")
    return lines[-limit:]


def _learner_traceback(exc) -> list:
    return learner_frames(exc.__traceback__) + [f"{type(exc).__name__}: {exc}"]


class _Helper:
    """Stands in for a learner's helper while a graded function runs: the grader answers with the reference."""

    def __init__(self, name):
        self.__name__ = self.name = name

    def __call__(self, *args, **kwargs):
        reply = _ask({"op": "helper", "name": self.name, "args": [encode_value(a) for a in args],
                      "kwargs": {k: encode_value(v) for k, v in kwargs.items()}})
        while reply.get("op") == "call":  # the grader's helper is itself one of the learner's functions
            reply = _ask(_call(_namespace(), reply))
        if reply.get("op") == "helper_raised":
            raise _exception(reply.get("type", "RuntimeError"), reply.get("message", ""))
        return decode_value(reply["value"])


def _exception(type_name: str, message: str) -> Exception:
    exc_type = getattr(builtins, type_name, None)
    if not (isinstance(exc_type, type) and issubclass(exc_type, Exception)):
        exc_type = type(type_name, (Exception,), {})
    return exc_type(message)


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
        for name in message.get("bind", []):
            saved[name] = g.get(name, missing)
            g[name] = _Helper(name)
    peak = None
    try:
        if not callable(fn):
            raise NameError(f"name {message['name']!r} is not defined as a function")
        if message.get("measure_memory"):
            import _tracemalloc

            was_tracing = _tracemalloc.is_tracing()
            if not was_tracing:
                _tracemalloc.start()
            _tracemalloc.reset_peak()
            base = _tracemalloc.get_traced_memory()[0]
            try:
                result = fn(*args, **kwargs)
            finally:
                peak = _tracemalloc.get_traced_memory()[1] - base if _tracemalloc.is_tracing() else -1
                if not was_tracing:
                    _tracemalloc.stop()
        else:
            result = fn(*args, **kwargs)
    except Exception as exc:  # the learner's error: the grader reports it with the learner's own frames
        return {"op": "raised", "type": type(exc).__name__, "message": str(exc)[:2000],
                "traceback": _learner_traceback(exc)}
    finally:
        for name, value in saved.items():
            if value is missing:
                g.pop(name, None)
            else:
                g[name] = value
    changed = {str(i): encode_value(a) for i, (a, b) in enumerate(zip(args, before)) if b is not None and (
        (type(a) is _NDARRAY and (a.shape != b.shape or a.tobytes() != b.tobytes()))
        or (type(a) is np.random.Generator and encode_value(a) != b))}
    return {"op": "result", "value": encode_value(result), "changed": changed, "peak": peak}


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
        return "Your self-check was not run."
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
