"""Static scan of a submission for code a human should look at before trusting its grade.

The hidden tests run in the grader (``autograder/grading/pipeline/hidden_tests.py``), so nothing a notebook changes in its
kernel can raise its score; this scan reads the learner's code without running it and names what looks like an
attempt to game the grader,
so an instructor sees it in the report even when the attempt failed or scored nothing:

* rebinding or deleting an attribute of numpy, builtins, sys, IPython or the kernel (``np.allclose = ...``,
  ``setattr(np.testing, ...)``, ``builtins.print = ...``, ``sys.modules[...] = ...``);
* any mention of the course's grading package (``autograder``) or of its reference / hidden checks;
* ``get_ipython()`` used to change the kernel (``set_custom_exc``, ``events.register``, assigning to it);
* leaving the kernel on purpose (``sys.exit``, ``os._exit``, ``os.kill``, ``exit()``, ``quit()``);
* a class whose ``__eq__`` returns ``True`` unconditionally;
* writing files or starting processes (``open(..., "w")``, ``shutil``, ``subprocess``, ``os.system``);
* using the network (``socket``, ``urllib``, ``http.client``, ``requests``, ``ftplib``, ``smtplib``, ``zmq``,
  ``curl``/``wget`` in a shell command): graded kernels have no network, but a human should know it was tried;
* reading the machine's process table or other kernels' files (``/proc``, connection files);
* running code built at run time (``exec``, ``eval``, an import by a computed name) or searching folders
  (``os.walk``, ``glob``): how a notebook would look for the grader's code;
* a cell it could not scan: one over ``MAX_SCANNED_CHARS``, code past the notebook's ``MAX_NOTEBOOK_CHARS``, or
  code nested too deep to parse or walk.

The scan never raises on a notebook, and its cost is linear in the code it reads, which is bounded: no pattern
backtracks (strings are searched for fixed words only), the names and snippets it reports are read along a node's own
chain of attributes or from the source text, never by rendering its subtree again, and each node is walked once.
"""

from __future__ import annotations

import ast
import re

WATCHED_MODULES = {"numpy", "builtins", "sys", "IPython", "math", "os", "__builtins__"}
NETWORK_MODULES = {"socket", "urllib", "http", "requests", "httpx", "aiohttp", "ftplib", "smtplib", "telnetlib",
                   "zmq", "websocket", "websockets", "paramiko", "asyncssh"}
_SHELL_NETWORK = re.compile(r"\b(curl|wget|nc|ncat|netcat|ssh|scp)\b")
_MAGIC = re.compile(r"^\s*[%!]", re.M)
# in a string: fixed words only, so that no search backtracks (the kernel's connection files are
# ``_names_kernel_file``), each searched for only in a string that holds one of its words
_GRADER_WORDS = (("autograder", "checks", "reference"),
                 re.compile(r"\bautograder\b|checks[/.]lesson|reference(?:\.py|[/.]lesson)"))
_PROCESS_WORDS = (("/proc", "runtime/kernel"), re.compile(r"^/proc\b|/proc/|runtime/kernel"))
_NETWORK_WORDS = (("://", "curl", "wget"), re.compile(r"^(https?|ftp)://|\b(curl|wget)\s"))


def _code(cell_source: str) -> str:
    return "\n".join("pass" if _MAGIC.match(line) else line for line in cell_source.splitlines())


def _shell_findings(cell_source: str) -> list:
    """What the cell's ``!command`` and ``%%bash``-style lines do that a human should see (network tools)."""
    lines = [line for line in cell_source.splitlines() if _MAGIC.match(line)]
    if cell_source.lstrip().startswith("%%"):
        lines = cell_source.splitlines()
    return [f"uses the network ({m.group(1)} in a shell command)" for line in lines
            for m in [_SHELL_NETWORK.search(line)] if m]


def _name(node) -> str:
    """The dotted name of ``node`` as far as its chain of attributes and subscripts goes, down to a name or a call
    named by its function's last name (``get_ipython().events.register``, also of ``IPython.get_ipython()``;
    ``os.path.join``; ``?`` for anything else): linear in the chain, which no other call's name walks again (a call
    in the chain ends it)."""
    parts = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        parts.append("." + node.attr if isinstance(node, ast.Attribute) else "[...]")
        node = node.value
    if isinstance(node, ast.Call):
        parts.append("()")
        node = ast.Name(node.func.attr) if isinstance(node.func, ast.Attribute) else node.func
    parts.append(node.id if isinstance(node, ast.Name) else "?")
    return "".join(reversed(parts))


