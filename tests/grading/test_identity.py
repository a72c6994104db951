"""A student is who the LMS says, by its id, never by a name: real downloads as Brightspace and nbgrader's
exchange name them, through ``python -m autograder.grade`` (what ``make grade`` runs), each class with an honest
student whose grade must not move.

(Moodle's participant who renames herself to another's full name, with marks and worksheets, is
``tests/grading/test_term.py``'s.)

1. Brightspace, lesson 01: a later file of another user of the same full name replaces nothing.
2. nbgrader's exchange, lesson 05, two runs: daemon and bin (system users stand for students, the exchange's folders
   are theirs) hand in; daemon's written answers are marked; then the user games writes
   ``daemon+05_exercises+2099-...`` with daemon's written answers copied and a broken function. It is graded apart
   (``games (as daemon)``), flagged, with no mark of daemon's; daemon keeps her submission, her marks and her grade.
3. Brightspace without user ids (every file carries the same second number), lesson 05, two runs: Jane Doe's
   written answers are marked; a later submission under her name with those answers copied and a function broken
   is graded as the latest, flagged, and gets none of her marks or comments; Ivan Petrov's grade does not move.
"""

from __future__ import annotations

import csv
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
from run_once import once

from autograder import course
from autograder.course import answers, notebooks
from autograder.grading.records.settings import COURSE_ID

pytestmark = [pytest.mark.grading, pytest.mark.slow]
WARMUP, EXERCISES = "01_warmup", "05_exercises"


def _grade(root: Path, out: Path, lesson: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(root), "--out", str(out), "--lessons",
                           lesson, "--workers", "2", "--timeout", "20", "--quiet"], cwd=course.ROOT,
                          env=notebooks.nbgrader_env(), capture_output=True, text=True, timeout=1200)
    with (out / "grades.csv").open(newline="", encoding="utf-8") as fh:
        rows = {r["folder"]: r for r in csv.DictReader(fh)}
    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr, "rows": rows}


# ------------------------------------------------------------------------------------------------ Brightspace
SPACE = {"151039-459402 - Jane Doe - Dec 3, 2026 1005 AM - 01_warmup.ipynb": answers.fill,  # the victim
         "151050-459409 - Jane Doe - Dec 3, 2026 1130 AM - 01_warmup.ipynb": None,  # later, another user
         "151041-459403 - Ivan Petrov - Dec 3, 2026 0905 AM - 01_warmup.ipynb": answers.fill}


def _brightspace_class(base: Path) -> dict:
    root = base / "brightspace"
    for name, fill in SPACE.items():
        notebooks.write_notebook(fill(WARMUP) if fill else answers.fill(WARMUP, complete=False), root / name)
    return _grade(root, base / "out", WARMUP)


def test_a_later_brightspace_file_of_another_user_of_the_same_name_replaces_nothing(tmp_path_factory):
    run = once(tmp_path_factory, "identity-brightspace", _brightspace_class)
    assert run["rc"] == 0, run["out"][-3000:]
    rows = run["rows"]
    assert set(rows) == {"Jane Doe_459402", "Jane Doe_459409", "Ivan Petrov"}
    victim, other, ivan = rows["Jane Doe_459402"], rows["Jane Doe_459409"], rows["Ivan Petrov"]
    assert victim[f"{WARMUP} score"] == victim[f"{WARMUP} max"] == ivan[f"{WARMUP} score"]
    assert float(other[f"{WARMUP} score"]) < float(victim[f"{WARMUP} score"])
    assert "2 Brightspace users share the name 'Jane Doe' (user ids 459402, 459409)" in victim["flags"]
    assert "2 Brightspace users share the name 'Jane Doe' (user ids 459402, 459409)" in other["flags"]
    assert ivan["flags"] == "" and ivan["lms id"] == "459403"


