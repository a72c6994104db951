"""Grading on a Dask cluster: ``--scheduler tcp://host:8786`` sends each student's notebooks to the workers of a
running ``dask.distributed`` cluster instead of this machine's worker processes.

What the cluster must provide (docs/grading.md, "Grading on a Dask cluster"):

* every worker sees the course, its venv and the ``--out`` folder at the same paths as this machine (a shared file
  system, or the same container image with ``--out`` on a shared volume): a task reads the staged notebook and
  writes its record, its graded notebook and its feedback page there;
* the gradebook is PostgreSQL (``--db``): workers on other machines cannot share one SQLite file, so the command
  refuses SQLite with a scheduler (``check``);
* workers that can isolate kernels as this machine does (``Settings.isolation``): root with bubblewrap for the
  ``uid`` sandbox. A worker that cannot records each of its notebooks as a grading error that names the worker,
  never a score (``run``);
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

import os
import socket
import threading
from dataclasses import asdict

from autograder.grading.settings import SetupError

_ONE_AT_A_TIME = threading.Lock()
CONNECT_TIMEOUT_S = 20


class ClusterLost(RuntimeError):
    """The scheduler went away during the run; the message says what was kept and what to do."""


def check(s) -> None:
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
    if scheme not in ("", "tcp", "tls"):  # inproc:// (a cluster in this process), ucx://: Dask's own connect decides
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as exc:
        raise SetupError(f"cannot reach the Dask scheduler at {s.scheduler} ({exc}); start it (dask scheduler) "
                         "and its workers, or check the address (tcp://host:8786)") from None


def _init_and_run(name: str, settings: dict, environ: dict, cwd: str, *args):
    """What a Dask worker runs: become a grading worker of this run (once per run), then ``worker.<name>``."""
    from autograder import sandbox
    from autograder.grading import worker

    with _ONE_AT_A_TIME:
        if worker._W.get("run") != (settings, cwd):
            worker._init_worker(settings, environ, cwd)
            worker._W["run"] = (settings, cwd)
            here = sandbox.isolation_level()
            worker._W["unfit"] = None if here == settings["isolation"] else (
                f"the Dask worker on {socket.gethostname()} (pid {os.getpid()}) can isolate kernels only as "
                f"{here!r}, not {settings['isolation']!r} as this run does: run the workers as root with "
                "bubblewrap installed (apt-get install bubblewrap), or grade on this machine without --scheduler")
        if worker._W["unfit"]:
            return worker.grader_failed(*args, reason=worker._W["unfit"])
        return getattr(worker, name)(*args)


class ClusterPool:
    """``worker.Pool``'s counterpart on a cluster: one client of the scheduler for the whole run."""

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

    def completed(self, name: str, jobs: list):
        """Run ``worker.<name>(*job)`` for every job on the cluster; yield the results as they finish."""
        from distributed import as_completed

        client = self._connect()
        settings, environ, cwd = asdict(self.s), dict(os.environ), os.getcwd()
        futures = {client.submit(_init_and_run, name, settings, environ, cwd, *job, pure=False,
                                 key=f"{name}-{job[0]}-{os.urandom(4).hex()}"): job for job in jobs}
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
        """A job's records; a job whose workers kept dying (the scheduler gave up on it: ``KilledWorker``) is
        recorded as a grading error, never a score, and the others go on."""
        from distributed.scheduler import KilledWorker

        from autograder.grading import worker

        try:
            return future.result()
        except KilledWorker:
            return worker.grader_failed(*job, reason=worker.WORKER_DIED.format(
                times="each time the scheduler gave it to a Dask worker (KilledWorker)"), s=self.s)


def _cancelled() -> tuple:
    from concurrent.futures import CancelledError

    try:
        from distributed.client import FutureCancelledError

        return (CancelledError, FutureCancelledError)
    except ImportError:
        return (CancelledError,)
