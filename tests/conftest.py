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

# The modules whose graded batches take longest run first, so that under `pytest -n 2 --dist loadfile` no long
# batch starts last and leaves one core idle at the end (measured with --durations; order only, no test changes).
_LONGEST_FIRST = ("test_mutations.py", "test_grade_command.py", "test_cluster.py", "test_outcome.py", "test_hostile.py",
                  "test_marks.py", "test_feedback_page.py", "test_tamper.py", "test_sandbox.py")


def pytest_configure(config):
    import start_guard  # an unmarked test that starts a kernel, a browser or a server fails

    if not config.pluginmanager.has_plugin("start_guard"):
        config.pluginmanager.register(start_guard, "start_guard")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server on loopback for this test process (tests/helpers/postgres_server.py)."""
    import postgres_server as server

    yield from server.start()
