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

Student ids: a folder whose name is a valid nbgrader student id (``STUDENT_ID``: a letter or digit, then letters,
digits, ``_ . @ -``; at most 100) and does not end like an id this module makes (``GENERATED``) is graded under that
name. Any other name (``Petrov, Ivan``, ``o'brien``, a name that is not UTF-8) gets the safe id ``student_id`` makes
from it: its ASCII letters and digits in lower case joined by ``_`` (at most 40), a ``-``, and the first 8 hex
digits of the SHA-256 of the folder name's bytes, e.g. ``petrov_ivan-3f1c2a9b``. The same name always gets the same
id. Two names that would share an id (also in a later batch, and ids that differ only in case) are both kept: the
later one gets 16 hex digits, and both are flagged (``assign_ids``; ``OUT/students.json`` remembers every id's
name). The grading command writes the mapping to ``OUT/student_ids.csv`` and keeps the folder name in
``grades.csv``, shown with ``display`` (bytes that are not UTF-8 and unprintable characters escaped).

A zip is unpacked by ``safe_extract`` within ``ZipLimits`` (total size, number of files, depth of paths,
compression ratio, free disk space); a zip past one is refused whole and leaves nothing behind. A notebook is read
within ``NotebookLimits`` (file size before reading, then cells and stored output before nbformat parses it); one
past a limit is ``malformed``, and its note names the limit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import unicodedata
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath

import nbformat

from autograder.grading.intake import lms_layouts, look_alike

STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}")
GENERATED = re.compile(r"-[0-9a-f]{8}(?:[0-9a-f]{8})?$", re.IGNORECASE)  # how the ids student_id makes end
COURSE_FILES = ("nbgrader_config.py", "gradebook.db")
JUNK = {"__MACOSX", ".ipynb_checkpoints", ".DS_Store", ".git"}  # hidden entries not worth a note
REGISTRY = "students.json"
UNZIPPED = "unzipped"  # where a zip of the class is unpacked, in the output folder
MAX_NOTEBOOK_BYTES = 20 * 2**20  # the default of NotebookLimits.max_bytes (``--max-notebook-mb``)
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


class LayoutError(ValueError):
    """The submissions are not laid out in a way the grading command understands; the message says what is."""


@dataclass
class Entry:
    """One student's notebook for one lesson: where it is and what is wrong with it (``status``)."""

    student: str
    lesson: str
    path: Path | None = None
    status: str = "ok"  # ok | misnamed | missing | malformed | refused (| not handed in: ``term.roster``)
    note: str = ""
    lms_id: str = ""  # the student's id in the LMS download this notebook came from (Moodle: of that assignment)
    by: str = ""  # who the download says handed it in ('' when it cannot say): marks follow it (``marks.for_hand_in``)
    late: bool = False  # the LMS marks it late (Canvas's ``_LATE_``); a due date (``--due``) is applied in ``results``
    submitted: str = ""  # when it was handed in (ISO 8601), as the LMS, the exchange or nbgrader's timestamp.txt says
    flags: list = field(default_factory=list)  # about the hand-in itself (a timestamp.txt that was ignored)

    @property
    def gradable(self) -> bool:
        return self.status in ("ok", "misnamed")


@dataclass
class Roster:
    root: Path
    entries: dict = field(default_factory=dict)  # student id -> {lesson: Entry}
    folders: dict = field(default_factory=dict)  # student id -> the folder's name, as ``display`` shows it
    names: dict = field(default_factory=dict)  # student id -> the folder's name as the file system gives it
    flags: dict = field(default_factory=dict)  # student id -> flags about the student's folder itself
    notes: list = field(default_factory=list)  # what the report says about the class folder
    lms: str = ""  # the LMS whose download the class folder is (``lms_layouts.SYSTEMS``), or ''
    lms_ids: dict = field(default_factory=dict)  # student id -> the student's id(s) in that LMS, space-separated

    @property
    def students(self):
        return sorted(self.entries)

    def handed_in(self, lessons) -> list:
        """The ``lessons`` at least one student handed a file in for (a notebook, even a malformed one, or a link)."""
        return [lesson for lesson in lessons
                if any(entries[lesson].status != "missing" for entries in self.entries.values())]

    def keep_lessons(self, lessons) -> None:
        """Forget every other lesson."""
        self.entries = {sid: {lesson: entries[lesson] for lesson in lessons} for sid, entries in self.entries.items()}


