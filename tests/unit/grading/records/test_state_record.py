"""A (student, lesson)'s record is one typed object, written and read back whole."""

from __future__ import annotations

import json

from autograder.grading.records import outcome, state
from autograder.grading.records.settings import Settings


def test_a_record_reads_back_as_it_was_written(tmp_path):
    s = Settings(out=str(tmp_path), lessons=["01_warmup"])
    record = state.Record("ann", "01_warmup", "h", "k", graded=True, status=outcome.GRADED, score=7.0,
                          max_score=10.0, flags=["x"], items={"t": state.Item(3.0, 3.0, "passed")},
                          written={"w": state.Written(2.0, True)}, attempted=True, reopened=[{"cell": "w"}])
    state.write(s, record)
    assert state.read(s, "ann", "01_warmup") == record
    on_disk = json.loads(state.path(s, "ann", "01_warmup").read_text())
    assert on_disk["items"]["t"] == {"score": 3.0, "max": 3.0, "result": "passed", "bug": None, "failure": None,
                                     "signature": None}


def test_an_older_record_reads_with_what_it_has_and_a_broken_one_not_at_all(tmp_path):
    s = Settings(out=str(tmp_path), lessons=["01_warmup"])
    older = state.path(s, "bob", "01_warmup")
    older.parent.mkdir(parents=True)
    older.write_text(json.dumps({"graded": True, "hash": "h", "score": 8, "retired_key": 1}))
    got = state.read(s, "bob", "01_warmup")
    assert (got.student, got.graded, got.score, got.items, got.status) == ("bob", True, 8, None, outcome.GRADING_ERROR)
    older.write_text(json.dumps({"graded": True, "items": {"t": {"score": 1}}}))
    assert state.read(s, "bob", "01_warmup") is None
    older.write_text("{")
    assert state.read(s, "bob", "01_warmup") is None
