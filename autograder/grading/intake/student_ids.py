"""The nbgrader student id of each student folder, made from its name, and the ids given in earlier batches.

A folder whose name is a valid nbgrader student id (``STUDENT_ID``: a letter or digit, then letters, digits,
``_ . @ -``; at most 100) and does not end like an id this module makes (``GENERATED``) is graded under that name.
Any other name (``Petrov, Ivan``, ``o'brien``, a name that is not UTF-8) gets the safe id ``student_id`` makes from
it: its ASCII letters and digits in lower case joined by ``_`` (at most 40), a ``-``, and the first 8 hex digits of
the SHA-256 of the folder name's bytes, e.g. ``petrov_ivan-3f1c2a9b``. The same name always gets the same id. Two
names that would share an id (also in a later batch, and ids that differ only in case) are both kept: the later one
gets 16 hex digits, and both are flagged (``assign_ids``; ``OUT/students.json`` remembers every id's name:
``known_ids``, ``remember``). Folder names that look alike or are not UTF-8 are flagged too (``look_alike_flags``,
``not_utf8_flags``). The grading command writes the mapping to ``OUT/student_ids.csv`` and keeps the folder name in
``grades.csv``, shown with ``file_access.display`` (bytes that are not UTF-8 and unprintable characters escaped).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import unicodedata
from pathlib import Path

from autograder.grading.intake import look_alike
from autograder.grading.intake.class_roster import LayoutError, Roster
from autograder.grading.intake.file_access import display, read_regular

STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}")
GENERATED = re.compile(r"-[0-9a-f]{8}(?:[0-9a-f]{8})?$", re.IGNORECASE)  # how the ids student_id makes end
REGISTRY = "students.json"


def student_id(folder_name: str, digits: int = 8) -> str:
    """The nbgrader student id of a student folder (see the module's docstring for the rule)."""
    if digits == 8 and STUDENT_ID.fullmatch(folder_name) and not GENERATED.search(folder_name):
        return folder_name
    raw = os.fsencode(folder_name)
    ascii_name = unicodedata.normalize("NFKD", raw.decode("utf-8", "ignore")).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "_", ascii_name.lower()).strip("_")[:40].strip("_") or "student"
    return f"{slug}-{hashlib.sha256(raw).hexdigest()[:digits]}"


def assign_ids(names, known: dict | None = None) -> tuple:
    """({name: id}, {id: flags}) for the folder names of a class: one id per name, never one id for two names.

    ``known`` ({id: name}, from earlier runs) keeps each name's id from batch to batch. A name whose id another name
    holds (or an id differing only in case, which some file systems merge) gets ``student_id(name, 16)``; both are
    flagged and both graded.
    """
    known = dict(known or {})
    by_name = {name: sid for sid, name in known.items()}
    holder = {sid.casefold(): name for sid, name in known.items()}
    ids: dict
    flags: dict
    ids, flags = {}, {}
    for name in sorted(names, key=os.fsencode):
        sid = by_name.get(name) or student_id(name)
        owner = holder.get(sid.casefold(), name)
        if owner != name:
            wanted, sid = sid, student_id(name, 16)
            flags.setdefault(sid, []).append(
                f"the folder '{display(name)}' would get the id {wanted}, which the folder '{display(owner)}' "
                f"has; graded as {sid} (both kept: check which student is whom)")
            if owner in ids:
                flags.setdefault(ids[owner], []).append(
                    f"the folder '{display(name)}' would get this student's id; it was graded as {sid}")
        holder[sid.casefold()] = name
        ids[name] = sid
    return ids, flags


def look_alike_flags(ids: dict) -> dict:
    """{id: flags} for folder names that look alike (the same ``look_alike.skeleton``: they differ only in case,
    accents, spaces, punctuation, invisible characters or Cyrillic and Greek letters drawn like Latin ones), or that
    look like an id this module makes."""
    groups: dict
    flags: dict
    groups, flags = {}, {}
    for name, sid in ids.items():
        groups.setdefault(look_alike.skeleton(name), []).append(name)
        if GENERATED.search(name):
            flags.setdefault(sid, []).append(f"the folder name '{display(name)}' looks like a student id the "
                                             f"grading command makes; graded under its own id {sid}")
    for names in groups.values():
        for name in names if len(names) > 1 else ():
            others = ", ".join(_spelled(n) for n in names if n != name)
            flags.setdefault(ids[name], []).append(f"the folder {_spelled(name)} looks like {others}: graded "
                                                   "apart; check they are different students")
    return flags


def _spelled(name) -> str:
    """A folder name quoted as ``display`` shows it, and spelled out in ASCII when it is not (look-alikes that
    render the same differ there: ``'аlice' ('\\u0430lice')``)."""
    text = display(name)
    return f"'{text}'" if text.isascii() else f"'{text}' ({ascii(text)})"


def not_utf8_flags(ids: dict) -> dict:
    flags = {}
    for name, sid in ids.items():
        try:
            os.fsencode(name).decode("utf-8")
        except UnicodeDecodeError:
            flags[sid] = [f"the folder's name is not UTF-8; it is shown as '{display(name)}'"]
    return flags


def known_ids(out) -> dict:
    """{id: folder name} of every student graded in ``out`` before (``OUT/students.json``)."""
    path = Path(out) / REGISTRY
    if not path.exists():
        return {}
    try:
        known = json.loads(read_regular(path).decode("ascii"))
    except (OSError, ValueError) as exc:
        raise LayoutError(f"{path} could not be read ({type(exc).__name__}: {exc}); it keeps each student id from "
                          "being given to another name in a later batch: restore it from a backup, or move it "
                          "aside to start it afresh") from None
    if not isinstance(known, dict):
        raise LayoutError(f"{path} is not a map of student ids to folder names; restore it from a backup, or move it "
                          "aside to start it afresh")
    return known


def remember(out, roster: Roster) -> None:
    """Add the roster's ids to ``OUT/students.json`` (ASCII JSON: any name, any bytes, round-trips)."""
    path = Path(out) / REGISTRY
    merged = {**known_ids(out), **roster.names}
    tmp = path.with_name(REGISTRY + ".tmp")
    tmp.write_text(json.dumps(merged, sort_keys=True, indent=1) + "\n", encoding="ascii")
    os.replace(tmp, path)
