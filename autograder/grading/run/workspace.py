"""The grading course folder, ``DIR/course``, and the sandbox its kernels start in.

``prepare_course`` builds the course from the lesson sources (rebuilt, and every grade redone, when lessons, hidden
checks or settings change), appends the grading settings to its ``nbgrader_config.py`` (the autograde pipeline
itself is declared once, in ``autograder/nbgrader_config.py``), installs the sandboxed kernelspec with the only
course modules a kernel may import, and releases the lessons. ``stage`` copies every notebook still to grade into
``course/submitted`` (the originals are only read), with the flags read from the original.

Safety: kernels start through ``autograder.kernel.launcher`` (as root: bubblewrap namespaces, a uid and a control group of
their own per notebook, no network, a file system of read-only binds), cells are stopped after ``--timeout``
seconds and notebooks after ``--notebook-timeout``, output is capped, a dead kernel costs only the cells it did not
run (``autograder/grading/pipeline/execute.py``), and suspicious code is flagged for a human
(``autograder/grading/intake/code_scan.py``). ``preflight`` refuses to grade as root without bubblewrap;
``isolation_notes`` says in the report what a weaker sandbox did not bound.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from autograder import course
from autograder.course import notebooks
from autograder.grading.intake import class_roster, code_scan, file_access, size_limits
from autograder.grading.records import dburl, findings, gradebook, state
from autograder.grading.records.settings import COURSE_ID, Settings, SetupError
from autograder.kernel import cgroups, one_cpu, sandbox


def config_lines(s: Settings) -> str:
    lines = [
        "# Grading settings written by autograder/grading/run/workspace.py",
        "# the autograde pipeline itself is declared once, in autograder/nbgrader_config.py (loaded above)",
        f"c.Execute.timeout = {int(s.timeout)}",
        f"c.Execute.kernel_name = {sandbox.KERNEL_NAME!r}",
        "c.Execute.shutdown_kernel = 'immediate'  # every output is in; a graceful stop costs ~1 s per notebook",
        f"c.SafeExecute.max_output_bytes = {int(s.max_output) + 1000}",  # the kernel's own cap comes first
        f"c.SafeExecute.max_notebook_output_bytes = {int(s.max_notebook_output)}",
        f"c.SafeExecute.unresponsive_grace = {min(10, int(s.timeout))}",
        f"c.SafeExecute.isolation = {s.isolation!r}",
        f"c.SafeExecute.notebook_timeout = {int(s.notebook_timeout)}",
        f"c.SafeExecute.kernel_memory_mb = {int(s.memory_mb)}",  # the kernelspec's limit (install_kernelspec below)
        "c.Autograde.create_student = False",
        f"c.CourseDirectory.course_id = {COURSE_ID!r}",
        "# nbgrader's exchange of this course, a folder of its own (prepare_course makes it), so that formgrader opens",
        "# without a warning; nothing is handed in here (a class that uses an exchange is collected in its own course)",
        f"c.Exchange.root = {str(exchange_root(s))!r}",
    ]
    if s.db_url:  # no password here: it comes from the environment when nbgrader loads this file
        lines += ["from autograder.grading.records.dburl import with_password",
                  f"c.CourseDirectory.db_url = with_password({dburl.without_password(s.db_url)!r})"]
    return "\n".join(lines) + "\n"


def exchange_root(s: Settings) -> Path:
    """The grading course's own nbgrader exchange folder (empty: formgrader only checks that it exists)."""
    return s.course_root / "exchange"


def grading_env(s: Settings) -> dict:
    """The environment of nbgrader's steps: the course's own kernelspec first on ``JUPYTER_PATH``."""
    env = notebooks.nbgrader_env()
    env["JUPYTER_PATH"] = os.pathsep.join([str(Path(s.out) / "jupyter")] + [p for p in [env.get("JUPYTER_PATH")] if p])
    return env


def course_changed(s: Settings) -> bool:
    """Whether the course must be rebuilt and every notebook graded again: the hidden checks, a lesson's source or a
    setting that decides a score changed since the last run (``Settings.key``; the set of lessons graded is not
    part of it)."""
    marker = Path(s.out) / "course.json"
    return marker.exists() and (json.loads(marker.read_text()).get("key") != s.key
                                or not (s.course_root / "release").is_dir())


