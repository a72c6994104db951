"""Grades for the LMS the class came from, in the file its import takes as it is (``OUT/lms-import/``).

The instructor's own export is the template (``OUT/lms-templates/``, any file names): the file written is a copy of
it, every byte as exported (header, rows, columns, delimiter, quoting, byte-order mark) but the grades of the lessons
graded here, matched by the LMS's own ids (``autograder/grading/reports/lms_csv.py`` writes it):

``canvas.csv`` from Canvas's gradebook export (Grades > Export > Export Entire Gradebook): ``Student, ID, SIS User
ID, SIS Login ID, Section``, then one column per assignment, headed ``<name> (<assignment id>)``, the ``Points
Possible`` row and read-only totals. Each lesson's column is the assignment the instructor names (``--canvas-assignments
01=12345``) or the one whose name matches the lesson's (stated in the notes; none or two is refused), and it is filled
on the rows whose ``ID`` (the user id of the download's file names) is a student graded here. A lesson whose points
Canvas counts differently from the lesson is refused (the score would be read out of another maximum).

``moodle-<lesson>.csv`` from Moodle's grading worksheet of one assignment (View all submissions > Grading action >
Download grading worksheet): ``Identifier`` (``Participant <id>``), ``Full name``, ..., ``Grade``, ``Maximum
grade``, ``Grade can be changed``, ``Last modified (submission)``, ``Last modified (grade)``, ``Feedback comments``.
The worksheet is matched to its lesson by its participant ids (each belongs to one assignment: those of that
assignment's download); ``Grade`` is filled, and ``Feedback comments`` says when the work was late. ``Last modified
(grade)`` stays as exported: Moodle skips a row whose grade changed in Moodle after it (and ignores ``Maximum
grade``).

Only a final score is written: a lesson whose points are not all in (written answers awaiting the instructor, a
grading error, not graded yet) is left as exported, and so is a cell Canvas marks excused (``EX``) or not assigned
(``N/A``) and a Moodle grade that cannot be changed. Without a template the file is written from the rows alone
(Canvas's columns and ``Points Possible`` row; Moodle's required columns, ``Last modified (grade)`` empty) and the
notes say what it lacks for import. Other systems' imports match on ids their downloads do not carry: use
``grades.csv``.
"""

from __future__ import annotations

import re
from pathlib import Path

from autograder.grading.intake import file_access
from autograder.grading.records import outcome
from autograder.grading.records.settings import Settings
from autograder.grading.reports import csv_cells, lms_csv
from autograder.grading.reports.results import fmt

FOLDER = "lms-import"
TEMPLATES = "lms-templates"
FINAL = (outcome.GRADED, outcome.MISSING, outcome.MALFORMED, outcome.REFUSED)  # every point of the lesson is in
MAX_TEMPLATE_BYTES = 64 * 2**20
DOCS = "docs/grading.md#grades-back-into-the-lms"
CANVAS_EXPORT = "Grades > Export > Export Entire Gradebook"
MOODLE_EXPORT = "View all submissions > Grading action > Download grading worksheet"
# Canvas's importer (app/models/gradebook_importer.rb): an assignment column is headed "<name> (<id>)"; these are not
NOT_ASSIGNMENT = re.compile("Current Score|Current Points|Current Grade|Final Score|Final Points|Final Grade|"
                            "Override Score|Override Grade|Override Status")
TITLE_ID = re.compile(r"(.*)\s\((\d+)\)", re.DOTALL)


def _title_name(title: str) -> str:
    """An assignment column's title without its "(id)": "Lesson 01 (12345)" -> "Lesson 01"."""
    m = TITLE_ID.fullmatch(title)
    return m[1] if m else title
PARTICIPANT = re.compile(r"Participant (\d+)")
MOODLE_REQUIRED = ("Identifier", "Grade", "Last modified (grade)")  # the columns Moodle's upload cannot do without
NUMBER = re.compile(r"-?\d+(?:[.,]\d+)?")


