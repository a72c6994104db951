"""Synthetic learners' code, for the proof that the similarity report finds copies and spares independent work.

The report fingerprints learners' normalised code (identifiers, literals, comments and whitespace normalised away;
k-grams of tokens winnowed as in MOSS) and lists the pairs of students more alike than the class makes likely. Its
proof needs a class: many independent students, each with a version of every graded function of a lesson, and
copies of a student's work disguised as a copier disguises it.

``versions(lesson)``
    {grade_id: [(kind, source)]} for every answer cell that holds code: the whole cells a learner could hand in, the
    model answer ("model"), each catalogued correct alternative of that cell ("alternative",
    ``autograder/alternatives/``) and each catalogued bug ("bug", ``autograder/bugs/``) of a function the cell
    defines, in the cell the mutation harness puts it in (``answers.fill``). ``labelled_versions`` gives the same
    pool with each entry's catalogue id. A cell without a function (a graded value) has only the model answer and
    its alternatives.
``independent(source, rng)``
    The same cell as another learner writes it: semantics-preserving *structural* rewrites on the AST, each applied
    at random, that a normaliser does not erase, then written out in a style of its own (spacing, blank lines,
    indentation, a few comments):

    * statements: an intermediate result named (``t = g(x)`` before the statement that used ``g(x)``) or a name
      used once inlined; ``a, b = e1, e2`` split or two assignments merged; ``if c: A else: B`` inverted;
      the ``else`` after an early return dropped or added; ``return a if c else b`` as an if statement and back;
      ``n = n + 1`` / ``n += 1`` for Python numbers only (``+=`` changes an array in place and keeps its dtype);
      the docstring dropped;
    * expressions: ``np.f(x, ...)`` / ``x.f(...)`` (sum, max, min, mean, std, var, prod, argmax, argmin, cumsum,
      any, all, reshape, transpose, swapaxes, squeeze, astype) where x is known to be an array; ``a @ b`` /
      ``np.matmul(a, b)``; ``axis`` by keyword or by position; ``x.reshape(a, b)`` / ``x.reshape((a, b))``;
      ``keepdims=True`` / ``np.expand_dims(..., axis)`` / ``[..., None]``; ``x.T`` / ``x.transpose()``;
      ``np.sqrt(x)`` / ``x ** 0.5`` and ``x ** 2`` / ``x * x`` (arrays only: a Python number would become a numpy
      scalar); ``None`` / ``np.newaxis``; ``-np.inf`` / ``float("-inf")``; ``dtype=np.float64`` / ``float`` /
      ``"float64"`` (numpy's own dtype arguments only); ``np.zeros_like(x)`` / ``np.zeros(x.shape,
      dtype=x.dtype)``; ``range(n)`` / ``range(0, n)``; ``{"k": v}`` / ``dict(k=v)``; operands of ``+`` and ``*``
      swapped and comparisons mirrored (``a < b`` / ``b > a``) when both sides are pure and one is a number.

    Every rewrite computes the same operations in the same order on the same operands (``x ** 0.5`` and ``x ** 2``
    are numpy's own fast paths to sqrt and square on an array; on a numpy scalar they agree within an ulp), and
    never moves a call that changes something (a generator's draw, a cache appended to, ``np.put_along_axis``)
    past another expression: results agree bit for bit, or within 1e-12. ``tests/unit/helpers/test_learner_code.py``
    checks it on every catalogued version.
``disguised(source, rng)``
    A copy of ``source`` disguised as a copier does: local variables renamed (never a function's name nor its
    parameters: a test may pass them by keyword), adjacent assignments that do not depend on each other swapped
    (neither reads or changes what the other binds; nothing changed in place, nothing drawn at random), comments
    kept, reworded, deleted or added, blank lines, indentation and spacing changed, redundant parentheses added,
    the docstring kept, reworded, dropped or added.

``rng``: a ``numpy.random.Generator``, a ``random.Random`` or an int seed. ``skeleton(source)``: its tokens without
comments and layout, to compare programs the way a normaliser sees them (before renaming).
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import io
import keyword
import random
import re
import tokenize

import numpy as np

from autograder import alternatives as correct
from autograder import bugs as catalog
from autograder.course import answers

KINDS = ("model", "alternative", "bug")


# ============================================================================================= the catalogued pool

@functools.lru_cache(maxsize=None)
def _model_answers(lesson: str) -> dict:
    return answers.model_answers(lesson)  # parses the lesson's source: a third of a second each time


def code_cells(lesson: str) -> dict:
    """{grade_id: model answer} of the lesson's answer cells that hold code (written answers left out)."""
    found = {}
    for gid, source in _model_answers(lesson).items():
        try:
            ast.parse(source)
        except SyntaxError:  # a written answer (markdown), not code
            continue
        found[gid] = source
    return found


