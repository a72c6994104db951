"""What intake hands on: the ``Roster`` of a class (its students, each one's ``Entry`` per lesson: where the notebook
is and what is wrong with it, and what the report says about the class folder), and ``LayoutError`` when the
submissions cannot be read as a class at all."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


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
    read_hash: str = ""  # the sha256 of the bytes intake read and checked (``class_folder``), '' when none were

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
