"""Find each student's notebook for each lesson in what an instructor hands the grading command.

Accepted layouts (``SUBMISSIONS`` is a folder or a ``.zip`` of one):

1. a folder of per-student folders, each holding the lesson notebooks flat::

       SUBMISSIONS/alice/01_warmup.ipynb
2. the same with one folder per lesson (nbgrader's own ``submitted/`` layout)::

       SUBMISSIONS/alice/01_warmup/01_warmup.ipynb
3. what ``nbgrader collect`` gathered from the exchange: a course folder holding ``submitted/``, or that
   ``submitted/`` folder itself (``SUBMISSIONS/submitted/alice/01_warmup/01_warmup.ipynb``, ``timestamp.txt``
   files are fine);
4. a zip of any of these, with or without one enclosing folder.

A notebook with another name (``01_warmup (1).ipynb``, ``01-Warmup.ipynb``, or the only notebook in
``alice/01_warmup/``) is graded and flagged ``misnamed``; a lesson with no notebook is ``missing``; a file that is
not a readable notebook is ``malformed``. Each of these scores 0 only for that lesson of that student; a student
folder that holds no notebook at all is every lesson ``missing``.

Student ids: a folder whose name is a valid nbgrader student id (``STUDENT_ID``: a letter or digit, then letters,
digits, ``_ . @ -``; at most 100) is graded under that name. Any other name (``Petrov, Ivan``, ``o'brien``) gets the
safe id ``student_id`` makes from it: its ASCII letters and digits in lower case joined by ``_`` (at most 40), a
``-``, and the first 8 hex digits of the SHA-256 of the folder name (UTF-8), e.g. ``petrov_ivan-3f1c2a9b``. The same
name always gets the same id; the grading command writes the mapping to ``OUT/student_ids.csv`` and keeps the
folder name in ``grades.csv``.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import unicodedata
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$")
LAYOUT_HELP = """expected one of:
  SUBMISSIONS/<student>/<lesson>.ipynb                    (a folder of per-student folders)
  SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb           (one folder per lesson, nbgrader's layout)
  SUBMISSIONS/submitted/<student>/<lesson>/<lesson>.ipynb (a course folder after `nbgrader collect`)
  a .zip of any of these
with lessons named like {lessons}"""


class LayoutError(ValueError):
    """The submissions are not laid out in a way the grading command understands; the message says what is."""


@dataclass
class Entry:
    """One student's notebook for one lesson: where it is and what is wrong with it (``status``)."""

    student: str
    lesson: str
    path: Path | None = None
    status: str = "ok"  # ok | misnamed | missing | malformed
    note: str = ""

    @property
    def gradable(self) -> bool:
        return self.status in ("ok", "misnamed")


@dataclass
class Roster:
    root: Path
    entries: dict = field(default_factory=dict)  # student id -> {lesson: Entry}
    folders: dict = field(default_factory=dict)  # student id -> the folder's name

    @property
    def students(self):
        return sorted(self.entries)


def student_id(folder_name: str) -> str:
    """The nbgrader student id of a student folder (see the module's docstring for the rule)."""
    if STUDENT_ID.match(folder_name):
        return folder_name
    ascii_name = unicodedata.normalize("NFKD", folder_name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "_", ascii_name.lower()).strip("_")[:40].strip("_") or "student"
    return f"{slug}-{hashlib.sha256(folder_name.encode('utf-8')).hexdigest()[:8]}"


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _notebooks(folder: Path):
    return sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _subdirs(folder: Path):
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "__MACOSX")))


def _is_student_folder(folder: Path, lessons) -> bool:
    return any(folder.glob("*.ipynb")) or any((folder / lesson).is_dir() for lesson in lessons)