def functions_of(source: str) -> list:
    """The names of the functions ``source`` defines at its top level, in order."""
    return [s.name for s in ast.parse(source).body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _rename_tokens(source: str, old: str, new: str) -> str:
    """``source`` with the identifier ``old`` spelled ``new`` (comments and layout kept)."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        out.append((tok.type, new if tok.type == tokenize.NAME and tok.string == old else tok.string, tok.start,
                    tok.end, tok.line))
    return tokenize.untokenize(out)


def _as_cell(model: str, version: str, function: str) -> str:
    """The whole answer cell a learner hands in whose ``function`` is written as ``version``.

    A cell that defines only ``function`` is replaced whole, as the mutation harness fills a notebook
    (``answers.fill``, ``autograder/proofs/mutation.py``); in a cell that defines more than one function only that
    function's definition is replaced and the model answer's others are kept. A version that defines its one
    function under another name is renamed to ``function``.
    """
    defined = functions_of(version)
    if function not in defined and len(defined) == 1:
        version = _rename_tokens(version, defined[0], function)
    version = version.strip() + "\n"
    if functions_of(model) == [function]:
        return version
    lines = model.splitlines(keepends=True)
    for node in ast.parse(model).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            return "".join(lines[:start]) + version + "".join(lines[node.end_lineno:])
    raise KeyError(f"the model answer does not define {function}")


@functools.lru_cache(maxsize=None)
def _labelled(lesson: str) -> dict:
    model = code_cells(lesson)
    pool = {gid: [("model", "model", source)] for gid, source in model.items()}
    # the cell that defines a function, as answers.fill finds it for the mutation harness (its mapping is local
    # to fill; tests/unit/helpers/test_learner_code.py checks that the two agree)
    cell_of = {}
    for gid, source in model.items():
        for name in functions_of(source):
            cell_of.setdefault(name, gid)
    for alt in correct.of_lesson(lesson):
        if alt.cell in pool:
            pool[alt.cell].append(("alternative", alt.id, alt.source))
    for bug in catalog.CATALOG:
        if bug.lesson == lesson:
            gid = cell_of[bug.function]  # a KeyError: a bug of a function no answer cell defines
            pool[gid].append(("bug", bug.id, _as_cell(model[gid], bug.source, bug.function)))
    return {gid: tuple(entries) for gid, entries in pool.items()}


def labelled_versions(lesson: str) -> dict:
    """{grade_id: [(kind, catalogue id ("model" for the model answer), whole cell source)]}."""
    return {gid: list(entries) for gid, entries in _labelled(lesson).items()}


def versions(lesson: str) -> dict:
    """{grade_id: [(kind, whole cell source)]} for every answer cell of ``lesson`` that holds code: the model
    answer, every correct alternative of that cell and every catalogued bug of a function it defines."""
    return {gid: [(kind, source) for kind, _, source in entries] for gid, entries in _labelled(lesson).items()}


# ============================================================================================= randomness

class _Dice:
    def __init__(self, rng):
        if isinstance(rng, (random.Random, np.random.Generator)):
            self._rng = rng
        else:
            self._rng = np.random.default_rng(rng)

    def random(self) -> float:
        return float(self._rng.random())

    def chance(self, p: float) -> bool:
        return self.random() < p

    def pick(self, seq):
        seq = list(seq)
        return seq[min(int(self.random() * len(seq)), len(seq) - 1)]

    def shuffled(self, seq) -> list:
        seq = list(seq)
        for i in range(len(seq) - 1, 0, -1):
            j = min(int(self.random() * (i + 1)), i)
            seq[i], seq[j] = seq[j], seq[i]
        return seq


# ============================================================================================= what the code does

# numpy functions whose result is an ndarray or a numpy scalar (both have .sum, .max, .reshape, ...)
_NP_ARRAYS = {
    "array", "asarray", "asanyarray", "ascontiguousarray", "zeros", "ones", "empty", "full", "zeros_like",
    "ones_like", "empty_like", "full_like", "arange", "linspace", "eye", "identity", "tril", "triu", "exp", "log",
    "log1p", "expm1", "log2", "log10", "sqrt", "square", "tanh", "sin", "cos", "abs", "absolute", "maximum",
    "minimum", "clip", "sum", "max", "min", "amax", "amin", "mean", "std", "var", "prod", "cumsum", "cumprod",
    "argmax", "argmin", "argsort", "sort", "matmul", "einsum", "dot", "outer", "tensordot", "concatenate", "stack",
    "vstack", "hstack", "transpose", "swapaxes", "moveaxis", "reshape", "expand_dims", "squeeze", "broadcast_to",
    "repeat", "tile", "take", "take_along_axis", "isinf", "isnan", "isfinite", "logical_and", "logical_or",
    "logical_not", "sign", "power", "floor", "ceil", "round", "flip", "roll", "pad", "diag", "diff", "float64",
    "float32", "copy", "negative", "reciprocal", "exp2", "multiply", "add", "subtract", "divide", "true_divide",
}
# methods of an ndarray that return an ndarray or a numpy scalar
_ARRAY_METHODS = {"sum", "max", "min", "mean", "std", "var", "prod", "argmax", "argmin", "cumsum", "cumprod",
                  "reshape", "transpose", "swapaxes", "squeeze", "astype", "copy", "clip", "round", "flatten",
                  "ravel", "repeat", "conj", "diagonal", "dot"}
_RNG_ARRAYS = {"normal", "standard_normal", "uniform", "random", "integers", "permutation"}
# numpy functions that write into their arguments
_NP_WRITES = {"at", "put", "put_along_axis", "place", "putmask", "copyto", "fill_diagonal", "seterr",
              "set_printoptions", "shuffle", "save", "savez", "load", "errstate"}
_PURE_BUILTINS = {"len", "int", "float", "abs", "min", "max", "range", "tuple", "list", "dict", "set", "frozenset",
                  "sum", "isinstance", "round", "zip", "enumerate", "sorted", "reversed", "str", "bool", "divmod",
                  "pow", "all", "any", "map", "slice", "type", "hasattr", "getattr", "repr", "issubclass"}
_PURE_METHODS = _ARRAY_METHODS | {"item", "tolist", "get", "keys", "values", "items", "nonzero", "argsort",
                                  "trace", "any", "all", "count", "index", "startswith", "endswith", "format"}
# functions of the course that change their arguments or draw from a generator
_MUTATORS = {"print", "kv_cache_append", "decode_step", "model_step", "sample_next", "generate", "streaming_decode",
             "decode_with_kv_cache", "empty_cache", "next", "iter", "setattr", "delattr", "exec", "eval", "open",
             "input", "vars", "locals", "globals", "breakpoint"}
_EVIDENCE = {"shape", "ndim", "dtype", "T"} | _ARRAY_METHODS - {"copy"}
_STATEFUL = re.compile(r"rng|cache|random|gen", re.I)
_MODULES = {"np", "numpy", "math", "rng", "random"}
_BUILTINS = set(dir(builtins))
_RESERVED = _BUILTINS | set(keyword.kwlist) | _MODULES


_FIELDS: dict = {}  # node class -> the fields that can hold nodes other than contexts and operators
_SKIPPED = {"ctx", "op", "ops", "type_comment", "kind", "conversion", "is_async", "level", "name", "id", "attr",
            "arg", "value_str"}
_AST = ast.AST


def _fields(cls) -> tuple:
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = tuple(f for f in cls._fields if f not in _SKIPPED)
    return found


def _children(n) -> list:
    """The child nodes of ``n`` (not its context or operator), in field order."""
    found = []
    for field in _fields(type(n)):
        value = getattr(n, field, None)
        if isinstance(value, _AST):
            found.append(value)
        elif type(value) is list:
            for v in value:
                if isinstance(v, _AST):
                    found.append(v)
    return found


def _walk(node) -> list:
    """Every node under ``node`` (itself included) but contexts and operators, in no particular order: a faster
    ``ast.walk``."""
    found, stack = [], [node]
    pop, push, add = stack.pop, stack.append, found.append
    while stack:
        n = pop()
        add(n)
        for field in _fields(type(n)):
            value = getattr(n, field, None)
            if isinstance(value, _AST):
                push(value)
            elif type(value) is list:
                for v in value:
                    if isinstance(v, _AST):
                        push(v)
    return found


_BINDING_NODES = {ast.Attribute, ast.BinOp, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor,
                  ast.comprehension, ast.NamedExpr, ast.withitem, ast.ExceptHandler, ast.Import, ast.ImportFrom,
                  ast.Global, ast.Nonlocal, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef}


def _np_name(func):
    """``"sum"`` for ``np.sum``, ``"linalg.norm"`` for ``np.linalg.norm``, else None."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name) and func.id == "np" and parts:
        return ".".join(reversed(parts))
    return None


def _pure_call(call: ast.Call) -> bool:
    """A call that changes nothing its arguments or anything else hold (a heuristic, checked by the tests)."""
    if any(k.arg == "out" for k in call.keywords):
        return False
    func = call.func
    np_name = _np_name(func)
    if np_name is not None:
        return "random" not in np_name.split(".") and np_name.split(".")[-1] not in _NP_WRITES
    if isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Name) and func.value.id == "math":
            return True
        return func.attr in _PURE_METHODS and not (isinstance(func.value, ast.Name) and func.value.id in _MODULES)
    if isinstance(func, ast.Name):
        if func.id in _PURE_BUILTINS:
            return True
        if func.id in _MUTATORS or func.id in _BUILTINS:
            return False
        names = {n.id for a in (*call.args, *(k.value for k in call.keywords)) for n in _walk(a)
                 if isinstance(n, ast.Name)}
        return not any(_STATEFUL.search(n) for n in names)
    return False


def _pure(node) -> bool:
    """No call inside ``node`` changes anything; no assignment expression, yield or await either."""
    for n in _walk(node):
        if isinstance(n, ast.Call) and not _pure_call(n):
            return False
        if isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
            return False
    return True


def _is_const_int(node) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _names_read(node) -> set:
    return {n.id for n in _walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _names_written(node) -> set:
    """Names a statement binds, or whose object it may change (subscript and attribute targets, augmented)."""
    found = set()
    for n in _walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            found.add(n.id)
        elif isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)):
            found |= _names_read(n.value)
        elif isinstance(n, ast.AugAssign):
            found |= {m.id for m in _walk(n.target) if isinstance(m, ast.Name)}
    return found


class _Bindings:
    """Every binding of a name in one function (nested scopes included, their parameters as unknowns), and every
    name it reads, from one walk over it."""

    def __init__(self, fn):
        self.params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
        self.params |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
        self.bound: dict = {}  # name -> [("expr", value) | ("iter", iterable) | ("range", None) | ("unknown", None)]
        self.declared = set()  # global / nonlocal
        self.nested = False
        self.loads: dict = {}  # name -> its Name nodes that read it
        self.in_nested = set()  # names that appear inside a nested function or lambda
        self.evidence = set()  # names used as only an array can be (x.shape, x.T, x.sum(), x @ y)
        self.nodes = [n for statement in fn.body for n in _walk(statement)]  # the body's, not fn's own
        loads, handled = self.loads, _BINDING_NODES
        for n in self.nodes:
            kind = type(n)
            if kind is ast.Name:
                if type(n.ctx) is ast.Load:
                    found = loads.get(n.id)
                    if found is None:
                        loads[n.id] = [n]
                    else:
                        found.append(n)
            elif kind in handled:
                self._node(n)

    def _node(self, n):
        if isinstance(n, ast.Attribute):
            if isinstance(n.value, ast.Name) and n.attr in _EVIDENCE:
                self.evidence.add(n.value.id)
        elif isinstance(n, ast.BinOp):
            if isinstance(n.op, ast.MatMult):
                self.evidence |= {s.id for s in (n.left, n.right) if isinstance(s, ast.Name)}
        elif isinstance(n, ast.Assign):
            for t in n.targets:
                self._bind(t, "expr", n.value)
        elif isinstance(n, ast.AugAssign):
            if isinstance(n.target, ast.Name):
                self._add(n.target.id, "expr", ast.BinOp(ast.Name(n.target.id, ast.Load()), n.op, n.value))
        elif isinstance(n, ast.AnnAssign):
            self._bind(n.target, "expr" if n.value else "unknown", n.value)
        elif isinstance(n, (ast.For, ast.comprehension)):
            self._loop_target(n.target, n.iter)
        elif isinstance(n, ast.NamedExpr):
            self._bind(n.target, "expr", n.value)
        elif isinstance(n, ast.withitem):
            if n.optional_vars is not None:
                self._bind(n.optional_vars, "unknown")
        elif isinstance(n, ast.ExceptHandler):
            if n.name:
                self._add(n.name, "unknown")
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            for alias in n.names:
                self._add((alias.asname or alias.name).split(".")[0], "unknown")
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            self.declared |= set(n.names)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            if not isinstance(n, ast.Lambda):
                self._add(n.name, "unknown")
            if isinstance(n, ast.ClassDef):
                return
            self.nested = True
            args = n.args
            for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                if a is not None:
                    self._add(a.arg, "unknown")
                    self.in_nested.add(a.arg)
            self.in_nested |= {m.id for m in _walk(n) if isinstance(m, ast.Name)}

    def _add(self, name, kind, value=None):
        self.bound.setdefault(name, []).append((kind, value))

    def _bind(self, target, kind, value=None):
        if isinstance(target, ast.Name):
            self._add(target.id, kind, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if (kind == "expr" and isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
                    and not any(isinstance(e, ast.Starred) for e in (*value.elts, *target.elts))):
                for t, v in zip(target.elts, value.elts):
                    self._bind(t, "expr", v)
            else:
                for t in target.elts:
                    self._bind(t.value if isinstance(t, ast.Starred) else t, "unknown")
        elif isinstance(target, ast.Starred):
            self._bind(target.value, "unknown")

    def _loop_target(self, target, iterable):
        if (isinstance(target, ast.Name) and isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name)
                and iterable.func.id == "range"):
            self._add(target.id, "range")
        elif isinstance(target, ast.Name):
            self._add(target.id, "iter", iterable)
        else:
            self._bind(target, "unknown")


