"""The search for similar work without a kernel: fingerprints that survive a copier's disguise and see a different
solution, and the rules that list a pair (``autograder/grading/similarity``)."""

from __future__ import annotations

import random

from autograder.course import answers
from autograder.grading.similarity import code_prints, evidence, pairs

LESSON = "05_exercises"

LOOPED = '''\
def split_into_heads(x, n_heads):
    """Split the last axis into heads."""
    size = x.shape[-1] // n_heads
    heads = list()
    start = 0
    while start < x.shape[-1]:
        heads.append(x[..., start:start + size])
        start += size
    return np.stack(heads, axis=-3)
'''
DISGUISED = '''\
def split_into_heads(x, n_heads):
    # cut the model dimension into equal blocks
    w = x.shape[-1]//n_heads

    out = list()
    i = 0
    while i < x.shape[ -1 ]:
        out.append(x[..., i : i+w])   # this head's columns
        i += w
    return (np.stack(out, axis = -3))
'''
RESHAPED = '''\
def split_into_heads(x, n_heads):
    *lead, T, d_model = x.shape
    y = x.reshape(*lead, T, n_heads, d_model // n_heads)
    return np.moveaxis(y, -2, -3)
'''


def test_fingerprints_ignore_names_comments_spacing_numbers_and_docstrings():
    assert code_prints.prints(LOOPED) == code_prints.prints(DISGUISED)
    assert code_prints.prints(LOOPED.replace("axis=-3", "axis=-2")) == code_prints.prints(LOOPED)  # a number is N


def test_a_different_solution_shares_few_fingerprints():
    a, b = set(code_prints.prints(LOOPED)), set(code_prints.prints(RESHAPED))
    assert a and b and len(a & b) <= 1


def test_the_shared_lines_are_the_ones_marked():
    wanted = set(code_prints.prints(LOOPED))
    assert code_prints.lines(DISGUISED, wanted) >= {6, 7, 8}
    assert code_prints.lines(RESHAPED, wanted) <= {1}


def test_unfinished_code_still_gives_fingerprints():
    assert code_prints.prints(LOOPED[:-30] + '\n    s = "unterminated')


def _work(student, code=None, **kwargs):
    code = code or {}
    return evidence.Work(student, LESSON, code=code, prints={g: set(code_prints.prints(s)) for g, s in code.items()},
                         **kwargs)


FUNCTIONS = ["exp", "tanh", "sqrt", "abs", "cumsum", "sort", "argsort", "log1p", "sin", "cos", "square", "floor",
             "ceil", "sign", "negative", "reciprocal", "cbrt", "expm1", "diff", "flip", "ravel", "round", "trunc",
             "arctan", "sinh"]
METHODS = ["sum", "max", "min", "mean", "std", "var", "prod", "argmax", "cumprod", "copy", "ptp", "any"]


def _unique_code(rng, gid: str) -> str:
    """A function no one else wrote: a chain of operations drawn at random."""
    lines = [f"def {gid}(x, n):"]
    for k in range(8):
        prev = "x" if k == 0 else f"v{k - 1}"
        f, g = rng.sample(FUNCTIONS, 2)
        lines.append(f"    v{k} = np.{f}({prev}).{rng.choice(METHODS)}() {rng.choice('+-*/')} np.{g}({prev})")
    lines.append("    return v7")
    return "\n".join(lines) + "\n"


def _class(n=40, seed=0):
    rng = random.Random(seed)
    return [_work(f"s{i:02d}", {g: _unique_code(rng, g) for g in ("split_into_heads", "merge_heads")})
            for i in range(n)]


def test_independent_students_are_not_listed_and_a_copy_is():
    works = _class()
    copy = works[7].code["merge_heads"].replace("v", "tmp")
    works.append(_work("copier", {"merge_heads": copy, "split_into_heads": works[11].code["split_into_heads"]}))
    found = pairs.search(LESSON, works, expected=frozenset())
    assert {(p.a, p.b) for p in found.pairs} == {("copier", "s07"), ("copier", "s11")}
    # half of each one's unusual code, and one whole cell: two supporting reasons
    assert all({r[0] for r in p.reasons} == {"code", "same cells"} for p in found.pairs)


def test_the_model_answer_and_the_given_code_weigh_nothing():
    model = answers.model_answers(LESSON)
    works = [_work(f"s{i}", {g: model[g] for g in ("split_into_heads", "merge_heads", "mha_from_scratch")})
             for i in range(2)]
    assert pairs.search(LESSON, works).pairs == []  # evidence.expected(): the course's own code


