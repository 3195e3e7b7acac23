"""`make bench`: how long a writer and CI wait, beside the CPU it was measured on.

Writes bench-report.md (and prints it). A benchmark, not a test: it asserts nothing,
it measures. Run it on an otherwise idle machine; CI's is 2 cores.

``python -m tests.bench [avx2|old-laptop|native]``: the builds and the suites run with
that CPU profile's variables (sitebuild/snippets.py), AVX2-only by default, because
CI's slowest host is an AVX2-only EPYC. The report starts with the real CPU and flags.

1. clean build: every cache removed, so every snippet and notebook runs;
2. prose-only `mkdocs build`: one sentence of one page changed, caches warm (the whole
   site is written again; the ≤ 3 s target is for `make serve`'s rebuild, row 3);
3. `make serve` in a fresh copy of the tree (no .cache): seconds to the first page, to
   the rebuild that shows every result, and from a prose edit to the browser's reload;
4. the full suite from empty caches (every snippet and check runs, as in `make test-all`
   and CI), then `make test` after a sentence added to the Chinese home page
   (tests/check_cache.py);
5. each snippet's run time, from the clean build's cache entries, and how often the full
   suite ran it, by whom, with the seconds in all (sitebuild/snippets.note_run);
6. bytes of HTML, CSS and JS that each page loads (images and fonts not counted);
7. Lighthouse scores of six pages (tests/lighthouse.py), offline against a local server.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from sitebuild import background, snippets
from tests import lighthouse  # Lighthouse scores, `make lighthouse`
from tests.serving import Served, fresh_copy

PROFILE = sys.argv[1] if len(sys.argv) > 1 else "avx2"
ENV = dict(os.environ, NO_MKDOCS_2_WARNING="1", **snippets.CPU_PROFILES.get(PROFILE, {}))
CACHE = ROOT / ".cache"
REPORT = ROOT / "bench-report.md"
PROSE_PAGE = ROOT / "docs" / "index.md"
SUITE_PAGE = ROOT / "docs" / "index.zh.md"
EDIT = "\nA sentence added by the benchmark.\n"
RUNS = ROOT / "test-artifacts" / "snippet-runs.jsonl"  # every snippet run of the full suite (run_counts)
# Targets on the AVX2-only EPYC, CI's slower host (on the AMX Xeon: 90 s and 270 s).
TARGETS = {"clean build": "≤ 150 s", "serve: first page": "≤ 20 s",
           "serve: edit to reload": "≤ 3 s", "full suite": "≤ 480 s", "make test after a prose edit": "≤ 60 s"}


def timed(cmd, env=None, check=True) -> tuple[float, str]:
    """Seconds and log of a command; a build that fails stops the benchmark, a suite is reported."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env or ENV)
    seconds = time.perf_counter() - start
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return seconds, proc.stdout + proc.stderr


def build(site: Path) -> tuple[float, str]:
    seconds, log = timed([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)])
    ran = re.findall(r"(\d+) snippets ran, (\d+) from cache", log)
    notebooks = len(re.findall(r"notebooks: lab \S+ executed", log))
    runs = "; ".join(f"{r} ran, {c} cached" for r, c in ran)
    return seconds, f"snippets: {runs}; labs executed: {notebooks}"


class edited:
    """A sentence added to a page for the duration of a ``with`` block."""

    def __init__(self, page: Path):
        self.page, self.original = page, page.read_text(encoding="utf-8")

    def __enter__(self):
        self.page.write_text(self.original + EDIT, encoding="utf-8")

    def __exit__(self, *exc):
        self.page.write_text(self.original, encoding="utf-8")


def prose_rebuild(site: Path) -> tuple[float, str]:
    with edited(PROSE_PAGE):
        return build(site)


def serve_times(copy: Path) -> list[tuple[str, float, str]]:
    """`mkdocs serve` in ``copy``: first page, every result shown, a prose edit to reload."""
    served = Served(copy, ENV)
    try:
        up = served.until("Serving on") - served.started
        served.page()
        first = time.perf_counter() - served.started
        served.until(background.DONE)
        complete = served.until("Reloading browsers") - served.started
        time.sleep(2)  # the watcher settles before the edit
        with edited(copy / PROSE_PAGE.relative_to(ROOT)):
            edit = time.perf_counter()
            reload = served.until("Reloading browsers") - edit
    finally:
        served.stop()
    return [("serve: first page", first, f"server up after {up:.1f} s; outputs say 'running…'"),
            ("serve: every result shown", complete, "snippets and labs ran in the background"),
            ("serve: edit to reload", reload, f"one sentence added to {PROSE_PAGE.relative_to(ROOT)}")]


