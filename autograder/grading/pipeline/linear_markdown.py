"""nbconvert's markdown-with-maths parsers, made linear in the text: its maths patterns, and mistune's paragraphs.

nbconvert finds maths with patterns of the form ``opening.*?closing``: from every opening without a closing after it
(``\\begin{x}``, ``\\\\[``, ``\\\\(``) the search runs to the end of the text before it fails, so a markdown cell
of 40 KB of ``\\begin{x}`` took 1.7 s and 320 KB 64 times that. Here a maths body may not hold another opening of
its kind (an environment no ``\\begin{`` at all), so each search stops at the next opening and every character is
passed over a bounded number of times. Maths nbconvert would read still reads the same, but for an environment
nested in another outside ``$$``: the inner one is the maths, the outer one's delimiters are shown as text.
``$$`` and ``$`` keep nbconvert's patterns: their opening and closing are the same mark, so an opening without a
closing is the last mark of the text.

mistune grows a paragraph by adding each piece to its text (``text += piece``): 80 KB of ``$$a$$`` (each a piece,
the maths of one paragraph) took 0.1 s and 640 KB 46 times that. Here a paragraph keeps its pieces and joins them
once, when its text is read (``_Paragraph``).
"""

from __future__ import annotations

import re

from mistune.core import BlockState
from nbconvert.filters.markdown_mistune import MathBlockParser, MathInlineParser

_DISPLAY_LATEX = r"\\\\\[(?:(?!\\\\\[).)*?\\\\\]"  # \\[ ... \\] holding no \\[
_ENVIRONMENT_BODY = r"(?:(?!\\begin\{).)*?"  # an environment's body, holding no \begin{


def _dotall(pattern: str) -> str:
    return f"(?s:{pattern})"


class _Paragraph(dict):
    """A paragraph token whose text grows by pieces, joined once when the text is read."""

    def __init__(self, text: str):
        super().__init__(type="paragraph", text=text)
        self.pieces: list = []

    def _joined(self) -> None:
        if self.pieces:
            dict.__setitem__(self, "text", dict.__getitem__(self, "text") + "".join(self.pieces))
            self.pieces = []

    def __getitem__(self, key):
        if key == "text":
            self._joined()
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        if key == "text":
            self._joined()
        super().__setitem__(key, value)

    def get(self, key, default=None):
        if key == "text":
            self._joined()
        return super().get(key, default)

    def pop(self, key, *default):
        if key == "text":
            self._joined()
        return super().pop(key, *default)


class LinearBlockState(BlockState):
    """mistune's block state whose paragraphs grow by pieces (``_Paragraph``)."""

    def _grow(self, piece: str) -> bool:
        last = self.last_token()
        if not last or last["type"] != "paragraph":
            return False
        if isinstance(last, _Paragraph):
            last.pieces.append(piece)
        else:  # made by a rule of mistune's own
            last["text"] += piece
        return True

    def add_paragraph(self, text: str) -> None:
        if not self._grow(text):
            self.tokens.append(_Paragraph(text))

    def append_paragraph(self):
        last = self.last_token()
        if not last or last["type"] != "paragraph":
            return None
        end = self.find_line_end()
        self._grow(self.get_text(end))
        return end


class LinearMathBlockParser(MathBlockParser):
    """``MathBlockParser`` whose multi-line maths (kept as one paragraph) is found in linear time, and whose
    paragraphs grow in linear time."""

    state_cls = LinearBlockState

    def parse_multiline_math(self, m, state) -> int:
        """The maths, and the rest of the line it ends on (with any maths starting there), as paragraph text.
        nbconvert's rule ended its piece with the maths, in the middle of a line, and mistune reads the rest of the
        line again at every piece: a line of many maths cost the square of its length."""
        end = line_end = m.end()
        while True:
            if end >= line_end:  # looked for once per line: maths ending on the same line share it
                line_end = state.src.find("\n", end)
                line_end = len(state.src) if line_end < 0 else line_end + 1
            following = self._MULTILINE.search(state.src, end)
            if following is None or following.start() >= line_end:
                break
            end = following.end()
        state.add_paragraph(state.src[m.start():line_end])
        return line_end

    MULTILINE_MATH = _dotall(
        r"(?<!\\)[$]{2}.*?(?<!\\)[$]{2}"
        "|" + _DISPLAY_LATEX + "|"
        r"\\begin\{(?P<math_env_name>[a-z]*\*?)\}" + _ENVIRONMENT_BODY + r"\\end\{(?P=math_env_name)\}")
    SPECIFICATION = {**MathBlockParser.SPECIFICATION, "multiline_math": MULTILINE_MATH}
    _MULTILINE = re.compile(MULTILINE_MATH)


class LinearMathInlineParser(MathInlineParser):
    """``MathInlineParser`` whose maths is found in linear time."""

    BLOCK_MATH_LATEX = _dotall(r"(?<!\\)\\\\\[(?P<math_block_latex>(?:(?!\\\\\[).)*?)(?<!\\)\\\\\]")
    INLINE_MATH_LATEX = _dotall(r"(?<!\\)\\\\\((?P<math_inline_latex>(?:(?!\\\\\().)*?)(?<!\\)\\\\\)")
    LATEX_ENVIRONMENT = _dotall(r"\\begin\{(?P<math_env_name>[a-z]*\*?)\}(?P<math_env_body>" + _ENVIRONMENT_BODY
                                + r")\\end\{(?P=math_env_name)\}")
    SPECIFICATION = {**MathInlineParser.SPECIFICATION, "block_math_latex": BLOCK_MATH_LATEX,
                     "inline_math_latex": INLINE_MATH_LATEX, "latex_environment": LATEX_ENVIRONMENT}


def parsers() -> dict:
    """The ``block`` and ``inline`` parsers for nbconvert's ``MarkdownWithMath``."""
    return {"block": LinearMathBlockParser(), "inline": LinearMathInlineParser(hard_wrap=False)}
