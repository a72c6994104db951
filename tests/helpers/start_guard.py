"""A pytest plugin: a test that starts a Jupyter kernel, a browser or a server must be marked so.

``make test-fast`` (the inner loop) leaves out every test marked ``grading``, ``kernel``, ``browser`` or ``server``
(pyproject.toml declares them). So that no costly test slips into it unmarked, this plugin watches every unmarked
test, its fixtures included: starting a process whose command line is a kernel (``ipykernel``, the grading
sandbox's launcher, bubblewrap, nbgrader's autograde or validate, the grading command, a grading pool), a browser
(Chromium, Playwright's driver) or a server (JupyterLab or Jupyter Server, Dask, PostgreSQL) raises
``StartedUnmarked``, which fails the test with the marker to add. It is a ``BaseException`` so a test's own
``except Exception`` cannot hide it. ``tests/unit/test_start_guard.py`` proves it fails a test.
"""

from __future__ import annotations

import multiprocessing.util
import os
import re
import shlex
import subprocess

import pytest

PYTHONS = re.compile(r"^python[0-9.]*$")
KERNEL_MODULES = ("ipykernel", "ipykernel_launcher", "autograder.kernel.launcher", "autograder.grade",
                  "autograder.proofs.mutation")
SERVER_MODULES = ("jupyterlab", "jupyter_server", "notebook", "distributed.cli.dask_scheduler",
                  "distributed.cli.dask_worker")
SERVER_PROGRAMS = ("jupyter-lab", "jupyter-server", "dask", "dask-scheduler", "dask-worker", "postgres", "initdb",
                   "pg_ctl", "pg_ctlcluster")
MAKE_TARGETS = {"lab": "server", "formgrader": "server", "grade": "kernel", "mutants": "kernel", "test": "kernel"}
EXEMPT = ("grading", "kernel", "browser", "server")  # the marks that keep a test out of `make test-fast`
class StartedUnmarked(BaseException):
    """An unmarked test started a kernel, a browser or a server."""


def kind_of(command) -> str | None:
    """The kind of process a command line starts (a kernel, a browser or a server), or None for any other."""
    if isinstance(command, (str, bytes)):
        text = command.decode(errors="replace") if isinstance(command, bytes) else command
        try:
            argv = shlex.split(text)
        except ValueError:
            argv = text.split()
    else:
        argv = [a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in command]
    if not argv:
        return None
    program = os.path.basename(argv[0])
    if "chrom" in program or any("playwright" in a for a in argv[:3]):
        return "browser"
    if program == "bwrap":
        return "kernel"
    if program in SERVER_PROGRAMS:
        return "server"
    if program == "jupyter" and len(argv) > 1:
        return "server" if argv[1] in ("lab", "server", "notebook") else "kernel" if argv[1] in ("execute",) else None
    if program == "make":
        if "-n" in argv or "--dry-run" in argv:
            return None
        return next((MAKE_TARGETS[a] for a in argv[1:] if a in MAKE_TARGETS), None)
    if PYTHONS.match(program):
        if "-m" in argv[1:-1]:
            module, rest = argv[argv.index("-m") + 1], argv[argv.index("-m") + 2:]
            if module in KERNEL_MODULES or (module == "nbgrader" and rest[:1] in (["autograde"], ["validate"])) \
                    or (module == "pytest" and "--nbval" in rest):
                return "kernel"
            if module in SERVER_MODULES:
                return "server"
        if "-c" in argv[1:-1]:  # a process pool's server (forkserver) of the grading pool, or an inline kernel start
            code = argv[argv.index("-c") + 1]
            if "autograder.grading.run.pool" in code or "ipykernel" in code:
                return "kernel"
    return None


_watching: list = []  # the unmarked test being run (the innermost last)
_originals: dict = {}


def _refuse(command) -> None:
    kind = kind_of(command)
    if kind is not None and _watching:
        raise StartedUnmarked(
            f"{_watching[-1]} started a {kind} ({str(command)[:200]}) but is not marked: add @pytest.mark.{kind} "
            f"(@pytest.mark.grading when it grades with nbgrader) so `make test-fast` leaves it out")


def _install() -> None:
    if _originals:
        return
    _originals["popen_init"] = subprocess.Popen.__init__
    _originals["spawnv_passfds"] = multiprocessing.util.spawnv_passfds

    def popen_init(self, args, *a, **kw):
        _refuse(args)
        return _originals["popen_init"](self, args, *a, **kw)

    def spawnv_passfds(path, args, passfds):
        _refuse(args)
        return _originals["spawnv_passfds"](path, args, passfds)

    subprocess.Popen.__init__ = popen_init
    multiprocessing.util.spawnv_passfds = spawnv_passfds


def _remove() -> None:
    if _originals:
        subprocess.Popen.__init__ = _originals.pop("popen_init")
        multiprocessing.util.spawnv_passfds = _originals.pop("spawnv_passfds")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if any(item.get_closest_marker(m) for m in EXEMPT):
        yield
        return
    _watching.append(item.nodeid)
    _install()
    try:
        yield
    finally:
        _watching.pop()
        if not _watching:
            _remove()
