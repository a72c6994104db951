"""Everything the grading command does; the command line itself is ``python -m autograder.grade``
(``autograder/grade.py``), which runs these steps in order.

* ``settings``: the settings of a run, the course id and the exit statuses;
* ``intake``: the submissions' layouts, read into a roster (student ids, links refused, zips within limits);
* ``workspace``: the grading course folder, its kernelspec and the copies of the notebooks (``stage``);
* ``canary``: the model answers graded first, through the same pipeline;
* ``worker``: nbgrader's steps per (student, lesson) over the worker processes; ``state``: their records;
* what nbgrader runs, as ``autograder/nbgrader_config.py`` declares it: ``execute`` (sandboxed kernels; ``uids``,
  ``cgroups``), ``hidden_tests`` and ``learner_errors`` (autograde), ``feedback_page`` (feedback; ``page_safety``);
* flags and statuses: ``scan``, ``findings``, ``outcome``, ``marks``;
* ``results`` (the grades read back) and ``report`` (grades.csv, report.html, the export); ``csv_cells``: the one
  CSV writer (no cell opens as a formula); ``dburl``: the gradebook's URL without its password.
"""
