"""Grading on a Dask cluster (``--scheduler``, autograder/grading/cluster.py), for real: a ``dask scheduler`` and two
``dask worker`` processes on 127.0.0.1 and the PostgreSQL server of tests/helpers/postgres_server.py. One worker is killed
while it grades a notebook; the class still ends with the grades of a local run, and the originals are untouched.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from postgres_server import free_port
from worker_killer import WorkerKiller, kernel_launchers

from autograder import bugs, course, grade
from autograder.course import answers, notebooks
from autograder.grading import intake

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


def _descendants(pid: int) -> list:
    """(pid, command line) of every process below ``pid``."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parent = int(stat.rsplit(")", 1)[1].split()[1])
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append((int(entry), cmd))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


class Cluster:
    """A scheduler and two workers, each a process group of its own (a worker and its nanny)."""

    def __init__(self, folder: Path):
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        dask = str(Path(sys.executable).parent / "dask")
        env = notebooks.nbgrader_env()
        self.logs = folder
        self.scheduler = self._start([dask, "scheduler", "--host", "127.0.0.1", "--port", str(self.port),
                                      "--no-dashboard"], env, "scheduler")
        self.workers = [self._start([dask, "worker", self.address, "--nworkers", "1", "--nthreads", "1",
                                     "--no-dashboard", "--name", f"w{i}"], env, f"worker{i}") for i in range(2)]
        from distributed import Client

        with Client(self.address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)

    def _start(self, cmd, env, name):
        log = (self.logs / f"{name}.log").open("w")
        return subprocess.Popen(cmd, cwd=course.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def stop(self):
        for proc in [*self.workers, self.scheduler]:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


@pytest.fixture(scope="module")
def graded(tmp_path_factory, postgres_server):
    base = tmp_path_factory.mktemp("cluster")
    root = base / "class"
    _class(root)
    before = intake.tree_hashes(root)
    local = grade.Settings(out=str(base / "local"), lessons=[LESSON], workers=2, timeout=60)
    grade.run(root, local, progress=False, log=lambda *a: None)

    cluster = Cluster(base)
    env = notebooks.nbgrader_env() | {"MHA_GRADEBOOK_URL": postgres_server.database("cluster")}
    out = base / "out"
    proc = subprocess.Popen([sys.executable, "-m", "autograder.grade", str(root), "--out", str(out), "--lessons",
                             LESSON, "--timeout", "60", "--scheduler", cluster.address, "--quiet"],
                            cwd=course.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = None
    try:
        deadline = time.monotonic() + 600
        while killed is None and proc.poll() is None and time.monotonic() < deadline:
            graded_so_far = list((out / "state").glob(f"s*/{LESSON}.json")) if (out / "state").exists() else []
            victim = cluster.workers[0]
            kernel = [c for _, c in _descendants(victim.pid) if "bwrap" in c and "autograder.kernel.launcher" in c]
            if len(graded_so_far) >= 2 and kernel:  # halfway, and this worker is grading a notebook right now
                os.killpg(victim.pid, signal.SIGKILL)
                victim.wait()
                killed = len(graded_so_far)
            time.sleep(0.05)
        stdout, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.stop()
    return {"rc": proc.returncode, "stdout": stdout, "killed_after": killed, "local": _grades(base / "local"),
            "cluster": _grades(out), "unchanged": intake.tree_hashes(root) == before, "out": out, "base": base}


@needs_root
def test_a_worker_killed_mid_notebook_leaves_the_grades_of_a_local_run(graded):
    assert graded["rc"] == 0, graded["stdout"][-3000:]
    assert graded["killed_after"] is not None, "the worker was never caught grading a notebook"
    assert graded["killed_after"] < len(graded["local"]), "the worker was killed after the class was done"
    assert graded["cluster"] == graded["local"]
    assert len({score for _, score, *_ in graded["local"].values()}) >= 3  # the class has different scores
    assert graded["unchanged"]
    assert "on the Dask cluster at tcp://127.0.0.1:" in graded["stdout"]


@needs_root
def test_the_cluster_grades_into_postgresql_and_each_notebook_once(graded):
    assert not (graded["out"] / "course" / "gradebook.db").exists()
    records = [p for p in (graded["out"] / "state").glob(f"*/{LESSON}.json")]
    assert sorted(p.parent.name for p in records) == sorted(graded["local"])


def test_sqlite_with_a_scheduler_is_refused_before_anything_is_graded(tmp_path):
    root = tmp_path / "class"
    notebooks.write_notebook(answers.fill(LESSON), root / "alice" / f"{LESSON}.ipynb")
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(root), "--out", str(tmp_path / "out"),
                           "--lessons", LESSON, "--scheduler", "tcp://127.0.0.1:9", "--quiet"],
                          cwd=course.ROOT, env=notebooks.nbgrader_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == grade.EXIT_SETUP, proc.stdout + proc.stderr
    assert "cannot share the SQLite gradebook" in proc.stderr and "--db postgresql://" in proc.stderr
    assert not (tmp_path / "out" / "state").exists()


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

    from autograder.grading import canary
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
    assert kernel_launchers(out) == {}  # the killed worker's kernel did not outlive it


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
