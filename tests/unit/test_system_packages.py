"""`make test` installs the Debian packages its tests need, as root, or stops at once naming them
(tests/system_packages.sh); `.ci/run` adds nothing to it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from autograder import course

SCRIPT = course.ROOT / "tests" / "system_packages.sh"


def _run(tmp_path: Path, *, root: bool, have: tuple = ()):
    """The script on a machine whose PATH holds only a fake apt-get (which logs its arguments) and the tools
    ``have`` names; Chromium and PostgreSQL looked for where there are none."""
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    log = tmp_path / "apt.log"
    (tools / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    for name in ("apt-get", *have):
        if name != "apt-get":
            (tools / name).write_text("#!/bin/sh\n")
        (tools / name).chmod(0o755)
    env = {"PATH": str(tools), "AS_ROOT": "yes" if root else "no",
           "CHROMIUM": str(tmp_path / "no-chromium"), "PG_BINARIES": str(tmp_path / "no-postgresql")}
    proc = subprocess.run(["/bin/bash", str(SCRIPT)], env=env, capture_output=True, text=True)
    return proc, log.read_text() if log.exists() else ""


def test_as_root_it_installs_what_is_missing(tmp_path):
    proc, apt = _run(tmp_path, root=True, have=("bwrap",))
    assert proc.returncode == 0, proc.stderr
    install = [line for line in apt.splitlines() if "install" in line]
    assert install and install[0].split()[-3:] == ["chromium", "fonts-liberation", "postgresql"], apt


def test_as_another_user_it_stops_naming_the_packages_and_the_command(tmp_path):
    proc, apt = _run(tmp_path, root=False)
    assert proc.returncode == 1 and apt == ""
    assert "sudo apt-get install --no-install-recommends chromium fonts-liberation postgresql bubblewrap" in proc.stderr
    assert "MHA_ALLOW_SKIPS=1 make test" in proc.stderr


def test_with_everything_there_it_does_nothing(tmp_path):
    (tmp_path / "no-chromium").write_text("")
    (tmp_path / "no-chromium").chmod(0o755)
    proc, apt = _run(tmp_path, root=True, have=("bwrap", "initdb"))
    assert proc.returncode == 0 and apt == "" and proc.stdout == ""


def test_ci_runs_the_readme_test_command_and_nothing_else():
    ci = (course.ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert commands[-1] == "make test" and "make test" in (course.ROOT / "README.md").read_text()
    assert not [c for c in commands if "MHA_REQUIRE" in c or "REQUIRE_POSTGRES" in c or "chromium" in c]
