"""nbgrader settings shared by every course folder the build and the grading tools create.

Each such folder gets an ``nbgrader_config.py`` that loads this file (``load_subconfig``), so instructors and
tests grade with the same settings.
"""

c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads a config file

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

# Every passed hidden test is re-checked outside the learner's kernel (autograder/verify.py), and the
# hidden-test inputs are salted afresh for each grading process so results cannot be prepared in advance.
import os as _os  # noqa: E402
import secrets as _secrets  # noqa: E402

from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties, CheckCellMetadata, Execute, IgnorePattern, LimitOutput, SaveAutoGrades,
)

from autograder.grading import feedback_page  # noqa: E402
from autograder.grading.learner_errors import LearnerFacingErrors  # noqa: E402
from autograder.verify import VerifyHiddenTests  # noqa: E402

_os.environ.setdefault("MHA_GRADING_SALT", str(_secrets.randbits(63)))
c.Autograde.autograde_preprocessors = [
    Execute, VerifyHiddenTests, LearnerFacingErrors, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
    SaveAutoGrades, AssignLatePenalties, CheckCellMetadata,
]
# Error outputs say what went wrong in the learner's terms, never in the grader's (autograder/grading/
# learner_errors.py); feedback pages are sanitised, script-free and render maths offline (feedback_page.py).
feedback_page.configure(c)
