"""The download layouts of learning management systems, read into students and their files.

An LMS hands a class's submissions out in its own layout; ``recognise`` reads the entries at the top of a class
folder (its ``names``) and, when they follow one of the layouts below, says which student each belongs to, the
student's id in the LMS (kept as its own column, for the grade import), and the file's name as the learner gave it:

``canvas``
    flat files ``<name>_<user id>_<submission id>_<file>``, ``<name>_LATE_<user id>_...`` for late work (e.g.
    ``abcxyz_12345_9001_01_warmup.ipynb``); Canvas adds ``-1``, ``-2`` to a resubmitted file's name. The user id
    is the same in every assignment of the course, so it is the student. ``_LATE_`` is kept (``File.late``); the
    names carry no submission time.
``moodle``
    per-student folders ``<Full Name>_<participant id>_assignsubmission_file[_]``, or, downloaded without
    folders, flat files ``<Full Name>_<participant id>_assignsubmission_file_<file>``. The participant id belongs
    to one assignment (Moodle's grading worksheet is matched on ``Participant <id>``): within a download each
    participant id is a student of its own; across assignments the full name links them (``class_folder`` keeps a
    participant whose full name another participant shares, or whose name was graded for another participant of
    the same assignment, apart, flagged).
``blackboard``
    flat files ``<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file>`` (and a ``.txt`` receipt per
    attempt): the student is the username; of several attempts the latest is graded and the others noted.
``brightspace``
    flat files or folders ``<submission id>-<user id> - <Full Name> - <Mon D, YYYY HHMM AM> - <file>``: the
    student is the user id with the full name (two users of one name are kept apart like Moodle's participants),
    the latest submission of a file of that user is graded. Where every file carries the same second number (the
    assignment's or the course's when several names share it; in one student's files nothing tells), the download
    gives no user id: the full name is the student, and a name with several submissions of one file is flagged
    (``_user_ids_or_names``).
``nbgrader-exchange``
    the exchange's ``inbound/`` folders ``<student>+<assignment>+<timestamp>[+<random>]``: the latest of each
    (student, assignment) is graded. Anyone can write such a folder into ``inbound/``, so the folder's owner (its
    uid's user name, as ``nbgrader collect``'s ``check_owner`` reads it) is who handed it in: a folder whose owner
    is not the student it names is flagged and graded apart, as ``<owner> (as <student>)``: it replaces neither that
    student's work nor the owner's own. The owners tell
    nothing when no folder is owned by the student it names (a zip, a copied folder): then the names decide, and
    the report says so once. A timestamp more than ``CLOCK_SKEW`` in the future is flagged, kept without a time
    and never wins over a copy with an honest one.

Blackboard's attempt time, Brightspace's date and the exchange's timestamp are kept as the submission time
(``File.submitted``, ISO 8601: the LMS's local time as it writes it, the exchange's in UTC); ``after_due`` says
whether such a time is after an instructor's due date (``--due``).

The names are data: a student's name becomes a student id through ``student_ids.assign_ids`` like any folder name. A
class folder that mixes layouts, or whose names follow none, is not an LMS download (``recognise`` returns None).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

CANVAS = re.compile(r"(?P<name>[a-z0-9]+)(?P<late>_late)?_(?P<id>\d+)_(?P<sub>\d+)_(?P<file>.+)", re.IGNORECASE)
CANVAS_COPY = re.compile(r"(?P<stem>.+)-\d+(?P<ext>\.ipynb)$", re.IGNORECASE)  # Canvas's name of a resubmitted file
MOODLE = re.compile(r"(?P<name>.+?)_(?P<id>\d+)_assignsubmission_(?:file|onlinetext)(?:_(?P<file>.*))?", re.DOTALL)
BLACKBOARD = re.compile(r"(?P<assignment>.+)_(?P<name>[^_]+)_attempt_(?P<when>\d{4}(?:-\d{2}){5})(?:_(?P<file>.+))?",
                        re.DOTALL)
BRIGHTSPACE = re.compile(r"(?P<sub>\d+)-(?P<uid>\d+) - (?P<name>.+?) ?- (?P<when>[A-Z][a-z]{2} \d{1,2}, \d{4} "
                         r"\d{3,4} [AP]M)(?: - (?P<file>.+))?", re.DOTALL)
EXCHANGE = re.compile(r"(?P<name>[^+]+)\+(?P<assignment>[^+]+)\+(?P<when>[^+]+)(?:\+[^+]*)?")
CLOCK_SKEW = timedelta(minutes=5)  # how far ahead of this machine's clock an exchange timestamp may honestly be
NAMED_BY_ID = {"moodle": "participant", "brightspace": "user"}  # LMSs whose students come as full name and id
SYSTEMS = ("canvas", "moodle", "blackboard", "brightspace", "nbgrader-exchange")
TITLES = {"canvas": "Canvas", "moodle": "Moodle", "blackboard": "Blackboard", "brightspace": "Brightspace",
          "nbgrader-exchange": "nbgrader's exchange"}
HELP = """  <name>_<user id>_<submission id>_<lesson>.ipynb        (Canvas's download, flat, folder or zip)
  <Full Name>_<id>_assignsubmission_file_/<lesson>.ipynb  (Moodle's download, with or without folders)
  <assignment>_<username>_attempt_<date>_<lesson>.ipynb   (Blackboard's download)
  <id>-<id> - <Full Name> - <date> - <lesson>.ipynb       (Brightspace's download)
  inbound/<student>+<lesson>+<timestamp>/<lesson>.ipynb   (nbgrader's exchange)"""


@dataclass
class File:
    """One entry of the download: whose it is, and the name the learner gave it (``name``)."""

    entry: str  # the entry's name at the top of the class folder
    student: str  # who it belongs to, as the LMS names the student
    lms_id: str  # the student's (or, for Moodle, the participant's) id in the LMS; '' when it gives none
    name: str  # the file's own name ('' for a folder entry, whose files keep their names)
    when: str = ""  # what orders two copies of one file (the latest wins): the LMS's time, or Canvas's submission id
    lesson: str = ""  # nbgrader's exchange: the assignment the folder holds
    submitted: str = ""  # when it was handed in, ISO 8601, if the LMS says ('' when it does not: Canvas, Moodle)
    late: bool = False  # the LMS marks it late (Canvas's ``_LATE_``)
    key: str = ""  # who it is within the download, with ``student``: Moodle's participant id, Brightspace's user id
    flags: list = field(default_factory=list)  # what the report must say about whose it is or when it came
    by: str = ""  # who handed it in, where the download says more than ``lms_id`` (an exchange folder's owner)


@dataclass
class Download:
    """A class folder read as one LMS's download."""

    system: str
    files: list  # [File]: what is graded
    ignored: dict = field(default_factory=dict)  # {entry: why it is not graded}
    notes: list = field(default_factory=list)  # what the report says about the download as a whole

    def students(self) -> dict:
        """{(student, key): [File]}: one group per student the LMS names, by its id where it gives one."""
        grouped: dict = {}
        for f in self.files:
            grouped.setdefault((f.student, f.key), []).append(f)
        return grouped


def _parse(system: str, entry: str, is_dir: bool):
    """The File an entry of ``system``'s layout is, or None."""
    if system == "canvas" and not is_dir and (m := CANVAS.fullmatch(entry)):
        name = m["file"]
        copy = CANVAS_COPY.fullmatch(name)
        return File(entry, m["name"].lower() + "_" + m["id"], m["id"], copy["stem"] + copy["ext"] if copy else name,
                    m["sub"], late=bool(m["late"]))
    if system == "moodle" and (m := MOODLE.fullmatch(entry)) and (is_dir or m["file"]):
        return File(entry, m["name"], m["id"], "" if is_dir else m["file"], key=m["id"])
    if system == "blackboard" and (m := BLACKBOARD.fullmatch(entry)):
        return File(entry, m["name"], m["name"], "" if is_dir else (m["file"] or ""), m["when"],
                    submitted=_local_iso(m["when"], "%Y-%m-%d-%H-%M-%S"))
    if system == "brightspace" and (m := BRIGHTSPACE.fullmatch(entry)) and (is_dir or m["file"]):
        when = _local_iso(m["when"], "%b %d, %Y %I%M %p")
        return File(entry, m["name"].strip(), m["uid"], "" if is_dir else m["file"], when or m["when"],
                    submitted=when, key=m["uid"])
    if system == "nbgrader-exchange" and is_dir and (m := EXCHANGE.fullmatch(entry)):
        f = File(entry, m["name"], "", "", m["when"], m["assignment"], submitted=utc_iso(m["when"]))
        if f.submitted and datetime.fromisoformat(f.submitted) > datetime.now(timezone.utc) + CLOCK_SKEW:
            f.flags.append(f"the exchange folder '{_shown(entry)}' is dated {f.submitted}, in the future: kept "
                           "without a submission time; an earlier copy with an honest time is graded before it")
            f.submitted, f.when = "", ""  # sorts before every honest time, so it never wins over one
        return f
    return None


def _shown(name: str) -> str:
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in name)


def _local_iso(text: str, form: str) -> str:
    """A time an LMS writes in its own local time, as ISO 8601 without an offset; '' when it is not a date."""
    try:
        return datetime.strptime(text, form).isoformat()
    except ValueError:
        return ""


def utc_iso(text: str) -> str:
    """A time nbgrader writes (the exchange's names, ``timestamp.txt``) as ISO 8601 in UTC; '' if it is none."""
    from nbgrader.utils import parse_utc

    try:
        when = parse_utc(text)
    except Exception:  # noqa: BLE001 - whatever the parser makes of a student-chosen name, it is not a time
        return ""
    return when.replace(tzinfo=timezone.utc).isoformat() if isinstance(when, datetime) else ""


def parse_due(text: str) -> datetime:
    """An instructor's due date: ISO 8601 (``2026-10-01T23:59``, ``2026-10-01 23:59``, with or without an offset
    such as ``+02:00`` or ``Z``); a date alone is the end of that day. ``ValueError`` when it is none."""
    text = text.strip()
    when = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        when = when.replace(hour=23, minute=59, second=59)
    return when


def after_due(submitted: str, due: str) -> bool:
    """Whether a submission time (ISO text, ``File.submitted``) is after a due date (``parse_due``'s text); False
    when either is unknown. A time without an offset is this machine's local time (``TZ``), as the LMSs that give
    one write it in their own local time."""
    if not submitted or not due:
        return False
    try:
        return _aware(datetime.fromisoformat(submitted)) > _aware(parse_due(due))
    except ValueError:
        return False


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.astimezone()


FLAT_ONLY, FOLDERS_ONLY = {"canvas", "blackboard"}, {"nbgrader-exchange"}


def recognise(entries: dict, owner=None, ids=frozenset()) -> Download | None:
    """The LMS download ``entries`` ({name at the top of the class folder: is it a folder}) is, or None when the
    names follow no layout: a folder of per-student folders is then the class, as before. ``owner``: the user name
    owning an entry (nbgrader's exchange), or None where owners tell nothing (a zip); ``ids``: the LMS ids the
    term graded users under (Brightspace: a number known as a user's stays one in a download of one student).

    A layout is taken only when every notebook and folder at the top follows it, so no one student's folder name
    decides how the class is read; other files (an ``index.html``, Blackboard's receipts) are noted and not graded.
    Of two copies of one file of one student, the later one is graded."""
    relevant = {name: is_dir for name, is_dir in entries.items() if is_dir or name.lower().endswith(".ipynb")}
    if not relevant:
        return None
    for system in SYSTEMS:
        if (system in FLAT_ONLY and any(relevant.values())) or (system in FOLDERS_ONLY and not all(relevant.values())):
            continue
        parsed = [_parse(system, name, is_dir) for name, is_dir in relevant.items()]
        if None in parsed:
            continue
        ignored = {name: "not a notebook" for name in entries if name not in relevant}
        notes = _by_owner(parsed, owner) if system == "nbgrader-exchange" else []
        if system == "brightspace":
            _user_ids_or_names(parsed, ids)
        return Download(system, _latest(parsed, ignored), ignored, notes)
    return None


def _by_owner(files: list, owner) -> list:
    """Each exchange folder given to the user who owns it, where owners tell who handed a folder in (at least one
    folder is owned by the student it names); returns the report's notes. ``owner`` gives '' for a folder whose
    owner tells nothing (the grading user's or root's: copied or unpacked there), which is taken as the student it
    names."""
    owners = {f.entry: owner(f.entry) for f in files} if owner else {}
    if not any(owners.get(f.entry) == f.student for f in files):
        return ["the exchange folders' owners do not say who handed each in (a zip, or a copied folder): each is "
                "taken as the student its name says; grade the exchange's own inbound/ folder to have them checked"]
    notes, unknown = [], [f for f in files if not owners[f.entry]]
    for f in files:
        named, by = f.student, owners[f.entry]
        f.by = f"user {by}" if by else ""
        if by and by != named:  # apart from both: it replaces neither the named student's work nor the owner's own
            f.student = f"{by} (as {named})"
            said = (f"the exchange folder '{_shown(f.entry)}' names the student '{_shown(named)}' but belongs to the "
                    f"user '{_shown(by)}': graded apart as '{_shown(f.student)}', never as {_shown(named)}'s work "
                    f"nor in place of {_shown(by)}'s own")
            f.flags.append(said)
            notes.append(said)
    if unknown:
        notes.append(f"{len(unknown)} of {len(files)} exchange folders belong to the grading user or root (copied or "
                     "unpacked there), so their owners do not say who handed them in: each is taken as the student "
                     "its name says")
    return notes


def _user_ids_or_names(files: list, ids) -> None:
    """Brightspace: the second number of its names is taken as the user's id only where it tells files apart. When
    every file of a download carries the same one (for several full names a number of the assignment or the
    course, not of a user; for one, nothing to tell, unless ``ids`` knows it as a user's), the download gives no
    user id: the full name is the student, and a name that came under several submissions of one file (or, in
    folders, several submissions) is flagged, the latest graded, since a resubmission and another user of the same
    name then look alike."""
    keys = {f.key for f in files}
    if len(keys) > 1 or keys <= set(ids):  # it tells users apart here, or did in an earlier download
        return
    submissions: dict = {}
    for f in files:
        f.key = f.lms_id = ""
        f.by = "submission " + f.entry.split("-", 1)[0]  # all it says of who: marks never follow a name alone
        submissions.setdefault((f.student, f.name), set()).add(f.entry.split("-", 1)[0])
    for f in files:
        subs = submissions[(f.student, f.name)]
        if len(subs) > 1:
            f.flags.append(f"Brightspace's download names '{_shown(f.student)}' in {len(subs)} submissions of "
                           f"{_shown(f.name) if f.name else 'this work'} ({', '.join(sorted(subs))}) and gives no user "
                           "id (every file carries the same second number): the latest is graded; check in "
                           "Brightspace that they are one user")


def _latest(files: list, ignored: dict) -> list:
    """The latest copy of each (student, file or lesson); the older ones go to ``ignored``."""
    best: dict = {}
    for f in sorted(files, key=lambda f: f.when):
        key = (f.student, f.key, f.name or f.lesson or f.entry)
        if key in best:
            ignored[best[key].entry] = f"an earlier copy of {f.entry}: the later one is graded"
            f.flags[:0] = [flag for flag in best[key].flags if flag not in f.flags]  # what was said of the copy not
            # graded still reaches the report, once
        best[key] = f
    return list(best.values())


def nearest(entries: dict) -> str:
    """A hint for a class folder no layout fits: the LMS layout most of its notebooks and folders follow, and the
    names that do not; '' when none follows any."""
    relevant = {name: is_dir for name, is_dir in entries.items() if is_dir or name.lower().endswith(".ipynb")}
    counts = {system: [name for name, is_dir in relevant.items() if _parse(system, name, is_dir) is None]
              for system in SYSTEMS}
    system = min(SYSTEMS, key=lambda s: len(counts[s]))
    misfits = counts[system]
    if len(misfits) == len(relevant):
        return ""
    shown = ", ".join(repr(name) for name in sorted(misfits)[:5]) + (", ..." if len(misfits) > 5 else "")
    return (f"{len(relevant) - len(misfits)} of {len(relevant)} names follow {TITLES[system]}'s download layout, "
            f"but {shown} do not: rename or remove those, or put each student's notebooks in a folder of their own")
