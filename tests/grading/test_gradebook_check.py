"""The gradebook is checked first (autograder/grading/records/dbcheck.py): a gradebook the run could not use is refused
by the grading command, as ``make grade`` runs it, with status 2 and one line that names the problem and the command
that fixes it, before anything is graded, unpacked or written. Each case grades a zip of a class (whose unpacking would
change ``OUT``) into an ``OUT`` that holds an earlier run's files, or none, and checks that ``OUT`` is exactly as it
was, and that the password is in no output.

PostgreSQL cases use a real server (tests/helpers/postgres_server.py): a SQL_ASCII database (as ``initdb`` under a
POSIX locale makes them), a port with no server, a read-only database, no such database, a wrong password. The SQLite
cases make ``OUT``, or its gradebook file, read-only: as root in a mount namespace of the command's own (a read-only
bind mount, which root cannot write through), as an ordinary user by its mode.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from folder_state import snapshot
from postgres_server import free_port

from autograder import course, grade
from autograder.course import answers, notebooks

LESSON = "01_warmup"
pytestmark = pytest.mark.grading
PG = "the gradebook database {db} on 127.0.0.1:{port}"


@pytest.fixture(scope="module")
def class_zip(tmp_path_factory) -> Path:
    """A zip of two students' folders, one named with a letter that is not ASCII."""
    base = tmp_path_factory.mktemp("class")
    archive = base / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for student in ("alice", "Zoë"):
            notebooks.write_notebook(answers.fill(LESSON), base / student / f"{LESSON}.ipynb")
            zf.write(base / student / f"{LESSON}.ipynb", f"{student}/{LESSON}.ipynb")
    return archive


def earlier_run(out: Path) -> None:
    """What an earlier run left in ``out`` (as far as a refused run could touch it): its unpacked zip, a record, the
    grades and a SQLite gradebook."""
    notebooks.write_notebook(answers.student_notebook(LESSON), out / "unzipped" / "bob" / f"{LESSON}.ipynb")
    (out / "state" / "bob").mkdir(parents=True)
    (out / "state" / "bob" / f"{LESSON}.json").write_text('{"graded": true}\n')
    (out / "grades.csv").write_text("student,total\nbob,0\n")
    (out / "course").mkdir()
    with sqlite3.connect(out / "course" / "gradebook.db") as db:
        db.execute("CREATE TABLE grade (id TEXT)")
    db.close()


def refused(submissions: Path, out: Path, *, url: str = "", secret: str = "", prefix=()) -> str:
    """Run the command, check that it refused in one line and left ``out`` as it was; return the line."""
    env = notebooks.nbgrader_env()
    env.pop("MHA_GRADEBOOK_URL", None)
    if url:
        env["MHA_GRADEBOOK_URL"] = url
    before = snapshot(out)
    proc = subprocess.run([*prefix, sys.executable, "-m", "autograder.grade", str(submissions), "--out", str(out),
                           "--lessons", LESSON, "--quiet"], cwd=course.ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == grade.EXIT_LAYOUT, proc.stdout + proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("error: "), line
    assert snapshot(out) == before  # nothing unpacked, graded, recorded or made, not even OUT itself
    assert not secret or secret not in proc.stdout + proc.stderr
    return line[len("error: "):]


CASES = {
    "sql_ascii": (lambda server, name: server.database(name, "ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' "
                                                             "TEMPLATE template0"),
                  rf"{PG} is encoded SQL_ASCII, not UTF-8 .* create it again in UTF-8 \(it holds no gradebook yet\): "
                  r"`sudo -u postgres dropdb -p {port} {db}`, then `sudo -u postgres createdb -p {port} -E UTF8 -T "
                  r"template0 -O grader {db}`"),
    "read_only": (lambda server, name: _read_only(server, name),
                  rf"{PG} is read-only for role grader \(default_transaction_read_only is on\): `sudo -u postgres psql "
                  r"-p {port} -d postgres -c 'ALTER DATABASE {db} RESET default_transaction_read_only'`"),
    "no_server": (lambda server, name: f"postgresql://grader:{server.password}@127.0.0.1:{free_port()}/{name}",
                  r"no PostgreSQL server answers at 127\.0\.0\.1:{port} \(Connection refused\): start it .*"),
    "no_database": (lambda server, name: f"postgresql://grader:{server.password}@127.0.0.1:{server.port}/{name}",
                    r"there is no database {db} on the PostgreSQL server at 127\.0\.0\.1:{port}: create it, in UTF-8 "
                    r"and owned by the grading role: `sudo -u postgres createdb -p {port} -E UTF8 -T template0 -O "
                    r"grader {db}`"),
    "wrong_password": (lambda server, name: f"postgresql://grader:not-{server.password}@127.0.0.1:{server.port}/"
                                            f"{server.database(name).rsplit('/', 1)[1]}",
                       r"the PostgreSQL server at 127\.0\.0\.1:{port} refused the password of role grader .*"),
}


def _read_only(server, name: str) -> str:
    url = server.database(name)
    server.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    return url


@pytest.mark.server
@pytest.mark.parametrize("case, out_held", [(case, True) for case in sorted(CASES)] + [("sql_ascii", False),
                                                                                       ("no_server", False)])
def test_a_postgresql_gradebook_it_cannot_use_is_refused_first(postgres_server, class_zip, tmp_path, case, out_held):
    """Each refused in one line that names it and the command that fixes it; an earlier run's OUT, or none, stays
    as it was."""
    make, expected = CASES[case]
    name = f"check_{case}_{out_held:d}"
    url = make(postgres_server, name)
    out = tmp_path / "out"
    if out_held:
        earlier_run(out)
    port = url.rsplit(":", 1)[1].split("/")[0]
    line = refused(class_zip, out, url=url, secret=postgres_server.password)
    assert re.fullmatch(expected.format(db=name, port=port), line), line
    assert out_held or not out.exists()


def _read_only_prefix(target: Path):
    """The command's prefix that makes ``target`` read-only for it: as root, a read-only bind mount in a mount
    namespace of its own; otherwise no prefix (the caller takes the write bits away)."""
    if os.geteuid() != 0:
        return ()
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here for a read-only bind mount ({probe.stderr.decode().strip()})")
    return ("unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"', str(target))


@pytest.mark.parametrize("target", ["OUT", "OUT/course/gradebook.db"])
def test_a_sqlite_gradebook_or_out_it_cannot_write_is_refused_first(class_zip, tmp_path, target):
    out = tmp_path / "out"
    earlier_run(out)
    path = out if target == "OUT" else out / "course" / "gradebook.db"
    prefix = _read_only_prefix(path)
    modes = {p: p.stat().st_mode for p in [out, *out.rglob("*")]}
    if not prefix:
        for p in (path, *(path.rglob("*") if path.is_dir() else ())):
            p.chmod(p.stat().st_mode & ~0o222)
    try:
        line = refused(class_zip, out, prefix=prefix)
    finally:
        for p, mode in modes.items():
            p.chmod(mode)
    what = "the output folder" if target == "OUT" else "the SQLite gradebook"
    if prefix:
        assert line == (f"{what} {path} is on a read-only file system: copy OUT to a writable folder (`cp -a {out} "
                        f"<folder>`) and give OUT=<folder>"), line
    else:
        assert line.startswith(f"{what} {path} is not writable by ") and f"`chmod u+w {path}`" in line, line