def final_score(cell: dict):
    """A lesson's score as an LMS may record it, or None while any of its points is not in."""
    return cell["score"] if cell["status"] in FINAL else None


def write(s: Settings, rows: list) -> list:
    """Write the import files from the rows of ``results`` (this run's and earlier ones': each lesson's cell keeps
    its ``lms_id``, ``late`` and ``submitted``) into ``OUT/lms-import/``; returns the notes for the summary and the
    report: what each file was filled from, and what a file written without a template lacks for import."""
    out = Path(s.out)
    folder = out / FOLDER
    for old in [folder / "canvas.csv", *folder.glob("moodle-*.csv")]:
        old.unlink(missing_ok=True)  # never an import file of an earlier run beside this run's
    lessons = list(dict.fromkeys(lesson for row in rows for lesson in row["lessons"])) or list(s.lessons)
    templates, notes = read_templates(out / TEMPLATES)
    if templates["canvas"] or s.lms == "canvas":
        folder.mkdir(exist_ok=True)
        notes += _canvas(s, folder / "canvas.csv", lessons, rows, templates["canvas"])
    if templates["moodle"] or s.lms == "moodle":
        folder.mkdir(exist_ok=True)
        notes += _moodle(s, folder, lessons, rows, templates["moodle"])
    return notes


# ------------------------------------------------------------------------------------------------ templates

def _is_canvas(header: list) -> bool:
    """The header of Canvas's gradebook export, as its importer checks it: a student column first, ``ID``, and the
    student columns ending with ``Section``."""
    return bool(header) and ("Student" in header[0] or header[0] == "LastName") and "ID" in header and any(
        "Section" in h for h in header)


def _is_moodle(header: list) -> bool:
    return all(name in header for name in MOODLE_REQUIRED)


def read_templates(folder: Path) -> tuple:
    """({"canvas": [(name, Table)], "moodle": [(name, Table)]}, notes) of the instructor's exports in ``folder``
    (``OUT/lms-templates/``): each ``.csv`` read as the export it is, whatever its name; any other file noted."""
    notes: list
    found: dict
    found, notes = {"canvas": [], "moodle": []}, []
    if not folder.is_dir():
        return found, notes
    for path in sorted(folder.iterdir()):
        name = f"{TEMPLATES}/{file_access.display(path.name)}"
        if path.name.startswith("."):
            continue
        if path.suffix.lower() != ".csv":
            notes.append(f"{name} ignored: not a .csv (export the gradebook or worksheet as CSV)")
            continue
        if path.is_symlink():
            notes.append(f"{name} ignored: it is a link; copy the export itself into {TEMPLATES}/")
            continue
        try:
            data = file_access.read_regular(path, MAX_TEMPLATE_BYTES)
        except OSError as exc:
            notes.append(f"{name} ignored: it could not be read ({file_access.display(str(exc)[:160])})")
            continue
        for system, is_header in (("canvas", _is_canvas), ("moodle", _is_moodle)):
            try:
                found[system].append((name, lms_csv.read(data, is_header)))
                break
            except lms_csv.NotCsv as exc:
                why = str(exc)
        else:
            notes.append(f"{name} ignored: neither Canvas's gradebook export (Student, ID, ..., Section) nor Moodle's "
                         f"grading worksheet (Identifier, Grade, Last modified (grade)): {why}")
    return found, notes


# ------------------------------------------------------------------------------------------------ numbers

def _number(text: str):
    """A number as an LMS exports it (``8.5``, ``8,50``), or None."""
    text = text.strip()
    return float(text.replace(",", ".")) if NUMBER.fullmatch(text) else None


def _points(score: float, comma: bool) -> str:
    text = fmt(round(score, 4))
    return text.replace(".", ",") if comma else text


