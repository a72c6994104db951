"""A student is who the LMS says, by its id, never by a name: Moodle's participant id, Brightspace's user id, the
owner of an nbgrader exchange folder. Two students of one full name are both kept, apart and flagged; a folder
written into the exchange in another student's name is its owner's; a timestamp in the future never wins; a later
download sends each id to the student it was graded as. Intake only (no kernel): the grading pipeline is
``tests/grading/test_identity.py``."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from autograder.grading.intake import class_folder

LESSONS = ["01_warmup", "02_multi_head"]
NOTEBOOK = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def _class(root: Path, files) -> Path:
    for rel in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(NOTEBOOK)
    return root


def _who(roster) -> dict:
    """{student's folder: (LMS ids, {lesson: file graded}, flags)}"""
    return {roster.folders[sid]: (roster.lms_ids.get(sid, ""),
                                  {lesson: e.path.name for lesson, e in es.items() if e.path},
                                  roster.flags.get(sid, []))
            for sid, es in roster.entries.items()}


RENAMED = ["Jane Doe_111_assignsubmission_file_/01_warmup.ipynb",  # the victim
           "Jane Doe_333_assignsubmission_file_/01_warmup.ipynb",  # renamed herself to the victim's full name
           "Ivan Petrov_222_assignsubmission_file_/01_warmup.ipynb"]


def test_two_moodle_participants_of_one_full_name_are_two_students_both_flagged(tmp_path):
    got = _who(class_folder.collect(_class(tmp_path / "m", RENAMED), LESSONS, tmp_path / "out"))
    assert set(got) == {"Jane Doe_111", "Jane Doe_333", "Ivan Petrov"}
    for pid in ("111", "333"):
        ids, lessons, flags = got[f"Jane Doe_{pid}"]
        assert ids == pid and lessons == {"01_warmup": "01_warmup.ipynb"}
        assert flags == ["2 Moodle participants share the name 'Jane Doe' (participant ids 111, 333); graded apart "
                         "by participant id: check which is whom"]
    assert got["Ivan Petrov"] == ("222", {"01_warmup": "01_warmup.ipynb"}, [])


def test_one_student_s_moodle_assignments_in_one_folder_are_one_student_and_a_clash_keeps_each_apart(tmp_path):
    """Moodle gives each assignment its own participant ids: Jane's downloads of two assignments put in one folder
    (111 for lesson 01, 511 for lesson 02) are one student, not flagged. Once another 'Jane Doe' (333) hands in
    lesson 01 too, the name is two students': each id is graded apart and flagged."""
    both = ["Jane Doe_111_assignsubmission_file_/01_warmup.ipynb",
            "Jane Doe_511_assignsubmission_file_/02_multi_head.ipynb",
            "Ivan Petrov_222_assignsubmission_file_/01_warmup.ipynb"]
    got = _who(class_folder.collect(_class(tmp_path / "one", both), LESSONS, tmp_path / "out"))
    assert got["Jane Doe"] == ("111 511", {"01_warmup": "01_warmup.ipynb", "02_multi_head": "02_multi_head.ipynb"},
                               [])
    assert set(got) == {"Jane Doe", "Ivan Petrov"}
    clash = _who(class_folder.collect(_class(tmp_path / "two", both + RENAMED[1:2]), LESSONS, tmp_path / "out"))
    assert set(clash) == {"Jane Doe_111", "Jane Doe_333", "Jane Doe_511", "Ivan Petrov"}
    assert all("graded apart by participant id" in clash[f"Jane Doe_{pid}"][2][0] for pid in ("111", "333", "511"))


def test_a_later_moodle_download_sends_each_participant_to_the_student_it_was_graded_as(tmp_path):
    """The victim was graded as 'Jane Doe' (participant 111) before the impostor renamed herself: she stays 'Jane
    Doe'; the impostor gets a student of her own, the same in every later download of the assignment."""
    earlier = {"Jane Doe": {"01_warmup": "111"}, "Ivan Petrov": {"01_warmup": "222"}}
    got = _who(class_folder.collect(_class(tmp_path / "m", RENAMED), LESSONS, tmp_path / "out", earlier=earlier))
    assert {name: ids for name, (ids, _, _) in got.items()} == {"Jane Doe": "111", "Jane Doe_333": "333",
                                                                "Ivan Petrov": "222"}
    earlier["Jane Doe_333"] = {"01_warmup": "333"}
    again = _who(class_folder.collect(_class(tmp_path / "m2", RENAMED[1:2]), LESSONS, tmp_path / "out",
                                      earlier=earlier))
    assert list(again) == ["Jane Doe_333"]  # alone in a download, she is still not the victim


def test_a_moodle_participant_whose_name_was_graded_for_another_participant_is_kept_apart(tmp_path):
    """The same assignment (lesson 01) came in under participant 111 as 'Jane Doe'; now only participant 333 of
    that name hands lesson 01 in: kept apart and flagged. Another assignment (lesson 02, ids of its own) under the
    same name is the same student."""
    earlier = {"Jane Doe": {"01_warmup": "111"}}
    got = _who(class_folder.collect(_class(tmp_path / "m", RENAMED[1:2]), LESSONS, tmp_path / "out", earlier=earlier))
    assert got == {"Jane Doe_333": ("333", {"01_warmup": "01_warmup.ipynb"}, [
        "'Jane Doe' was graded as participant 111 of Moodle; participant 333 of the same name is graded apart by "
        "participant id: check which is whom"])}
    other = _who(class_folder.collect(
        _class(tmp_path / "m2", ["Jane Doe_555_assignsubmission_file_/02_multi_head.ipynb"]), LESSONS,
        tmp_path / "out", earlier=earlier))
    assert other == {"Jane Doe": ("555", {"02_multi_head": "02_multi_head.ipynb"}, [])}


def test_moodle_flat_files_of_one_full_name_never_replace_each_other(tmp_path):
    got = _who(class_folder.collect(_class(tmp_path / "m", [
        "Jane Doe_111_assignsubmission_file_01_warmup.ipynb", "Jane Doe_333_assignsubmission_file_01_warmup.ipynb"]),
        LESSONS, tmp_path / "out"))
    assert {name: lessons for name, (_, lessons, _) in got.items()} == {
        "Jane Doe_111": {"01_warmup": "Jane Doe_111_assignsubmission_file_01_warmup.ipynb"},
        "Jane Doe_333": {"01_warmup": "Jane Doe_333_assignsubmission_file_01_warmup.ipynb"}}


SPACE = ["151039-459402 - Jane Doe - Dec 3, 2026 1005 AM - 01_warmup.ipynb",  # the victim, user 459402
         "151050-459409 - Jane Doe - Dec 3, 2026 1130 AM - 01_warmup.ipynb",  # later, another user of that name
         "151041-459402 - Jane Doe - Dec 2, 2026 0905 AM - 01_warmup.ipynb"]  # the victim's earlier copy


def test_a_later_brightspace_file_of_another_user_of_the_same_name_replaces_nothing(tmp_path):
    roster = class_folder.collect(_class(tmp_path / "d", SPACE), LESSONS, tmp_path / "out")
    got = _who(roster)
    assert {name: (ids, lessons) for name, (ids, lessons, _) in got.items()} == {
        "Jane Doe_459402": ("459402", {"01_warmup": SPACE[0]}),  # her own latest copy, not the other user's
        "Jane Doe_459409": ("459409", {"01_warmup": SPACE[1]})}
    assert all("2 Brightspace users share the name 'Jane Doe' (user ids 459402, 459409)" in flags[0]
               for _, _, flags in got.values())
    assert any(SPACE[2] in note and "earlier copy" in note for note in roster.notes)
    # a later download: each user id goes to the student it was graded as, the name alone moves nothing
    earlier = {"Jane Doe_459402": {"01_warmup": "459402"}, "Jane Doe_459409": {"01_warmup": "459409"}}
    again = _who(class_folder.collect(_class(tmp_path / "d2", SPACE[1:2]), LESSONS, tmp_path / "out",
                                      earlier=earlier))
    assert list(again) == ["Jane Doe_459409"]


def _own(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for p in [path, *path.rglob("*")]:
        os.lchown(p, entry.pw_uid, entry.pw_gid)


# system users stand for students: the exchange's folders must be owned by users this machine knows
ALICE, BOB, EVE = "daemon", "bin", "games"
STAMP, FUTURE = "2026-11-02 10:00:00.000000 UTC", "2099-01-01 00:00:00.000000 UTC"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving folders to other users needs root")
def test_an_exchange_folder_in_another_student_s_name_is_kept_apart_from_both(tmp_path):
    """eve wrote two folders in others' names (one dated 2099, one just after her own honest hand-in): each is graded
    apart, flagged, replacing neither the named student's work nor eve's own."""
    later = "2026-11-03 10:00:00.000000 UTC"
    owners = {f"{ALICE}+01_warmup+{STAMP}+aa": ALICE, f"{BOB}+01_warmup+{STAMP}+bb": BOB,
              f"{EVE}+01_warmup+{STAMP}+ff": EVE, f"{ALICE}+01_warmup+{FUTURE}+ee": EVE,
              f"{BOB}+01_warmup+{later}+gg": EVE}
    root = _class(tmp_path / "inbound", [f"{folder}/01_warmup.ipynb" for folder in owners])
    for folder, user in owners.items():
        _own(root / folder, user)
    roster = class_folder.collect(root, LESSONS, tmp_path / "out")
    sid = {name: s for s, name in roster.folders.items()}
    graded = {name: roster.entries[s]["01_warmup"].path.parent.name[-2:] for name, s in sid.items()}
    assert graded == {ALICE: "aa", BOB: "bb", EVE: "ff", f"{EVE} (as {ALICE})": "ee", f"{EVE} (as {BOB})": "gg"}
    assert roster.flags[ALICE] == roster.flags[BOB] == roster.flags[EVE] == []
    said = (f"the exchange folder '{ALICE}+01_warmup+{FUTURE}+ee' names the student '{ALICE}' but belongs to the "
            f"user '{EVE}': graded apart as '{EVE} (as {ALICE})', never as {ALICE}'s work nor in place of {EVE}'s own")
    spoof = sid[f"{EVE} (as {ALICE})"]
    assert said in roster.flags[spoof] and said in roster.notes
    assert any("in the future" in flag for flag in roster.flags[spoof])
    assert roster.entries[spoof]["01_warmup"].submitted == ""  # kept without the time it claims
    assert roster.entries[sid[f"{EVE} (as {BOB})"]]["01_warmup"].by == f"user {EVE}"


def test_a_future_exchange_timestamp_never_wins_over_an_honest_earlier_one(tmp_path):
    """Owners tell nothing here (one user wrote every folder, as in a copy): the names decide, said once; the copy
    dated 2099 is flagged and the honest one is graded."""
    root = _class(tmp_path / "inbound", [f"alice+01_warmup+{STAMP}+aa/01_warmup.ipynb",
                                         f"alice+01_warmup+{FUTURE}+ee/01_warmup.ipynb",
                                         f"bob+01_warmup+{STAMP}+bb/01_warmup.ipynb"])
    roster = class_folder.collect(root, LESSONS, tmp_path / "out")
    assert roster.entries["alice"]["01_warmup"].path.parent.name.endswith("+aa")
    assert roster.entries["alice"]["01_warmup"].submitted == "2026-11-02T10:00:00+00:00"
    assert roster.flags["alice"] == [
        f"the exchange folder 'alice+01_warmup+{FUTURE}+ee' is dated 2099-01-01T00:00:00+00:00, in the future: kept "
        "without a submission time; an earlier copy with an honest time is graded before it"]
    assert roster.flags["bob"] == []
    assert sum("owners do not say who handed each in" in note for note in roster.notes) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="giving folders to other users needs root")
def test_exchange_folders_of_the_grading_user_are_taken_by_their_names_never_as_its_own(tmp_path):
    """An inbound/ where one student wrote her own folder, the instructor copied another student's folder in and
    submitted a test of their own (both the grading user's, here root's): the owners say nothing of those two, so
    each is the student its name says (never the grading user's); a folder a student wrote in another's name is
    still its owner's."""
    me = pwd.getpwuid(os.geteuid()).pw_name
    root = _class(tmp_path / "inbound", [f"{me}+01_warmup+{STAMP}+aa/01_warmup.ipynb",
                                         f"{ALICE}+01_warmup+{STAMP}+bb/01_warmup.ipynb",
                                         f"{BOB}+01_warmup+{STAMP}+cc/01_warmup.ipynb",
                                         f"{BOB}+02_multi_head+{STAMP}+dd/02_multi_head.ipynb"])
    _own(root / f"{ALICE}+01_warmup+{STAMP}+bb", ALICE)
    _own(root / f"{BOB}+02_multi_head+{STAMP}+dd", EVE)
    roster = class_folder.collect(root, LESSONS, tmp_path / "out")
    assert roster.entries[ALICE]["01_warmup"].path.parent.name.endswith("+bb")
    assert roster.entries[BOB]["01_warmup"].path.parent.name.endswith("+cc")
    assert roster.entries[me]["01_warmup"].path.parent.name.endswith("+aa")
    spoof = next(s for s, name in roster.folders.items() if name == f"{EVE} (as {BOB})")  # eve wrote it in bob's name
    assert roster.entries[spoof]["02_multi_head"].path.parent.name.endswith("+dd")
    assert roster.entries[BOB]["02_multi_head"].status == "missing"
    assert sum("2 of 4 exchange folders belong to the grading user or root" in note for note in roster.notes) == 1


SAME_SECOND = ["151039-4411 - Jane Doe - Dec 3, 2026 1005 AM - 01_warmup.ipynb",
               "151050-4411 - Jane Doe - Dec 3, 2026 1130 AM - 01_warmup.ipynb",
               "151060-4411 - Ivan Petrov - Dec 3, 2026 1140 AM - 01_warmup.ipynb"]


def test_a_brightspace_download_whose_second_number_is_everyone_s_gives_no_user_id(tmp_path):
    """Every file carries the same second number (the assignment's or the course's, not a user's): the full name is
    the student, nobody is split, and a name under two submissions of one file is flagged, its latest graded."""
    got = _who(class_folder.collect(_class(tmp_path / "d", SAME_SECOND), LESSONS, tmp_path / "out"))
    assert {name: (ids, lessons) for name, (ids, lessons, _) in got.items()} == {
        "Jane Doe": ("", {"01_warmup": SAME_SECOND[1]}), "Ivan Petrov": ("", {"01_warmup": SAME_SECOND[2]})}
    assert got["Jane Doe"][2] == [
        "Brightspace's download names 'Jane Doe' in 2 submissions of 01_warmup.ipynb (151039, 151050) and gives no "
        "user id (every file carries the same second number): the latest is graded; check in Brightspace that they "
        "are one user"]
    assert got["Ivan Petrov"][2] == []


def test_one_student_s_brightspace_download_gives_no_user_id_unless_an_earlier_one_knew_it(tmp_path):
    """In one student's files nothing tells whether the second number is a user's: the name decides, unless the
    term graded a user under that number (then it is the same student, as above)."""
    alone = _who(class_folder.collect(_class(tmp_path / "d", SAME_SECOND[:1]), LESSONS, tmp_path / "out"))
    assert {name: ids for name, (ids, _, _) in alone.items()} == {"Jane Doe": ""}
    known = _who(class_folder.collect(_class(tmp_path / "d2", SAME_SECOND[:1]), LESSONS, tmp_path / "out",
                                      earlier={"Jane Doe": {"01_warmup": "4411"}}))
    assert {name: ids for name, (ids, _, _) in known.items()} == {"Jane Doe": "4411"}


def test_brightspace_folders_without_user_ids_flag_a_name_with_two_submissions_and_grade_the_latest(tmp_path):
    got = _who(class_folder.collect(_class(tmp_path / "d", [
        "151039-4411 - Jane Doe - Dec 3, 2026 1005 AM/01_warmup.ipynb",
        "151050-4411 - Jane Doe - Dec 3, 2026 1130 AM/01_warmup.ipynb",
        "151060-4411 - Ivan Petrov - Dec 3, 2026 1140 AM/01_warmup.ipynb"]), LESSONS, tmp_path / "out"))
    roster_jane = got["Jane Doe"]
    assert roster_jane[2] == ["Brightspace's download names 'Jane Doe' in 2 submissions of this work (151039, 151050) "
                              "and gives no user id (every file carries the same second number): the latest is "
                              "graded; check in Brightspace that they are one user"]
    assert got["Ivan Petrov"][2] == []


def test_a_name_graded_under_a_brightspace_user_id_is_not_split_by_a_download_that_gives_none(tmp_path):
    got = _who(class_folder.collect(_class(tmp_path / "d", SAME_SECOND), LESSONS, tmp_path / "out",
                                    earlier={"Jane Doe": {"01_warmup": "459402"}}))
    assert set(got) == {"Jane Doe", "Ivan Petrov"}
