"""`make` refuses an unsuitable Python plainly, before touching the virtual environment; the
Python floor the README states is the one the Makefile checks, CI runs, and every pin allows."""

import re
import subprocess
from importlib import metadata

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from tests.conftest import ROOT


def test_unsuitable_python_is_refused(tmp_path):
    venv = tmp_path / "venv"
    proc = subprocess.run(["make", "-s", "serve", "PYTHON=/nonexistent/python3", f"VENV={venv}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "'/nonexistent/python3' is missing or unsuitable" in proc.stderr
    assert not venv.exists()



# --- the Python floor: README, Makefile, workflow and every pinned package agree ---------

FLOOR_IN_README = re.compile(r"Python (3\.\d+(?:\.\d+)?) or newer")
FLOOR_IN_MAKEFILE = re.compile(r"sys\.version_info >= \((3(?:, \d+)+)\)")
CONTAINER = re.compile(r"^\s*container: python:(3\.\d+)-", re.M)


def stated_floor() -> str:
    """'3.11.5', from the README's Quick start."""
    floors = set(FLOOR_IN_README.findall((ROOT / "README.md").read_text(encoding="utf-8")))
    assert len(floors) == 1, f"the README states {sorted(floors) or 'no'} Python floor(s); it must state one"
    return floors.pop()


def pinned() -> list[Requirement]:
    """requirements.txt's pins that apply to this machine (environment markers)."""
    lines = (line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines())
    return [r for r in map(Requirement, filter(None, lines)) if r.marker is None or r.marker.evaluate()]


def below(floor: str) -> dict[str, str]:
    """Pinned packages whose Requires-Python excludes Python `floor` (3.10 means 3.10.0)."""
    refused = {}
    for requirement in pinned():
        try:
            installed = metadata.version(requirement.name)
            requires = metadata.metadata(requirement.name).get("Requires-Python")
        except metadata.PackageNotFoundError:
            raise AssertionError(f"{requirement} is not installed: .venv does not match "
                                 f"requirements.txt (make rebuilds it)") from None
        assert requirement.specifier.contains(installed), f"{requirement}: {installed} is installed"
        if requires and not SpecifierSet(requires).contains(floor):
            refused[f"{requirement.name}=={installed}"] = requires
    return refused


def test_every_pinned_package_runs_on_the_stated_floor():
    floor = stated_floor()
    assert not below(floor), f"the README says Python {floor} or newer, but these require more: {below(floor)}"


def test_a_lower_floor_would_be_caught():
    """The check has teeth: the pins of mkdocs-material and numpy refuse Python 3.10."""
    refused = {name.split("==")[0].lower() for name in below("3.10")}
    assert {"mkdocs-material", "numpy"} <= refused, refused


def test_makefile_and_workflow_state_the_same_floor():
    floor = stated_floor()
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    checks = {found.replace(", ", ".") for found in FLOOR_IN_MAKEFILE.findall(makefile)}
    assert checks == {floor}, f"Makefile checks for Python {checks}, the README says {floor}"
    assert f"Python {floor} or newer" in makefile and f"Python >= {floor}" in makefile
    workflow = (ROOT / ".github" / "workflows" / "pages.yml").read_text(encoding="utf-8")
    minor = ".".join(floor.split(".")[:2])  # python:3.11-bookworm: the latest 3.11, at or above the floor
    assert CONTAINER.findall(workflow) == [minor], "CI runs in a container of the floor's minor version"
