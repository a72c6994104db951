"""Warm kernels (autograder/kernel/warm_kernels.py): as safe and as exact as cold ones, through the real grading command.

One class is graded twice by ``grade.run`` with one worker (so every kernel of a run comes from the same warm
server), once with warm kernels and once with kernels started cold:

* ``a_leaver`` leaves everything it can behind: files in /tmp, /var/tmp, /dev/shm, its home and work folder; a
  detached process; changed modules (an attribute on numpy, matplotlib's rcParams, a module in sys.modules); an
  environment variable; a seeded random generator;
* ``b_probe``, graded right after it, looks for all of that, and prints what its kernel sees of itself (uid,
  limits, capabilities, environment, sys.path, mounts, processes, network);
* ``c_buggy`` (a catalogued bug) and ``d_blank`` (nothing answered) make the scores differ.

The warm run must leave nothing for the probe, see what a cold kernel sees, and give the same grades.
"""

from __future__ import annotations

import csv
import json
import os
import re

import nbformat
import pytest
from grading_helpers import with_cell
from run_once import once

from autograder import bugs, grade
from autograder.course import answers, notebooks
from autograder.kernel import sandbox

LESSON = "01_warmup"
pytestmark = [pytest.mark.grading,
              pytest.mark.skipif(os.geteuid() != 0 or sandbox.isolation_level() != "uid",
                                 reason="warm kernels need the full sandbox: root and bubblewrap")]

PLACES = ("/tmp", "/var/tmp", "/dev/shm", "~", ".")

LEAVER = r"""
import os, subprocess, sys
import numpy as np, matplotlib
print("RANDOM", repr(np.random.random()))
for place in PLACES:
    with open(os.path.join(os.path.expanduser(place), "left-behind"), "w") as fh:
        fh.write("x")
np.left_behind = True
matplotlib.rcParams["lines.linewidth"] = 9.0
sys.modules["left_behind"] = type(sys)("left_behind")
os.environ["LEFT_BEHIND"] = "1"
np.random.seed(1234)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)  # left-behind"], start_new_session=True)
print("LEFT")
""".replace("PLACES", repr(PLACES))

PROBE = r"""
import json, os, resource, socket, sys
import numpy as np, matplotlib
found = [place for place in PLACES if os.path.exists(os.path.join(os.path.expanduser(place), "left-behind"))]
found += ["numpy"] * hasattr(np, "left_behind") + ["rcParams"] * (matplotlib.rcParams["lines.linewidth"] == 9.0)
found += ["sys.modules"] * ("left_behind" in sys.modules) + ["environ"] * ("LEFT_BEHIND" in os.environ)
processes = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        uid = next(l for l in open(f"/proc/{pid}/status") if l.startswith("Uid:")).split()[1]
    except (OSError, StopIteration):
        continue
    found += ["process"] * (b"left-behind" in cmdline)
    processes.append(["me" if int(uid) == os.getuid() else uid, int(pid) == os.getpid()])
print("RANDOM", repr(np.random.random()))
print("FOUND", json.dumps(found))
print("PID1", open("/proc/1/cmdline", "rb").read().replace(b"\0", b" ").decode()[:300])
status = {l.split(":")[0]: l.split(":")[1].strip() for l in open("/proc/self/status")
          if l.split(":")[0] in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")}
limits = {name: resource.getrlimit(getattr(resource, name)) for name in ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_CORE",
          "RLIMIT_CPU", "RLIMIT_NPROC", "RLIMIT_NOFILE")}
mounts = sorted(l.split()[4] for l in open("/proc/self/mountinfo"))
listing = {place: sorted(os.listdir(os.path.expanduser(place))) for place in PLACES}
mask = os.umask(0); os.umask(mask)
sees = {"ids": [os.getuid() >= 100000, os.getuid() == os.geteuid() == os.getgid(), os.getgroups()],
        "cwd": os.getcwd(), "home": os.path.expanduser("~"), "env": sorted(os.environ), "sys.path": sys.path,
        "status": status, "limits": limits, "mounts": mounts, "listing": listing, "umask": mask,
        "hostname": socket.gethostname(), "interfaces": [name for _, name in socket.if_nameindex()],
        "processes": sorted(processes), "executable": sys.executable, "argv": sys.argv[1:2],
        "backend": matplotlib.get_backend(), "configdir": matplotlib.get_configdir()}
print("SEES", json.dumps(sees, sort_keys=True))
""".replace("PLACES", repr(PLACES))