@dataclass(frozen=True)
class ZipLimits:
    """What ``safe_extract`` unpacks at most. The ratio is checked once the total passes ``ratio_floor``."""

    max_bytes: int = 4 * 2**30
    max_files: int = 50_000
    max_depth: int = 16
    max_ratio: int = 100
    ratio_floor: int = 16 * 2**20


@dataclass(frozen=True)
class NotebookLimits:
    """What one notebook may hold, checked in the grader's process before it is parsed as a notebook: its file size
    (from ``fstat``, and never more than ``max_bytes`` read), then, on its JSON, the number of cells and the bytes of
    the outputs it stores (each cell's, and all cells'). Before the JSON is parsed at all, its objects and arrays are
    counted, and how deep they nest, in the bytes (``json_shape``): parsing builds a Python object for each, so 17 MB
    of empty objects would cost gigabytes in every step that reads the notebook. The course's own notebooks hold
    under 60 cells, under 300 objects and arrays (a few thousand with every output), nesting under 10 deep, and
    well under 1 MB; a notebook past a limit is ``malformed`` and the note names the limit (``over_limit``)."""

    max_bytes: int = MAX_NOTEBOOK_BYTES
    max_containers: int = 100_000  # JSON objects and arrays, counted in the bytes before any parse
    max_depth: int = 100  # how deep they nest
    max_cells: int = 2_000
    max_cell_output: int = 5 * 2**20
    max_output: int = 16 * 2**20


class OverLimit(OSError):
    """A notebook past one of ``NotebookLimits``; the message starts with the limit ("notebook over 20 MB: ...")."""


def _mb(n: int) -> str:
    """Bytes as MB (KB below 1 MB), rounded up to a tenth: a file just past a limit never reads as the limit."""
    unit, name = (2**20, "MB") if n >= 2**20 else (2**10, "KB")
    return f"{-(-n * 10 // unit) / 10:g} {name}"


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)', re.DOTALL)  # to its end, or the text's


def json_shape(data: bytes, max_containers: int) -> tuple:
    """(objects and arrays, deepest nesting) of JSON text, counted without parsing it: strings are cut out first
    (one regular expression that always matches from an opening quote to its closing one or the end, so every byte
    is read once whatever the text is), then brackets are counted. The depth is only measured when the count is
    within ``max_containers`` (it is then at most that)."""
    bare = _JSON_STRING.sub(b"", data)
    opened = bare.count(b"{") + bare.count(b"[")
    if not opened or opened > max_containers:
        return opened, 0
    brackets = re.sub(rb"[^\[\]{}]+", b"", bare)
    steps = [1 if ch in b"[{" else -1 for ch in brackets]
    depth = deepest = 0
    for step in steps:
        depth += step
        deepest = max(deepest, depth)
    return opened, deepest


def over_shape(data: bytes, name: str, limits: NotebookLimits) -> str:
    """'' when the JSON text of a notebook is within ``limits``' objects and depth, else the note that says which."""
    opened, depth = json_shape(data, limits.max_containers)
    if opened > limits.max_containers:
        return (f"notebook over {limits.max_containers:,} JSON objects and arrays: {name} holds {opened:,}, far more "
                "than any lesson needs (a cell's metadata or outputs filled by a program?); open the lesson's "
                "notebook again, copy your answers into it, save and submit that")
    if depth > limits.max_depth:
        return (f"notebook nested over {limits.max_depth} levels deep: {name} nests its JSON {depth:,} levels deep; "
                "open the lesson's notebook again, copy your answers into it, save and submit that")
    return ""