def prepare_course(s: Settings, log, carried: "dict | None" = None) -> "Rebuild | None":
    """Build (or reuse) DIR/course. Rebuilt, and every grade redone, when lessons, checks or settings change
    (``course_changed``); a lesson graded for the first time is added to the course, and nothing else is regraded.

    A rebuild first moves the old course folder, state records and marker aside, and writes down ``carried``
    (``marks.before_rebuild``: the instructor's marks, read before anything changed) for the regrade to put back;
    the returned ``Rebuild`` puts everything back (``restore``: the canary failed, so nothing of the earlier runs may
    be lost) or deletes the old copy (``discard``).
    """
    out = Path(s.out)
    marker = out / "course.json"
    if marker.exists() and not course_changed(s):
        built = json.loads(marker.read_text()).get("lessons", [])
        new = [lesson for lesson in s.lessons if lesson not in built]
        if new:
            log(f"lessons added to the course: {', '.join(new)}; nothing graded before is graded again")
            notebooks.write_sources(s.course_root, new)
            release_lessons(s, new)
            marker.write_text(json.dumps({"key": s.key, "lessons": built + new}) + "\n")
        return None
    rebuild = None
    if marker.exists():
        log("hidden checks, a lesson or settings changed since the last run: grading every notebook again; "
            "your marks are carried over to every written answer whose text is unchanged")
        _keep_gradebook(s, log)
        rebuild = Rebuild(out)
        for (student, lesson), kept in (carried or {}).items():
            state.write_carried(s, student, lesson, kept)
    shutil.rmtree(s.course_root, ignore_errors=True)
    shutil.rmtree(out / "state", ignore_errors=True)
    notebooks.make_course(s.course_root, s.lessons, generate=False)
    config = s.course_root / "nbgrader_config.py"
    with config.open("a", encoding="utf-8") as fh:
        fh.write(config_lines(s))
    exchange_root(s).mkdir()
    os.chmod(config, 0o600)
    sandbox.install_kernelspec(out / "jupyter", memory_mb=s.memory_mb, max_output=s.max_output,
                               library=write_kernel_library(kernel_library(s)), isolation=s.isolation)
    # build matplotlib's font cache once, as this user, so each sandboxed kernel can start from a copy of it
    # (while nbgrader releases the lessons)
    fonts = subprocess.Popen([sys.executable, "-c", "import matplotlib.font_manager"], env=grading_env(s),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        release_lessons(s, s.lessons)
    finally:
        fonts.wait()
    marker.write_text(json.dumps({"key": s.key, "lessons": s.lessons}) + "\n")
    return rebuild


class Rebuild:
    """The course folder, state records, marker and waiting marks of the earlier runs, moved aside to
    ``DIR/previous-course``."""

    PARTS = ("course", "state", "course.json", state.CARRIED)

    def __init__(self, out: Path):
        self.out, self.aside = out, out / "previous-course"
        shutil.rmtree(self.aside, ignore_errors=True)  # of a rebuild whose run was killed before it ended
        self.aside.mkdir()
        for part in self.PARTS:
            if (out / part).exists():
                os.replace(out / part, self.aside / part)

    def restore(self) -> None:
        for part in self.PARTS:
            if (self.out / part).is_dir():
                shutil.rmtree(self.out / part)
            if (self.aside / part).exists():
                os.replace(self.aside / part, self.out / part)
        shutil.rmtree(self.aside, ignore_errors=True)

    def discard(self) -> None:
        shutil.rmtree(self.aside, ignore_errors=True)


def release_lessons(s: Settings, lessons: list) -> None:
    """nbgrader's generate_assignment for ``lessons``, in this process (which has imported nbgrader already): it
    writes release/ and records every cell in the gradebook, which autograde needs."""
    import nbgrader.api
    from nbgrader.converters import GenerateAssignment
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.utils import capture_log
    from traitlets.config.loader import PyFileConfigLoader

    nbgrader.api.get_alembic_version = alembic_head  # the gradebook it creates gets its schema's revision
    config = PyFileConfigLoader("nbgrader_config.py", path=str(s.course_root)).load_config()
    for lesson in lessons:
        coursedir = CourseDirectory(config=config)
        coursedir.root = str(s.course_root)
        coursedir.assignment_id = lesson
        converter = GenerateAssignment(coursedir=coursedir, config=config)
        converter.force = True
        result = capture_log(converter)
        if not result["success"] or not (s.course_root / "release" / lesson / f"{lesson}.ipynb").exists():
            raise RuntimeError(f"nbgrader generate_assignment failed (lesson not released: {lesson}):\n"
                               f"{result.get('log') or ''}{result.get('error') or ''}")


def alembic_head() -> str:
    """The revision of nbgrader's gradebook schema, read with alembic's API: nbgrader's own
    ``get_alembic_version`` starts an ``alembic`` process for it (seconds) each time it creates a gradebook."""
    import nbgrader
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(nbgrader.__file__).parent / "alembic"))
    head = ScriptDirectory.from_config(config).get_current_head()
    if head is None:
        raise RuntimeError("nbgrader's alembic scripts name no current revision: reinstall nbgrader")
    return head