def safe_extract(zip_path: Path, dest: Path) -> Path:
    """Extract a zip into ``dest`` refusing absolute paths, ``..`` and links (nothing lands outside ``dest``)."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            parts = Path(info.filename).parts
            if info.filename.startswith(("/", "\\")) or ".." in parts or ":" in info.filename:
                raise LayoutError(f"{zip_path} holds an unsafe path {info.filename!r}; refusing to extract it")
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise LayoutError(f"{zip_path} holds a symbolic link {info.filename!r}; refusing to extract it")
        zf.extractall(dest)
    return dest


def class_root(path: Path, lessons) -> Path:
    """The folder whose sub-folders are the students."""
    if (path / "submitted").is_dir():
        path = path / "submitted"
    while not any(path.glob("*.ipynb")):
        subs = _subdirs(path)
        if len(subs) != 1 or _is_student_folder(subs[0], lessons):
            break
        path = subs[0]
        if (path / "submitted").is_dir():
            path = path / "submitted"
    return path


def _read_check(path: Path) -> str:
    """'' when ``path`` is a notebook nbformat can read, else why not."""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # noqa: BLE001 - any reading failure means the file is not a notebook
        return f"{path.name} is not a readable notebook ({type(exc).__name__}: {str(exc)[:120]})"
    if not isinstance(nb.get("cells"), list):
        return f"{path.name} has no list of cells"
    return ""


def _find(student_dir: Path, lesson: str, claimed: set):
    exact = [student_dir / f"{lesson}.ipynb", student_dir / lesson / f"{lesson}.ipynb"]
    for path in exact:
        if path.is_file():
            return path, "ok", ""
    number = lesson.split("_", 1)[0]
    candidates = [p for p in _notebooks(student_dir) if p not in claimed and (
        p.parent.name == lesson or _norm(p.stem).startswith(_norm(lesson)) or _norm(p.stem).startswith(number + "_")
        or _norm(p.stem) == number)]
    if len(candidates) == 1:
        rel = candidates[0].relative_to(student_dir)
        return candidates[0], "misnamed", f"found {rel} instead of {lesson}.ipynb; graded it"
    if len(candidates) > 1:
        names = ", ".join(str(p.relative_to(student_dir)) for p in candidates)
        return None, "missing", f"several notebooks could be {lesson} ({names}); none graded"
    return None, "missing", f"no {lesson}.ipynb"


def collect(submissions, lessons, workdir: Path) -> Roster:
    """Read ``submissions`` (folder or zip) into a Roster; a zip is extracted under ``workdir``."""
    submissions = Path(submissions)
    if not submissions.exists():
        raise LayoutError(f"{submissions} does not exist; " + LAYOUT_HELP.format(lessons=", ".join(lessons)))
    if submissions.is_file():
        if not zipfile.is_zipfile(submissions):
            raise LayoutError(f"{submissions} is a file but not a zip; "
                              + LAYOUT_HELP.format(lessons=", ".join(lessons)))
        target = workdir / "unzipped"
        shutil.rmtree(target, ignore_errors=True)
        submissions = safe_extract(submissions, target)
    root = class_root(submissions, lessons)
    roster = Roster(root=root)
    for student_dir in _subdirs(root):
        sid = student_id(student_dir.name)
        if sid in roster.folders:
            raise LayoutError(f"the student folders {roster.folders[sid]!r} and {student_dir.name!r} both get the "
                              f"id {sid!r}; rename one of them")
        roster.folders[sid] = student_dir.name
        entries, claimed = {}, set()
        empty = not _notebooks(student_dir)
        for lesson in lessons:
            if empty:
                entries[lesson] = Entry(sid, lesson, None, "missing", "the student's folder holds no notebook")
                continue
            path, status, note = _find(student_dir, lesson, claimed)
            if path is not None:
                claimed.add(path)
                problem = _read_check(path)
                if problem:
                    status, note = "malformed", problem
            entries[lesson] = Entry(sid, lesson, path, status, note)
        roster.entries[sid] = entries
    if not any(_notebooks(d) for d in _subdirs(root)):
        found = ", ".join(p.name for p in list(root.iterdir())[:8]) or "nothing"
        raise LayoutError(f"no student folder with a notebook in {root} (found: {found}); "
                          + LAYOUT_HELP.format(lessons=", ".join(lessons)))
    return roster


def tree_hashes(path: Path) -> dict:
    """sha256 of every file under ``path`` (or of ``path`` itself), to prove the originals were left untouched."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() or p.is_symlink())
    return {str(p.relative_to(path) if p != path else p.name): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "link:" + str(p.readlink()) for p in files}


def file_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