def test_code_many_in_the_class_wrote_weighs_nothing():
    works = _class(n=40)
    shared = _unique_code(random.Random(99), "merge_heads")
    for w in works[:7]:  # more than common(40) = 6 students wrote it: it is the class's, not a pair's
        w.code["merge_heads"] = shared
        w.prints["merge_heads"] = set(code_prints.prints(shared))
    assert pairs.search(LESSON, works, expected=frozenset()).pairs == []
    for w in works[2:8]:  # now s10's code is the one 7 students wrote, and only two hold the first
        w.code["merge_heads"] = works[10].code["merge_heads"]
        w.prints["merge_heads"] = works[10].prints["merge_heads"]
    listed = {(p.a, p.b) for p in pairs.search(LESSON, works, expected=frozenset()).pairs}
    assert listed == {("s00", "s01")}  # the two left holding it: rare again


def test_wrong_numbers_on_two_tests_are_a_strong_reason_and_on_one_not_enough():
    works = _class()
    works[1].wrong = {"test_a": "aa", "test_b": "bb"}
    works[2].wrong = {"test_a": "aa", "test_b": "bb"}
    works[3].wrong = {"test_a": "cc"}
    works[4].wrong = {"test_a": "cc"}
    found = pairs.search(LESSON, works, expected=frozenset())
    assert [(p.a, p.b, p.reasons[0][:2]) for p in found.pairs] == [("s01", "s02", ("wrong numbers", "strong"))]


def test_one_wrong_function_failing_two_of_its_tests_is_one_supporting_reason():
    works = [evidence.Work(w.student, "01_warmup", code=w.code, prints=w.prints) for w in _class()]
    works[1].wrong = works[2].wrong = {"softmax_values": "aa", "softmax_stable": "bb"}  # both grade softmax alone
    assert pairs.search("01_warmup", works, expected=frozenset()).pairs == []
    works[1].wrong = works[2].wrong = {"softmax_values": "aa", "attention_values": "cc"}  # two functions
    assert [p.reasons[0][:2] for p in pairs.search("01_warmup", works, expected=frozenset()).pairs] == [
        ("wrong numbers", "strong")]


def test_one_bug_that_several_tests_name_counts_once():
    works = _class()
    for w in works[5:7]:
        w.bugs = {"t1": "bug_x", "t2": "bug_x", "t3": "bug_x"}
    assert pairs.search(LESSON, works, expected=frozenset()).pairs == []


def test_rare_bugs_together_and_identical_answers():
    works = _class()
    for w in works[5:7]:
        w.bugs = {"t1": "bug_x", "t2": "bug_y", "t3": "bug_z"}
    text = "Reshape keeps the order of the entries, the swap moves the head axis in front of the tokens."
    works[8].answers = {"explain_reshape": text}
    works[9].answers = {"explain_reshape": text.upper().replace(",", " ;  ")}
    works[10].answers = works[11].answers = {"explain_reshape": "It reshapes."}  # too short to tell anything
    found = {(p.a, p.b): p for p in pairs.search(LESSON, works, expected=frozenset()).pairs}
    assert set(found) == {("s05", "s06"), ("s08", "s09")}
    assert found[("s05", "s06")].reasons[0][:2] == ("bugs", "strong")
    assert found[("s08", "s09")].reasons[0][:2] == ("written answer", "strong")


def test_students_who_share_their_work_are_a_group():
    works = _class()
    for w in works[12:15]:  # three hand in s20's notebook: every fingerprint is four students', none unusual
        w.code, w.prints = dict(works[20].code), dict(works[20].prints)
    found = pairs.search(LESSON, works, expected=frozenset())
    assert found.groups == [["s12", "s13", "s14", "s20"]] and len(found.pairs) == 6
    assert all(p.reasons == [("same cells", "strong", "merge_heads, split_into_heads")] for p in found.pairs)


def test_an_answer_close_to_the_published_model_answer_is_shown_and_one_in_own_words_is_not():
    model = evidence.model_written(LESSON)["explain_reshape"]
    leaning = _work("a", answers={"explain_reshape": model.replace("never moves", "does not move")})
    own = _work("b", answers={"explain_reshape": "Head 0 would get the first tokens' whole rows after a bare reshape, "
                                                 "so its rows are not tokens and nothing warns you about it."})
    assert [g for g, _ in pairs.close_to_model(leaning)] == ["explain_reshape"]
    assert pairs.close_to_model(own) == []


def test_a_notebook_whose_cells_cannot_be_fingerprinted_keeps_no_work_and_is_still_graded(monkeypatch):
    from autograder.course import answers as course_answers

    nb = course_answers.fill(LESSON)

    def broken(source):
        raise ValueError("cannot read")

    assert evidence.kept(nb, course_answers.student_notebook(LESSON), LESSON)["prints"]
    monkeypatch.setattr(code_prints, "prints", broken)
    assert evidence.kept(nb, course_answers.student_notebook(LESSON), LESSON) is None

