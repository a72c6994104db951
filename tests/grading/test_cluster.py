"""Grading on a Dask cluster (``--scheduler``, autograder/grading/run/pool.py), for real: the cluster docs/grading.md
starts (its commands read from the page and run as written: a ``dask scheduler`` and a ``dask worker`` of two processes
on 127.0.0.1, in the course folder with its venv active, no PYTHONPATH) and the PostgreSQL server of
tests/helpers/postgres_server.py. One worker is killed while it grades a notebook; the class still ends with the
grades of a local run, and the originals are untouched. The same workers, asked to grade for a copy of the course in
another folder, are refused in one line.
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from course_copy import copy_course
from postgres_server import free_port
from worker_killer import WorkerKiller, kernel_launchers

from autograder import bugs, course, grade
from autograder.course import answers, notebooks
from autograder.grading.intake import class_folder, integrity
from autograder.grading.records import outcome
from autograder.grading.run import pool

LESSON = "01_warmup"
pytestmark = pytest.mark.grading
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the cluster's workers grade in the uid sandbox (root)")
BUGS = [b for b in bugs.CATALOG if b.lesson == LESSON and not b.given][:6]
COMPARED = (f"{LESSON} status", f"{LESSON} score", f"{LESSON} max", "total", "flags")


def _class(root: Path) -> dict:
    """Eight students: the model answers, an untouched notebook and six catalogued bugs (different scores)."""
    nbs = {"s0_full": answers.fill(LESSON), "s1_untouched": answers.student_notebook(LESSON)}
    nbs.update({f"s{i + 2}_{b.id}": answers.fill(LESSON, {b.function: b.source}) for i, b in enumerate(BUGS)})
    for student, nb in nbs.items():
        notebooks.write_notebook(nb, root / student / f"{LESSON}.ipynb")
    return nbs


def _grades(out: Path) -> dict:
    if not (out / "grades.csv").exists():
        return {}
    with (out / "grades.csv").open(newline="") as fh:
        return {r["student"]: tuple(r[c] for c in COMPARED) for r in csv.DictReader(fh)}


def docs_commands(port: int) -> dict:
    """The commands docs/grading.md gives to start a cluster, as written there but for the port: {"activate": the
    venv's activation, "scheduler": ..., "worker": ...}."""
    fence = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
    block = next(b for b in fence.findall((course.ROOT / "docs" / "grading.md").read_text()) if "dask scheduler" in b)
    lines = [line.split("#")[0].strip().replace("8786", str(port)) for line in block.splitlines()]
    return {"activate": next(line.split("&&")[1].strip() for line in lines if line.startswith("cd ")),
            "scheduler": next(line for line in lines if line.startswith("dask scheduler")),
            "worker": next(line for line in lines if line.startswith("dask worker"))}


class Cluster:
    """The cluster of docs/grading.md: its scheduler and its worker command (two worker processes, each with its
    nanny), each started by bash in the course folder with the venv activated, as a terminal would; nothing of the
    course on PYTHONPATH, nor the venv on PATH before the activation puts it there."""

    def __init__(self, folder: Path):
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.logs = folder
        if not (course.ROOT / ".venv" / "bin" / "activate").exists():
            pytest.skip("the docs' commands activate the course's .venv (make venv)")
        commands = docs_commands(self.port)
        venvs = {os.path.realpath(course.ROOT / ".venv" / "bin"), os.path.realpath(Path(sys.executable).parent)}
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if os.path.realpath(p) not in venvs)
        self.scheduler = self._start(commands["activate"], commands["scheduler"], env, "scheduler")
        self.workers = self._start(commands["activate"], commands["worker"], env, "workers")
        from distributed import Client

        with Client(self.address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)

    def _start(self, activate, command, env, name):
        log = (self.logs / f"{name}.log").open("w")
        return subprocess.Popen(["bash", "-c", f"{activate} && exec {command}"], cwd=course.ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self):
        for proc in [self.workers, self.scheduler]:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = Cluster(tmp_path_factory.mktemp("cluster-logs"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def graded(tmp_path_factory, postgres_server, cluster):
    base = tmp_path_factory.mktemp("cluster")
    root = base / "class"
    victim = sorted(_class(root))[len(BUGS) // 2]  # a student in the middle of the class
    before = integrity.tree_hashes(root)
    local = grade.Settings(out=str(base / "local"), lessons=[LESSON], workers=2, timeout=60)
    grade.run(root, local, progress=False, log=lambda *a: None)

    env = notebooks.nbgrader_env() | {"MHA_GRADEBOOK_URL": postgres_server.database("cluster")}
    out = base / "out"
    with WorkerKiller(out, {victim: 1}) as killer:
        proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(root), "--out", str(out), "--lessons",
                               LESSON, "--timeout", "60", "--scheduler", cluster.address, "--quiet"],
                              cwd=course.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=900)
    return {"rc": proc.returncode, "stdout": proc.stdout, "kills": killer.kills, "victim": victim,
            "local": _grades(base / "local"), "cluster": _grades(out),
            "unchanged": integrity.tree_hashes(root) == before, "out": out, "base": base}


@needs_root
def test_a_worker_killed_mid_notebook_leaves_the_grades_of_a_local_run(graded):
    assert graded["rc"] == 0, graded["stdout"][-3000:]
    assert graded["kills"] == {graded["victim"]: 1}, "the worker was never caught grading that notebook"
    assert graded["cluster"] == graded["local"]
    assert len({score for _, score, *_ in graded["local"].values()}) >= 3  # the class has different scores
    assert graded["unchanged"]
    assert "on the Dask cluster at tcp://127.0.0.1:" in graded["stdout"]


@needs_root
def test_the_cluster_grades_into_postgresql_and_each_notebook_once(graded):
    assert not (graded["out"] / "course" / "gradebook.db").exists()
    records = [p for p in (graded["out"] / "state").glob(f"*/{LESSON}.json")]
    assert sorted(p.parent.name for p in records) == sorted(graded["local"])


@needs_root
def test_workers_that_run_another_course_are_refused_in_one_line_before_anything_is_graded(graded, cluster, tmp_path,
                                                                                            postgres_server):
    """The docs' workers have graded with this checkout's course; the command of a copy of the course in another
    folder (a second checkout) finds them running this one, and refuses: status 5, one line that names the workers
    and says what to do, no traceback, nothing graded."""
    copy = copy_course(tmp_path / "copy")
    root = tmp_path / "class"
    notebooks.write_notebook(answers.fill(LESSON), root / "alice" / f"{LESSON}.ipynb")
    env = notebooks.nbgrader_env() | {"PYTHONPATH": str(copy), "MHA_GRADEBOOK_URL": postgres_server.database("copy")}
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(root), "--out", str(tmp_path / "out"),
                           "--lessons", LESSON, "--scheduler", cluster.address, "--quiet"],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == grade.EXIT_SETUP, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert re.fullmatch(rf"error: the Dask worker tcp://127\.0\.0\.1:\d+( \(and 1 more: tcp://127\.0\.0\.1:\d+\))? "
                        rf"already runs the course from {re.escape(str(course.ROOT))}, not {re.escape(str(copy))} as "
                        r"the command does: restart the workers \(dask worker \.\.\.\) in the course folder with its "
                        r"venv active", line), line
    assert not (tmp_path / "out" / "state").exists()