def _keep_gradebook(s: Settings, log) -> None:
    """Before a rebuild, keep the old SQLite gradebook (it may hold manual grades) beside the results."""
    old = s.course_root / "gradebook.db"
    if not s.db_url and old.exists():
        kept = Path(s.out) / "previous-gradebooks" / time.strftime("gradebook-%Y%m%d-%H%M%S.db")
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(old, kept)
        log(f"the previous gradebook (with any manual grades) is kept as {kept}")


def stage(s: Settings, roster: class_roster.Roster) -> dict:
    """Copy every gradable notebook into course/submitted; return {student: {lesson: flags}} still to grade.

    The flags (test cells edited, deleted or re-labelled; suspicious code) are read from the original, within
    ``Settings.notebook_limits``. Whatever one notebook makes fail here (a limit, a check, its copy) makes that
    notebook ``malformed`` or flagged, never the run fail. The copy is ``findings.restore_metadata``'s: the released
    nbgrader metadata on each released cell it still has, none on any other cell (nbgrader would otherwise fail on the
    whole notebook, an unknown or repeated grade_id or changed metadata, and the learner's honest work would score
    nothing); nbgrader then restores the locked cells' sources itself. A ``timestamp.txt`` it cannot use is ignored
    and flagged. A notebook graded before, these very bytes (its record's hash) under the same ``Settings.key``, is
    only read and hashed, never parsed again: a rerun that grades nothing costs a hash per notebook.
    """
    import nbformat

    todo: dict = {}
    key = s.key
    released = {lesson: nbformat.read(s.course_root / "release" / lesson / f"{lesson}.ipynb", as_version=4)
                for lesson in s.lessons}
    for student, entries in roster.entries.items():
        for lesson, entry in entries.items():
            dest = s.course_root / "submitted" / student / lesson / f"{lesson}.ipynb"
            if not entry.gradable:
                if dest.exists() and entry.status in ("malformed", "refused", "missing"):  # a later hand-in's
                    dest.unlink()
                continue
            try:  # read once: the hash, the flags and the graded copy are of the same bytes
                data = file_access.read_regular(entry.path, s.notebook_limits.max_bytes)
                digest = hashlib.sha256(data).hexdigest()
                record = state.read(s, student, lesson)
                if record and record.graded and record.hash == digest and record.key == key \
                        and dest.exists():  # done before (these very bytes); failed ones are tried again
                    continue
                nb = file_access.parse_notebook(data, entry.path, s.notebook_limits)  # only what is to be graded
            except size_limits.OverLimit as exc:  # it grew since intake read it
                _not_staged(entry, dest, str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - it changed since intake read it: the learner's file
                _not_staged(entry, dest, f"{file_access.display(entry.path.name)} changed or vanished while it was "
                                         f"read ({type(exc).__name__}); submit it again")
                continue
            try:  # whatever the notebook holds, it costs only this notebook
                copy = findings.restore_metadata(nb, released[lesson])
                flags = _flags(nb, copy, released[lesson])
                text = notebooks.notebook_text(copy)
            except Exception as exc:  # noqa: BLE001 - the notebook's own structure broke the copy: the learner's
                _not_staged(entry, dest, f"{file_access.display(entry.path.name)} could not be prepared for grading "
                                         f"({type(exc).__name__}: {file_access.display(str(exc)[:120])}); open it in "
                                         "Jupyter, save it and submit again")
                continue
            # writing the copy is the grader's work: a failure here (a full disk) stops the run, never a score
            notebooks.write_notebook(copy, dest, text)
            _write_timestamp(entry.submitted, dest.parent)
            flags += entry.flags
            todo.setdefault(student, {})[lesson] = {"hash": digest, "flags": flags, "by": entry.by,
                                                    "resubmitted": bool(record and record.hash != digest)}
    return todo


def _not_staged(entry, dest: Path, note: str) -> None:
    """The notebook is the learner's outcome, ``malformed``, with ``note``; no copy of it is left to grade."""
    entry.status, entry.note = "malformed", note
    dest.unlink(missing_ok=True)


def _flags(nb, copy, released) -> list:
    """The structure flags of one notebook and the scan's findings on ``copy``, the notebook as it is graded (a cell
    claiming to be locked is scanned unless the release has it); a check that fails on it is a flag too."""
    try:
        flags = findings.structure_flags(nb, released)
    except Exception as exc:  # noqa: BLE001 - e.g. nbgrader metadata that is not a mapping
        flags = [f"test cells could not be compared with the release ({type(exc).__name__}); nbgrader restores "
                 "them before grading"]
    try:
        flags += ["suspicious code: " + f for f in code_scan.scan_notebook(copy)]
    except Exception as exc:  # noqa: BLE001 - scan_notebook catches what one cell raises; this is the rest
        flags.append(f"suspicious code: the notebook could not be scanned ({type(exc).__name__}): read it before "
                     "trusting its grade")
    return flags


def _write_timestamp(submitted: str, dest: Path) -> None:
    """nbgrader's ``timestamp.txt`` beside the graded copy (its late penalties use it), from the time the hand-in
    carries (``term.take_in``: the LMS's, or the ``timestamp.txt`` that ``nbgrader collect`` kept)."""
    (dest / "timestamp.txt").unlink(missing_ok=True)
    if submitted:
        when = datetime.fromisoformat(submitted)
        if when.tzinfo is not None:
            when = when.astimezone(timezone.utc).replace(tzinfo=None)
        (dest / "timestamp.txt").write_text(f"{when:%Y-%m-%d %H:%M:%S.%f} UTC")


def ensure_students(s: Settings, students) -> None:
    """Create every student in the gradebook before going parallel (first use of a database must not race)."""

    with gradebook.opened(s) as gb:
        for student in students:
            gb.update_or_create_student(student)


def kernel_library(s: Settings) -> Path:
    """Where the run's kernel library is written (``write_kernel_library``) and bound from."""
    return Path(s.out).resolve() / "kernel-library"


def write_kernel_library(dest: Path) -> Path:
    """The only course modules a graded kernel can import, copied where the sandbox binds them read-only: the
    package ``autograder/kernel/`` whole (what the hidden cells call, the launcher and the warm server; it imports
    nothing else of the course, which ``tests/unit/proofs/test_layout.py`` checks) under an empty ``autograder`` package,
    and the learner's self-check modules. No reference, hidden test or bug catalog: those stay with the grader.
    (Copies, made world-readable: the course itself may sit in a folder, or have files, that the sandbox uid cannot
    read.)"""
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "autograder").mkdir(parents=True)
    (dest / "autograder" / "__init__.py").write_text("")
    shutil.copytree(course.ROOT / "autograder" / "kernel", dest / "autograder" / "kernel",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for helper in course.SELFCHECK_FILES:
        shutil.copyfile(course.LESSONS / helper, dest / helper)
    for path in [dest, *dest.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return dest


def preflight(s: Settings) -> None:
    """As root, kernels must be isolated: refuse to grade without bubblewrap rather than run them as root."""
    if os.geteuid() == 0 and s.isolation != "uid":
        raise SetupError("grading as root needs bubblewrap to isolate each kernel (Debian/Ubuntu: "
                           "`apt-get install bubblewrap`); without it a notebook would run as root")


def isolation_notes(s: Settings) -> list:
    """What the report says about a sandbox weaker than the full one (nothing for the full one): what bounded each
    kernel, and what did not."""
    grouped = cgroups.available()  # as root: a writable cgroup file system; otherwise a subtree delegated by systemd
    if s.isolation == "uid":
        return [] if grouped else [
            "No writable cgroup file system: each kernel's address space, processes and CPU time were limited, but "
            "memory held in tmpfs files or IPC objects and its CPU share were not."]
    bounds = (f"a watch stopped any kernel whose processes together held more than {s.memory_mb} MB; each process "
              f"was limited to {s.memory_mb} MB of address space, {sandbox.MAX_FILE_MB} MB per file and "
              f"{sandbox.CPU_SECONDS} s of CPU time, and the notebook to {s.notebook_timeout} s")
    cpu = ("; each kernel had a control group of its own in the user's delegated cgroup subtree (memory with its "
           "tmpfs, processes, one CPU)" if grouped else
           "; no control group: each kernel ran on one CPU of its own, " + (
               "which it could not change" if one_cpu.can_hold() else
               "which it could change (no system-call filter for this machine's architecture)"))
    if s.isolation == "userns":
        return [f"Kernels ran in bubblewrap's namespaces as the user who ran this command (not root): no network, no "
                f"other process or file of the machine, but no separate uid; each in a user namespace of its own, "
                f"with at most {sandbox.MAX_PROCS} processes and threads, a {sandbox.TMP_MB} MB tmpfs as its only "
                f"writable place and System V IPC objects that no process maps removed; {bounds}{cpu}. Grade as root "
                "for the full sandbox."]
    procs = (f"at most {sandbox.MAX_PROCS} processes and threads and no System V IPC object that no process maps "
             "(user and IPC namespaces of their own)" if sandbox.user_namespaces_allowed() else
             "no bound on their processes or System V IPC objects (no user namespaces here)")
    return [f"Kernels ran as the user who ran this command, without bubblewrap: they could read and write that "
            f"user's files and reach the network (the originals' hashes were checked); {procs}; {bounds}{cpu}. "
            "Install bubblewrap, or grade as root, for the full sandbox."]