def _root_name(node):
    """The name ``node``'s chain starts from: ``np`` of ``np.testing.x``, ``get_ipython()`` (or an alias's call) of
    ``get_ipython().events``; None for anything else."""
    root = re.match(r"[^.\[]*", _name(node)).group()
    return None if root.startswith("?") else root


class _Scanner(ast.NodeVisitor):
    def __init__(self):
        self.aliases = {name: name for name in WATCHED_MODULES}
        self.aliases.update(np="numpy")
        self.ipython_names = {"get_ipython()"}
        self.findings = []
        self.lines = []  # the code being walked, as UTF-8 lines (the parser's column offsets count bytes)

    def _snippet(self, node, limit=80) -> str:
        """At most ``limit`` characters of ``node``'s source, from its first line: read, never rendered again."""
        try:
            line = self.lines[node.lineno - 1]
        except (AttributeError, IndexError):
            return "?"
        end = node.end_col_offset if node.end_lineno == node.lineno else len(line)
        text = line[node.col_offset:min(end, node.col_offset + 4 * limit)].decode("utf-8", "replace").rstrip("\r\n")
        return text[:limit]

    def _watched(self, node) -> str | None:
        root = _root_name(node)
        if root in self.ipython_names:
            return "IPython"
        return self.aliases.get(root)

    def visit_Import(self, node):
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top == "autograder":
                self.findings.append(f"imports {alias.name} (the course's grading package)")
            if top in NETWORK_MODULES:
                self.findings.append(f"uses the network (imports {alias.name})")
            if top in WATCHED_MODULES:
                self.aliases[alias.asname or top] = top
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        top = (node.module or "").split(".")[0]
        if top == "autograder":
            self.findings.append(f"imports from {node.module} (the course's grading package)")
        if top in NETWORK_MODULES:
            self.findings.append(f"uses the network (imports from {node.module})")
        if top in ("numpy", "IPython", "sys", "builtins"):
            for alias in node.names:
                if alias.name in ("testing", "linalg", "random"):
                    self.aliases[alias.asname or alias.name] = top
                if alias.name == "get_ipython":
                    self.ipython_names.add((alias.asname or alias.name) + "()")
        self.generic_visit(node)

    def _target(self, target, verb):
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._target(elt, verb)
            return
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            module = self._watched(target)
            if module:
                self.findings.append(f"{verb} {self._snippet(target)} ({module})")

    def visit_Assign(self, node):
        for target in node.targets:
            self._target(target, "rebinds")
        if isinstance(node.value, ast.Call) and _name(node.value.func) == "get_ipython":
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.ipython_names.add(target.id)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._target(node.target, "rebinds")
        self.generic_visit(node)

    def visit_Delete(self, node):
        for target in node.targets:
            self._target(target, "deletes")
        self.generic_visit(node)

    def visit_Call(self, node):
        name = _name(node.func)
        shown = name[:80]
        first = node.args[0] if node.args else None
        if name in ("setattr", "delattr", "object.__setattr__") and first is not None and self._watched(first):
            self.findings.append(f"{name} on {self._snippet(first)}")
        if name in ("sys.exit", "os._exit", "os.kill", "os.abort", "exit", "quit", "os.killpg"):
            self.findings.append(f"calls {name}() (leaves or kills the kernel)")
        if name.endswith(("set_custom_exc", "events.register", "register_magic_function")) and (
                self._watched(node.func) == "IPython" or "get_ipython" in name):
            self.findings.append(f"changes the kernel with {shown}()")
        if name in ("os.system", "os.popen") or name.startswith(("subprocess.", "shutil.", "os.remove",
                                                                  "os.unlink", "os.rename", "os.replace")):
            self.findings.append(f"calls {shown}() (files or processes)")
        if name == "open" and (len(node.args) > 1 or any(k.arg == "mode" for k in node.keywords)):
            mode = node.args[1] if len(node.args) > 1 else next(k.value for k in node.keywords if k.arg == "mode")
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
                self.findings.append(f"writes a file ({self._snippet(node)})")
        if name in ("__import__", "importlib.import_module") and first is not None and isinstance(
                first, ast.Constant) and str(first.value).startswith("autograder"):
            self.findings.append(f"imports {first.value} (the course's grading package)")
        if name in ("__import__", "importlib.import_module", "importlib.__import__") and first is not None and \
                not isinstance(first, ast.Constant):
            self.findings.append(f"imports a module by a name built at run time ({self._snippet(node)})")
        if name in ("exec", "eval", "compile", "builtins.exec", "builtins.eval"):
            self.findings.append(f"runs code built at run time ({name}())")
        if name in ("os.walk", "os.scandir", "glob.glob", "glob.iglob", "pathlib.Path.rglob") or name.endswith(".rglob"):
            self.findings.append(f"searches folders ({self._snippet(node, 60)})")
        self.generic_visit(node)

    def visit_Constant(self, node):
        text = node.value
        if not isinstance(text, str):
            return
        if _says(text, _GRADER_WORDS):
            self.findings.append(f"mentions the grading package in a string ({text[:60]!r})")
        if _says(text, _PROCESS_WORDS) or _names_kernel_file(text):
            self.findings.append(f"reads the process table or kernel files ({text[:60]!r})")
        if _says(text, _NETWORK_WORDS):
            self.findings.append(f"uses the network ({text[:60]!r})")

    def visit_FunctionDef(self, node):
        if node.name == "__eq__" and _always_true(node):
            self.findings.append("defines an __eq__ that always returns True")
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        if isinstance(node.body, ast.Constant) and node.body.value is True:
            self.findings.append("a lambda that always returns True (a fake comparison?)")
        self.generic_visit(node)


