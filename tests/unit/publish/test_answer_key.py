"""docs/written-answers.md: every written answer's question, model answer and rubric, generated from the lesson
sources, kept in step with them, pointed to by the README and never released in lessons/."""

from autograder.publish import answer_key, build
from autograder import course


def test_answer_key_is_in_step_with_the_lessons():
    assert not answer_key.drift(), "docs/written-answers.md is out of date: run `make lessons`"


def test_every_written_answer_has_its_question_model_answer_and_rubric():
    text = answer_key.TARGET.read_text(encoding="utf-8")
    answers = [a for lesson in course.lesson_names() for a in answer_key.written_answers(lesson)]
    assert len(answers) >= 3, "expected lesson 05's three written answers"
    for grade_id, points, question, answer in answers:
        assert f"`{grade_id}` ({points} points)" in text
        assert question and "**Model answer.**" in answer and "**Rubric" in answer, grade_id
        assert answer in text


def test_it_is_not_released_and_the_readme_points_to_it():
    assert not any("Model answer" in p.read_text(encoding="utf-8") for p in course.LESSONS.iterdir() if p.is_file())
    assert "docs/written-answers.md" in (course.ROOT / "README.md").read_text(encoding="utf-8")


def test_the_drift_check_reports_a_stale_answer_key(tmp_path, monkeypatch):
    stale = tmp_path / "written-answers.md"
    stale.write_text(answer_key.render().replace("Model answer", "Model anwser", 1), encoding="utf-8")
    assert answer_key.drift(stale)
    monkeypatch.setattr(answer_key, "TARGET", stale)
    monkeypatch.setattr(build, "build", lambda dest: [])  # the lessons themselves are checked elsewhere
    monkeypatch.setattr(build, "drift", lambda built, committed: [])
    assert build.main(["--check"]) == 1
