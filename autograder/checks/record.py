"""Record what a learner's functions returned during a hidden test, so the grader can re-check it outside the
learner's kernel (``autograder.verify``).

Inside the kernel, ``session.run`` wraps every learner function in a ``Recorder``; after the test it encodes each
call's results (and any array argument the call changed in place) as an ``.npz`` archive and displays it as an
output of the test cell with the media type ``MIMETYPE``. Outputs travel from the kernel to the grader over
Jupyter's own channel, so this works whatever the kernel may write to disk (a sandboxed kernel writes nowhere the
grader reads). The archive holds plain numeric and text arrays only and is read back with ``allow_pickle=False``:
a hostile record cannot run code in the grader. The grader removes these outputs before anyone sees the notebook.

Outside the kernel, ``replay_arguments`` turns a record back into stand-ins that return the recorded results,
call by call, and the very same hidden-test function grades them against the reference. A submission that
tampered with the in-kernel checks gains nothing: to pass the re-check, its functions must have returned the
reference's results on inputs drawn with a seed it could not know in advance.
"""

from __future__ import annotations

import base64
import builtins
import io

import numpy as np

MIMETYPE = "application/vnd.mha-course.hidden-test-record+json"
_SCALAR_KINDS = {bool: "bool", int: "int", float: "float", str: "str"}


class Recorder:
    """Calls the learner's function and remembers what each call returned."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = []  # [(outputs, is_tuple, [args after the call])]
        self.__name__ = getattr(fn, "__name__", "function")

    @property
    def __globals__(self):  # so ``runner.bound`` binds helpers in the learner's namespace
        return getattr(self.fn, "__globals__", None)

    def __call__(self, *args, **kwargs):
        before = [a.tobytes() if type(a) is np.ndarray else None for a in args]
        try:
            result = self.fn(*args, **kwargs)
        except Exception as exc:  # a test may expect an error (e.g. ValueError for a bad shape)
            self.calls.append(([_Raised(type(exc).__name__, str(exc))], False, [None] * len(args)))
            raise
        is_tuple = isinstance(result, tuple)
        outputs = list(result) if is_tuple else [result]
        # keep an argument only if the call changed it in place (rare, and what the re-check must see)
        after = [np.array(a, copy=True) if b is not None and a.tobytes() != b else None for a, b in zip(args, before)]
        self.calls.append((outputs, is_tuple, after))
        return result


class _Raised:
    """A learner call that raised: the exception's type name and message."""

    def __init__(self, name, message):
        self.name, self.message = name, message


def _encode(store: dict, key: str, value):
    if isinstance(value, _Raised):
        store[key] = np.array([value.name, value.message[:2000]])
        store[key + ":kind"] = np.array("raised")
    elif type(value) is np.ndarray and value.dtype.kind in "biufcUS":
        store[key] = value
        store[key + ":kind"] = np.array("array")
    elif type(value) in _SCALAR_KINDS:
        store[key] = np.array(value)
        store[key + ":kind"] = np.array(_SCALAR_KINDS[type(value)])
    elif isinstance(value, (np.integer, np.floating, np.bool_)):
        store[key] = np.array(value)
        store[key + ":kind"] = np.array("numpy-scalar")
    else:  # anything else cannot be re-checked, and so cannot pass
        store[key + ":kind"] = np.array("unrecordable:" + type(value).__name__)


def encode(arguments, keywords=None) -> bytes:
    """The record of one hidden test as ``.npz`` bytes: each argument's value or, for a Recorder, its calls.

    Positional arguments are stored under ``p0``, ``p1``, ...; keyword arguments under ``k:<name>``.
    """
    store = {}
    slots = [(f"p{p}", arg) for p, arg in enumerate(arguments)]
    slots += [(f"k:{name}", arg) for name, arg in (keywords or {}).items()]
    for slot, arg in slots:
        if isinstance(arg, Recorder):
            store[f"{slot}:calls"] = np.array(len(arg.calls))
            for i, (outputs, is_tuple, after) in enumerate(arg.calls):
                store[f"{slot}c{i}:n"] = np.array(len(outputs) if is_tuple else -1)
                for j, out in enumerate(outputs):
                    _encode(store, f"{slot}c{i}o{j}", out)
                for k, a in enumerate(after):
                    if a is not None:
                        store[f"{slot}c{i}a{k}"] = a
        else:
            _encode(store, f"{slot}:value", arg)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **store)
    return buffer.getvalue()


