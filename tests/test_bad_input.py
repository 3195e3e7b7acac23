"""Bad input fails the strict build loudly, each fault in its own copy of the project.

The nine builds (and tests/test_hostile_records.py's, which must pass) start in the background as soon as the session's build is done
(``start``, from conftest.py), so that they reuse its snippet and lab caches. A
build is single-threaded: side by side they keep both cores busy while the tests
in between run, instead of one core for half a minute.
"""

import shutil
import subprocess
import time
from concurrent.futures import Future
from pathlib import Path

import pytest
from tests.conftest import ROOT, background, mkdocs_build

# `python -m mkdocs` in a copy imports the copy's own sitebuild: the working folder comes first
# on sys.path, before the editable install of this checkout's package.
COPIED = ["mkdocs.yml", "docs", "overrides", "snippets", "hooks", "sitebuild", "records", ".cache/mkdocs-jupyter"]
FAULTS = {}  # name -> inject(project), which breaks a fresh copy of the project


def fault(inject):
    FAULTS[inject.__name__] = inject
    return inject


def append(path: Path, text: str):
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


@fault
def raising_and_hanging_snippets(project):
    broken = project / "snippets" / "broken"
    broken.mkdir()
    (broken / "raises.py").write_text('print("start")\nraise RuntimeError("injected fault 4711")\n')
    (broken / "hangs.py").write_text(
        "# snippet: timeout=3\nimport subprocess, time\n"
        f"child = subprocess.Popen(['sleep', '300'])\nopen({str(project / 'child.pid')!r}, 'w').write(str(child.pid))\n"
        "time.sleep(300)\n")
    # The raising one is on a page in each language (its output; its code), the hanging one on none.
    append(project / "docs" / "pytorch" / "tensors.md", "\n<!-- output: snippets/broken/raises.py -->\n")
    append(project / "docs" / "pytorch" / "tensors.zh.md", '\n```python\n--8<-- "snippets/broken/raises.py"\n```\n')


@fault
def missing_include_section(project):
    append(project / "docs" / "pytorch" / "tensors.md",
           '\n```python\n--8<-- "snippets/pytorch/tensors.py:nope"\n```\n')


@fault
def missing_include_file(project):
    append(project / "docs" / "pytorch" / "tensors.zh.md", '\n```python\n--8<-- "snippets/missing.py"\n```\n')


@fault
def broken_anchor(project):
    append(project / "docs" / "index.md", "\n[see](pytorch/tensors.md#no-such-anchor)\n")


@fault
def unknown_output_line(project):
    append(project / "docs" / "glossary.md", "\n<!-- output: snippets/nowhere.py -->\n")


@fault
def failing_lab_cell(project):
    append(project / "docs" / "labs" / "autograd.md", '\n```python\nraise RuntimeError("injected fault 1848")\n```\n')


@fault
def malformed_record(project):
    (project / "records" / "nvidia-h200-2026-12-03.json").write_text('{"machine": {}', encoding="utf-8")


@fault
def page_without_its_twin(project):
    shutil.copy(project / "docs" / "pytorch" / "tensors.md", project / "docs" / "pytorch" / "new_page.md")


@fault
def package_of_another_copy(project):
    shutil.rmtree(project / "sitebuild")  # so the import finds this checkout's package instead


def build_with(name: str, project: Path) -> subprocess.CompletedProcess:
    """A copy of the project with one fault, built."""
    for item in COPIED:
        source, target = ROOT / item, project / item
        if source.is_dir():
            shutil.copytree(source, target)
        elif source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    FAULTS[name](project)
    # Its snippet runs are this file's, whichever test is in the foreground meanwhile (snippets.note_run).
    return mkdocs_build(project, project / "site", env={"PYTEST_CURRENT_TEST": f"tests/test_bad_input.py::{name}"})


def copy_for(site: Path, name: str) -> Path:
    return site.parent / "faults" / name  # beside the session's site


def start(site: Path) -> dict[str, Future]:
    """Every fault's build, in the background."""
    return {name: background(f"fault {name}", build_with, name, copy_for(site, name)) for name in FAULTS}


@pytest.fixture(scope="module")
def builds(site):
    return start(site)  # the same jobs when conftest.py started them


def failed(builds, name) -> str:
    """The log of the fault's build, which must have failed."""
    proc = builds[name].result()
    assert proc.returncode != 0, f"the build passed despite the fault {name}"
    return proc.stderr


def alive(pid, wait=5.0):
    """Whether pid still runs after `wait` seconds (SIGKILL lands asynchronously)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in "ZX":  # killed, waiting to be reaped
            return False
        time.sleep(0.1)
    return True


def test_failing_and_hanging_snippets_fail_the_build(builds, site):
    log = failed(builds, "raising_and_hanging_snippets")
    # Each failure: what happened, the pages to look at, then a header that introduces its stderr.
    assert ("snippet snippets/broken/raises.py exited with code 1\n"
            "pages that include it: docs/pytorch/tensors.md, docs/pytorch/tensors.zh.md\n"
            "--- its stderr (the last 25 lines at most) follows ---\n"
            "Traceback (most recent call last):\n") in log, log
    assert "RuntimeError: injected fault 4711" in log
    assert ("snippet snippets/broken/hangs.py timed out after 3 s\n"
            "no page includes it\n--- its stderr") in log, log
    assert "end of its stderr" not in log
    pidfile = copy_for(site, "raising_and_hanging_snippets") / "child.pid"
    assert not alive(int(pidfile.read_text())), "the timeout left the snippet's child running"


def test_missing_include_section_fails_the_build(builds):
    assert "nope" in failed(builds, "missing_include_section")


def test_missing_include_file_fails_the_build(builds):
    assert "snippets/missing.py" in failed(builds, "missing_include_file")


def test_broken_anchor_fails_the_build(builds):
    assert "no-such-anchor" in failed(builds, "broken_anchor")


def test_unknown_output_line_fails_the_build(builds):
    assert "snippets/nowhere.py" in failed(builds, "unknown_output_line")


def test_failing_lab_cell_fails_the_build(builds):
    log = failed(builds, "failing_lab_cell")
    assert "lab docs/labs/autograd.md failed" in log and "injected fault 1848" in log


def test_malformed_record_fails_the_build(builds):
    log = failed(builds, "malformed_record")
    assert "records/nvidia-h200-2026-12-03.json: not valid JSON" in log


def test_a_page_without_its_twin_fails_the_build_in_one_line(builds):
    """Not served in English under zh/ (static-i18n's fallback): one line, the page and the fix."""
    log = failed(builds, "page_without_its_twin")
    errors = [line for line in log.splitlines() if line.startswith(("ERROR", "WARNING"))]
    assert errors == ["ERROR   -  docs/pytorch/new_page.md has no Chinese twin docs/pytorch/new_page.zh.md: "
                      "copy it, translate it, then run make translated PAGE=docs/pytorch/new_page.zh.md"], log


def test_a_package_of_another_copy_fails_the_build(builds):
    log = failed(builds, "package_of_another_copy")
    assert f"sitebuild is imported from {ROOT}, not from" in log and "pip install --no-deps --editable ." in log
