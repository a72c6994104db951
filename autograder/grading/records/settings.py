"""The grading command's settings, the course id nbgrader files the grades under, and its exit statuses.

``Settings`` is what a run depends on; its ``key`` changes whenever grades made under older settings would no longer
be valid (``workspace.prepare_course`` then rebuilds the course and regrades everything, carrying the instructor's
marks over). The set of lessons graded is not part of it: grading another set regrades nothing. It is computed once and
carried with the settings: the course marker, every record and every worker process get the same value.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from autograder import course
from autograder.grading.records import dburl
from autograder.kernel import sandbox

COURSE_ID = "mha-course"  # nbgrader's course row: PostgreSQL enforces the foreign key SQLite ignores
EXIT_LAYOUT, EXIT_INTEGRITY, EXIT_GRADING_ERROR, EXIT_SETUP, EXIT_CANARY, EXIT_MARKS = 2, 3, 4, 5, 6, 7
EXIT_HELP = """exit status:
  0  every notebook graded (written answers may still await manual grading: see the report)
  2  the submissions' layout was not understood, a bad option, or a gradebook that cannot be used (the database
     cannot be reached, is not UTF-8 or is read-only; OUT is not writable): nothing was graded, and the
     message says what to do
  3  the original submissions changed during grading
  4  grading errors: the grader failed on some notebooks (not the learners); their scores are left empty and
     listed first in report.html; fix the cause and run the command again, which grades only those
  5  this machine or its Dask cluster cannot grade safely as set up (e.g. root without bubblewrap, a Dask
     worker without this course); nothing was graded
  6  the canary failed: the lessons' own model answers did not earn full marks here, so no student was graded;
     the message says what broke and how to fix it
  7  every notebook had to be graded again (hidden checks, a lesson or settings changed), but the marks in the
     gradebook could not be read to carry them over; nothing was changed, and the message says what to do"""


class SetupError(RuntimeError):
    """This machine cannot grade safely as set up; the message says what to install or change."""


class GradebookUnusable(RuntimeError):
    """The gradebook (its database, or the folder of its SQLite file) cannot be used; ``grading/records/dbcheck.py``
    raises it, before anything is read or written, with one line that names the problem and the command that fixes it.
    Exit status ``EXIT_LAYOUT``."""

    def __init__(self, message: str):
        super().__init__(" ".join(message.split()))  # one line, whatever a name in it holds


@dataclass
class Settings:
    out: str
    lessons: list
    db_url: str = ""
    workers: int = 1
    timeout: int = 60
    memory_mb: int = 2048
    max_output: int = 1_000_000
    max_notebook_output: int = 20 * 2**20  # all of a notebook's output (SafeExecute)
    notebook_timeout: int = 300
    max_notebook_mb: int = 20  # a larger notebook is malformed, read no further (size_limits.NotebookLimits)
    isolation: str = field(default_factory=sandbox.isolation_level)
    scheduler: str = ""  # a Dask scheduler's address (autograder/grading/run/pool.py); where grading runs, not a grade
    warm_kernels: bool = True  # kernels forked from a warm server (autograder/kernel/warm_kernels.py); how, not a grade
    class_decides_lessons: bool = False  # grade only those of ``lessons`` some student handed in (``make grade``)
    reuse_canary: bool = True  # a canary pass is reused while nothing it depends on changed (grading/run/canary.py)
    close: list = field(default_factory=list)  # lessons whose deadline passed: not handed in counts missing, 0
    # none of these three decides a score: they say what the outputs show and how the LMS import files are filled
    due: dict = field(default_factory=dict)  # {lesson: due date (``lms_layouts.parse_due``'s text)}: later work is late
    canvas_assignments: dict = field(default_factory=dict)  # {lesson: Canvas assignment id} (``lms_export``)
    lms: str = ""  # the LMS the class came from (``class_roster.Roster.lms``), for the import files without a template
    similarity: bool = True  # write similarity.html and similarity.csv (``reports/similarity_page.py``); not a grade

    def __post_init__(self):
        self.db_url = normalize_db_url(self.db_url)

    @property
    def notebook_limits(self):
        """What one notebook may hold (``autograder/grading/intake/size_limits.py``): ``max_notebook_mb``, and the
        stored output kept within it."""
        from autograder.grading.intake.size_limits import NotebookLimits

        size = max(1, int(self.max_notebook_mb)) * 2**20
        default = NotebookLimits()
        return NotebookLimits(max_bytes=size, max_cell_output=min(default.max_cell_output, size),
                              max_output=min(default.max_output, size))

    @property
    def course_root(self) -> Path:
        return Path(self.out) / "course"

    @property
    def gradebook_url(self) -> str:
        return self.db_url or f"sqlite:///{self.course_root / 'gradebook.db'}"

    @functools.cached_property
    def key(self) -> str:
        """Changes whenever grades made under the old settings would no longer be valid (computed once, then
        carried: pickled with the settings to every worker). Every lesson's source counts, graded or not, so that
        grading another set of lessons keeps the grades of the others."""
        parts = [json.dumps([dburl.without_password(self.gradebook_url), self.timeout, self.memory_mb,
                             self.max_output, self.max_notebook_output, self.notebook_timeout, self.isolation])]
        parts += [(course.SOLUTIONS / f"{name}.py").read_text(encoding="utf-8") for name in course.lesson_names()]
        parts += [p.read_text(encoding="utf-8") for p in grade_deciding_sources()]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# Where grading starts: nbgrader's pipeline (every course folder's config loads it) and the worker that runs it
# and writes each notebook's record.
GRADING_ENTRY_POINTS = ("autograder.nbgrader_config", "autograder.grading.run.worker")
# Packages grading loads whole: a lesson's hidden tests and bugs are imported by the lesson's name
# (``registry.tests_of``, ``bugs``), and the kernel library is copied whole into the sandbox, its launcher run as a
# program (``workspace.write_kernel_library``).
LOADED_WHOLE = ("autograder.checks", "autograder.bugs", "autograder.kernel")


@functools.lru_cache(maxsize=None)
def grade_deciding_sources() -> tuple:
    """Every file grading runs, so a change to any of it makes earlier grades stale and reruns the canary: each
    module the grading entry points import (read from the source, imports inside functions too), the packages
    grading loads whole, and the self-check modules the graded kernel imports."""
    from autograder.course import imports

    graph = imports.read_graph()
    modules = imports.reached(graph, GRADING_ENTRY_POINTS)
    modules |= {m for m in graph.modules if any(m == p or m.startswith(p + ".") for p in LOADED_WHOLE)}
    modules |= {m.rsplit(".", k)[0] for m in set(modules) for k in range(1, m.count(".") + 1)}  # packages run their __init__
    return tuple(sorted({graph.modules[m] for m in modules} | {course.SOLUTIONS / n for n in course.SELFCHECK_FILES}))


def normalize_db_url(url: str) -> str:
    """``postgresql://`` means psycopg 3 to SQLAlchemy 2.1; use the psycopg2 driver we install when that is absent."""
    if url.startswith(("postgresql://", "postgres://")):
        import importlib.util

        if importlib.util.find_spec("psycopg") is None:
            return "postgresql+psycopg2://" + url.split("://", 1)[1]
    return url