def emit(test: str, blob: bytes):
    """Display the record as an output of the running cell, where the grader will find it."""
    from IPython.display import display

    display({MIMETYPE: {"test": test, "npz": base64.b64encode(blob).decode("ascii")}}, raw=True)


def from_outputs(outputs, test: str):
    """The ``.npz`` bytes of the last record of ``test`` among a cell's outputs, or None."""
    found = None
    for out in outputs:
        data = out.get("data", {}).get(MIMETYPE) if out.get("output_type") == "display_data" else None
        if isinstance(data, dict) and data.get("test") == test and isinstance(data.get("npz"), str):
            found = data["npz"]
    return base64.b64decode(found, validate=True) if found is not None else None


def is_record(output) -> bool:
    return output.get("output_type") == "display_data" and MIMETYPE in output.get("data", {})


def _decode(data, key):
    kind = str(data[key + ":kind"]) if key + ":kind" in data else "missing"
    if kind == "array":
        return data[key]
    if kind in ("bool", "int", "float", "str"):
        return {"bool": bool, "int": int, "float": float, "str": str}[kind](data[key][()])
    if kind == "numpy-scalar":
        return data[key][()]
    return _Unrecordable(kind)


class _Unrecordable:
    """Stands in for a result that could not be recorded; it never equals a reference result."""

    def __init__(self, kind):
        self.kind = kind

    def __repr__(self):
        return f"<{self.kind}>"


class Replay:
    """Returns the recorded results of one learner function, call by call, and re-applies in-place edits."""

    def __init__(self, data, slot, name):
        self.data, self.slot, self.i = data, slot, 0
        self.__name__ = name
        self.n_calls = int(data[f"{slot}:calls"])

    def __call__(self, *args, **kwargs):
        from autograder.checks.runner import WrongAnswer

        if self.i >= self.n_calls:
            raise WrongAnswer(f"{self.__name__} was called fewer times during the test than the test needs: "
                              "the test did not run as written")
        d, key = self.data, f"{self.slot}c{self.i}"
        for k, a in enumerate(args):
            if type(a) is np.ndarray and f"{key}a{k}" in d and d[f"{key}a{k}"].shape == a.shape:
                a[...] = d[f"{key}a{k}"]
        n = int(d[f"{key}:n"])
        outputs = [_decode(d, f"{key}o{j}") for j in range(max(n, 1))]
        self.i += 1
        if n < 0 and str(d.get(f"{key}o0:kind", "")) == "raised":
            name, message = (str(v) for v in d[f"{key}o0"])
            exc_type = getattr(builtins, name, None)
            if not (isinstance(exc_type, type) and issubclass(exc_type, Exception)):
                exc_type = RuntimeError
            raise exc_type(message)
        return tuple(outputs) if n >= 0 else outputs[0]


def replay_arguments(blob: bytes, names, keywords=()) -> tuple:
    """Stand-ins for a hidden test's positional arguments ``names`` and keyword arguments ``keywords``, read
    from the record ``blob``: ``(args, kwargs)``."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
        data = {k: npz[k] for k in npz.files}

    def stand_in(slot, name):
        if f"{slot}:calls" in data:
            return Replay(data, slot, name)
        return _decode(data, f"{slot}:value")

    args = [stand_in(f"p{p}", name) for p, name in enumerate(names)]
    kwargs = {name: stand_in(f"k:{name}", name) for name in keywords}
    return args, kwargs
