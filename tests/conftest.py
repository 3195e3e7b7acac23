"""Shared fixtures: one strict build per test session, offline where the machine allows.

The session starts with empty snippet and lab caches, so the build really runs
every snippet and lab, once, with no network (``unshare -n`` with only loopback
up). The snippet tests then read those results from the cache; a snippet that
failed is not cached, so its test runs it again and reports its own error.
"""

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from sitebuild import results, snippets

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    os.environ["SNIPPET_CACHE_DIR"] = tempfile.mkdtemp(prefix="snippet-cache-")
    os.environ["LAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="lab-cache-")  # sitebuild/labs.py
    os.environ["NO_MKDOCS_2_WARNING"] = "1"


COLLECTED: set[str] = set()  # the test files this session runs
JOBS: dict[str, Future] = {}
_threads = ThreadPoolExecutor(max_workers=4)  # CPU profiles, PDFs, fault builds, page checks


def background(key: str, work, *args) -> Future:
    """``work(*args)`` in a thread, started once per session under ``key``.

    Long jobs start early (at collection, or when the build is done) and fill the
    cores the tests in between leave idle; the tests that need a result wait for it.
    """
    if key not in JOBS:
        JOBS[key] = _threads.submit(work, *args)
    return JOBS[key]


def pytest_collection_modifyitems(items):
    """The browser's page checks last: they run in the background (tests/test_browser.py)
    and every other test runs meanwhile, instead of leaving a core idle at the end."""
    items.sort(key=lambda item: getattr(item, "originalname", "") == "test_page_in_browser")


def start_jobs(modules: list[str], *args):
    """``tests.<module>.start(*args)`` for each of these test files this session runs."""
    for module in modules:
        if f"{module}.py" in COLLECTED:
            importlib.import_module(f"tests.{module}").start(*args)


def pytest_collection_finish(session):
    """Start the CPU-profile runs now, in the background (tests/test_cpu_profiles.py)."""
    COLLECTED.update(item.path.name for item in session.items)
    start_jobs(["test_cpu_profiles"])


def pytest_unconfigure(config):
    shutil.rmtree(os.environ["SNIPPET_CACHE_DIR"], ignore_errors=True)
    shutil.rmtree(os.environ["LAB_CACHE_DIR"], ignore_errors=True)


# The repository the page actions link to in the test build; the Pages workflow sets the real one.
REPO_URL = os.environ.get("REPO_URL") or "https://github.com/example/pytorch-on-gpus"

OFFLINE = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "offline"]


def offline_reason() -> str | None:
    """Why this machine cannot build without network, or None when it can."""
    try:
        probe = subprocess.run(OFFLINE + ["true"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError as missing:
        return f"{missing.filename} is not installed"
    return None if probe.returncode == 0 else f"unshare --net refused: {probe.stderr.strip()}"


def mkdocs_build(root: Path, site: Path, prefix=(), env: dict | None = None) -> subprocess.CompletedProcess:
    """A strict build, never with -q: quiet mode hides the warnings strict counts."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=root, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="session")
def build(tmp_path_factory):
    """The real site, built once (offline when possible); its log is kept beside it."""
    out = tmp_path_factory.mktemp("build") / "site"
    reason = offline_reason()
    # With REPO_URL, as the Pages workflow builds: the page actions are rendered (test_page_actions.py).
    proc = mkdocs_build(ROOT, out, prefix=() if reason else OFFLINE, env={"REPO_URL": REPO_URL})
    (out.parent / "build.log").write_text(proc.stderr, encoding="utf-8")
    return proc, out, reason


@pytest.fixture(scope="session")
def snippet_results(build):
    return results.run_all(snippets.discover())


@pytest.fixture(scope="session")
def site(build):
    proc, out, _ = build
    assert proc.returncode == 0, f"strict build failed:\n{proc.stderr[-4000:]}"
    # PDFs, broken copies, page checks, the ProperDocs build
    start_jobs(["test_pdf", "test_bad_input", "test_browser", "test_properdocs"], out)
    return out