class _Types:
    """Which names of a function hold arrays (an ndarray or a numpy scalar) and which hold Python numbers."""

    def __init__(self, fn=None, bindings=None):
        self.arrays, self.numbers, self.params, self.locals = set(), set(), set(), set()
        if fn is None:
            return
        b = bindings or _Bindings(fn)
        self.params = b.params
        self.locals = set(b.bound) - b.params - b.declared
        self.arrays = {p for p in b.params if p in b.evidence and p not in b.bound}
        self.arrays |= self._greatest(b.bound, self.locals, self.arrays, self.arrayish, iter_ok=True)
        self.numbers = self._greatest(b.bound, self.locals, set(), self.numeric, iter_ok=False)

    def _greatest(self, bound, candidates, fixed, test, iter_ok):
        """The largest set of ``candidates`` each of whose bindings has the property, given that set."""
        chosen = set(candidates)
        while True:
            attr = "arrays" if test == self.arrayish else "numbers"
            setattr(self, attr, fixed | chosen)
            keep = set()
            for name in chosen:
                ok = True
                for kind, value in bound[name]:
                    if kind == "expr":
                        ok = test(value)
                    elif kind == "iter":
                        ok = iter_ok and self.arrayish(value)
                    elif kind == "range":
                        ok = not iter_ok
                    else:
                        ok = False
                    if not ok:
                        break
                if ok:
                    keep.add(name)
            if keep == chosen:
                return chosen
            chosen = keep

    def arrayish(self, e) -> bool:
        """``e`` evaluates to an ndarray or a numpy scalar."""
        if isinstance(e, ast.Name):
            return e.id in self.arrays
        if isinstance(e, ast.Call):
            f = e.func
            np_name = _np_name(f)
            if np_name is not None:
                return np_name in _NP_ARRAYS and (np_name != "where" or len(e.args) == 3)
            if isinstance(f, ast.Attribute) and f.attr in _ARRAY_METHODS and self.arrayish(f.value):
                return True
            return (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "rng"
                    and f.attr in _RNG_ARRAYS)
        if isinstance(e, ast.Attribute):
            return e.attr == "T" and self.arrayish(e.value)
        if isinstance(e, ast.BinOp):
            if any(isinstance(s, ast.Constant) and isinstance(s.value, (str, bytes)) for s in (e.left, e.right)):
                return False
            return self.arrayish(e.left) or self.arrayish(e.right)
        if isinstance(e, ast.UnaryOp):
            return not isinstance(e.op, ast.Not) and self.arrayish(e.operand)
        if isinstance(e, ast.Subscript):
            return self.arrayish(e.value)
        if isinstance(e, ast.IfExp):
            return self.arrayish(e.body) and self.arrayish(e.orelse)
        return False

    def numeric(self, e) -> bool:
        """``e`` evaluates to a Python int or float."""
        if isinstance(e, ast.Constant):
            return type(e.value) in (int, float)
        if isinstance(e, ast.Name):
            return e.id in self.numbers
        if isinstance(e, ast.BinOp):
            return not isinstance(e.op, ast.MatMult) and self.numeric(e.left) and self.numeric(e.right)
        if isinstance(e, ast.UnaryOp):
            return isinstance(e.op, (ast.USub, ast.UAdd)) and self.numeric(e.operand)
        if isinstance(e, ast.Call):
            f = e.func
            if isinstance(f, ast.Name) and f.id in ("len", "int", "float") and f.id not in self.locals:
                return True
            if isinstance(f, ast.Name) and f.id in ("abs", "min", "max", "round") and e.args and not e.keywords:
                return all(self.numeric(a) for a in e.args)
            return (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "math"
                    and "math" not in self.locals)
        if isinstance(e, ast.Subscript):
            return (isinstance(e.value, ast.Attribute) and e.value.attr == "shape" and _is_const_int(e.slice))
        if isinstance(e, ast.Attribute):
            return e.attr in ("ndim", "size") and self.arrayish(e.value)
        return False

    def known_numeric(self, e) -> bool:
        """A number of some kind: an array, a numpy scalar or a Python number (so + and * commute)."""
        return self.arrayish(e) or self.numeric(e)


def _identifiers(tree) -> set:
    found = set()
    for n in _walk(tree):
        if isinstance(n, ast.Name):
            found.add(n.id)
        elif isinstance(n, ast.arg):
            found.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(n.name)
        elif isinstance(n, ast.Attribute):
            found.add(n.attr)
        elif isinstance(n, ast.keyword) and n.arg:
            found.add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            found.add(n.name)
        elif isinstance(n, ast.alias):
            found.add((n.asname or n.name).split(".")[0])
    return found


def _blocks(fn):
    """Every statement list inside ``fn``'s body (its own body too), not inside nested functions or try blocks.

    Lazily: the lists inside a block's statements are found once the caller is done with that block, so a pass
    that moves statements between blocks (an ``else`` dropped or added) sees each statement where it now is."""
    pending = [fn.body]
    while pending:
        block = pending.pop()
        yield block
        for s in reversed(block):
            if isinstance(s, (ast.If, ast.For, ast.While, ast.With)):
                if getattr(s, "orelse", None):
                    pending.append(s.orelse)
                pending.append(s.body)


class _Slot:
    """One expression a statement evaluates, analysed in one pass: for each node inside it, whether it is pure,
    whether it is evaluated exactly once whenever the expression is (not inside a lambda, a comprehension, a branch
    of a conditional expression or a short-circuited operand), and whether every call evaluated before it (and not
    inside it) is pure."""

    _SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.JoinedStr,
               ast.FormattedValue)

    def __init__(self, root):
        self.root = root
        self.parent, self.pure, self.once, self.start, self.index = {}, {}, {}, {}, {}
        self.order = []
        self._visit(root, True)
        impure = [i for i, n in enumerate(self.order) if isinstance(n, ast.Call) and not _pure_call(n)]
        self.first_impure = impure[0] if impure else len(self.order)

    def _visit(self, n, once):
        self.once[id(n)] = once
        start = len(self.order)
        if isinstance(n, ast.Dict):
            children = [c for k, v in zip(n.keys, n.values) for c in (k, v) if c is not None]
        else:
            children = _children(n)
        pure = not (isinstance(n, ast.Call) and not _pure_call(n)) and not isinstance(
            n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await))
        for c in children:
            self.parent[id(c)] = n
            child_once = once and not isinstance(n, self._SCOPES) and not (
                isinstance(n, ast.IfExp) and c is not n.test) and not (
                isinstance(n, ast.BoolOp) and c is not n.values[0])
            pure = self._visit(c, child_once) and pure
        self.pure[id(n)] = pure
        self.start[id(n)] = start
        self.index[id(n)] = len(self.order)
        self.order.append(n)
        return pure

    def movable(self, n) -> bool:
        """``n`` can be evaluated just before the statement (or where a temporary it was stored in is read)."""
        return self.once[id(n)] and self.pure[id(n)] and self.first_impure >= self.start[id(n)]


def _expression_slots(statement):
    """The expressions of a statement that are evaluated once, before anything else the statement does."""
    if isinstance(statement, ast.Assign):
        return [statement.value]
    if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
        return [statement.value]
    if isinstance(statement, (ast.Return, ast.Expr)) and statement.value is not None:
        return [statement.value]
    if isinstance(statement, ast.If):
        return [statement.test]
    if isinstance(statement, ast.For):
        return [statement.iter]
    return []


# ============================================================================================= names

_VOCABULARY = ("a", "b", "c", "h", "m", "n_", "p", "r", "s", "t", "u", "w", "z", "acc", "aux", "arr", "buf", "cur",
               "den", "num", "out", "part", "res", "tmp", "temp", "val", "vals", "vec", "mat", "result", "step",
               "inner", "outer", "first", "second", "left", "right", "mid", "base", "work", "data", "thing", "x_",
               "y_", "xx", "yy", "q_", "k_", "v_", "att", "score", "prob", "probs", "norm", "scale", "shift", "grad",
               "g_", "d_", "dims", "size_", "total", "count", "idx_", "blk", "piece", "term", "terms")


class _Namer:
    """Fresh identifiers that clash with nothing in the source, Python's keywords or builtins."""

    def __init__(self, tree, dice):
        self.taken = _identifiers(tree) | _RESERVED
        self.dice = dice

    def _free(self, name) -> bool:
        return name.isidentifier() and not keyword.iskeyword(name) and name not in self.taken

    def fresh(self, like: str = "", hint: str = "") -> str:
        """A name for a renamed variable (``like``: its old name) or a new temporary (``hint``: what it holds)."""
        if hint and self._free(hint) and self.dice.chance(0.7):
            self.taken.add(hint)
            return hint
        options = []
        if like:
            parts = [p for p in like.split("_") if p]
            options += [f"my_{like}", f"{like}_", f"{like}2", f"the_{like}", like[0] + "_" if like else "",
                        "".join(p[0] for p in parts) + "_" if parts else "", like.upper() if len(like) <= 3 else "",
                        like.capitalize(), "".join(p.capitalize() for p in parts), like[:3] + "_"]
        options = [o for o in options if o]
        for _ in range(40):
            name = self.dice.pick(options) if options and self.dice.chance(0.5) else self.dice.pick(_VOCABULARY)
            if self._free(name):
                self.taken.add(name)
                return name
        i = 0
        while not self._free(f"v{i}"):
            i += 1
        self.taken.add(f"v{i}")
        return f"v{i}"


