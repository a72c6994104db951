"""The instructor's view of a class: ``DIR/insights.html`` and ``DIR/misconceptions.csv``.

Built after every run from the grade rows (``results.read_rows``: the gradebook), the state records, whose
``items`` say how each hidden test of each graded notebook ended and which written answers were answered
(``autograder/grading/records/items.py``), and the instructor's marks of those answers (the gradebook); nothing is
re-run, so a resumed or partial run writes the same page as an uninterrupted one (only "what this run changed" depends
on the run). A notebook or an answer left as it was handed out (the stub, or a find-the-bug exercise's given code) is
"not attempted": it is in no misconception, no item figure and no histogram. The page, like the feedback pages,
runs no script and loads nothing (``page_safety``); clicking a bug opens the list of its students (``<details>``),
each linked to their feedback.

* score distributions per lesson, autograded and manual points apart, marked apart from pending (``insights_plots``);
* misconceptions: each catalogued bug (``autograder.bugs``) a hidden test named, with its diagnosis, students and
  share of the students who attempted the lesson, most frequent first;
* item analysis per hidden test and written answer, over the notebooks that answered it (a written answer's
  pending marks left out and counted): difficulty (the share of its points earned: a test's pass rate) and
  discrimination (the correlation of that share with the rest of the lesson's autograded score);
* failures without a name: failed tests whose result matched no catalogued bug, named by what they are (a wrong
  result, a SyntaxError, a timeout...), with up to 5 example students;
* students who may need help, the manual-grading queue, and what this run changed (graded, or marked).
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from autograder import course
from autograder.checks import verdict
from autograder.grading.pipeline import page_safety
from autograder.grading.records import gradebook, items, marks, outcome, state
from autograder.grading.records.settings import Settings
from autograder.grading.reports import csv_cells
from autograder.grading.reports.results import fmt
from autograder.grading.run import feedback_files

HARD = 0.2  # a test at most this share of students pass is "almost nobody passes"
WEAK = 0.2  # a discrimination below this (or none: everyone passes or fails) is "does not discriminate"
HELP_SHARE = 0.5  # failing at least this share of an attempted lesson's tests: may need help
EXAMPLES = 5
UNNAMED = "unnamed"
TEST, WRITTEN = "hidden test", "written answer"  # the kinds of item
CSV_HEADER = ["student", "lesson", "test", "bug", "result", "points lost", "feedback"]
TEMPLATE = Path(__file__).parent / "templates" / "insights.html.j2"


@dataclass
class Lesson:
    """One lesson's graded notebooks: {student: record} of those with item data, the grade rows' cells, and
    {student: {written answer: the instructor's mark, or None while pending}} of the answered written answers."""

    name: str
    records: dict = field(default_factory=dict)
    cells: dict = field(default_factory=dict)
    marks: dict = field(default_factory=dict)

    @property
    def attempted(self) -> dict:
        return {st: r for st, r in self.records.items() if r.attempted}

    def tests(self) -> list:
        return sorted({gid for r in self.records.values() for gid in r.items})

    def written(self) -> list:
        return sorted({gid for r in self.records.values() for gid in r.written})

    def auto_max(self) -> float:
        return sum({gid: it.max for r in self.records.values() for gid, it in r.items.items()}.values())

    def manual_max(self) -> float:
        return sum({gid: w.max for r in self.records.values() for gid, w in r.written.items()}.values())


def _graded(cell) -> bool:
    return cell["status"] in (outcome.GRADED, outcome.PENDING)


def collect(s: Settings, rows: list) -> list:
    """A ``Lesson`` per lesson graded in this output folder, from the rows, the state records and the marks."""
    lessons = []
    for name in s.lessons:
        lesson = Lesson(name)
        for row in rows:
            cell = row["lessons"][name]
            lesson.cells[row["student"]] = cell
            record = state.read(s, row["student"], name) if _graded(cell) else None
            if record and record.items is not None and record.written is not None:  # else graded by an older grader
                lesson.records[row["student"]] = record
        lessons.append(lesson)
    answered = [(lesson, st, r.written) for lesson in lessons for st, r in lesson.records.items()
                if any(w.answered for w in r.written.values())]
    if answered:
        with gradebook.opened(s) as gb:
            grades = {name: marks.lesson_grades(gb, name) for name in {lesson.name for lesson, _, _ in answered}}
        for lesson, student, written in answered:
            lesson.marks[student] = items.marks_of_written(grades[lesson.name].get(student, []), written)
    return lessons


def feedback_link(s: Settings, student: str, lesson: str):
    """The relative link to a student's feedback page, or None when there is none."""
    return feedback_files.page_link(s.out, student, lesson)


# ----------------------------------------------------------------------------------------------- the figures
def failures(lessons: list) -> list:
    """(student, lesson, test, bug id or "unnamed", what the failure is, points lost) of every failed test that
    was answered."""
    found = []
    for lesson in lessons:
        for student, record in sorted(lesson.records.items()):
            for gid, item in sorted(record.items.items()):
                if item.result == verdict.BUG:
                    found.append((student, lesson.name, gid, item.bug, "catalogued bug", item.max - item.score))
                elif item.result not in (verdict.PASSED, verdict.UNANSWERED):
                    found.append((student, lesson.name, gid, UNNAMED, item.failure, item.max - item.score))
    return found


def misconceptions(lessons: list, found: list) -> list:
    """Each catalogued bug seen, most students first: {bug, lesson, tests, students, share, diagnosis}."""
    from autograder import bugs as bug_catalog

    attempted = {lesson.name: len(lesson.attempted) for lesson in lessons}
    seen: dict = defaultdict(lambda: {"students": set(), "tests": set()})
    for student, lesson, gid, bug, _, _ in found:
        if bug != UNNAMED:
            seen[(lesson, bug)]["students"].add(student)
            seen[(lesson, bug)]["tests"].add(gid)
    out = []
    for (lesson, bug), got in seen.items():
        try:
            diagnosis = bug_catalog.by_id(bug).diagnosis
        except KeyError:
            diagnosis = "(no longer in the bug catalog)"
        out.append({"bug": bug, "lesson": lesson, "tests": sorted(got["tests"]), "students": sorted(got["students"]),
                    "share": len(got["students"]) / max(attempted[lesson], 1), "diagnosis": diagnosis})
    return sorted(out, key=lambda m: (-len(m["students"]), m["lesson"], m["bug"]))


def unnamed_failures(found: list) -> list:
    """Per (lesson, test): the students whose failure matched no catalogued bug (count, up to 5 examples)."""
    by_test = defaultdict(list)
    for student, lesson, gid, bug, why, _ in found:
        if bug == UNNAMED:
            by_test[(lesson, gid)].append((student, why))
    return [{"lesson": lesson, "test": gid, "count": len(got), "examples": got[:EXAMPLES]}
            for (lesson, gid), got in sorted(by_test.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def point_biserial(passed: list, rest: list):
    """Pearson correlation of an item's scores ``passed`` (0/1 for a test: the point-biserial; a share of the
    points for a written answer) with ``rest``; None when either does not vary."""
    n = len(passed)
    if n < 2:
        return None
    mp, mr = sum(passed) / n, sum(rest) / n
    sp = math.sqrt(sum((p - mp) ** 2 for p in passed))
    sr = math.sqrt(sum((r - mr) ** 2 for r in rest))
    if sp == 0 or sr == 0:
        return None
    return sum((p - mp) * (r - mr) for p, r in zip(passed, rest)) / (sp * sr)


def _item(gid: str, kind: str, shares: list, rest: list, unanswered: int, pending: int) -> dict:
    difficulty = sum(shares) / len(shares) if shares else None
    r = point_biserial(shares, rest)
    callouts = []
    if difficulty is not None and difficulty <= HARD:
        callouts.append("almost nobody passes" if kind == TEST else "almost no points earned")
    if shares and (r is None or r < WEAK):
        callouts.append("does not discriminate")
    return {"test": gid, "kind": kind, "students": len(shares), "unanswered": unanswered, "pending": pending,
            "difficulty": difficulty, "discrimination": r, "callouts": callouts}


def item_analysis(lesson: Lesson) -> list:
    """Per hidden test and written answer of ``lesson``: {test, kind, students, unanswered, pending, difficulty,
    discrimination, callouts}, over the notebooks that answered it; a written answer's score is the instructor's
    mark (pending marks are left out, and counted)."""
    out = []
    for gid in lesson.tests():
        have = [r for r in lesson.records.values() if gid in r.items]
        answered = [r.items for r in have if r.attempted and r.items[gid].result != verdict.UNANSWERED]
        shares = [1 if it[gid].result == verdict.PASSED else 0 for it in answered]
        rest = [sum(v.score for k, v in it.items() if k != gid) for it in answered]
        out.append(_item(gid, TEST, shares, rest, len(have) - len(answered), 0))
    for gid in lesson.written():
        holders = {st: r for st, r in lesson.records.items() if gid in r.written}
        wrote = [st for st, r in holders.items() if r.written[gid].answered]
        marked = [st for st in wrote if lesson.marks[st].get(gid) is not None]
        shares = [lesson.marks[st][gid] / holders[st].written[gid].max for st in marked]
        rest = [sum(v.score for v in holders[st].items.values()) for st in marked]
        out.append(_item(gid, WRITTEN, shares, rest, len(holders) - len(wrote), len(wrote) - len(marked)))
    return out


def need_help(s: Settings, lessons: list) -> list:
    """Students who failed at least half of an attempted lesson's tests, or did not attempt or hand in a lesson."""
    reasons = defaultdict(list)
    for lesson in lessons:
        for student, cell in lesson.cells.items():
            record = lesson.records.get(student)
            if cell["status"] in (outcome.MISSING, outcome.MALFORMED, outcome.REFUSED):
                reasons[student].append((lesson.name, cell["status"], None))
            elif record and record.attempted is False:
                reasons[student].append((lesson.name, "not attempted", feedback_link(s, student, lesson.name)))
            elif record:
                failed = sum(1 for it in record.items.values() if it.result != verdict.PASSED)
                if record.items and failed >= HELP_SHARE * len(record.items):
                    reasons[student].append((lesson.name, f"failed {failed} of {len(record.items)} tests",
                                             feedback_link(s, student, lesson.name)))
    return [{"student": st, "reasons": why} for st, why in sorted(reasons.items())]


def manual_queue(s: Settings, lessons: list) -> list:
    return [{"student": st, "lesson": lesson.name, "pending": fmt(cell["pending"]),
             "link": feedback_link(s, st, lesson.name)}
            for lesson in lessons for st, cell in sorted(lesson.cells.items()) if cell["pending"]]


REPORTED = "reported.json"  # {student: {lesson: [status, score]}} as the last run's outputs gave them


def reported(s: Settings) -> dict:
    """What the last run's grades.csv and report said of each (student, lesson): {} before the first run, and for
    an OUT an earlier version graded, what its records hold."""
    try:
        return json.loads((Path(s.out) / REPORTED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        found: dict = {}
        for student, lesson in state.recorded(s):
            record = state.read(s, student, lesson)
            found.setdefault(student, {})[lesson] = [record.status, record.score] if record else [None, None]
        return found


def remember_reported(s: Settings, rows: list) -> None:
    """Write down this run's (status, score) of every (student, lesson): the next run tells its changes against it."""
    data = {r["student"]: {lesson: [c["status"], c["score"]] for lesson, c in r["lessons"].items()} for r in rows}
    path = Path(s.out) / REPORTED
    tmp = path.with_name(REPORTED + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _why(task, cell: dict, before, closed: bool) -> str:
    if closed:
        return "lesson closed: never handed in"
    if task is None:
        return f"handed in again: {cell['status']}" if cell["status"] in (outcome.MALFORMED, outcome.REFUSED) else \
            "changed in the gradebook"
    if task.get("refresh"):
        return "your marks"
    if before is None or before[0] in (outcome.NOT_HANDED_IN, outcome.NOT_YET):
        return ""  # graded for the first time: "- -> 8" says it
    if before[0] == outcome.GRADING_ERROR:
        return "retried"
    return "handed in again" if task.get("resubmitted") else "graded again"


def changes(s: Settings, rows: list, last: dict, todo: dict, refreshed: dict | None = None, closed=()) -> list:
    """Every (student, lesson) whose score or status differs from what the last run reported (``last``, read with
    ``reported`` before this run graded anything), and
    every notebook this run graded: old and new score and status, why (first graded, handed in again, your marks,
    the lesson closed...), attempted or not, and the marks that went back to pending. A page rebuilt without a
    change of score or status is not a change."""
    before_all, closed, out = last, set(closed), []
    for row in rows:
        student = row["student"]
        for lesson, cell in row["lessons"].items():
            task = todo.get(student, {}).get(lesson) or (refreshed or {}).get(student, {}).get(lesson)
            before = before_all.get(student, {}).get(lesson)
            now = [cell["status"], cell["score"]]
            graded_here = task is not None and not task.get("refresh")
            if not graded_here and (before or [outcome.NOT_HANDED_IN, None]) == now:
                continue
            if cell["status"] == outcome.NOT_YET and before is None:
                continue
            record = state.read(s, student, lesson)
            previous = (record.previous if record else None) or {} if task else {}
            out.append({"student": student, "lesson": lesson,
                        "old": before[1] if before else None, "old_status": before[0] if before else None,
                        "graded_before": bool(before) and before[0] not in (outcome.NOT_HANDED_IN, outcome.NOT_YET),
                        "new": cell["score"], "status": cell["status"],
                        "attempted": record.attempted if task and record else None,
                        "was_attempted": previous.get("attempted"),
                        "why": _why(task, cell, before, (student, lesson) in closed),
                        "link": feedback_link(s, student, lesson),
                        "reopened": record.reopened if graded_here and record else []})
    return out


def _work(attempted) -> str:
    return "not attempted" if attempted is False else "attempted" if attempted else ""


def change_lines(changed: list, limit: int | None = 30) -> list:
    """The terminal's lines for ``changes``: one per pair (at most ``limit``), old -> new score (with the status
    when it changed or is not a score), and why; then one per mark that went back to pending."""
    lines = []
    for c in changed[:limit]:
        old = _score_text(c["old_status"], c["old"]) if c["graded_before"] else "-"
        new = _score_text(c["status"], c["new"])
        what = [_work(c["attempted"]) + (f", was {_work(c['was_attempted'])}" if c["graded_before"] and
                                          c["was_attempted"] is not None and c["was_attempted"] != c["attempted"]
                                          and c["attempted"] is not None else "")]
        if c["graded_before"] and c["old_status"] != c["status"] and old != c["old_status"] and new != c["status"]:
            what.append(f"{c['old_status']} -> {c['status']}")  # both are scores: say how the state moved
        what.append(c["why"])
        lines.append(f"  {c['student']} {c['lesson']}: {old} -> {new} ({'; '.join(w for w in what if w)})")
    if limit is not None and len(changed) > limit:
        lines.append(f"  ... and {len(changed) - limit} more (insights.html lists them all)")
    reopened = [f"  {c['student']} {c['lesson']} {line}" for c in changed
                for line in marks.reopened_lines(c["reopened"])]
    if reopened:
        lines += ["marks back to pending (grade them again in formgrader, then run the command again):", *reopened]
    return lines


def _score_text(status, score) -> str:
    if status in (outcome.GRADING_ERROR, outcome.NOT_YET, outcome.NOT_HANDED_IN):
        return status
    text = fmt(score)
    return f"{text} {status}" if status in (outcome.MISSING, outcome.MALFORMED, outcome.REFUSED) else text


def manual_points(lesson: Lesson) -> tuple:
    """(the written answers' points of each attempted notebook whose answers are all marked, how many notebooks
    have a mark pending); an answer left blank has 0 points."""
    marked, pending = [], 0
    for student, record in sorted(lesson.attempted.items()):
        given = lesson.marks.get(student, {})
        if None in given.values():
            pending += 1
        elif record.written:
            marked.append(sum(given.values()))
    return marked, pending


def distributions(lessons: list) -> list:
    from autograder.grading.reports import insights_plots

    out = []
    for lesson in lessons:
        cells = [c for st, c in sorted(lesson.cells.items()) if _graded(c)]
        if not cells:
            continue
        not_attempted = set(lesson.records) - set(lesson.attempted)
        auto = [c["auto"] for st, c in sorted(lesson.cells.items())
                if _graded(c) and c["auto"] is not None and st not in not_attempted]
        manual, pending = manual_points(lesson)
        png, alt = insights_plots.distribution(lesson.name, auto, lesson.auto_max(), manual, lesson.manual_max(),
                                               pending)
        out.append({"lesson": lesson.name, "png": png, "alt": alt, "graded": len(cells),
                    "attempted": len(lesson.attempted), "not_attempted": len(not_attempted),
                    "missing": sum(1 for c in lesson.cells.values()
                                   if c["status"] in (outcome.MISSING, outcome.MALFORMED, outcome.REFUSED))})
    return out


# ----------------------------------------------------------------------------------------------- the files
def write_csv(s: Settings, found: list) -> Path:
    path = Path(s.out) / "misconceptions.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(CSV_HEADER)
        for student, lesson, gid, bug, why, lost in found:
            writer.writerow([student, lesson, gid, bug, why, fmt(lost), feedback_link(s, student, lesson) or ""])
    return path


def page(s: Settings, rows: list, lessons: list, found: list, changed: list) -> str:
    """The HTML of ``insights.html`` (protected: no script, no request)."""
    import jinja2

    from autograder.grading.reports import insights_plots

    seen = misconceptions(lessons, found)
    bars = None
    if seen:
        shown = seen[:25]
        bars = insights_plots.misconception_bars([f"{m['bug']} ({course.lesson_number(m['lesson'])})" for m in shown],
                                                 [len(m["students"]) for m in shown],
                                                 max(len(lesson.attempted) for lesson in lessons))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["pct"] = lambda x: "" if x is None else f"{100 * x:.0f}%"
    env.filters["r"] = lambda x: "none" if x is None else f"{x:.2f}"
    env.filters["points"] = lambda x: "-" if x is None else fmt(x)
    env.filters["work"] = _work
    links = {(st, lesson.name): feedback_link(s, st, lesson.name) for lesson in lessons for st in lesson.records}
    html = env.get_template(TEMPLATE.name).render(
        students=len(rows), lessons=s.lessons, distributions=distributions(lessons), misconceptions=seen, bars=bars,
        items=[(lesson.name, item_analysis(lesson)) for lesson in lessons if lesson.records],
        unnamed=unnamed_failures(found), help=need_help(s, lessons), queue=manual_queue(s, lessons),
        changed=changed, links=links, hard=HARD, weak=WEAK, examples=EXAMPLES,
        without_items=sum(1 for lesson in lessons for st, c in lesson.cells.items()
                          if _graded(c) and st not in lesson.records))
    return page_safety.protect(html)


def write(s: Settings, rows: list, changed: list) -> tuple:
    """Write ``insights.html`` and ``misconceptions.csv``; returns their paths."""
    lessons = collect(s, rows)
    found = failures(lessons)
    csv_path = write_csv(s, found)
    html_path = Path(s.out) / "insights.html"
    html_path.write_text(page(s, rows, lessons, found, changed), encoding="utf-8")
    return html_path, csv_path
