"""Grade a whole class in one command.

    python -m autograder.grade SUBMISSIONS [--out DIR] [--db URL] [--workers N] [--lessons 01_warmup ...]
                               [--close 01 ...] [--due 01=2026-10-01T23:59 ...] [--canvas-assignments 01=7001 ...]
                               [--scheduler tcp://host:8786]
    make grade SUBMISSIONS=path

``SUBMISSIONS`` is a folder of per-student folders, a zip of one, or a course folder after ``nbgrader collect``
(``autograder/grading/intake/class_folder.py`` lists the layouts). The command builds a grading course in ``DIR/course``
from the lesson sources, copies every notebook into it (the originals are only read, and their hashes are checked at the
end), then runs the real ``nbgrader autograde`` and ``generate_feedback`` for each student, several students at a time
(``--workers``, default: one per core), and finally ``nbgrader export``. ``DIR`` is the term: each run takes in what
its download holds (``DIR/handed-in/``, ``DIR/term.json``) and keeps every lesson, grade, mark and page of earlier
runs (``autograder/grading/run/term.py``), and every output below covers every lesson graded into ``DIR`` so far. It
leaves:

* ``DIR/grades.csv``: student, folder, each lesson's status, score, maximum, autograded and manual points, points
  awaiting the instructor, late, submission time; total, maximum, pending points, percent (empty while any point
  awaits the instructor), flags (for an LMS); ``DIR/student_ids.csv``: student id -> folder;
* ``DIR/feedback/<student>/<lesson>.html``: what each student receives;
* ``DIR/report.html``: every student's scores and flags, with the score distribution;
* ``DIR/insights.html`` and ``DIR/misconceptions.csv``: the instructor's view of the class (``insights``);
* ``DIR/similarity.html`` and ``DIR/similarity.csv``: work more alike than the class makes likely, with its evidence,
  for the instructor to look at (``similarity_page``; ``--no-similarity`` writes neither);
* ``DIR/nbgrader_export.csv``: nbgrader's own export of the gradebook;
* ``DIR/lms-import/``: for Canvas or Moodle, the instructor's own export from ``DIR/lms-templates/`` with the final
  scores filled in, for the LMS's import (``lms_export``).

This module is the command line and ``run``, which calls the steps in order; each step lives in a room of
``autograder/grading/`` (``intake``, ``records``, ``run``, ``reports``, ``similarity``; nbgrader's own steps in
``pipeline``):

1. refuse, before anything is read, unpacked or written, a gradebook or ``OUT`` that cannot be used (``dbcheck``),
   an unsafe machine (``workspace.preflight``) and a Dask cluster that cannot grade (``pool.preflight``);
   ``class_folder.collect``: read the submissions' layout into a roster (student id -> lesson -> notebook); ``term``:
   take its hand-ins into ``DIR`` and make the roster of the whole term (``--close``: a lesson past its deadline);
2. ``workspace``: build the course folder and its sandboxed kernelspec; ``gradebook.ensure_indexes``;
3. ``workspace.stage``: copy what is new, changed or unfinished (``state``: a batch killed halfway resumes);
4. ``canary``: when anything is to be graded, first grade the model answers of every lesson through the same
   pipeline; unless they earn full marks, no student is graded and the command exits with ``EXIT_CANARY`` and
   says what broke;
5. ``pool``: grade it over ``--workers`` processes (or on a Dask cluster), each running ``worker``'s steps, then
   regenerate the feedback whose grades changed;
6. ``results``, ``report``, ``lms_export``, ``insights`` and ``similarity_page``: read the grades back and write the files above, and
   tell what changed since the last run (``insights.changes``).

``Settings`` and the exit statuses are in ``autograder/grading/records/settings.py``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import sys
import time
from pathlib import Path

from autograder import course
from autograder.course import notebooks
from autograder.grading.intake import class_folder, class_roster, integrity, lms_layouts, student_ids
from autograder.grading.records import dbcheck, dburl, gradebook, marks
from autograder.grading.reports import insights, lms_export, report, results, similarity_page
from autograder.grading.run import canary, feedback_files, pool, term, worker, workspace
from autograder.grading.records.settings import (EXIT_CANARY, EXIT_GRADING_ERROR, EXIT_HELP, EXIT_INTEGRITY,
                                                 EXIT_LAYOUT, EXIT_MARKS, EXIT_SETUP, GradebookUnusable, Settings,
                                                 SetupError)
from autograder.kernel import leftovers

__all__ = ["Settings", "run", "main", "EXIT_LAYOUT", "EXIT_INTEGRITY", "EXIT_GRADING_ERROR", "EXIT_SETUP",
           "EXIT_CANARY", "EXIT_MARKS"]


def run(submissions, s: Settings, *, progress=True, log=print) -> dict:
    """Grade everything; returns {"rows", "csv", "report", "graded", "integrity", "notes"}."""
    old_umask = os.umask(0o077)  # nothing in the workspace is readable by the sandbox uid or other users
    old_url = os.environ.get(dburl.ENV)
    try:
        return _run(submissions, s, progress=progress, log=log)
    finally:
        os.umask(old_umask)
        if old_url is None:  # the password set for this run's nbgrader steps does not outlive it
            os.environ.pop(dburl.ENV, None)
        else:
            os.environ[dburl.ENV] = old_url


def _run(submissions, s: Settings, *, progress=True, log=print) -> dict:
    os.environ["PATH"] = notebooks.nbgrader_env()["PATH"]  # nbgrader runs `alembic` from this venv
    if dburl.has_password(s.db_url):  # for the course's nbgrader_config.py, which holds no password
        os.environ[dburl.ENV] = s.db_url
    out = Path(s.out)
    # what refuses the run comes before anything is read, unpacked or written: the gradebook (its database, or the
    # SQLite file's folder) and OUT, this machine's sandbox, the Dask cluster
    dbcheck.check(s)
    workspace.preflight(s)
    pool.preflight(s)
    original = Path(submissions)
    if original.exists() and (out.resolve() == original.resolve() or original.resolve() in out.resolve().parents):
        raise class_roster.LayoutError(f"the output folder {out} is inside the submissions {original}; "
                                       "put --out elsewhere")
    # a rebuild replaces the gradebook: its marks are read first, and the run stops here, before anything is
    # written, when they cannot be (marks.MarksUnreadable)
    carried = marks.before_rebuild(s) if workspace.course_changed(s) else None
    out.mkdir(parents=True, exist_ok=True)
    before = integrity.tree_hashes(original)
    earlier = term.load(out)  # refused (exit 2) before anything is read or written when OUT's record is unreadable
    known = student_ids.known_ids(out)
    roster = class_folder.collect(original, s.lessons, out, known=known, limits=s.notebook_limits,
                                  earlier=term.lms_ids(earlier, known),
                                  checked=term.checked(earlier, s.notebook_limits))  # read as notebooks before
    if s.class_decides_lessons:
        s = dataclasses.replace(s, lessons=roster.handed_in(s.lessons), class_decides_lessons=False)
        log(f"lessons taken from this download: {', '.join(s.lessons) or 'none'} (those some student handed in; "
            "LESSONS=... chooses others)")
    roster.keep_lessons(s.lessons)
    student_ids.remember(out, roster)  # no later folder takes one of these ids
    now = copy.deepcopy(earlier)
    notes = term.take_in(out, now, roster, s.lessons, s.notebook_limits)
    term.close(now, s.close)
    term.save(out, now)
    closed = term.newly_missing(earlier, now)
    whole = term.roster(out, now, roster)  # every student and lesson graded into OUT so far, each at its latest
    s = dataclasses.replace(s, lessons=now.lessons, close=[])
    last = insights.reported(s)  # what the last run's outputs said: this run's changes are told against it
    if s.isolation == "uid":
        leftovers.remove_stale_sandboxes()  # of an earlier run that was killed
    rebuild = workspace.prepare_course(s, log, carried)
    notes += gradebook.ensure_indexes(s)  # what nbgrader's schema lacks: reading a class back stays linear
    todo = workspace.stage(s, whole)
    stale = worker.stale_feedback(s, whole, todo)  # manual grades came in since their feedback was written
    with pool.pool_for(s) as workers:
        # raises CanaryFailed before any student is graded; with nothing to grade there is nothing to protect
        try:
            checked = canary.run(s, log, workers) if todo or stale else canary.Checked([], 0.0)
        except canary.CanaryFailed:
            if rebuild:
                rebuild.restore()  # the earlier runs' course, records and grades, as they were
            raise
        if rebuild:
            rebuild.discard()
        workspace.ensure_students(s, whole.students)
        graded = pool.run_tasks(s, todo, progress=progress, pool=workers)
        refreshed = pool.run_tasks(s, stale, progress=False, pool=workers)
    if s.isolation == "uid":  # the kernels of a worker that died during this run (a Dask worker's too, on this machine)
        leftovers.remove_stale_sandboxes()
    notes += report.write_nbgrader_export(s)
    rows = results.read_rows(s, whole)
    feedback_files.write_notices(out, whole)  # a missing or unreadable notebook still gets a page saying so
    notes += roster.notes + workspace.isolation_notes(s)
    after = integrity.tree_hashes(original)
    intact = before == after
    if not intact:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        notes.append("THE ORIGINAL SUBMISSIONS CHANGED DURING GRADING: " + ", ".join(changed[:20]))
    csv_path = report.write_csv(s, rows)
    report.write_student_ids(s, whole)
    notes += lms_export.write(dataclasses.replace(s, lms=whole.lms), rows)
    changed = insights.changes(s, rows, last, todo, stale, closed)
    try:
        insights.write(s, rows, changed)
    except Exception as exc:  # noqa: BLE001 - the grades and feedback do not depend on it; the report says so
        notes.append(f"insights.html could not be written: {type(exc).__name__}: {exc}")
    try:
        similarity_page.write(s, rows) if s.similarity else similarity_page.remove(s)
    except Exception as exc:  # noqa: BLE001 - as the insights: nothing else depends on it; the report says so
        notes.append(f"similarity.html could not be written: {type(exc).__name__}: {exc}")
    html_path = report.write_report(s, rows, notes, insights.change_lines(changed, limit=None))
    insights.remember_reported(s, rows)  # what the next run's changes are told against
    return {"rows": rows, "csv": csv_path, "report": html_path, "graded": graded, "integrity": intact,
            "notes": notes, "refreshed": refreshed, "errors": results.grading_errors(rows), "canary": checked,
            "changed": changed}


def _resolve_lessons(requested) -> list:
    try:
        return course.lessons_named(requested) if requested else course.lesson_names()
    except KeyError as exc:
        raise SystemExit(exc.args[0]) from None


def _per_lesson(pairs, option: str, check) -> dict:
    """{lesson: value} of ``--due``/``--canvas-assignments`` pairs ``01=value`` (a lesson's number or name); a bad
    pair is an error naming it (exit status 2, as a bad option)."""
    chosen = {}
    for pair in pairs or ():
        lesson, _, value = pair.partition("=")
        try:
            [lesson] = course.lessons_named([lesson.strip()])
            check(value.strip())
        except (KeyError, ValueError) as exc:
            print(f"error: {option} {pair!r}: {exc.args[0] if isinstance(exc, KeyError) else exc}; give "
                  f"<lesson>=<value>, e.g. {option} 01=" + ("2026-10-01T23:59" if option == "--due" else "12345"),
                  file=sys.stderr)
            raise SystemExit(EXIT_LAYOUT) from None
        chosen[lesson] = value.strip()
    return chosen


def _canvas_id(text: str) -> None:
    if not text.isdigit():
        raise ValueError("a Canvas assignment id is the number in its address (.../assignments/12345)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.grade", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=class_folder.layout_help(["01_warmup"]) + "\n\n" + EXIT_HELP)
    parser.add_argument("submissions", help="folder of per-student folders, a zip of one, or a collected course")
    parser.add_argument("--out", default="grading", help="grading workspace and results (default: ./grading)")
    parser.add_argument("--db", default=os.environ.get(dburl.ENV, ""),
                        help=f"gradebook URL without a password, e.g. postgresql://grader@host/gradebook (default: "
                             f"${dburl.ENV}, else SQLite in OUT/course/gradebook.db); the password goes in "
                             f"PGPASSWORD or ~/.pgpass, or the whole URL in ${dburl.ENV}, never on the command line")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="students graded at once")
    parser.add_argument("--lessons", nargs="+", help="lessons this run takes from SUBMISSIONS and grades (names or "
                        "numbers, e.g. 01 05; default: those at least one student handed in). Every lesson graded "
                        "into OUT before stays, with its grades and marks")
    parser.add_argument("--close", nargs="+", default=[], metavar="LESSON",
                        help="lessons whose deadline has passed: every student of OUT who never handed one in counts "
                             "missing, 0 (listed student by student); until then such a lesson counts nowhere")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per cell before it is stopped")
    parser.add_argument("--memory-mb", type=int, default=2048, help="address-space limit of each kernel")
    parser.add_argument("--max-output", type=int, default=1_000_000, help="bytes of output kept per cell")
    parser.add_argument("--max-notebook-output", type=int, default=20 * 2**20,
                        help="bytes of output kept per notebook, all cells and kinds of output (default: 20 MB)")
    parser.add_argument("--notebook-timeout", type=int, default=300,
                        help="seconds a whole notebook may run before its kernel is stopped")
    parser.add_argument("--max-notebook-mb", type=int, default=20,
                        help="a larger notebook is not read, and is graded as malformed (default: 20)")
    parser.add_argument("--fresh-canary", action="store_true",
                        help="grade the model answers of every lesson again, even where an earlier pass still holds")
    parser.add_argument("--scheduler", default=os.environ.get("MHA_SCHEDULER", ""),
                        help="grade on a running Dask cluster, e.g. tcp://host:8786 (default: $MHA_SCHEDULER, else "
                             "on this machine); needs a PostgreSQL --db and the course and OUT at the same paths on "
                             "every worker (docs/grading.md)")
    parser.add_argument("--due", nargs="+", metavar="LESSON=WHEN",
                        help="due dates, e.g. --due 01=2026-10-01T23:59 05=2026-10-15 (ISO 8601; a date alone is "
                             "the end of that day; without an offset, this machine's local time): work the LMS says "
                             "was handed in later is marked late (grades.csv, the report, the LMS import file); "
                             "Canvas's own late mark is kept whatever this says")
    parser.add_argument("--canvas-assignments", nargs="+", metavar="LESSON=ID",
                        help="the Canvas assignment of each lesson, e.g. 01=12345 (the number in the assignment's "
                             "address), for lms-import/canvas.csv; by default a lesson's assignment is the one of "
                             "your gradebook export in OUT/lms-templates/ whose name matches the lesson's")
    parser.add_argument("--no-similarity", action="store_true",
                        help="write no similarity.html or similarity.csv (and remove an earlier run's)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.db and args.db != os.environ.get(dburl.ENV) and dburl.has_password(args.db):
        print(f"error: --db holds a password, which other users can read in the process list and which stays in "
              f"your shell history; give --db {dburl.without_password(args.db)} and put the password in "
              f"PGPASSWORD or ~/.pgpass (or the whole URL in {dburl.ENV})", file=sys.stderr)
        return EXIT_LAYOUT
    s = Settings(out=str(Path(args.out).resolve()), lessons=_resolve_lessons(args.lessons), db_url=args.db,
                 class_decides_lessons=not args.lessons, close=_resolve_lessons(args.close) if args.close else [],
                 workers=max(1, args.workers), timeout=args.timeout, memory_mb=args.memory_mb,
                 max_output=args.max_output, max_notebook_output=args.max_notebook_output,
                 notebook_timeout=args.notebook_timeout, scheduler=args.scheduler,
                 max_notebook_mb=args.max_notebook_mb, reuse_canary=not args.fresh_canary,
                 due=_per_lesson(args.due, "--due", lms_layouts.parse_due),
                 canvas_assignments=_per_lesson(args.canvas_assignments, "--canvas-assignments", _canvas_id),
                 similarity=not args.no_similarity)
    started = time.monotonic()
    try:
        result = run(args.submissions, s, progress=not args.quiet)
    except (class_roster.LayoutError, GradebookUnusable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_LAYOUT
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SETUP
    except canary.CanaryFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CANARY
    except marks.MarksUnreadable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_MARKS
    except pool.ClusterLost as exc:
        print(f"GRADING ERRORS: {exc}", file=sys.stderr)
        return EXIT_GRADING_ERROR
    rows = result["rows"]
    where = f"on the Dask cluster at {s.scheduler}" if s.scheduler else f"({s.workers} workers)"
    print(f"graded {result['graded']} notebooks in {time.monotonic() - started:.1f} s "
          f"{where}; {len(rows)} students; {result['canary'].summary()}")
    if result["changed"]:
        print("changed since the last run, or graded in this one (old -> new score; - when not graded before; why):")
        print("\n".join(insights.change_lines(result["changed"])))
    else:
        print("no score or state changed since the last run")
    if result["refreshed"]:
        print(f"feedback pages rebuilt for {result['refreshed']} notebooks (marks or comments entered since their "
              "last page, or a page that was missing)")
    print("\n".join(report.distribution(rows)))
    for note in result["notes"]:
        print("note:", note)
    print(f"grades:   {result['csv']}\nreport:   {result['report']}\nfeedback: {Path(s.out) / 'feedback'}\n"
          f"insights: {Path(s.out) / 'insights.html'} (misconceptions: {Path(s.out) / 'misconceptions.csv'})")
    if s.similarity:
        print(f"similar work, to look at: {Path(s.out) / 'similarity.html'} ({Path(s.out) / 'similarity.csv'})")
    if not result["integrity"]:
        return EXIT_INTEGRITY
    if result["errors"]:
        print(f"GRADING ERRORS: the grader failed on {len(result['errors'])} notebooks (not the learners); their "
              "scores are left empty. Fix the cause and run the command again; it grades only these:",
              file=sys.stderr)
        for student, lesson, reason in result["errors"]:
            print(f"  {student} {lesson}: {reason}", file=sys.stderr)
        return EXIT_GRADING_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
