"""Students kept apart: attacks on other students and on the grading machine, graded beside honest notebooks.

One batch through the real grading command (two workers, as root: each kernel in its own bubblewrap namespaces,
under a uid of its own, in its own control group). Each attacker is a lesson-01 notebook with honest answers
plus one extra cell that tries one thing and prints what it achieved; the tests read those lines from the graded
notebooks and assert on grades.csv, the flags and the machine's state after the batch:

* a process left behind (a forked child whose main thread exits with a raw ``exit`` syscall, so it looks like a
  zombie while its other thread runs on) must die with its kernel and reach no later notebook;
* the process table: a kernel sees only its own processes (no other kernel, no grader command line);
* other kernels' channels: no TCP port or unix socket of another kernel or of the machine can be reached;
* the network: a web server the test starts on 127.0.0.1 receives nothing;
* other students' original submissions and the grading workspace are not there to read;
* memory outside the limits: tmpfs inodes run out at the sandbox's limit, SysV/POSIX IPC objects die with the
  kernel, and no key is added to the keyrings (which are not namespaced: a sandbox uid's keys would outlive it);
* CPU: a notebook's busy processes share at most one core, and their number is capped.
"""

from __future__ import annotations

import csv
import http.server
import os
import threading
from pathlib import Path

import nbformat
import pytest
from grading_helpers import with_cell
from run_once import once

from autograder import grade
from autograder.course import answers, notebooks
from autograder.kernel import leftovers, sandbox, uids

LESSON = "01_warmup"
FULL = 8.0
pytestmark = [pytest.mark.grading,
              pytest.mark.skipif(os.geteuid() != 0 or sandbox.isolation_level() != "uid",
                                 reason="the full sandbox needs root and bubblewrap")]

SURVIVOR = r"""
import ctypes, os, platform, threading, time
SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(platform.machine(), 60)
if os.fork() == 0:
    def linger():
        deadline = time.time() + 300
        while time.time() < deadline:
            for pid in os.listdir("/proc"):
                try:
                    os.listdir(f"/proc/{pid}/root/tmp")  # other kernels' files, if it could see them
                except OSError:
                    pass
            time.sleep(0.2)
    threading.Thread(target=linger).start()
    ctypes.CDLL(None).syscall(SYS_EXIT, 0)  # the main thread ends; the process lives on in its thread
time.sleep(0.5)
uids_seen = set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/status") as fh:
            uids_seen.add(next(line for line in fh if line.startswith("Uid:")).split()[1])
    except (OSError, StopIteration):
        pass
print("UIDS", " ".join(sorted(uids_seen)), "MINE", os.getuid())
"""

EAVESDROPPER = r"""
import glob, os, socket
reached, originals = [], []
for port in HOST_PORTS:  # every TCP port listening on the grading machine when the batch started
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        reached.append(f"tcp:{port}")
    except OSError:
        pass
from ipykernel.connect import get_connection_file
mine = os.path.dirname(get_connection_file())
for line in open("/proc/net/unix").read().splitlines()[1:]:
    path = line.split()[-1] if len(line.split()) > 7 else ""
    if path.startswith("/") and "mha-kernel-" in path and not path.startswith(mine):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            reached.append(path)
        except OSError:
            pass
for path in glob.glob("/tmp/mha-kernel-*/channel/kernel*"):  # every process it can see is its own
    if not path.startswith(mine):
        reached.append(path)
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if b"autograder" in open(f"/proc/{pid}/cmdline", "rb").read().replace(b"autograder.kernel.launcher", b""):
            reached.append(f"cmdline:{pid}")
    except OSError:
        pass
for path in ORIGINAL_PATHS:
    try:
        originals.append(len(open(path, "rb").read()))
    except OSError:
        pass
print("REACHED", len(reached), reached[:5])
print("ORIGINALS", len(originals))
"""

NETWORK = r"""
import urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{SERVER_PORT}/hostile", timeout=3).read()
    print("NETWORK reached")
except Exception as exc:
    print("NETWORK blocked", type(exc).__name__)
"""

