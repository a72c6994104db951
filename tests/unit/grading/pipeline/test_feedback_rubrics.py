"""No text a released feedback page shows about a test earns a point of a written answer of that lesson.

The instructor marks the written answers (``docs/written-answers.md`` lists them, generated from the lesson sources
by ``autograder/publish/answer_key.py``), and feedback pages are released to the class: a diagnosis that states what
a rubric asks for hands the answer to every learner who reads it. Feedback names the mistake in the *code* and the
idea to revisit; the written answer asks the learner to explain it.

``RUBRICS`` holds, for every written answer, its rubric's points, each as the key ideas that together earn it, with
a pattern that recognises each idea in plain text. An idea the released lesson itself states next to the question
(``given``, a quote of the lesson) needs no feedback to repeat it: a text that states the *other* ideas of the point
already hands the point out (e.g. lesson 05 tells the learner that the given ``attention_layer``'s shapes and row sums
are right, so naming the columns its heads read is the whole answer).

Texts a page can show: every catalogued bug's diagnosis (for the lesson's bugs and every bug of a function its tests
grade), and every string the hidden checks (``autograder/checks/``), the channel that reports them
(``autograder/grading/pipeline/``, ``autograder/kernel/hidden_cell.py``) and the visible self-checks
(``solutions/selfcheck_*.py``, whose output is in the test cell) can show, f-string fields written as ``{}``. Each
is checked on its own; then what one test cell really shows for each catalogued bug of a lesson with written answers
(the hidden test's message and the self-check's, together) is checked as one text. The model answers must earn every
point under the same patterns (so the patterns recognise the rubric's ideas), and the diagnoses lesson 05 showed before
they were rewritten must be caught (so the check can fail).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import math
import re
from dataclasses import dataclass

import numpy as np
import pytest

from autograder import bugs, course
from autograder.checks import registry
from autograder.course import answers
from autograder.grading.pipeline import feedback_page
from autograder.publish import answer_key


@dataclass(frozen=True)
class Idea:
    name: str
    pattern: str  # a regular expression, searched in ``plain(text)``
    given: str = ""  # a quote of the released lesson that states this idea (so no feedback needs to)

    def said_in(self, plain_text: str) -> bool:
        return re.search(self.pattern, plain_text) is not None


@dataclass(frozen=True)
class Point:
    what: str  # the rubric's point, in short
    ideas: tuple  # every one of them is needed for the point

    def earned_by(self, plain_text: str) -> bool:
        return all(idea.given or idea.said_in(plain_text) for idea in self.ideas)


_SILENT_SHAPES = r"shapes? (still )?(fit|match|are right)|nothing (fails|raises|reports)|fails silently"

# The rubrics of every written answer, by lesson and grade_id; each comment names the cell that holds the rubric
# ("Rubric for the grader"). One Point per point of the answer.
RUBRICS = {
    "05_exercises": {
        # solutions/05_exercises.py, cell explain_reshape (3 points)
        "explain_reshape": (
            Point("what a reshape does to the order of the entries", (
                Idea("a reshape keeps the row-major order", r"reshape\w*[^.;]{0,40}(never|does not|doesn't|do not) "
                     r"move|moves? no (number|entr)|reinterprets?|(keeps?|same|in) (the )?(row-major )?order|"
                     r"row-major", given="numpy's `reshape` reads and writes entries in row-major order"),
                Idea("(T, n_heads, d_head) cuts each token's row into one block per head",
                     r"(each|every) token'?s?( d_model)?( row| vector| columns?)[^.;]{0,60}(blocks?|chunks?|slices|"
                     r"pieces)|(consecutive|contiguous) blocks? of d_head|without mixing tokens|groups? each token"),
            )),
            Point("what the swap of the first two axes achieves", (
                Idea("the swap is what brings the head axis to the front",
                     r"(swap|transpose|moveaxis)\w*[^.;]{0,60}(is what|which) (moves?|brings?|puts?)|brings? (the "
                     r"heads|them|the head axis)[^.;]{0,10}(in )?(to the )?front|heads are (now )?the middle axis"),
                Idea("head i then holds its columns of every token",
                     r"head i[^.;]{0,30}columns i\*d_head:\(i\+1\)\*d_head of every token|head i row t ?= ?token t",
                     given="where head `i` holds columns `i*d_head:(i+1)*d_head` of every token"),
            )),
            Point("which numbers a bare reshape puts in head 0, and that nothing reports it", (
                Idea("head 0 gets consecutive entries: whole tokens' vectors",
                     r"first t ?\*? ?d_head (numbers|entries)|whole tokens?'?s?( vectors?| at a time)|consecutive "
                     r"(chunks|entries)[^.;]{0,40}head|all d_model columns of the first tokens|pieces of one token"),
                Idea("it fails silently", _SILENT_SHAPES + r"|round trip is still exact|(merge|round trip)[^.;]{0,40}"
                     r"(undoes it|gives x back exactly)", given="The round trip is still exact!"),
            )),
        ),
        # solutions/05_exercises.py, cell symptom_masked_attention (1 point)
        "symptom_masked_attention": (
            Point("the symptom (rows with blocked keys sum to less than 1, their output shrinks) and its cause", (
                Idea("rows with blocked keys sum to less than 1 / shrink",
                     r"(sums?|add up) to less than (1|one)|(does|do)(n't| not) (sum|add up) to (1|one)|sums? to [\d.#]+, "
                     r"not 1|shrunk|shrinks?|smaller than (1|one)|below (1|one)\b"),
                Idea("blocked weights zeroed after the softmax, not renormalised",
                     r"(zero\w*|set to 0|blocked)[^.;]{0,60}after (the )?softmax|after (the )?softmax[^.;]{0,60}"
                     r"(zero|set to 0)|not renormali[sz]ed|without renormali[sz]ing|(must|should) act on the "
                     r"scores|(block|mask)\w*[^.;]{0,40}scores[^.;]{0,30}before (the )?softmax|(open|remaining) "
                     r"keys? keep (the )?shares"),
            )),
        ),
        # solutions/05_exercises.py, cell symptom_attention_layer (1 point)
        "symptom_attention_layer": (
            Point("which columns each head read, and why no shape or row sum shows it", (
                Idea("each head reads every n_heads-th column, not a contiguous block",
                     r"every n_heads-th column|\(i, i ?\+ ?n_heads|columns 0, n_heads|strided|a stride of n_heads|"
                     r"columns?[^.;]{0,20}n_heads apart"),
                Idea("it is silent: shapes and row sums are right",
                     _SILENT_SHAPES + r"|rows?( of weights)? (still )?sum to 1|reshape (only reinterprets|moves no "
                     r"number)", given="Its rows of weights sum to 1 and its shapes are right."),
            )),
        ),
        # solutions/05_exercises.py, cell explain_w_o (2 points)
        "explain_w_o": (
            Point("without W_O each block of output columns depends on one head only", (
                Idea("each block of columns comes from one head",
                     r"(columns?|blocks?)[^.;]{0,60}(come|comes|depends?|depending) (only )?(on|from) (one|a single) "
                     r"head|from head \w+ alone|(one|a single) head (only|alone)|no output column combines|heads? "
                     r"(cannot|can't|do not|don't|never) (combine|mix|interact)"),
            )),
            Point("W_O is a learned linear map that mixes all heads into every output column", (
                Idea("W_O is linear", r"\blinear\b|a (learned )?matrix\b"),
                Idea("it mixes the heads", r"mix\w* (all |the )?(the )?heads|(weighted )?sum over (all )?(the )?heads|"
                     r"combines? (the |all )?heads|every output column[^.;]{0,40}(all|every) heads?"),
            )),
        ),
        # solutions/05_exercises.py, cell explain_scale (2 points)
        "explain_scale": (
            Point("the scale is sqrt of the number of terms of the dot product, d_head inside one head", (
                Idea("the spread of a dot product grows as sqrt of its number of terms",
                     r"sums? (over|of) (d_head|d_k|d|\#|64)( = [^ ]+( // n_heads)?)? (terms|products)|variance (is )?"
                     r"(d|d_k|d_head)\b|standard deviation (is )?sqrt|(std|spread)( of [^.;]{0,30})? (is |grows as |= )"
                     r"?sqrt|(runs?|sums?) over (that head's own |its own )?(d_head|d_k|64) (columns|terms|products)|"
                     r"number of terms"),
                Idea("inside one head that number is d_head", r"inside (one|a) head|per-head|that head's own|"
                     r"d_head = d_model ?(//|/) ?n_heads", given="Inside one head of a layer"),
            )),
            Point("sqrt(d_model) makes the scores too small by sqrt(h) and the softmax too flat", (
                Idea("too small by a factor sqrt(h), growing with the head count",
                     r"(factor|by)( of)? (a further )?sqrt ?\(?(h|n_heads)\b|grows with the (number of heads|head "
                     r"count)|(changes?|depends?) (on|with) the (head count|number of heads)"),
                Idea("the softmax is too flat", r"flat|(too |more |closer to )uniform"),
            )),
        ),
    },
    "08_todays_models": {
        # solutions/08_todays_models.py, cell rope_relative (2 points)
        "rope_relative": (
            Point("one pair's term derived down to q^T R((n - m) theta) k, each step named", (
                Idea("the step R(m theta)^T R(n theta) = R(-m theta) R(n theta)",
                     r"r\(- ?m ?theta\) ?r\(n ?theta\)|r\(m ?theta\) ?\^ ?(top|t) ?r\(n ?theta\)|transpose of (a|the) "
                     r"product"),
            )),
            Point("the sum over pairs depends only on m - n, and still on the content", (
                Idea("the score is the sum over the pairs", r"sum[^.;]{0,30} over (all |the )?[^.;]{0,12}pairs",
                     given="the sum over all pairs"),
                Idea("it depends on the positions only through m - n", r"only (on|through) (the distance|m ?- ?n)",
                     given="depends only on $m - n$"),
                Idea("it still depends on q and k themselves", r"still depends? on[^.;]{0,30}(content|vectors|q and k|"
                     r"frequenc|base)|depends? (also )?on (the )?content"),
            )),
        ),
    },
}


def plain(text: str) -> str:
    """Text as a reader takes it in: lower case, no markdown or LaTeX marks, f-string fields as #, and a bug's id
    ("[masked_attention_as_given]", shown after its diagnosis) read as words."""
    text = text.replace("{}", "#")
    text = re.sub(r"\[(\w+)\]", lambda m: "[" + m.group(1).replace("_", " ") + "]", text)
    text = re.sub(r"(?<![\w)])\*|\*(?![\w(])", "", text)  # emphasis, not a product such as i*d_head
    text = re.sub(r"[`$\\{}]", "", text)
    return re.sub(r"\s+", " ", text).lower()


def _points(lesson: str) -> dict:
    """{grade_id: its Points} of every written answer of ``lesson``."""
    return RUBRICS.get(lesson, {})


def earned(lesson: str, text: str) -> list:
    """[(grade_id, the point's description)] of every point of the lesson's written answers ``text`` earns."""
    said = plain(text)
    return [(gid, point.what) for gid, points in _points(lesson).items() for point in points if point.earned_by(said)]


# ------------------------------------------------------------------------------------------- the texts a page shows
_SHARED = ["autograder/checks/runner.py", "autograder/checks/compare.py", "autograder/checks/verdict.py",
           "autograder/checks/registry.py", "autograder/checks/bug_match.py",
           "autograder/kernel/hidden_cell.py", "autograder/grading/pipeline/hidden_tests.py",
           "autograder/grading/pipeline/learner_errors.py", "solutions/selfcheck_common.py"]


def _strings(path) -> list:
    """Every string literal of a module but its docstrings (never shown), f-strings with their fields as {}."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            out.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            out.append(node.value)
    return out


def _graded_functions(lesson: str) -> set:
    return {name for test in registry.tests_of(lesson).values() for name in test.uses}


@functools.lru_cache(maxsize=None)
def feedback_texts(lesson: str) -> tuple:
    """(where, text) of every text a feedback page of ``lesson`` can show about a test."""
    root = course.ROOT
    graded = _graded_functions(lesson)
    found = [(f"bug {b.id}", f"{b.diagnosis} [{b.id}]") for b in bugs.CATALOG  # as a page shows it
             if b.lesson == lesson or b.function in graded]
    number = course.lesson_number(lesson)
    modules = [f"autograder/checks/lesson{number}.py", *_self_checks(f"selfcheck_{number}"), *_SHARED]
    for module in dict.fromkeys(modules):
        if (root / module).exists():
            found += [(module, text) for text in _strings(root / module)]
    return tuple(found)


def _self_checks(name: str) -> list:
    """solutions/<name>.py and every self-check module it imports (lesson 05 checks its paste cell with lesson
    01's checks), as paths from the repository's root."""
    path = course.SOLUTIONS / f"{name}.py"
    if not path.exists():
        return []
    imported = re.findall(r"^from (selfcheck_\w+) import", path.read_text(encoding="utf-8"), re.M)
    return [f"solutions/{name}.py", *(m for other in imported for m in _self_checks(other))]


# ------------------------------------------------------------------------------------------------------ the data
def _released_text(lesson: str) -> str:
    nb = answers.student_notebook(lesson)
    return plain("\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown"))


@pytest.mark.parametrize("lesson", course.lesson_names())
def test_every_written_answer_has_its_key_ideas(lesson):
    """One Point per point of every written answer; every given idea quoted from the released lesson and stated by
    its quote; every point keeps an idea the lesson does not give (else the lesson itself would hand it out)."""
    written = {gid: points for gid, points, _, _ in answer_key.written_answers(lesson)}
    assert set(_points(lesson)) == set(written), f"{lesson}: add the key ideas of every written answer to RUBRICS"
    released = _released_text(lesson)
    for gid, points in _points(lesson).items():
        assert len(points) == written[gid], f"{gid}: {written[gid]} points in the lesson, {len(points)} in RUBRICS"
        for point in points:
            assert any(not idea.given for idea in point.ideas), f"{gid}: the lesson gives every idea of {point.what!r}"
            for idea in point.ideas:
                if idea.given:
                    assert plain(idea.given) in released, f"{gid}: the released {lesson} no longer says {idea.given!r}"
                    assert idea.said_in(plain(idea.given)), f"{gid}: {idea.name!r} does not match its own quote"


def _model_answer(answer: str) -> str:
    """The model answer alone, without the rubric that follows it."""
    return re.split(r"\*\*Rubric", answer)[0]


@pytest.mark.parametrize("lesson", sorted(RUBRICS))
def test_each_model_answer_earns_every_point_of_its_rubric(lesson):
    """The patterns recognise the rubric's ideas: the model answer states every idea of every point itself."""
    for gid, _, _, answer in answer_key.written_answers(lesson):
        said = plain(_model_answer(answer))
        for point in _points(lesson)[gid]:
            missed = [idea.name for idea in point.ideas if not idea.said_in(said)]
            assert not missed, f"{gid}, {point.what!r}: the model answer is not recognised as saying {missed}"


# What lesson 05's feedback said before it was rewritten (issue 38, item 7), and the written answer each handed out:
# the check must catch every one. The first two are what an untouched lesson 05 showed in its find-the-bug cells,
# the diagnosis and the visible self-check's line together; a bug's id alone, next to the self-check's symptom,
# was enough.
OLD_FEEDBACK = [
    ("symptom_masked_attention",
     "The mask is applied after the softmax: blocked weights are set to 0, but the weights left in the row are not "
     "renormalised, so a row with blocked keys sums to less than 1 and its output shrinks. Block the *scores* (-inf) "
     "before the softmax, so the softmax spreads the whole weight over the open keys. "
     "[masked_attention_zeroed_after_softmax]\nthe weights of batch 0, query 0 sum to 0.166, not 1 (that row has 4 "
     "blocked keys); rows without a blocked key sum to 1.000"),
    ("symptom_attention_layer",
     "The layer splits Q, K and V with a reshape to (..., T, d_head, n_heads), so head i holds every n_heads-th "
     "column (i, i + n_heads, ...) instead of the contiguous block i*d_head:(i+1)*d_head, while the merge puts head i "
     "back into that block: the heads attend in the wrong subspaces. Split by reshaping to (..., T, n_heads, d_head), "
     "then move the head axis in front of T. [attention_layer_strided_heads]"),
    ("symptom_masked_attention", "[masked_attention_zeroed_after_softmax] (on input unbatched)\nthe weights of batch "
     "0, query 0 sum to 0.166, not 1 (that row has 4 blocked keys); rows without a blocked key sum to 1.000"),
    ("symptom_attention_layer", "[attention_layer_strided_heads] (on input unbatched, n_heads=6)"),
    ("explain_w_o",  # the multiple-choice question's feedback on option (d): both points
     "(d) is not the true statement: without W_O each output column comes from one head only; W_O is the learned "
     "linear map that mixes the heads and maps them back to d_model, so leaving it out does change what the layer "
     "can represent."),
    ("explain_reshape",
     "split_into_heads reshapes straight to (..., n_heads, T, d_head) without a transpose, so head 0 gets the first "
     "T*d_head numbers of the array (whole token vectors) instead of columns 0:d_head of every token. The shapes fit "
     "and a bare-reshape merge even undoes it exactly, which is why an exact round trip alone proves nothing."),
    ("explain_scale",
     "The scores are divided by sqrt(d_model). Inside one head the dot product sums over d_head = d_model // n_heads "
     "terms, so the scale is sqrt(d_head); sqrt(d_model) makes every head's softmax too flat."),
]


@pytest.mark.parametrize("grade_id, text", OLD_FEEDBACK)
def test_the_old_feedback_would_be_caught(grade_id, text):
    assert grade_id in {gid for gid, _ in earned("05_exercises", text)}


def test_the_texts_are_found():
    texts = feedback_texts("05_exercises")
    assert any(where == "bug masked_attention_as_given" for where, _ in texts)
    assert any(where == "autograder/checks/lesson05.py" and "is not the true statement" in t for where, t in texts)
    assert any(where == "solutions/selfcheck_05.py" and "blocked keys" in t for where, t in texts)
    assert any(where == "autograder/checks/runner.py" for where, _ in texts)
    assert any(where == "solutions/selfcheck_01.py" for where, _ in texts)  # the paste cell's checks
    assert not any("One function per graded test cell" in t for _, t in texts)  # a module docstring is not shown


# ------------------------------------------------------------------------------------------------------ the checks
@pytest.mark.parametrize("lesson", course.lesson_names())
def test_no_feedback_text_earns_a_point_of_a_written_answer(lesson):
    leaks = [f"{where}: earns {gid} ({what}) with {text[:160]!r}"
             for where, text in feedback_texts(lesson) for gid, what in earned(lesson, text)]
    assert not leaks, "\n".join(leaks)


def _cell_source(lesson: str, grade_id: str) -> str:
    nb = answers.student_notebook(lesson)
    return next(feedback_page.without_hidden_tests(c.source) for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _shown_for(bug) -> list:
    """What the test cells of ``bug``'s function show for it: each hidden test's message and the cell's self-check
    message (a learner whose notebook holds the bug, every other function right)."""
    shown = []
    for grade_id, test in registry.tests_of(bug.lesson).items():
        if bug.function not in test.uses:
            continue
        values = {**registry.stand_ins_of(bug.lesson), bug.function: bug.make()}
        try:
            with np.errstate(all="ignore"):
                test(values)
        except AssertionError as exc:
            shown.append(str(exc))
        checks = course.import_selfcheck(f"selfcheck_{course.lesson_number(bug.lesson)}")
        namespace = {"np": np, "math": math, **vars(checks), **registry.stand_ins_of(bug.lesson), bug.function: bug.make()}
        try:
            with contextlib.redirect_stdout(io.StringIO()), np.errstate(all="ignore"):
                exec(_cell_source(bug.lesson, grade_id), namespace)
        except Exception as exc:  # noqa: BLE001 - a failed check, or the bug failing inside it: the cell shows it
            shown.append(f"{type(exc).__name__}: {exc}")
    return shown


_WITH_ANSWERS = [b for b in bugs.CATALOG if b.lesson in RUBRICS]


@pytest.mark.parametrize("bug", _WITH_ANSWERS, ids=[b.id for b in _WITH_ANSWERS])
def test_what_a_test_cell_shows_for_a_catalogued_bug_earns_no_point(bug, monkeypatch):
    """The hidden test's message and the self-check's, as one cell of the page shows them together. The given
    find-the-bug code is among these bugs: this is the page of an untouched or unfixed exercise."""
    monkeypatch.setenv("MHA_GRADING_SALT", "0")
    shown = _shown_for(bug)
    assert shown, f"{bug.id}: no test cell of {bug.function} said anything"
    together = "\n".join(shown)
    assert not earned(bug.lesson, together), f"{bug.id} earns {earned(bug.lesson, together)} with:\n{together}"
