"""Pairs and groups of students whose work in a lesson shares more rare evidence than the class makes likely.

Each piece of evidence a graded notebook holds is a key: a code fingerprint of an answer cell, the signature of a
wrong result no catalogued bug explains on a hidden test, a catalogued bug a hidden test named, a written answer
(normalised). The keys are indexed (key -> the students holding it), so only students who share a key are ever
compared: the work grows with the students that share each key, not with the square of the class.

Code. Fingerprints of the model answers and of what the lessons hand out (``evidence.expected``) count for nothing,
and so does every fingerprint more than ``UNUSUAL`` students of the class hold: what remains of a student's code is
its *unusual* code, the part almost nobody else wrote. A pair's code share is the number of unusual fingerprints
both hold over the smaller of their unusual counts: how much of the less original work's unusual code the other
also has. Independent learners share little of it (two who took the same approach still write it differently); a
copy, however renamed, re-commented, re-spaced or reordered, keeps most. Code of which a learner wrote fewer than
``MIN_UNUSUAL`` unusual fingerprints cannot tell a copy from common work, and is not judged: the short, idiomatic
answers of the first lessons rarely can be.

Other evidence. Any key more than ``common(n)`` of the class's n students hold counts for nothing.

A pair is listed when it has one strong reason, or two supporting ones (``REASONS``). The thresholds are measured,
not assumed: ``tests/grading/test_similarity_proof.py`` builds a class of independent learners and disguised copies
of every lesson and asks for at least 90 % of the copies of judgeable work listed and at most 1 listed pair per 100
independent students.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from dataclasses import dataclass, field

from autograder.grading.similarity import evidence

UNUSUAL = 3  # a fingerprint held by at most this many students is unusual code
MIN_UNUSUAL = 10  # code is judged only when each of the pair holds this many unusual fingerprints, and both together
CODE_STRONG, CODE_SUPPORT = 0.6, 0.4  # code shares that are a strong, and a supporting, reason
CANDIDATE = 0.2  # pairs sharing less of their unusual code than this are judged only on their other evidence
COMMON_SHARE = 0.1  # other evidence held by more than this share of the class is common and counts for nothing
COMMON_MIN = 6  # ... and in a small class, by more than this many students
SAME_CELL_PRINTS = 12  # an answer cell is evidence as a whole when it holds this many fingerprints beyond expected
SAME_MAX = 4  # ... held by at most this many students (a group that shares work shares whole cells)
SAME_STRONG = 2  # answer cells whose whole code is the same and unusual: a strong reason (one is a supporting one)
WRONG_STRONG = 2  # graded functions with the same rare wrong numbers: a strong reason (one is a supporting one)
BUGS_STRONG, BUGS_SUPPORT = 0.01, 0.1  # catalogued bugs held together: how many pairs of the class would share as
# many by chance, at most, for a strong and a supporting reason
MIN_ANSWER_WORDS = 8  # a written answer shorter than this is not evidence
MODEL_NGRAM, MODEL_CLOSE, MODEL_MIN_NGRAMS = 4, 0.5, 8  # written answers close to the model answer
REASONS = {
    "code": "their unusual code (beyond the model answer, the given code and what others in the class wrote) is alike",
    "same cells": "answer cells whose whole code is the same, but for names, numbers, comments and layout, as few "
                  "others' is",
    "wrong numbers": "the same wrong results on the grader's fixed inputs, which no catalogued bug explains",
    "bugs": "the same catalogued bugs, each rare in the class, more than the class makes likely",
    "written answer": "the same written answer, but for case, spacing and punctuation",
}


def common(n: int) -> float:
    """How many of a class of ``n`` may hold a key other than code before it is common and counts for nothing."""
    return max(COMMON_MIN, COMMON_SHARE * n)


@dataclass
class Pair:
    """Two students of one lesson, with why they are listed."""

    lesson: str
    a: str
    b: str
    code_share: float = 0.0
    code_ratio: float | None = None  # the unusual code they share over what a random pair of the class shares
    shared_prints: dict = field(default_factory=dict)  # grade_id -> fingerprints both hold (rare ones)
    same_cells: list = field(default_factory=list)  # [grade_id] of answer cells whose whole code both wrote alike
    wrong: list = field(default_factory=list)  # [(test, how many students share it)]
    bugs: list = field(default_factory=list)  # [("", bug, how many students share it)]
    answers: list = field(default_factory=list)  # [grade_id] of identical written answers
    reasons: list = field(default_factory=list)  # [(kind, "strong" or "supporting", what)]

    @property
    def strength(self) -> tuple:
        strong = sum(1 for _, s, _ in self.reasons if s == "strong")
        return (strong, len(self.reasons), self.code_share)


@dataclass
class Lesson:
    """What the search found in one lesson."""

    name: str
    compared: int
    left_out: int
    pairs: list
    groups: list  # [[students]] of 3 or more joined by listed pairs
    close_to_model: list  # [(student, grade_id, share of the answer's word runs in the model answer)]
    given: list  # [(student, flag)]
    judged: int = 0  # how many wrote enough unusual code to be judged on code (``MIN_UNUSUAL``)
    unusual: dict = field(default_factory=dict)  # student -> their unusual fingerprints


def _ngrams(text: str, n: int) -> set:
    words = evidence.normalised(text).split()
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def close_to_model(work: evidence.Work) -> list:
    """[(grade_id, share)] of ``work``'s written answers whose word runs are mostly the published model answer's."""
    found = []
    model = evidence.model_written(work.lesson)
    for gid, text in sorted(work.answers.items()):
        theirs = _ngrams(text, MODEL_NGRAM)
        if gid in model and len(theirs) >= MODEL_MIN_NGRAMS:
            share = len(theirs & _ngrams(model[gid], MODEL_NGRAM)) / len(theirs)
            if share >= MODEL_CLOSE:
                found.append((gid, share))
    return found


def search(lesson: str, works: list, left_out: int = 0, expected=None) -> Lesson:
    """The listed pairs and groups of ``works`` (one ``evidence.Work`` per student of ``lesson``)."""
    expected = evidence.expected() if expected is None else expected
    n = len(works)
    code: dict = defaultdict(list)  # (grade_id, fingerprint) -> indices of the works holding it
    other: dict = defaultdict(list)  # (kind, grade_id, what) -> indices of the works holding it
    model = {gid: evidence.normalised(t) for gid, t in evidence.model_written(lesson).items()}
    cells: dict = defaultdict(list)  # (grade_id, the cell's whole code) -> indices of the works holding it
    for i, w in enumerate(works):
        for gid, prints in w.prints.items():
            beyond = [h for h in prints if h not in expected]
            for h in beyond:
                code[(gid, h)].append(i)
            if len(beyond) >= SAME_CELL_PRINTS:
                cells[("same cells", gid, hash(tuple(sorted(prints))))].append(i)
        for gid, sig in w.wrong.items():
            other[("wrong numbers", gid, sig)].append(i)
        for bug in sorted(set(w.bugs.values())):  # one mistake, however many of the lesson's tests named it
            other[("bugs", "", bug)].append(i)
        for gid, text in w.answers.items():
            norm = evidence.normalised(text)
            if len(norm.split()) >= MIN_ANSWER_WORDS and norm != model.get(gid):
                other[("written answer", gid, norm)].append(i)
    unusual = {key: holders for key, holders in code.items() if len(holders) <= UNUSUAL}
    own = [0] * n  # each work's unusual fingerprints
    together: dict = defaultdict(int)  # i * n + j (i < j) -> the unusual fingerprints both hold
    for holders in unusual.values():
        for x, i in enumerate(holders):
            own[i] += 1
            for j in holders[x + 1:]:
                together[i * n + j] += 1
    random_pair = sum(len(h) * (len(h) - 1) for h in unusual.values()) / max(n * (n - 1), 1)
    bugs_per_pair = sum(len(h) * (len(h) - 1) for key, h in other.items()
                        if key[0] == "bugs" and len(h) <= common(n)) / max(n * (n - 1), 1)
    shared = defaultdict(list)  # i * n + j -> the other keys both hold
    for key, holders in [*other.items(), *cells.items()]:
        if 2 <= len(holders) <= (SAME_MAX if key[0] == "same cells" else common(n)):
            for x in range(len(holders)):
                for y in range(x + 1, len(holders)):
                    shared[holders[x] * n + holders[y]].append((key, len(holders)))
    candidates = set(shared)
    for ij, count in together.items():
        i, j = divmod(ij, n)
        if min(own[i], own[j]) >= MIN_UNUSUAL and count >= CANDIDATE * min(own[i], own[j]):
            candidates.add(ij)
    pairs = []
    for ij in candidates:
        i, j = divmod(ij, n)
        pair = _judged(lesson, works[i], works[j], together.get(ij, 0), shared.get(ij, []), unusual,
                       min(own[i], own[j]), random_pair, bugs_per_pair * n * (n - 1) / 2, n)
        if any(s == "strong" for _, s, _ in pair.reasons) or len(pair.reasons) >= 2:
            pairs.append(pair)
    pairs.sort(key=lambda p: (tuple(-x for x in p.strength), p.a, p.b))
    return Lesson(lesson, n, left_out, pairs, _groups(pairs),
                  [(w.student, gid, share) for w in works for gid, share in close_to_model(w)],
                  [(w.student, flag) for w in works for flag in w.given],
                  judged=sum(1 for count in own if count >= MIN_UNUSUAL),
                  unusual={w.student: own[i] for i, w in enumerate(works)})


def _judged(lesson, a, b, both_count, others, unusual, own, random_pair, bug_pairs, n) -> Pair:
    """The pair of ``a`` and ``b`` with its reasons: ``both_count`` unusual fingerprints both hold (``own``: the
    smaller of their unusual counts), ``others`` [(key, how many hold it)] of the other evidence both hold;
    ``bug_pairs``: how many catalogued bugs the class's pairs share in all, by which chance is judged."""
    first, second = sorted([a.student, b.student])
    pair = Pair(lesson, first, second)
    if both_count and own >= MIN_UNUSUAL:
        pair.code_share = both_count / own
        pair.code_ratio = both_count / random_pair if random_pair else None
        for gid, prints in sorted(a.prints.items()):
            both = {h for h in prints & b.prints.get(gid, set()) if (gid, h) in unusual}
            if both:
                pair.shared_prints[gid] = both
        more = f", {pair.code_ratio:.0f} times what two students of this class share on average" \
            if pair.code_ratio else ""
        said = f"{100 * pair.code_share:.0f}% of the less original work's unusual code, in " \
               f"{', '.join(sorted(pair.shared_prints))}{more}"
        if pair.code_share >= CODE_STRONG and both_count >= MIN_UNUSUAL:
            pair.reasons.append(("code", "strong", said))
        elif pair.code_share >= CODE_SUPPORT and both_count >= MIN_UNUSUAL:
            pair.reasons.append(("code", "supporting", said))
    kinds = defaultdict(list)
    for (kind, gid, what), df in others:
        kinds[kind].append((gid, what, df))
    pair.same_cells = sorted(gid for gid, _, _ in kinds["same cells"])
    if pair.same_cells:
        level = "strong" if len(pair.same_cells) >= SAME_STRONG else "supporting"
        pair.reasons.append(("same cells", level, ", ".join(pair.same_cells)))
    pair.wrong = sorted((gid, df) for gid, _, df in kinds["wrong numbers"])
    if pair.wrong:
        functions = {graded_by(lesson, t) for t, _ in pair.wrong}  # one wrong function fails each of its tests
        level = "strong" if len(functions) >= WRONG_STRONG else "supporting"
        pair.reasons.append(("wrong numbers", level, "the same wrong results in " + ", ".join(
            f"{t} ({df} students)" for t, df in pair.wrong)))
    pair.bugs = sorted(kinds["bugs"])
    if pair.bugs:
        by_chance = pairs_sharing(len(pair.bugs), bug_pairs, n)
        level = "strong" if by_chance <= BUGS_STRONG else "supporting" if by_chance <= BUGS_SUPPORT else ""
        if level:
            pair.reasons.append(("bugs", level, ", ".join(f"{bug} ({df} students)" for _, bug, df in pair.bugs)
                                 + f"; {by_chance:.3f} pairs of this class would share as many by chance"))
    pair.answers = sorted(gid for gid, _, _ in kinds["written answer"])
    if pair.answers:
        pair.reasons.append(("written answer", "strong", "identical: " + ", ".join(pair.answers)))
    return pair


