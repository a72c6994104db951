"""mypy runs clean over autograder/ (its settings: ``[tool.mypy]`` in pyproject.toml; its cache in build/, so a
second run checks only what changed)."""

from __future__ import annotations

import os

from autograder import course


def test_mypy_finds_no_error_in_autograder():
    from mypy import api

    here = os.getcwd()
    os.chdir(course.ROOT)  # mypy reads pyproject.toml and writes its cache relative to the folder it runs in
    try:
        report, errors, status = api.run([])
    finally:
        os.chdir(here)
    assert status == 0, report + errors
