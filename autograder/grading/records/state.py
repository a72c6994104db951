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

import json
import os
from pathlib import Path

from autograder.grading.records.settings import Settings

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


def read(s: Settings, student: str, lesson: str):
    """The record of (student, lesson), or None if there is none (or it cannot be read)."""
    try:
        return json.loads(path(s, student, lesson).read_text())
    except (OSError, ValueError):
        return None


def write(s: Settings, student: str, lesson: str, record: dict) -> None:
    _write(path(s, student, lesson), record)


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
