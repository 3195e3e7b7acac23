"""Bad input fails the strict build loudly, on a temporary copy of the project."""

import shutil
import time
from pathlib import Path

import pytest
from tests.conftest import ROOT, mkdocs_build

COPIED = ["mkdocs.yml", "docs", "snippets", "hooks", "tools", "records", ".cache/mkdocs-jupyter"]


@pytest.fixture
def project(tmp_path, site):
    """A copy of the project; `site` first, so the copy's build reuses its caches."""
    for name in COPIED:
        source, target = ROOT / name, tmp_path / name
        if source.is_dir():
            shutil.copytree(source, target)
        elif source.is_file():
            shutil.copy2(source, target)
    return tmp_path


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


def build_fails(project):
    proc = mkdocs_build(project, project / "site")
    assert proc.returncode != 0, "the build passed despite the fault"
    return proc.stderr


def test_failing_and_hanging_snippets_fail_the_build(project):
    broken = project / "snippets" / "broken"
    broken.mkdir()
    (broken / "raises.py").write_text('print("start")\nraise RuntimeError("injected fault 4711")\n')
    pidfile = project / "child.pid"
    (broken / "hangs.py").write_text(
        "# snippet: timeout=3\nimport subprocess, time\n"
        f"child = subprocess.Popen(['sleep', '300'])\nopen({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(300)\n")
    log = build_fails(project)
    assert "snippet snippets/broken/raises.py exited with code 1" in log
    assert "RuntimeError: injected fault 4711" in log
    assert "snippet snippets/broken/hangs.py timed out after 3 s" in log
    assert not alive(int(pidfile.read_text())), "the timeout left the snippet's child running"


def test_missing_include_section_fails_the_build(project):
    page = project / "docs" / "pytorch" / "tensors.md"
    page.write_text(page.read_text() + '\n```python\n--8<-- "snippets/pytorch/tensors.py:nope"\n```\n')
    assert "nope" in build_fails(project)


def test_missing_include_file_fails_the_build(project):
    page = project / "docs" / "pytorch" / "tensors.zh.md"
    page.write_text(page.read_text() + '\n```python\n--8<-- "snippets/missing.py"\n```\n')
    assert "snippets/missing.py" in build_fails(project)


def test_broken_anchor_fails_the_build(project):
    page = project / "docs" / "index.md"
    page.write_text(page.read_text() + "\n[see](pytorch/tensors.md#no-such-anchor)\n")
    assert "no-such-anchor" in build_fails(project)


def test_unknown_output_line_fails_the_build(project):
    page = project / "docs" / "glossary.md"
    page.write_text(page.read_text() + "\n<!-- output: snippets/nowhere.py -->\n")
    assert "snippets/nowhere.py" in build_fails(project)


def test_failing_lab_cell_fails_the_build(project):
    lab = project / "docs" / "labs" / "autograd.md"
    lab.write_text(lab.read_text() + '\n```python\nraise RuntimeError("injected fault 1848")\n```\n')
    log = build_fails(project)
    assert "lab docs/labs/autograd.md failed" in log and "injected fault 1848" in log


def test_malformed_record_fails_the_build(project):
    (project / "records" / "nvidia-h200-2026-12-03.json").write_text('{"machine": {}', encoding="utf-8")
    log = build_fails(project)
    assert "records/nvidia-h200-2026-12-03.json: not valid JSON" in log
