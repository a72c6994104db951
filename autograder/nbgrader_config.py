"""nbgrader settings shared by every course folder the build and the grading tools create.

Each such folder gets an ``nbgrader_config.py`` that loads this file (``load_subconfig``), so instructors and
tests grade with the same settings.
"""

c = get_config()  # type: ignore[name-defined]  # noqa: F821 - provided by traitlets when nbgrader loads a config file

# A test cell that runs longer than this is stopped and scores 0 (infinite loops, runaway code).
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True
# A submission that deleted a test cell gets it back (and graded) instead of silently losing it.
c.OverwriteCells.add_missing_cells = True
# Keep at most this much printed output per cell in the graded notebook and feedback.
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 60
# What a learner sees in place of a solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
# nbconvert validates the notebook against nbformat's schema once, after the last step, instead of after every step
# (autograde's two conversions have five and eight): the same check, once per conversion
c.Exporter.optimistic_validation = True

# The autograde pipeline, declared once: every grading path (``make grade``, the grading tests, the mutation
# harness) runs it. ``SafeExecute`` runs each notebook in the sandboxed kernel and each hidden test in this
# process (autograder/grading/pipeline/execute.py, hidden_tests.py); nbgrader's own steps follow. Hidden-test inputs are
# salted afresh by each grading process, so results cannot be prepared in advance; the salt never leaves it.
import os as _os  # noqa: E402
import secrets as _secrets  # noqa: E402

from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties, ClearOutput, DeduplicateIds, IgnorePattern, LimitOutput, OverwriteCells,
    OverwriteKernelspec, SaveAutoGrades,
)

from autograder.grading.pipeline import feedback_page, formgrader_page  # noqa: E402
from autograder.grading.pipeline.cell_metadata import CheckCellMetadata  # noqa: E402 - nbgrader's, its schema compiled once
from autograder.grading.pipeline.execute import SafeExecute  # noqa: E402
from autograder.grading.pipeline.learner_errors import LearnerFacingErrors  # noqa: E402

_os.environ.setdefault("MHA_GRADING_SALT", str(_secrets.randbits(63)))
AUTOGRADE_PIPELINE = [
    SafeExecute, LearnerFacingErrors, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
    AssignLatePenalties, CheckCellMetadata,
]
c.Autograde.autograde_preprocessors = AUTOGRADE_PIPELINE
# nbgrader's own first pass over a submission (its defaults, with the metadata check above).
c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells,
                                      CheckCellMetadata]
# Error outputs say what went wrong in the learner's terms, never in the grader's (autograder/grading/pipeline/
# learner_errors.py); feedback pages are sanitised, script-free and render maths offline (feedback_page.py).
feedback_page.configure(c)
# formgrader's page of a submission, which the instructor opens on the Jupyter server, is sanitised the same way and
# runs no script but formgrader's own (autograder/grading/pipeline/formgrader_page.py).
formgrader_page.configure(c)
