"""When two folder names look alike: ``skeleton`` gives both the same text.

A name's skeleton is its bytes read as UTF-8 (or, failing that, Latin-1, as another system may have written it),
decomposed (NFKD: compatibility forms such as full-width letters become the plain ones) with the combining marks
dropped (``josé`` is ``jose``), the Cyrillic and Greek letters that are drawn like Latin ones replaced by those
(``CONFUSABLE``: Cyrillic ``а`` is ``a``), folded to lower case, and with everything but letters and digits removed
(spaces, punctuation, invisible characters such as a zero-width space). The table covers the look-alikes of the
Latin alphabet in the two scripts whose letters are most often mistaken for it; it is not Unicode's full list.
"""

from __future__ import annotations

import os
import re
import unicodedata

# the letters of Cyrillic and Greek drawn like a Latin letter, in capitals and small letters (each case by its own
# shape: Greek capital Eta is H, small eta n)
CONFUSABLE = str.maketrans({
    **dict(zip("АВЕЅІЈКМНОРСТХУҮ", "ABESIJKMHOPCTXYY", strict=True)),
    **dict(zip("аеѕіјһԁԛԝорсухүӏ", "aesijhdqwopcyxyl", strict=True)),
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHIKMNOPTYX", strict=True)),
    **dict(zip("αγηικνορτυχ", "aynikvoptux", strict=True)),
    "ı": "i",  # Latin small dotless i
})
_NOT_WORD = re.compile(r"[\W_]+")


def skeleton(name) -> str:
    """The text two folder names that look alike share (see the module's docstring)."""
    raw = os.fsencode(name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    text = "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))
    return _NOT_WORD.sub("", text.translate(CONFUSABLE).casefold())
