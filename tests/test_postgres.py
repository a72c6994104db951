"""The grading command on a PostgreSQL gradebook: a real server (Debian's postgresql package) started on loopback.

Skipped, with the reason, when PostgreSQL is not installed; CI installs it and sets
AUTOGRADER_REQUIRE_POSTGRES=1, which turns "not installed" into a failure.
"""

from __future__ import annotations

import csv
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from autograder import course, grade, answers
from autograder.bugs import by_id
from autograder.grading.settings import COURSE_ID

LESSON = "01_warmup"
REQUIRED = os.environ.get("AUTOGRADER_REQUIRE_POSTGRES") == "1"
pytestmark = pytest.mark.grading


def _bin(name):
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)),
                                       None)
    return found


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url():
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    try:
        import psycopg2
    except ImportError:
        psycopg2 = None
    missing = [n for n, v in (("initdb", initdb), ("pg_ctl", pg_ctl), ("psycopg2", psycopg2)) if not v]
    if missing:
        reason = (f"PostgreSQL is not installed ({', '.join(missing)} not found; Debian: apt-get install postgresql, "
                  "pip: psycopg2-binary)")
        (pytest.fail if REQUIRED else pytest.skip)(reason)
    base = Path(tempfile.mkdtemp(prefix="autograder-pg-"))
    password = os.urandom(12).hex()
    (base / "pw").write_text(password + "\n")
    as_server = []
    if os.geteuid() == 0:  # initdb refuses root: the server runs as the postgres user
        as_server = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres")
        shutil.chown(base / "pw", "postgres")
    port = _free_port()
    subprocess.run([*as_server, initdb, "-D", str(base / "data"), "-U", "grader", "--auth=scram-sha-256",
                    f"--pwfile={base / 'pw'}", "-E", "UTF8"], check=True, capture_output=True)
    subprocess.run([*as_server, pg_ctl, "-D", str(base / "data"), "-l", str(base / "log"), "-w", "-t", "60", "-o",
                    f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c max_connections=50", "start"],
                   check=True, capture_output=True)
    try:
        conn = psycopg2.connect(host="127.0.0.1", port=port, user="grader", password=password, dbname="postgres")
        conn.autocommit = True
        conn.cursor().execute("CREATE DATABASE gradebook")
        conn.close()
        yield f"postgresql://grader:{password}@127.0.0.1:{port}/gradebook"
    finally:
        subprocess.run([*as_server, pg_ctl, "-D", str(base / "data"), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_a_class_graded_in_parallel_into_postgresql(postgres_url, tmp_path):
    from nbgrader.api import Gradebook

    expected = {"alice": 8.0, "bob": 0.0, "carol": 7.0}
    nbs = {"alice": answers.fill(LESSON), "bob": answers.student_notebook(LESSON),
           "carol": answers.fill(LESSON, {"softmax": by_id("softmax_no_max_subtraction").source})}
    for student, nb in nbs.items():
        course.write_notebook(nb, tmp_path / "class" / student / f"{LESSON}.ipynb")
    settings = grade.Settings(out=str(tmp_path / "out"), lessons=[LESSON], db_url=postgres_url, workers=2,
                              timeout=30)
    outcome = grade.run(tmp_path / "class", settings, progress=False, log=lambda *a: None)
    assert outcome["graded"] == 3
    with (tmp_path / "out" / "grades.csv").open() as fh:
        assert {r["student"]: float(r[f"{LESSON} score"]) for r in csv.DictReader(fh)} == expected
    with Gradebook(settings.db_url, COURSE_ID) as gb:  # the grades live in PostgreSQL, not in a SQLite file
        assert {s: float(gb.find_submission(LESSON, s).score) for s in expected} == expected
        assert sorted(s.id for s in gb.students) == sorted(expected)  # the canary student was removed again
    assert not (tmp_path / "out" / "course" / "gradebook.db").exists()
    assert oct((tmp_path / "out" / "course" / "nbgrader_config.py").stat().st_mode & 0o777) == "0o600"
    password = postgres_url.split(":")[2].split("@")[0].encode()
    holding = [p for p in (tmp_path / "out").rglob("*") if p.is_file() and password in p.read_bytes()]
    assert holding == [], holding  # the config takes it from the environment when nbgrader loads it
    assert "MHA_GRADEBOOK_URL" not in os.environ  # set for the run's nbgrader steps only
