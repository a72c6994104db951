"""Everything the grading command does; the command line itself is ``python -m autograder.grade``
(``autograder/grade.py``), which runs these steps in order. One room per part, each importing only from the rooms
listed before it (``autograder/proofs/layout.py`` declares the order and ``tests/unit/proofs/test_layout.py`` proves it):

* ``pipeline``: nbgrader's own steps as ``autograder/nbgrader_config.py`` declares them: the sandboxed execute step
  and the hidden tests decided in the grader, learner-facing errors, the cell metadata check, the feedback page and
  formgrader's page;
* ``intake``: what the command is handed: the class folder or zip read into a roster of each student's notebook per
  lesson, the LMS downloads' layouts, student ids, the static scan of a submission's code;
* ``records``: what a run keeps and decides about each notebook: the settings and exit statuses, the gradebook, each
  (student, lesson) record, its status and flags, its tests' outcomes and the instructor's marks;
* ``run``: grading itself: the grading course and its copies of the notebooks, the canary, the worker processes
  (local or Dask), nbgrader's steps per (student, lesson), the feedback pages handed to each learner, and the term
  that grows download by download;
* ``reports``: what a run hands back: the grades read back, grades.csv, report.html, the export, the instructor's
  insights and the LMS import files.
"""
