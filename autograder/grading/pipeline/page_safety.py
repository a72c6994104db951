"""Pages that run no learner code: HTML sanitising, maths rendered at write time, a strict Content-Security-Policy.

The feedback pages (``autograder/grading/pipeline/feedback_page.py``) and ``report.html`` show text a learner controls
(outputs, markdown, cell sources). Three layers keep a learner's script, frame or form from running there:

* ``clean``: an allow-list of harmless tags and attributes (bleach); anything else is shown as text, event
  handlers and ``style`` attributes are dropped, images must be ``data:`` images, links http(s), mail or in-page;
  a fragment with more than ``MAX_TAGS`` tags, or tags nested deeper than ``MAX_NESTING``, is shown as text whole
  (bleach's parser can take time growing with the square of the tags: 100 KB of ``<div>`` took 20 s, 450 KB of
  misnested ``<b><i></b></i>`` 37 s; bounding both keeps a page's cost linear in its size);
* maths is turned into MathML when the page is written (``latex2mathml``), which browsers render natively: no
  MathJax, no script and no network;
* ``protect`` puts a Content-Security-Policy first in ``<head>``: no script at all, no frame, no form target, no
  request to any server; only the page's own ``<style>`` blocks (by hash) and ``data:`` images and fonts.

A page the Jupyter server serves with scripts of its own (formgrader's page of one submission,
``autograder/grading/pipeline/formgrader_page.py``) is protected with ``own_markup``, the markup of its own that comes
before any learner content: the scripts of ``<head>`` and of that markup get a nonce drawn afresh for the page, and
its inline event handlers are allowed by hash; the page may load style sheets and fonts from, and send requests to,
the server that serves it. Every other script, the learner's, has no nonce and does not run.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import re
import secrets

import bleach

_TEXT_TAGS = [
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "dd", "del", "details", "div", "dl", "dt", "em",
    "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "li", "mark",
    "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub", "summary", "sup", "table", "tbody",
    "td", "tfoot", "th", "thead", "tr", "u", "ul", "var",
]
_MATHML_TAGS = [
    "math", "mi", "mn", "mo", "ms", "mspace", "mtext", "mrow", "mfrac", "msqrt", "mroot", "msub", "msup",
    "msubsup", "munder", "mover", "munderover", "mtable", "mtr", "mtd", "mstyle", "mpadded", "mphantom",
    "menclose", "semantics", "annotation",
]
_GLOBAL_ATTRIBUTES = {"class", "id", "title", "lang", "dir"}
_MATHML_ATTRIBUTES = {
    "display", "mathvariant", "stretchy", "fence", "separator", "form", "accent", "accentunder", "lspace",
    "rspace", "width", "height", "depth", "columnalign", "rowalign", "columnspacing", "rowspacing", "displaystyle",
    "scriptlevel", "linethickness", "largeop", "movablelimits", "symmetric", "minsize", "maxsize", "notation",
    "xmlns", "encoding",
}
_TAG_ATTRIBUTES = {
    "a": {"href", "name"}, "img": {"src", "alt", "width", "height"}, "td": {"colspan", "rowspan", "align"},
    "th": {"colspan", "rowspan", "align", "scope"}, "ol": {"start"}, "details": {"open"},
}


def _attribute_allowed(tag: str, name: str, value: str) -> bool:
    if name in _GLOBAL_ATTRIBUTES:
        return True
    if tag in _MATHML_TAGS:
        return name in _MATHML_ATTRIBUTES
    if name not in _TAG_ATTRIBUTES.get(tag, ()):
        return False
    if tag == "img" and name == "src":
        return value.strip().lower().startswith("data:image/")
    if tag == "a" and name == "href":
        return re.match(r"^(https?:|mailto:|#)", value.strip(), re.I) is not None
    return True


_CLEANER = bleach.Cleaner(tags=_TEXT_TAGS + _MATHML_TAGS, attributes=_attribute_allowed,
                          protocols=["http", "https", "mailto", "data"], strip=False, strip_comments=True)


# Most texts of a class's pages are the lesson's own (its markdown, its code cells, its figures' captions), the same
# in every submission a worker grades: the page parts made from short texts are remembered per process.
REMEMBERED_CHARS = 8_000


def remembered(function):
    """``function(text, *settings)``, a function of its arguments alone, remembered for the 512 texts last used
    that are under ``REMEMBERED_CHARS`` characters (longer ones are made afresh each time)."""
    cached = functools.lru_cache(maxsize=512)(function)

    @functools.wraps(function)
    def call(text, *settings):
        return cached(text, *settings) if len(text) <= REMEMBERED_CHARS else function(text, *settings)

    return call


MAX_TAGS = 5_000  # tags in one fragment; a lesson's largest markdown cell has about 1,100
MAX_NESTING = 200  # tags open at once; a lesson's pages nest under 30
_TAG = re.compile(r"<(/?)([A-Za-z][\w:-]*)")
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr",
         "mspace"}


def too_much_markup(text: str) -> bool:
    """Whether ``text`` has more than ``MAX_TAGS`` tags or nests them deeper than ``MAX_NESTING`` (counted as
    written, in one pass: an end tag closes one open tag, a void element none)."""
    depth = 0
    for count, match in enumerate(_TAG.finditer(text)):
        if count >= MAX_TAGS:
            return True
        if match.group(2).lower() in _VOID:
            continue
        depth = max(depth - 1, 0) if match.group(1) else depth + 1
        if depth > MAX_NESTING:
            return True
    return False


def output_metadata(output, key, mimetype=None):
    """nbconvert's ``get_metadata`` filter for the pages: an image's ``width`` and ``height`` only as a number
    (nbconvert writes them unquoted into the ``<img>`` tag, so any other text there would add attributes to it),
    None for anything else there; other keys as nbconvert reads them."""
    from nbconvert.filters.metadata import get_metadata

    value = get_metadata(output, key, mimetype)
    if key not in ("width", "height"):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 100_000:
        return f"{value:g}"
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,5}(?:\.[0-9]{1,3})?", value.strip()):
        return value.strip()
    return None


def clean(fragment) -> str:
    """``fragment`` (HTML a learner may control) with only harmless tags and attributes; the rest shown as text."""
    text = fragment.decode() if isinstance(fragment, bytes) else str(fragment)
    return html.escape(text) if too_much_markup(text) else _clean_text(text)


@remembered
def _clean_text(text: str) -> str:
    return _CLEANER.clean(text)


@functools.lru_cache(maxsize=4096)
def math_html(tex: str, display: bool = False) -> str:
    """MathML for ``tex`` (rendered by the browser, no script); the TeX as code when it cannot be converted."""
    from latex2mathml.converter import convert

    try:
        return clean(convert(tex, display="block" if display else "inline"))
    except Exception:  # noqa: BLE001 - a learner's malformed TeX is shown as written
        escaped = bleach.clean(tex, tags=[], strip=True)
        return f'<code class="tex">{escaped}</code>'


_IMG_WITHOUT_ALT = re.compile(r"<img(?![^<>]*\salt=)", re.I)  # a look that stops at the next tag: linear


def with_alt_text(page: str) -> str:
    """``page`` with nbconvert's alt text on every ``<img>`` that has none (a figure a notebook drew)."""
    return _IMG_WITHOUT_ALT.sub('<img alt="No description has been provided for this image"', page)


