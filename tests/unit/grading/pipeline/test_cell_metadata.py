"""The grading pipeline's cell-metadata check (``autograder/grading/pipeline/cell_metadata.py``) accepts and refuses exactly
what nbgrader's own does, with the same errors."""

import copy

import pytest
from nbgrader.nbgraderformat import MetadataValidator, ValidationError
from nbgrader.preprocessors import CheckCellMetadata as Nbgraders

from autograder import course
from autograder.course import notebooks
from autograder.grading.pipeline.cell_metadata import CheckCellMetadata, CompiledMetadataValidator


def _released():
    return notebooks.read_source(course.SOLUTIONS / "01_warmup.py")


def _graded_cell(nb):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("points"))


def _broken(change):
    nb = MetadataValidator().upgrade_notebook_metadata(copy.deepcopy(_released()))
    change(_graded_cell(nb).metadata.nbgrader)
    return nb


CASES = {
    "valid": lambda meta: None,
    "points_not_a_number": lambda meta: meta.update(points="two"),
    "grade_without_grade_id": lambda meta: meta.pop("grade_id"),
    "schema_too_old": lambda meta: meta.update(schema_version=0),
    "schema_too_new": lambda meta: meta.update(schema_version=99),
    "locked_not_a_bool": lambda meta: meta.update(locked="yes"),
}


def _outcome(validator, nb):
    try:
        validator.validate_nb(nb)
    except ValidationError as exc:
        return type(exc).__name__, str(exc).splitlines()[0]
    except Exception as exc:  # noqa: BLE001 - nbgrader's schema-version errors
        return type(exc).__name__, str(exc)
    return None


@pytest.mark.parametrize("case", CASES)
def test_the_compiled_check_agrees_with_nbgraders(case):
    nb = _broken(CASES[case])
    ours, theirs = _outcome(CompiledMetadataValidator(), nb), _outcome(MetadataValidator(), nb)
    assert ours == theirs
    assert (ours is None) == (case == "valid")
    if case != "valid" and not case.startswith("schema"):
        with pytest.raises(ValidationError, match="nbgrader metadata may be corrupted"):
            CheckCellMetadata().preprocess(nb, {})
        with pytest.raises(ValidationError, match="nbgrader metadata may be corrupted"):
            Nbgraders().preprocess(nb, {})


def test_the_schema_is_not_checked_again_for_every_cell(monkeypatch):
    from nbgrader.nbgraderformat import common

    def per_cell(*args, **kwargs):
        raise AssertionError("jsonschema.validate called for a cell")

    nb = _broken(CASES["valid"])
    monkeypatch.setattr(common.jsonschema, "validate", per_cell)
    CheckCellMetadata().preprocess(nb, {})
    with pytest.raises(AssertionError, match="called for a cell"):
        Nbgraders().preprocess(nb, {})