def test_a_worker_without_the_course_makes_each_of_its_notebooks_a_grading_error(tmp_path, monkeypatch):
    """A worker that joins after the command asked the cluster, and has no course at the command's path (the course's
    path is changed here, for a worker in this process): each job it takes is recorded as a grading error that names
    the worker and says what to do, never a score."""
    from distributed import LocalCluster

    s = grade.Settings(out=str(tmp_path / "out"), lessons=[LESSON], isolation="none")
    assert s.key  # computed now, from this course
    monkeypatch.setattr(course, "ROOT", tmp_path / "elsewhere")
    with LocalCluster(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=None) as local:
        s.scheduler = local.scheduler_address
        with pool.ClusterPool(s) as cluster:
            [[record]] = list(cluster.completed("grade_student", [("alice", {LESSON: {"hash": "h", "flags": []}})]))
    assert (record.status, record.score) == (outcome.GRADING_ERROR, None)
    assert re.fullmatch(r"the Dask worker inproc://\S+ on \S+ \(pid \d+\) has no course at \S+/elsewhere: put this "
                        r"course at the same path on every worker .*", record.reason), record.reason


def test_sqlite_with_a_scheduler_is_refused_before_anything_is_graded(tmp_path):
    root = tmp_path / "class"
    notebooks.write_notebook(answers.fill(LESSON), root / "alice" / f"{LESSON}.ipynb")
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(root), "--out", str(tmp_path / "out"),
                           "--lessons", LESSON, "--scheduler", "tcp://127.0.0.1:9", "--quiet"],
                          cwd=course.ROOT, env=notebooks.nbgrader_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == grade.EXIT_SETUP, proc.stdout + proc.stderr
    assert "cannot share the SQLite gradebook" in proc.stderr and "--db postgresql://" in proc.stderr
    assert not (tmp_path / "out" / "state").exists()


