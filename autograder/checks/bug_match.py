"""The one bug matcher: which catalogued bug of a function does what the learner's code did?

Every hidden test that names a bug asks here. ``fits(bug)`` says whether one catalogued bug behaves as the
learner's code did on everything observed (the same values on every case, the same kind of error where it raised
one, the same count); a bug whose code fails while being tried, where the learner's did not, does not fit. An
error's text is never compared: numpy words a shape error alike whichever product of a function failed, so only
behaviour over several inputs tells two bugs apart (``runner.Raised``). ``first_fit`` takes the first bug of the catalog's order that fits; ``agreed_fit``
names a bug only when every bug that fits has the same diagnosis (two bugs that agree on one input rarely agree on
several inputs of different sizes; when they still do, naming either could mislead).
"""

from __future__ import annotations

import numpy as np


def _candidates(function: str) -> list:
    from autograder import bugs  # imported on a failure only: the catalog's lessons load with it

    return bugs.for_function(function)


def _fits(bug, fits) -> bool:
    try:
        with np.errstate(all="ignore"):
            return bool(fits(bug))
    except Exception:  # noqa: BLE001 - a bug that fails on these inputs is not the learner's
        return False


def first_fit(function: str, fits):
    """The first catalogued bug of ``function`` (catalog order) for which ``fits(bug)`` holds, or None."""
    return next((bug for bug in _candidates(function) if _fits(bug, fits)), None)


def agreed_fit(function: str, fits):
    """The bug of ``function`` that fits, when every bug that fits has one diagnosis; else None."""
    found = [bug for bug in _candidates(function) if _fits(bug, fits)]
    return found[0] if len({bug.diagnosis for bug in found}) == 1 else None

