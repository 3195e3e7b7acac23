"""Shared fixtures: one strict build per test session, offline where the machine allows.

`make test-all` (and CI) starts with empty snippet and lab caches, so the build really
runs every snippet and lab, once, with no network (``unshare -n`` with only loopback
up). `make test` (``CHECK_CACHE=1``) uses the build cache instead, as `make serve`
does, and skips the expensive checks that passed on the same inputs
(tests/check_cache.py). The snippet tests then read those results from the cache; a snippet that
failed is not cached, so its test runs it again and reports its own error.
"""

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import pytest

from sitebuild import results, search_index, snippets, translations
from tests import check_cache

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Empty snippet, lab, search-entry and Inductor caches (`make test-all`, CI), or the build's own (`make test`)."""
    config.addinivalue_line("markers", "reads(*paths): the files a test's outcome depends on "
                                       "(tests/check_cache.py); `make test` skips it while it passed on them")
    config.addinivalue_line("markers", "visits(*paths): the built pages a browser test loads (tests/test_browser.py); "
                                       "`make test` skips it while it passed on the same pages")
    if check_cache.enabled():  # the build cache, named, so that the builds of copies share it too
        from sitebuild import labs

        os.environ.setdefault("SNIPPET_CACHE_DIR", str(results.cache_dir()))
        os.environ.setdefault("LAB_CACHE_DIR", str(labs.EXECUTED))
        os.environ.setdefault("SEARCH_CACHE_DIR", str(search_index.cache_dir()))
    else:
        os.environ["SNIPPET_CACHE_DIR"] = tempfile.mkdtemp(prefix="snippet-cache-")
        os.environ["LAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="lab-cache-")  # sitebuild/labs.py
        os.environ["SEARCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="search-cache-")  # sitebuild/search_index.py
        # torch.compile's kernels too: torch's default folder in /tmp outlives a run, and a warm one
        # hid a cold compile's cost (and anything that fails only cold) from every run but a new machine's.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-cache-")
        # And load_inline's C++ extensions (snippets/compile/kernel_ops.py): in ~/.cache/torch_extensions
        # they outlive the run, and ninja does not build them again while the sources and flags hold.
        os.environ["TORCH_EXTENSIONS_DIR"] = tempfile.mkdtemp(prefix="torch-extensions-")
    os.environ["NO_MKDOCS_2_WARNING"] = "1"
    # One build date for every build of the session (sitebuild/build_info.built): the two engines'
    # sites are compared byte for byte, also when the run crosses midnight.
    os.environ.setdefault("SOURCE_DATE_EPOCH", str(int(time.time())))


KEPT_CODE = [Path(__file__), Path(check_cache.__file__), Path(snippets.__file__)]
KEY = pytest.StashKey[str]()  # a key that a fixture worked out, e.g. from the built site (tests/test_browser.py)


def kept_key(item) -> str | None:
    """The key of a test marked ``reads``: its id, the files it reads, its module, the machine."""
    if KEY in item.stash:
        return item.stash[KEY]
    mark = item.get_closest_marker("reads")
    if mark is None:
        return None
    return check_cache.key(f"test {item.nodeid}", check_cache.tree(*mark.args), [item.path, *KEPT_CODE])


def kept(item) -> bool:
    """Whether `make test` skips this test: it passed before on the same inputs."""
    key = kept_key(item) if check_cache.enabled() else None
    return bool(key) and check_cache.get(key) is not None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before any fixture: under `make test`, a marked test that passed on the same inputs is skipped."""
    if kept(item):
        pytest.skip("passed before on the same files, machine and code (tests/check_cache.py); "
                    "make test-all runs it")


KEPT_BY = "(tests/check_cache.py)"  # in the reason of every test skipped because it passed before


def skip_summary(reasons: list[str], cache: bool) -> list[str]:
    """The lines that end a session: each skip reason but the check cache's, with its count,
    then, under `make test`, how many checks it kept from earlier passes."""
    others = Counter(reason.removeprefix("Skipped: ") for reason in reasons if KEPT_BY not in reason)
    lines = [f"{n} skipped: {reason}" for reason, n in sorted(others.items())]
    kept = sum(KEPT_BY in reason for reason in reasons)
    if cache and kept:
        lines.append(f"{kept} check{'s' * (kept > 1)} kept from earlier passes on the same inputs "
                     f"(tests/check_cache.py); `make test-all` runs {'them' if kept > 1 else 'it'}")
    elif cache:
        lines.append("0 checks kept from earlier passes on the same inputs (tests/check_cache.py), as on a first "
                     "run; the next `make test` skips each check that passes now, while what it reads is unchanged")
    return lines


def pytest_terminal_summary(terminalreporter):
    """Why tests were skipped, in a few lines, not one per test (make test keeps a hundred)."""
    reasons = [report.longrepr[2] for report in terminalreporter.stats.get("skipped", [])
               if isinstance(report.longrepr, tuple)]
    for line in skip_summary(reasons, check_cache.enabled()):
        terminalreporter.write_line(line)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when == "call" and report.passed and check_cache.enabled() and (key := kept_key(item)):
        check_cache.put(key, True)


COLLECTED: set[str] = set()  # the test files this session runs
JOBS: dict[str, Future] = {}
_threads = ThreadPoolExecutor(max_workers=4)  # the build, the CPU profiles, the PDFs, the fault builds


def background(key: str, work, *args, yields: bool = False) -> Future:
    """``work(*args)`` in a thread, started once per session under ``key``.

    Long jobs start early (at collection, or when the build is done) and fill the
    cores the tests in between leave idle; the tests that need a result wait for it.
    A job that ``yields`` runs in a thread of its own at nice 10, and so does every process
    it starts (Linux's nice is per thread, and inherited): for jobs that only the last tests
    wait for, which then take the cores that the tests before them leave idle, instead of
    slowing those tests down and leaving the cores idle after.
    """
    if key not in JOBS:
        JOBS[key] = yielding(work, *args) if yields else _threads.submit(work, *args)
    return JOBS[key]


def yielding(work, *args) -> Future:
    """``work(*args)`` in a new thread at nice 10."""
    done = Future()

    def run():
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except OSError:  # this thread's id is no process id (macOS): at the usual priority
            pass
        try:
            done.set_result(work(*args))
        except BaseException as error:
            done.set_exception(error)
    threading.Thread(target=run, name=f"yielding {work.__name__}", daemon=True).start()
    return done


# Test files whose subject is the snippets' behaviour (run under other settings, other
# devices, torchrun), and the one that checks the CPU profiles take effect: what they read.
READS = {name: ("snippets",) for name in ("test_arrays.py", "test_compile.py", "test_gpu.py", "test_gpu_branches.py",
                                           "test_multi_gpu.py", "test_one_gpu.py", "test_practice.py",
                                           "test_triton.py", "test_kernel_ops.py")}
# Builds that test the machinery, not the prose: faults injected into copies of the project,
# and the same site built by a second engine. No sentence of a page can change their outcome.
MACHINERY = ("mkdocs.yml", "overrides", "hooks", "sitebuild", "records", "snippets")
READS.update({"test_serve.py": MACHINERY, "test_bad_input.py": MACHINERY, "test_properdocs.py": MACHINERY})
READS["test_forkserver.py"] = ("sitebuild",)  # its own demo scripts, run by sitebuild's fork servers
READS["test_forked_kernel.py"] = ("sitebuild",)  # its own demo labs, run by sitebuild's fork servers
READS_TEST = {"test_profile_really_changes_the_kernels": (),  # torch and the machine only
              "test_a_run_on_this_cpu_becomes_a_record_the_build_shows": ("notebooks", "snippets", "sitebuild")}


# Fixtures that wait for a background job: the CPU profiles, and those started once the site is built.
WAITING = {"profile_runs", "builds", "pdfs", "sites", "patch_snippets"}
# ... for the browser's page checks, or for every job (a font setting that no job may see: test_pdf.py)
LAST = {"page_reports", "no_cjk_fonts"}


def order(item) -> int:
    """0: the tests that do not need the site, which run while it is built (``start_build``);
    1: those that need it; 2: those that wait for another background job; 3: those that wait
    for the browser's page checks, which run at a lower priority and take the cores the others
    leave idle (tests/test_browser.py). So the tests run meanwhile, instead of leaving a core idle."""
    names = set(getattr(item, "fixturenames", ()))
    return 3 if names & LAST else 2 if names & WAITING else int("build" in names)


def pytest_collection_modifyitems(items):
    """The tests in ``order``, and the ``reads`` marks of READS and READS_TEST."""
    items.sort(key=order)
    for item in items:
        paths = READS.get(item.path.name, READS_TEST.get(getattr(item, "originalname", "")))
        if paths is not None:
            item.add_marker(pytest.mark.reads(*paths))


def start_jobs(modules: list[str], *args):
    """``tests.<module>.start(*args)`` for each of these test files this session runs, unless
    `make test` skips every one of its tests (passed on the same inputs: tests/check_cache.py)."""
    for module in modules:
        if f"{module}.py" in COLLECTED:
            importlib.import_module(f"tests.{module}").start(*args)


def pytest_collection_finish(session):
    """Start the site's build and the CPU-profile runs now, in the background
    (tests/test_cpu_profiles.py); not for `pytest --collect-only`, which would wait
    minutes for them at exit."""
    if session.config.option.collectonly:
        return
    running = [item for item in session.items if not kept(item)]
    COLLECTED.update(item.path.name for item in running)
    if any(order(item) > 0 for item in running):
        start_build(session.config)
    start_jobs(["test_cpu_profiles"])


def pytest_unconfigure(config):
    if not check_cache.enabled():
        for name in ("SNIPPET_CACHE_DIR", "LAB_CACHE_DIR", "SEARCH_CACHE_DIR", "TORCH_EXTENSIONS_DIR"):
            shutil.rmtree(os.environ[name], ignore_errors=True)
        for folder in Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).parent.glob(
                Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).name + "*"):  # the CPU profiles' too (snippets.inductor_cache)
            shutil.rmtree(folder, ignore_errors=True)


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


def start_build(config) -> Future:
    """The real site's build, once per session, in the background."""
    if "build" not in JOBS:  # tmp_path_factory's own folder, before any fixture can be asked for it
        background("build", build_site, config._tmp_path_factory.mktemp("build") / "site")
    return JOBS["build"]


def build_site(out: Path) -> tuple[subprocess.CompletedProcess, Path, str | None]:
    """The real site, built offline where possible; its log is kept beside it. Once it is
    built, the jobs that check it start: PDFs, broken copies, page checks, the ProperDocs build."""
    reason = offline_reason()
    # With REPO_URL, as the Pages workflow builds: the page actions are rendered (test_page_actions.py).
    # PYTEST_CURRENT_TEST: whichever test runs meanwhile; this build is no test's (snippets.note_run).
    proc = mkdocs_build(ROOT, out, prefix=() if reason else OFFLINE, env={"REPO_URL": REPO_URL, "PYTEST_CURRENT_TEST": ""})
    (out.parent / "build.log").write_text(proc.stderr, encoding="utf-8")
    if proc.returncode == 0:
        start_jobs(["test_pdf", "test_bad_input", "test_browser", "test_properdocs"], out)
    return proc, out, reason


@pytest.fixture(scope="session")
def build(request):
    return start_build(request.config).result()  # the job that collection started


@pytest.fixture
def patch_snippets(monkeypatch):
    """``monkeypatch``, for sitebuild.snippets' globals (ROOT, SNIPPETS, discover): once the
    CPU profiles, which run snippets in background threads with them, are done."""
    wait([job for key, job in JOBS.items() if key.startswith("profile ")])
    return monkeypatch


@pytest.fixture(scope="session")
def snippet_results(build):
    return results.run_all(snippets.discover())


@pytest.fixture(scope="session")
def site(build):
    proc, out, _ = build
    skip_if_a_twin_is_missing(proc)
    assert proc.returncode == 0, f"strict build failed:\n{proc.stderr[-4000:]}"
    return out


def skip_if_a_twin_is_missing(proc):
    """A build stopped by a page without its twin (hooks/translations.py): every test of the
    site is skipped, with that cause; tests/test_parity.py reports it, once, and how to fix it."""
    missing = translations.missing_twins(ROOT / "docs") if proc.returncode else []
    if missing:
        pytest.skip(f"no site: the build stops at {missing[0].split(':')[0]} (tests/test_parity.py)")
