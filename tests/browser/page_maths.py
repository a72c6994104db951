"""What a page's maths looks like in the browser, for the tests of the pages the course writes (feedback pages,
formgrader's page of a submission): every formula is MathML the browser lays out, none is escaped markup, and no
TeX is left raw outside code."""

from __future__ import annotations

import re

# TeX a page left for MathJax: $...$ or a command, outside code
RAW_TEX = re.compile(r"\$[^$\s][^$]*\$|\\(?:frac|sqrt|begin|end|mathbb|mathrm|top|cdot|sum|times|left|right)\b")
ESCAPED = ("ns0:", "<math", "&lt;math", "<mrow", "<mi>")  # MathML shown as text

# The page's text, its text outside code, and each math element and markdown heading with the sizes the browser
# gave them; what a closed <details> hides is not laid out, so a formula there counts as not shown.
_READ = """() => {
  const shown = e => !e.closest('details:not([open])');
  const size = e => { const r = e.getBoundingClientRect(); return [r.width, r.height]; };
  const prose = document.body.cloneNode(true);
  prose.querySelectorAll('script, style, pre, code, textarea, .input_area, .highlight').forEach(e => e.remove());
  return {
    text: document.body.innerText,
    prose: prose.innerText,
    maths: [...document.querySelectorAll('math')].map(m => ({shown: shown(m), size: size(m)})),
    headings: [...document.querySelectorAll('.text_cell_render :is(h1, h2, h3, h4, h5, h6)')].map(h => ({
      text: h.innerText, maths: [...h.querySelectorAll('math')].map(size)})),
  };
}"""


def read(tab) -> dict:
    """The maths of the page open in ``tab`` (a Playwright page)."""
    return tab.evaluate(_READ)


def problems(seen: dict) -> list:
    """What is wrong with the maths ``read`` found: escaped markup, raw TeX, formulas shown with no size."""
    found = [f"{escaped!r} shown as text" for escaped in ESCAPED if escaped in seen["text"]]
    raw = RAW_TEX.findall(seen["prose"])
    if raw:
        found.append(f"TeX left raw outside code: {raw[:5]}")
    flat = [m for m in seen["maths"] if m["shown"] and not (m["size"][0] > 0 and m["size"][1] > 0)]
    if flat:
        found.append(f"{len(flat)} formulas are not laid out")
    return found
