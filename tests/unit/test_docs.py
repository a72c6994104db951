"""The documentation names only what exists: README.md and every docs/*.md page (static, no kernel).

* A *repository path* is a word in inline code or a fenced code block that starts with one of the repository's
  folders (``REPOSITORY_FOLDERS``, e.g. ``autograder/grading/run/worker.py``, ``tests/test_x.py``, ``.ci/run``), or a
  bare file name such as ``feedback_page.py`` or ``requirements.txt`` (found anywhere in the repository). It must
  exist. Placeholders match what they stand for: ``NN`` two digits, ``NN_name`` a lesson's name, ``<...>`` and
  ``*`` any name part. Files the grading command, the tests or the benchmarks *write* (``OUTPUTS``: ``OUT/...``,
  ``build/...``, ``grades.csv``) are not in the repository and are not checked.
* A module run or imported as ``autograder.<name>`` must exist as ``autograder/<name>.py`` or a package.
* ``make <target>`` must be a target of the Makefile.
* A relative link resolves to a file of the repository, and its ``#anchor`` to a heading of that page.
* Every docs/*.md page is linked from the README or from another page.
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

import pytest

from autograder import course

ROOT = course.ROOT
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REPOSITORY_FOLDERS = ("autograder", "bench", "docs", "lessons", "solutions", "tests", ".ci")
# Bare file names with these endings name a file of the repository; others (.csv, .html, .ipynb, .png, .log) are
# outputs or examples of submissions (`01-Warmup.ipynb`, `grades.csv`).
SOURCE_SUFFIXES = (".py", ".md", ".toml", ".yml", ".txt", ".json", ".cfg")
# What the documentation describes as written at run time, never part of the repository (OUT is the grading
# command's output folder, ./grading by default; build/ holds screenshots and browser-failure records).
OUTPUTS = ("OUT/", "build/", "grading/", "course/")
NOT_SEARCHED = {".git", ".venv", "build", "grading", ".pytest_cache", ".hypothesis"}  # top-level folders

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MAKE = re.compile(r"\bmake ([a-z][a-z-]*)")
MODULE = re.compile(r"\bautograder\.(\w+)")
BARE_NAME = re.compile(r"^[\w.-]*\w\.(\w+)$")


def code_spans(text: str) -> list[str]:
    """Inline code and the lines of fenced code blocks."""
    fenced = FENCE.findall(text)
    return INLINE_CODE.findall(FENCE.sub("", text)) + [line for block in fenced for line in block.splitlines()]


def _words(span: str):
    """The words of a code span, quotes and brackets stripped; of ``NAME=value``, the value."""
    for word in span.split():
        yield word.split("=")[-1].strip("\"'(),;:[]{}")


def _pattern(path: str) -> str:
    """A glob for a path with placeholders: NN_name, NN, <...>, `...`."""
    glob = path.replace("NN_name", "[0-9][0-9]_*").replace("NN", "[0-9][0-9]").replace("...", "*")
    return re.sub(r"<[^>]*>", "*", glob).rstrip("/")


def _exists(pattern: str) -> bool:
    if not any(ch in pattern for ch in "*?["):
        return (ROOT / pattern).exists()
    return any(ROOT.glob(pattern))


def _exists_anywhere(name: str) -> bool:
    pattern = _pattern(name)
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if d not in NOT_SEARCHED or Path(folder) != ROOT]
        if fnmatch.filter(files, pattern):
            return True
    return False


def missing_paths(text: str) -> list[str]:
    """The repository paths, modules and bare file names the text names that do not exist."""
    missing = []
    for span in code_spans(text):
        for word in _words(span):
            if word.startswith(OUTPUTS):
                continue
            if "/" in word and word.split("/")[0] in REPOSITORY_FOLDERS:
                if not _exists(_pattern(word)):
                    missing.append(word)
            elif "/" not in word and (m := BARE_NAME.match(word)) and "." + m.group(1) in SOURCE_SUFFIXES:
                if not _exists_anywhere(word):
                    missing.append(word)
        for name in MODULE.findall(span):
            if not ((ROOT / "autograder" / f"{name}.py").exists() or (ROOT / "autograder" / name).is_dir()):
                missing.append(f"autograder.{name}")
    return sorted(set(missing))


def make_targets() -> set[str]:
    targets = set()
    for line in (ROOT / "Makefile").read_text().splitlines():
        m = re.match(r"^([a-z][\w-]*(?:\s+[a-z][\w-]*)*)\s*:(?!=)", line)
        if m:
            targets.update(m.group(1).split())
    return targets


def unknown_make_targets(text: str) -> list[str]:
    targets = make_targets()
    return sorted({t for span in code_spans(text) for t in MAKE.findall(span) if t not in targets})


def anchors(text: str) -> set[str]:
    """GitHub's anchors for the page's headings (lower case, punctuation dropped, spaces as hyphens)."""
    seen: dict[str, int] = {}
    result = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", FENCE.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", "")).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else f"{slug}-{n}")
    return result


def broken_links(page: Path, text: str) -> list[str]:
    """The relative links of a page whose file does not exist or whose anchor is no heading of it."""
    broken = []
    for target in LINK.findall(FENCE.sub("", text)):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists() or ROOT not in (path, *path.parents):
            broken.append(target)
        elif anchor and (path.suffix != ".md"
                         or anchor not in anchors(path.read_text(encoding="utf-8") if file else text)):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_page_names_exists(page):
    text = page.read_text(encoding="utf-8")
    assert missing_paths(text) == [], f"{page.name} names files or modules that do not exist: rename them there"
    assert unknown_make_targets(text) == [], f"{page.name} names make targets the Makefile does not have"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_of_a_page_resolves(page):
    assert broken_links(page, page.read_text(encoding="utf-8")) == []


def test_every_docs_page_is_linked():
    linked = {(page.parent / target.partition("#")[0]).resolve()
              for page in PAGES for target in LINK.findall(page.read_text(encoding="utf-8"))
              if not re.match(r"^[a-z]+:", target) and not target.startswith("#")}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


def test_the_checks_catch_stale_names(tmp_path):
    """Each check fails on what it is meant to catch and accepts placeholders, outputs and commands."""
    text = ("Run `make lab`, `make frobnicate`, `python -m autograder.grade`, `python -m autograder.nosuch`; see\n"
            "`autograder/checks/lessonNN.py`, `solutions/NN_name.py`, `tests/grading/test_grading_*.py`,\n"
            "`feedback/<student>/<lesson>.html`, `OUT/canary/<lesson>.ipynb`, `build/screenshots/<lesson>.png`,\n"
            "`autograder/bugs.py`, `tests/test_gone.py`, `page_safety.py`, `gone_module.py`, `grades.csv`.\n"
            "```bash\nPYTHONPATH=. python bench/nothing.py  # a command\n```\n"
            "## A heading: with `code`\n"
            "[ok](docs/grading.md#the-canary) [self](#a-heading-with-code) [gone](docs/gone.md) "
            "[bad anchor](docs/grading.md#no-such-heading) [web](https://example.org/x.md)\n")
    assert missing_paths(text) == ["autograder.nosuch", "autograder/bugs.py", "bench/nothing.py", "gone_module.py",
                                   "tests/test_gone.py"]
    assert unknown_make_targets(text) == ["frobnicate"]
    page = ROOT / "README.md"  # links resolve from the repository root
    assert broken_links(page, text) == ["docs/gone.md", "docs/grading.md#no-such-heading"]


def test_every_module_names_the_tests_that_prove_it():
    text = (ROOT / "docs" / "maintainers.md").read_text(encoding="utf-8")
    table = text.split("## Which test proves which module", 1)[1].split("\n## ", 1)[0]
    named = {word for span in code_spans(table) for word in _words(span)}
    modules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "autograder").rglob("*.py")
                     if p.name != "__init__.py")
    unnamed = [m for m in modules if m not in named and re.sub(r"lesson\d\d", "lessonNN", m) not in named]
    assert unnamed == [], "add these modules to the table in docs/maintainers.md"
