"""The one way the grading tools open nbgrader's gradebook: ``with gradebook.opened(s) as gb``.

The gradebook (SQLite in ``DIR/course/gradebook.db``, or the PostgreSQL database of ``--db``) holds every score
nbgrader gave and every mark the instructor gave in formgrader; grades are filed under the course row
``COURSE_ID``. Opening it here, in one place, keeps every reader and writer on the same database and course row.
"""

from __future__ import annotations

import contextlib

from autograder.grading.records import dburl
from autograder.grading.records.settings import COURSE_ID, Settings


@contextlib.contextmanager
def opened(s: Settings):
    """nbgrader's ``Gradebook`` of the run's settings, closed on leaving the block."""
    from nbgrader.api import Gradebook  # imported here: nbgrader's database layer costs a second to import

    with Gradebook(s.gradebook_url, COURSE_ID) as gb:
        yield gb


def where(s: Settings) -> str:
    """The gradebook's location as messages show it (a database URL without its password)."""
    return dburl.without_password(s.gradebook_url)