def _grade(base, warm: bool) -> dict:
    root, out = base / "class", base / "out"
    bug = next(b for b in bugs.CATALOG if b.lesson == LESSON)
    nbs = {"a_leaver": with_cell(answers.fill(LESSON), "softmax", LEAVER),
           "b_probe": with_cell(answers.fill(LESSON), "softmax", PROBE),
           "c_buggy": answers.fill(LESSON, {bug.function: bug.source}), "d_blank": answers.student_notebook(LESSON)}
    for student, nb in nbs.items():
        notebooks.write_notebook(nb, root / student / f"{LESSON}.ipynb")
    settings = grade.Settings(out=str(out), lessons=[LESSON], workers=1, timeout=30, warm_kernels=warm)
    grade.run(root, settings, progress=False, log=lambda *a: None)
    with (out / "grades.csv").open() as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    said = {}
    for student in ("a_leaver", "b_probe"):
        nb = nbformat.read(out / "course" / "autograded" / student / LESSON / f"{LESSON}.ipynb", as_version=4)
        text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
                       if o.get("output_type") == "stream")
        said[student] = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in text.splitlines()
                         if re.match(r"^(RANDOM|FOUND|PID1|SEES|LEFT)\b", line) and " " in line}
        said[student]["LEFT"] = "LEFT" in text
    items = {s: json.loads((out / "state" / s / f"{LESSON}.json").read_text())["items"] for s in nbs}
    scores = {s: (r[f"{LESSON} status"], r[f"{LESSON} score"], r["flags"]) for s, r in rows.items()}
    return {"scores": scores, "items": items, "said": said}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {"warm": once(tmp_path_factory, "warm-kernels-warm", lambda base: _grade(base, True)),
            "cold": once(tmp_path_factory, "warm-kernels-cold", lambda base: _grade(base, False))}


def test_the_warm_run_really_forked_its_kernels_from_the_warm_server(runs):
    assert "--warm-server" in runs["warm"]["said"]["b_probe"]["PID1"]
    assert "bwrap" in runs["cold"]["said"]["b_probe"]["PID1"]


def test_nothing_a_notebook_leaves_behind_reaches_the_next_one(runs):
    for run in ("warm", "cold"):
        assert runs[run]["said"]["a_leaver"]["LEFT"], runs[run]["said"]["a_leaver"]  # it did leave all of it
        assert json.loads(runs[run]["said"]["b_probe"]["FOUND"]) == [], run


def test_every_warm_kernel_starts_from_a_random_generator_of_its_own(runs):
    said = runs["warm"]["said"]
    assert said["a_leaver"]["RANDOM"] != said["b_probe"]["RANDOM"]  # not the server's state, copied into both


def test_a_warm_kernel_sees_what_a_cold_kernel_sees(runs):
    warm, cold = (json.loads(runs[r]["said"]["b_probe"]["SEES"]) for r in ("warm", "cold"))

    def channel_free(mounts):  # the kernel's private folder has a random name, in another place when warm
        return [m for m in mounts if "mha-kernel" not in m]

    extra = set(channel_free(warm.pop("mounts"))) - set(channel_free(cold.pop("mounts")))
    assert extra <= {"/run/mha-stage", "/run/mha-stage/channel"}, extra  # the notebook's own tmpfs and channel
    listing_warm, listing_cold = warm.pop("listing"), cold.pop("listing")
    assert {k: [f for f in v if not f.startswith("mha-kernel")] for k, v in listing_warm.items()} == \
        {k: [f for f in v if not f.startswith("mha-kernel")] for k, v in listing_cold.items()}
    assert set(warm.pop("env")) ^ set(cold.pop("env")) == set()  # the same variables (their values hold paths)
    assert warm == cold


def test_warm_and_cold_kernels_give_the_same_grades(runs):
    warm, cold = runs["warm"], runs["cold"]
    assert warm["scores"] == cold["scores"]
    assert warm["items"] == cold["items"]
    scores = {score for _, score, _ in warm["scores"].values()}
    assert len(scores) >= 3, warm["scores"]  # full marks, a bug's loss and a blank notebook's zero


def test_a_warm_server_that_cannot_start_says_why_and_is_not_used(tmp_path):
    from autograder.kernel import warm_kernels

    server = warm_kernels.Server(library=str(tmp_path / "no-such-library"))
    assert not server.alive() and server.env() == {}
    assert "no-such-library" in server.error  # bubblewrap's own words: the library to bind is not there
    assert not os.path.exists(server.folder) and not os.path.exists(server.channels)  # nothing of it is left


def test_a_kernel_library_written_again_gets_a_new_server(tmp_path):
    """Each run writes the kernel library afresh; a server still bound to the old folder would show kernels an
    empty one (the lesson's self-check modules missing), so the next kernel gets a new server."""
    from autograder.grading.run import workspace
    from autograder.kernel import warm_kernels

    library = str(workspace.write_kernel_library(tmp_path / "kernel-library"))
    first = warm_kernels.Server.shared(library=library)
    assert first.alive(), first.error
    assert warm_kernels.Server.shared(library=library) is first  # the same library: the same server
    workspace.write_kernel_library(tmp_path / "kernel-library")
    second = warm_kernels.Server.shared(library=library)
    try:
        assert second is not first and second.alive() and not first.alive()
    finally:
        second.close()