def over_limit(raw, name: str, limits: NotebookLimits) -> str:
    """'' when the parsed JSON of a notebook is within ``limits`` (cells, stored output), else the note that says
    which limit it is past. One pass over the cells, each output measured once: linear in the notebook's size."""
    cells = raw.get("cells") if isinstance(raw, dict) else None
    if not isinstance(cells, list):
        return ""  # not a notebook: nbformat says why
    if len(cells) > limits.max_cells:
        return (f"notebook over {limits.max_cells:,} cells: {name} has {len(cells):,}; submit the lesson's notebook "
                "with your answers in its own cells")
    total = 0
    for index, cell in enumerate(cells):
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        if not outputs:
            continue
        size = len(json.dumps(outputs))
        if size > limits.max_cell_output:
            return (f"stored output over {_mb(limits.max_cell_output)} in one cell: cell {index + 1} of {name} "
                    f"stores {_mb(size)} of output; clear the outputs (Edit > Clear Outputs of All Cells), save "
                    "and submit again")
        total += size
        if total > limits.max_output:
            return (f"stored output over {_mb(limits.max_output)}: {name} stores more than that in its outputs; "
                    "clear the outputs (Edit > Clear Outputs of All Cells), save and submit again")
    return ""


def read_notebook(path, limits: "NotebookLimits | None" = None):
    """The bytes of a notebook file and the notebook parsed from them, within ``limits``: the file size is checked
    before anything is read, cells and stored outputs before nbformat reads it. Raises ``OverLimit`` past a limit,
    ``OSError`` for a file that is not a regular file, and whatever parsing raises for one that is not a notebook."""
    limits = limits or NotebookLimits()
    data = read_regular(path, limits.max_bytes)
    problem = over_shape(data, display(Path(path).name), limits)
    if problem:
        raise OverLimit(problem)
    raw = json.loads(data.decode("utf-8"))
    problem = over_limit(raw, display(Path(path).name), limits)
    if problem:
        raise OverLimit(problem)
    return data, nbformat.reads(data.decode("utf-8"), as_version=4)


# ------------------------------------------------------------------------------------------------ names

def display(name) -> str:
    """A file name as text anyone can read: bytes that are not UTF-8 as ``\\xe9``, unprintable characters (line
    breaks, terminal escapes, direction marks) as ``\\n``, ``\\x1b``, ``\\u202e``."""
    text = os.fsencode(str(name)).decode("utf-8", "backslashreplace")
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


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


def _look_alike_flags(ids: dict) -> dict:
    """{id: flags} for folder names that look alike (the same ``look_alike.skeleton``: they differ only in case,
    accents, spaces, punctuation, invisible characters or Cyrillic and Greek letters drawn like Latin ones), or that
    look like an id this module makes."""
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


def _not_utf8_flags(ids: dict) -> dict:
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


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


# ------------------------------------------------------------------------------------------------ files

def _hidden(name: str) -> bool:
    return name.startswith((".", "__MACOSX"))


def _kind(mode: int) -> str:
    """'dir', 'file', or what a file that is neither is (never followed, never opened)."""
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    kinds = {stat.S_ISFIFO: "a fifo", stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device",
             stat.S_ISSOCK: "a socket"}
    return "a special file (" + next((k for test, k in kinds.items() if test(mode)), "unknown type") + ")"


def scan(folder: Path) -> tuple:
    """(the notebooks under ``folder``, {path: what it is} of the links and special files refused there), from
    ``lstat`` alone: no link is followed, no special file opened; hidden folders and checkpoints are skipped."""
    notebooks, refused, pending = [], {}, [folder]
    while pending:
        here = pending.pop()
        try:
            with os.scandir(here) as it:
                found = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            refused[Path(here)] = f"a folder that could not be read ({exc.strerror or type(exc).__name__})"
            continue
        for item in found:
            if _hidden(item.name):
                continue
            try:
                kind = _kind(item.stat(follow_symlinks=False).st_mode)
            except OSError:  # gone since it was listed
                continue
            path = Path(item.path)
            if kind == "dir":
                pending.append(path)
            elif kind != "file":
                refused[path] = kind
            elif item.name.endswith(".ipynb"):
                notebooks.append(path)
    return sorted(notebooks), refused


