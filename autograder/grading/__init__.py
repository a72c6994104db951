"""Grading a whole class: input layouts (``intake``), the hardened execute step (``execute``), the static scan for
suspicious code (``scan``), per-notebook findings (``findings``) and the report (``report``). The command itself is
``python -m autograder.grade`` (``autograder/grade.py``)."""
