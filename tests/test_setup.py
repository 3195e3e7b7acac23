"""`make` refuses an unsuitable Python plainly, before touching the virtual environment; the
Python floor the README states is the one the Makefile checks, CI runs, and every pin allows."""

import re
import shutil
import subprocess
import sys
import zipfile
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


def test_the_other_documents_state_the_same_floor():
    """CONTRIBUTING.md and the GPU workflow's comment may say "Python 3.11.5+": the same floor."""
    floor = stated_floor()
    for name in ("CONTRIBUTING.md", ".github/workflows/gpu-record.yml"):
        text = " ".join((ROOT / name).read_text(encoding="utf-8").split())
        stated = set(re.findall(r"Python (3\.\d+(?:\.\d+)?)(?:\+| or newer)", text))
        assert stated == {floor}, f"{name} states Python {sorted(stated) or 'no floor'}; the README says {floor}"


# --- the README and CONTRIBUTING.md: what they promise, and the sections others point to ---

def test_the_readme_states_the_command_ci_runs():
    """`.ci/run` ends with the test command; the README's Quick start must name it."""
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert commands[-1] == "make test-all", commands[-1]
    quick_start = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## ")[1]
    assert quick_start.startswith("Quick start") and commands[-1] in quick_start and ".ci/run" in quick_start


SECTION_REFERENCE = re.compile(r'\b(README|CONTRIBUTING)(?:\.md)?(?:\'s)?,? "([^"]+)"|\b(README) ?中的 ?“([^”]+)”')
HEADING = re.compile(r"^#{2,} (.+?)(?: \{[^}]*\})?$", re.M)


def section_references() -> list[tuple[str, str, str]]:
    """(file, document, section) for each "README, \"Section\"" and the like, in every tracked text file."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in listed:
        path = ROOT / name
        if path.suffix in {".md", ".py", ".yml", ".toml"} or name in {"Makefile", ".ci/run"}:
            if path.is_file():
                text = " ".join(path.read_text(encoding="utf-8").split())
                for match in SECTION_REFERENCE.finditer(text):
                    document, section = (match.group(1), match.group(2)) if match.group(1) else match.group(3, 4)
                    found.append((name, f"{document}.md", section))
    return found


def test_every_section_named_in_readme_or_contributing_exists():
    references = section_references()
    assert {("Makefile", "CONTRIBUTING.md", "Build engine"), ("README.md", "CONTRIBUTING.md", "Writing a snippet"),
            ("docs/provenance.md", "README.md", "Add your machine")} <= set(references), references
    headings = {name: set(HEADING.findall((ROOT / name).read_text(encoding="utf-8")))
                for name in ("README.md", "CONTRIBUTING.md")}
    missing = [ref for ref in references if ref[2] not in headings[ref[1]]]
    assert not missing, f"sections named but not found (file, document, section): {missing}"


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
# The edits allowed in the machinery, both in the attribution's bootstrap: a snippet run (fresh
# or forked) puts the snippet's folder first, as `python x.py` does; and a rank of such a run
# imports the recorder from the package's own folder, then takes that entry out again
# (attribution.follow: a rank may start in another working folder, as on Colab).
SNIPPET_FOLDER_FIRST = "sitebuild/attribution.py:"
# And in a snippet, this line only: it reaches the snippets' helpers (snippets/_figures.py,
# _storage.py, compile/_toolchain.py) from a section's folder (`python snippets/<section>/<page>.py`
# puts only that folder first).
FIGURE_HELPER = re.compile(r"sys\.path" r"\.append\(str\(Path\(__file__\)\.resolve\(\)\.parents\[1\]\)\)"  # split: not an edit itself
                           r"  # snippets/: the shared (figure helper|helpers)")


def test_no_code_edits_sys_path():
    """The site's machinery is one installed package (pyproject.toml); nothing reaches it by path.
    Snippets reach their shared figure helper by one fixed line (FIGURE_HELPER)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    edits = [f"{name}:{n}" for name in listed if (ROOT / name).is_file()  # not one deleted since
             for n, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1)
             if SYS_PATH_EDIT.search(line)]
    machinery = [edit for edit in edits if edit.startswith(SNIPPET_FOLDER_FIRST)]
    helper = [edit for edit in edits if edit.startswith("snippets/")
              and FIGURE_HELPER.fullmatch(lines(edit).strip())]
    assert len(machinery) <= 2 and sorted(edits) == sorted(machinery + helper), edits


def lines(edit: str) -> str:
    """The line of ``path:n``."""
    name, n = edit.rsplit(":", 1)
    return (ROOT / name).read_text(encoding="utf-8").splitlines()[int(n) - 1]


# --- the editable install: quiet, and pointing at the checkout ---------------------------

def test_the_editable_install_prints_no_warning(tmp_path):
    """What `pip install --editable .` (make) asks of setuptools, on a copy of the package: no
    "Editable installation" warning (pip shows it as a BuildBackendWarning at every first setup),
    and a wheel whose .pth puts the copy itself on sys.path, so that edits need no reinstall."""
    shutil.copy2(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(ROOT / "sitebuild", tmp_path / "sitebuild", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "wheel").mkdir()
    proc = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                           "print(build_meta.build_editable(sys.argv[1]))", "wheel"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Editable installation" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
    with zipfile.ZipFile(tmp_path / "wheel" / proc.stdout.split()[-1]) as wheel:
        pth = [name for name in wheel.namelist() if name.endswith(".pth")]
        assert len(pth) == 1, wheel.namelist()
        assert wheel.read(pth[0]).decode().split() == [str(tmp_path)]