def read_regular(path, max_bytes: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of a regular file, read once; a link is not followed and a fifo or device not waited on. A file
    larger than ``max_bytes`` raises ``OverLimit`` from its size alone, and no more than ``max_bytes`` + 1 bytes are
    ever read (a file growing while it is read is caught too)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{display(Path(path).name)} is {_kind(info.st_mode)}, not a file")
        size = info.st_size
        data = b"" if size > max_bytes else fh.read(max_bytes + 1)
        if size > max_bytes or len(data) > max_bytes:
            raise OverLimit(f"notebook over {_mb(max_bytes)}: {display(Path(path).name)} is "
                            f"{_mb(max(size, len(data)))}{'' if size > max_bytes else ' or more'}; clear its outputs "
                            "(Edit > Clear Outputs of All Cells), save and submit again")
        return data


def _plain_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


# ------------------------------------------------------------------------------------------------ archives

def _refuse_zip(zip_path, what: str, limit: str = "") -> LayoutError:
    return LayoutError(
        f"{zip_path} was not unpacked: {what}{f' (the limit is {limit})' if limit else ''}. Nothing was extracted. "
        "If the archive is what you expect, unpack it yourself with a tool you trust (e.g. `unzip "
        f"{zip_path} -d class`), check what it holds, and pass the folder; otherwise download it again.")


def _plan(zf: zipfile.ZipFile, zip_path, dest: Path, limits: ZipLimits) -> tuple:
    """([(info, target)] to extract, {relative path: what it is} skipped), or LayoutError before anything is
    written."""
    infos = zf.infolist()
    total, packed = sum(i.file_size for i in infos), sum(i.compress_size for i in infos)
    if len(infos) > limits.max_files:
        raise _refuse_zip(zip_path, f"it holds {len(infos)} files", f"{limits.max_files} files")
    if total > limits.max_bytes:
        raise _refuse_zip(zip_path, f"it unpacks to {total / 2**20:.0f} MB", f"{limits.max_bytes / 2**20:.0f} MB")
    if total > limits.ratio_floor and total > limits.max_ratio * max(packed, 1):
        raise _refuse_zip(zip_path, f"it is compressed {total / max(packed, 1):.0f} times, as a zip bomb is",
                          f"{limits.max_ratio} times, beyond {limits.ratio_floor / 2**20:.0f} MB")
    free = shutil.disk_usage(dest.parent).free
    if total > free:
        raise _refuse_zip(zip_path, f"it unpacks to {total / 2**20:.0f} MB and {dest.parent} has "
                                    f"{free / 2**20:.0f} MB free")
    members, skipped, seen = [], {}, set()
    for info in infos:
        name = PurePosixPath(info.filename)
        if name.is_absolute() or info.filename.startswith("\\") or ".." in name.parts or "\x00" in info.filename:
            raise _refuse_zip(zip_path, f"it holds an unsafe path {info.filename!r}")
        if len(name.parts) > limits.max_depth:
            raise _refuse_zip(zip_path, f"it holds a path {len(name.parts)} folders deep",
                              f"{limits.max_depth} folders")
        if name.parts in seen:
            raise _refuse_zip(zip_path, f"it holds {info.filename!r} twice")
        seen.add(name.parts)
        mode = info.external_attr >> 16
        kind = _kind(mode if stat.S_IFMT(mode) else mode | stat.S_IFREG)  # no type bits: a plain file or folder
        if kind not in ("dir", "file"):
            skipped[name] = kind
        elif name.parts:
            members.append((info, dest.joinpath(*name.parts)))
    return members, skipped


def _copy(src, dst, budget: int) -> int:
    """Copy ``src`` to ``dst``; the bytes copied; past ``budget`` (a zip whose headers lie) raise OverflowError."""
    copied = 0
    while chunk := src.read(1 << 20):
        copied += len(chunk)
        if copied > budget:
            raise OverflowError
        dst.write(chunk)
    return copied


def safe_extract(zip_path: Path, dest: Path, limits: ZipLimits = ZipLimits()) -> dict:
    """Extract a zip into ``dest`` within ``limits``; returns {relative path: what it is} of the links and special
    files it did not extract. Absolute paths, ``..``, duplicates and any limit refuse the whole archive, and then
    ``dest`` is removed: a refused archive leaves nothing behind."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(zip_path) as zf:
            members, skipped = _plan(zf, zip_path, dest, limits)
            dest.mkdir()
            budget = min(limits.max_bytes, sum(i.file_size for i, _ in members))
            for info, target in members:
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "xb") as dst:
                    budget -= _copy(src, dst, budget)
            for rel in skipped:  # their folders are kept, so their students are flagged, not lost
                dest.joinpath(*rel.parent.parts).mkdir(parents=True, exist_ok=True)
    except LayoutError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except OverflowError:
        shutil.rmtree(dest, ignore_errors=True)
        raise _refuse_zip(zip_path, "it unpacks to more than its headers declare") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, RuntimeError, NotImplementedError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise _refuse_zip(zip_path, f"it could not be read ({type(exc).__name__}: {exc})") from None
    return skipped


# ------------------------------------------------------------------------------------------------ layout

def is_course_folder(path: Path) -> bool:
    """An nbgrader course folder: ``submitted/`` beside nbgrader's own files (``COURSE_FILES``), as an instructor's
    course has them. Files are the instructor's (students are folders), so no student's folder name decides it."""
    return _plain_dir(path / "submitted") and any(_plain_file(path / name) for name in COURSE_FILES)


def _is_student_folder(folder: Path, lessons) -> bool:
    return any(folder.glob("*.ipynb")) or any((folder / lesson).is_dir() for lesson in lessons)


def class_root(path: Path, lessons, archive: bool = False) -> tuple:
    """(the folder whose sub-folders are the students, notes): the folder named, its ``submitted/`` when it is a
    course folder, and inside a zip the one folder it encloses (not a student's folder)."""
    notes = []
    if archive and not is_course_folder(path):
        tops = [p for p in path.iterdir() if not _hidden(p.name)]
        if len(tops) == 1 and _plain_dir(tops[0]) and not _is_student_folder(tops[0], lessons):
            path = tops[0]
            notes.append(f"the zip holds one folder, '{display(path.name)}': its folders were taken as the students")
    if is_course_folder(path):
        path = path / "submitted"
    return path, notes


def _read_check(path: Path, limits: "NotebookLimits | None" = None) -> str:
    """'' when ``path`` is a notebook nbformat can read within ``limits``, else why not."""
    try:
        _, nb = read_notebook(path, limits)
    except OverLimit as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - any reading failure means the file is not a notebook
        return f"{display(path.name)} is not a readable notebook ({type(exc).__name__}: {display(str(exc)[:120])})"
    if not isinstance(nb.get("cells"), list):
        return f"{display(path.name)} has no list of cells"
    return ""


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
    special files in a student's folder (``scan``); ``refused``: what unpacking a zip skipped."""
    notebooks, inside = scan(folder)
    inside.update({p: why for p, why in refused.items() if folder in p.parents})
    found = {**{p: None for p in notebooks}, **inside}
    return {prefix / PurePosixPath(*p.relative_to(folder).parts): (p, why) for p, why in found.items()}


def _student_entries(sid: str, files: dict, lessons, limits=None, origins: dict | None = None) -> tuple:
    """({lesson: Entry}, flags about the rest of the student's files) of one student's ``files`` (``_folder_files``).
    ``origins``: {name relative to the student: the ``lms_layouts.File`` it came from}, for an LMS's download: its time,
    its late mark and the student's id there go with the lesson's Entry."""
    entries, claimed = {}, set()
    for lesson in lessons:
        if not any(rel.name.endswith(".ipynb") for rel in files):
            entries[lesson] = Entry(sid, lesson, None, "missing", "the student's folder holds no notebook")
            continue
        rel, status, note = _find(lesson, files, claimed)
        path = None
        if rel is not None:
            claimed.add(rel)
            path = files[rel][0]
            problem = "" if status == "refused" else _read_check(path, limits)
            if problem:
                status, note = "malformed", problem
        entries[lesson] = Entry(sid, lesson, None if status == "refused" else path, status, note)
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
    by_name = {}
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
    keys = {}
    for student, key in groups:
        keys.setdefault(student, []).append(key)
    names, used = {}, set()
    for (student, key), (_, files) in sorted(groups.items()):
        flags, shared = [], sorted(keys[student], key=lambda k: (len(k), k))
        if len(shared) > 1:
            flags.append(f"{len(shared)} {lms_layouts.TITLES[system]} {what}s share the name '{display(student)}' ({what} "
                         f"ids {', '.join(shared)}); graded apart by {what} id: check which is whom")
        handed = {lesson for lesson in lessons if _find(lesson, files, set())[0] is not None}
        before, own = earlier.get(student, {}), set(key.split())  # a student's several assignments: several ids
        others = sorted({pid for lesson, pid in before.items()
                         if pid and key and pid not in own and (system == "brightspace" or lesson in handed)})
        known = next((by_id[pid] for pid in sorted(own) if pid in by_id), None)
        if others and len(shared) == 1 and not known:
            flags.append(f"'{display(student)}' was graded as {what} {', '.join(others)} of {lms_layouts.TITLES[system]}; "
                         f"{what} {key} of the same name is graded apart by {what} id: check which is whom")
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
        if _hidden(item.name):
            if item.name not in JUNK:
                files.append(item.name)
            continue
        try:
            kind = _kind(item.stat(follow_symlinks=False).st_mode)
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
            limits: NotebookLimits | None = None, earlier: dict | None = None) -> Roster:
    """Read ``submissions`` (folder or zip) into a Roster; a zip is extracted under ``workdir``. ``known``: the ids
    of earlier runs (``known_ids``), so that no later folder takes one; ``limits``: what one notebook may hold;
    ``earlier``: the LMS ids each student's lessons were handed in under in earlier runs (``term.lms_ids``)."""
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
            return _collect(target, lessons, known, limits, skipped, earlier or {}, archive=True)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)  # a refused class leaves nothing behind
            raise
    return _collect(submissions, lessons, known, limits, {}, earlier or {}, archive=False)