def _rename(nodes, mapping: dict):
    """Rename, throughout a function's body (``nodes``; nested scopes too), every local named in ``mapping``."""
    for n in nodes:
        if isinstance(n, ast.Name) and n.id in mapping:
            n.id = mapping[n.id]
        elif isinstance(n, ast.arg) and n.arg in mapping:
            n.arg = mapping[n.arg]
        elif isinstance(n, ast.ExceptHandler) and n.name in mapping:
            n.name = mapping[n.name]
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in mapping:
            n.name = mapping[n.name]


def _rename_locals(tree, dice, p=0.9, namer=None):
    """Every function's local variables renamed (each with chance ``p``, at least one), parameters kept."""
    namer = namer or _Namer(tree, dice)
    for fn in [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        b = _Bindings(fn)
        local = sorted(set(b.bound) - b.params - b.declared - _outer_globals(fn, b))
        chosen = [n for n in local if dice.chance(p)] or local[:1]
        _rename(b.nodes, {old: namer.fresh(old) for old in chosen})


_INNER_SCOPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda, ast.FunctionDef,
                 ast.AsyncFunctionDef)


def _outer_globals(fn, b) -> set:
    """Names bound only inside a comprehension, lambda or nested function of ``fn`` that ``fn`` itself reads as
    globals elsewhere: renaming them everywhere would rename the global too."""
    if not b.nested and not any(isinstance(n, _INNER_SCOPES[:4]) for n in b.nodes):
        return set()
    inner = {id(m) for n in b.nodes if isinstance(n, _INNER_SCOPES) for m in _walk(n) if m is not n}
    outer_bound = {n.id for n in b.nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
                   and id(n) not in inner}
    outer_read = {n.id for n in b.nodes if isinstance(n, ast.Name) and id(n) not in inner}
    return outer_read - outer_bound - b.params


# ============================================================================================= structural rewrites

def _call(func, args, keywords=()):
    return ast.Call(func=func, args=list(args), keywords=list(keywords))


def _np(attr: str):
    node = ast.Name("np", ast.Load())
    for part in attr.split("."):
        node = ast.Attribute(node, part, ast.Load())
    return node


_METHOD_FORMS = {"sum", "max", "min", "mean", "std", "var", "prod", "argmax", "argmin", "cumsum", "any", "all",
                 "reshape", "transpose", "swapaxes", "squeeze", "astype"}
_REDUCTION_KW = {"axis", "keepdims", "dtype", "out", "initial", "where", "ddof"}
# the position of `axis` among a numpy function's arguments (the array first) and a method's
_AXIS_AT = {"sum": 1, "max": 1, "min": 1, "mean": 1, "std": 1, "var": 1, "prod": 1, "argmax": 1, "argmin": 1,
            "cumsum": 1, "any": 1, "all": 1, "concatenate": 1, "stack": 1, "squeeze": 1, "expand_dims": 1,
            "flip": 1, "sort": 1, "argsort": 1, "repeat": 2, "take": 2, "take_along_axis": 2, "roll": 2,
            "split": 2}
_METHOD_AXIS_AT = {"sum": 0, "max": 0, "min": 0, "mean": 0, "std": 0, "var": 0, "prod": 0, "argmax": 0,
                   "argmin": 0, "cumsum": 0, "any": 0, "all": 0, "squeeze": 0, "repeat": 1, "take": 1}
_FLOAT_SPELLINGS = {"float64": ("np.float64", "float", "'float64'"), "float32": ("np.float32", "'float32'"),
                    "bool": ("bool", "np.bool_", "'bool'")}
_SPELLING_OF = {}
for _kind, _spellings in _FLOAT_SPELLINGS.items():
    for _s in _spellings:
        _SPELLING_OF[_s] = _kind
_MIRROR = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.Eq: ast.Eq, ast.NotEq: ast.NotEq}


def _spelling(node):
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001
        return None
    return _SPELLING_OF.get(text.replace('"', "'"))


