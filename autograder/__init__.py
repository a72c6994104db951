"""Instructor side of the course: the reference implementation, the hidden checks, the lesson build
and the grading tools. Nothing in this package is given to learners."""