def _says(text: str, words_and_pattern) -> bool:
    words, pattern = words_and_pattern
    return any(word in text for word in words) and pattern.search(text) is not None


def _names_kernel_file(text: str) -> bool:
    """Whether a line of ``text`` holds ``kernel-`` and, after it, ``.json`` (a kernel's connection file): only the
    first ``kernel-`` of a line is tried, as a later one has less of the line after it, so each line is read once."""
    start = text.find("kernel-")
    while start >= 0:
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        if text.find(".json", start + len("kernel-"), end) >= 0:
            return True
        start = text.find("kernel-", end)
    return False


def _always_true(fn) -> bool:
    """Whether every ``return`` of ``fn`` itself (not of a function or class inside it, walked on their own visit,
    so that each node is walked once however deep definitions nest) returns ``True``."""
    returns, todo = [], list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return):
            returns.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return bool(returns) and all(isinstance(r.value, ast.Constant) and r.value.value is True for r in returns)


MAX_SCANNED_CHARS = 200_000  # a cell larger than this is not parsed (flagged instead): the scan's cost is bounded
MAX_NOTEBOOK_CHARS = 500_000  # the code scanned in one notebook (the lessons' solutions hold about 50,000 each)


def scan_source(source: str, scanner=None) -> list:
    """Findings in one cell's source (``scanner``: the notebook's, which remembers the names earlier cells bound).

    Never raises on what a cell holds: a cell over ``MAX_SCANNED_CHARS``, or one whose expressions nest too deep for
    the parser or the walk (``RecursionError``, the parser's ``MemoryError``), is a finding that it could not be
    scanned, beside whatever was found before the walk stopped."""
    scanner = scanner or _Scanner()
    scanner.findings = []
    if not isinstance(source, str):
        return ["a cell whose source is not text could not be scanned"]
    if len(source) > MAX_SCANNED_CHARS:
        return [f"a cell of {len(source):,} characters could not be scanned (more than {MAX_SCANNED_CHARS:,}): read "
                "it before trusting the grade"]
    code = _code(source)
    scanner.lines = code.encode("utf-8", "surrogatepass").splitlines(keepends=True)
    try:
        scanner.visit(ast.parse(code))
    except SyntaxError:
        pass
    except (RecursionError, MemoryError, ValueError) as exc:
        scanner.findings.append(f"a cell could not be scanned ({type(exc).__name__}: its code nests too deep): read "
                                "it before trusting the grade")
    return scanner.findings + _shell_findings(source)


def scan_notebook(nb, editable_only=True) -> list:
    """Findings (deduplicated, in order) over the notebook's code cells.

    ``editable_only``: skip locked cells whose source nbgrader restores from the release anyway (they are reported
    separately as edited cells when they differ). Cells are parsed while their code adds up to at most
    ``MAX_NOTEBOOK_CHARS``; a cell past that is not, and the findings say how many were left.
    """
    seen, findings = set(), []
    scanner = _Scanner()
    budget, skipped = MAX_NOTEBOOK_CHARS, 0
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if editable_only and meta.get("locked") and not meta.get("solution"):
            continue
        source = cell.get("source", "")
        parsed = len(source) if isinstance(source, str) and len(source) <= MAX_SCANNED_CHARS else 0
        if parsed > budget:
            skipped += 1
            continue
        budget -= parsed
        for f in scan_source(source, scanner):
            if f not in seen:
                seen.add(f)
                findings.append(f)
    if skipped:
        findings.append(f"the notebook could not be fully scanned: {skipped} cells were not read, past the "
                        f"{MAX_NOTEBOOK_CHARS:,} characters of code the scan reads in one notebook; read them before "
                        "trusting the grade")
    return findings
