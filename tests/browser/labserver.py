"""A JupyterLab server on loopback for the browser tests, isolated from the maintainer's own Jupyter setup.

Every server gets a random free port, a random token and its own Jupyter config, data, runtime, settings,
workspaces and IPython folders under a temporary directory, so nothing a maintainer installed or configured
changes what the tests see, and the tests never write to the maintainer's folders. News, update checks and the
announcements plugin are off (no network, no pop-ups over the notebook).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from autograder import course
from autograder.course import notebooks

FAILURES = course.ROOT / "build" / "browser-failures"  # screenshot, console and server log of a failed test
SCREENSHOTS = course.ROOT / "build" / "screenshots"  # one per lesson, written by a passing run

# Settings the tests need in every server: every cell in the DOM (no virtual scrolling), no autosave (the
# `make lab` smoke test must not write into lessons/), no news or update notifications.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"checkForUpdates": False,
                                                                         "fetchNews": "false"},
}
PAGE_CONFIG = {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def isolated_env(home: Path) -> dict:
    """Environment for a server (and so its kernels): private Jupyter folders under ``home``, the course root
    and ``lessons/`` on PYTHONPATH, and matplotlib left to choose the notebook's inline backend (the test tools
    set MPLBACKEND=Agg, which would hide every figure in a real front end)."""
    home = Path(home)
    dirs = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data", "JUPYTER_RUNTIME_DIR": "runtime",
            "JUPYTERLAB_SETTINGS_DIR": "lab-settings", "JUPYTERLAB_WORKSPACES_DIR": "lab-workspaces",
            "IPYTHONDIR": "ipython"}
    env = notebooks.nbgrader_env()
    for var, sub in dirs.items():
        (home / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(home / sub)
    env.pop("MPLBACKEND", None)
    env.pop("JUPYTER_PATH", None)
    env.pop("JUPYTER_PREFER_ENV_PATH", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for name, value in LAB_SETTINGS.items():
        path = home / "lab-settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value), encoding="utf-8")
    (home / "config" / "labconfig").mkdir(parents=True, exist_ok=True)
    (home / "config" / "labconfig" / "page_config.json").write_text(json.dumps(PAGE_CONFIG), encoding="utf-8")
    return env


def lab_args(port: int, token: str, *, allow_root: bool = True) -> list[str]:
    """Command-line options for a quiet, headless JupyterLab on loopback (``--allow-root`` too when root and
    ``allow_root``: CI runs as root; `make lab` adds it itself)."""
    root_user = ["--allow-root"] if allow_root and hasattr(os, "geteuid") and os.geteuid() == 0 else []
    return [*root_user, "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}", "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--ServerApp.terminals_enabled=False"]


class LabServer:
    """A running JupyterLab: ``url``, ``token``, ``root`` (the folder it serves) and ``log`` (its output)."""

    def __init__(self, cmd, *, cwd, root, home, port, token, env=None):
        self.root, self.home, self.port, self.token = Path(root), Path(home), port, token
        self.url = f"http://127.0.0.1:{port}"
        self.home.mkdir(parents=True, exist_ok=True)
        self.log = self.home / "server.log"
        self._log_file = open(self.log, "ab")
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env or isolated_env(home), stdout=self._log_file,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    @classmethod
    def start(cls, root, home, timeout=90):
        """``python -m jupyterlab`` serving ``root``."""
        port, token = free_port(), secrets.token_hex(16)
        cmd = [sys.executable, "-m", "jupyterlab", *lab_args(port, token), f"--ServerApp.root_dir={root}"]
        server = cls(cmd, cwd=root, root=root, home=home, port=port, token=token)
        server.wait_ready(timeout)
        return server

    def api(self, path, method="GET", timeout=10):
        req = urllib.request.Request(f"{self.url}/api/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def wait_ready(self, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with code {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.api("status", timeout=2)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                time.sleep(0.25)
        raise RuntimeError(f"JupyterLab did not answer on {self.url} within {timeout} s:\n{self.log_tail()}")

    def lab_url(self, path=""):
        """The address a learner would open: the file in JupyterLab, logged in with the token, fresh layout."""
        return f"{self.url}/lab/tree/{path}?reset&token={self.token}"

    def shutdown_kernels(self):
        """Stop every kernel and session, so the next test starts from a quiet machine."""
        try:
            for session in self.api("sessions"):
                self.api(f"sessions/{session['id']}", method="DELETE")
            for kernel in self.api("kernels"):
                self.api(f"kernels/{kernel['id']}", method="DELETE")
        except (urllib.error.URLError, OSError):
            pass

    def log_tail(self, n=80):
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.shutdown_kernels()
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(5)
        self._log_file.close()
