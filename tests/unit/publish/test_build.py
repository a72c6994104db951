"""lessons/ is built from solutions/ and holds nothing a learner must not see."""

import json
import re
import shutil
import subprocess

import nbformat

import pytest

from autograder.publish import build, given_code
from autograder import course
from autograder.course import notebooks

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
    solutions = notebooks.read_source(course.SOLUTIONS / f"{lesson}.py")
    # a find-the-bug exercise hands out its buggy code on purpose: the lines it shares with the fix are not a leak
    given = {line.strip() for b in given_code.given_bugs(lesson) for line in b.source.splitlines()}
    for cell in solutions.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            body = cell.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
            for line in body.strip().splitlines():
                if len(line.strip()) > 25 and line.strip() not in given:
                    assert line.strip() not in source, f"model answer line published in lessons/{lesson}: {line}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_provenance_is_in_the_metadata_not_in_a_cell(lesson):
    nb = nbformat.read(course.LESSONS / f"{lesson}.ipynb", as_version=4)
    assert nb.metadata["mha_course"] == {"source": f"solutions/{lesson}.py", "built_by": "make lessons",
                                         "note": f"Generated: edit solutions/{lesson}.py, not this notebook, then "
                                                 "run `make lessons`."}
    assert nb.cells[0].source.startswith("# Lesson "), "the learner's first cell is the lesson's title"
    assert not [c for c in nb.cells if "make lessons" in c.source or "solutions/" in c.source]


def test_light_header_gets_nbgrader_constant_keys(tmp_path):
    source = tmp_path / "99_light.py"
    source.write_text('# %% nbgrader={"grade_id": "f", "solution": true}\ndef f():\n    ### BEGIN SOLUTION\n'
                      '    return 42\n    ### END SOLUTION\n\n# %% [markdown] nbgrader={"grade_id": "why", '
                      '"solution": true, "points": 2}\n# Why?\n\n# %% [markdown] nbgrader={"grade_id": "note"}\n'
                      '# A note.\n')
    cells = notebooks.read_source(source).cells
    assert [dict(c.metadata["nbgrader"]) for c in cells] == [
        {"grade": False, "grade_id": "f", "locked": False, "schema_version": 3, "solution": True, "task": False},
        {"grade": True, "grade_id": "why", "locked": False, "points": 2, "schema_version": 3, "solution": True,
         "task": False},
        {"grade": False, "grade_id": "note", "locked": True, "schema_version": 3, "solution": False, "task": False}]


@pytest.mark.parametrize("header, words", [
    ('{"grade": true, "grade_id": "x"}', 'grade=true contradicts'),  # graded without points
    ('{"grade_id": "x", "task": true}', 'task=true contradicts'),
    ('{"grade_id": "x", "point": 1}', "unknown nbgrader key"),
    ('{"points": 1}', "lacks 'grade_id'"),
])
def test_header_that_nbgrader_would_read_otherwise_fails_the_build(tmp_path, header, words):
    bad = tmp_path / "99_bad.py"
    bad.write_text(f"# %% [markdown] nbgrader={header}\n# text\n")
    with pytest.raises(course.SourceError, match=words):
        notebooks.read_source(bad)


def test_full_nbgrader_headers_are_still_read(tmp_path):
    source = tmp_path / "99_full.py"
    source.write_text('# %% [markdown] nbgrader={"grade": false, "grade_id": "x", "locked": true, '
                      '"schema_version": 3, "solution": false, "task": false}\n# text\n')
    assert notebooks.read_source(source).cells[0].metadata["nbgrader"]["locked"] is True


def test_lesson_headers_are_light_and_within_the_line_length():
    for path in course.lesson_sources():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("# %%"):
                assert len(line) <= 120, f"{path.name}:{number} is longer than 120 characters"
                assert '"schema_version"' not in line and '"task"' not in line, f"{path.name}:{number}"


def test_helper_modules_hold_no_reference_or_grading_import():
    for helper in course.SELFCHECK_FILES:
        text = (course.LESSONS / helper).read_text()
        assert "autograder" not in text, helper
        assert text.startswith(f"# Built from solutions/{helper}"), helper


