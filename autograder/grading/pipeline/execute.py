"""nbgrader's Execute step, hardened for untrusted notebooks (one module, longer than most: the hardenings below
override the same nbclient methods together).

``SafeExecute`` replaces nbgrader's ``Execute`` in the grading course's autograde preprocessors. It differs in four
ways, each of which nbgrader 0.9 handles by failing the whole submission or hanging:

* **A dead kernel** (``os._exit``, a kill signal, ``exit()``, a crash) stops the notebook there: the cell that
  killed it gets an error output, and every later code cell gets a ``NotRun`` error output. A graded cell without
  an error output scores full points in nbgrader, so no cell may be left without output when it never ran; the
  cells that ran before keep their honest scores.
* **A cell that times out** is interrupted (nbgrader's behaviour); if the kernel then does not answer within
  ``unresponsive_grace`` seconds (the code ignores the interrupt) the kernel is killed and the rest is ``NotRun``,
  instead of every later cell waiting out its own timeout.
* **Output** is capped as it arrives, every kind of it (streams, displays and their updates, results, errors,
  widget state; ``output_size``), at ``max_output_bytes`` per cell and ``max_notebook_output_bytes`` per notebook,
  so a notebook that prints hundreds of MB cannot fill the grader's memory or the graded notebook. The cell cap
  leaves a marker line on stdout (not stderr, which nbgrader would count as a failure of the cell); the notebook
  cap one marker where it is reached, and a flag (``NOTEBOOK_OUTPUT_LIMIT``). An error or stderr output past a
  cap is kept short rather than dropped, once per cell, so that a cell that failed still scores as failed.
* **Kernel start-up** is retried (``start_attempts``). A retry happens only when no cell has run yet, so no
  learner code runs twice.

Each kernel gets a private folder for its connection file and IPC sockets (inside bubblewrap the kernel has no
network), and with ``isolation`` ``uid`` (root; see ``autograder/kernel/sandbox.py``) a uid of its own
(``autograder/kernel/uids.py``) and a control group (``autograder/kernel/cgroups.py``); otherwise the launcher's watch
(``autograder/kernel/watchdog.py``) notes in the private folder which of its limits a kernel reached. When the
notebook is done, every process left is killed, a limit reached is flagged, and the notebook as a whole is stopped
after ``notebook_timeout`` seconds.

What grading saw beyond the outputs (``ExecutionReport``: what the sandbox saw, such as processes left behind or the
memory limit hit, and how each hidden test ended) is returned with the graded notebook, in its metadata under
``REPORT_KEY``, written after the kernel is gone and over anything the submission held there; the grading worker
reads it back with ``execution_report``.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from queue import Empty

import zmq
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Enum, Integer, Unicode

from autograder.checks import registry
from autograder.checks.verdict import Verdict
from autograder.grading.pipeline import costs, hidden_tests
from autograder.kernel import cgroups, protocol, sandbox, uids, warm_kernels, watchdog
from autograder.kernel.leftovers import private_folder_prefix
from autograder.kernel.sandbox import TRUNCATED_MARKER  # the same marker on both sides

NOT_RUN = "NotRun"
WRONG_ANSWER = "WrongAnswer"
HIDDEN_TEST_NOT_RUN = "HiddenTestNotRun"
KERNEL_DIED = "DeadKernelError"
TIMED_OUT = "timed_out_after_seconds"
NOTEBOOK_TIMEOUT = "NotebookTimeout"
MEMORY_LIMIT = "the kernel was stopped by the notebook's memory limit"
PROCESS_LIMIT = f"the notebook's processes and threads reached their limit ({sandbox.MAX_PROCS}); more were refused"
LEFT_PROCESSES = "left processes running after grading (killed)"
NOTEBOOK_OUTPUT_LIMIT = ("output limit: the notebook's output reached {limit:,} bytes in all; what it printed after "
                         "that was dropped")
OUTPUT_FRAMING = 64  # bytes an output takes in the graded notebook beyond its text: its JSON keys and punctuation
SHORT_ERROR = 1000  # characters of an error's message kept past an output cap
REPORT_KEY = "autograder_execution"  # the graded notebook's metadata key for ``ExecutionReport``


@dataclass
class ExecutionReport:
    """What grading one notebook found beyond its outputs, returned with the graded notebook (``REPORT_KEY``).

    ``sandbox_events``: flags for the report (processes left behind, a limit hit), in the order they happened;
    ``verdicts``: grade_id -> how its hidden test ended (``hidden_tests.Session.verdict``), decided in the
    grader, never anything the kernel said."""

    sandbox_events: list[str] = field(default_factory=list)
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    def event(self, text: str) -> None:
        if text not in self.sandbox_events:
            self.sandbox_events.append(text)


    def to_json(self) -> dict:
        return {"sandbox_events": list(self.sandbox_events),
                "verdicts": {gid: v.to_json() for gid, v in self.verdicts.items()}}


def execution_report(nb) -> ExecutionReport:
    """The ``ExecutionReport`` SafeExecute wrote into a graded notebook (empty for a notebook it did not grade)."""
    data = nb.metadata.get(REPORT_KEY) or {}
    return ExecutionReport([str(e) for e in data.get("sandbox_events", [])],
                           {str(gid): Verdict.from_json(v) for gid, v in (data.get("verdicts") or {}).items()})


def hidden_cell_passed(text: str) -> bool:
    from autograder.kernel.protocol import PASSED

    return PASSED in text


def error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"{ename}: {evalue}"])


def output_size(content) -> int:
    """The characters an output message's content takes as JSON, about: every string with its quotes, every key
    with its quotes, colon and comma, every container's brackets and every element's comma, however nested
    (metadata too), so empty containers count as well (``[[]] * N`` is 3N, not 0)."""
    size, todo = 0, [content]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, dict):
            size += 2 + sum(len(str(key)) + 4 for key in item)
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            size += 2 + len(item)
            todo.extend(item)
        else:
            size += 8
    return size


def failing(kind: str, content) -> bool:
    """Whether nbgrader scores a cell with this output as failed: an error, or anything on stderr."""
    return kind == "error" or (kind == "stream" and content.get("name") == "stderr")


def short_failure(kind: str, content) -> NotebookNode:
    """What is kept of a failing output past an output cap: enough to fail the cell, and say why, in little space."""
    if kind == "error":
        return error_output(str(content.get("ename", ""))[:100], str(content.get("evalue", ""))[:SHORT_ERROR])
    return NotebookNode(output_type="stream", name="stderr", text=str(content.get("text", ""))[:SHORT_ERROR])


MAX_STDIN_MESSAGE = protocol.MAX_MESSAGE  # bytes of one message on the kernel's stdin channel


class BoundedKernelClient(AsyncKernelClient):
    """The grader's client of a graded kernel: one message on the stdin channel (where, during a hidden test, the
    kernel sends what the learner's function returned, and where ``input()`` sends its prompt) may hold at most
    ``MAX_STDIN_MESSAGE`` bytes. ZeroMQ drops a larger one before it is read into the grader's memory and
    disconnects the kernel, which then waits for an answer until the cell's time limit: the notebook's own
    outcome (*timeout*), flagged. Three 300 MB prompts once took the grader's process to 1 GB."""

    def _create_connected_socket(self, channel, identity=None):
        if channel != "stdin":
            return super()._create_connected_socket(channel, identity)
        original = self.context.socket

        def bounded(socket_type, *args, **kwargs):
            sock = original(socket_type, *args, **kwargs)
            sock.setsockopt(zmq.MAXMSGSIZE, MAX_STDIN_MESSAGE)  # before it connects: it applies to its connections
            return sock

        self.context.socket = bounded
        try:
            return super()._create_connected_socket(channel, identity)
        finally:
            del self.context.socket

    async def _async_wait_for_ready(self, timeout=None):
        """jupyter_client's handshake (a kernel_info reply on shell, then a message on IOPub, which shows IOPub is
        connected), without its last step: waiting until IOPub has been quiet for 0.2 s, which costs every
        kernel 0.2 s idle. What is left on IOPub is only the handshake's own status messages, which nbclient skips
        (it reads only the messages whose parent is the request it sent), so it is drained without waiting."""
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            try:
                msg = await ensure_async(self.shell_channel.get_msg(timeout=1))
            except Empty:
                pass
            else:
                if msg["msg_type"] == "kernel_info_reply":
                    try:
                        await ensure_async(self.iopub_channel.get_msg(timeout=0.2))
                    except Empty:
                        pass  # IOPub is not connected yet: ask again
                    else:
                        self._handle_kernel_info_reply(msg)
                        break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout} seconds")
        while await ensure_async(self.iopub_channel.msg_ready()):
            await ensure_async(self.iopub_channel.get_msg(timeout=0))

    wait_for_ready = _async_wait_for_ready


