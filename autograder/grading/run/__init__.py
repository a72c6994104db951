"""Grading itself: the grading course and its copies of the notebooks (``workspace``), the canary that grades the
model answers first (``canary``), the worker processes, local or on a Dask cluster (``pool``, ``dask_entry``),
nbgrader's steps for one (student, lesson) in a worker (``worker``), the feedback pages handed to each learner
(``feedback_files``), and the term that grows download by download (``term``)."""
