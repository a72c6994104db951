"""Find each student's notebook for each lesson in what an instructor hands the grading command.

Accepted layouts (``SUBMISSIONS`` is a folder or a ``.zip`` of one):

1. a folder of per-student folders, each holding the lesson notebooks flat::

       SUBMISSIONS/alice/01_warmup.ipynb
2. the same with one folder per lesson (nbgrader's own ``submitted/`` layout)::

       SUBMISSIONS/alice/01_warmup/01_warmup.ipynb
3. what ``nbgrader collect`` gathered from the exchange: a course folder holding ``submitted/``, or that
   ``submitted/`` folder itself (``SUBMISSIONS/submitted/alice/01_warmup/01_warmup.ipynb``, ``timestamp.txt``
   files are fine);
4. an LMS's download (Canvas, Moodle, Blackboard, Brightspace) or nbgrader's exchange ``inbound/`` folder, read by
   ``autograder/grading/intake/lms_layouts.py`` when every name at the top of the class folder follows that layout;
5. a zip of any of these, with or without one enclosing folder.

The class folder is the folder the instructor named; no student's folder name or content decides it. A folder is
taken as a course folder only when ``submitted/`` sits beside nbgrader's own files (``nbgrader_config.py``,
``gradebook.db``), never by its folders' names: a student folder called ``submitted``, ``source`` or ``release`` is
that student. Only a zip's one enclosing folder is stepped into.

A notebook with another name (``01_warmup (1).ipynb``, ``01-Warmup.ipynb``, or the only notebook in
``alice/01_warmup/``) is graded and flagged ``misnamed``; a lesson with no notebook is ``missing``; a file that is
not a readable notebook is ``malformed``; a symbolic link or a special file (fifo, device, socket) is ``refused``:
never followed, never opened. Each of these scores 0 only for that lesson of that student; a student folder that
holds no notebook at all is every lesson ``missing``.

The notebooks are read with ``file_access`` within ``size_limits``, a zip is unpacked by ``archives``, and each
student's id is made from the folder's name by ``student_ids``. A notebook whose bytes the term already took in as
readable under the same limits (``collect``'s ``checked``: ``term.checked``) is hashed, not parsed again: a rerun on
the same download costs a hash per notebook. When a notebook was handed in is what the LMS's download says, or the
``timestamp.txt`` ``nbgrader collect`` keeps beside it (``submission_time``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath

from autograder.grading.intake import lms_layouts
from autograder.grading.intake.archives import safe_extract
from autograder.grading.intake.class_roster import Entry, LayoutError, Roster
from autograder.grading.intake.file_access import (display, is_hidden, is_plain_dir, is_plain_file, kind_of,
                                                   list_folder, parse_notebook, read_regular)
from autograder.grading.intake.size_limits import NotebookLimits, OverLimit
from autograder.grading.intake.student_ids import assign_ids, look_alike_flags, not_utf8_flags

COURSE_FILES = ("nbgrader_config.py", "gradebook.db")
JUNK = {"__MACOSX", ".ipynb_checkpoints", ".DS_Store", ".git"}  # hidden entries not worth a note
UNZIPPED = "unzipped"  # where a zip of the class is unpacked, in the output folder
LAYOUT_HELP = """expected one of:
  SUBMISSIONS/<student>/<lesson>.ipynb                    (a folder of per-student folders)
  SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb           (one folder per lesson, nbgrader's layout)
  SUBMISSIONS/submitted/<student>/<lesson>/<lesson>.ipynb (a course folder after `nbgrader collect`)
{lms}
  a .zip of any of these
with lessons named like {lessons}"""


def layout_help(lessons) -> str:
    """What the grading command accepts, for error messages and ``--help``."""
    return LAYOUT_HELP.format(lessons=", ".join(lessons), lms=lms_layouts.HELP)


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def is_course_folder(path: Path) -> bool:
    """An nbgrader course folder: ``submitted/`` beside nbgrader's own files (``COURSE_FILES``), as an instructor's
    course has them. Files are the instructor's (students are folders), so no student's folder name decides it."""
    return is_plain_dir(path / "submitted") and any(is_plain_file(path / name) for name in COURSE_FILES)


def _is_student_folder(folder: Path, lessons) -> bool:
    return any(folder.glob("*.ipynb")) or any((folder / lesson).is_dir() for lesson in lessons)


def class_root(path: Path, lessons, archive: bool = False) -> tuple:
    """(the folder whose sub-folders are the students, notes): the folder named, its ``submitted/`` when it is a
    course folder, and inside a zip the one folder it encloses (not a student's folder)."""
    notes = []
    if archive and not is_course_folder(path):
        tops = [p for p in path.iterdir() if not is_hidden(p.name)]
        if len(tops) == 1 and is_plain_dir(tops[0]) and not _is_student_folder(tops[0], lessons):
            path = tops[0]
            notes.append(f"the zip holds one folder, '{display(path.name)}': its folders were taken as the students")
    if is_course_folder(path):
        path = path / "submitted"
    return path, notes


def _read_check(path: Path, limits: "NotebookLimits | None" = None) -> str:
    """'' when ``path`` is a notebook nbformat can read within ``limits``, else why not."""
    return _checked_read(path, limits)[0]


def _checked_read(path: Path, limits: "NotebookLimits | None" = None, checked=frozenset()) -> tuple:
    """(``_read_check``'s answer, the sha256 of the bytes read: '' when none were). Bytes whose hash is in
    ``checked`` passed the check before, under these limits: they are not parsed again."""
    limits = limits or NotebookLimits()
    digest = ""
    try:
        data = read_regular(path, limits.max_bytes)
        digest = hashlib.sha256(data).hexdigest()
        if digest in checked:
            return "", digest
        nb = parse_notebook(data, path, limits)
    except OverLimit as exc:
        return str(exc), digest
    except Exception as exc:  # noqa: BLE001 - any reading failure means the file is not a notebook
        return (f"{display(path.name)} is not a readable notebook ({type(exc).__name__}: {display(str(exc)[:120])})",
                digest)
    if not isinstance(nb.get("cells"), list):
        return f"{display(path.name)} has no list of cells", digest
    return "", digest


def _find(lesson: str, files: dict, claimed: set):
    """(path, status, note) of one lesson's notebook among a student's ``files`` ({name relative to the student:
    (path, None or what a refused one is)})."""
    for rel in (PurePosixPath(f"{lesson}.ipynb"), PurePosixPath(lesson, f"{lesson}.ipynb")):
        if rel in files:
            return _found(rel, files[rel], "ok", "")
    number = lesson.split("_", 1)[0]
    candidates = [r for r in files if r not in claimed and r.name.endswith(".ipynb") and (
        r.parent.name == lesson or _norm(r.stem).startswith(_norm(lesson)) or _norm(r.stem).startswith(number + "_")
        or _norm(r.stem) == number)]
    if len(candidates) == 1:
        return _found(candidates[0], files[candidates[0]], "misnamed",
                      f"found {display(candidates[0])} instead of {lesson}.ipynb; graded it")
    if len(candidates) > 1:
        names = ", ".join(display(r) for r in candidates)
        return None, "missing", f"several notebooks could be {lesson} ({names}); none graded"
    return None, "missing", f"no {lesson}.ipynb"


def _found(rel, file, status, note):
    path, refused = file
    if refused:
        return rel, "refused", f"{display(rel)} is {refused}: not followed or opened; submit the notebook file itself"
    return rel, status, note


def _folder_files(folder: Path, refused: dict, prefix=PurePosixPath()) -> dict:
    """{name relative to ``folder``, under ``prefix``: (path, None or why it is refused)} of the notebooks, links and
    special files in a student's folder (``list_folder``); ``refused``: what unpacking a zip skipped."""
    notebooks, inside = list_folder(folder)
    inside.update({p: why for p, why in refused.items() if folder in p.parents})
    found = {**{p: None for p in notebooks}, **inside}
    return {prefix / PurePosixPath(*p.relative_to(folder).parts): (p, why) for p, why in found.items()}


def _student_entries(sid: str, files: dict, lessons, limits=None, origins: dict | None = None,
                     checked=frozenset()) -> tuple:
    """({lesson: Entry}, flags about the rest of the student's files) of one student's ``files`` (``_folder_files``).
    ``origins``: {name relative to the student: the ``lms_layouts.File`` it came from}, for an LMS's download: its time,
    its late mark and the student's id there go with the lesson's Entry. ``checked``: ``_checked_read``'s."""
    claimed: set
    entries, claimed = {}, set()
    for lesson in lessons:
        if not any(rel.name.endswith(".ipynb") for rel in files):
            entries[lesson] = Entry(sid, lesson, None, "missing", "the student's folder holds no notebook")
            continue
        rel, status, note = _find(lesson, files, claimed)
        path, digest = None, ""
        if rel is not None:
            claimed.add(rel)
            path = files[rel][0]
            problem, digest = ("", "") if status == "refused" else _checked_read(path, limits, checked)
            if problem:
                status, note = "malformed", problem
        entries[lesson] = Entry(sid, lesson, None if status == "refused" else path, status, note, read_hash=digest)
        if rel is not None:
            _when_handed_in(entries[lesson], rel, path, (origins or {}).get(rel))
    flags = [f"{display(rel)} is {why}: not followed or opened"
             for rel, (_, why) in files.items() if why and rel not in claimed]
    return entries, flags


MAX_TIMESTAMP_BYTES = 200


def submission_time(data: bytes, now: datetime) -> datetime:
    """The submission time a ``timestamp.txt`` holds, in UTC, read with nbgrader's own parser; ``now``: the grading
    time, naive UTC. ``ValueError`` saying why the file cannot be used: too large, not UTF-8, not a date nbgrader can
    read, before 1970 or later than a day after ``now``."""
    from nbgrader.utils import parse_utc

    if len(data) > MAX_TIMESTAMP_BYTES:
        raise ValueError(f"over {MAX_TIMESTAMP_BYTES} bytes")
    try:
        text = data.decode("utf-8").strip()
        when = parse_utc(text)
    except Exception as exc:  # noqa: BLE001 - whatever the parser makes of these bytes, they are not a time
        raise ValueError(f"not a date and time ({type(exc).__name__})") from None
    if not isinstance(when, datetime) or when < datetime(1970, 1, 1):
        raise ValueError("not a date and time after 1970")
    if when > now + timedelta(days=1):
        raise ValueError(f"{when:%Y-%m-%d %H:%M} UTC, after the time of grading")
    return when


def _when_handed_in(entry: Entry, rel, path, origin) -> None:
    """The time, late mark and LMS id of the file an Entry was read from: those of its ``lms_layouts.File``, or the time
    in the ``timestamp.txt`` that ``nbgrader collect`` keeps beside a notebook (``<lesson>/timestamp.txt``)."""
    if origin is not None:
        entry.submitted, entry.late, entry.lms_id = origin.submitted, origin.late, origin.lms_id
        entry.by = origin.by or origin.lms_id
        return
    if path is None or PurePosixPath(rel).parent.name != entry.lesson:
        return
    try:
        stamp = read_regular(Path(path).parent / "timestamp.txt", MAX_TIMESTAMP_BYTES)
        when = submission_time(stamp, datetime.now(timezone.utc).replace(tzinfo=None))
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:  # not one nbgrader wrote: graded without a time, and flagged
        reason = f"over {MAX_TIMESTAMP_BYTES} bytes" if isinstance(exc, OverLimit) else \
            str(exc) if isinstance(exc, ValueError) else f"not a file ({type(exc).__name__})"
        entry.flags.append(f"timestamp.txt ignored ({reason}): graded without a submission time")
        return
    entry.submitted = when.replace(tzinfo=timezone.utc).isoformat()


def _download_students(root: Path, download: "lms_layouts.Download", top: dict, skipped: dict, lessons,
                       earlier: dict) -> tuple:
    """({student: their files (``_folder_files``) or what a refused entry is}, {student: LMS ids}, {student: {name
    relative to the student: the ``lms_layouts.File`` it came from}}, {student: flags}) of an LMS's download: each
    student's flat files under the names the learner gave them, each folder's files as they are (nbgrader's exchange:
    under the assignment's name). A link or special file at the top stays refused. ``earlier``: ``term.lms_ids``."""
    found = {}
    for who, group in download.students().items():
        files, came_from = {}, {}
        for f in group:
            if f.name:
                added = {PurePosixPath(f.name): (root / f.entry, None)}
            else:
                added = _folder_files(root / f.entry, skipped, PurePosixPath(f.lesson) if f.lesson else
                                      PurePosixPath())
            files.update(added)
            came_from.update(dict.fromkeys(added, f))
        found[who] = (group, files, came_from)
    if download.system == "moodle":
        found = _assignments_joined(found, lessons)
    names = _graded_as(download.system, {who: (group, files) for who, (group, files, _) in found.items()}, lessons,
                       earlier)
    students, ids, origins, flags = {}, {}, {}, {}
    for who, (group, files, came_from) in found.items():
        name, said = names[who]
        students[name], origins[name] = files, came_from
        flags[name] = said + list(dict.fromkeys(flag for f in group for flag in f.flags))  # each said once
        given = dict.fromkeys(f.lms_id for f in group if f.lms_id)
        if given:
            ids[name] = " ".join(given)
    students.update({name: why for name, why in top.items() if why})
    return students, ids, origins, flags


def _assignments_joined(found: dict, lessons) -> dict:
    """Moodle gives each assignment its own participant ids, so one student's downloads of several assignments,
    put in one class folder, come under several ids of one full name: ids of one name that hand in no lesson in
    common are one student's (one group, its ids joined by spaces). Where two ids of a name hand in the same lesson,
    the name is two students' or more, and each id stays apart (``_graded_as``)."""
    by_name: dict = {}
    for (student, key) in found:
        by_name.setdefault(student, []).append(key)
    joined = {}
    for student, keys in by_name.items():
        handed = [{lesson for lesson in lessons if _find(lesson, found[(student, key)][1], set())[0] is not None}
                  for key in keys]
        if len(keys) == 1 or sum(map(len, handed)) != len(set().union(*handed)):
            joined.update({(student, key): found[(student, key)] for key in keys})
            continue
        group, files, came_from = [], {}, {}
        for key in keys:
            group += found[(student, key)][0]
            files.update(found[(student, key)][1])
            came_from.update(found[(student, key)][2])
        joined[(student, " ".join(sorted(keys, key=lambda k: (len(k), k))))] = (group, files, came_from)
    return joined


def _graded_as(system: str, groups: dict, lessons, earlier: dict) -> dict:
    """{(full name, id): (the name the student is graded under, flags)} for an LMS that names students by full name
    and gives each an id (``lms_layouts.NAMED_BY_ID``): the full name, unless the id is another student's by it: two ids
    of one name in this download, or a name whose earlier hand-in of a lesson this one also holds came with another id
    (Moodle's participant ids belong to one assignment; Brightspace's user ids to the whole course). Then the student
    is ``<full name>_<id>``, flagged. An id graded before keeps the name it was graded under, so a later download
    sends every id to the same student."""
    what = lms_layouts.NAMED_BY_ID.get(system)
    if not what:
        return {who: (who[0], []) for who in groups}
    by_id = {pid: name for name, given in earlier.items() for pid in given.values() if pid}
    keys: dict = {}
    for student, key in groups:
        keys.setdefault(student, []).append(key)
    names, used = {}, set()
    for (student, key), (_, files) in sorted(groups.items()):
        flags, shared = [], sorted(keys[student], key=lambda k: (len(k), k))
        if len(shared) > 1:
            flags.append(f"{len(shared)} {lms_layouts.TITLES[system]} {what}s share the name "
                         f"'{display(student)}' ({what} ids {', '.join(shared)}); graded apart by {what} id: check "
                         "which is whom")
        handed = {lesson for lesson in lessons if _find(lesson, files, set())[0] is not None}
        before, own = earlier.get(student, {}), set(key.split())  # a student's several assignments: several ids
        others = sorted({pid for lesson, pid in before.items()
                         if pid and key and pid not in own and (system == "brightspace" or lesson in handed)})
        known = next((by_id[pid] for pid in sorted(own) if pid in by_id), None)
        if others and len(shared) == 1 and not known:
            flags.append(f"'{display(student)}' was graded as {what} {', '.join(others)} of "
                         f"{lms_layouts.TITLES[system]}; {what} {key} of the same name is graded apart by {what} id: "
                         "check which is whom")
        name = known or (f"{student}_{key}" if len(shared) > 1 or others else student)
        while name in used:  # a full name that itself ends like ``_<id>``: never two students in one folder
            name = f"{name}_{key}"
        used.add(name)
        names[(student, key)] = (name, flags)
    return names


def _owner(path: Path) -> str:
    """The user name owning ``path`` (never followed), as ``nbgrader collect``'s ``check_owner`` reads it; '' when
    the owner tells nothing: a folder of the grading user or of root was copied or unpacked there, not written by
    a student (who cannot give a folder to either)."""
    import pwd

    uid = os.lstat(path).st_uid
    if uid in (0, os.geteuid()):
        return ""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _linked_student(sid: str, path: Path, lessons, why: str) -> dict:
    note = (f"the student's folder is {why}: not followed; copy the folder itself (not a link to it) into the "
            "class folder")
    return {lesson: Entry(sid, lesson, None, "refused", note) for lesson in lessons}


def _top_level(root: Path) -> tuple:
    """({name: None for a folder, or what a refused entry is}, names of the files and hidden folders) at the top
    of the class: neither is a student."""
    students, files = {}, []
    for item in sorted(os.scandir(root), key=lambda e: e.name):
        if is_hidden(item.name):
            if item.name not in JUNK:
                files.append(item.name)
            continue
        try:
            kind = kind_of(item.stat(follow_symlinks=False).st_mode)
        except OSError:  # gone since it was listed
            continue
        if kind == "file":
            if item.name not in COURSE_FILES:
                files.append(item.name)
        elif kind == "dir" or kind == "a symbolic link":
            students[item.name] = None if kind == "dir" else kind
        else:
            files.append(item.name)
    return students, files


def collect(submissions, lessons, workdir: Path, known: dict | None = None,
            limits: NotebookLimits | None = None, earlier: dict | None = None, checked=frozenset()) -> Roster:
    """Read ``submissions`` (folder or zip) into a Roster; a zip is extracted under ``workdir``. ``known``: the ids
    of earlier runs (``known_ids``), so that no later folder takes one; ``limits``: what one notebook may hold;
    ``earlier``: the LMS ids each student's lessons were handed in under in earlier runs (``term.lms_ids``);
    ``checked``: the sha256 of notebooks that passed the read check under these ``limits`` before (``term.checked``),
    which are not parsed again."""
    submissions = Path(submissions)
    help_text = layout_help(lessons)
    if not submissions.exists():
        raise LayoutError(f"{submissions} does not exist; " + help_text)
    if submissions.is_file():
        if not zipfile.is_zipfile(submissions):
            raise LayoutError(f"{submissions} is a file but not a zip; " + help_text)
        target = Path(workdir) / UNZIPPED
        shutil.rmtree(target, ignore_errors=True)
        skipped = {target.joinpath(*rel.parts): why for rel, why in safe_extract(submissions, target).items()}
        try:
            return _collect(target, lessons, known, limits, skipped, earlier or {}, checked, archive=True)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)  # a refused class leaves nothing behind
            raise
    return _collect(submissions, lessons, known, limits, {}, earlier or {}, checked, archive=False)


def _collect(submissions: Path, lessons, known, limits, skipped: dict, earlier: dict, checked=frozenset(), *,
             archive: bool) -> Roster:
    help_text = layout_help(lessons)
    root, notes = class_root(submissions, lessons, archive)
    roster = Roster(root=root, notes=notes)
    students, files = _top_level(root)
    download = lms_layouts.recognise({**{name: True for name, why in students.items() if why is None},
                                      **{name: False for name in files
                                         if not is_hidden(name) and is_plain_file(root / name)}},
                                     owner=None if archive else lambda entry: _owner(root / entry),
                                     ids={pid for given in earlier.values() for pid in given.values()})
    origins, lms_flags = {}, {}
    if download:
        students, roster.lms_ids, origins, lms_flags = _download_students(root, download, students, skipped,
                                                                          lessons, earlier)
        roster.lms = download.system
        roster.notes.append(f"read as {lms_layouts.TITLES[download.system]}'s download: {len(download.files)} "
                            f"entries of {len(download.students())} students")
        roster.notes.extend(download.notes)
        files = [f"{display(name)} ({why})" for name, why in sorted(download.ignored.items())]
    else:
        students = {name: why or _folder_files(root / name, skipped) for name, why in students.items()}
        files = [display(name) for name in files]
    if files:
        roster.notes.append(f"not graded: {len(files)} files or hidden folders at the top of the class folder ("
                            + ", ".join(files[:8]) + (", ..." if len(files) > 8 else "")
                            + ("" if download else "); each student's work must be in a folder of its own"))
    ids, id_flags = assign_ids(students, known)
    for extra in (look_alike_flags(ids), not_utf8_flags(ids)):
        for sid, flags in extra.items():
            id_flags.setdefault(sid, []).extend(flags)
    for name, found in students.items():
        sid = ids[name]
        roster.folders[sid], roster.names[sid] = display(name), name
        if name in roster.lms_ids:
            roster.lms_ids[sid] = roster.lms_ids.pop(name)
        if isinstance(found, str):  # a link or special file where the student's folder should be
            roster.entries[sid] = _linked_student(sid, root / name, lessons, found)
            continue
        roster.entries[sid], flags = _student_entries(sid, found, lessons, limits, origins.get(name), checked)
        roster.flags[sid] = id_flags.get(sid, []) + lms_flags.get(name, []) + flags
    for sid in roster.entries:
        roster.flags.setdefault(sid, id_flags.get(sid, []))
    if not any(e.status != "missing" for es in roster.entries.values() for e in es.values()):
        found = ", ".join(display(p.name) for p in list(root.iterdir())[:8]) or "nothing"
        hint = lms_layouts.nearest({name: (root / name).is_dir() for name in os.listdir(root) if not is_hidden(name)})
        raise LayoutError(f"no student folder with a notebook in {display(root)} (found: {found}); "
                          + (f"{hint}; " if hint else "") + help_text)
    return roster
