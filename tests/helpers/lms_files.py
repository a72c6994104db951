"""The instructor's exports of Canvas and Moodle, built as those LMSs write them, and how their importers read a file.

Built to each LMS's documented import and export rules (and, where the docs are silent, to the code that applies
them):

Canvas, the gradebook CSV (Grades > Export; Grades > Import):
  https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-export-grades-in-the-Gradebook/ta-p/809
  https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807
  https://github.com/instructure/canvas-lms/blob/master/lib/gradebook_exporter.rb (the columns, the optional
    "Manual Posting" row, the "    Points Possible" row with "(read only)" under the totals, "N/A", "EX")
  https://github.com/instructure/canvas-lms/blob/master/app/models/gradebook_importer.rb (the header check: a
    "Student" column, "ID", the student columns ending with "Section"; ";" or "," by consistent field counts;
    assignments matched by "<name> (<id>)"; the Points Possible and Muted/Manual Posting rows skipped; students
    matched on ID, then SIS ids, then name; read-only and "Current/Final ..." columns ignored)
Moodle, the assignment's offline grading worksheet (View all submissions > Grading action > Download / Upload
grading worksheet; the "Offline grading worksheet" feedback type):
  https://docs.moodle.org/en/Assignment_settings#Feedback_types
  https://docs.moodle.org/en/Using_Assignment#Offline_grading_worksheet
  https://github.com/moodle/moodle/blob/main/mod/assign/gradingtable.php (the downloaded columns: Identifier =
    "Participant <id>", Full name, identity fields, Status, Grade, Maximum grade, Grade can be changed, Last
    modified (submission), Last modified (grade), Feedback comments)
  https://github.com/moodle/moodle/blob/main/mod/assign/feedback/offline/importgradeslib.php and locallib.php (the
    upload needs Identifier, Grade and Last modified (grade), or it stops: "could not read the uploaded worksheet";
    it skips a row whose grade changed in Moodle after its Last modified (grade), an empty or unchanged grade, a
    grade above the maximum and a locked one; Maximum grade is not read; Feedback comments are read when that
    feedback type is enabled)
"""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime

CANVAS_TOTALS = ["Current Points", "Final Points", "Current Score", "Unposted Current Score", "Final Score",
                 "Unposted Final Score"]


def _ruby_csv(rows, delimiter=",") -> str:
    """Rows as Ruby's CSV writes them (Canvas): quoted only when needed, an empty string quoted, nil empty, "\\n"."""
    lines = []
    for row in rows:
        cells = []
        for cell in row:
            if cell is None:
                cells.append("")
            elif cell == "" or any(ch in cell for ch in (delimiter, '"', "\n", "\r")):
                cells.append('"' + cell.replace('"', '""') + '"')
            else:
                cells.append(cell)
        lines.append(delimiter.join(cells))
    return "\n".join(lines) + "\n"


def canvas_gradebook(students, assignments, *, bom=True, delimiter=",", decimal=".", manual_posting=(),
                     custom_columns=()) -> bytes:
    """Canvas's "Export Entire Gradebook": ``students`` [(sortable name, user id, SIS user id, login, section,
    {assignment id: score text})], ``assignments`` [(title, id, points possible)]; ``manual_posting``: ids of
    assignments whose grades are posted manually (a row saying so comes first); ``custom_columns``: titles of
    custom gradebook columns (between Section and the assignments)."""
    def number(x):
        return f"{x:.2f}".replace(".", decimal)

    header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *custom_columns,
              *(f"{title} ({aid})" for title, aid, _ in assignments),
              *(f"Assignments {t}" for t in CANVAS_TOTALS), *CANVAS_TOTALS]
    rows = [header]
    if manual_posting:
        rows.append([None] * (5 + len(custom_columns)) + ["Manual Posting" if aid in manual_posting else None
                                                           for _, aid, _ in assignments] + [None] * 12)
    rows.append(["    Points Possible", None, None, None, None, *([None] * len(custom_columns)),
                 *(number(points) for _, _, points in assignments), *(["(read only)"] * 12)])
    for name, uid, sis, login, section, scores in students:
        rows.append([name, str(uid), sis, login, section, *([""] * len(custom_columns)),
                     *(scores.get(aid, "") for _, aid, _ in assignments),
                     *([number(50.0)] * 12)])
    text = _ruby_csv(rows, delimiter)
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")


