"""Work more alike than the class makes likely, for the instructor to look at: ``DIR/similarity.html`` and
``DIR/similarity.csv``.

Built after every run, like the insights, from the state records alone (``similarity.evidence.from_record``: the
learner's own cells and their fingerprints, what the hidden tests found); nothing is re-run and no notebook is read
again. Each listed pair (``similarity.pairs``) is shown with its evidence side by side: the cells whose rare
fingerprints both hold, those lines marked; the tests on which both gave the same wrong numbers; the rare
catalogued bugs both made; identical written answers. Then the written answers close to the published model
answers, and the answers that are another lesson's given code. The page words all of it as something to look at,
never as a verdict; it runs no script and loads nothing (``page_safety``), and every name and cell is shown as text.
``--no-similarity`` (``make grade GRADE_ARGS=--no-similarity``) writes neither file.
"""

from __future__ import annotations

from pathlib import Path

from autograder.grading.pipeline import page_safety
from autograder.grading.records import outcome, state
from autograder.grading.records.settings import Settings
from autograder.grading.reports import csv_cells
from autograder.grading.run import feedback_files
from autograder.grading.similarity import code_prints, evidence, pairs

TEMPLATE = Path(__file__).parent / "templates" / "similarity.html.j2"
CSV_HEADER = ["lesson", "student", "other student", "group", "reason", "level", "evidence", "student's feedback",
              "other's feedback"]
SHOWN_LINES = 200  # lines of a cell shown beside another's


def works(s: Settings, rows: list) -> tuple:
    """({lesson: [Work]} of every attempted graded notebook, {lesson: how many graded notebooks keep no work})."""
    found: dict = {}
    left_out: dict = {}
    for lesson in s.lessons:
        found[lesson], left_out[lesson] = [], 0
        for row in rows:
            cell = row["lessons"][lesson]
            if cell["status"] not in (outcome.GRADED, outcome.PENDING):
                continue
            record = state.read(s, row["student"], lesson)
            if record is None or not record.attempted:
                continue
            work = evidence.from_record(record)
            if work is None:
                left_out[lesson] += 1
            else:
                found[lesson].append(work)
    return found, left_out


def _side_by_side(pair: pairs.Pair, by_student: dict) -> list:
    """[(grade_id, [(line, marked)] of a, [(line, marked)] of b)] of the cells whose rare fingerprints both hold."""
    shown = []
    for gid, shared in sorted(pair.shared_prints.items()):
        sides = []
        for student in (pair.a, pair.b):
            source = by_student[student].code.get(gid, "")
            marked = code_prints.lines(source, shared)
            sides.append([(line, i in marked) for i, line in enumerate(source.splitlines()[:SHOWN_LINES], 1)])
        shown.append((gid, *sides))
    return shown


def group_of(lesson: pairs.Lesson, student: str) -> str:
    for number, members in enumerate(lesson.groups, 1):
        if student in members:
            return f"group {number}"
    return ""


def write_csv(s: Settings, lessons: list) -> Path:
    path = Path(s.out) / "similarity.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(CSV_HEADER)
        for lesson in lessons:
            for p in lesson.pairs:
                for kind, level, what in p.reasons:
                    writer.writerow([lesson.name, p.a, p.b, group_of(lesson, p.a), kind, level, what,
                                     _link(s, p.a, lesson.name), _link(s, p.b, lesson.name)])
            for student, gid, share in lesson.close_to_model:
                writer.writerow([lesson.name, student, "", "", "close to the model answer", "", f"{gid}: "
                                 f"{100 * share:.0f}% of its word runs are the published model answer's",
                                 _link(s, student, lesson.name), ""])
            for student, flag in lesson.given:
                writer.writerow([lesson.name, student, "", "", "given code of another lesson", "", flag,
                                 _link(s, student, lesson.name), ""])
    return path


def _link(s: Settings, student: str, lesson: str) -> str:
    return feedback_files.page_link(s.out, student, lesson) or ""


def page(s: Settings, lessons: list, by_lesson: dict) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    shown = []
    for lesson in lessons:
        by_student = {w.student: w for w in by_lesson[lesson.name]}
        model = evidence.model_written(lesson.name)
        shown.append({
            "lesson": lesson,
            "pairs": [{"pair": p, "group": group_of(lesson, p.a), "code": _side_by_side(p, by_student),
                       "answers": [(gid, by_student[p.a].answers[gid], by_student[p.b].answers[gid])
                                   for gid in p.answers],
                       "links": (_link(s, p.a, lesson.name), _link(s, p.b, lesson.name))} for p in lesson.pairs],
            "close": [(st, gid, share, by_student[st].answers[gid], model.get(gid, ""), _link(s, st, lesson.name))
                      for st, gid, share in lesson.close_to_model],
            "given": [(st, flag, _link(s, st, lesson.name)) for st, flag in lesson.given]})
    html = env.get_template(TEMPLATE.name).render(
        lessons=shown, reasons=pairs.REASONS, common_share=pairs.COMMON_SHARE, common_min=pairs.COMMON_MIN,
        code_strong=pairs.CODE_STRONG, code_support=pairs.CODE_SUPPORT, min_own=pairs.MIN_UNUSUAL,
        unusual=pairs.UNUSUAL, same_max=pairs.SAME_MAX, same_strong=pairs.SAME_STRONG, wrong_strong=pairs.WRONG_STRONG,
        bugs_strong=pairs.BUGS_STRONG, bugs_support=pairs.BUGS_SUPPORT, min_words=pairs.MIN_ANSWER_WORDS,
        model_close=pairs.MODEL_CLOSE, model_ngram=pairs.MODEL_NGRAM, shown_lines=SHOWN_LINES)
    return page_safety.protect(html)


def write(s: Settings, rows: list) -> tuple:
    """Write ``similarity.html`` and ``similarity.csv``; returns their paths and the lessons found."""
    by_lesson, left_out = works(s, rows)
    lessons = pairs.search_class(by_lesson, left_out)
    csv_path = write_csv(s, lessons)
    html_path = Path(s.out) / "similarity.html"
    html_path.write_text(page(s, lessons, by_lesson), encoding="utf-8")
    return html_path, csv_path, lessons


def remove(s: Settings) -> None:
    """Switched off: an earlier run's files go, so no page shows pairs from work that has changed since."""
    for name in ("similarity.html", "similarity.csv"):
        (Path(s.out) / name).unlink(missing_ok=True)