def _fill(changes: dict, at: tuple, old: str, score: float, comma: bool, tally: dict, replaced: list,
          who: str) -> None:
    """Write ``score`` into the cell ``at`` of an export unless it holds that score already; count it, and list a
    score it replaces (``who old -> new``)."""
    if _same(old, score):
        tally["same"] += 1
        return
    changes[at] = _points(score, comma)
    tally["written"] += 1
    if old:
        replaced.append(f"{who} {old} -> {changes[at]}")


def _same(old: str, score: float) -> bool:
    """The LMS already holds this score (both LMSs export at most 2 decimals)."""
    value = _number(old)
    return value is not None and abs(value - score) < 0.005


def _late_note(cell: dict) -> str:
    when = cell.get("submitted", "")
    return "Submitted late" + (f" ({when})" if when else "") + "."


def _lessons_with_final(lessons, rows) -> list:
    return [lesson for lesson in lessons
            if any(lesson in r["lessons"] and final_score(r["lessons"][lesson]) is not None for r in rows)]


# ------------------------------------------------------------------------------------------------ Canvas

def _canvas_id(row: dict, cell: dict | None) -> str:
    """The student's Canvas user id: the same in every assignment's download."""
    ids = (cell or {}).get("lms_id") or row.get("lms_id", "")
    return ids.split()[0] if ids.split() else ""


def _canvas(s: Settings, path: Path, lessons, rows: list, templates: list) -> list:
    if not templates:
        return _canvas_minimal(s, path, lessons, rows)
    if len(templates) > 1:
        names = ", ".join(name for name, _ in templates)
        return [f"{FOLDER}/canvas.csv not written: {len(templates)} Canvas gradebook exports in {TEMPLATES}/ "
                f"({names}); keep the one you exported last"]
    name, table = templates[0]
    header = [f.value.strip() for f in table.records[0]]
    id_col, section = header.index("ID"), max(i for i, h in enumerate(header) if "Section" in h)
    pp_row = next((r for r in range(1, len(table.records)) if "Points Possible" in table.value(r, 0)), None)
    assignments = {}  # column -> (title, assignment id)
    for col in range(section + 1, len(header)):
        m = TITLE_ID.fullmatch(header[col])
        read_only = pp_row is not None and re.search(r"read\s+only", table.value(pp_row, col))
        if m and not NOT_ASSIGNMENT.search(header[col]) and not read_only:
            assignments[col] = (header[col], m[2])
    columns, how, problems = _canvas_columns(s, _lessons_with_final(lessons, rows), assignments, name)
    for lesson, col in columns.items():
        maximum = next((r["lessons"][lesson]["max"] for r in rows if lesson in r["lessons"]), None)
        possible = _number(table.value(pp_row, col)) if pp_row is not None else None
        if possible is not None and maximum is not None and abs(possible - maximum) > 1e-6:
            problems.append(f"'{assignments[col][0]}' is worth {fmt(possible)} points in Canvas but {lesson} is out of "
                            f"{fmt(maximum)}: set the assignment's points to {fmt(maximum)} in Canvas and export "
                            "the gradebook again")
    if problems:
        return [f"{FOLDER}/canvas.csv not written: " + "; ".join(problems)]
    comma = pp_row is not None and any("," in table.value(pp_row, col) for col in columns.values())
    by_id: dict = {}
    for row in rows:
        if _canvas_id(row, None):
            by_id.setdefault(_canvas_id(row, None), row)
    changes: dict
    replaced: list
    changes, seen, tally, replaced = {}, set(), {"written": 0, "same": 0, "not final": 0, "EX": 0, "N/A": 0}, []
    for r in range(1, len(table.records)):
        canvas_id = table.value(r, id_col).strip()
        if r == pp_row or canvas_id not in by_id:  # the Points Possible and Manual Posting rows have no ID
            continue
        row = by_id[canvas_id]
        seen.add(canvas_id)
        for lesson, col in columns.items():
            cell = row["lessons"].get(lesson)
            score = final_score(cell) if cell else None
            old = table.value(r, col).strip()
            if score is None:
                tally["not final"] += cell is not None
            elif old.upper() in ("EX", "N/A"):
                tally[old.upper()] += 1
            else:
                _fill(changes, (r, col), old, score, comma, tally, replaced, f"{row['student']} {lesson}")
    path.write_bytes(table.filled(changes))
    absent = sorted(row["student"] for cid, row in by_id.items() if cid not in seen and any(
        final_score(row["lessons"][lesson]) is not None for lesson in columns if lesson in row["lessons"]))
    if not columns:
        return [f"{FOLDER}/canvas.csv: your gradebook export {name} as it is: no lesson has a final score yet"]
    note = (f"{FOLDER}/canvas.csv: your gradebook export {name} filled, every other cell as exported: "
            + ", ".join(f"{lesson} -> '{assignments[col][0]}' ({how[lesson]})" for lesson, col in columns.items())
            + f"; {tally['written']} scores written, {tally['same']} already in Canvas, {tally['not final']} left as "
            "exported (not handed in yet, points awaiting you, a grading error or not graded yet)")
    note += f", {tally['EX']} excused in Canvas (left)" if tally["EX"] else ""
    note += f", {tally['N/A']} not assigned in Canvas (left)" if tally["N/A"] else ""
    note += f"; Canvas's score replaced: {', '.join(replaced[:10])}{', ...' if len(replaced) > 10 else ''}" \
        if replaced else ""
    note += (f"; not in the export, so not imported: {', '.join(absent[:10])}{', ...' if len(absent) > 10 else ''}"
             f" (export the gradebook again)") if absent else ""
    return [note]


