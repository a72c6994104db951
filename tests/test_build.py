"""lessons/ is built from solutions/ and holds nothing a learner must not see."""

import json
import subprocess
import sys

import nbformat
import pytest

from autograder import build, course

LESSONS = course.lesson_names()


def test_every_lesson_has_a_source_and_a_built_notebook():
    built = sorted(p.stem for p in course.LESSONS.glob("*.ipynb"))
    assert LESSONS and built == LESSONS, "run `make lessons` and commit lessons/"


def test_lessons_match_a_fresh_build(tmp_path):
    build.build(tmp_path)
    diffs = build.drift(tmp_path, course.LESSONS)
    assert not diffs, "lessons/ drifted from solutions/; run `make lessons`:\n" + "\n".join(diffs)[:5000]


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_notebook_leaks_nothing(lesson):
    nb = nbformat.read(course.LESSONS / f"{lesson}.ipynb", as_version=4)
    assert build.leaks(nb) == []
    source = "\n".join(c.source for c in nb.cells)
    solutions = course.read_source(course.SOLUTIONS / f"{lesson}.py")
    for cell in solutions.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            body = cell.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
            for line in body.strip().splitlines():
                if len(line.strip()) > 25:
                    assert line.strip() not in source, f"model answer line published in lessons/{lesson}: {line}"


def test_helper_module_holds_no_reference_or_grading_import():
    text = (course.LESSONS / "selfcheck.py").read_text()
    assert "autograder" not in text
    assert text.startswith("# Built from solutions/selfcheck.py")


def test_committed_notebooks_carry_no_outputs():
    files = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=course.ROOT, capture_output=True, text=True).stdout
    for f in files.split():
        nb = json.loads((course.ROOT / f).read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell["outputs"] and cell["execution_count"] is None, f


def test_malformed_header_fails_the_build(tmp_path):
    bad = tmp_path / "99_bad.py"
    bad.write_text('# %% nbgrader={"grade": false, "grade_id": "x", "solution": true,}\n'
                   "def f():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION\n")
    with pytest.raises(course.SourceError, match="not valid JSON"):
        course.read_source(bad)


def test_solution_without_metadata_fails_the_build(tmp_path):
    bad = tmp_path / "99_bad.py"
    bad.write_text("# %%\ndef f():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION\n")
    with pytest.raises(course.SourceError, match="no nbgrader metadata"):
        course.read_source(bad)


def test_duplicate_grade_id_fails_the_build(tmp_path):
    bad = tmp_path / "99_bad.py"
    header = '# %% nbgrader={"grade": false, "grade_id": "x", "locked": true, "schema_version": 3, "solution": false}\n'
    bad.write_text(header + "a = 1\n\n" + header + "b = 2\n")
    with pytest.raises(course.SourceError, match="used twice"):
        course.read_source(bad)


def test_cell_ids_are_stable_across_reads():
    for lesson in LESSONS:
        a = [c["id"] for c in course.read_source(course.SOLUTIONS / f"{lesson}.py").cells]
        b = [c["id"] for c in course.read_source(course.SOLUTIONS / f"{lesson}.py").cells]
        assert a == b and len(set(a)) == len(a)


def test_check_command_reports_drift(tmp_path, monkeypatch):
    target = tmp_path / "lessons"
    build.build(target)
    nb = target / f"{LESSONS[0]}.ipynb"
    nb.write_text(nb.read_text().replace("Lesson", "Lessen", 1))
    monkeypatch.setattr(course, "LESSONS", target)
    assert build.main(["--check"]) == 1


def test_graded_cell_without_hidden_check_fails_the_build(tmp_path):
    bad = tmp_path / "99_bad.py"
    bad.write_text('# %% nbgrader={"grade": true, "grade_id": "t", "locked": true, "points": 1, '
                   '"schema_version": 3, "solution": false}\nassert f() == 42\n')
    with pytest.raises(course.SourceError, match="hidden_cell.run"):
        course.read_source(bad)
