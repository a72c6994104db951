"""The gradebook check's lines without a server (autograder/grading/records/dbcheck.py): the examples docs/grading.md
shows are what the check says, each driver message becomes one line with the command that fixes it and never the
password, and an output folder this user cannot write is refused before anything is made in it. The refusals by a real
server and a real read-only folder are in tests/grading/test_gradebook_check.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from autograder import course
from autograder.grading.records import dbcheck
from autograder.grading.records.settings import GradebookUnusable, Settings

SECRET = "s3cr3t-Pw"


def _server(url: str = f"postgresql+psycopg2://grader:{SECRET}@localhost/gradebook") -> dbcheck._Server:
    return dbcheck._Server(make_url(url))


def _docs_examples() -> list:
    text = (course.ROOT / "docs" / "grading.md").read_text(encoding="utf-8")
    section = text.split("**The gradebook is checked first.**", 1)[1]
    block = re.search(r"^```\n(.*?)^```", section, re.S | re.M).group(1)
    return [line[len("error: "):] for line in block.splitlines()]


def test_the_docs_show_what_the_check_says():
    sql_ascii, no_server = _docs_examples()
    assert dbcheck._database_problem(_server(), "SQL_ASCII", "SQL_ASCII", "off", False, "default", "public", True,
                                     {}) == sql_ascii
    refused = ('connection to server at "localhost" (::1), port 5433 failed: Connection refused\n'
               '\tIs the server running on that host and accepting TCP/IP connections?\n')
    assert dbcheck._connect_problem(_server(f"postgresql+psycopg2://grader:{SECRET}@localhost:5433/gradebook"),
                                    refused) == no_server


DRIVER = {  # libpq's messages (PostgreSQL 15), and what the line must say
    'connection to server at "db.example" (10.0.0.5), port 5432 failed: FATAL:  no pg_hba.conf entry for host '
    '"10.0.0.9", user "grader", database "gradebook", no encryption':
        "`host gradebook grader 10.0.0.9/32 scram-sha-256`",
    'connection to server on socket "/var/run/postgresql/.s.PGSQL.5432" failed: FATAL:  Peer authentication failed '
    'for user "grader"': "give DB= the host 127.0.0.1",
    'could not translate host name "db.example" to address: Name or service not known': "correct the host in DB=",
    'connection to server at "db.example" (10.0.0.5), port 5432 failed: timeout expired':
        f"did not answer within {dbcheck.CONNECT_TIMEOUT_S} s",
    'connection to server at "db.example" (10.0.0.5), port 5432 failed: fe_sendauth: no password supplied':
        "PGPASSWORD or in ~/.pgpass (a line `db.example:5432:gradebook:grader:<password>`, mode 600)",
    f'invalid connection option "x" in password={SECRET}': "check DB= and the server",
}


@pytest.mark.parametrize("text", sorted(DRIVER))
def test_each_failed_connection_is_one_line_with_its_fix_and_never_the_password(text):
    line = dbcheck._connect_problem(_server(f"postgresql+psycopg2://grader:{SECRET}@db.example/gradebook"), text)
    assert DRIVER[text] in line, line
    assert "\n" not in line and SECRET not in line


def test_a_remote_server_is_fixed_with_its_host_and_a_superuser():
    server = _server(f"postgresql+psycopg2://grader:{SECRET}@db.example:6543/gradebook")
    line = dbcheck._database_problem(server, "LATIN1", "LATIN1", "off", False, "default", "public", True,
                                     {"grade": True})
    assert line.endswith("copy it into a new UTF-8 database and grade into that: `createdb -h db.example -p 6543 -U "
                         "postgres -E UTF8 -T template0 -O grader gradebook_utf8`, `pg_dump -h db.example -p 6543 "
                         "gradebook | psql -h db.example -p 6543 gradebook_utf8`, then "
                         "DB=postgresql://grader@db.example:6543/gradebook_utf8"), line


@pytest.mark.parametrize("source, fix", [
    ("user", "ALTER ROLE grader RESET default_transaction_read_only"),
    ("database user", "ALTER ROLE grader IN DATABASE gradebook RESET default_transaction_read_only"),
    ("configuration file", "in the server's postgresql.conf"),
    ("client", "unset PGOPTIONS")])
def test_a_read_only_database_is_fixed_where_it_was_made_read_only(source, fix):
    line = dbcheck._database_problem(_server(), "UTF8", "UTF8", "on", False, source, "public", True, {})
    assert "is read-only for role grader" in line and fix in line, line


def test_a_role_that_may_not_create_or_write_the_tables_is_told_the_grant():
    assert "ALTER DATABASE gradebook OWNER TO grader" in \
        dbcheck._database_problem(_server(), "UTF8", "UTF8", "off", False, "default", "public", False, {})
    assert "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO grader" in \
        dbcheck._database_problem(_server(), "UTF8", "UTF8", "off", False, "default", "public", False,
                                  {"grade": False, "student": True})
    assert dbcheck._database_problem(_server(), "UTF8", "UTF8", "off", False, "default", "public", False,
                                     {"grade": True}) is None


def _settings(out: Path) -> Settings:
    return Settings(out=str(out), lessons=["01_warmup"], isolation="none")


def _unwritable(monkeypatch, *paths):
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: real(p, mode) and (Path(p) not in paths or not mode & os.W_OK))


def test_an_output_folder_this_user_cannot_write_is_refused_with_the_chmod(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    _unwritable(monkeypatch, out)
    with pytest.raises(GradebookUnusable, match=rf"^the output folder {out} is not writable by \S+: "
                                                rf"`chmod u\+w {out}`$"):
        dbcheck.check(_settings(out))
    _unwritable(monkeypatch, tmp_path)
    with pytest.raises(GradebookUnusable, match=rf"^the output folder {tmp_path}/new would be made in {tmp_path} "):
        dbcheck.check(_settings(tmp_path / "new"))
    assert not (tmp_path / "new").exists()


def test_an_output_folder_that_is_a_file_and_a_gradebook_that_is_a_folder_are_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(GradebookUnusable, match="is not a folder"):
        dbcheck.check(_settings(tmp_path / "file"))
    (tmp_path / "out" / "course" / "gradebook.db").mkdir(parents=True)
    with pytest.raises(GradebookUnusable, match="gradebook.db is not a file: move it away"):
        dbcheck.check(_settings(tmp_path / "out"))


def test_a_writable_sqlite_workspace_passes_and_is_left_as_it_was(tmp_path):
    dbcheck.check(_settings(tmp_path / "fresh"))
    assert not (tmp_path / "fresh").exists()


def test_the_tables_checked_are_nbgraders():
    from nbgrader.api import Base

    assert set(dbcheck.NBGRADER_TABLES) == {*Base.metadata.tables, "alembic_version"}