def canvas_import(data: bytes, custom_columns=()) -> dict:
    """What Canvas's gradebook import reads from ``data`` (gradebook_importer.rb's rules), with Python's csv module:
    {"delimiter", "assignments": {column: (title, id or None)}, "points": {column: text}, "students": {user id:
    {column: grade text}}}; ``custom_columns``: the course's custom column titles (not assignments). AssertionError
    where Canvas would refuse the file ("Invalid header row")."""
    text = data.decode("utf-8")
    first = text.splitlines()[:3]
    counts = {}
    for sep in ";,":  # a separator that splits the first lines into as many fields each counts that many
        sizes = {len(next(csv.reader([line], delimiter=sep))) for line in first}
        counts[sep] = sizes.pop() if len(sizes) == 1 else 0
    delimiter = ";" if counts[";"] > counts[","] else ","
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    header = rows[0]
    assert len(header) > 3 and "Student" in header[0] and "ID" in header[1], "Invalid header row"
    columns = 3
    if re.search(r"SIS\s+Login\s+ID", header[2]):
        columns += 1
    elif re.search(r"SIS\s+User\s+ID", header[2]) and re.search(r"SIS\s+Login\s+ID", header[3]):
        columns += 2 + bool(re.search(r"Integration\s+ID", header[4]))
    assert "Section" in header[columns - 1], "Invalid header row: the student columns do not end with Section"
    columns += sum(1 for title in header if title in custom_columns)
    non_assignment = re.compile("Current Score|Current Points|Current Grade|Final Score|Final Points|Final Grade|"
                                "Override Score|Override Grade|Override Status")
    assignments = {}
    for col in range(columns, len(header)):
        if non_assignment.search(header[col]):
            continue
        m = re.fullmatch(r"(.*)\s\((\d+)\)", header[col], re.DOTALL)
        assignments[col] = (m[1], m[2]) if m else (header[col], None)
    points, students = {}, {}
    for row in rows[1:]:
        if row and "Points Possible" in row[0]:
            points = {col: row[col] for col in assignments}
        elif all(re.fullmatch(r"\s*(Muted|Manual Posting.*)?\s*", c, re.IGNORECASE) for c in row):
            continue
        else:
            students[row[1]] = {col: row[col].strip() for col in assignments}
    return {"delimiter": delimiter, "assignments": assignments, "points": points, "students": students}


MOODLE_COLUMNS = ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum grade",
                  "Grade can be changed", "Last modified (submission)", "Last modified (grade)", "Feedback comments"]


def moodle_date(when: datetime) -> str:
    """Moodle's userdate() in English: 'Tuesday, 3 November 2026, 10:30 AM'."""
    return when.strftime("%A, %-d %B %Y, %-I:%M %p")


def moodle_worksheet(participants, maximum: float, *, bom=True, decimal=".", feedback=True) -> bytes:
    """Moodle's "Download grading worksheet" of one assignment: ``participants`` [(participant id, full name, email,
    status, grade or None, can be changed, submitted datetime or None, graded datetime or None, feedback)];
    spout's CSV (Moodle's csv dataformat): a byte-order mark, "," and fields quoted only when needed, "\\n"."""
    def number(x):
        return "" if x is None else f"{x:.2f}".replace(".", decimal)

    columns = MOODLE_COLUMNS if feedback else MOODLE_COLUMNS[:-1]
    fh = io.StringIO()
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow(columns)
    for pid, name, email, status, grade, changeable, submitted, graded, comments in participants:
        row = [f"Participant {pid}", name, email, status, number(grade), number(maximum),
               "Yes" if changeable else "No", moodle_date(submitted) if submitted else "-",
               moodle_date(graded) if graded else "-", comments]
        writer.writerow(row if feedback else row[:-1])
    return (b"\xef\xbb\xbf" if bom else b"") + fh.getvalue().encode("utf-8")


def moodle_import(data: bytes) -> dict:
    """What Moodle's worksheet upload reads from ``data`` (importgradeslib.php): {participant id: {"grade": float or
    None, "modified": the Last modified (grade) text, "feedback": text or None}}. AssertionError where Moodle stops
    ("could not read the uploaded worksheet") or could not read a row's grade."""
    text = data.decode("utf-8")
    text = text[1:] if text.startswith("\ufeff") else text
    rows = list(csv.reader(io.StringIO(text, newline="")))
    header = rows[0]
    for required in ("Identifier", "Grade", "Last modified (grade)"):
        assert required in header, f"could not read the uploaded worksheet: no {required!r} column"
    ident, grade, modified = (header.index(c) for c in ("Identifier", "Grade", "Last modified (grade)"))
    feedback = header.index("Feedback comments") if "Feedback comments" in header else None
    read = {}
    for row in rows[1:]:
        m = re.fullmatch(r"Participant (\d+)", row[ident])
        assert m, f"Identifier {row[ident]!r} is not 'Participant <id>'"
        value = row[grade].strip()
        assert value == "" or re.fullmatch(r"-?\d+(?:[.,]\d+)?", value), f"grade {value!r} is not a number"
        read[m[1]] = {"grade": float(value.replace(",", ".")) if value else None, "modified": row[modified],
                      "feedback": row[feedback] if feedback is not None else None}
    return read
