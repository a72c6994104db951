"""Gradebook URLs without their password in any file, command line or log.

The grading course's ``nbgrader_config.py`` holds the gradebook URL *without* its password and calls
``with_password`` when nbgrader loads it: the password comes from ``MHA_GRADEBOOK_URL`` (the whole URL, password
included) when that names the same database, else PostgreSQL's client finds it itself in ``PGPASSWORD`` or
``~/.pgpass``. The grading kernels never see either (``autograder/kernel/sandbox.py`` passes them an allow-list).
"""

from __future__ import annotations

import os

ENV = "MHA_GRADEBOOK_URL"


def _parse(url: str):
    from sqlalchemy.engine import make_url

    return make_url(url)


def has_password(url: str) -> bool:
    return bool(url) and _parse(url).password is not None


def without_password(url: str) -> str:
    if not url or _parse(url).password is None:
        return url
    return _parse(url)._replace(password=None).render_as_string(hide_password=False)  # set() ignores None


def _same_database(a, b) -> bool:
    return (a.get_backend_name(), a.host, a.port, a.database, a.username) == \
        (b.get_backend_name(), b.host, b.port, b.database, b.username)


def with_password(url: str) -> str:
    """``url`` with the password of ``MHA_GRADEBOOK_URL`` when that names the same database; else ``url``."""
    secret = os.environ.get(ENV, "")
    if not url or not secret:
        return url
    mine, theirs = _parse(url), _parse(secret)
    if theirs.password is None or not _same_database(mine, theirs):
        return url
    return mine.set(password=theirs.password).render_as_string(hide_password=False)
