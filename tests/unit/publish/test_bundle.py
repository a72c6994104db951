"""``make bundle``: one zip with the student notebooks, the glossary, a requirements.txt and a learner README, and
nothing else. (Unzipped into an empty folder, a venv from its requirements.txt runs every lesson:
``tests/notebooks/test_notebooks.py``.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

from autograder.publish import bundle
from autograder import course
from autograder.course import notebooks


def _names(path):
    with zipfile.ZipFile(path) as zf:
        return zf.namelist()


def test_make_bundle_writes_the_lessons_and_nothing_else(tmp_path):
    out = tmp_path / "class" / "lessons.zip"
    proc = subprocess.run([sys.executable, "-m", "autograder.publish.bundle", "--out", str(out)], cwd=tmp_path,
                          env=notebooks.nbgrader_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    expected = {f"{name}.ipynb" for name in course.lesson_names()} | set(course.PAGES) | {"requirements.txt",
                                                                                         "README.md"}
    assert sorted(_names(out)) == sorted(f"{bundle.FOLDER}/{name}" for name in expected)
    with zipfile.ZipFile(out) as zf:
        for name in [*(f"{n}.ipynb" for n in course.lesson_names()), *course.PAGES]:
            assert zf.read(f"{bundle.FOLDER}/{name}") == (course.LESSONS / name).read_bytes(), name


def test_checkpoints_and_stray_files_of_the_lessons_folder_stay_out(tmp_path):
    lessons = tmp_path / "lessons"
    shutil.copytree(course.LESSONS, lessons)
    (lessons / ".ipynb_checkpoints").mkdir(exist_ok=True)  # JupyterLab makes it when a lesson is opened
    (lessons / ".ipynb_checkpoints" / "01_warmup-checkpoint.ipynb").write_text("{}")
    (lessons / "scratch.py").write_text("x = 1\n")
    names = _names(bundle.write(tmp_path / "b.zip", lessons))
    assert not [n for n in names if "checkpoint" in n or "scratch" in n or n.endswith(".py")], names


def test_no_solution_hidden_test_or_grading_code_is_in_the_bundle():
    for name, data in bundle.contents().items():
        text = data.decode("utf-8")
        for word in ("### BEGIN SOLUTION", "### END SOLUTION", "HIDDEN TESTS", "autograder"):
            assert word not in text, f"{name} holds {word!r}"


def test_learner_readme_names_every_lesson_and_how_to_start():
    readme = bundle.contents()["README.md"].decode("utf-8")
    for name in course.lesson_names():
        assert f"`{name}.ipynb`" in readme
    assert "pip install -r requirements.txt" in readme and "jupyter lab" in readme and "glossary.md" in readme
    assert "{" not in readme.replace("{d_k}", ""), "a placeholder of the template was left"


def test_the_same_lessons_give_the_same_bytes(tmp_path):
    assert bundle.write(tmp_path / "a.zip").read_bytes() == bundle.write(tmp_path / "b.zip").read_bytes()
