"""Hidden checks: the code that hidden test cells run during grading.

``session`` guards the kernel; ``runner`` grades a learner's function against ``autograder.reference`` on
seeded cases; ``compare`` compares arrays without trusting anything the learner could have rebound; one module
per lesson (``lesson01``, ...) holds that lesson's hidden tests, one function per graded test cell.
"""