_FONT_FACE = re.compile(r"@font-face\s*\{(?:(?!data:)[^}])*url\((?!\s*['\"]?data:)[^}]*\}", re.I)
_STYLE_BLOCK = re.compile(r"<style[^>]*>(.*?)</style>", re.S | re.I)


def policy(page_head: str, *, nonce: str | None = None, handlers=(), served: bool = False) -> str:
    """The Content-Security-Policy of a page whose ``<head>`` is ``page_head``: its own style blocks, nothing else.

    ``nonce``: the scripts carrying it run; ``handlers``: inline event handlers allowed by the hash of their code;
    ``served``: the page may also load style sheets and fonts from, and send requests to, its own server."""
    hashes = sorted({_digest(m.group(1)) for m in _STYLE_BLOCK.finditer(page_head)})
    own = "'self' " if served else ""
    connect = "'self'" if served else "'none'"
    styles = (own + " ".join(f"'sha256-{h}'" for h in hashes)).strip() or "'none'"
    scripts = "'none'"
    if nonce is not None:
        allowed = sorted({_digest(code) for code in handlers})
        scripts = " ".join([f"'nonce-{nonce}'"] + (["'unsafe-hashes'"] if allowed else [])
                           + [f"'sha256-{h}'" for h in allowed])
    return (f"default-src 'none'; script-src {scripts}; style-src {styles}; img-src data:; font-src {own}data:; "
            "object-src 'none'; frame-src 'none'; child-src 'none'; worker-src 'none'; "
            f"connect-src {connect}; "
            "media-src 'none'; manifest-src 'none'; base-uri 'none'; form-action 'none'")


