"""The term: every lesson and student graded into OUT, each (student, lesson) at its latest hand-in.

An LMS gives one download per assignment (Canvas always does), and a class hands lessons in over weeks; each run of
the grading command takes in what its download holds and keeps everything earlier runs took in. A download that lacks
a lesson or a student never turns an earlier grade into ``missing`` or 0: OUT is the term.

What OUT keeps of each hand-in, so that a later run (a rebuild after the hidden checks changed included) can grade
it again without the download it came in:

``OUT/handed-in/<student>/<lesson>.ipynb``
    the bytes of the latest notebook handed in, as the learner gave them (a link or special file is never copied);
``OUT/handed-in/<student>/<lesson>.json``
    what intake said of it (``status``, ``note``), the LMS's id of the student in that assignment (``lms_id``),
    whether the LMS marked it late (``late``), when the LMS says it was handed in (``submitted``), its hash, when
    it was taken in, and the notebook limits within which intake read those bytes as a notebook (``checked``: a
    later run under the same limits hashes them and does not parse them again);
``OUT/handed-in/<student>/earlier/``
    every hand-in a later one replaced (a resubmission, a malformed file or a link after a good notebook), with
    its record: nothing OUT took is ever dropped;
``OUT/term.json``
    the term's lessons, the lessons closed (``--close``: their deadline passed, so a student who never handed one in
    counts ``missing``, 0), the LMS of the latest download, and each student's folder name, LMS id and the flags of
    their folder in the latest download that held them.

A (student, lesson) no download has held yet is ``not handed in``: no score, no page, left out of the student's total
and of every LMS file, until the lesson is closed. Of two hand-ins of the same (student, lesson), the one taken in
later replaces the other, unless both carry the LMS's time and the new one is older (an old download graded again).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from autograder import course
from autograder.grading.intake import class_roster, file_access, size_limits
from autograder.grading.records import outcome

FILE = "term.json"
HANDED_IN = "handed-in"
NOT_HANDED_IN_NOTE = "not handed in yet"


@dataclass
class Term:
    lessons: list = field(default_factory=list)  # in course order
    closed: dict = field(default_factory=dict)  # lesson -> when it was closed (ISO, UTC)
    lms: str = ""  # the LMS of the latest download that was one (``lms_layouts.SYSTEMS``)
    students: dict = field(default_factory=dict)  # id -> {"folder", "lms_id", "flags"}
    entries: dict = field(default_factory=dict)  # id -> {lesson: what handed-in/<id>/<lesson>.json holds}


class TermUnreadable(class_roster.LayoutError):
    """OUT's term record cannot be read; the message says how to recover it."""


def _order(lessons) -> list:
    known = course.lesson_names()
    return sorted(set(lessons), key=lambda name: (known.index(name) if name in known else len(known), name))


def folder(out) -> Path:
    return Path(out) / HANDED_IN


