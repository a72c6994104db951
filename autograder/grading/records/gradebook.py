"""The one way the grading tools open nbgrader's gradebook: ``with gradebook.opened(s) as gb``.

The gradebook (SQLite in ``DIR/course/gradebook.db``, or the PostgreSQL database of ``--db``) holds every score
nbgrader gave and every mark the instructor gave in formgrader; grades are filed under the course row
``COURSE_ID``. Opening it here, in one place, keeps every reader and writer on the same database and course row.
``ensure_indexes`` adds the indexes nbgrader's schema lacks, without which a class's grades are read back in time
that grows with the square of its size.
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


# What nbgrader's schema does not index: the columns its lookups of one submission's grades, comments and notebooks
# filter on (``SubmittedNotebook.grades``, the scores' subqueries, formgrader's lists). Without them each lookup reads
# the whole table, so reading a class back costs the square of its size (docs/speed.md).
INDEXES = {"mha_grade_notebook": ("grade", "notebook_id"), "mha_comment_notebook": ("comment", "notebook_id"),
           "mha_submitted_notebook_assignment": ("submitted_notebook", "assignment_id"),
           "mha_submitted_assignment_student": ("submitted_assignment", "student_id")}


def ensure_indexes(s: Settings) -> list:
    """Add ``INDEXES`` to the gradebook where they are missing (nbgrader ignores them; each is built once); returns
    the notes for the report: none, or why they could not be added (a PostgreSQL role that does not own the tables):
    the grades do not depend on them, only the time a large class takes."""
    from sqlalchemy import text

    try:
        with opened(s) as gb:
            for name, (table, column) in INDEXES.items():
                gb.db.execute(text(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({column})"))
            gb.db.commit()
    except Exception as exc:  # noqa: BLE001 - only speed depends on them
        why = (str(exc).splitlines() or [""])[0][:200]
        return [f"the gradebook's indexes could not be added ({type(exc).__name__}: {why}); grading is unchanged, but "
                "reading a large class back and formgrader are slower: let the tables' owner run "
                + "; ".join(f"CREATE INDEX IF NOT EXISTS {n} ON {t} ({c})" for n, (t, c) in INDEXES.items())]
    return []


def where(s: Settings) -> str:
    """The gradebook's location as messages show it (a database URL without its password)."""
    return dburl.without_password(s.gradebook_url)