class _Expressions:
    """Expression-level rewrites of one function (or of a cell's top level), each at random, bottom up."""

    def __init__(self, dice, types, p=0.5):
        self.dice, self.types, self.p = dice, types, p
        self.shadowed = types.locals | types.params
        self._purity, self._seen = {}, []  # id(node) -> pure, for the nodes of this pass (kept alive)
        self._rewrite = {ast.Call: self.visit_Call, ast.BinOp: self.visit_BinOp, ast.Compare: self.visit_Compare,
                         ast.UnaryOp: self.visit_UnaryOp, ast.Attribute: self.visit_Attribute,
                         ast.Subscript: self.visit_Subscript, ast.Dict: self.visit_Dict}

    def visit(self, node):
        if isinstance(node, ast.Lambda):  # a lambda's names are not the function's: its inside is left alone
            return node
        for field in _fields(type(node)):
            value = getattr(node, field, None)
            if isinstance(value, _AST):
                new = self.visit(value)
                if new is not value:
                    setattr(node, field, new)
            elif type(value) is list:
                for i, v in enumerate(value):
                    if isinstance(v, _AST):
                        new = self.visit(v)
                        if new is not v:
                            value[i] = new
        rewrite = self._rewrite.get(type(node))
        return rewrite(node) if rewrite else node

    def pure(self, node) -> bool:
        """``_pure(node)``, remembered for this pass (visited bottom up: a subtree seen is final)."""
        found = self._purity.get(id(node))
        if found is None:
            found = not (isinstance(node, ast.Call) and not _pure_call(node)) and not isinstance(
                node, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)) and all(map(self.pure, _children(node)))
            self._purity[id(node)] = found
            self._seen.append(node)
        return found

    def _receiver(self, x) -> bool:
        """``x.method(...)`` is an array's method: x is no module (a name the function binds, or an expression)."""
        if isinstance(x, ast.Name):
            return x.id in self.shadowed and x.id not in _MODULES
        return isinstance(x, (ast.Call, ast.BinOp, ast.Subscript, ast.Attribute, ast.UnaryOp)) \
            and _np_name(x) is None

    def go(self) -> bool:
        return self.dice.chance(self.p)

    # ----------------------------------------------------------------------------------------- calls
    def visit_Call(self, node):
        f = node.func
        if _np_name(f) is not None:
            rewrites = (self._np_to_method, self._matmul_to_op, self._axis_keyword, self._axis_positional,
                        self._keepdims_to_expand, self._expand_to_keepdims, self._sqrt_to_power,
                        self._dtype_spelling, self._zeros_like, self._zeros_shape)
        elif isinstance(f, ast.Attribute):
            rewrites = (self._method_to_np, self._axis_keyword, self._axis_positional, self._reshape_tuple,
                        self._keepdims_to_expand, self._dtype_spelling, self._transpose_to_T)
        elif isinstance(f, ast.Name):
            rewrites = (self._range_start, self._dict_call, self._inf_call)
        else:
            return node
        if "np" in self.shadowed:
            rewrites = [r for r in rewrites if r in (self._range_start, self._dict_call, self._reshape_tuple)]
        options = [new for new in map(lambda r: r(node), rewrites) if new is not None]
        if options and self.dice.chance(1 - (1 - self.p) ** len(options)):
            return self.dice.pick(options)
        return node

    def _np_to_method(self, node):
        name = _np_name(node.func)
        if name not in _METHOD_FORMS or not node.args or isinstance(node.args[0], ast.Starred):
            return None
        if not self.types.arrayish(node.args[0]):
            return None
        x, rest, kws = node.args[0], node.args[1:], node.keywords
        if any(isinstance(a, ast.Starred) for a in rest):
            return None
        if name == "reshape":
            if len(rest) != 1 or any(k.arg != "order" for k in kws):
                return None
        elif name == "transpose":
            if kws and (rest or [k.arg for k in kws] != ["axes"]):
                return None
            rest, kws = (rest or [k.value for k in kws]), []
            if len(rest) == 1 and _is_const_int(rest[0]):
                return None
        elif name == "swapaxes":
            if len(rest) != 2 or kws:
                return None
        elif name == "astype":
            if len(rest) != 1 or any(k.arg != "copy" for k in kws):
                return None
        elif name == "squeeze":
            if len(rest) > 1 or any(k.arg != "axis" for k in kws):
                return None
        elif len(rest) > 1 or any(k.arg not in _REDUCTION_KW for k in kws):
            return None
        return _call(ast.Attribute(x, name, ast.Load()), rest, kws)

    def _method_to_np(self, node):
        f = node.func
        if not (isinstance(f, ast.Attribute) and f.attr in _METHOD_FORMS - {"astype"}):
            return None
        x = f.value
        if not self._receiver(x):
            return None
        args, kws = node.args, node.keywords
        if f.attr in ("reshape", "transpose"):
            if any(k.arg != "order" for k in kws) or (f.attr == "transpose" and kws):
                return None
            if len(args) == 1 and isinstance(args[0], ast.Starred) or len(args) == 1 and _is_const_int(args[0]) \
                    and f.attr == "transpose":
                return None
            if f.attr == "reshape" and not args:
                return None
            packed = [] if not args else [args[0] if len(args) == 1 else ast.Tuple(list(args), ast.Load())]
            return _call(_np(f.attr), [x, *packed], kws)
        if any(isinstance(a, ast.Starred) for a in args):
            return None
        if f.attr == "swapaxes" and len(args) != 2:
            return None
        if f.attr in ("sum", "max", "min", "mean", "std", "var", "prod", "argmax", "argmin", "cumsum", "any",
                      "all", "squeeze") and (len(args) > 1 or any(k.arg not in _REDUCTION_KW for k in kws)):
            return None
        return _call(_np(f.attr), [x, *args], kws)

    def _matmul_to_op(self, node):
        if _np_name(node.func) != "matmul" or len(node.args) != 2 or node.keywords:
            return None
        a, b = node.args
        if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
            return None
        if not (self.types.arrayish(a) or self.types.arrayish(b)):
            return None
        return ast.BinOp(a, ast.MatMult(), b)

    def _axis_of(self, node):
        name = _np_name(node.func)
        if name in _AXIS_AT:
            return _AXIS_AT[name]
        f = node.func
        if isinstance(f, ast.Attribute) and name is None and f.attr in _METHOD_AXIS_AT and self._receiver(f.value):
            return _METHOD_AXIS_AT[f.attr]
        return None

    def _axis_keyword(self, node):
        at = self._axis_of(node)
        if at is None or len(node.args) != at + 1 or any(isinstance(a, ast.Starred) for a in node.args):
            return None
        if any(k.arg is None or k.arg == "axis" for k in node.keywords):
            return None
        return _call(node.func, node.args[:at], [ast.keyword("axis", node.args[at]), *node.keywords])

    def _axis_positional(self, node):
        at = self._axis_of(node)
        if at is None or len(node.args) != at or any(isinstance(a, ast.Starred) for a in node.args):
            return None
        axis = [k for k in node.keywords if k.arg == "axis"]
        if not axis:
            return None
        return _call(node.func, [*node.args, axis[0].value], [k for k in node.keywords if k.arg != "axis"])

    def _reshape_tuple(self, node):
        f = node.func
        if not (isinstance(f, ast.Attribute) and f.attr in ("reshape", "transpose") and self._receiver(f.value)):
            return None
        if node.keywords and f.attr == "transpose":
            return None
        args = node.args
        if len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args):
            return _call(f, [ast.Tuple(list(args), ast.Load())], node.keywords)
        if len(args) == 1 and isinstance(args[0], ast.Tuple) and len(args[0].elts) >= 2 and not any(
                isinstance(a, ast.Starred) for a in args[0].elts):
            return _call(f, list(args[0].elts), node.keywords)
        return None

    def _range_start(self, node):
        if not (isinstance(node.func, ast.Name) and node.func.id == "range") or "range" in self.shadowed \
                or node.keywords:
            return None
        if len(node.args) == 1 and not isinstance(node.args[0], ast.Starred):
            return _call(node.func, [ast.Constant(0), node.args[0]])
        if len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0 \
                and type(node.args[0].value) is int and not isinstance(node.args[1], ast.Starred):
            return _call(node.func, [node.args[1]])
        return None

    def _dict_call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id == "dict" and "dict" not in self.shadowed \
                and not node.args and node.keywords and all(k.arg for k in node.keywords):
            return ast.Dict([ast.Constant(k.arg) for k in node.keywords], [k.value for k in node.keywords])
        return None

    def _reduction(self, node):
        """(form, name, x, axis keyword value) of a reduction called with axis= and keepdims=True, else None."""
        name = _np_name(node.func)
        f = node.func
        if name in ("sum", "max", "min", "mean") and len(node.args) == 1:
            form, x = "np", node.args[0]
        elif name is None and isinstance(f, ast.Attribute) and f.attr in ("sum", "max", "min", "mean") \
                and not node.args and self._receiver(f.value):
            form, x, name = "method", f.value, f.attr
        else:
            return None
        kws = {k.arg: k.value for k in node.keywords}
        if set(kws) != {"axis", "keepdims"} or not _is_const_int(kws["axis"]):
            return None
        keep = kws["keepdims"]
        if not (isinstance(keep, ast.Constant) and keep.value is True):
            return None
        return form, name, x, kws["axis"]

    def _keepdims_to_expand(self, node):
        found = self._reduction(node)
        if found is None or isinstance(found[2], ast.Starred):
            return None
        form, name, x, axis = found
        kw = [ast.keyword("axis", axis)]
        reduced = _call(_np(name), [x], kw) if form == "np" else _call(ast.Attribute(x, name, ast.Load()), [], kw)
        if ast.unparse(axis) == "-1" and self.dice.chance(0.5):
            return ast.Subscript(reduced, ast.Tuple([ast.Constant(Ellipsis), ast.Constant(None)], ast.Load()),
                                 ast.Load())
        return _call(_np("expand_dims"), [reduced, copy.deepcopy(axis)])

    def _expand_to_keepdims(self, node):
        if _np_name(node.func) != "expand_dims" or len(node.args) != 2 or node.keywords:
            return None
        inner, axis = node.args
        if not isinstance(inner, ast.Call) or not _is_const_int(axis):
            return None
        kws = {k.arg: k.value for k in inner.keywords}
        if set(kws) != {"axis"} or ast.unparse(kws["axis"]) != ast.unparse(axis):
            return None
        name = _np_name(inner.func)
        if name in ("sum", "max", "min", "mean") and len(inner.args) == 1 or (
                name is None and isinstance(inner.func, ast.Attribute)
                and inner.func.attr in ("sum", "max", "min", "mean") and not inner.args
                and self._receiver(inner.func.value)):
            return _call(inner.func, inner.args, [*inner.keywords, ast.keyword("keepdims", ast.Constant(True))])
        return None

    def _sqrt_to_power(self, node):
        if _np_name(node.func) == "sqrt" and len(node.args) == 1 and not node.keywords \
                and self.types.arrayish(node.args[0]) and not isinstance(node.args[0], ast.Starred):
            return ast.BinOp(node.args[0], ast.Pow(), ast.Constant(0.5))
        return None

    def _dtype_spelling(self, node):
        """``dtype=np.float64`` / ``dtype=float`` / ``dtype="float64"`` (and astype's argument)."""
        f = node.func
        if _np_name(f) is None and not (isinstance(f, ast.Attribute) and (
                f.attr in _ARRAY_METHODS and self._receiver(f.value)
                or isinstance(f.value, ast.Name) and f.value.id == "rng" and f.attr in _RNG_ARRAYS)):
            return None  # a numpy function's or method's dtype, never another function's argument
        slots = [(k, "kw") for k in node.keywords if k.arg == "dtype"]
        if isinstance(f, ast.Attribute) and f.attr == "astype" and node.args:
            slots.append((0, "arg"))
        for slot, where in slots:
            value = slot.value if where == "kw" else node.args[slot]
            kind = _spelling(value)
            if kind is None:
                continue
            text = ast.unparse(value).replace('"', "'")
            others = [s for s in _FLOAT_SPELLINGS[kind] if s != text
                      and not (s in ("float", "bool") and s in self.shadowed)]
            if not others or ("np" in self.shadowed and any(s.startswith("np.") for s in others)):
                continue
            new_value = ast.parse(self.dice.pick(others), mode="eval").body
            new = copy.copy(node)
            if where == "kw":
                new.keywords = [ast.keyword("dtype", new_value) if k is slot else k for k in node.keywords]
            else:
                new.args = [new_value, *node.args[1:]]
            return new
        return None

    def _inf_call(self, node):
        """``float("inf")`` -> ``np.inf``; ``float("-inf")`` -> ``-np.inf``."""
        if isinstance(node.func, ast.Name) and node.func.id == "float" and "float" not in self.shadowed \
                and len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and not node.keywords:
            value = node.args[0].value
            if value == "inf":
                return _np("inf")
            if value == "-inf":
                return ast.UnaryOp(ast.USub(), _np("inf"))
        return None

    def _zeros_like(self, node):
        """``np.zeros_like(x)`` -> ``np.zeros(x.shape, dtype=x.dtype)`` for an array x."""
        name = _np_name(node.func)
        if name in ("zeros_like", "ones_like") and len(node.args) == 1 and isinstance(node.args[0], ast.Name) \
                and self.types.arrayish(node.args[0]) and all(k.arg == "dtype" for k in node.keywords):
            x = node.args[0]
            dtype = node.keywords[0].value if node.keywords else ast.Attribute(ast.Name(x.id, ast.Load()), "dtype",
                                                                               ast.Load())
            return _call(_np(name[:-5]), [ast.Attribute(ast.Name(x.id, ast.Load()), "shape", ast.Load())],
                         [ast.keyword("dtype", dtype)])
        return None

    def _zeros_shape(self, node):
        """``np.zeros(x.shape, dtype=x.dtype)`` -> ``np.zeros_like(x)``."""
        name = _np_name(node.func)
        if name not in ("zeros", "ones") or len(node.args) != 1 or len(node.keywords) != 1:
            return None
        shape, kw = node.args[0], node.keywords[0]
        if not (isinstance(shape, ast.Attribute) and shape.attr == "shape" and isinstance(shape.value, ast.Name)
                and kw.arg == "dtype" and isinstance(kw.value, ast.Attribute) and kw.value.attr == "dtype"
                and isinstance(kw.value.value, ast.Name) and kw.value.value.id == shape.value.id
                and self.types.arrayish(shape.value)):
            return None
        return _call(_np(name + "_like"), [ast.Name(shape.value.id, ast.Load())])

    def _transpose_to_T(self, node):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "transpose" and self._receiver(f.value) and not node.args \
                and not node.keywords:
            return ast.Attribute(f.value, "T", ast.Load())
        return None

    # ----------------------------------------------------------------------------------------- operators
    def visit_BinOp(self, node):
        options = []
        if isinstance(node.op, ast.MatMult) and "np" not in self.shadowed:
            options.append(lambda: _call(_np("matmul"), [node.left, node.right]))
        if isinstance(node.op, (ast.Add, ast.Mult)) and self.pure(node.left) and self.pure(node.right) and (
                self.types.known_numeric(node.left) or self.types.known_numeric(node.right)):
            options.append(lambda: ast.BinOp(node.right, node.op, node.left))
        if isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) and isinstance(node.left, ast.Name):
            x = node.left
            if node.right.value == 2 and type(node.right.value) is int and self.types.known_numeric(x):
                options.append(lambda: ast.BinOp(ast.Name(x.id, ast.Load()), ast.Mult(), ast.Name(x.id, ast.Load())))
            if node.right.value == 0.5 and self.types.arrayish(x) and "np" not in self.shadowed:
                options.append(lambda: _call(_np("sqrt"), [x]))
        if isinstance(node.op, ast.Mult) and isinstance(node.left, ast.Name) and isinstance(node.right, ast.Name) \
                and node.left.id == node.right.id and self.types.known_numeric(node.left):
            options.append(lambda: ast.BinOp(ast.Name(node.left.id, ast.Load()), ast.Pow(), ast.Constant(2)))
        if options and self.go():
            return self.dice.pick(options)()
        return node

    def visit_Compare(self, node):
        if len(node.ops) == 1 and type(node.ops[0]) in _MIRROR and self.pure(node.left) \
                and self.pure(node.comparators[0]) and self.go():
            return ast.Compare(node.comparators[0], [_MIRROR[type(node.ops[0])]()], [node.left])
        return node

    def visit_UnaryOp(self, node):
        if isinstance(node.op, ast.USub) and _np_name(node.operand) == "inf" and "float" not in self.shadowed \
                and self.go():
            return ast.parse(self.dice.pick(['float("-inf")', '-float("inf")']), mode="eval").body
        return node

    def visit_Attribute(self, node):
        if _np_name(node) == "inf" and isinstance(node.ctx, ast.Load) and "float" not in self.shadowed \
                and self.go():
            return ast.parse('float("inf")', mode="eval").body
        if node.attr == "T" and isinstance(node.ctx, ast.Load) and self._receiver(node.value) and self.go():
            return _call(ast.Attribute(node.value, "transpose", ast.Load()), [])
        if _np_name(node) == "newaxis" and self.go():
            return ast.Constant(None)
        return node

    def visit_Subscript(self, node):
        if "np" in self.shadowed or not isinstance(node.ctx, ast.Load):
            return node
        index = node.slice
        elts = index.elts if isinstance(index, ast.Tuple) else [index]
        nones = [i for i, e in enumerate(elts) if isinstance(e, ast.Constant) and e.value is None]
        if nones and self.go():
            i = self.dice.pick(nones)
            if isinstance(index, ast.Tuple):
                elts[i] = _np("newaxis")
            else:
                node.slice = _np("newaxis")
        return node

    def visit_Dict(self, node):
        if "dict" not in self.shadowed and node.keys and all(
                isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value.isidentifier()
                and not keyword.iskeyword(k.value) for k in node.keys) \
                and len({k.value for k in node.keys}) == len(node.keys) and self.go():
            return _call(ast.Name("dict", ast.Load()), [], [ast.keyword(k.value, v) for k, v in
                                                             zip(node.keys, node.values)])
        return node