def _refused_dask_zip(tmp_path, db_url: str, scheduler: str) -> str:
    """A zip of the class graded with --scheduler into an OUT that holds an earlier run's unpacked zip and records:
    the run is refused (status 5), and OUT is exactly as it was (nothing unpacked, then left behind or removed)."""
    import zipfile

    from folder_state import snapshot

    archive, out = tmp_path / "class.zip", tmp_path / "out"
    tmp_path.mkdir(exist_ok=True)
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"alice/{LESSON}.ipynb", notebooks.notebook_text(answers.fill(LESSON)))
    notebooks.write_notebook(answers.student_notebook(LESSON), out / class_folder.UNZIPPED / "bob" / f"{LESSON}.ipynb")
    (out / "state" / "bob").mkdir(parents=True)
    (out / "state" / "bob" / f"{LESSON}.json").write_text('{"graded": true}\n')
    before = snapshot(out)
    env = {k: v for k, v in notebooks.nbgrader_env().items() if k != "MHA_GRADEBOOK_URL"}
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(archive), "--out", str(out), "--lessons",
                           LESSON, "--scheduler", scheduler, "--quiet"], cwd=course.ROOT,
                          env=env | ({"MHA_GRADEBOOK_URL": db_url} if db_url else {}), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == grade.EXIT_SETUP, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert snapshot(out) == before
    return proc.stderr


def test_a_refused_dask_run_with_a_zip_leaves_out_as_it_was(tmp_path, postgres_server):
    """Refused for SQLite with a scheduler, and for a scheduler that does not answer: both before the zip is
    unpacked into OUT/unzipped."""
    assert "cannot share the SQLite gradebook" in _refused_dask_zip(tmp_path / "sqlite", "", "tcp://127.0.0.1:9")
    assert "cannot reach the Dask scheduler" in _refused_dask_zip(
        tmp_path / "gone", postgres_server.database("refused_zip"), f"tcp://127.0.0.1:{free_port()}")


def test_an_unreachable_scheduler_is_a_setup_error(tmp_path, postgres_server):
    root = tmp_path / "class"
    notebooks.write_notebook(answers.fill(LESSON), root / "alice" / f"{LESSON}.ipynb")
    env = notebooks.nbgrader_env() | {"MHA_GRADEBOOK_URL": postgres_server.database("unreachable")}
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(root), "--out", str(tmp_path / "out"),
                           "--lessons", LESSON, "--scheduler", f"tcp://127.0.0.1:{free_port()}", "--quiet"],
                          cwd=course.ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == grade.EXIT_SETUP, proc.stdout + proc.stderr
    assert "cannot reach the Dask scheduler" in proc.stderr
    assert not (tmp_path / "out" / "state").exists()


@needs_root
def test_a_worker_that_cannot_sandbox_as_the_run_does_grades_nothing(tmp_path, postgres_server, monkeypatch):
    """A worker in this process whose machine, as far as it can tell, has neither root nor bubblewrap: the canary,
    graded there first, becomes a grading error that names the worker, and no student is graded."""
    from distributed import LocalCluster

    from autograder.grading.run import canary
    from autograder.kernel import sandbox

    root = tmp_path / "class"
    notebooks.write_notebook(answers.fill(LESSON), root / "alice" / f"{LESSON}.ipynb")
    monkeypatch.setattr(sandbox, "isolation_level", lambda: "none")
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        with LocalCluster(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=None) as local:
            s = grade.Settings(out=str(tmp_path / "out"), lessons=[LESSON], isolation="uid",
                               db_url=postgres_server.database("unfit"), scheduler=local.scheduler_address)
            with pytest.raises(canary.CanaryFailed, match=r"can isolate kernels only as 'none', not 'uid'"):
                grade.run(root, s, progress=False, log=lambda *a: None)
    finally:
        os.umask(umask)  # the worker ran in this process
    assert not (tmp_path / "out" / "state" / "alice").exists()


