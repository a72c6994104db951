"""A real PostgreSQL server (Debian's postgresql package) on loopback, for the tests that grade into PostgreSQL
(the ``postgres_server`` fixture of tests/conftest.py: one server per test process, a database per use).

Skipped, with the reason, when PostgreSQL is not installed; CI installs it and sets AUTOGRADER_REQUIRE_POSTGRES=1,
which turns "not installed" into a failure.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

REQUIRED = os.environ.get("AUTOGRADER_REQUIRE_POSTGRES") == "1"


def _bin(name):
    return shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)),
                                      None)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, port: int, password: str):
        self.port, self.password = port, password

    def database(self, name: str, options: str = "") -> str:
        """The URL (with the password) of a new, empty database ``name``; ``options``: the rest of its CREATE DATABASE
        (e.g. ``ENCODING 'SQL_ASCII' TEMPLATE template0``)."""
        self.execute(f'CREATE DATABASE "{name}" {options}')
        return f"postgresql://grader:{self.password}@127.0.0.1:{self.port}/{name}"

    def execute(self, statement: str) -> None:
        """Run ``statement`` as the server's superuser (grader), outside a transaction."""
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="grader", password=self.password,
                                dbname="postgres")
        conn.autocommit = True
        try:
            conn.cursor().execute(statement)
        finally:
            conn.close()


def start():
    """Yield a ``Server`` running until the generator is closed."""
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
    port = free_port()
    subprocess.run([*as_server, initdb, "-D", str(base / "data"), "-U", "grader", "--auth=scram-sha-256",
                    f"--pwfile={base / 'pw'}", "-E", "UTF8"], check=True, capture_output=True)
    subprocess.run([*as_server, pg_ctl, "-D", str(base / "data"), "-l", str(base / "log"), "-w", "-t", "60", "-o",
                    f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c max_connections=50", "start"],
                   check=True, capture_output=True)
    try:
        yield Server(port, password)
    finally:
        subprocess.run([*as_server, pg_ctl, "-D", str(base / "data"), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