@functools.lru_cache(maxsize=None)
def graded_by(lesson: str, test: str) -> tuple:
    """The learner functions the hidden test ``test`` grades (the test itself, for one the registry does not hold)."""
    from autograder.checks import registry

    found = registry.tests_of(lesson).get(test)
    return tuple(sorted((*found.uses, *found.together))) if found else (test,)


def pairs_sharing(k: int, shared: float, n: int) -> float:
    """How many of the n (n - 1) / 2 pairs of a class would share at least ``k`` catalogued bugs by chance, when its
    pairs share ``shared`` in all: each pair's count taken as Poisson with the class's mean."""
    count = n * (n - 1) / 2
    mean = shared / count if count else 0.0
    below = sum(math.exp(-mean) * mean ** i / math.factorial(i) for i in range(k))
    return count * max(0.0, 1.0 - below)


def _groups(pairs: list) -> list:
    """The students of 3 or more joined by listed pairs (connected components), each sorted."""
    parent: dict = {}

    def root(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for p in pairs:
        parent[root(p.a)] = root(p.b)
    members = defaultdict(list)
    for x in list(parent):
        members[root(x)].append(x)
    return sorted(sorted(m) for m in members.values() if len(m) >= 3)


def search_class(works_by_lesson: dict, left_out: dict | None = None) -> list:
    """A ``Lesson`` per lesson of ``works_by_lesson`` ({lesson: [Work]})."""
    return [search(lesson, works, (left_out or {}).get(lesson, 0)) for lesson, works in works_by_lesson.items()]