@needs_root
def test_a_student_whose_workers_keep_dying_is_a_grading_error_and_the_others_are_graded(tmp_path, postgres_server):
    """A Dask worker process (of a LocalCluster, with its nanny) is killed whenever it grades dan; with
    ``allowed-failures`` 0 the scheduler gives up on dan at once (``KilledWorker``): his notebook is a grading error
    that says what happened, never a score, and alice, after him, is graded by the restarted worker."""
    import dask
    from distributed import LocalCluster

    root, out = tmp_path / "class", tmp_path / "out"
    notebooks.write_notebook(answers.fill(LESSON), root / "alice" / f"{LESSON}.ipynb")
    notebooks.write_notebook(answers.fill(LESSON), root / "dan" / f"{LESSON}.ipynb")
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as local:
        s = grade.Settings(out=str(out), lessons=[LESSON], timeout=60, db_url=postgres_server.database("killed"),
                           scheduler=local.scheduler_address)
        with WorkerKiller(out, {"dan": None}) as killer:
            result = grade.run(root, s, progress=False, log=lambda *a: None)
    assert killer.kills == {"dan": 1}, killer.kills
    rows = {r["student"]: r for r in result["rows"]}
    assert [(student, lesson) for student, lesson, _ in result["errors"]] == [("dan", LESSON)]
    assert "died while grading this student's notebooks, each time the scheduler gave it to a Dask worker " \
           "(KilledWorker)" in result["errors"][0][2]
    assert rows["dan"]["lessons"][LESSON]["score"] is None
    assert rows["alice"]["lessons"][LESSON]["score"] == 8.0
    # the killed worker's kernel did not outlive the run: the run ends it (its uid is no grader's any more) whichever uid
    # the restarted worker took; its launcher, root's, ends a moment after its kernel
    deadline = time.monotonic() + 10
    while kernel_launchers(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert kernel_launchers(out) == {}


@needs_root
def test_a_scheduler_lost_mid_run_stops_the_command_and_the_next_run_resumes(graded, tmp_path, postgres_server):
    """The scheduler is killed after the first graded record: the command stops with status 4 and keeps what was
    graded; run again against a new cluster, it grades only the rest and ends with every grade of a local run (the
    same class as above)."""
    root, local = graded["base"] / "class", graded["local"]
    env = notebooks.nbgrader_env() | {"MHA_GRADEBOOK_URL": postgres_server.database("restarted")}
    out = tmp_path / "out"

    def command(address):
        return subprocess.Popen([sys.executable, "-m", "autograder.grade", str(root), "--out", str(out), "--lessons",
                                 LESSON, "--timeout", "60", "--scheduler", address, "--quiet"], cwd=course.ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    first = Cluster(tmp_path)
    proc = command(first.address)
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            if len(list(out.glob(f"state/s*/{LESSON}.json"))) >= 1:
                os.killpg(first.scheduler.pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        stopped, _ = proc.communicate(timeout=600)
    finally:
        first.stop()
    kept = {p.parent.name for p in out.glob(f"state/s*/{LESSON}.json")}
    assert proc.returncode == grade.EXIT_GRADING_ERROR, stopped[-3000:]
    assert "went away after" in stopped and "run the same command again" in stopped
    assert 1 <= len(kept) < len(local)

    second = Cluster(tmp_path)
    try:
        again = command(second.address)
        resumed, _ = again.communicate(timeout=900)
    finally:
        second.stop()
    assert again.returncode == 0, resumed[-3000:]
    graded_now = int(resumed.split("graded ", 1)[1].split()[0])
    assert graded_now == len(local) - len(kept)  # only the rest: a record is written once its notebook is done
    assert _grades(out) == local
