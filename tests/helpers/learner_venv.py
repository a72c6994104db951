"""A learner's machine: the bundle unzipped into an empty folder and a fresh venv made from its requirements.txt.

The venv is made the way a learner makes it (``python -m venv``, then pip installs ``requirements.txt``, which is
the Binder set, ``binder/environment.yml``), with two savings that change nothing it holds: the venv is created
without its own copy of pip (the test's pip installs into it with ``--python``, saving ~10 s of ``ensurepip``) and
pip does not byte-compile (the first kernel compiles what it imports). pip's cache serves what it holds.
Notebooks run in it with its own ``jupyter execute`` (nbclient), so its kernel and its packages run them.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat

from autograder.publish import bundle


class LearnerMachine:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.zip = bundle.write(self.folder / "bundle.zip")
        self.unzipped = self.folder / "unzipped"
        with zipfile.ZipFile(self.zip) as zf:
            zf.extractall(self.unzipped)
        self.lessons = self.unzipped / bundle.FOLDER
        self.venv = self.folder / "venv"
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(self.venv)], check=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(self.venv / "bin" / "python"), "install",
                               "--quiet", "--no-compile", "--disable-pip-version-check",
                               "-r", str(self.lessons / "requirements.txt")], capture_output=True, text=True)
        assert proc.returncode == 0, "pip could not install the bundle's requirements.txt:\n" + proc.stderr[-4000:]
        self.install_seconds = time.monotonic() - start

    def env(self) -> dict:
        """A learner's environment: the venv first on PATH, nothing of the course on PYTHONPATH, and Python
        keeping what it compiles (as it does by default), so the modules are compiled by the first kernel only."""
        drop = ("PYTHONPATH", "VIRTUAL_ENV", "JUPYTER_PATH", "PYTHONDONTWRITEBYTECODE")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env["PATH"] = str(self.venv / "bin") + os.pathsep + env.get("PATH", "")
        env.setdefault("MPLBACKEND", "Agg")
        return env

    def run_alone(self, notebooks: dict, timeout=900) -> dict:
        """Run every notebook of ``{key: (lesson, notebook)}`` as the only file of an empty folder of its own,
        ``alone/<key>/``, with the venv's ``jupyter execute`` (one process for all: it starts a kernel for each);
        return ``{key: (folder, executed notebook)}``.

        A last cell, added here, prints the kernel's ``sys.prefix``: each run is proven to be the venv's."""
        paths = {}
        for key, (lesson, nb) in notebooks.items():
            folder = self.folder / "alone" / key
            folder.mkdir(parents=True)
            nb = nbformat.from_dict(copy.deepcopy(nb))
            nb.cells.append(nbformat.v4.new_code_cell("import sys; print('kernel prefix:', sys.prefix)"))
            paths[key] = folder / f"{lesson}.ipynb"
            nbformat.write(nb, paths[key])
        proc = subprocess.run([str(self.venv / "bin" / "jupyter"), "execute", "--inplace", "--allow-errors",
                               "--timeout=120", *map(str, paths.values())], cwd=self.folder, env=self.env(),
                              capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, proc.stderr[-4000:]
        ran = {}
        for key, path in paths.items():
            nb = nbformat.read(path, as_version=4)
            prefix = "".join(o.get("text", "") for o in nb.cells.pop().outputs)
            assert f"kernel prefix: {self.venv}" in prefix, f"{key} did not run in the learner venv: {prefix!r}"
            ran[key] = (path.parent, nb)
        return ran
