"""The gradebook, checked before a run reads or writes anything: ``check(s)``.

A gradebook nbgrader cannot use would otherwise stop a run halfway, with a traceback and a half-built ``OUT``. So the
command first checks it and refuses one it cannot use with ``GradebookUnusable`` (exit status 2): one line that names
the problem and the command that fixes it, before anything is graded, unpacked or written.

* The output folder, and for SQLite (``OUT/course/gradebook.db``, or ``--db sqlite:///...``) the gradebook file and
  its folder, must be writable (SQLite writes a journal beside the file).
* A PostgreSQL gradebook (``--db``) must answer (host, port, the role's password, the database), be encoded in UTF-8
  (``initdb`` under a POSIX locale makes SQL_ASCII databases, and nbgrader then fails on the first character that is
  not ASCII: a lesson's own text has some), take writes (not ``default_transaction_read_only``, not a standby) and
  let the role create nbgrader's tables, or read and write them once they exist.

The password is never part of a message: a message names the server, the database and the role, and the driver's own
text is shown only with the password taken out.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
from pathlib import Path

from autograder.grading.records import dburl
from autograder.grading.records.settings import GradebookUnusable, Settings

CONNECT_TIMEOUT_S = 10
LOCAL_HOSTS = ("", "localhost", "127.0.0.1", "::1")
NBGRADER_TABLES = ("alembic_version", "assignment", "base_cell", "comment", "course", "grade", "grade_cells",
                   "notebook", "solution_cells", "source_cell", "student", "submitted_assignment",
                   "submitted_notebook", "task_cells")
READ_ONLY_SETTING = "default_transaction_read_only"


def check(s: Settings) -> None:
    """Refuse (``GradebookUnusable``) an output folder or gradebook this run could not write; return when both can be
    used. Writes nothing anywhere."""
    out = Path(s.out)
    instead = (f"copy OUT to a writable folder (`cp -a {shlex.quote(str(out))} <folder>`) and give OUT=<folder>"
               if _holds_something(out) else "give OUT= a writable folder")
    _writable_folder(out, "the output folder", instead)
    from sqlalchemy.engine import make_url

    url = make_url(dburl.with_password(s.gradebook_url))
    backend = url.get_backend_name()
    if backend == "sqlite":
        _sqlite(url, instead if url.database == str(s.course_root / "gradebook.db") else
                "give --db sqlite:/// a writable file")
    elif backend == "postgresql":
        _postgresql(url)


# ---------------------------------------------------------------------------------------------------- files

def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def _holds_something(folder: Path) -> bool:
    try:
        return any(folder.iterdir())
    except OSError:  # none, not a folder, or one this user cannot list
        return folder.is_dir()


def _existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (where a run would make the rest)."""
    path = Path(os.path.abspath(path))
    while not os.path.lexists(path) and path.parent != path:
        path = path.parent
    return path


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _not_writable(path: Path, what: str, instead: str) -> str:
    """Why ``path`` (which exists) cannot be written, and the command that fixes it; ``instead``: the other way out."""
    if _read_only_fs(path):
        return f"{what} {path} is on a read-only file system: {instead}"
    try:
        owner = pwd.getpwuid(path.stat().st_uid).pw_name
    except (KeyError, OSError):
        owner = None
    fix = f"`chmod u+w {shlex.quote(str(path))}`" if owner == _user() else \
        instead + (f" (it belongs to {owner})" if owner else "")
    return f"{what} {path} is not writable by {_user()}: {fix}"


def _writable_folder(folder: Path, what: str, instead: str) -> None:
    """``folder``, or the nearest ancestor a run would make it in, is a folder this user can write."""
    found = _existing(folder)
    if found != Path(os.path.abspath(folder)):
        what = f"{what} {folder} would be made in"
    if not found.is_dir():
        raise GradebookUnusable(f"{what} {found} is not a folder: {instead}")
    if not os.access(found, os.W_OK | os.X_OK):
        raise GradebookUnusable(_not_writable(found, what, instead))


def _sqlite(url, instead: str) -> None:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    file = Path(os.path.abspath(database))
    _writable_folder(file.parent, "the folder of the SQLite gradebook", instead)
    if os.path.lexists(file):
        if not file.is_file():
            raise GradebookUnusable(f"the SQLite gradebook {file} is not a file: move it away, or {instead}")
        if not os.access(file, os.R_OK | os.W_OK):
            raise GradebookUnusable(_not_writable(file, "the SQLite gradebook", instead))


# ---------------------------------------------------------------------------------------------------- PostgreSQL