def _canvas_columns(s: Settings, lessons, assignments: dict, name: str) -> tuple:
    """({lesson: column}, {lesson: how it was matched}, problems) for the lessons with a final score to write."""
    by_id = {aid: col for col, (_, aid) in assignments.items()}
    columns, how, problems = {}, {}, []
    listed = ", ".join(f"'{title}'" for title, _ in list(assignments.values())[:12]) or "none"
    for lesson in lessons:
        given = str(s.canvas_assignments.get(lesson, ""))
        if given:
            if given in by_id:
                columns[lesson], how[lesson] = by_id[given], f"--canvas-assignments {lesson[:2]}={given}"
            else:
                problems.append(f"{lesson} is given the Canvas assignment {given}, which {name} has no column of "
                                f"(its assignments: {listed})")
            continue
        matches = [col for col, (title, _) in assignments.items() if _name_matches(lesson, _title_name(title))]
        if len(matches) == 1:
            columns[lesson], how[lesson] = matches[0], "matched by name"
        elif matches:
            problems.append(f"{lesson} matches {len(matches)} assignments of {name} ("
                            + ", ".join(f"'{assignments[c][0]}'" for c in matches) + "): name the right one, e.g. "
                            f"CANVAS_ASSIGNMENTS=\"{lesson[:2]}={assignments[matches[0]][1]}\"")
        else:
            problems.append(f"no assignment of {name} is named like {lesson} (its assignments: {listed}): name it, "
                            f"e.g. CANVAS_ASSIGNMENTS=\"{lesson[:2]}=<assignment id>\"")
    taken: dict = {}
    for lesson, col in columns.items():
        taken.setdefault(col, []).append(lesson)
    problems += [f"{' and '.join(both)} would both fill '{assignments[col][0]}': name each one's assignment with "
                 "CANVAS_ASSIGNMENTS" for col, both in taken.items() if len(both) > 1]
    return columns, how, problems


def _words(text: str) -> list:
    return re.findall(r"[a-z0-9]+", text.lower())


def _name_matches(lesson: str, title: str) -> bool:
    """Whether a Canvas assignment's name names a lesson: it holds the lesson's name (``Warm-up``, ``01_warmup``,
    ``Lesson 1: warm-up``) or each of its words begins one of the name's (``Parameter count`` for ``param_count``)."""
    words, title_words = _words(lesson.split("_", 1)[-1]), _words(title)
    compact = "".join(title_words)
    if "".join(words) in compact:
        return True
    return bool(words) and all(any(t.startswith(w) for t in title_words) for w in words)


