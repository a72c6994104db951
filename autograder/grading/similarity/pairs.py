"""Pairs and groups of students whose work in a lesson shares more rare evidence than the class makes likely.

Each piece of evidence a graded notebook holds is a key: a code fingerprint of an answer cell, the signature of a
wrong result no catalogued bug explains on a hidden test, a catalogued bug a hidden test named, a written answer
(normalised). The keys are indexed (key -> the students holding it), so only students who share a key are ever
compared: the work grows with the students that share each key, not with the square of the class.

What weighs nothing: fingerprints of the model answers and of what the lessons hand out (``evidence.expected``),
and any key more than ``common(n)`` of the class's n students hold. A code key held by df students weighs
log(1 + n / df). A pair's code share is the weight of the fingerprints both hold over the smaller of their own
totals: the part of the less original work that the other also has.

A pair is listed when it has one strong reason, or two supporting ones (``REASONS``). The thresholds are measured,
not assumed: ``tests/grading/test_similarity_proof.py`` builds a class of independent learners and disguised copies
and asks for at least 90 % of the copied pairs listed and at most 1 listed pair per 100 independent students.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from autograder.grading.similarity import evidence

COMMON_SHARE = 0.1  # held by more than this share of the class: common, weighs nothing
COMMON_MIN = 6  # ... and in a small class, by more than this many students
MIN_OWN_PRINTS = 8  # a pair is judged on code only when each holds this many fingerprints of its own
CODE_STRONG, CODE_SUPPORT = 0.5, 0.3  # code shares that are a strong, and a supporting, reason
CELL_STRONG = 0.8  # one answer cell's code share that is a strong reason (when each holds MIN_OWN_PRINTS there)
CANDIDATE = 0.15  # pairs sharing less of their code than this are judged only on their other evidence
WRONG_STRONG = 2  # tests with the same rare wrong numbers: a strong reason (one is a supporting one)
BUGS_STRONG, BUGS_SUPPORT = 3, 2  # rare catalogued bugs held together
MIN_ANSWER_WORDS = 8  # a written answer shorter than this is not evidence
MODEL_NGRAM, MODEL_CLOSE, MODEL_MIN_NGRAMS = 4, 0.5, 8  # written answers close to the model answer
REASONS = {
    "code": "their own code (beyond the model answer, the given code and what many in the class wrote) is alike",
    "wrong numbers": "the same wrong results on the grader's fixed inputs, which no catalogued bug explains",
    "bugs": "the same catalogued bugs, each rare in the class",
    "written answer": "the same written answer, but for case, spacing and punctuation",
}


def common(n: int) -> float:
    """How many of a class of ``n`` may hold a key before it is common and weighs nothing."""
    return max(COMMON_MIN, COMMON_SHARE * n)


def weight(n: int, df: int) -> float:
    return math.log(1 + n / df)


@dataclass
class Pair:
    """Two students of one lesson, with why they are listed."""

    lesson: str
    a: str
    b: str
    code_share: float = 0.0
    code_ratio: float | None = None  # the code weight they share over what a random pair of the class shares
    shared_prints: dict = field(default_factory=dict)  # grade_id -> fingerprints both hold (rare ones)
    wrong: list = field(default_factory=list)  # [(test, how many students share it)]
    bugs: list = field(default_factory=list)  # [(test, bug, how many students share it)]
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
    limit = common(n)
    code: dict = defaultdict(list)  # (grade_id, fingerprint) -> indices of the works holding it
    other: dict = defaultdict(list)  # (kind, grade_id, what) -> indices of the works holding it
    model = {gid: evidence.normalised(t) for gid, t in evidence.model_written(lesson).items()}
    for i, w in enumerate(works):
        for gid, prints in w.prints.items():
            for h in prints:
                if h not in expected:
                    code[(gid, h)].append(i)
        for gid, sig in w.wrong.items():
            other[("wrong numbers", gid, sig)].append(i)
        for gid, bug in w.bugs.items():
            other[("bugs", gid, bug)].append(i)
        for gid, text in w.answers.items():
            norm = evidence.normalised(text)
            if len(norm.split()) >= MIN_ANSWER_WORDS and norm != model.get(gid):
                other[("written answer", gid, norm)].append(i)
    own = [0.0] * n  # each work's own code weight: keys not common
    own_prints = [0] * n
    random_pair = 0.0  # the code weight a random pair of the class shares, on average
    together: dict = defaultdict(float)  # i * n + j (i < j) -> the code weight both hold
    rare = {}  # (grade_id, fingerprint) -> how many hold it, for the keys that are not common
    for key, holders in code.items():
        df = len(holders)
        if df > limit:
            continue
        rare[key] = df
        w = weight(n, df)
        for i in holders:
            own[i] += w
            own_prints[i] += 1
        random_pair += w * df * (df - 1) / max(n * (n - 1), 1)
        for x in range(df):
            for y in range(x + 1, df):
                together[holders[x] * n + holders[y]] += w
    shared = defaultdict(list)  # i * n + j -> the other keys both hold
    for key, holders in other.items():
        if 2 <= len(holders) <= limit:
            for x in range(len(holders)):
                for y in range(x + 1, len(holders)):
                    shared[holders[x] * n + holders[y]].append((key, len(holders)))
    candidates = set(shared)
    for ij, w in together.items():
        i, j = divmod(ij, n)
        if min(own_prints[i], own_prints[j]) >= MIN_OWN_PRINTS and w >= CANDIDATE * min(own[i], own[j]):
            candidates.add(ij)
    pairs = []
    for ij in candidates:
        i, j = divmod(ij, n)
        pair = _judged(lesson, works[i], works[j], together.get(ij, 0.0), shared.get(ij, []), rare, n,
                       min(own[i], own[j]), min(own_prints[i], own_prints[j]), random_pair)
        if any(s == "strong" for _, s, _ in pair.reasons) or len(pair.reasons) >= 2:
            pairs.append(pair)
    pairs.sort(key=lambda p: (tuple(-x for x in p.strength), p.a, p.b))
    return Lesson(lesson, n, left_out, pairs, _groups(pairs),
                  [(w.student, gid, share) for w in works for gid, share in close_to_model(w)],
                  [(w.student, flag) for w in works for flag in w.given])


def _judged(lesson, a, b, code_weight, others, rare, n, own, own_prints, random_pair) -> Pair:
    """The pair of ``a`` and ``b`` with its reasons: ``code_weight`` of rare code both hold, ``others`` [(key, how
    many hold it)] of the other evidence both hold."""
    first, second = sorted([a.student, b.student])
    pair = Pair(lesson, first, second)
    if code_weight and own_prints >= MIN_OWN_PRINTS:
        pair.code_share = code_weight / own
        pair.code_ratio = code_weight / random_pair if random_pair else None
        copied = []  # answer cells whose own code is mostly the other's
        for gid, prints in sorted(a.prints.items()):
            mine = {h for h in prints if (gid, h) in rare}
            theirs = {h for h in b.prints.get(gid, ()) if (gid, h) in rare}
            both = mine & theirs
            if both:
                pair.shared_prints[gid] = both
                smaller = min(mine, theirs, key=lambda side: sum(weight(n, rare[(gid, h)]) for h in side))
                cell_share = sum(weight(n, rare[(gid, h)]) for h in both) / sum(weight(n, rare[(gid, h)])
                                                                                 for h in smaller)
                if min(len(mine), len(theirs)) >= MIN_OWN_PRINTS and cell_share >= CELL_STRONG:
                    copied.append(f"{gid} ({100 * cell_share:.0f}%)")
        more = f", {pair.code_ratio:.0f} times what two students of this class share on average" \
            if pair.code_ratio else ""
        said = f"{100 * pair.code_share:.0f}% of the less original work's own code, in " \
               f"{', '.join(sorted(pair.shared_prints))}{more}"
        if copied:
            said += "; almost all of the own code of " + ", ".join(copied)
        if pair.code_share >= CODE_STRONG or copied:
            pair.reasons.append(("code", "strong", said))
        elif pair.code_share >= CODE_SUPPORT:
            pair.reasons.append(("code", "supporting", said))
    kinds = defaultdict(list)
    for (kind, gid, what), df in others:
        kinds[kind].append((gid, what, df))
    pair.wrong = sorted((gid, df) for gid, _, df in kinds["wrong numbers"])
    if pair.wrong:
        level = "strong" if len(pair.wrong) >= WRONG_STRONG else "supporting"
        pair.reasons.append(("wrong numbers", level, "the same wrong results in " + ", ".join(
            f"{t} ({df} students)" for t, df in pair.wrong)))
    pair.bugs = sorted(kinds["bugs"])
    if len(pair.bugs) >= BUGS_SUPPORT:
        level = "strong" if len(pair.bugs) >= BUGS_STRONG else "supporting"
        pair.reasons.append(("bugs", level, ", ".join(f"{bug} in {t} ({df} students)" for t, bug, df in pair.bugs)))
    pair.answers = sorted(gid for gid, _, _ in kinds["written answer"])
    if pair.answers:
        pair.reasons.append(("written answer", "strong", "identical: " + ", ".join(pair.answers)))
    return pair


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
