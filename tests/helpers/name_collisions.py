"""Two different folder names that ``student_ids.student_id`` maps to the same id: the 8 hex digits of a generated id
are 32 bits, so among some 10^5 names with the same letters a pair shares them (the birthday bound)."""

from __future__ import annotations

import functools
import itertools

from autograder.grading.intake import student_ids

SEPARATORS = " ,.;'"


@functools.cache
def colliding_pair(first: str = "Petrov", last: str = "Ivan") -> tuple:
    """(a, b): two names spelled ``first``, punctuation, ``last``, with ``student_id(a) == student_id(b)``."""
    seen = {}
    for n in itertools.count(1):
        for seps in itertools.product(SEPARATORS, repeat=n):
            name = first + "".join(seps) + last
            sid = student_ids.student_id(name)
            if sid in seen:
                return seen[sid], name
            seen[sid] = name
