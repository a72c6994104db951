"""Similar work through the grading command: a class of lesson 05 graded for real, in which one student's work
is a disguised copy of another's, one leaned on the published model answer and three worked alone.
``similarity.html`` and ``similarity.csv`` must list the copied pair with its evidence and no other pair, and
``--no-similarity`` must write neither. How well the search separates copies from independent work over a large
class is measured in ``tests/grading/test_similarity_proof.py``."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from autograder import alternatives, grade
from autograder.course import answers
from autograder.course.notebooks import write_notebook
from autograder.grading.records import state
from autograder.grading.similarity import evidence

LESSON = "05_exercises"
pytestmark = pytest.mark.grading

ANA = {  # her own way of writing the graded functions: a loop and a stack, checks of her own
    "split_into_heads": '''\
def split_into_heads(x, n_heads):
    width = x.shape[-1] // n_heads
    pieces = []
    for h in range(n_heads):
        piece = x[..., h * width:(h + 1) * width]
        pieces.append(piece)
    stacked = np.stack(pieces, axis=-3)
    return stacked
''',
    "merge_heads": '''\
def merge_heads(x):
    count = x.shape[-3]
    parts = [x[..., h, :, :] for h in range(count)]
    joined = np.concatenate(parts, axis=-1)
    return joined
''',
    "mha_from_scratch": '''\
def mha_from_scratch(x, W_Q, W_K, W_V, W_O, n_heads):
    width = x.shape[-1] // n_heads
    queries = split_into_heads(np.matmul(x, W_Q), n_heads)
    keys = split_into_heads(np.matmul(x, W_K), n_heads)
    values = split_into_heads(np.matmul(x, W_V), n_heads)
    raw = np.matmul(queries, np.swapaxes(keys, -1, -2))
    raw = raw / math.sqrt(width)
    biggest = np.max(raw, axis=-1, keepdims=True)
    expd = np.exp(raw - biggest)
    weights = expd / np.sum(expd, axis=-1, keepdims=True)
    mixed = np.matmul(weights, values)
    out = np.matmul(merge_heads(mixed), W_O)
    return out, weights
''',
    "masked_attention": '''\
def masked_attention(Q, K, V, mask):
    scale = math.sqrt(Q.shape[-1]) + 1.0
    raw = np.matmul(Q, np.swapaxes(K, -1, -2)) / scale
    raw = np.where(mask, -np.inf, raw)
    weights = softmax(raw, axis=-1)
    return np.matmul(weights, V), weights
''',
    "explain_reshape": ("Reshape keeps the order of the numbers and only cuts each token's row into blocks, one per "
                        "head, so the heads sit in the middle; swapping the first two axes moves them to the front. "
                        "Reshaping straight to (n_heads, T, d_head) gives head 0 the first tokens' whole rows, and "
                        "nothing complains because the shapes still fit."),
}


def _disguised(source: str) -> str:
    """ANA's cell as a copier hands it in: other names, comments, spacing."""
    for old, new in (("pieces", "chunks"), ("piece", "block"), ("stacked", "result"), ("width", "dh"),
                     ("count", "nh"), ("parts", "cols"), ("joined", "res"), ("queries", "q"), ("keys", "k"),
                     ("values", "v"), ("raw", "s"), ("biggest", "m"), ("expd", "ex"), ("mixed", "ctx"),
                     ("scale", "denom")):
        source = source.replace(old, new)
    lines = source.splitlines()
    return "\n".join([lines[0], "    # my own solution, worked out in the lab"] + lines[1:]) + "\n\n"


BEN = {gid: _disguised(src) if gid != "explain_reshape" else src.upper().replace(",", " ;") for gid, src in ANA.items()}
CAI = {"explain_reshape": answers.model_answers(LESSON)["explain_reshape"].split("**Rubric")[0]
       .replace("**Model answer.**", "").replace("never moves", "does not move")}


def _alternative(alt_id: str) -> tuple:
    alt = next(a for a in alternatives.of_lesson(LESSON) if a.id == alt_id)
    return alt.cell, alt.source


DEE = dict(_alternative(a) for a in ("split_moveaxis_checked", "merge_moveaxis_minus_one", "mha_loop_over_heads"))
DEE["explain_reshape"] = ("A bare reshape to (n_heads, T, d_head) just cuts the flat buffer into n_heads chunks, so "
                          "head zero gets complete vectors of the first few tokens instead of its own columns.")