def _collect(submissions: Path, lessons, known, limits, skipped: dict, earlier: dict, *, archive: bool) -> Roster:
    help_text = layout_help(lessons)
    root, notes = class_root(submissions, lessons, archive)
    roster = Roster(root=root, notes=notes)
    students, files = _top_level(root)
    download = lms_layouts.recognise({**{name: True for name, why in students.items() if why is None},
                              **{name: False for name in files if not _hidden(name) and _plain_file(root / name)}},
                             owner=None if archive else lambda entry: _owner(root / entry),
                             ids={pid for given in earlier.values() for pid in given.values()})
    origins, lms_flags = {}, {}
    if download:
        students, roster.lms_ids, origins, lms_flags = _download_students(root, download, students, skipped,
                                                                          lessons, earlier)
        roster.lms = download.system
        roster.notes.append(f"read as {lms_layouts.TITLES[download.system]}'s download: {len(download.files)} entries of "
                            f"{len(download.students())} students")
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
    for extra in (_look_alike_flags(ids), _not_utf8_flags(ids)):
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
        roster.entries[sid], flags = _student_entries(sid, found, lessons, limits, origins.get(name))
        roster.flags[sid] = id_flags.get(sid, []) + lms_flags.get(name, []) + flags
    for sid in roster.entries:
        roster.flags.setdefault(sid, id_flags.get(sid, []))
    if not any(e.status != "missing" for es in roster.entries.values() for e in es.values()):
        found = ", ".join(display(p.name) for p in list(root.iterdir())[:8]) or "nothing"
        hint = lms_layouts.nearest({name: (root / name).is_dir() for name in os.listdir(root) if not _hidden(name)})
        raise LayoutError(f"no student folder with a notebook in {display(root)} (found: {found}); "
                          + (f"{hint}; " if hint else "") + help_text)
    return roster


