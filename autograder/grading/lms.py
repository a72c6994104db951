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
    to one assignment: the student is the full name, the id is kept per lesson (Moodle's grading worksheet is
    matched on ``Participant <id>``).
``blackboard``
    flat files ``<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file>`` (and a ``.txt`` receipt per
    attempt): the student is the username; of several attempts the latest is graded and the others noted.
``brightspace``
    flat files or folders ``<submission id>-<file id> - <Full Name> - <Mon D, YYYY HHMM AM> - <file>``: the
    student is the full name, the latest submission of a file is graded.
``nbgrader-exchange``
    the exchange's ``inbound/`` folders ``<student>+<assignment>+<timestamp>[+<random>]``: the latest of each
    (student, assignment) is graded.

Blackboard's attempt time, Brightspace's date and the exchange's timestamp are kept as the submission time
(``File.submitted``, ISO 8601: the LMS's local time as it writes it, the exchange's in UTC); ``after_due`` says
whether such a time is after an instructor's due date (``--due``).

The names are data: a student's name becomes a student id through ``intake.assign_ids`` like any folder name. A
class folder that mixes layouts, or whose names follow none, is not an LMS download (``recognise`` returns None).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

CANVAS = re.compile(r"(?P<name>[a-z0-9]+)(?P<late>_late)?_(?P<id>\d+)_(?P<sub>\d+)_(?P<file>.+)", re.IGNORECASE)
CANVAS_COPY = re.compile(r"(?P<stem>.+)-\d+(?P<ext>\.ipynb)$", re.IGNORECASE)  # Canvas's name of a resubmitted file
MOODLE = re.compile(r"(?P<name>.+?)_(?P<id>\d+)_assignsubmission_(?:file|onlinetext)(?:_(?P<file>.*))?", re.DOTALL)
BLACKBOARD = re.compile(r"(?P<assignment>.+)_(?P<name>[^_]+)_attempt_(?P<when>\d{4}(?:-\d{2}){5})(?:_(?P<file>.+))?",
                        re.DOTALL)
BRIGHTSPACE = re.compile(r"(?P<sub>\d+)-(?P<fid>\d+) - (?P<name>.+?) ?- (?P<when>[A-Z][a-z]{2} \d{1,2}, \d{4} "
                         r"\d{3,4} [AP]M)(?: - (?P<file>.+))?", re.DOTALL)
EXCHANGE = re.compile(r"(?P<name>[^+]+)\+(?P<assignment>[^+]+)\+(?P<when>[^+]+)(?:\+[^+]*)?")
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


@dataclass
class Download:
    """A class folder read as one LMS's download."""

    system: str
    files: list  # [File]: what is graded
    ignored: dict = field(default_factory=dict)  # {entry: why it is not graded}
    flags: dict = field(default_factory=dict)  # {student: [flags]}: who the LMS's names leave in doubt
    notes: list = field(default_factory=list)  # about the download as a whole

    def students(self) -> dict:
        """{student: [File]}"""
        grouped = {}
        for f in self.files:
            grouped.setdefault(f.student, []).append(f)
        return grouped


def _parse(system: str, entry: str, is_dir: bool):
    """The File an entry of ``system``'s layout is, or None."""
    if system == "canvas" and not is_dir and (m := CANVAS.fullmatch(entry)):
        name = m["file"]
        copy = CANVAS_COPY.fullmatch(name)
        return File(entry, m["name"].lower() + "_" + m["id"], m["id"], copy["stem"] + copy["ext"] if copy else name,
                    m["sub"], late=bool(m["late"]))
    if system == "moodle" and (m := MOODLE.fullmatch(entry)) and (is_dir or m["file"]):
        return File(entry, m["name"], m["id"], "" if is_dir else m["file"])
    if system == "blackboard" and (m := BLACKBOARD.fullmatch(entry)):
        return File(entry, m["name"], m["name"], "" if is_dir else (m["file"] or ""), m["when"],
                    submitted=_local_iso(m["when"], "%Y-%m-%d-%H-%M-%S"))
    if system == "brightspace" and (m := BRIGHTSPACE.fullmatch(entry)) and (is_dir or m["file"]):
        when = _local_iso(m["when"], "%b %d, %Y %I%M %p")
        return File(entry, m["name"].strip(), "", "" if is_dir else m["file"], when or m["when"], submitted=when)
    if system == "nbgrader-exchange" and is_dir and (m := EXCHANGE.fullmatch(entry)):
        return File(entry, m["name"], "", "", m["when"], m["assignment"], submitted=utc_iso(m["when"]))
    return None


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


