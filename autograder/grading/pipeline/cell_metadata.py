"""nbgrader's check of the cells' nbgrader metadata, with its JSON schema compiled once per process.

nbgrader's ``CheckCellMetadata`` validates every cell with ``jsonschema.validate``, which checks the schema itself
again for each cell: about 0.15 s of every notebook graded (twice 30-odd cells). ``CheckCellMetadata`` here makes
the same checks, in the same order and with the same errors (nbgrader's schema-version errors, then jsonschema's
best-matching ``ValidationError``), with one validator built and checked once. ``autograder/nbgrader_config.py``
puts it in both of autograde's passes.
"""

from __future__ import annotations

import functools
import traceback

import jsonschema
from nbgrader.nbgraderformat import MetadataValidator, ValidationError
from nbgrader.nbgraderformat.common import BaseMetadataValidator
from nbgrader.preprocessors import CheckCellMetadata as NbgraderCheckCellMetadata


@functools.lru_cache(maxsize=None)
def _compiled():
    """A validator for the schema of nbgrader's current metadata version, its schema checked once."""
    schema = MetadataValidator().schema
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


class _SchemaCheckedOnce(BaseMetadataValidator):
    """nbgrader's base check of one cell (its schema version, then its schema) with the compiled validator."""

    def validate_cell(self, cell) -> None:
        meta = cell.metadata.get("nbgrader")
        if meta is None or meta.get("schema_version", 0) != self.schema_version:
            return super().validate_cell(cell)  # no metadata, or nbgrader's own too-old/too-new error
        error = jsonschema.exceptions.best_match(_compiled().iter_errors(meta))
        if error is not None:
            raise error


class CompiledMetadataValidator(MetadataValidator, _SchemaCheckedOnce):
    """nbgrader's current ``MetadataValidator``: its own checks of a cell run after ``_SchemaCheckedOnce``'s
    (the method resolution order puts it between them and nbgrader's base)."""


class CheckCellMetadata(NbgraderCheckCellMetadata):
    """``nbgrader.preprocessors.CheckCellMetadata`` with ``CompiledMetadataValidator``."""

    def preprocess(self, nb, resources):
        try:
            CompiledMetadataValidator().validate_nb(nb)
        except ValidationError:
            self.log.error(traceback.format_exc())
            msg = "Notebook failed to validate; the nbgrader metadata may be corrupted."
            self.log.error(msg)
            raise ValidationError(msg)
        return nb, resources