EVE = dict(_alternative(a) for a in ("split_transpose_axes", "merge_concatenate", "mha_reuses_head_weights"))
CLASS = {"ana": ANA, "ben": BEN, "cai": CAI, "dee": DEE, "eve": EVE}


def _handed_in(cells: dict):
    """The lesson with the model answers' code, ``cells`` in place of some, and the written answers ``cells`` does not
    hold left as handed out (no learner writes the model answer of a question)."""
    blank = {c.metadata["nbgrader"]["grade_id"]: c.source for c in answers.student_notebook(LESSON).cells
             if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("solution")}
    return answers.fill(LESSON, {**blank, **cells})


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("similarity")
    klass = base / "class"
    for student, cells in CLASS.items():
        write_notebook(_handed_in(cells), klass / student / f"{LESSON}.ipynb")
    s = grade.Settings(out=str(base / "out"), lessons=[LESSON], workers=2)
    grade.run(klass, s, progress=False, log=lambda *a: None)
    out = base / "out"
    return {"s": s, "out": out, "klass": klass, "html": (out / "similarity.html").read_text(encoding="utf-8"),
            "csv": list(csv.DictReader((out / "similarity.csv").open(encoding="utf-8")))}


def _pairs(rows) -> set:
    return {(r["student"], r["other student"]) for r in rows if r["other student"]}


def test_the_copied_pair_is_listed_and_no_other(graded):
    assert _pairs(graded["csv"]) == {("ana", "ben")}


def test_the_copy_is_listed_for_its_code_its_wrong_numbers_and_its_written_answer(graded):
    reasons = {r["reason"]: r for r in graded["csv"] if r["other student"] == "ben"}
    assert reasons["code"]["level"] == "strong"
    assert "mha_from_scratch" in reasons["code"]["evidence"] and "split_into_heads" in reasons["code"]["evidence"]
    assert reasons["written answer"]["level"] == "strong" and "explain_reshape" in reasons["written answer"]["evidence"]
    assert "wrong numbers" in reasons and "masked_attention" in reasons["wrong numbers"]["evidence"]


def test_the_page_shows_both_cells_side_by_side_with_the_shared_lines_marked(graded):
    html = graded["html"]
    section = html.split("<strong>ana</strong> and <strong>ben</strong>")[1].split("</details>")[0]
    assert "<mark>        piece = x[..., h * width:(h + 1) * width]</mark>" in section  # ana's line
    assert "<mark>        block = x[..., h * dh:(h + 1) * dh]</mark>" in section  # ben's
    assert "for you to look at, not a verdict" in html
    assert "Content-Security-Policy" in html and "<script" not in html


def test_an_answer_leaning_on_the_model_answer_is_shown_beside_it(graded):
    rows = [r for r in graded["csv"] if r["reason"] == "close to the model answer"]
    assert [(r["student"], r["evidence"].split(":")[0]) for r in rows] == [("cai", "explain_reshape")]


def test_each_record_keeps_only_the_cells_the_learner_changed(graded):
    record = state.read(graded["s"], "dee", LESSON)
    assert record.work["code"]["split_into_heads"].strip() == DEE["split_into_heads"].strip()
    assert "softmax" in record.work["code"]  # the model answer's: changed from the stub all the same
    assert set(record.work["answers"]) == {"explain_reshape"}  # the others are left as handed out
    assert record.work["prints"]["mha_from_scratch"]
    assert evidence.from_record(record).student == "dee"


def test_switched_off_it_writes_nothing_and_removes_the_earlier_files(graded):
    assert 'href="similarity.html"' in (graded["out"] / "report.html").read_text(encoding="utf-8")
    s = dataclasses.replace(graded["s"], similarity=False)
    grade.run(graded["klass"], s, progress=False, log=lambda *a: None)
    assert not (graded["out"] / "similarity.html").exists() and not (graded["out"] / "similarity.csv").exists()
    assert "similarity.html" not in (graded["out"] / "report.html").read_text(encoding="utf-8")
    grade.run(graded["klass"], graded["s"], progress=False, log=lambda *a: None)  # grades nothing: from the records
    assert _pairs(csv.DictReader((graded["out"] / "similarity.csv").open(encoding="utf-8"))) == {("ana", "ben")}
