"""Fingerprints of a learner's code that survive renaming, comments, spacing and changed constants.

The code is read as Python tokens (``tokenize``, which needs no valid syntax) and normalised: every name the code
chooses becomes ``V`` (a keyword, a builtin, ``np``/``numpy``/``math`` and an attribute after a dot stay: they are
what the code does), every number ``N``, every string ``S``; comments, blank lines and docstrings are dropped;
line ends and indentation stay, as the structure. Every run of ``K`` tokens is hashed, and the fingerprints are
those that winnowing (Schleimer, Wilkerson and Aiken, SIGMOD 2003: the smallest hash of every ``WINDOW``
consecutive ones, as MOSS does) selects: any run of ``K + WINDOW - 1`` normalised tokens two pieces of code share
gives both at least one common fingerprint, and a piece of code of n tokens has about 2n / (WINDOW + 1) of them.

``prints`` is what a graded notebook's record keeps per answer cell (``worker.grade_one``), so finding similar
work reads records and never the notebooks again; ``lines`` says which lines of a cell hold given fingerprints,
to mark them when two students' cells are shown side by side.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import io
import keyword
import tokenize

K = 10  # tokens per hashed run: softmax's max, subtraction and exponential in one
WINDOW = 5  # hashes per winnowing window
MAX_SOURCE = 100_000  # characters of a cell that are fingerprinted
KEPT_NAMES = frozenset(dir(builtins)) | {"np", "numpy", "math"}
_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}


def canonical(source: str) -> str:
    """``source`` as Python writes its syntax tree back (``ast.unparse``): no comment, no redundant parenthesis, one
    spacing and quoting; as it is when it does not parse."""
    try:
        return ast.unparse(ast.parse(source[:MAX_SOURCE]))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source[:MAX_SOURCE]


def tokens(source: str) -> list:
    """(normalised token, line number) of ``source``, as far as it can be read."""
    out, after_dot, line_start, dropped = [], False, True, False
    lines = source[:MAX_SOURCE].splitlines()  # once: a cell of many strings costs no more than its length
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source[:MAX_SOURCE]).readline):
            if tok.type in _SKIPPED or (dropped and tok.type == tokenize.NEWLINE):
                dropped = False
                continue
            dropped = False
            if tok.type == tokenize.NAME:
                keep = after_dot or keyword.iskeyword(tok.string) or tok.string in KEPT_NAMES
                text = tok.string if keep else "V"
            elif tok.type == tokenize.NUMBER:
                text = "N"
            elif tok.type == tokenize.STRING or tok.type == getattr(tokenize, "FSTRING_START", -1):
                if line_start and _alone_on_its_line(tok, lines):
                    dropped = True  # a docstring, or a string as a statement: a comment in all but name
                    continue
                text = "S"
            elif tok.type == tokenize.NEWLINE:
                text = ";"
            elif tok.type == tokenize.INDENT:
                text = "{"
            elif tok.type == tokenize.DEDENT:
                text = "}"
            else:
                text = tok.string
            line_start = tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
            after_dot = tok.string == "."
            out.append((text, tok.start[0]))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # unfinished code: what was read so far
    return out


def _alone_on_its_line(tok, lines: list) -> bool:
    end_line = lines[tok.end[0] - 1] if tok.end[0] - 1 < len(lines) else ""
    return not end_line[tok.end[1]:].strip(" \t;")


def _hash(run) -> int:
    return int.from_bytes(hashlib.blake2b(" ".join(run).encode(), digest_size=6).digest(), "big")


def _winnowed(toks: list) -> list:
    """(fingerprint, index of its run's first token) chosen by winnowing."""
    hashes = [_hash([t for t, _ in toks[i:i + K]]) for i in range(len(toks) - K + 1)]
    if 0 < len(hashes) <= WINDOW:
        i = min(range(len(hashes)), key=lambda j: (hashes[j], -j))
        return [(hashes[i], i)]
    chosen, last = [], None
    for start in range(len(hashes) - WINDOW + 1):
        window = range(start, start + WINDOW)
        i = min(window, key=lambda j: (hashes[j], -j))  # the rightmost smallest
        if i != last:
            chosen.append((hashes[i], i))
            last = i
    return chosen


def prints(source: str) -> list:
    """The sorted fingerprints of ``source`` (its ``canonical`` form's)."""
    return sorted({h for h, _ in _winnowed(tokens(canonical(source)))})


def lines(source: str, wanted) -> set:
    """Line numbers (from 1) of ``source`` covered by a run of tokens whose fingerprint is in ``wanted``."""
    toks = tokens(source)
    covered: set = set()
    for h, i in _winnowed(toks):
        if h in wanted:
            covered.update(line for _, line in toks[i:i + K])
    return covered
