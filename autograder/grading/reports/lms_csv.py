"""An LMS's own CSV export, read so that a copy can be written with a few cells changed and every other byte as it was.

The instructor's export (Canvas's gradebook, Moodle's grading worksheet) is the template of the file the LMS imports:
``read`` parses it into records of fields, each with where it lies in the text, and ``Table.filled`` splices new
values into those places only. The byte-order mark, the delimiter (comma, semicolon or tab), the quoting, the line
endings and every cell not changed stay exactly as exported; a new value goes through ``csv_cells.field`` (no cell
opens as a formula). The parser is RFC 4180's, as Canvas's importer (Ruby's CSV) and Moodle's (PHP's fgetcsv) read
it: fields quoted with ``"`` may hold delimiters, quotes (doubled) and line breaks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autograder.grading.reports import csv_cells

BOM = b"\xef\xbb\xbf"
DELIMITERS = (",", ";", "\t")


class NotCsv(ValueError):
    """The file is not a CSV this module can read; the message says why."""


@dataclass
class Field:
    value: str
    start: int  # where the field's text (quotes included) begins in ``Table.text``
    end: int  # and where it ends


@dataclass
class Table:
    text: str  # the file's text after its byte-order mark
    bom: bool
    delimiter: str
    records: list  # [[Field]]

    def value(self, row: int, col: int) -> str:
        """The value of a cell; '' for a cell past the end of a short record."""
        record = self.records[row]
        return record[col].value if col < len(record) else ""

    def filled(self, changes: dict) -> bytes:
        """The file's bytes with ``changes`` ({(row, col): new value}) spliced in, everything else as it was. A
        change to a cell past the end of its record is not made (an LMS's export has none)."""
        spans = sorted((self.records[r][c].start, self.records[r][c].end, value)
                       for (r, c), value in changes.items() if c < len(self.records[r]))
        out, at = [], 0
        for start, end, value in spans:
            out += [self.text[at:start], csv_cells.field(value, self.delimiter)]
            at = end
        out.append(self.text[at:])
        return (BOM if self.bom else b"") + "".join(out).encode("utf-8")


def decode(data: bytes) -> tuple:
    """(text, had a byte-order mark) of a CSV's bytes; ``NotCsv`` when it is not UTF-8 (both LMSs export UTF-8)."""
    bom = data.startswith(BOM)
    try:
        return data[len(BOM):].decode("utf-8") if bom else data.decode("utf-8"), bom
    except UnicodeDecodeError as exc:
        raise NotCsv(f"not UTF-8 text (byte {exc.start}); export it again from the LMS, unedited") from None


def parse(text: str, delimiter: str) -> list:
    """The records of ``text`` as lists of ``Field``; ``NotCsv`` for an unclosed quote or text after a closing one."""
    plain = re.compile("[^" + re.escape(delimiter) + "\r\n]*")
    fields: list
    records, fields, i, n = [], [], 0, len(text)
    while i < n or fields:
        start = i
        if i < n and text[i] == '"':
            parts, j = [], i + 1
            while True:
                k = text.find('"', j)
                if k < 0:
                    raise NotCsv(f"a quoted cell starting at character {start} is never closed")
                parts.append(text[j:k])
                if text.startswith('""', k):
                    parts.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            if i < n and text[i] not in (delimiter, "\r", "\n"):
                raise NotCsv(f"text after a closing quote at character {i}")
            fields.append(Field("".join(parts), start, i))
        else:
            unquoted = plain.match(text, i)
            assert unquoted is not None  # it matches the empty field too
            i = unquoted.end()
            fields.append(Field(text[start:i], start, i))
        if i < n and text[i] == delimiter:
            i += 1
            if i == n:
                fields.append(Field("", i, i))
            else:
                continue
        elif i < n:  # a line break ends the record
            i += 2 if text.startswith("\r\n", i) else 1
        records.append(fields)
        fields = []
    return records


def read(data: bytes, is_header) -> Table:
    """The table of ``data`` whose first record ``is_header`` accepts (a predicate on its values), in whichever of
    ``DELIMITERS`` makes it so; ``NotCsv`` when none does."""
    text, bom = decode(data)
    for delimiter in DELIMITERS:
        line = text.split("\n", 1)[0]
        if delimiter not in line:
            continue
        try:
            records = parse(text, delimiter)
        except NotCsv:
            continue
        if records and is_header([f.value.strip() for f in records[0]]):
            return Table(text, bom, delimiter, records)
    raise NotCsv("its first line is not the header of this export")
