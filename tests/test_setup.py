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


# --- the build engine: MkDocs 1.x with Material, and the package without sys.path edits ---

def engine_problems(version) -> list[str]:
    """What keeps this site from building, as what to install; ``version(name)`` as metadata's."""
    pins = {r.name: str(r) for r in pinned()}
    found = []
    try:
        mkdocs = version("mkdocs")
        if not mkdocs.startswith("1."):
            found.append(f"mkdocs {mkdocs} is installed, but this site builds with MkDocs 1.x: MkDocs 2 has "
                         f"no plugins, hooks or mkdocs.yml. Install {pins['mkdocs']} (pip install -r requirements.txt)")
    except metadata.PackageNotFoundError:
        found.append(f"mkdocs is missing: install {pins['mkdocs']} (pip install -r requirements.txt)")
    try:
        version("mkdocs-material")
    except metadata.PackageNotFoundError:
        found.append(f"Material for MkDocs is missing: install {pins['mkdocs-material']} "
                     "(pip install -r requirements.txt)")
    return found


def test_the_build_engine_is_mkdocs_1_with_material():
    assert not engine_problems(metadata.version), "\n".join(engine_problems(metadata.version))


def test_a_wrong_engine_is_named_with_what_to_install():
    def fake(versions):
        def version(name):
            if name not in versions:
                raise metadata.PackageNotFoundError(name)
            return versions[name]
        return version

    (mkdocs_2,) = engine_problems(fake({"mkdocs": "2.0.0", "mkdocs-material": "9.8.2"}))
    assert "mkdocs 2.0.0 is installed" in mkdocs_2 and "mkdocs==1.6.1" in mkdocs_2
    (no_material,) = engine_problems(fake({"mkdocs": "1.6.1"}))
    assert "Material for MkDocs is missing" in no_material and "mkdocs-material==" in no_material


SYS_PATH_EDIT = re.compile(r"sys\.path(\.insert|\.append|\.extend|\[[^\]]*\]\s*=|\s*\+=)")
# The one edit allowed: a forked snippet run puts the snippet's folder first, as `python x.py` does.
SNIPPET_FOLDER_FIRST = "sitebuild/forkserver.py:"


def test_no_code_edits_sys_path():
    """The site's machinery is one installed package (pyproject.toml); nothing reaches it by path."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    edits = [f"{name}:{n}" for name in listed if (ROOT / name).is_file()  # not one deleted since
             for n, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1)
             if SYS_PATH_EDIT.search(line)]
    allowed = [edit for edit in edits if edit.startswith(SNIPPET_FOLDER_FIRST)]
    assert len(allowed) <= 1 and edits == allowed, edits