class _Server:
    """What the messages say of a PostgreSQL URL, and the flags the fixing commands need to reach its server."""

    def __init__(self, url):
        self.url = url
        self.host, self.port = url.host or "", url.port
        self.database, self.role = url.database or "", url.username or _user()
        self.password = url.password
        self.local = self.host in LOCAL_HOSTS or self.host.startswith("/")
        self.where = f"{self.host}:{self.port or 5432}" if self.host else f"the local socket (port {self.port or 5432})"
        self.flags = ("" if self.local else f"-h {shlex.quote(self.host)} ") + \
            (f"-p {self.port} " if self.port and self.port != 5432 else "")
        self.named = f"the gradebook database {self.database} on {self.where}"

    def admin(self, command: str) -> str:
        """``command`` (createdb, psql, ...) as a PostgreSQL superuser would run it for this server."""
        program, _, rest = command.partition(" ")
        if self.local:
            return f"`sudo -u postgres {program} {self.flags}{rest}`"
        return f"`{program} {self.flags}-U postgres {rest}`"

    def psql(self, database: str, sql: str) -> str:
        return self.admin(f"psql -d {shlex.quote(database)} -c {shlex.quote(sql)}")

    def createdb(self, name: str) -> str:
        return f"createdb -E UTF8 -T template0 -O {shlex.quote(self.role)} {shlex.quote(name)}"

    def url_of(self, database: str) -> str:
        """The URL of another database on this server, as DB= takes it (no password, no driver)."""
        other = self.url.set(database=database, drivername="postgresql")._replace(password=None)
        return other.render_as_string(hide_password=False)

    def scrub(self, text: str) -> str:
        return text.replace(self.password, "***") if self.password else text


def _ident(name: str) -> str:
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else '"' + name.replace('"', '""') + '"'


def _postgresql(url) -> None:
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    server, engine = _Server(url), None
    try:
        engine = sa.create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
        with engine.connect() as conn:
            facts = conn.execute(sa.text(
                "SELECT current_setting('server_encoding'), current_setting('client_encoding'), "
                "current_setting('transaction_read_only'), pg_is_in_recovery(), "
                "(SELECT source FROM pg_settings WHERE name = :setting), current_schema(), "
                "coalesce(has_schema_privilege(current_schema(), 'CREATE'), false)"),
                {"setting": READ_ONLY_SETTING}).one()
            tables: dict = dict(conn.execute(sa.text(
                "SELECT c.relname, has_table_privilege(c.oid, 'SELECT, INSERT, UPDATE, DELETE') FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
                "AND c.relkind IN ('r', 'p') AND c.relname = ANY(:names)"), {"names": list(NBGRADER_TABLES)}).all())
    except sa.exc.DBAPIError as exc:
        raise GradebookUnusable(_connect_problem(server, str(exc.orig))) from None
    except ImportError as exc:  # the driver
        raise GradebookUnusable(f"the PostgreSQL driver cannot be imported ({exc}): `pip install psycopg2-binary` "
                                "in the course's venv") from None
    finally:
        if engine is not None:
            engine.dispose()
    encoding, client, read_only, standby, source, schema, can_create = facts
    problem = _database_problem(server, encoding, client, read_only, standby, source, schema, can_create, tables)
    if problem:
        raise GradebookUnusable(problem)


def _connect_problem(server: _Server, text: str) -> str:
    """The one line that says why the connection failed (``text``: the driver's message) and what fixes it."""
    text = server.scrub(text)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    detail = first.split("failed: ", 1)[-1].replace("FATAL:  ", "")
    pgpass = (f"put the right password in PGPASSWORD or in ~/.pgpass (a line `{server.host or 'localhost'}:"
              f"{server.port or 5432}:{server.database}:{server.role}:<password>`, mode 600), or the whole URL in "
              f"{dburl.ENV}")
    if "does not exist" in text and "database" in text:
        return (f"there is no database {server.database} on the PostgreSQL server at {server.where}: create it, in "
                f"UTF-8 and owned by the grading role: {server.admin(server.createdb(server.database))}")
    if "password authentication failed" in text:
        return (f"the PostgreSQL server at {server.where} refused the password of role {server.role} ({detail}): "
                f"{pgpass}; a role that does not exist yet: {server.admin(f'createuser --pwprompt {server.role}')}")
    if "no password supplied" in text:
        return f"the PostgreSQL server at {server.where} asks for the password of role {server.role}: {pgpass}"
    if "Peer authentication failed" in text or "Ident authentication failed" in text:
        return (f"the PostgreSQL server at {server.where} lets only the system user {server.role} in as role "
                f"{server.role} ({detail}): give DB= the host 127.0.0.1 to log in with a password "
                f"(postgresql://{server.role}@127.0.0.1/{server.database})")
    hba = re.search(r'no pg_hba\.conf entry for host "([^"]+)"', text)
    if hba:
        return (f"the PostgreSQL server at {server.where} does not let role {server.role} in from {hba.group(1)} "
                f"({detail}): add the line `host {server.database} {server.role} {hba.group(1)}/32 scram-sha-256` to "
                f"its pg_hba.conf, then {server.psql('postgres', 'SELECT pg_reload_conf()')}")
    if "could not translate host name" in text:
        return (f"the host {server.host} of the PostgreSQL gradebook is not known here ({detail}): correct the host "
                f"in DB=")
    if "timeout expired" in text:
        return (f"the PostgreSQL server at {server.where} did not answer within {CONNECT_TIMEOUT_S} s: check the "
                f"host and port in DB=, the server's listen_addresses and any firewall between")
    if "Connection refused" in text or "No such file or directory" in text:
        start = ("start it (Debian: `pg_lsclusters` lists the servers, their ports and states; `sudo pg_ctlcluster "
                 "<version> <name> start` starts one; not installed: `sudo apt-get install postgresql`)"
                 if server.local else "start it")
        return (f"no PostgreSQL server answers at {server.where} ({detail}): {start}, or "
                f"give DB= the host and port it listens on")
    return f"cannot open {server.named} as role {server.role} ({detail}): check DB= and the server"