def _fn_scopes(tree):
    """(scope node, its types): each top-level function, and the cell's top level itself."""
    scopes = [(fn, _Types(fn)) for fn in tree.body if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))]
    top = _Types()
    top.locals = {n.id for s in tree.body for n in _walk(s) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)}
    return scopes, top


def _rewrite_expressions(tree, dice, p):
    scopes, top = _fn_scopes(tree)
    for fn, types in scopes:
        fn.body = [_Expressions(dice, types, p).visit(s) for s in fn.body]
    for i, s in enumerate(tree.body):
        if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            tree.body[i] = _Expressions(dice, top, p).visit(s)


def _docstring(fn):
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[0]
    return None


def _extract_temporaries(fn, dice, namer, p):
    """Name an intermediate result: ``y = f(g(x))`` -> ``t = g(x)`` then ``y = f(t)``."""
    doc = _docstring(fn)
    for block in _blocks(fn):
        i = 0
        while i < len(block):
            statement = block[i]
            candidates = []
            for slot in ([] if statement is doc else _expression_slots(statement)):
                funcs = {id(c.func) for c in _walk(slot) if isinstance(c, ast.Call)}
                analysed = _Slot(slot)
                for n in analysed.order:
                    if id(n) in funcs:
                        continue
                    if not isinstance(n, (ast.Call, ast.BinOp, ast.Subscript, ast.UnaryOp, ast.Attribute,
                                          ast.Compare, ast.IfExp)):
                        continue
                    if isinstance(n, ast.UnaryOp) and isinstance(n.operand, ast.Constant):
                        continue
                    if isinstance(n, ast.Attribute) and (not isinstance(n.value, (ast.Call, ast.BinOp, ast.Subscript))
                                                         or _np_name(n) is not None):
                        continue
                    whole = n is slot and not isinstance(statement, ast.Return)
                    if whole or not analysed.movable(n):
                        continue
                    if any(isinstance(m, (ast.Starred, ast.Slice)) for m in analysed.order[analysed.start[id(n)]:
                                                                                         analysed.index[id(n)]]):
                        continue
                    candidates.append((analysed, n))
            if candidates and dice.chance(p):
                analysed, n = dice.pick(candidates)
                name = namer.fresh(hint=_hint(n))
                _replace(analysed.parent.get(id(n), statement), n, ast.Name(name, ast.Load()))
                block.insert(i, ast.Assign([ast.Name(name, ast.Store())], n))
                i += 1
            i += 1


_OP_HINTS = {ast.Add: "total", ast.Sub: "diff", ast.Mult: "prod", ast.Div: "ratio", ast.MatMult: "prod",
             ast.Pow: "power", ast.FloorDiv: "quot", ast.Mod: "rest"}


def _hint(expr) -> str:
    """A name a learner might give ``expr``'s value: a dict key, the function or method called, the operation."""
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, str):
        key = expr.slice.value
        return key if key.isidentifier() and not keyword.iskeyword(key) else ""
    if isinstance(expr, ast.Call):
        f = expr.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        return {"sqrt": "root", "exp": "e", "sum": "s", "max": "m", "mean": "mu", "swapaxes": "t", "where": "w",
                "reshape": "flat", "matmul": "prod", "transpose": "t", "len": "n", "float": "value"}.get(name, name)
    if isinstance(expr, ast.BinOp):
        return _OP_HINTS.get(type(expr.op), "")
    if isinstance(expr, ast.Attribute):
        return expr.attr if expr.attr != "T" else "t"
    if isinstance(expr, ast.Compare):
        return "ok"
    return ""


def _replace(parent, old, new):
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, new)
            return
        if isinstance(value, list):
            for j, item in enumerate(value):
                if item is old:
                    value[j] = new
                    return


def _inline_temporaries(fn, dice, p):
    """Inline a name used once, in the statement right after it: ``t = g(x)`` then ``y = f(t)`` -> ``y = f(g(x))``."""
    b = _Bindings(fn)
    loads, nested = b.loads, b.in_nested
    for block in _blocks(fn):
        i = 0
        while i < len(block) - 1:
            s, nxt = block[i], block[i + 1]
            if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)):
                i += 1
                continue
            name = s.targets[0].id
            uses = loads.get(name, [])
            if (name in b.params or name in b.declared or name in nested or len(b.bound.get(name, [])) != 1
                    or len(uses) != 1 or not _pure(s.value)):
                i += 1
                continue
            use = uses[0]
            slots = [_Slot(slot) for slot in _expression_slots(nxt)]
            slots = [a for a in slots if id(use) in a.once]
            if slots and slots[0].movable(use) and dice.chance(p):
                _replace(slots[0].parent.get(id(use), nxt), use, s.value)
                del block[i]
                continue
            i += 1


