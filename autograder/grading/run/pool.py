"""Where a run grades: a pool of this machine's worker processes, or the workers of a Dask cluster.

``run_tasks`` grades ``{student: {lesson: task}}`` one student at a time per worker, over ``--workers`` processes
(``Pool``, forked from a server process) or on a running ``dask.distributed`` cluster (``--scheduler``:
``ClusterPool``), and returns how many notebooks it graded. Each process that grades holds one
``worker.Worker`` for the run (``_worker``, made by ``_become_worker``); a job names the ``Worker`` method it runs
(``grade_student``), so both pools run the same code.

Grading on a Dask cluster (docs/grading.md, "Grading on a Dask cluster") needs:
* every worker sees the course, its venv and the ``--out`` folder at the same paths as this machine (a shared file
  system, or the same container image with ``--out`` on a shared volume): a task reads the staged notebook and
  writes its record, its graded notebook and its feedback page there. The workers need not have the course on their
  path: each task carries ``dask_entry.run`` whole (``ShippedWhole``), which checks that the worker's course is this
  one, the same code by ``dask_entry.course_digest``, before it imports it; ``preflight`` asks every worker first and
  refuses, in one line per reason, a cluster with a worker that cannot grade this course;
* the gradebook is PostgreSQL (``--db``): workers on other machines cannot share one SQLite file, so the command
  refuses SQLite with a scheduler (``preflight``);
* workers that isolate kernels as this machine does (``Settings.isolation``): root with bubblewrap for the ``uid``
  sandbox, ordinary users for an ordinary user's command. A worker whose sandbox is another one, weaker or stronger,
  records each of its notebooks as a grading error that names the worker, never a score (``_run_on_dask``);
* one thread per worker process (``dask worker ... --nthreads 1``): a grading worker keeps the notebook being
  graded in process-wide state, so tasks in one process take turns (``_ONE_AT_A_TIME``).

A worker that dies mid-task (killed, out of memory, its machine lost) costs nothing: the scheduler gives its task to
another worker, which grades the notebook again from the start (autograde is forced, and the records are written
once the notebook is done). A task whose workers keep dying (``distributed.scheduler.allowed-failures``, 3 by
default) is a grading error of that student's notebooks, and the others go on. A scheduler that goes away stops
the command with ``ClusterLost``; what was graded is kept, and the same command run again grades only the rest
(``workspace.stage`` reads the records).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import socket
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from autograder import course
from autograder.grading.records.settings import Settings, SetupError
from autograder.grading.run import dask_entry, worker
from autograder.kernel import leftovers

# This process's grading worker, when it grades for a pool (``_become_worker``): a pool process or a Dask worker
# grades for one run at a time, and the ``Worker`` keeps that run's nbgrader configuration between jobs.
_worker: worker.Worker | None = None


def _become_worker(s: Settings, environ: dict | None = None, cwd: str | None = None) -> worker.Worker:
    """Make this process a worker of the run under ``s``. A pool's workers are forked from a server started once
    per process (``_forkserver``), so they get the environment and folder of the run that starts the pool here."""
    global _worker
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    if cwd is not None:
        os.chdir(cwd)
    _worker = worker.Worker(s)
    return _worker


def _run_job(method: str, *job):
    """What a pool process runs: ``Worker.<method>(*job)`` of this process's worker."""
    return getattr(_worker, method)(*job)


def _forkserver():
    """Workers forked from one server process that has imported the grading code and nbgrader once: a pool then
    starts in milliseconds instead of each worker paying those imports (seconds), which counts when one process
    grades many times (the tests). Forking a single-threaded server is safe where forking this process is not."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["autograder.grading.run.pool", "nbgrader.converters", "nbgrader.api"])
    return ctx


def pool_for(s: Settings):
    """Where the run grades: this machine's worker processes, or the Dask cluster of ``--scheduler``."""
    return ClusterPool(s) if s.scheduler else Pool(s)


WORKER_DIED = ("the grading worker process died while grading this student's notebooks, {times} (killed, or out of "
               "memory: is the notebook very large?); the other students are graded as usual. Check the submission, "
               "then run the same command again: it grades only what is left")