INODES = r"""
import os
made, error = 0, ""
for folder in ("/tmp", "/dev/shm", "/var/tmp"):
    try:
        while made < 200_000:
            open(f"{folder}/f{made}", "w").close()
            made += 1
    except OSError as exc:
        error = exc.strerror
print("FILES", made, error)
"""

IPC = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
IPC_PRIVATE, IPC_CREAT = 0, 0o1000
made = []
for i in range(4):
    shm = libc.shmget(IPC_PRIVATE, 64 << 20, IPC_CREAT | 0o666)
    if shm >= 0:
        addr = libc.shmat(shm, None, 0)
        made.append(f"shm:{shm}")
for i in range(4):
    if libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o666) >= 0:
        made.append("msg")
    if libc.semget(IPC_PRIVATE, 8, IPC_CREAT | 0o666) >= 0:
        made.append("sem")
try:
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    if rt.mq_open(b"/hostile-mq", os.O_CREAT | os.O_RDWR, 0o666, None) >= 0:
        made.append("mq")
except OSError:
    pass
print("IPC", len(made))
"""

KEYS = r"""
import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
keys = 0
for ring in (-4, -5, -3, -2):  # the uid's user and user-session keyrings, the session's and the process's
    for i in range(10):
        keys += libc.syscall(ADD_KEY, b"user", f"mha-{ring}-{i}".encode(), b"secret", ctypes.c_size_t(6),
                             ctypes.c_int(ring)) > 0
rings = sum(libc.syscall(KEYCTL, ctypes.c_int(0), ctypes.c_int(ring), ctypes.c_int(1)) > 0 for ring in (-4, -5))
print("KEYS", keys, rings)
"""

CPU_HOG = r"""
import os, time
children, started = [], time.time()
go = started + 3  # every child waits until all are forked, then all spin together: forking is not slowed by them
for _ in range(100):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        while time.time() < go:
            time.sleep(0.05)
        while time.time() < go + 3:
            pass
        os._exit(0)
    children.append(pid)
cpu = 0.0
for pid in children:
    _, _, usage = os.wait4(pid, 0)
    cpu += usage.ru_utime + usage.ru_stime
