"""The learner bundle, what an instructor hands out: ``make bundle`` (``python -m autograder.publish.bundle``).

    python -m autograder.publish.bundle [--out build/mha-course-lessons.zip]

One zip holding a folder with the student notebooks of ``lessons/`` (each works alone: its first code cell writes
its self-check modules, ``autograder/course/helper_cell.py``), the glossary, a ``requirements.txt`` written from
``binder/environment.yml`` (``autograder/publish/learner_env.py``) and a short README (``autograder/publish/bundle_readme.md``).
Files are named one by one, so nothing else of ``lessons/`` (``.ipynb_checkpoints/``, a learner's scratch file)
and nothing of the maintainers' goes in. The same lessons give the same bytes (fixed file dates).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zipfile
from pathlib import Path

from autograder import course
from autograder.publish import learner_env

FOLDER = "mha-course-lessons"
DEFAULT_OUT = course.ROOT / "build" / f"{FOLDER}.zip"
README_TEMPLATE = Path(__file__).with_name("bundle_readme.md")
_DATE = (2020, 1, 1, 0, 0, 0)


def _title(notebook: Path) -> str:
    first = json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]["source"]
    return "".join(first).splitlines()[0].lstrip("# ").strip()


def _python(spec: str) -> str:
    """">=3.10,<3.14" as a learner reads it: "3.10 to 3.13"."""
    match = re.fullmatch(r">=(3\.\d+),<3\.(\d+)", spec)
    return f"{match.group(1)} to 3.{int(match.group(2)) - 1}" if match else spec


def readme(lessons_dir: Path) -> str:
    lessons = "\n".join(f"- `{name}.ipynb`: {_title(lessons_dir / f'{name}.ipynb')}" for name in course.lesson_names())
    return README_TEMPLATE.read_text(encoding="utf-8").format(python=_python(learner_env.environment()["python"]),
                                                              lessons=lessons)


def contents(lessons_dir=None) -> dict:
    """{name inside the bundle's folder: bytes}."""
    lessons_dir = Path(lessons_dir or course.LESSONS)
    files = {f"{name}.ipynb": (lessons_dir / f"{name}.ipynb").read_bytes() for name in course.lesson_names()}
    files.update({page: (lessons_dir / page).read_bytes() for page in course.PAGES})
    files["requirements.txt"] = learner_env.requirements().encode("utf-8")
    files["README.md"] = readme(lessons_dir).encode("utf-8")
    return files


def write(out: Path, lessons_dir=None) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in contents(lessons_dir).items():
            info = zipfile.ZipInfo(f"{FOLDER}/{name}", date_time=_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the zip to write (default: %(default)s)")
    args = parser.parse_args(argv)
    path = write(Path(args.out))
    print(f"wrote {path}: the {len(course.lesson_names())} lessons, the glossary, requirements.txt and a README; "
          f"unzipped, it is the folder {FOLDER}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
