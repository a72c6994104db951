"""The grading command on a PostgreSQL gradebook: a real server (Debian's postgresql package) started on loopback
(tests/helpers/postgres_server.py).
"""

from __future__ import annotations

import csv
import os

import pytest

from autograder import grade
from autograder.bugs import by_id
from autograder.course import answers, notebooks
from autograder.grading.records.settings import COURSE_ID

LESSON = "01_warmup"
pytestmark = pytest.mark.grading


@pytest.fixture(scope="module")
def postgres_url(postgres_server):
    return postgres_server.database("gradebook")


def test_a_class_graded_in_parallel_into_postgresql(postgres_url, tmp_path):
    from nbgrader.api import Gradebook

    expected = {"alice": 8.0, "bob": 0.0, "carol": 7.0}
    nbs = {"alice": answers.fill(LESSON), "bob": answers.student_notebook(LESSON),
           "carol": answers.fill(LESSON, {"softmax": by_id("softmax_no_max_subtraction").source})}
    for student, nb in nbs.items():
        notebooks.write_notebook(nb, tmp_path / "class" / student / f"{LESSON}.ipynb")
    settings = grade.Settings(out=str(tmp_path / "out"), lessons=[LESSON], db_url=postgres_url, workers=2,
                              timeout=30)
    outcome = grade.run(tmp_path / "class", settings, progress=False, log=lambda *a: None)
    assert outcome["graded"] == 3
    with (tmp_path / "out" / "grades.csv").open() as fh:
        assert {r["student"]: float(r[f"{LESSON} score"]) for r in csv.DictReader(fh)} == expected
    with Gradebook(settings.db_url, COURSE_ID) as gb:  # the grades live in PostgreSQL, not in a SQLite file
        assert {s: float(gb.find_submission(LESSON, s).score) for s in expected} == expected
        assert sorted(s.id for s in gb.students) == sorted(expected)  # the canary student was removed again
    assert not (tmp_path / "out" / "course" / "gradebook.db").exists()
    assert oct((tmp_path / "out" / "course" / "nbgrader_config.py").stat().st_mode & 0o777) == "0o600"
    password = postgres_url.split(":")[2].split("@")[0].encode()
    holding = [p for p in (tmp_path / "out").rglob("*") if p.is_file() and password in p.read_bytes()]
    assert holding == [], holding  # the config takes it from the environment when nbgrader loads it
    assert "MHA_GRADEBOOK_URL" not in os.environ  # set for the run's nbgrader steps only