print("FORKS", len(children), "CPU_RATIO", round(cpu / (time.time() - started), 2))
"""


class _Counter(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self):  # noqa: N802 - the handler API
        type(self).hits += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def _listening_ports() -> list:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            if line.split()[3] == "0A":
                ports.add(int(line.split()[1].split(":")[1], 16))
    return sorted(ports)


def _ipc_objects() -> dict:
    found = {}
    for kind in ("shm", "msg", "sem"):
        try:
            found[kind] = len(Path(f"/proc/sysvipc/{kind}").read_text().splitlines()) - 1
        except OSError:
            found[kind] = 0
    return found


def _key_users() -> set:
    """The sandbox uids that hold keys (the keyrings are the machine's, not a namespace's)."""
    holders = {int(line.split(":")[0]) for line in Path("/proc/key-users").read_text().splitlines()}
    return {uid for uid in holders if uid in range(uids.BASE, uids.BASE + uids.SPAN)}


def _grade_batch(base: Path) -> dict:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    root, out = base / "class", base / "out"
    originals = [str(root / f"honest_{i}" / f"{LESSON}.ipynb") for i in range(3)]
    attacks = {"survivor": SURVIVOR, "eavesdropper": EAVESDROPPER.replace("ORIGINAL_PATHS", repr(originals)).replace(
        "HOST_PORTS", repr(_listening_ports())),
               "network": NETWORK, "inodes": INODES, "ipc": IPC + KEYS, "cpu_hog": CPU_HOG}
    nbs = {f"honest_{i}": answers.fill(LESSON) for i in range(3)}
    for name, source in attacks.items():
        nbs[name] = with_cell(answers.fill(LESSON), "softmax", source.replace("SERVER_PORT", str(port)))
    for student, nb in nbs.items():
        notebooks.write_notebook(nb, root / student / f"{LESSON}.ipynb")
        os.chmod(root / student / f"{LESSON}.ipynb", 0o644)  # readable by anyone, as a usual umask leaves it
    ipc_before, key_users_before = _ipc_objects(), _key_users()
    settings = grade.Settings(out=str(out), lessons=[LESSON], workers=2, timeout=20, memory_mb=2048)
    grade.run(root, settings, progress=False, log=lambda *a: None)
    server.shutdown()
    with (out / "grades.csv").open() as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    said = {}
    for student in nbs:
        nb = nbformat.read(out / "course" / "autograded" / student / LESSON / f"{LESSON}.ipynb", as_version=4)
        said[student] = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
                                if o.get("output_type") == "stream")
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _uid(pid) in range(uids.BASE, uids.BASE + uids.SPAN)
            and not uids.is_held(_uid(pid))]  # a held uid belongs to a kernel of a grader still running
    groups = leftovers.stale_sandbox_uids()
    key_users = sorted(_key_users() - key_users_before)  # a uid's keys outlive it: this machine's earlier ones stay
    private = leftovers.stale_private_folders() + [str(p) for p in
                                                   Path("/tmp").glob(leftovers.private_folder_prefix() + "*")]
    return {"rows": rows, "said": said, "hits": _Counter.hits, "ipc_before": ipc_before, "ipc_after": _ipc_objects(),
            "left": left, "groups": groups, "private": private, "key_users": key_users}


def _uid(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return once(tmp_path_factory, "sandbox-attacks", _grade_batch)


def _line(batch, student, key) -> list:
    for line in batch["said"][student].splitlines():
        if line.startswith(key + " "):
            return line.split()[1:]
    raise AssertionError(f"{student} printed no {key} line:\n{batch['said'][student][-2000:]}")


def test_every_student_keeps_the_score_of_their_honest_work(batch):
    scores = {s: float(r[f"{LESSON} score"]) for s, r in batch["rows"].items()}
    assert scores == {s: FULL for s in scores}, scores
    assert all(not batch["rows"][f"honest_{i}"]["flags"] for i in range(3))


def test_a_process_left_behind_dies_with_its_kernel_and_is_flagged(batch):
    assert "left processes running after grading (killed)" in batch["rows"]["survivor"]["flags"]
    assert batch["left"] == [], "processes of sandbox uids outlived the batch"


def test_a_kernel_sees_only_its_own_processes(batch):
    words = _line(batch, "survivor", "UIDS")
    seen, mine = set(words[:words.index("MINE")]), words[-1]
    assert seen <= {"0", mine}, seen  # root here is bubblewrap's own init, inside the namespace


def test_no_kernel_reaches_another_kernel_the_grader_or_the_network(batch):
    assert _line(batch, "eavesdropper", "REACHED")[0] == "0", batch["said"]["eavesdropper"]
    assert _line(batch, "network", "NETWORK")[0] == "blocked"
    assert batch["hits"] == 0, "a graded kernel reached a server on the grading machine's loopback"
    assert "uses the network" in batch["rows"]["network"]["flags"]


def test_other_students_originals_cannot_be_read(batch):
    assert _line(batch, "eavesdropper", "ORIGINALS") == ["0"]


def test_tmpfs_inodes_run_out_at_the_sandbox_limit(batch):
    made = int(_line(batch, "inodes", "FILES")[0])
    assert 0 < made <= sandbox.TMP_INODES, made


def test_ipc_objects_die_with_the_kernel(batch):
    assert int(_line(batch, "ipc", "IPC")[0]) > 0  # it did make some, in its own namespace
    assert batch["ipc_after"] == batch["ipc_before"]


def test_no_key_of_a_sandbox_uid_is_made_or_outlives_its_kernel(batch):
    assert _line(batch, "ipc", "KEYS") == ["0", "0"]  # no key, and no keyring made for the uid
    assert batch["key_users"] == [], batch["key_users"]


def test_busy_processes_share_one_core_and_are_capped(batch):
    words = _line(batch, "cpu_hog", "FORKS")
    forks, ratio = int(words[0]), float(words[2])
    assert forks < sandbox.MAX_PROCS, forks
    assert ratio <= 1.25, f"{forks} busy processes used {ratio} cores"


def test_nothing_of_the_sandboxes_remains(batch):
    assert batch["groups"] == [] and batch["private"] == []