def _split_and_merge_tuples(fn, dice, p):
    """``a, b = e1, e2`` <-> ``a = e1`` then ``b = e2`` (when e2 does not read a, nor e1 b)."""
    for block in _blocks(fn):
        i = 0
        while i < len(block):
            s = block[i]
            if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Tuple)
                    and isinstance(s.value, ast.Tuple) and len(s.targets[0].elts) == len(s.value.elts) >= 2
                    and all(isinstance(t, ast.Name) for t in s.targets[0].elts)
                    and not any(isinstance(v, ast.Starred) for v in s.value.elts)):
                names = [t.id for t in s.targets[0].elts]
                if len(set(names)) == len(names) and not set(names) & set().union(
                        *(_names_read(v) for v in s.value.elts)) and dice.chance(p):
                    block[i:i + 1] = [ast.Assign([ast.Name(n, ast.Store())], v) for n, v in zip(names, s.value.elts)]
                    i += len(names)
                    continue
            if i + 1 < len(block):
                t = block[i + 1]
                if all(isinstance(x, ast.Assign) and len(x.targets) == 1 and isinstance(x.targets[0], ast.Name)
                       and not isinstance(x.value, ast.Tuple) and len(_walk(x.value)) <= 12 for x in (s, t)):
                    a, b = s.targets[0].id, t.targets[0].id
                    if a != b and a not in _names_read(t.value) and b not in _names_read(s.value) and dice.chance(p):
                        block[i:i + 2] = [ast.Assign([ast.Tuple([ast.Name(a, ast.Store()), ast.Name(b, ast.Store())],
                                                                ast.Store())],
                                                     ast.Tuple([s.value, t.value], ast.Load()))]
                        i += 1
                        continue
            i += 1


def _exits(stmts) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Raise))


def _negate(test):
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        flip = {ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}.get(type(test.ops[0]))
        if flip is not None:
            return ast.Compare(test.left, [flip()], test.comparators)
    return ast.UnaryOp(ast.Not(), test)


def _reshape_branches(fn, dice, p):
    """``if c: A else: B`` <-> ``if not c: B else: A``; an early return's ``else`` added or dropped."""
    for block in _blocks(fn):
        i = 0
        while i < len(block):
            s = block[i]
            if isinstance(s, ast.If):
                if s.orelse and dice.chance(p / 2):
                    s.test, s.body, s.orelse = _negate(s.test), s.orelse, s.body
                if s.orelse and _exits(s.body) and dice.chance(p):  # the else of an early return: dropped
                    block[i + 1:i + 1] = s.orelse
                    s.orelse = []
                elif not s.orelse and _exits(s.body) and i + 1 < len(block) and dice.chance(p / 2):
                    s.orelse = block[i + 1:]
                    del block[i + 1:]
            i += 1


def _conditionals(fn, dice, p):
    """``return a if c else b`` <-> ``if c: return a`` ``else: return b`` (and ``x = a if c else b`` alike)."""
    for block in _blocks(fn):
        for i, s in enumerate(block):
            if isinstance(s, ast.Return) and isinstance(s.value, ast.IfExp) and dice.chance(p):
                e = s.value
                block[i] = ast.If(e.test, [ast.Return(e.body)], [ast.Return(e.orelse)])
            elif (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                  and isinstance(s.value, ast.IfExp) and dice.chance(p)):
                e, name = s.value, s.targets[0].id
                block[i] = ast.If(e.test, [ast.Assign([ast.Name(name, ast.Store())], e.body)],
                                  [ast.Assign([ast.Name(name, ast.Store())], e.orelse)])
            elif isinstance(s, ast.If) and len(s.body) == len(s.orelse) == 1:
                a, b = s.body[0], s.orelse[0]
                if isinstance(a, ast.Return) and isinstance(b, ast.Return) and a.value and b.value \
                        and dice.chance(p):
                    block[i] = ast.Return(ast.IfExp(s.test, a.value, b.value))
                elif (isinstance(a, ast.Assign) and isinstance(b, ast.Assign) and len(a.targets) == len(b.targets) == 1
                      and isinstance(a.targets[0], ast.Name) and isinstance(b.targets[0], ast.Name)
                      and a.targets[0].id == b.targets[0].id and dice.chance(p)):
                    block[i] = ast.Assign([ast.Name(a.targets[0].id, ast.Store())],
                                          ast.IfExp(s.test, a.value, b.value))


def _augmented(fn, dice, types, p):
    """``n = n + 1`` <-> ``n += 1`` for names that hold Python numbers (never arrays: += changes an array)."""
    for block in _blocks(fn):
        for i, s in enumerate(block):
            if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and s.target.id in types.numbers \
                    and dice.chance(p):
                block[i] = ast.Assign([ast.Name(s.target.id, ast.Store())],
                                      ast.BinOp(ast.Name(s.target.id, ast.Load()), s.op, s.value))
            elif (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                  and s.targets[0].id in types.numbers and isinstance(s.value, ast.BinOp)
                  and isinstance(s.value.left, ast.Name) and s.value.left.id == s.targets[0].id
                  and not isinstance(s.value.op, ast.MatMult) and dice.chance(p)):
                block[i] = ast.AugAssign(ast.Name(s.targets[0].id, ast.Store()), s.value.op, s.value.right)


def _restructure(tree, dice, namer):
    for fn in [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        passes = [lambda: _inline_temporaries(fn, dice, 0.5),
                  lambda: _extract_temporaries(fn, dice, namer, 0.4),
                  lambda: _split_and_merge_tuples(fn, dice, 0.4),
                  lambda: _reshape_branches(fn, dice, 0.5),
                  lambda: _augmented(fn, dice, _Types(fn), 0.6)]
        _conditionals(fn, dice, 0.5)  # first: the branches it makes are for the other passes to reshape
        for run in dice.shuffled(passes):
            run()
        doc = _docstring(fn)
        if doc is not None and len(fn.body) > 1 and dice.chance(0.25):
            fn.body.remove(doc)


# ============================================================================================= writing code out

class _Unparser(ast._Unparser):  # noqa: SLF001 - the standard library's own unparser, in a learner's style
    """``ast.unparse`` with redundant parentheses around the nodes ``extra`` names and the spacing of ``style``."""

    def __init__(self, extra=frozenset(), style=None, **kwargs):  # kwargs: the f-string writer makes itself one
        super().__init__(**kwargs)
        self._extra, self._style = extra, style

    def require_parens(self, precedence, node):
        return self.delimit_if("(", ")", self.get_precedence(node) > precedence or id(node) in self._extra)

    def write(self, *text):
        style = self._style
        if style is not None:
            text = [style.piece(t) for t in text]
        self._source.extend(text)


_BINARY = {"+", "-", "*", "/", "//", "%", "@", "**", "==", "!=", "<", ">", "<=", ">=", "&", "|", "^", "<<", ">>",
           "+=", "-=", "*=", "/=", "//=", "%=", "@=", "**=", "->"}
_GENERIC_COMMENTS = ("# compute it", "# TODO: check the shapes", "# done", "# step {n}", "# helper value",
                     "# see the lesson", "# this works", "# from the formula", "# shape check below",
                     "# careful with the axis", "# vectorised", "# first part", "# then the rest", "# ok",
                     "# not sure about this one", "# numerically stable", "# as in the notes", "# result",
                     "# broadcast", "# fixed")


class _Style:
    def __init__(self, dice, comments=None, inline=None, added=0.1, keep=0.6, parens=0.0):
        self.dice = dice
        self.indent = dice.pick([4] * 8 + [2, 3])
        self.op_space = dice.chance(0.75)
        self.comma_space = dice.chance(0.8)
        self.kw_space = dice.chance(0.12)
        self.assign_space = dice.chance(0.9)
        self.blank = dice.pick([0.0, 0.05, 0.15, 0.3])
        self.canonical = self.op_space and self.comma_space and self.assign_space and not self.kw_space
        self.comments, self.inline = comments or {}, inline or {}
        self.added, self.keep, self.parens = added, keep, parens
        self.steps = 0

    # ----------------------------------------------------------------------------------------- comments
    def _new_comment(self) -> str:
        self.steps += 1
        return self.dice.pick(_GENERIC_COMMENTS).format(n=self.steps)

    def _carried(self, text: str):
        """An original comment: kept, reworded or dropped."""
        roll = self.dice.random()
        if roll < self.keep:
            return text
        if roll < self.keep + (1 - self.keep) / 2:
            body = text.lstrip("#").strip()
            options = [f"# {body.lower()}", f"#{body}", f"# {body.rstrip('.')}", f"# NOTE: {body}",
                       f"# {body[:1].upper()}{body[1:]}", self._new_comment()]
            return self.dice.pick(options)
        return None

    def before(self, node) -> list:
        found = [c for c in (self._carried(t) for t in self.comments.get(id(node), ())) if c]
        if self.dice.chance(self.added):
            found.append(self._new_comment())
        return found

    def after(self, node) -> str:
        text = self.inline.get(id(node))
        found = self._carried(text) if text else None
        if found is None and self.dice.chance(self.added / 2):
            found = self._new_comment()
        return f"  {found}" if found else ""

    # ----------------------------------------------------------------------------------------- code
    def expr(self, node) -> str:
        extra = set()
        if self.parens:
            extra = {id(n) for n in _walk(node) if isinstance(n, (ast.BinOp, ast.Compare, ast.BoolOp))
                     and self.dice.chance(self.parens)}
        return _Unparser(extra, None if self.canonical else self).visit(node)

    def bare(self, node) -> str:
        """``node`` as the whole of an assignment's side or a return's value: a tuple without its parentheses."""
        text = self.expr(node)
        if isinstance(node, ast.Tuple) and node.elts and text.startswith("(") and text.endswith(")") \
                and not self.dice.chance(0.1):
            return text[1:-1]
        return text

    def piece(self, text: str) -> str:
        """One piece the unparser writes, in this learner's spacing."""
        if text == ", ":
            return text if self.comma_space else ","
        if text == "=":  # a keyword argument or a default
            return " = " if self.kw_space else text
        if text == " = ":
            return text if self.assign_space else "="
        if len(text) > 2 and text[0] == text[-1] == " " and text[1:-1] in _BINARY:
            return text if self.op_space else text[1:-1]
        return text

    def block(self, stmts, level: int, out: list, top=False):
        pad = " " * (self.indent * level)
        for i, s in enumerate(stmts):
            if i and (top and (isinstance(s, (ast.FunctionDef, ast.ClassDef)) or isinstance(
                    stmts[i - 1], (ast.FunctionDef, ast.ClassDef)))):
                out.extend([""] * self.dice.pick([1, 2, 2, 2]))
            elif i and self.dice.chance(self.blank):
                out.append("")
            out.extend(pad + c for c in self.before(s))
            self.statement(s, level, out, first=i == 0)

    def statement(self, s, level: int, out: list, first=False):
        pad = " " * (self.indent * level)
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in s.decorator_list:
                out.append(pad + "@" + (self.expr(d)))
            head = ("async def " if isinstance(s, ast.AsyncFunctionDef) else "def ") + s.name
            head += "(" + self.expr(s.args) + ")" + (" -> " + self.expr(s.returns) if s.returns else "")
            out.append(pad + head + ":" + self.after(s))
            self.block(s.body, level + 1, out)
        elif isinstance(s, ast.If):
            out.append(pad + ("if " + self.expr(s.test)) + ":" + self.after(s))
            self.block(s.body, level + 1, out)
            orelse = s.orelse
            while len(orelse) == 1 and isinstance(orelse[0], ast.If) and not self.comments.get(id(orelse[0])) \
                    and self.dice.chance(0.9):
                out.append(pad + ("elif " + self.expr(orelse[0].test)) + ":" + self.after(orelse[0]))
                self.block(orelse[0].body, level + 1, out)
                orelse = orelse[0].orelse
            if orelse:
                out.append(pad + "else:")
                self.block(orelse, level + 1, out)
        elif isinstance(s, (ast.For, ast.While)):
            if isinstance(s, ast.For):
                head = f"for {self.expr(s.target)} in {self.expr(s.iter)}"
            else:
                head = f"while {self.expr(s.test)}"
            out.append(pad + (head) + ":" + self.after(s))
            self.block(s.body, level + 1, out)
            if s.orelse:
                out.append(pad + "else:")
                self.block(s.orelse, level + 1, out)
        elif isinstance(s, ast.With):
            items = ", ".join(self.expr(w.context_expr) + (f" as {self.expr(w.optional_vars)}"
                                                           if w.optional_vars else "") for w in s.items)
            out.append(pad + ("with " + items) + ":" + self.after(s))
            self.block(s.body, level + 1, out)
        elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str) \
                and first and "\\" not in s.value.value and '"""' not in s.value.value \
                and not s.value.value.endswith('"'):
            text = '"""' + s.value.value + '"""'
            out.extend((pad + line if j == 0 else line) for j, line in enumerate(text.split("\n")))
        elif isinstance(s, (ast.Assign, ast.Return)) and s.value is not None:
            value = self.bare(s.value)
            if self.parens and not isinstance(s.value, ast.Tuple) and self.dice.chance(self.parens / 2):
                value = f"({value})"
            equals = self.piece(" = ")
            head = "return " if isinstance(s, ast.Return) else "".join(self.bare(t) + equals for t in s.targets)
            out.append(pad + (head + value) + self.after(s))
        elif isinstance(s, (ast.Try, ast.ClassDef, ast.AsyncWith, ast.AsyncFor, ast.Match, getattr(ast, "TryStar",
                                                                                                    ast.Try))):
            out.extend(pad + line for line in ast.unparse(s).splitlines())
        else:
            out.append(pad + (self.expr(s)) + self.after(s))

    def write(self, tree) -> str:
        out = []
        self.block(tree.body, 0, out, top=True)
        return "\n".join(out).rstrip() + "\n"