def suites() -> list[tuple[str, float, str]]:
    """The full suite from empty caches, then `make test` after a one-page prose change."""
    shutil.rmtree(CACHE, ignore_errors=True)
    cached, pytest = dict(ENV, CHECK_CACHE="1"), [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    RUNS.parent.mkdir(exist_ok=True)
    RUNS.unlink(missing_ok=True)
    full, log = timed(pytest, dict(cached, **{snippets.RUN_LOG: str(RUNS)}), check=False)
    with edited(SUITE_PAGE):  # a Chinese page: an English edit would (rightly) fail its translation's stamp
        incremental, log2 = timed(pytest, cached, check=False)
    return [("full suite", full, passed(log) + "; every snippet and check ran"),
            ("make test after a prose edit", incremental,
             passed(log2) + f"; one sentence added to {SUITE_PAGE.relative_to(ROOT)}; checks kept where their inputs held")]


def run_counts() -> list[tuple[str, int, str, str]]:
    """How often the full suite ran each snippet, by whom, and the seconds it took in all
    (sitebuild/snippets.note_run); labs and page code blocks are not snippet runs."""
    by: dict[str, list[dict]] = {}
    for line in RUNS.read_text(encoding="utf-8").splitlines():
        run = json.loads(line)
        by.setdefault(run["path"], []).append(run)
    rows = []
    for path, runs in by.items():
        who: dict[str, int] = {}
        for run in runs:
            who[run["by"]] = who.get(run["by"], 0) + 1
        rows.append((path, len(runs), ", ".join(f"{w} {n}" for w, n in sorted(who.items())),
                     f"{sum(r['seconds'] for r in runs):.1f}"))
    return sorted(rows, key=lambda row: -float(row[3]))


def passed(log: str) -> str:
    """pytest's counts, and the test that failed, if any: a time with a failure is no measurement."""
    counted = re.findall(r"^=* ?(\d+ (?:failed|passed).*?) in [\d.]+s.*$", log, re.M)
    failed = re.findall(r"^FAILED (\S+)", log, re.M)
    return (counted[-1] if counted else "?") + (f" ({', '.join(failed)})" if failed else "")


def snippet_times() -> list[tuple[str, float]]:
    rows = [json.loads(p.read_text(encoding="utf-8")) for p in (CACHE / "snippets").glob("*/result.json")]
    return sorted(((r["path"], r["seconds"]) for r in rows), key=lambda row: -row[1])


def page_weights(site: Path) -> list[tuple[str, int, int, int]]:
    rows = []
    for page in sorted(site.rglob("index.html")):
        html = page.read_text(encoding="utf-8")
        assets = {"css": 0, "js": 0}
        for kind, pattern in (("css", r'<link rel="stylesheet" href="([^"]+)"'), ("js", r'<script src="([^"]+)"')):
            for ref in set(re.findall(pattern, html)):
                target = (page.parent / ref.split("?")[0]).resolve()
                assets[kind] += target.stat().st_size if target.is_file() else 0
        rows.append((page.parent.relative_to(site).as_posix() or ".", len(html.encode()), assets["css"], assets["js"]))
    return rows


def machine_line() -> str:
    """The CPU behind the figures: model, the flags that matter, and the profile."""
    flags = snippets.cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
    profile = " ".join(f"{k}={v}" for k, v in snippets.CPU_PROFILES.get(PROFILE, {}).items())
    return (f"CPU: {snippets.machine()['cpu']} | flags: {' '.join(sorted(flags)) or 'none of avx2/avx512/amx'}"
            f" | profile: {PROFILE}{' (' + profile + ')' if profile else ' (no emulation)'}")


def table(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def main():
    shutil.rmtree(CACHE, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        clean, clean_runs = build(site)
        prose, prose_runs = prose_rebuild(site)
        times = [("clean build", clean, clean_runs), ("prose-only mkdocs build", prose, prose_runs)]
        times += serve_times(fresh_copy(Path(tmp) / "fresh"))
        weights = page_weights(site)
        scores = lighthouse.markdown(site)  # tests/lighthouse.py: six pages, offline
        runs = snippet_times()
    times += suites()
    total = sum(s for _, s in runs)
    report = "\n\n".join([
        f"# Benchmark ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)",
        machine_line(),
        table(("what", "seconds", "what ran", "target on the AVX2 EPYC"),
              [(what, f"{seconds:.1f}", note, TARGETS.get(what, "")) for what, seconds, note in times]),
        f"## Snippet run times (sum {total:.1f} s; the build runs them {os.cpu_count()} at a time)",
        table(("snippet", "seconds"), runs),
        "## Snippet runs in the full suite",
        table(("snippet", "runs", "by", "seconds in all"), run_counts()),
        "## Page weight (bytes)",
        table(("page", "HTML", "CSS", "JS"), weights),
        scores,
    ]) + "\n"
    REPORT.write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
