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
