"""Intake's pure parts without a kernel: student ids from any name, the class folder, links and special files,
zip limits, the originals' hashes, and the one CSV helper every CSV writer uses."""

from __future__ import annotations

import csv
import io
import os
import threading
import time
import zipfile
from pathlib import Path

import pytest
from name_collisions import colliding_pair

from autograder import course
from autograder.grading.intake import (archives, class_folder, class_roster, file_access, integrity, size_limits,
                                       student_ids)
from autograder.grading.reports import csv_cells

LESSON = "01_warmup"
NOTEBOOK = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def _write(path: Path, text: str = NOTEBOOK) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ---------------------------------------------------------------- CSV cells

@pytest.mark.parametrize("text", ['=HYPERLINK("http://evil.example","x")', "+1+2", "-2+3", "@SUM(A1)", "\tx", "\rx",
                                  "-", "=1"])
def test_a_text_cell_that_a_spreadsheet_would_run_is_written_as_text(text):
    fh = io.StringIO()
    csv_cells.writer(fh).writerow([text, "alice"])
    cell, plain = next(csv.reader(io.StringIO(fh.getvalue())))
    assert cell == "'" + text and plain == "alice"


@pytest.mark.parametrize("number", ["-2", "7.5", "-0.25", "1e-05", "+3", "0", ""])
def test_numbers_stay_numbers(number):
    fh = io.StringIO()
    csv_cells.writer(fh).writerow([number, -1.5, 3])
    assert next(csv.reader(io.StringIO(fh.getvalue()))) == [number, "-1.5", "3"]


def test_every_csv_the_grading_command_writes_goes_through_the_one_helper():
    writers = {path.relative_to(course.ROOT).as_posix() for path in (course.ROOT / "autograder").rglob("*.py")
               if "csv.writer(" in path.read_text() or "csv.DictWriter(" in path.read_text()}
    assert writers == {"autograder/grading/reports/csv_cells.py"}
    users = {path.name for path in (course.ROOT / "autograder" / "grading").rglob("*.py")
             if "csv_cells.writer(" in path.read_text() or "csv_cells.rewrite(" in path.read_text()}
    assert users == {"report.py", "insights.py", "lms_export.py", "similarity_page.py"}  # grades.csv,
    # student_ids.csv, the export; misconceptions.csv; the LMS import files; similarity.csv


# ---------------------------------------------------------------- names

def test_a_name_that_is_not_utf8_gets_a_valid_id_and_a_readable_display():
    name = os.fsdecode(b"caf\xe9 \xff")
    sid = student_ids.student_id(name)
    assert student_ids.STUDENT_ID.fullmatch(sid) and sid == student_ids.student_id(name)
    assert sid != student_ids.student_id(os.fsdecode(b"caf\xe9 \xfe"))
    assert file_access.display(name) == "caf\\xe9 \\xff"
    file_access.display(name).encode("utf-8")  # can be written anywhere


def test_unprintable_characters_are_shown_escaped_and_never_kept_in_an_id():
    for name in ("alice\n", "ali\x1bce", "\u202eecila", "alice\r"):
        sid = student_ids.student_id(name)
        assert sid != name and student_ids.STUDENT_ID.fullmatch(sid) and sid.isprintable()
        assert file_access.display(name).isprintable()
    assert file_access.display("alice\n") == "alice\\n" and file_access.display("\u202eecila") == "\\u202eecila"


def test_a_name_that_looks_like_a_generated_id_is_never_taken_as_it_is():
    generated = student_ids.student_id("Petrov, Ivan")
    for look_alike in (generated, generated.upper(), student_ids.student_id("Petrov, Ivan", 16)):
        assert student_ids.student_id(look_alike) not in (generated, look_alike)
    assert student_ids.student_id("anne-marie") == "anne-marie"  # an ordinary name with a hyphen stays as it is


@pytest.mark.parametrize("name", ["_canary-01_warmup", "CON", "nul", "a" * 255, "-rf", "..."])
def test_reserved_and_odd_names_get_ids_of_their_own(name):
    sid = student_ids.student_id(name)
    assert student_ids.STUDENT_ID.fullmatch(sid) and not sid.startswith("_")  # never a canary's id
    assert (sid == name) == (name in ("CON", "nul"))  # valid ids as they are; the rest hashed