# ------------------------------------------------------------------------------------------------ integrity

def _fingerprint(path: Path):
    """sha256 of a regular file; what a link points to or what a special file is; None for a folder."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISDIR(mode):
            return None
        if stat.S_ISLNK(mode):
            return "link:" + display(os.readlink(path))
        if not stat.S_ISREG(mode):
            return "special:" + stat.filemode(mode)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, "rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror or type(exc).__name__}"


def tree_hashes(path: Path) -> dict:
    """sha256 of every file under ``path`` (or of ``path`` itself), to prove the originals were left untouched.
    Links are recorded, not followed; a file that vanishes or cannot be read is recorded as such, never raised; the
    walk is a loop, so no depth of folders ends it."""
    path = Path(path)
    if not path.is_dir():
        return {display(path.name): _fingerprint(path)}
    hashes, pending = {}, [path]
    while pending:
        here = pending.pop()
        try:
            names = os.listdir(here)
        except OSError as exc:
            hashes[display(here.relative_to(path)) + "/"] = f"unreadable: {exc.strerror or type(exc).__name__}"
            continue
        for name in names:
            fingerprint = _fingerprint(here / name)
            if fingerprint is None:
                pending.append(here / name)
            else:
                hashes[display((here / name).relative_to(path))] = fingerprint
    return hashes

