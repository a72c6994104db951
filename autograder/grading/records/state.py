"""The record of each graded (student, lesson): nothing is lost.

Each (student, lesson) is recorded in ``DIR/state/<student>/<lesson>.json`` as soon as it is graded (the canary's in
``DIR/canary/``, ``canary_folder``): its submission's hash, the settings key, status, score, flags and the written
answers the instructor graded. Running the command again grades only what is new, changed or unfinished (a batch
killed halfway resumes; ``workspace.stage`` decides) and rebuilds the outputs from these records and the gradebook.

The instructor's marks of a (student, lesson) being graded again wait in ``DIR/carried-marks/<student>/<lesson>.json``
(``autograder/grading/records/marks.py``) until the regrade has put them back: written before a rebuild replaces the
gradebook, or before a resubmission is graded, and removed once its grading succeeded.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder.grading.records.outcome import GRADING_ERROR
from autograder.grading.records.settings import Settings


@dataclass
class Item:
    """One hidden test of a graded notebook: its points, and how it ended (``checks.verdict.RESULTS``; ``bug`` for a
    catalogued bug, ``failure`` for a failure no bug names: what it is, for the instructor; ``signature`` for an
    ``unnamed`` wrong result no bug explains: the verdict's salt-independent digest of the wrong numbers,
    ``checks.signature``). ``items.record`` makes it."""

    score: float
    max: float
    result: str
    bug: str | None = None
    failure: str | None = None
    signature: str | None = None


@dataclass
class Written:
    """One written answer of a graded notebook: its points, and whether the learner answered it."""

    max: float
    answered: bool


@dataclass
class Record:
    """What is kept of one graded (student, lesson): ``DIR/state/<student>/<lesson>.json``.

    Written first as a grading error (``worker.new_record``), then filled in as grading succeeds: the gradebook's
    score and status, the flags, the instructor's marks reopened or carried, and (``items.record``) each hidden
    test's ``Item``, each written answer's ``Written`` and whether anything was attempted. ``items`` and
    ``written`` stay None for a notebook whose grading never got that far."""

    student: str
    lesson: str
    hash: str
    key: str
    by: str = ""
    graded: bool = False
    status: str = GRADING_ERROR
    score: float | None = None
    max_score: float | None = None
    flags: list[str] = field(default_factory=list)
    seconds: float = 0.0
    reason: str | None = None
    answers: dict[str, Any] = field(default_factory=dict)  # each written answer's text (``marks.written_answers``)
    graded_answers: dict[str, Any] = field(default_factory=dict)  # the answers the instructor's marks were given to
    reopened: list[Any] = field(default_factory=list)  # marks reopened by a changed answer (``marks.carry``)
    previous: dict[str, Any] | None = None  # score, status and attempted of the record this one replaced
    items: dict[str, Item] | None = None
    written: dict[str, Written] | None = None
    attempted: bool | None = None
    work: dict[str, Any] | None = None  # the learner's own cells and their fingerprints (``similarity.evidence.kept``)
    feedback_of: str | None = None  # the gradebook's marks the feedback page was written from (``marks.fingerprint``)
    refreshed: bool = False
    costs: dict[str, Any] | None = None  # CPU seconds per phase of its grading (``pipeline.costs.Ledger.to_json``)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Record":
        """The record ``to_json`` wrote; keys an older grader wrote that a record no longer has are left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("items") is not None:
            values["items"] = {gid: Item(**item) for gid, item in values["items"].items()}
        if values.get("written") is not None:
            values["written"] = {gid: Written(**w) for gid, w in values["written"].items()}
        return cls(**values)

CANARY_PREFIX = "_canary-"  # the canary's student ids (``canary.py``): the model answers, graded before anyone


def canary_id(lesson: str) -> str:
    return CANARY_PREFIX + lesson


def is_canary(student: str) -> bool:
    return student.startswith(CANARY_PREFIX)


def canary_folder(out) -> Path:
    """Where the canary's records (and a failing canary's graded notebook) are kept: never among the students'."""
    return Path(out) / "canary"


def path(s: Settings, student: str, lesson: str) -> Path:
    folder = canary_folder(s.out) if is_canary(student) else Path(s.out) / "state"
    return folder / student / f"{lesson}.json"


def recorded(s: Settings) -> list:
    """(student, lesson) of every record in ``DIR/state``."""
    return sorted((p.parent.name, p.stem) for p in (Path(s.out) / "state").glob("*/*.json"))


def read(s: Settings, student: str, lesson: str) -> Record | None:
    """The record of (student, lesson), or None if there is none (or it cannot be read)."""
    try:
        data = json.loads(path(s, student, lesson).read_text())
        return Record.from_json({"student": student, "lesson": lesson, "hash": "", "key": "", **data})
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def write(s: Settings, record: Record) -> None:
    _write(path(s, record.student, record.lesson), record.to_json())


def _write(target: Path, record: dict) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, target)  # atomic: a killed run leaves either the old record or the new one


CARRIED = "carried-marks"


def carried_path(s: Settings, student: str, lesson: str) -> Path:
    return Path(s.out) / CARRIED / student / f"{lesson}.json"


def carried(s: Settings) -> list:
    """(student, lesson) of every submission whose marks wait to be put back."""
    return sorted((p.parent.name, p.stem) for p in (Path(s.out) / CARRIED).glob("*/*.json"))


def read_carried(s: Settings, student: str, lesson: str):
    """The marks waiting for a regrade of (student, lesson) (``marks.before_regrade``), or None."""
    try:
        return json.loads(carried_path(s, student, lesson).read_text())
    except FileNotFoundError:
        return None


def write_carried(s: Settings, student: str, lesson: str, kept: dict) -> None:
    _write(carried_path(s, student, lesson), kept)


def drop_carried(s: Settings, student: str, lesson: str) -> None:
    carried_path(s, student, lesson).unlink(missing_ok=True)