@functools.lru_cache(maxsize=4096)
def _comment_rows(source: str) -> tuple:
    """((row, comment, whether code comes before it on its line), ...) of ``source``."""
    lines = source.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError):
        return ()
    return tuple((t.start[0], t.string, bool(lines[t.start[0] - 1][:t.start[1]].strip())) for t in tokens
                 if t.type == tokenize.COMMENT)


def _comments_of(source: str, tree):
    """({id(statement): [full-line comments just above it]}, {id(statement): the comment ending its line})."""
    before, inline = {}, {}
    rows = _comment_rows(source)
    if not rows:
        return before, inline
    statements = sorted((n for n in _walk(tree) if isinstance(n, ast.stmt)), key=lambda n: (n.lineno, -n.end_lineno))
    for row, text, after_code in rows:
        if after_code:  # the comment ends that line
            owner = [s for s in statements if s.lineno <= row <= (s.lineno if _compound(s) else s.end_lineno)]
            if owner:
                inline[id(owner[-1])] = text
        else:
            following = [s for s in statements if s.lineno > row]
            if following:
                before.setdefault(id(following[0]), []).append(text)
    return before, inline


def _compound(s) -> bool:
    return isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.While,
                          ast.With, ast.Try))


def skeleton(source: str) -> str:
    """``source``'s tokens without comments, blank lines and whitespace (what stays when only layout changes)."""
    kept = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                        tokenize.ENDMARKER):
            continue
        kept.append(tok.string)
    return " ".join(kept)


# ============================================================================================= the two learners

def independent(source: str, rng) -> str:
    """``source`` as another learner would write it: the same results, a different structure and style."""
    dice = _Dice(rng)
    tree = ast.parse(source)
    namer = _Namer(tree, dice)  # the names it makes up are taken: one namer for every pass
    _restructure(tree, dice, namer)
    _rewrite_expressions(tree, dice, p=0.55)
    if dice.chance(0.3):
        _rename_locals(tree, dice, p=0.5, namer=namer)
    return _Style(dice, added=dice.pick([0.0, 0.05, 0.15])).write(tree)


def _reorder(fn, dice, p):
    """Swap adjacent statements that do not depend on each other (neither reads or changes what the other
    binds or changes; no return, no control flow, nothing that changes an object in place or draws at random)."""
    facts = {}

    def of(s):  # (movable, names written, names read), once per statement
        found = facts.get(id(s))
        if found is None:
            found = facts[id(s)] = (_movable(s), _names_written(s), _names_read(s)) if _assigns(s) else (False,)
        return found

    for block in _blocks(fn):
        i = 0
        while i < len(block) - 1:
            a, b = of(block[i]), of(block[i + 1])
            if a[0] and b[0] and not (a[1] & b[1] or a[1] & b[2] or b[1] & a[2]) and dice.chance(p):
                block[i], block[i + 1] = block[i + 1], block[i]
                i += 2
                continue
            i += 1


def _assigns(s) -> bool:
    return isinstance(s, ast.Assign) or isinstance(s, ast.AnnAssign) and s.value is not None


def _plain_target(t) -> bool:
    if isinstance(t, ast.Starred):
        t = t.value
    if isinstance(t, (ast.Tuple, ast.List)):
        return all(map(_plain_target, t.elts))
    return isinstance(t, ast.Name)


def _movable(s) -> bool:
    """An assignment to plain names (no subscript or attribute target), changing nothing else."""
    if not (isinstance(s, ast.Assign) or isinstance(s, ast.AnnAssign) and s.value is not None):
        return False
    targets = s.targets if isinstance(s, ast.Assign) else [s.target]
    return all(map(_plain_target, targets)) and _pure(s)


def _disguise_docstring(fn, dice):
    doc = _docstring(fn)
    roll = dice.random()
    if doc is None:
        if roll < 0.3:
            fn.body.insert(0, ast.Expr(ast.Constant(dice.pick([
                "Compute the result.", "My implementation.", f"Implements {fn.name}.", "See the lesson.",
                f"{fn.name.replace('_', ' ').capitalize()}."]))))
        return
    text = doc.value.value
    if roll < 0.35:
        return
    if roll < 0.55 and len(fn.body) > 1:
        fn.body.remove(doc)
        return
    first = text.strip().split("\n")[0]
    doc.value = ast.Constant(dice.pick([
        first, first.rstrip(".") + ".", first.lower(), f"{first}\n\n    (my version)", text.replace("  ", " "),
        text.strip() + "\n    ", f"Returns: {first}"]))


def disguised(source: str, rng) -> str:
    """A copy of ``source`` disguised as a copier disguises it (the same code underneath)."""
    dice = _Dice(rng)
    tree = ast.parse(source)
    before, inline = _comments_of(source, tree)
    fns = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    _rename_locals(tree, dice, p=dice.pick([0.6, 0.9, 1.0]))
    for fn in fns:
        _reorder(fn, dice, dice.pick([0.3, 0.6, 0.9]))
        _disguise_docstring(fn, dice)
    style = _Style(dice, before, inline, added=dice.pick([0.05, 0.15, 0.3]), keep=dice.pick([0.2, 0.5, 0.8]),
                   parens=dice.pick([0.0, 0.1, 0.25]))
    text = style.write(tree)
    if text == source:
        text = "# my answer\n" + text
    return text