def _digest(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


_COLOURED_SPAN = re.compile(r'<span((?: class="[^"]*")?) style="((?:(?:background-)?color: rgb\(\d{1,3},\d{1,3},\d{1,3}\);? ?)+)"')
_STYLE_ATTRIBUTE = re.compile(r'\sstyle="[^"]*"')


def _colours_as_classes(body: str) -> tuple:
    """(body, style block): the colours nbconvert writes as ``style`` attributes (a traceback's 256-colour codes),
    which the policy refuses, as classes of one style block in ``<head>``, which it allows; any other ``style``
    attribute is dropped (refused anyway)."""
    rules: dict = {}

    def as_class(m):
        name = rules.setdefault(m.group(2).strip(), f"mha-colour-{len(rules)}")
        classes = m.group(1)[len(' class="'):-1] if m.group(1) else ""
        return f'<span class="{(classes + " " + name).strip()}"'

    body = _STYLE_ATTRIBUTE.sub("", _COLOURED_SPAN.sub(as_class, body))
    css = "".join(f".{name} {{ {rule.rstrip(';')}; }}\n" for rule, name in rules.items())
    return body, (f"<style>\n{css}</style>\n" if css else "")


_SCRIPT_TAG = re.compile(r"<script\b", re.I)
_HANDLER = re.compile(r"""\son[a-z]+\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.I)


def protect(page: str, *, own_markup: str | None = None) -> str:
    """``page`` with its Content-Security-Policy as the first element of ``<head>``.

    Only the styles in ``<head>`` (the page's own, written before any learner content) are allowed. Font faces
    loaded from files (bootstrap's icon font, in ``<head>``) are dropped: the policy would refuse them, with a console
    error; so are ``style`` attributes, whose colours become classes (``_colours_as_classes``).

    ``own_markup``: a page the Jupyter server serves with scripts of its own (see the module's note); it must occur
    in the page's ``<body>``. Its scripts and those of ``<head>`` get the page's nonce, its event handlers their hashes,
    and the page may use its server; without it the page runs no script at all.
    """
    served = own_markup is not None
    end = page.find("</head>")
    if end >= 0:  # the page's own styles are all in <head>: learner text below it is never searched for CSS
        page = _FONT_FACE.sub("", page[:end]) + page[end:]
    head = re.search(r"<head[^>]*>", page, re.I)
    end = page.find("</head>")
    if head is None or end < head.end():
        raise ValueError("the page has no <head>; write the page with one before protecting it")
    nonce, handlers = None, []
    if served:
        nonce = secrets.token_urlsafe(18)
        at = page.find(own_markup, end) if own_markup else -1
        if not own_markup or at < 0:
            raise ValueError("the page's own markup is not in its <body>: the page is not the one it was meant to be")
        signed = _SCRIPT_TAG.sub(f'<script nonce="{nonce}"', own_markup)
        handlers = [html.unescape(m.group(1) if m.group(1) is not None else m.group(2))
                    for m in _HANDLER.finditer(own_markup)]
        page = (page[:head.end()] + _SCRIPT_TAG.sub(f'<script nonce="{nonce}"', page[head.end():end])
                + page[end:at] + signed + page[at + len(own_markup):])
        end = page.find("</head>")
    body, colours = _colours_as_classes(page[end:])
    page = page[:end] + colours + body
    end += len(colours)
    meta = (f'<meta http-equiv="Content-Security-Policy" '
            f'content="{policy(page[head.end():end], nonce=nonce, handlers=handlers, served=served)}">')
    return page[:head.end()] + meta + page[head.end():]
