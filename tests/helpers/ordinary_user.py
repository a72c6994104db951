"""An ordinary user of the grading machine (no root), made by root for a test: an account with a home, a venv made
from the system's Python in a folder the user owns, a copy of the course there, and commands run as that user.

The venv is made the way that user would make it (``python3 -m venv``, as the user); its packages are those of the
venv running the tests, hard-linked into it (a copy of the same files, made in a fraction of a second, where pip
would take minutes): both interpreters are CPython of the same minor version, so the same wheels serve both.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from autograder import course

SYSTEM_PYTHON = "/usr/bin/python3"


def account(name: str) -> pwd.struct_passwd:
    """The user ``name``, created with a home folder (``useradd -m``) unless it exists."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True)
        return pwd.getpwnam(name)


def run_as(user: pwd.struct_passwd, argv: list, *, cwd, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``argv`` as ``user`` (its uid, gid and no other group)."""
    return subprocess.run(argv, cwd=cwd, env=env, user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                          capture_output=True, text=True, timeout=timeout)


def _link_tree(src: Path, dest: Path) -> None:
    """``src``'s files hard-linked under ``dest`` (copied where a link cannot be made, such as across disks), their
    compiled modules too: imports need not compile them again."""
    def link(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dest, copy_function=link, dirs_exist_ok=True, symlinks=True)


def venv(user: pwd.struct_passwd, folder: Path) -> Path:
    """A venv at ``folder`` made by ``user`` from the system's Python, holding the packages of the tests' venv."""
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, check=True).stdout.split()
    assert version == [str(v) for v in sys.version_info[:2]], (
        f"{SYSTEM_PYTHON} is Python {'.'.join(version)}, the tests' Python {sys.version_info[:2]}: "
        "their packages cannot be shared")
    made = run_as(user, [SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(folder)], cwd=folder.parent,
                  env={"PATH": "/usr/bin:/bin", "HOME": user.pw_dir}, timeout=120)
    assert made.returncode == 0, made.stderr
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    asked = run_as(user, [str(folder / "bin" / "python"), "-c", where], cwd=folder, env={"HOME": user.pw_dir},
                   timeout=60)
    site = Path(asked.stdout.strip())
    _link_tree(Path(sysconfig.get_path("purelib")), site)
    _link_tree(Path(sys.prefix) / "share", folder / "share")  # Jupyter's data files (nbconvert's templates)
    return folder


def copy_course(user: pwd.struct_passwd, dest: Path) -> Path:
    """The course's code and lessons, copied to ``dest`` and owned by ``user``."""
    for name in ("autograder", "solutions", "lessons"):
        shutil.copytree(course.ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    chown(user, dest)
    return dest


def chown(user: pwd.struct_passwd, path: Path) -> None:
    for item in [path, *path.rglob("*")]:
        os.lchown(item, user.pw_uid, user.pw_gid)