# ------------------------------------------------------------------------------------------------ the exchange
ALICE, BOB, EVE = "daemon", "bin", "games"
MANUAL = {"explain_reshape": 3.0, "explain_w_o": 2.0, "explain_scale": 2.0, "symptom_masked_attention": 1.0,
          "symptom_attention_layer": 1.0}
BROKEN = {"merge_heads": "def merge_heads(x):\n    return x\n"}


def _hand_in(inbound: Path, student: str, stamp: str, nb, owner: str) -> None:
    folder = inbound / f"{student}+{EXERCISES}+{stamp}+{owner}"
    notebooks.write_notebook(nb, folder / f"{EXERCISES}.ipynb")
    user = pwd.getpwnam(owner)
    for p in (folder, folder / f"{EXERCISES}.ipynb"):
        os.lchown(p, user.pw_uid, user.pw_gid)


def _marks(out: Path) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:
        return {s.student_id: {g.name: g.manual_score for g in gb.find_submission_notebook(
            EXERCISES, EXERCISES, s.student_id).grades if g.name in MANUAL}
            for s in gb.find_assignment(EXERCISES).submissions}


def _exchange_class(base: Path) -> dict:
    inbound, out = base / "inbound", base / "out"
    _hand_in(inbound, ALICE, "2026-11-02 10:00:00.000000 UTC", answers.fill(EXERCISES), ALICE)
    _hand_in(inbound, BOB, "2026-11-02 11:00:00.000000 UTC", answers.fill(EXERCISES), BOB)
    first = _grade(inbound, out, EXERCISES)
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:  # as formgrader saves marks
        for cell, points in MANUAL.items():
            grade = gb.find_grade(cell, EXERCISES, EXERCISES, ALICE)
            grade.manual_score, grade.needs_manual_grade = points, False
        gb.db.commit()
    marked = _marks(out)
    _hand_in(inbound, ALICE, "2099-01-01 00:00:00.000000 UTC", answers.fill(EXERCISES, BROKEN), EVE)
    spoofed = _grade(inbound, out, EXERCISES)
    return {"first": first, "marked": marked, "spoofed": spoofed, "after": _marks(out)}


@pytest.mark.skipif(os.geteuid() != 0, reason="folders owned by other users need root to make")
def test_an_exchange_folder_in_another_student_s_name_is_kept_apart_and_takes_no_mark(tmp_path_factory):
    runs = once(tmp_path_factory, "identity-exchange", _exchange_class)
    first, spoofed = runs["first"], runs["spoofed"]
    for run in (first, spoofed):
        assert run["rc"] == 0, run["out"][-3000:]
    spoof = f"{EVE} (as {ALICE})"  # apart from both: neither daemon's nor, in place of her own, games's
    assert set(spoofed["rows"]) == {ALICE, BOB, spoof}
    alice, bob, eve = (spoofed["rows"][s] for s in (ALICE, BOB, spoof))
    assert alice[f"{EXERCISES} status"] == "graded" and alice[f"{EXERCISES} score"] == alice[f"{EXERCISES} max"]
    assert bob[f"{EXERCISES} score"] == first["rows"][BOB][f"{EXERCISES} score"]  # the honest one, unmoved
    assert bob[f"{EXERCISES} status"] == first["rows"][BOB][f"{EXERCISES} status"] == "pending manual"
    assert runs["after"][ALICE] == runs["marked"][ALICE] == MANUAL  # her marks stay on her own submission
    assert runs["after"][eve["student"]] == dict.fromkeys(MANUAL)  # the copied answers carry no mark of hers
    assert eve[f"{EXERCISES} status"] == "pending manual"
    assert (f"the exchange folder '{ALICE}+{EXERCISES}+2099-01-01 00:00:00.000000 UTC+{EVE}' names the student "
            f"'{ALICE}' but belongs to the user '{EVE}': graded apart as '{spoof}', never as {ALICE}'s work nor in "
            f"place of {EVE}'s own") in eve["flags"]
    assert "in the future" in eve["flags"] and alice["flags"] == "" and bob["flags"] == first["rows"][BOB]["flags"]


