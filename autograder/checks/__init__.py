"""Hidden checks: the tests behind the graded cells. They run in the grader's process, never in a learner's kernel.

``registry`` declares one test per graded cell (``@hidden_test``) and finds it by the cell's grade_id; ``runner``
grades a learner's function against ``autograder.reference`` on seeded cases and names a catalogued bug;
``compare`` compares arrays without trusting anything a learner's object could fake; one module per lesson
(``lesson01``, ...) holds that lesson's tests. ``autograder/kernel/hidden_cell.py`` and
``autograder/grading/pipeline/hidden_tests.py`` carry the learner's calls between the kernel and these tests.
"""