def _canvas_minimal(s: Settings, path: Path, lessons, rows: list) -> list:
    """Canvas's import columns from the rows alone: the file imports, but not into the instructor's assignments
    unless each lesson's assignment id is given."""
    titles = [f"{lesson} ({s.canvas_assignments[lesson]})" if lesson in s.canvas_assignments else lesson
              for lesson in lessons]
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *titles])
        maxima = [next((fmt(r["lessons"][lesson]["max"]) for r in rows if lesson in r["lessons"]), "")
                  for lesson in lessons]
        writer.writerow(["Points Possible", "", "", "", "", *maxima])
        for row in rows:
            writer.writerow([row["folder"], _canvas_id(row, None), "", "", "",
                             *(fmt(final_score(row["lessons"][lesson])) if lesson in row["lessons"] else ""
                               for lesson in lessons)])
    unnamed = [lesson for lesson in lessons if lesson not in s.canvas_assignments]
    return [f"{FOLDER}/canvas.csv was written without your gradebook export: Canvas imports it, but "
            + (f"{', '.join(unnamed)} would each be created as a new assignment named so (Canvas finds an assignment by '<name> (<id>)'),"
               " and " if unnamed else "")
            + "an empty cell (points awaiting you) may clear a score Canvas has. Export the gradebook "
            f"({CANVAS_EXPORT}) into {TEMPLATES}/ of this output folder and run again ({DOCS})"]


# ------------------------------------------------------------------------------------------------ Moodle

def _moodle(s: Settings, folder: Path, lessons, rows: list, templates: list) -> list:
    by_lesson: dict
    notes, by_lesson = [], {}
    for name, table in templates:
        header = [f.value.strip() for f in table.records[0]]
        ident = header.index("Identifier")
        ids = {m[1] for r in range(1, len(table.records))
               if (m := PARTICIPANT.fullmatch(table.value(r, ident).strip()))}
        hits = [lesson for lesson in lessons if ids & set(_participants(rows, lesson))]
        if len(hits) == 1:
            by_lesson.setdefault(hits[0], []).append((name, table))
        elif hits:
            notes.append(f"{name} not used: its participants handed in {', '.join(hits)} here; each Moodle "
                         "assignment has participant ids of its own, so keep only the worksheet of one assignment")
        else:
            notes.append(f"{name} not used: none of its participants' work was graded into this output folder from "
                         "that assignment's download (the worksheet and the download must be of the same assignment)")
    for lesson in lessons:
        path = folder / f"moodle-{lesson}.csv"
        worksheets = by_lesson.get(lesson, [])
        if len(worksheets) > 1:
            notes.append(f"{FOLDER}/{path.name} not written: {len(worksheets)} worksheets of {lesson} in {TEMPLATES}/ "
                         f"({', '.join(n for n, _ in worksheets)}); keep the one you downloaded last")
        elif worksheets:
            notes.append(_moodle_filled(path, lesson, rows, *worksheets[0]))
        elif s.lms == "moodle" and _participants(rows, lesson):
            notes.append(_moodle_minimal(path, lesson, rows))
    return notes


def _participants(rows: list, lesson: str) -> dict:
    """{participant id: (row, cell)} of a lesson: the id of the assignment's download each notebook came from."""
    found: dict = {}
    for row in rows:
        cell = row["lessons"].get(lesson)
        if cell and cell.get("lms_id"):
            found.setdefault(cell["lms_id"], (row, cell))
    return found