def recognise(entries: dict, owners: dict | None = None, now: datetime | None = None) -> Download | None:
    """The LMS download ``entries`` ({name at the top of the class folder: is it a folder}) is, or None when the
    names follow no layout: a folder of per-student folders is then the class, as before. ``owners``: {name: the
    user owning that entry on this machine}, read for nbgrader's exchange (None: not known, e.g. from a zip);
    ``now``: what a submission time in the future is judged against.

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
        download = Download(system, [], ignored)
        if system == "nbgrader-exchange":
            _exchange_owners(parsed, owners, download)
            _no_future(parsed, now or datetime.now(timezone.utc), download.flags)
        download.files = _latest(parsed, ignored)
        if system == "brightspace":
            _repeated_names(parsed, download)
        return download
    return None


def participants_apart(download: Download, contents: dict, held: set = frozenset()) -> None:
    """Moodle: two participant ids under one full name that hand in the same file (so, in one assignment's
    download) are two students: each becomes ``<name> (participant <id>)``, flagged, except the one whose id the
    term already holds under that name (``held``: {(name, participant id)}), who stays the student graded before.
    ``contents``: {entry: the names of the files it holds}. Ids under one name with files apart are one student's
    in several assignments (each assignment gives its own participant ids), as before."""
    if download.system != "moodle":
        return
    by_name = {}
    for f in download.files:
        by_name.setdefault(f.student, {}).setdefault(f.lms_id, set()).update(contents.get(f.entry, ()))
    for f in download.files:
        ids = by_name[f.student]
        names = [n for pid, files in ids.items() if pid != f.lms_id for n in files]
        if len(ids) < 2 or not ids[f.lms_id] & set(names):
            continue
        others = ", ".join(sorted(pid for pid in ids if pid != f.lms_id))
        name = f.student
        if (name, f.lms_id) not in held:
            f.student = f"{name} (participant {f.lms_id})"
        download.flags[f.student] = [
            f"Moodle lists another participant under the same name '{name}' (participant {others}) who handed in "
            "the same assignment: graded apart by participant id; the name alone cannot tell whose other lessons "
            "are whose, so check which student is whom"]


def _exchange_owners(files: list, owners: dict | None, download: Download) -> None:
    """nbgrader's exchange: a folder owned by another user than the one it names is that user's hand-in."""
    known = {f.entry: (owners or {}).get(f.entry) for f in files}
    if len({o for o in known.values() if o is not None}) < 2:
        download.notes.append("the exchange's folders all have one owner here (a copy, or a zip), so who wrote "
                              "each cannot be checked: each is graded as the student its name says")
        return
    for f in files:
        owner = known[f.entry]
        if owner is not None and owner != f.student:
            named = f.student
            f.student = f"{named} (handed in by {owner})"
            download.flags.setdefault(f.student, []).append(
                f"the exchange folder '{f.entry}' names {named} but belongs to the user {owner}: graded apart as "
                f"{owner}'s hand-in and never in place of {named}'s; check who wrote it")
            download.flags.setdefault(named, []).append(
                f"the user {owner} put a folder under this student's name into the exchange ('{f.entry}'): "
                "graded apart, it replaced nothing")


def _no_future(files: list, now: datetime, flags: dict, skew_s: int = 300) -> None:
    """A submission time after ``now`` (beyond a clock skew) is none: flagged, it orders before every honest one
    and records no time, so it never wins over an honest copy, now or in a later run."""
    for f in files:
        if not f.submitted:
            continue
        when = _aware(datetime.fromisoformat(f.submitted))
        if (when - now).total_seconds() > skew_s:
            flags.setdefault(f.student, []).append(
                f"'{f.entry}' claims a submission time in the future ({f.submitted}); graded as handed in at an "
                "unknown time, so any honest copy comes first")
            f.when, f.submitted = "", ""


def _repeated_names(files: list, download: Download) -> None:
    """Brightspace: several submissions under one full name, which its names cannot tell apart, flagged."""
    times = {}
    for f in files:
        times.setdefault(f.student, set()).add(f.entry.split(" - ", 1)[0])
    for student, subs in times.items():
        if len(subs) > 1:
            download.flags.setdefault(student, []).append(
                f"Brightspace's download holds {len(subs)} submissions under the name '{student}' (submission "
                f"{', '.join(sorted(subs))}); its names carry no student id, so they were taken as one student's "
                "resubmissions and the latest graded: if two students share this name, grade each one's download "
                "apart (the earlier files are listed in the report)")


def _latest(files: list, ignored: dict) -> list:
    """The latest copy of each (student, file or lesson); the older ones go to ``ignored``."""
    best = {}
    for f in sorted(files, key=lambda f: f.when):
        key = (f.student, f.name or f.lesson or f.entry)
        if key in best:
            ignored[best[key].entry] = f"an earlier copy of {f.entry}: the later one is graded"
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