def test_two_names_with_one_id_are_both_kept_and_flagged():
    a, b = colliding_pair()
    assert a != b and student_ids.student_id(a) == student_ids.student_id(b)  # a real 32-bit collision
    ids, flags = student_ids.assign_ids([a, b, "alice"])
    assert len(set(ids.values())) == 3 and ids["alice"] == "alice"
    assert all(student_ids.STUDENT_ID.fullmatch(sid) for sid in ids.values())
    assert flags[ids[a]] and flags[ids[b]] and "alice" not in flags
    later = [sid for sid in ids.values() if len(sid) > len(student_ids.student_id(a))]
    assert len(later) == 1 and "both kept" in flags[later[0]][0]


def test_a_later_batch_never_takes_an_id_an_earlier_one_gave():
    a, b = colliding_pair()
    first, _ = student_ids.assign_ids([a])
    second, flags = student_ids.assign_ids([b], known={sid: name for name, sid in first.items()})
    assert second[b] != first[a] and flags[second[b]]
    again, flags = student_ids.assign_ids([a], known={sid: name for name, sid in first.items()})
    assert again == first and not flags  # the same name keeps its id


def test_ids_that_differ_only_in_case_are_told_apart():
    ids, flags = student_ids.assign_ids(["alice", "Alice"])
    assert ids["alice"].casefold() != ids["Alice"].casefold()
    assert flags[ids["alice"]] and flags[ids["Alice"]]


@pytest.mark.parametrize("name, look_alike", [
    ("jose", "josé"), ("José", "jose\u0301"), ("alice", "\u0430lice"), ("Alice", "\u0410lice"),
    ("Nikos", "\u039dikos"), ("alice", "alice\u200b"), ("alice", "ａｌｉｃｅ"), ("Petrov Ivan", "petrov_ivan"),
    ("josé", os.fsdecode(b"jos\xe9")),  # the same name written in Latin-1
])
def test_look_alike_names_are_both_kept_and_flagged(tmp_path, name, look_alike):
    assert name != look_alike
    root = tmp_path / "class"
    for folder in (name, look_alike, "bob"):
        _student(root, folder)
    roster = class_folder.collect(root, [LESSON], tmp_path / "work")
    ids = {folder: sid for sid, folder in roster.names.items()}
    assert len(set(ids.values())) == 3 and set(roster.entries) == set(ids.values())  # both kept, apart
    for one, other in ((name, look_alike), (look_alike, name)):
        assert any(f"looks like '{file_access.display(other)}'" in f for f in roster.flags[ids[one]]), roster.flags
    assert roster.flags[ids["bob"]] == []


@pytest.mark.parametrize("name, other", [("alice", "alicia"), ("王伟", "李娜"), ("Nikos", "Nikolaos"),
                                         ("\u0440aul", "paula")])
def test_names_that_do_not_look_alike_are_not_flagged(name, other):
    ids, _ = student_ids.assign_ids([name, other])
    assert student_ids.look_alike_flags(ids) == {}


def test_the_registry_round_trips_any_name(tmp_path):
    name = os.fsdecode(b"\xff\xfe=x\n")
    roster = class_roster.Roster(root=tmp_path, names={student_ids.student_id(name): name})
    student_ids.remember(tmp_path, roster)
    assert student_ids.known_ids(tmp_path) == roster.names
    (tmp_path / student_ids.REGISTRY).write_text("{not json")
    with pytest.raises(class_roster.LayoutError, match="restore it from a backup"):
        student_ids.known_ids(tmp_path)


# ---------------------------------------------------------------- the class folder

def _student(root: Path, name: str, rel: str = f"{LESSON}.ipynb") -> None:
    _write(root / name / rel)


@pytest.mark.parametrize("name", ["submitted", "autograded", "release", "source", "feedback"])
def test_a_student_folder_named_like_a_course_folder_is_a_student(tmp_path, name):
    root = tmp_path / "class"
    _student(root, "alice")
    _student(root, "bob")
    _student(root, name, f"alice/{LESSON}/{LESSON}.ipynb")
    roster = class_folder.collect(root, [LESSON], tmp_path / "work")
    assert roster.root == root and set(roster.entries) == {"alice", "bob", name}
    assert roster.entries["alice"][LESSON].path == root / "alice" / f"{LESSON}.ipynb"


@pytest.mark.parametrize("beside", ["source", "release"])
def test_students_named_like_a_course_s_folders_are_students(tmp_path, beside):
    root = tmp_path / "class"
    _student(root, "submitted", f"alice/{LESSON}/{LESSON}.ipynb")  # would steer the grading to "alice"
    _student(root, beside)
    roster = class_folder.collect(root, [LESSON], tmp_path / "work")
    assert roster.root == root and set(roster.entries) == {"submitted", beside}