def load(out) -> Term:
    """The term OUT holds (an empty one for a new OUT)."""
    path = Path(out) / FILE
    term = Term()
    if path.exists():
        try:
            data = json.loads(file_access.read_regular(path, 64 * 2**20).decode("utf-8"))
            term = Term(lessons=list(data["lessons"]), closed=dict(data.get("closed", {})),
                        lms=data.get("lms", ""), students=dict(data["students"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TermUnreadable(f"{path} could not be read ({type(exc).__name__}: {exc}); it lists the lessons and "
                                 "students graded into this folder: restore it from a backup") from None
    elif (Path(out) / "state").is_dir():
        return _from_earlier_version(Path(out))
    for record in sorted(folder(out).glob("*/*.json")):
        try:
            term.entries.setdefault(record.parent.name, {})[record.stem] = json.loads(record.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise TermUnreadable(f"{record} could not be read ({type(exc).__name__}); restore it from a backup, or "
                                 "remove it and grade that student's download again") from None
    return term


def _from_earlier_version(out: Path) -> Term:
    """The term of an OUT that an earlier version of the command graded (state records and graded copies, no
    ``term.json``): each graded copy becomes the hand-in it was made from, its record told that copy's hash (the copy
    is what was graded), so nothing is graded again and no grade or mark is lost."""
    import csv

    term = Term()
    try:
        term.lessons = _order(json.loads((out / "course.json").read_text())["lessons"])
    except (OSError, ValueError, KeyError):
        pass
    ids = {}
    try:
        with (out / "student_ids.csv").open(encoding="utf-8", newline="") as fh:
            ids = {row["student"]: row for row in csv.DictReader(fh)}
    except OSError:
        pass
    for record_path in sorted((out / "state").glob("*/*.json")):
        sid, lesson = record_path.parent.name, record_path.stem
        graded = out / "course" / "submitted" / sid / lesson / f"{lesson}.ipynb"
        if not graded.is_file():
            continue
        data = graded.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        target = folder(out) / sid / f"{lesson}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        entry = {"status": "ok", "note": "", "lms_id": "", "late": False, "submitted": "", "flags": [],
                 "taken": _now(), "hash": digest}
        _write_json(target.with_suffix(".json"), entry)
        term.entries.setdefault(sid, {})[lesson] = entry
        record = json.loads(record_path.read_text(encoding="utf-8"))
        if record.get("hash"):
            record["hash"] = digest
            _write_json(record_path, record)
        known = ids.get(sid, {})
        term.students.setdefault(sid, {"folder": known.get("folder", sid), "lms_id": known.get("lms id", ""),
                                       "flags": []})
        term.lessons = _order([*term.lessons, lesson])
    save(out, term)
    return term


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # atomic: a killed run leaves the old record or the new one


def save(out, term: Term) -> None:
    _write_json(Path(out) / FILE, {"lessons": _order(term.lessons), "closed": term.closed, "lms": term.lms,
                                   "students": term.students})


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def checked_under(limits) -> str:
    """The notebook limits a hand-in was read within, as its record keeps them (``checked``)."""
    return json.dumps(dataclasses.asdict(limits or size_limits.NotebookLimits()), sort_keys=True)


def checked(term: Term, limits) -> set:
    """The sha256 of every hand-in of ``term`` that intake read as a notebook within ``limits`` (the same limits):
    ``class_folder.collect`` does not parse those bytes again."""
    under = checked_under(limits)
    return {entry["hash"] for lessons in term.entries.values() for entry in lessons.values()
            if entry.get("hash") and entry.get("checked") == under and entry.get("status") in ("ok", "misnamed")}


def take_in(out, term: Term, roster: class_roster.Roster, lessons, limits=None) -> list:
    """Add what ``roster`` (this run's download) handed in for ``lessons`` to ``term`` and to OUT; returns the
    notes for the report (an older copy than the one kept). The download itself is only read; a hand-in OUT holds
    already, the same bytes, is not written again."""
    notes = []
    under = checked_under(limits)
    for sid in roster.students:
        took = False
        for lesson in lessons:
            entry = roster.entries[sid].get(lesson)
            if entry is None or entry.status == "missing":
                continue
            took = True
            new = {"status": entry.status, "note": entry.note, "lms_id": entry.lms_id, "late": entry.late,
                   "submitted": entry.submitted, "flags": list(entry.flags), "taken": _now(), "hash": "",
                   "by": entry.by}
            old = term.entries.get(sid, {}).get(lesson)
            if old and old.get("submitted") and new["submitted"] and new["submitted"] < old["submitted"]:
                notes.append(f"{sid} {lesson}: this download's copy was handed in at {new['submitted']}, before the "
                             f"one graded already ({old['submitted']}); the later one is kept")
                continue
            target = folder(out) / sid / f"{lesson}.ipynb"
            data = None
            if entry.path is not None and entry.status != "refused":
                try:
                    data = file_access.read_regular(entry.path, (limits or size_limits.NotebookLimits()).max_bytes)
                except OSError as exc:  # it grew or vanished since intake read it: the learner's file, no copy
                    data = None
                    if entry.gradable:
                        new["status"], new["note"] = "malformed", (
                            f"{file_access.display(entry.path.name)} changed or vanished while it was read "
                            f"({type(exc).__name__}); submit it again")
            if data is not None:
                new["hash"] = hashlib.sha256(data).hexdigest()
                if entry.gradable and new["status"] == entry.status and entry.read_hash == new["hash"]:
                    new["checked"] = under  # intake read these very bytes as a notebook within these limits
                if old and old.get("hash") == new["hash"]:
                    new["taken"] = old.get("taken", new["taken"])
            _keep_earlier(target, old, new)
            if data is not None and not _holds(target, data):
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(target.name + ".tmp")
                tmp.write_bytes(data)
                os.replace(tmp, target)
            if new != old:
                _write_json(target.with_suffix(".json"), new)
            term.entries.setdefault(sid, {})[lesson] = new
        if took or sid not in term.students:
            term.students[sid] = {"folder": roster.folders.get(sid, sid), "lms_id": roster.lms_ids.get(sid, ""),
                                  "flags": list(roster.flags.get(sid, []))}
    term.lessons = _order([*term.lessons, *lessons])
    if roster.lms:
        term.lms = roster.lms
    return notes


def _holds(target: Path, data: bytes) -> bool:
    """Whether OUT's copy ``target`` holds ``data`` already (a regular file, never a link, of these very bytes)."""
    try:
        return file_access.read_regular(target, len(data)) == data
    except OSError:  # none yet, a link, larger than ``data``: written again
        return False


def _keep_earlier(target: Path, old, new: dict) -> None:
    """Move the copy a new hand-in replaces to ``earlier/`` beside it (``<lesson>-<taken>.ipynb`` and its record):
    no hand-in OUT took is ever dropped, also when the new one is malformed or a link."""
    if not old or not target.exists():
        return
    if old.get("hash") and new.get("hash") == old["hash"]:
        return  # the same bytes again
    stamp = str(old.get("taken", "")).replace(":", "").replace("+0000", "Z") or "unknown"
    kept = target.parent / "earlier" / f"{target.stem}-{stamp}.ipynb"
    kept.parent.mkdir(exist_ok=True)
    os.replace(target, kept)
    _write_json(kept.with_suffix(".json"), old)


def lms_ids(term: Term, known: dict) -> dict:
    """{student's name (``known``: ``student_ids.known_ids``): {lesson: the LMS id it was handed in under}}, for
    ``class_folder.collect``: a later download sends each LMS id to the student it was graded as."""
    ids: dict = {}
    for sid, lessons in term.entries.items():
        given = {lesson: str(entry.get("lms_id", "")) for lesson, entry in lessons.items() if entry.get("lms_id")}
        if given:
            ids.setdefault(known.get(sid, term.students.get(sid, {}).get("folder", sid)), {}).update(given)
    return ids


def close(term: Term, lessons) -> None:
    """The deadline of ``lessons`` passed: from now on a student who never handed one in counts ``missing``, 0."""
    for lesson in lessons:
        term.closed.setdefault(lesson, _now())
    term.lessons = _order([*term.lessons, *lessons])


def roster(out, term: Term, download: class_roster.Roster) -> class_roster.Roster:
    """The term as a roster: every student and lesson of the term, each entry the latest hand-in (its copy in OUT),
    ``missing`` where the lesson is closed and nothing was handed in, else ``not handed in``."""
    whole = class_roster.Roster(root=download.root, notes=list(download.notes), lms=term.lms or download.lms)
    for sid in sorted(term.students):
        info = term.students[sid]
        whole.folders[sid] = info.get("folder", sid)
        whole.names[sid] = download.names.get(sid, info.get("folder", sid))
        whole.lms_ids[sid] = info.get("lms_id", "")
        whole.flags[sid] = list(info.get("flags", []))
        whole.entries[sid] = {}
        for lesson in term.lessons:
            kept = term.entries.get(sid, {}).get(lesson)
            if kept:
                copy = folder(out) / sid / f"{lesson}.ipynb"
                entry = class_roster.Entry(sid, lesson, copy if copy.exists() else None, kept["status"], kept["note"])
                if entry.gradable and entry.path is None:  # OUT lost it: the grader's failure, never the learner's 0
                    entry.status, entry.note = outcome.GRADING_ERROR, (
                        f"its copy {copy} is gone: restore it from a backup, or grade the download it came in again")
            elif lesson in term.closed:
                entry = class_roster.Entry(sid, lesson, None, "missing",
                                           f"no {lesson}.ipynb was handed in before the lesson was closed")
            else:
                entry = class_roster.Entry(sid, lesson, None, outcome.NOT_HANDED_IN, NOT_HANDED_IN_NOTE)
            entry.lms_id = (kept or {}).get("lms_id", "")
            entry.late = bool((kept or {}).get("late"))
            entry.submitted = (kept or {}).get("submitted", "")
            entry.by = (kept or {}).get("by", "")
            entry.flags = list((kept or {}).get("flags", []))
            whole.entries[sid][lesson] = entry
    return whole


def newly_missing(before: Term, after: Term) -> list:
    """(student, lesson) that ``after`` counts ``missing`` because a lesson was closed in this run."""
    closed = [lesson for lesson in after.closed if lesson not in before.closed]
    return [(sid, lesson) for lesson in closed for sid in sorted(after.students)
            if lesson not in after.entries.get(sid, {})]