def _moodle_filled(path: Path, lesson: str, rows: list, name: str, table) -> str:
    header = [f.value.strip() for f in table.records[0]]
    col = {h: i for i, h in reversed(list(enumerate(header)))}
    ident, grade = col["Identifier"], col["Grade"]
    feedback, locked = col.get("Feedback comments"), col.get("Grade can be changed")
    maximum = next(r["lessons"][lesson]["max"] for r in rows if lesson in r["lessons"])
    if "Maximum grade" not in col:
        return (f"{FOLDER}/{path.name} not written: {name} has no 'Maximum grade' (the assignment is graded on a "
                f"scale); give it a point grade out of {fmt(maximum)} in Moodle and download the worksheet again")
    stated = {_number(table.value(r, col["Maximum grade"])) for r in range(1, len(table.records))} - {None}
    if stated and any(abs(m - maximum) > 1e-6 for m in stated):
        return (f"{FOLDER}/{path.name} not written: the assignment's Maximum grade in {name} is "
                f"{', '.join(fmt(m) for m in sorted(stated))} but {lesson} is out of {fmt(maximum)}: set the "
                "assignment's Maximum grade (Edit settings > Grade) to that and download the worksheet again")
    comma = any("," in table.value(r, col["Maximum grade"]) for r in range(1, len(table.records)))
    participants = _participants(rows, lesson)
    changes: dict
    replaced: list
    changes, tally, replaced, late_without_column = {}, {"written": 0, "same": 0, "not final": 0, "locked": 0}, [], 0
    for r in range(1, len(table.records)):
        m = PARTICIPANT.fullmatch(table.value(r, ident).strip())
        if not m or m[1] not in participants:
            continue
        row, cell = participants[m[1]]
        score = final_score(cell)
        if score is None:
            tally["not final"] += 1
            continue
        if locked is not None and table.value(r, locked).strip().lower() == "no":
            tally["locked"] += 1
            continue
        _fill(changes, (r, grade), table.value(r, grade).strip(), score, comma, tally, replaced, row["student"])
        if cell.get("late"):
            if feedback is None:
                late_without_column += 1
                continue
            said, note = table.value(r, feedback), _late_note(cell)
            if note not in said:
                changes[(r, feedback)] = f"{said}\n{note}" if said.strip() else note
    path.write_bytes(table.filled(changes))
    text = (f"{FOLDER}/{path.name}: your grading worksheet {name} filled, every other cell (and 'Last modified "
            f"(grade)') as exported: {tally['written']} grades written, {tally['same']} already in Moodle, "
            f"{tally['not final']} left as exported (not handed in yet, points awaiting you, a grading error or not graded yet)")
    text += f", {tally['locked']} left: their grade cannot be changed in Moodle" if tally["locked"] else ""
    text += (f"; Moodle's grade replaced: {', '.join(replaced[:10])}{', ...' if len(replaced) > 10 else ''}"
             if replaced else "")
    text += (f"; {late_without_column} late submissions not said in the file: enable 'Feedback comments' in the "
             "assignment's settings and download the worksheet again" if late_without_column else "")
    return text


def _moodle_minimal(path: Path, lesson: str, rows: list) -> str:
    """Moodle's required columns from the rows alone; 'Last modified (grade)' unknown (empty)."""
    participants = _participants(rows, lesson)
    late = any(cell.get("late") for _, cell in participants.values())
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(["Identifier", "Full name", "Grade", "Maximum grade", "Last modified (grade)"]
                        + (["Feedback comments"] if late else []))
        for pid, (row, cell) in sorted(participants.items(), key=lambda item: item[1][0]["student"]):
            writer.writerow([f"Participant {pid}", row["folder"], fmt(final_score(cell)), fmt(cell["max"]), ""]
                            + ([_late_note(cell) if cell.get("late") else ""] if late else []))
    return (f"{FOLDER}/{path.name} was written without the assignment's grading worksheet: Moodle imports it, but "
            "only for students with no grade in Moodle yet ('Last modified (grade)' is unknown, so Moodle keeps any "
            f"grade it has). Download the worksheet ({MOODLE_EXPORT}) into {TEMPLATES}/ of this output folder and run "
            f"again ({DOCS})")