class Pool:
    """The worker processes of one run: started once, when first needed (each pays nbgrader's imports once), and
    shared by the canary, the students and the feedback refresh.

    A worker process that dies (killed, out of memory) breaks the pool, and every job the pool was running fails
    with it. The pool is then replaced, what the dead kernels left is removed, and those jobs run again, each
    alone: a job whose worker dies again when it runs alone is recorded as a grading error (``grader_failed``),
    never a score, and the rest of the class goes on."""

    def __init__(self, s: Settings):
        self.s = s
        self._executor: ProcessPoolExecutor | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def executor(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=self.s.workers, mp_context=_forkserver(),
                                                 initializer=_become_worker,
                                                 initargs=(self.s, dict(os.environ), os.getcwd()))
        return self._executor

    def _replace(self) -> None:
        """After a worker died: wait for the broken pool's processes to end, then remove the sandboxes of the
        kernels they started (no grader holds them any more); the next job starts a new pool."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self.s.isolation == "uid":
            leftovers.remove_stale_sandboxes()

    def completed(self, method: str, jobs: list):
        """Run ``Worker.<method>(*job)`` for every job; yield the results as they finish. A job runs in at most
        ``workers`` processes at once, so a dying worker takes only the jobs it was running (and the others in
        flight) with it."""
        running: dict
        suspects: list
        waiting, running, suspects = list(jobs), {}, []
        while waiting or running or suspects:
            if suspects and not running:
                job = suspects.pop(0)
                try:
                    result = self.executor().submit(_run_job, method, *job).result()
                except BrokenProcessPool:  # it died again, alone: this job is the cause
                    self._replace()
                    result = worker.grader_failed(self.s, *job,
                                                  reason=WORKER_DIED.format(times="twice, the second time alone"))
                yield result
                continue
            while waiting and not suspects and len(running) < self.s.workers:
                job = waiting.pop(0)
                running[self.executor().submit(_run_job, method, *job)] = job
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            if any(isinstance(f.exception(), BrokenProcessPool) for f in done):
                done, _ = wait(running)  # every job of a broken pool ends at once, with a result or with it
            for future in done:
                job = running.pop(future)
                if isinstance(future.exception(), BrokenProcessPool):
                    suspects.append(job)
                else:
                    yield future.result()
            if suspects and not running:
                self._replace()


def run_tasks(s: Settings, todo: dict, *, progress=True, pool: Pool | None = None) -> int:
    """Grade {student: [lessons]} over ``s.workers`` processes (``pool``'s, or a pool of this call's own); returns
    how many notebooks were graded."""
    from tqdm import tqdm

    if not todo:
        return 0
    students = sorted(todo)
    bar = tqdm(total=len(students), unit="student", desc="grading", disable=not progress, file=sys.stderr,
               dynamic_ncols=True)
    done = 0
    if s.workers <= 1 and not s.scheduler:
        here = worker.Worker(s)
        for student in students:
            done += len(here.grade_student(student, todo[student]))
            bar.update()
    else:
        with pool_for(s) if pool is None else contextlib.nullcontext(pool) as lent:
            for records in lent.completed("grade_student", [(student, todo[student]) for student in students]):
                done += len(records)
                bar.update()
    bar.close()
    return done


# ---------------------------------------------------------------- on a Dask cluster

_ONE_AT_A_TIME = threading.Lock()
CONNECT_TIMEOUT_S = 20


class ClusterLost(RuntimeError):
    """The scheduler went away during the run; the message says what was kept and what to do."""


def preflight(s: Settings) -> None:
    """Refuse what cannot work on a cluster, before anything is graded."""
    if not s.scheduler:
        return
    if not s.gradebook_url.startswith("postgresql"):
        raise SetupError(f"--scheduler {s.scheduler} grades on other machines, which cannot share the SQLite "
                         "gradebook file; give a PostgreSQL gradebook the workers can reach (--db "
                         "postgresql://grader@host/gradebook, the password in PGPASSWORD or ~/.pgpass)")
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise SetupError("--scheduler needs dask.distributed: pip install 'dask[distributed]'") from None
    scheme, _, address = s.scheduler.rpartition("://")
    if scheme in ("", "tcp", "tls"):  # inproc:// (a cluster in this process), ucx://: Dask's own connect decides
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
        except (OSError, ValueError) as exc:
            raise SetupError(f"cannot reach the Dask scheduler at {s.scheduler} ({exc}); start it (dask scheduler) "
                             "and its workers, or check the address (tcp://host:8786)") from None
    with ClusterPool(s) as cluster:
        cluster.check_workers()


_dask_run: tuple = (None, None)  # the (settings, folder) this Dask worker process last became a worker for
_unfit: str | None = None  # why this Dask worker cannot grade that run (its sandbox is weaker), or None


def _run_on_dask(method: str, s: Settings, environ: dict, cwd: str, *job):
    """What a Dask worker runs: become a grading worker of this run (once per run), then ``Worker.<method>``."""
    global _dask_run, _unfit
    from autograder.kernel import sandbox

    with _ONE_AT_A_TIME:
        if _dask_run != (s, cwd):
            _become_worker(s, environ, cwd)
            _dask_run = (s, cwd)
            here = sandbox.isolation_level()
            _unfit = None if here == s.isolation else _other_sandbox(here, s.isolation)
        if _unfit:
            return worker.grader_failed(s, *job, reason=_unfit)
        return _run_job(method, *job)


SANDBOXES = ("none", "userns", "uid")  # weakest first (autograder/kernel/sandbox.py: isolation_level)


def _other_sandbox(here: str, wanted: str) -> str:
    """Why this Dask worker, whose kernels would run in the sandbox ``here``, grades nothing of a run graded in
    ``wanted`` (weaker or stronger: a class is graded in one sandbox), and what to do."""
    who = f"the Dask worker on {socket.gethostname()} (pid {os.getpid()})"
    if SANDBOXES.index(here) < SANDBOXES.index(wanted):
        fix = ("run the workers as root with bubblewrap installed (apt-get install bubblewrap)" if wanted == "uid" else
               "install bubblewrap on the workers' machines (apt-get install bubblewrap)")
        return (f"{who} can isolate kernels only as {here!r}, not {wanted!r} as this run does: {fix}, or grade on "
                "this machine without --scheduler")
    fix = ("run the workers as the command's user, or the command as root with bubblewrap" if here == "uid" else
           "install bubblewrap where the command runs (apt-get install bubblewrap), or grade on this machine without "
           "--scheduler")
    return (f"{who} isolates kernels as {here!r}, not {wanted!r} as this run does (a class is graded in one "
            f"sandbox): {fix}")


class ClusterPool:
    """``Pool``'s counterpart on a cluster: one client of the scheduler for the whole run."""

    def __init__(self, s):
        self.s = s
        self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._client is not None:
            self._client.close()

    def _connect(self):
        if self._client is None:
            from distributed import Client

            try:
                self._client = Client(self.s.scheduler, timeout=f"{CONNECT_TIMEOUT_S}s", set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise SetupError(f"cannot reach the Dask scheduler at {self.s.scheduler} ({exc}); start it "
                                 "(dask scheduler) and its workers, or check the address") from None
        return self._client

    def completed(self, method: str, jobs: list):
        """Run ``Worker.<method>(*job)`` for every job on the cluster; yield the results as they finish."""
        from distributed import as_completed

        client = self._connect()
        environ, cwd = dict(os.environ), os.getcwd()
        entry, root = ShippedWhole(dask_entry.run), str(course.ROOT)
        digest = dask_entry.course_digest(root)
        futures = {client.submit(entry, root, digest, _payload(method, self.s, environ, cwd, job),
                                 pure=False, key=f"{method}-{job[0]}-{os.urandom(4).hex()}"): job for job in jobs}
        done = 0
        try:
            for future in as_completed(futures, loop=client.loop):
                yield self._result(future, futures[future])
                done += 1
        except (OSError, TimeoutError) + _cancelled() as exc:
            raise ClusterLost(f"the Dask cluster at {self.s.scheduler} went away after {done} of {len(jobs)} "
                              f"students ({type(exc).__name__}); their grades are kept: run the same command again "
                              "when the cluster is back, and it grades only the rest") from None


    def _result(self, future, job):
        """A job's records; a job whose workers kept dying (the scheduler gave up on it: ``KilledWorker``), or that
        fell to a worker that cannot grade this course (``dask_entry.unfit``), is recorded as a grading error that
        says why, never a score, and the others go on."""
        from distributed.scheduler import KilledWorker

        try:
            done, value = future.result()
        except KilledWorker:
            return worker.grader_failed(self.s, *job, reason=WORKER_DIED.format(
                times="each time the scheduler gave it to a Dask worker (KilledWorker)"))
        return value if done == "done" else worker.grader_failed(self.s, *job, reason=value)

    def check_workers(self) -> None:
        """Ask every worker of the cluster whether it can grade with this course (``dask_entry.unfit``); refuse the
        cluster, one line per reason naming its workers, when one cannot."""
        root = str(course.ROOT)
        try:
            answers = self._connect().run(ShippedWhole(dask_entry.unfit), root, dask_entry.course_digest(root))
        except Exception as exc:  # noqa: BLE001 - e.g. another Python: a worker that cannot even load the check
            raise SetupError(f"the Dask workers at {self.s.scheduler} cannot run the course's check "
                             f"({type(exc).__name__}: {exc}): {dask_entry.RESTART}") from None
        by_reason: dict = {}
        for address, reason in sorted(answers.items()):
            if reason:
                by_reason.setdefault(reason, []).append(address)
        if by_reason:
            raise SetupError("\n".join(f"the Dask worker {_named(addresses)} {reason}"
                                       for reason, addresses in by_reason.items()))


def _payload(method: str, s: Settings, environ: dict, cwd: str, job: tuple) -> bytes:
    """A job as ``dask_entry.run`` gets it: ``_run_on_dask`` and its arguments, pickled here and opened only by a
    worker that has found the course."""
    return pickle.dumps((_run_on_dask, (method, s, environ, cwd, *job)))


def _named(addresses: list) -> str:
    """A worker's address, and how many others (a few named) share its reason."""
    others = addresses[1:]
    if not others:
        return addresses[0]
    shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
    return f"{addresses[0]} (and {len(others)} more: {shown})"


class ShippedWhole:
    """A function of ``dask_entry`` as a task or ``Client.run`` sends it: pickled by value (cloudpickle), so that a
    scheduler or worker without the course on its path can load it."""

    def __init__(self, function):
        import cloudpickle

        cloudpickle.register_pickle_by_value(dask_entry)
        try:
            self.function, self.pickled = function, cloudpickle.dumps(function)
        finally:
            cloudpickle.unregister_pickle_by_value(dask_entry)

    def __call__(self, *args):  # a worker in this process runs it as it is
        return self.function(*args)

    def __reduce__(self):
        import cloudpickle

        return cloudpickle.loads, (self.pickled,)


def _cancelled() -> tuple:
    from concurrent.futures import CancelledError

    try:
        from distributed.client import FutureCancelledError

        return (CancelledError, FutureCancelledError)
    except ImportError:
        return (CancelledError,)