class SafeExecute(Execute):
    max_output_bytes = Integer(1_000_000, help="Largest output kept per cell (characters, output_size).").tag(
        config=True)
    max_notebook_output_bytes = Integer(20 * 2**20, help="Largest output kept per notebook, all cells and every "
                                        "kind of output (characters, output_size, and OUTPUT_FRAMING each).").tag(
        config=True)
    kernel_memory_mb = Integer(2048, help="The kernel's memory limit (MB), as its kernelspec sets it; hidden tests "
                               "choose inputs too large for an array a function must not build.").tag(config=True)
    unresponsive_grace = Integer(10, help="Seconds a timed-out kernel has to answer before it is killed.").tag(
        config=True)
    start_attempts = Integer(3, help="Kernel start attempts before the notebook fails.").tag(config=True)
    isolation = Enum(("uid", "userns", "none"), "none", help="How kernels are isolated (autograder/kernel/sandbox.py).").tag(
        config=True)
    notebook_timeout = Integer(600, help="Seconds a whole notebook may run before its kernel is killed.").tag(
        config=True)
    warm_kernels = Bool(True, help="With isolation 'uid', fork kernels from a warm server (autograder/kernel/warm_kernels.py)"
                                   " instead of starting each cold.").tag(config=True)
    kernel_library = Unicode("", help="The kernel library the kernelspec binds (for the warm server).").tag(config=True)

    _hidden: dict = {}
    report: ExecutionReport = ExecutionReport()  # of the notebook being graded (a new one for each: ``preprocess``)
    _start_cold = False  # a warm start of this notebook's kernel failed: the next attempt starts cold

    def preprocess(self, nb, resources=None, km=None):
        notebook = ((resources or {}).get("nbgrader") or {}).get("notebook") or ""
        self._hidden = registry.tests_of(notebook)
        self._start_cold = False
        self.report = ExecutionReport()
        try:
            return self._preprocess_with_retries(nb, resources, km)
        finally:  # after the kernel is gone (``_end_sandbox``): what was found goes out with the graded notebook
            nb.metadata[REPORT_KEY] = self.report.to_json()

    def _preprocess_with_retries(self, nb, resources, km):
        for attempt in range(1, self.start_attempts + 1):
            self._reset_safety()
            self.report = ExecutionReport()
            try:
                with costs.phase(costs.KERNEL):  # what the cells do not take: starting and stopping the kernel
                    return super().preprocess(nb, resources, km)
            except Exception as exc:  # noqa: BLE001 - only start-up failures are retried
                if self._cells_started or attempt == self.start_attempts:
                    raise
                if self._warm is not None:  # whatever broke, the next attempt does not depend on the warm server
                    self._start_cold = True
                    self.log.warning("warm kernel start failed; the warm server's log ends: %s",
                                     self._warm.log()[-2000:])
                self.log.warning("kernel start failed (%s: %s); retrying", type(exc).__name__, exc)
                time.sleep(0.5 * attempt)
            finally:
                self._end_sandbox()

    async def async_start_new_kernel(self, **kwargs):
        # every kernel started here asks the grader for its hidden tests (autograder/kernel/hidden_cell.py) and trains
        # lesson 07's model for a few steps only (training is never graded)
        kwargs["env"] = {**os.environ, **kwargs.get("env", {}), "MHA_HIDDEN_TESTS": "grader", "MHA_SHORT_TRAINING": "1",
                         **(self._warm.env() if self._warm is not None else {})}
        return await super().async_start_new_kernel(**kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)  # nbclient binds the name to its own coroutine

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        self._warm = self._warm_server()
        # short: IPC socket paths have a length limit
        self._private = tempfile.mkdtemp(prefix=private_folder_prefix(),
                                         dir=self._warm.channels if self._warm else None)
        channel = os.path.join(self._private, "channel")
        os.mkdir(channel, 0o700)
        os.mkdir(os.path.join(self._private, "scratch"), 0o700)
        km.client_factory = BoundedKernelClient
        km.transport = "ipc"
        km.connection_file = os.path.join(channel, "kernel.json")
        arguments = [a for a in self.extra_arguments if not a.startswith("--uid=")]
        if self.isolation == "uid":
            self._uid = uids.acquire()
            arguments.append(f"--uid={self._uid.uid}")
        self.extra_arguments = arguments
        self._deadline = threading.Timer(self.notebook_timeout, self._expire)
        self._deadline.daemon = True
        self._deadline.start()
        return km

    def _warm_server(self):
        """This process's warm kernel server, or None (not isolated by uid, switched off, or it cannot start)."""
        if self.isolation != "uid" or not self.warm_kernels or not self.kernel_library or self._start_cold:
            return None
        server = warm_kernels.Server.shared(library=self.kernel_library)
        if not server.alive():
            self.log.warning("warm kernels unavailable, starting kernels cold: %s", server.error)
            return None
        return server

    def _expire(self):
        """The whole notebook ran too long: kill its kernel and everything it started."""
        self._expired = True
        if self._uid is not None:
            cgroups.kill(sandbox.cgroup_name(self._uid.uid))
            uids.kill(self._uid.uid)
        elif getattr(self, "km", None) is not None:
            self._kill()

    async def _async_cleanup_kernel(self):
        if self._uid is not None:  # before the kernel stops: anything else of its uid was left behind
            alive = getattr(self, "km", None) is not None and await ensure_async(self.km.is_alive())
            if len(uids.processes_of(self._uid.uid)) > (1 if alive else 0):
                self.report.event(LEFT_PROCESSES)
        await self._stop_kernel_process()
        return await super()._async_cleanup_kernel()

    async def _stop_kernel_process(self) -> None:
        """Kill the kernel's process group and reap it at once. A graded kernel's state is never kept, so it needs
        no graceful shutdown, and jupyter_client's shutdown waits for the process by polling it every 0.1 s (about
        0.1 s idle per notebook); nbclient's cleanup then finds it stopped. Whatever the kernel started outside
        its group is the sandbox's to end (``_end_sandbox``), as before."""
        process = getattr(getattr(getattr(self, "km", None), "provisioner", None), "process", None)
        if process is None or process.poll() is not None:
            return
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            await ensure_async(self.km.provisioner.kill())
            process.wait(timeout=self.unresponsive_grace)
        except Exception as exc:  # noqa: BLE001 - nbclient's own shutdown comes next and tries again
            self.log.warning("could not stop the kernel at once: %s", exc)
        if self._warm is not None:  # the process reaped is the launcher alone (a cold one's holds the kernel's CPU)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            launcher = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            costs.current().kernel_used(costs.KERNEL, launcher)

    _cleanup_kernel = run_sync(_async_cleanup_kernel)  # nbclient binds the name to its own coroutine

    def _end_sandbox(self):
        """Kill whatever the notebook left, release its uid and control group, remove its private folder."""
        if self._deadline is not None:
            self._deadline.cancel()
        if self._expired:
            self.report.event(f"notebook time limit: the notebook ran longer than {self.notebook_timeout} s "
                                  "in all and was stopped")
        hit = watchdog.read_events(os.path.join(self._private, watchdog.EVENTS)) if self._private else set()
        group = sandbox.cgroup_name(self._uid.uid) if self._uid is not None else (
            sandbox.private_cgroup_name(self._private) if self._private else None)
        if group is not None:
            hit |= {watchdog.MEMORY} if cgroups.memory_limit_hit(group) else set()
            hit |= {watchdog.PROCESSES} if cgroups.process_limit_hit(group) else set()
            cgroups.remove(group)
        if self._uid is not None:
            uids.kill(self._uid.uid)
            self._uid.release()
        if watchdog.MEMORY in hit:
            self.report.event("memory limit: " + MEMORY_LIMIT)
        if watchdog.PROCESSES in hit:
            self.report.event("process limit: " + PROCESS_LIMIT)
        if self._private:
            shutil.rmtree(self._private, ignore_errors=True)
        self._uid, self._private, self._deadline = None, None, None

    def _reset_safety(self):
        self._uid, self._private, self._deadline, self._expired = None, None, None, False
        self._warm = None
        self._clock = None  # the kernel's CPU (``_kernel_cpu``)
        self._cells_started = False
        self._stopped = None
        self._timed_out = False
        self._output_bytes = {}
        self._truncated = set()
        self._failed = set()  # cells holding a failing output (``failing``)
        self._notebook_output = 0  # what the notebook's kept outputs take, OUTPUT_FRAMING included
        self._notebook_full = False
        self._notebook_marked = False

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        self._cells_started = True
        if self._stopped:
            cell.outputs = [error_output(NOT_RUN, f"this cell was not run: {self._stopped}")]
            return cell, resources
        self._timed_out = False
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            if self._expired:
                cell.outputs.append(error_output(
                    NOTEBOOK_TIMEOUT, f"the notebook ran longer than {self.notebook_timeout} s in all and was "
                                      "stopped during this cell; the cells after it were not run"))
                self._stopped = "the notebook ran past its time limit in an earlier cell"
            else:
                cell.outputs.append(error_output(
                    KERNEL_DIED, "the kernel died while running this cell (sys.exit/os._exit, exit(), a kill signal, "
                                 "the memory limit or a crash); the cells after it were not run"))
                self._stopped = "the kernel died in an earlier cell"
            return cell, resources
        except CellTimeoutError as exc:
            self._timed_out = True
            if not any(o.get("output_type") == "error" for o in cell.outputs):
                cell.outputs.append(error_output("CellTimeoutError", str(exc).splitlines()[0]))
        if self._timed_out:
            cell.metadata[TIMED_OUT] = int(self.timeout)  # read (and removed) by autograder.grading.pipeline.learner_errors
        if self._timed_out and not self._responsive():
            self._kill()
            self._stopped = (f"the kernel ignored the interrupt after a cell ran longer than {self.timeout} s, "
                             "so it was stopped")
        return cell, resources

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        """Run a cell; for a hidden test cell, run its test here and answer the kernel's calls meanwhile."""
        meta = cell.metadata.get("nbgrader", {})
        test = self._hidden.get(meta.get("grade_id")) if meta.get("grade") and not meta.get("solution") else None
        kind = costs.LEARNER if test is None else costs.HIDDEN
        with costs.phase(kind):
            before = self._kernel_cpu()
            try:
                return await self._execute_cell(test, meta.get("grade_id"), cell, cell_index, execution_count,
                                                store_history)
            finally:
                after = self._kernel_cpu()
                costs.current().kernel_used(kind, None if before is None or after is None else after - before)

    execute_cell = run_sync(async_execute_cell)  # nbclient binds the name to its own coroutine

    def _kernel_cpu(self) -> float | None:
        """The kernel's CPU seconds so far (``costs.KernelClock``), or None without a uid of its own. Its processes
        are found before its first cell, and what it used until then is its start's."""
        if self._clock is None:
            self._clock = costs.KernelClock(uids.processes_of(self._uid.uid) if self._uid is not None else [])
            costs.current().kernel_used(costs.KERNEL, self._clock.read())
        return self._clock.read()

    async def _execute_cell(self, test, grade_id, cell, cell_index, execution_count, store_history):
        if test is None:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        session = hidden_tests.Session(test, memory_limit=self.kernel_memory_mb << 20)
        self.kc.allow_stdin = True
        server = asyncio.ensure_future(self._serve_stdin(session))
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        finally:
            server.cancel()
            session.close()
            self.kc.allow_stdin = False
            if self._timed_out:  # the kernel may have been cut off the channel (``BoundedKernelClient``): a new one
                self.kc.stdin_channel.close()
                self.kc._stdin_channel = None
            ended = session.verdict()
            self._write_verdict(cell, session, ended)
            self.report.verdicts[grade_id] = ended

    async def _serve_stdin(self, session):
        loop = asyncio.get_running_loop()
        while True:
            msg = await ensure_async(self.kc.stdin_channel.get_msg(timeout=None))
            if msg.get("msg_type") != "input_request":
                continue
            reply = await loop.run_in_executor(None, session.answer, msg["content"].get("prompt", ""))
            self.kc.input(reply)

    @staticmethod
    def _write_verdict(cell, session, ended: Verdict):
        """The grader's verdict decides the cell: a failure becomes its error output (nbgrader scores it 0)."""
        if session.printed:
            cell.outputs.append(NotebookNode(output_type="stream", name="stdout", text=session.printed))
        has_error = any(o.get("output_type") == "error" for o in cell.outputs)
        if not session.finished:
            if not has_error:
                cell.outputs.append(error_output(
                    HIDDEN_TEST_NOT_RUN, "the hidden test of this cell did not run to its end (the notebook "
                                         "interrupted it or changed how the cell runs); it cannot pass"))
        elif not ended.passed:
            message = ended.message or "the hidden test did not pass"
            cell.outputs = [o for o in cell.outputs if o.get("output_type") != "error" and not (
                o.get("output_type") == "stream" and hidden_cell_passed(o.get("text", "")))]
            cell.outputs.append(error_output(WRONG_ANSWER, message))

    async def _async_handle_timeout(self, timeout, cell=None):
        self._timed_out = True
        return await super()._async_handle_timeout(timeout, cell)

    def _responsive(self) -> bool:
        async def probe():
            msg_id = self.kc.kernel_info()
            deadline = time.monotonic() + self.unresponsive_grace
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=remaining))
                except (Empty, asyncio.TimeoutError):
                    return False
                if msg["parent_header"].get("msg_id") == msg_id:
                    return True
            return False

        try:
            return run_sync(probe)()
        except Exception:  # noqa: BLE001 - a kernel that cannot even be probed is not responsive
            return False

    def _kill(self):
        try:
            run_sync(self.km.shutdown_kernel)(now=True)
        except Exception as exc:  # noqa: BLE001
            self.log.warning("could not stop the kernel: %s", exc)

    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        kind = msg.get("msg_type")
        size = output_size(content)
        used = self._output_bytes.get(cell_index, 0)
        self._output_bytes[cell_index] = used + size
        if used + size <= self.max_output_bytes and self._notebook_room(size + OUTPUT_FRAMING):
            if failing(kind, content):
                self._failed.add(cell_index)
            return super().output(outs, msg, display_id, cell_index)
        if self._notebook_full and not self._notebook_marked:
            self._notebook_marked = True
            outs.append(NotebookNode(output_type="stream", name="stdout", text=(
                f"\n[grader] output dropped: this notebook printed more than {self.max_notebook_output_bytes} bytes in "
                "all\n")))
        elif not self._notebook_full and cell_index not in self._truncated:
            self._truncated.add(cell_index)
            room = max(self.max_output_bytes - used, 0)
            kept = content.get("text", "")[:room] if kind == "stream" and not failing(kind, content) else ""
            outs.append(NotebookNode(output_type="stream", name="stdout", text=(
                kept + f"\n{TRUNCATED_MARKER}: this cell printed more than {self.max_output_bytes} bytes\n")))
        if failing(kind, content) and cell_index not in self._failed:
            self._failed.add(cell_index)
            outs.append(short_failure(kind, content))
        return None

    def _notebook_room(self, size: int) -> bool:
        """Whether the notebook's outputs may grow by ``size``: if so, they have; if not, the notebook is full
        (flagged once) and takes no more output."""
        if not self._notebook_full and self._notebook_output + size <= self.max_notebook_output_bytes:
            self._notebook_output += size
            return True
        if not self._notebook_full:
            self._notebook_full = True
            self.report.event(NOTEBOOK_OUTPUT_LIMIT.format(limit=self.max_notebook_output_bytes))
        return False

    def clear_output(self, outs, msg, cell_index):
        self._failed.discard(cell_index)  # what failed the cell is gone with its outputs
        return super().clear_output(outs, msg, cell_index)

    def _update_display_id(self, display_id, msg):
        """A display updated in place (in every cell showing it) counts as new output of the notebook."""
        shown = sum(len(indices) for indices in self._display_id_map.get(display_id, {}).values())
        if self._notebook_room(shown * (output_size(msg.get("content", {})) + OUTPUT_FRAMING)):
            return super()._update_display_id(display_id, msg)
        return None

    def handle_comm_msg(self, outs, msg, cell_index):
        """Widget state is kept in the graded notebook: it counts as output of the notebook."""
        if self._notebook_room(output_size(msg.get("content", {}).get("data", {})) + OUTPUT_FRAMING):
            return super().handle_comm_msg(outs, msg, cell_index)
        return None