@pytest.mark.parametrize("own_file", class_folder.COURSE_FILES)
def test_a_course_folder_is_told_by_nbgraders_own_files(tmp_path, own_file):
    course_dir = tmp_path / "course"
    _student(course_dir / "submitted", "alice", f"{LESSON}/{LESSON}.ipynb")
    (course_dir / "source").mkdir()
    (course_dir / "release").mkdir()
    assert class_folder.class_root(course_dir, [LESSON])[0] == course_dir  # folder names alone: a class folder
    _write(course_dir / own_file, "")  # a file no student folder can be
    assert class_folder.class_root(course_dir, [LESSON])[0] == course_dir / "submitted"
    roster = class_folder.collect(course_dir, [LESSON], tmp_path / "work")
    assert set(roster.entries) == {"alice"}


def test_only_a_zips_enclosing_folder_is_stepped_into(tmp_path):
    folder = tmp_path / "late"
    _student(folder, "eve", f"alice/{LESSON}.ipynb")  # one student folder holding another's name
    assert class_folder.class_root(folder, [LESSON])[0] == folder


# ---------------------------------------------------------------- links and special files

def test_links_and_fifos_are_refused_never_followed_or_opened(tmp_path):
    root = tmp_path / "class"
    _student(root, "alice")
    (root / "mallory").mkdir()
    os.symlink("../alice/01_warmup.ipynb", root / "mallory" / f"{LESSON}.ipynb")
    os.symlink(tmp_path / "elsewhere", root / "mallory" / "data")
    _write(tmp_path / "elsewhere" / "02_multihead.ipynb")
    (root / "oscar").mkdir()
    os.mkfifo(root / "oscar" / f"{LESSON}.ipynb")
    os.symlink(root / "alice", root / "trudy")
    roster = class_folder.collect(root, [LESSON, "02_multihead"], tmp_path / "work")  # a fifo opened would hang here
    entry = roster.entries["mallory"][LESSON]
    assert entry.status == "refused" and entry.path is None and "symbolic link" in entry.note
    assert roster.entries["mallory"]["02_multihead"].status == "missing"  # the linked folder was not entered
    assert any("data is a symbolic link" in f for f in roster.flags["mallory"])
    assert roster.entries["oscar"][LESSON].status == "refused" and "fifo" in roster.entries["oscar"][LESSON].note
    assert {e.status for e in roster.entries["trudy"].values()} == {"refused"}
    assert roster.entries["alice"][LESSON].status == "ok"


