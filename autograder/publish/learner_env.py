"""What a learner needs to run the lessons, and where Binder finds the course: each set in one place.

* The packages: ``binder/environment.yml`` (only what the lessons import, plus JupyterLab, with the pins of
  ``requirements.txt``). Binder builds it; ``make bundle`` writes the bundle's ``requirements.txt`` from it
  (``requirements``); ``tests/unit/publish/test_learner_env.py`` checks it against the imports of the lessons' code.
* The repository Binder builds: ``REPOSITORY``. The README's Binder badge is written from it:

    python -m autograder.publish.learner_env            # rewrite the README's badge line (`make docs` runs it)
    python -m autograder.publish.learner_env --check    # exit 1 if the README's badge differs
"""

from __future__ import annotations

import argparse
import re
import sys

from autograder import course

ENVIRONMENT = course.ROOT / "binder" / "environment.yml"
README = course.ROOT / "README.md"
# The GitHub repository (owner/name) that Binder builds. Set it where the course is published, then `make docs`.
REPOSITORY = "OWNER/mha-course"
FIRST_LESSON = "lessons/01_warmup.ipynb"
_BADGE_LINE = re.compile(r"^\[!\[Launch the lessons on Binder\]\(.*$", re.M)


def read_pins(lines) -> dict:
    """{package: version specifier} of requirements lines or a conda ``dependencies:`` list (python included)."""
    pins = {}
    for line in lines:
        line = line.split("#")[0].strip().removeprefix("- ").strip()
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*([<>=!~].*)?", line)
        if match and match.group(1) != "pip":
            pins[match.group(1).lower()] = (match.group(2) or "").replace(" ", "")
    return pins


def environment() -> dict:
    """{package: specifier} of binder/environment.yml, python included."""
    return read_pins(ENVIRONMENT.read_text(encoding="utf-8").split("dependencies:", 1)[1].splitlines())


def packages() -> dict:
    """{package: specifier} a learner installs with pip: binder/environment.yml without python itself."""
    return {name: spec for name, spec in environment().items() if name != "python"}


def requirements() -> str:
    """The learner bundle's requirements.txt."""
    return ("# What the lessons need: pip install -r requirements.txt (Python "
            f"{environment()['python']}).\n" + "".join(f"{name}{spec}\n" for name, spec in packages().items()))


def binder_url() -> str:
    return f"https://mybinder.org/v2/gh/{REPOSITORY}/HEAD?urlpath=lab/tree/{FIRST_LESSON}"


def badge() -> str:
    """The README's badge line (a link that opens the first lesson in JupyterLab on Binder)."""
    return f"[![Launch the lessons on Binder](https://mybinder.org/badge_logo.svg)]({binder_url()})"


def readme_with_badge(text: str) -> str:
    if not _BADGE_LINE.search(text):
        raise ValueError("README.md has no Binder badge line ('[![Launch the lessons on Binder](...')")
    return _BADGE_LINE.sub(lambda _: badge(), text, count=1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write the README's Binder badge from REPOSITORY")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    wanted = readme_with_badge(text)
    if args.check:
        if wanted != text:
            print("README.md's Binder badge differs from autograder/publish/learner_env.py: run `make docs`.", file=sys.stderr)
            return 1
        print("README.md's Binder badge matches REPOSITORY")
        return 0
    README.write_text(wanted, encoding="utf-8")
    print(f"wrote the Binder badge of README.md ({REPOSITORY})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