def test_each_lesson_imports_only_its_own_self_check_module():
    assert set(course.SELFCHECK_FILES) == {p.name for p in course.SOLUTIONS.glob("selfcheck_*.py")}
    for lesson in LESSONS:
        own = course.selfcheck_module(lesson)
        assert f"{own}.py" in course.SELFCHECK_FILES, f"solutions/{own}.py is missing from course.SELFCHECK_FILES"
        source = (course.SOLUTIONS / f"{lesson}.py").read_text()
        imported = set(re.findall(r"^\s*(?:from|import) (selfcheck\w*)", source, re.M))
        assert imported == {own}, f"{lesson} imports {sorted(imported)}; its setup cell imports only {own}"


def test_self_check_names_are_unique_across_lessons():
    seen = {}
    for helper in course.SELFCHECK_FILES:
        module = course.import_selfcheck(helper[:-3])
        for name in getattr(module, "__all__", []):
            origin = getattr(module, name).__module__
            assert seen.setdefault(name, origin) == origin, f"{name} is defined in {seen[name]} and {origin}"


def test_committed_notebooks_carry_no_outputs():
    files = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=course.ROOT, capture_output=True, text=True).stdout
    for f in files.split():
        nb = json.loads((course.ROOT / f).read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell["outputs"] and cell["execution_count"] is None, f


@pytest.mark.parametrize("header, error", [
    ('# %% nbgrader={"grade_id": "x", "solution": true,}', "not valid JSON"),  # a JSON typo jupytext would ignore
    ("# %%", "no nbgrader metadata"),  # a solution in a cell nbgrader knows nothing of
    ('# %% nbgrader={"grade_id": "x"}', 'lacks "solution": true'),  # a solution in a locked cell
])
def test_solution_in_a_cell_not_declared_as_one_fails_the_build(tmp_path, header, error):
    bad = tmp_path / "99_bad.py"
    bad.write_text(header + "\ndef f():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION\n")
    with pytest.raises(course.SourceError, match=error):
        notebooks.read_source(bad)


def test_duplicate_grade_id_fails_the_build(tmp_path):
    bad = tmp_path / "99_bad.py"
    header = '# %% nbgrader={"grade_id": "x"}\n'
    bad.write_text(header + "a = 1\n\n" + header + "b = 2\n")
    with pytest.raises(course.SourceError, match="used twice"):
        notebooks.read_source(bad)


def test_cell_ids_are_stable_across_reads():
    for lesson in LESSONS:
        a = [c["id"] for c in notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells]
        b = [c["id"] for c in notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells]
        assert a == b and len(set(a)) == len(a)


def test_check_command_reports_drift(tmp_path, monkeypatch, capsys):
    """``make check-lessons`` fails and names the notebook when lessons/ differs from a fresh build. The fresh
    build is stood in for by lessons/ itself, which test_lessons_match_a_fresh_build proves equal to one."""
    target = tmp_path / "lessons"
    shutil.copytree(course.LESSONS, target, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    nb = target / f"{LESSONS[0]}.ipynb"
    nb.write_text(nb.read_text().replace("Lesson", "Lessen", 1))
    committed = course.LESSONS
    monkeypatch.setattr(build, "build", lambda dest: shutil.copytree(committed, dest, dirs_exist_ok=True))
    monkeypatch.setattr(course, "LESSONS", target)
    assert build.main(["--check"]) == 1
    out, err = capsys.readouterr()
    assert f"{LESSONS[0]}.ipynb" in out and "Lessen" in out and "run `make lessons`" in err
    nb.write_text(nb.read_text().replace("Lessen", "Lesson", 1))
    assert build.main(["--check"]) == 0


def test_graded_cell_without_hidden_check_fails_the_build(tmp_path):
    bad = tmp_path / "99_bad.py"
    bad.write_text('# %% nbgrader={"grade_id": "t", "points": 1}\nassert f() == 42\n')
    with pytest.raises(course.SourceError, match="hidden_cell.run"):
        notebooks.read_source(bad)
