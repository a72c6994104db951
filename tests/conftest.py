import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))  # the tests' shared helper modules
# nbgrader shells out to alembic, which lives beside this interpreter
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
os.environ.setdefault("MPLBACKEND", "Agg")
# Lesson 07 trains its model for a few steps only in every notebook the tests run (one nbval run of the solution
# notebook, in tests/notebooks/test_notebooks.py, trains in full and checks the heads' thresholds).
os.environ["MHA_SHORT_TRAINING"] = "1"

# Longest first (LPT): `make test` runs `pytest -n 2 --dist loadfile --no-loadscope-reorder`, so each test process takes
# the next module in this order when it runs out of work, and no long module starts last while the other process idles.
# (Without --no-loadscope-reorder, pytest-xdist hands out modules by their number of tests, which puts the longest
# modules, those with a few tests over one graded batch, at the very end.) The modules named here are the longest,
# in the order of their time on one test process (measured with --durations=0); every other module that holds a
# costly test (a marker below) comes next, the rest last.
_LONGEST_FIRST = ("test_mutations.py", "test_lessons_in_browser.py", "test_cluster.py", "test_salt_sweep.py",
                  "test_notebooks.py", "test_grade_command.py", "test_feedback_maths.py", "test_term.py", "test_lesson07_training.py",
                  "test_marks.py", "test_outcome.py", "test_non_root.py", "test_hostile.py", "test_widget_checks.py",
                  "test_feedback_page.py", "test_canary.py", "test_swamp.py", "test_blame.py", "test_tamper.py",
                  "test_lessons_graded.py")
_COSTLY = ("grading", "kernel", "browser", "server", "slow")


def pytest_configure(config):
    import start_guard  # an unmarked test that starts a kernel, a browser or a server fails

    if not config.pluginmanager.has_plugin("start_guard"):
        config.pluginmanager.register(start_guard, "start_guard")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    costly = {item.path for item in items if any(item.get_closest_marker(m) for m in _COSTLY)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank) + (item.path not in costly)))  # stable


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server on loopback for this test process (tests/helpers/postgres_server.py)."""
    import postgres_server as server

    yield from server.start()


# `make test` is the full proof (MHA_FULL_PROOF=1): it installed what every test needs (tests/system_packages.sh), so
# as root a test that skipped was not proved, and the run fails naming it. As an ordinary user the tests that need
# root are listed instead (they cannot run there). `MHA_ALLOW_SKIPS=1 make test` leaves the full-proof mode off.
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if os.environ.get("MHA_FULL_PROOF") != "1" or hasattr(config, "workerinput"):
        return
    skipped = [report for report in terminalreporter.stats.get("skipped", []) if report.when in ("setup", "call")]
    if not skipped:
        return
    names = [f"  {r.nodeid}: {r.longrepr[2] if isinstance(r.longrepr, tuple) else r.longrepr}" for r in skipped]
    if os.geteuid() != 0:
        terminalreporter.write_line(f"{len(skipped)} tests need root and were skipped:\n" + "\n".join(names))
        return
    terminalreporter.write_line(f"make test is the full proof, and {len(skipped)} tests skipped:\n" + "\n".join(names)
                                + "\nInstall what they name (tests/system_packages.sh), or run MHA_ALLOW_SKIPS=1 "
                                "make test for a partial run.", red=True)
    config._full_proof_failed = True


def pytest_sessionfinish(session, exitstatus):
    if getattr(session.config, "_full_proof_failed", False) and session.exitstatus == 0:
        session.exitstatus = 1
