"""requirements.txt (pip) and environment.yml (conda, Binder) list the same packages with the same pins."""

import re

from autograder import course


def _pins(lines):
    pins = {}
    for line in lines:
        line = line.split("#")[0].strip().lstrip("- ").strip()
        if not line or line in ("pip",) or ":" in line:
            continue
        m = re.match(r"^([A-Za-z0-9_.-]+)\s*(.*)$", line)
        pins[m.group(1).lower()] = m.group(2).replace(" ", "")
    return pins


def test_pip_and_conda_environments_agree():
    req = _pins((course.ROOT / "requirements.txt").read_text().splitlines())
    env_lines = (course.ROOT / "environment.yml").read_text().split("dependencies:")[1].splitlines()
    conda = _pins(env_lines)
    conda.pop("python", None)
    assert req, "requirements.txt lists no packages"
    assert req == conda, f"only in pip: {req.keys() - conda.keys()}, only in conda: {conda.keys() - req.keys()}, " \
                         f"different pins: {[k for k in req.keys() & conda.keys() if req[k] != conda[k]]}"


def test_installed_versions_satisfy_the_pins():
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet

    for name, spec in _pins((course.ROOT / "requirements.txt").read_text().splitlines()).items():
        assert version(name) in SpecifierSet(spec), f"{name} {version(name)} is outside {spec}"
