"""A rerun on the same download reads each notebook, without a kernel, and parses none it has read before: intake
hashes a notebook the term already took in as readable under the same limits (``class_folder.collect``'s
``checked``, ``term.checked``), ``term.take_in`` writes no hand-in OUT holds already, and ``workspace.stage`` parses
only what it grades. Anything else is read as before: new or changed bytes, other limits, a record of other bytes.
The class at scale is ``bench/instructor_scale.py``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import nbformat
import pytest

from autograder.grading.intake import class_folder, file_access, size_limits
from autograder.grading.records import outcome, state
from autograder.grading.records.settings import Settings
from autograder.grading.run import term, workspace

LESSON = "01_warmup"
LIMITS = size_limits.NotebookLimits()


def _notebook(text: str) -> bytes:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(text, id="a")]
    return (nbformat.writes(nb) + "\n").encode()


def _class(tmp_path: Path, handed: dict) -> Path:
    root = tmp_path / "class"
    for student, data in handed.items():
        (root / student).mkdir(parents=True, exist_ok=True)
        (root / student / f"{LESSON}.ipynb").write_bytes(data)
    return root


def _refuse_parsing(monkeypatch, module):
    parsed = []

    def refuse(data, path, limits=None):
        parsed.append(Path(path).parent.name)
        raise ValueError("parsed")

    monkeypatch.setattr(module, "parse_notebook", refuse)
    return parsed


def _take_in(root: Path, out: Path, limits=LIMITS, checked=frozenset()):
    t = term.load(out)
    roster = class_folder.collect(root, [LESSON], out, limits=limits, checked=checked)
    term.take_in(out, t, roster, [LESSON], limits)
    term.save(out, t)
    return roster, term.load(out)


def test_intake_hashes_what_the_term_read_as_a_notebook_before_and_parses_the_rest(tmp_path, monkeypatch):
    ann, bob = _notebook("ann's"), _notebook("bob's")
    root, out = _class(tmp_path, {"ann": ann, "bob": bob}), tmp_path / "out"
    roster, t = _take_in(root, out)
    assert roster.entries["ann"][LESSON].read_hash == hashlib.sha256(ann).hexdigest()
    assert term.checked(t, LIMITS) == {hashlib.sha256(data).hexdigest() for data in (ann, bob)}
    assert term.checked(t, size_limits.NotebookLimits(max_cells=10)) == set()  # other limits: read again

    (root / "bob" / f"{LESSON}.ipynb").write_bytes(_notebook("bob's, handed in again"))
    parsed = _refuse_parsing(monkeypatch, class_folder)
    again = class_folder.collect(root, [LESSON], out, limits=LIMITS, checked=term.checked(t, LIMITS))
    assert parsed == ["bob"]  # ann's very bytes were read as a notebook before: hashed, not parsed
    assert again.entries["ann"][LESSON].status == "ok"
    assert again.entries["bob"][LESSON].status == "malformed"  # parsed, and the parse (refused here) decides
    parsed.clear()
    class_folder.collect(root, [LESSON], out, limits=LIMITS)
    assert parsed == ["ann", "bob"]  # nothing known: every notebook is parsed


def test_a_malformed_hand_in_is_never_taken_as_checked(tmp_path):
    root, out = _class(tmp_path, {"ann": b'{"not": "a notebook"', "bob": _notebook("bob's")}), tmp_path / "out"
    roster, t = _take_in(root, out)
    assert roster.entries["ann"][LESSON].status == "malformed"
    assert term.checked(t, LIMITS) == {hashlib.sha256(_notebook("bob's")).hexdigest()}
    assert "checked" not in t.entries["ann"][LESSON]


def test_bytes_that_changed_after_intake_read_them_are_not_taken_as_checked(tmp_path, monkeypatch):
    root, out = _class(tmp_path, {"ann": _notebook("ann's")}), tmp_path / "out"
    roster = class_folder.collect(root, [LESSON], out, limits=LIMITS)
    (root / "ann" / f"{LESSON}.ipynb").write_bytes(b"rewritten between intake and take_in")
    t = term.load(out)
    term.take_in(out, t, roster, [LESSON], LIMITS)
    assert "checked" not in t.entries["ann"][LESSON] and term.checked(t, LIMITS) == set()


def test_a_hand_in_out_holds_already_is_not_written_again(tmp_path):
    root, out = _class(tmp_path, {"ann": _notebook("ann's")}), tmp_path / "out"
    _take_in(root, out)
    copy, record = out / "handed-in" / "ann" / f"{LESSON}.ipynb", out / "handed-in" / "ann" / f"{LESSON}.json"
    before = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in (copy, record)]
    _, t = _take_in(root, out, checked=term.checked(term.load(out), LIMITS))
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in (copy, record)] == before
    assert t.entries["ann"][LESSON]["checked"] == term.checked_under(LIMITS)

    copy.write_bytes(b"damaged")  # OUT's copy is not what was handed in: written again from the download
    _take_in(root, out, checked=term.checked(term.load(out), LIMITS))
    assert copy.read_bytes() == _notebook("ann's")
    (root / "ann" / f"{LESSON}.ipynb").write_bytes(_notebook("ann's, again"))
    _, t = _take_in(root, out, checked=term.checked(term.load(out), LIMITS))
    assert copy.read_bytes() == _notebook("ann's, again")
    assert len(list((out / "handed-in" / "ann" / "earlier").glob("*.ipynb"))) == 1  # the first one kept
    assert json.loads(record.read_text())["hash"] == hashlib.sha256(_notebook("ann's, again")).hexdigest()


@pytest.fixture
def staged(tmp_path):
    """A course with lesson 01's release, ann's hand-in in OUT, and its graded copy."""
    s = Settings(out=str(tmp_path / "out"), lessons=[LESSON])
    release = s.course_root / "release" / LESSON / f"{LESSON}.ipynb"
    release.parent.mkdir(parents=True)
    release.write_bytes(_notebook("the lesson"))
    root = _class(tmp_path, {"ann": _notebook("ann's")})
    roster, t = _take_in(root, Path(s.out))
    whole = term.roster(s.out, t, roster)
    dest = s.course_root / "submitted" / "ann" / LESSON / f"{LESSON}.ipynb"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(_notebook("ann's"))
    return s, whole, t.entries["ann"][LESSON]["hash"]


def test_stage_parses_no_notebook_it_graded_before(staged, monkeypatch):
    s, whole, digest = staged
    state.write(s, state.Record("ann", LESSON, hash=digest, key=s.key, graded=True, status=outcome.GRADED))
    parsed = _refuse_parsing(monkeypatch, file_access)
    assert workspace.stage(s, whole) == {} and parsed == []
    assert whole.entries["ann"][LESSON].status == "ok"


@pytest.mark.parametrize("record", [dict(hash="other bytes"), dict(key="other settings"), dict(graded=False)])
def test_stage_parses_a_notebook_whose_record_is_not_of_these_bytes_graded(staged, monkeypatch, record):
    s, whole, digest = staged
    state.write(s, state.Record("ann", LESSON, **{"hash": digest, "key": s.key, "graded": True, **record}))
    parsed = _refuse_parsing(monkeypatch, file_access)
    assert workspace.stage(s, whole) == {} and parsed == ["ann"]  # parsed (and refused here): not staged
    assert whole.entries["ann"][LESSON].status == "malformed"