def _database_problem(server: _Server, encoding, client, read_only, standby, source, schema, can_create,
                      tables: dict) -> str | None:
    """The one line that says why a database that answered cannot be the gradebook, or None."""
    name = server.database
    if encoding.upper() not in ("UTF8", "UTF-8"):
        new = name + "_utf8"
        fix = (f"copy it into a new UTF-8 database and grade into that: {server.admin(server.createdb(new))}, "
               f"`pg_dump {server.flags}{shlex.quote(name)} | psql {server.flags}{shlex.quote(new)}`, then "
               f"DB={server.url_of(new)}" if tables else
               f"create it again in UTF-8 (it holds no gradebook yet): {server.admin(f'dropdb {shlex.quote(name)}')}, "
               f"then {server.admin(server.createdb(name))}")
        return (f"{server.named} is encoded {encoding}, not UTF-8 (initdb under a POSIX locale makes SQL_ASCII "
                f"databases), so nbgrader would fail on the first character that is not ASCII: {fix}")
    if client.upper() not in ("UTF8", "UTF-8"):
        return (f"the connection to {server.named} uses client_encoding {client}, not UTF-8: `unset "
                f"PGCLIENTENCODING` (or remove the client_encoding set for the role or the database)")
    if standby:
        return (f"{server.named} is a standby server, which only reads: give DB= the address of its primary server")
    if read_only == "on":
        reset = {"database": f"ALTER DATABASE {_ident(name)} RESET {READ_ONLY_SETTING}",
                 "user": f"ALTER ROLE {_ident(server.role)} RESET {READ_ONLY_SETTING}",
                 "database user": f"ALTER ROLE {_ident(server.role)} IN DATABASE {_ident(name)} RESET "
                                  f"{READ_ONLY_SETTING}"}.get(source)
        fix = (server.psql("postgres", reset) if reset else
               f"set {READ_ONLY_SETTING} = off in the server's postgresql.conf, then "
               f"{server.psql('postgres', 'SELECT pg_reload_conf()')}" if source == "configuration file" else
               f"unset PGOPTIONS, which sets {READ_ONLY_SETTING}" if source in ("client", "environment variable")
               else f"turn off its {READ_ONLY_SETTING} ({source})")
        return f"{server.named} is read-only for role {server.role} ({READ_ONLY_SETTING} is on): {fix}"
    if schema is None:
        return (f"role {server.role} has no schema on its search_path in {server.named}: "
                f"{server.psql(name, f'ALTER ROLE {_ident(server.role)} RESET search_path')}")
    if not tables and not can_create:
        return (f"role {server.role} may not create tables in schema {schema} of {server.named} (since PostgreSQL "
                f"15 only the database's owner may): make the role its owner, "
                f"{server.psql('postgres', f'ALTER DATABASE {_ident(name)} OWNER TO {_ident(server.role)}')}")
    denied = sorted(table for table, allowed in tables.items() if not allowed)
    if denied:
        grant = (f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {_ident(schema)} TO "
                 f"{_ident(server.role)}")
        return (f"role {server.role} may not write nbgrader's tables in {server.named} ({', '.join(denied[:4])}"
                f"{', ...' if len(denied) > 4 else ''}): {server.psql(name, grant)}")
    return None
