"""Every CSV the grading command writes goes through ``writer``: a text cell that a spreadsheet would read as a
formula (it starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) gets a leading ``'``, so a
student's folder name such as ``=HYPERLINK(...)`` reaches ``grades.csv`` as text. A cell that is a plain number
(``-2``, ``7.5``, ``1e-05``) is left as it is: numeric columns stay numeric. ``field`` encodes one such cell for a
file written byte for byte from another (an LMS's own export filled in: ``autograder/grading/reports/lms_csv.py``).
"""

from __future__ import annotations

import csv
import re

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def neutral(cell):
    """``cell`` as a spreadsheet may open it: text that could start a formula is prefixed with ``'``."""
    if isinstance(cell, str) and cell.startswith(FORMULA_START) and not NUMBER.fullmatch(cell):
        return "'" + cell
    return cell


class _Writer:
    def __init__(self, fh):
        self._csv = csv.writer(fh)

    def writerow(self, row):
        return self._csv.writerow([neutral(cell) for cell in row])

    def writerows(self, rows):
        for row in rows:
            self.writerow(row)


def writer(fh) -> _Writer:
    """``csv.writer(fh)`` whose every cell is ``neutral``."""
    return _Writer(fh)


def field(cell, delimiter: str = ",") -> str:
    """One ``neutral`` cell as CSV text between two ``delimiter``: quoted (quotes doubled) when it holds the
    delimiter, a quote, a line break or leading or trailing spaces, as ``csv.writer`` quotes."""
    text = str(neutral(cell))
    if any(ch in text for ch in (delimiter, '"', "\r", "\n")) or text != text.strip(" "):
        return '"' + text.replace('"', '""') + '"'
    return text


def rewrite(path) -> None:
    """Pass a CSV written by someone else (nbgrader's export) through ``writer``, in place."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer(fh).writerows(rows)