def test_reading_a_fifo_or_a_link_fails_at_once(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    os.symlink(_write(tmp_path / "real.ipynb"), tmp_path / "link.ipynb")
    started = time.monotonic()
    for path in (tmp_path / "fifo", tmp_path / "link.ipynb"):
        with pytest.raises(OSError):
            file_access.read_regular(path)
    assert time.monotonic() - started < 1


def test_the_originals_hashes_record_links_and_survive_a_changing_tree(tmp_path):
    root = tmp_path / "class"
    _student(root, "alice")
    target = _write(tmp_path / "target", "one")
    os.symlink(target, root / "alice" / "link")
    os.mkfifo(root / "alice" / "fifo")
    before = integrity.tree_hashes(root)
    assert before["alice/link"] == f"link:{target}" and before["alice/fifo"].startswith("special:p")
    target.write_text("two")  # a link's target changing changes nothing: it is never read
    assert integrity.tree_hashes(root) == before
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            for i in range(50):
                _write(root / "alice" / f"tmp{i}")
            for i in range(50):
                (root / "alice" / f"tmp{i}").unlink(missing_ok=True)
    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for _ in range(20):
            integrity.tree_hashes(root)  # files vanishing while they are read never raise
    finally:
        stop.set()
        thread.join()


def test_no_depth_of_folders_ends_intake_or_the_hashes(tmp_path):
    root = tmp_path / "class"
    _student(root, "alice")
    levels = [root / "eve"]
    for _ in range(1100):  # deeper than Python's recursion limit (made one level at a time: mkdir -p recurses)
        levels.append(levels[-1] / "d")
    try:
        for level in levels:
            level.mkdir()
        (levels[-1] / f"{LESSON}.ipynb").write_text(NOTEBOOK)
        roster = class_folder.collect(root, [LESSON], tmp_path / "work")
        assert roster.entries["eve"][LESSON].status == "misnamed"  # found, however deep, and flagged
        assert set(integrity.tree_hashes(root)) == {f"alice/{LESSON}.ipynb", f"eve/{'d/' * 1100}{LESSON}.ipynb"}
    finally:  # removed here, bottom up: shutil.rmtree (and so pytest's clean-up of old tmp folders) recurses
        (levels[-1] / f"{LESSON}.ipynb").unlink(missing_ok=True)
        for level in reversed(levels):
            if level.exists():
                level.rmdir()


def test_files_and_hidden_folders_at_the_top_are_named_in_the_report(tmp_path):
    root = tmp_path / "class"
    _student(root, "alice")
    _write(root / f"{LESSON}.ipynb")
    _student(root, ".eve")
    (root / "__MACOSX").mkdir()
    roster = class_folder.collect(root, [LESSON], tmp_path / "work")
    assert set(roster.entries) == {"alice"}
    assert roster.notes == [(f"not graded: 2 files or hidden folders at the top of the class folder (.eve, "
                             f"{LESSON}.ipynb); each student's work must be in a folder of its own")]


# ---------------------------------------------------------------- zips

def _zip(path: Path, entries: dict, compression=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in entries.items():
            if isinstance(data, zipfile.ZipInfo):
                zf.writestr(data, "target")
            else:
                zf.writestr(name, data)
    return path


def test_a_zip_bomb_is_refused_and_leaves_nothing_behind(tmp_path):
    bomb = _zip(tmp_path / "bomb.zip", {f"s{i}/{LESSON}.ipynb": b"\0" * (16 * 2**20) for i in range(4)})
    assert bomb.stat().st_size < 2**20  # 64 MB in under 1 MB
    with pytest.raises(class_roster.LayoutError) as refused:
        class_folder.collect(bomb, [LESSON], tmp_path / "work")
    message = str(refused.value)
    assert "compressed" in message and "the limit is 100 times" in message and "unpack it yourself" in message
    assert not (tmp_path / "work" / "unzipped").exists()


@pytest.mark.parametrize("limits, entries, what", [
    (size_limits.ZipLimits(max_files=3), {f"s/{i}.ipynb": NOTEBOOK for i in range(4)}, "holds 4 files"),
    (size_limits.ZipLimits(max_bytes=1000), {"s/a.ipynb": "x" * 1001}, "unpacks to"),
    (size_limits.ZipLimits(max_depth=4), {"a/b/c/d/e.ipynb": NOTEBOOK}, "5 folders deep"),
    (size_limits.ZipLimits(max_ratio=10, ratio_floor=0), {"s/a.ipynb": "x" * 10_000}, "compressed"),
])
def test_each_zip_limit_refuses_the_whole_archive(tmp_path, limits, entries, what):
    archive = _zip(tmp_path / "a.zip", entries)
    with pytest.raises(class_roster.LayoutError, match=what):
        archives.safe_extract(archive, tmp_path / "out", limits)
    assert not (tmp_path / "out").exists()


def test_a_zip_that_unpacks_to_more_than_its_headers_say_is_refused(tmp_path):
    archive = _zip(tmp_path / "liar.zip", {"s/a.ipynb": "x" * 5000}, zipfile.ZIP_STORED)
    data = archive.read_bytes()  # declare 50 bytes in both headers: the bytes themselves are 5000
    data = data.replace((5000).to_bytes(4, "little") * 2, (50).to_bytes(4, "little") * 2)
    archive.write_bytes(data)
    with pytest.raises(class_roster.LayoutError):
        archives.safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_zips_links_are_not_extracted_and_flag_their_student(tmp_path):
    link = zipfile.ZipInfo(f"class/mallory/{LESSON}.ipynb")
    link.external_attr = (0o120777 << 16)
    archive = _zip(tmp_path / "class.zip", {f"class/alice/{LESSON}.ipynb": NOTEBOOK, "link": link})
    roster = class_folder.collect(archive, [LESSON], tmp_path / "work")
    assert roster.entries["mallory"][LESSON].status == "refused"
    assert not (tmp_path / "work" / "unzipped" / "class" / "mallory" / f"{LESSON}.ipynb").exists()
    assert roster.entries["alice"][LESSON].status == "ok" and any("one folder, 'class'" in n for n in roster.notes)


@pytest.mark.parametrize("name", ["../escaped.ipynb", "/abs.ipynb", "a/../../b.ipynb"])
def test_a_zip_path_outside_the_folder_refuses_the_archive(tmp_path, name):
    archive = _zip(tmp_path / "evil.zip", {"alice/01_warmup.ipynb": NOTEBOOK, name: NOTEBOOK})
    with pytest.raises(class_roster.LayoutError, match="unsafe path"):
        archives.safe_extract(archive, tmp_path / "work" / "out")
    assert not (tmp_path / "work" / "out").exists() and not (tmp_path / "escaped.ipynb").exists()