# ------------------------------------------------------------------------------------------------ Brightspace, no id
def _space_file(root: Path, sub: int, name: str, when: str, nb) -> None:
    notebooks.write_notebook(nb, root / f"{sub}-7701 - {name} - {when} - {EXERCISES}.ipynb")


def _nameonly_class(base: Path) -> dict:
    """Every file carries the same second number, so the download gives no user id: a later submission under Jane
    Doe's name, her written answers copied and a function broken, replaces hers as the latest, flagged; her marks are
    not given to it."""
    root, out = base / "brightspace", base / "out"
    _space_file(root, 151039, "Jane Doe", "Dec 3, 2026 1005 AM", answers.fill(EXERCISES))
    _space_file(root, 151041, "Ivan Petrov", "Dec 3, 2026 0905 AM", answers.fill(EXERCISES))
    first = _grade(root, out, EXERCISES)
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:
        sid = next(s.student_id for s in gb.find_assignment(EXERCISES).submissions if s.student_id.startswith("jane"))
        for cell, points in MANUAL.items():
            grade = gb.find_grade(cell, EXERCISES, EXERCISES, sid)
            grade.manual_score, grade.needs_manual_grade = points, False
        gb.find_comment("explain_w_o", EXERCISES, EXERCISES, sid).manual_comment = "Exactly why W_O is needed."
        gb.db.commit()
    marked = _marks(out)
    _space_file(root, 151050, "Jane Doe", "Dec 4, 2026 1130 AM", answers.fill(EXERCISES, BROKEN))
    again = _grade(root, out, EXERCISES)
    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:
        comment = gb.find_comment("explain_w_o", EXERCISES, EXERCISES, sid).manual_comment
    pages = {p.parent.name: p.read_text(encoding="utf-8") for p in (out / "feedback").glob(f"*/{EXERCISES}.html")}
    return {"first": first, "marked": marked, "again": again, "after": _marks(out), "sid": sid, "comment": comment,
            "pages": pages, "earlier": sorted(p.name for p in (out / "handed-in" / sid / "earlier").glob("*.ipynb"))}


def test_where_brightspace_gives_no_user_id_a_later_submission_under_the_same_name_takes_no_mark(tmp_path_factory):
    runs = once(tmp_path_factory, "identity-brightspace-no-id", _nameonly_class)
    first, again, sid = runs["first"], runs["again"], runs["sid"]
    for run in (first, again):
        assert run["rc"] == 0, run["out"][-3000:]
    assert set(first["rows"]) == set(again["rows"]) == {"Jane Doe", "Ivan Petrov"}  # nobody split, nobody merged
    jane, ivan = again["rows"]["Jane Doe"], again["rows"]["Ivan Petrov"]
    assert runs["marked"][sid] == MANUAL
    assert runs["after"][sid] == dict.fromkeys(MANUAL) and runs["comment"] is None  # no mark, no comment moved
    assert jane[f"{EXERCISES} status"] == "pending manual"
    assert float(jane[f"{EXERCISES} score"]) < float(first["rows"]["Jane Doe"][f"{EXERCISES} score"])  # the broken one
    assert ("Brightspace's download names 'Jane Doe' in 2 submissions of 05_exercises.ipynb (151039, 151050) and "
            "gives no user id") in jane["flags"]
    assert "explain_reshape: someone other than the one whose hand-in you marked handed this notebook in (your " \
           "mark, 3 of 3, was for that hand-in and is not given to this one" in jane["flags"]
    assert "Exactly why W_O is needed." not in runs["pages"][sid]
    assert len(runs["earlier"]) == 1  # her marked hand-in is kept in OUT
    for col in ("status", "score", "pending"):
        assert ivan[f"{EXERCISES} {col}"] == first["rows"]["Ivan Petrov"][f"{EXERCISES} {col}"]
    assert ivan["flags"] == first["rows"]["Ivan Petrov"]["flags"]
