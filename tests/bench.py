"""`make bench`: build and test timings, snippet run times and page weights.

Writes bench-report.md (and prints it). A benchmark, not a test: it asserts nothing,
it measures. Run it on an otherwise idle machine; CI's is 2 cores.

``python -m tests.bench [avx2|old-laptop|native]``: the build and the suite run with
that CPU profile's variables (sitebuild/snippets.py), AVX2-only by default, because
CI's slowest host is an AVX2-only EPYC. The report starts with the real CPU and flags.

1. clean build: every cache removed, so every snippet and notebook runs;
2. prose-only rebuild: one sentence of one page changed, caches warm;
3. the whole test suite (`pytest`), which starts from an empty snippet cache;
4. each snippet's run time, from the clean build's cache entries;
5. bytes of HTML, CSS and JS that each page loads (images and fonts not counted);
6. Lighthouse scores of six pages (tests/lighthouse.py), offline against a local server.
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
from sitebuild import snippets
from tests import lighthouse  # Lighthouse scores, `make lighthouse`

PROFILE = sys.argv[1] if len(sys.argv) > 1 else "avx2"
ENV = dict(os.environ, NO_MKDOCS_2_WARNING="1", **snippets.CPU_PROFILES.get(PROFILE, {}))
CACHE = ROOT / ".cache"
REPORT = ROOT / "bench-report.md"
PROSE_PAGE = ROOT / "docs" / "index.md"
TARGETS = {"clean build": 90.0, "test suite": 180.0}


def timed(cmd) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=ENV)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return seconds, proc.stdout + proc.stderr


def build(site: Path) -> tuple[float, str]:
    seconds, log = timed([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)])
    ran = re.findall(r"(\d+) snippets ran, (\d+) from cache", log)
    notebooks = len(re.findall(r"notebooks: lab \S+ executed", log))
    runs = "; ".join(f"{r} ran, {c} cached" for r, c in ran)
    return seconds, f"snippets: {runs}; labs executed: {notebooks}"


def prose_rebuild(site: Path) -> tuple[float, str]:
    original = PROSE_PAGE.read_text(encoding="utf-8")
    try:
        PROSE_PAGE.write_text(original + "\nA sentence added by the benchmark.\n", encoding="utf-8")
        return build(site)
    finally:
        PROSE_PAGE.write_text(original, encoding="utf-8")


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
        suite, suite_log = timed([sys.executable, "-m", "pytest", "-q"])
        counted = re.findall(r"^=* ?(\d+ passed.*?)=*$", suite_log, re.M)
        timings = [
            ("clean build", f"{clean:.1f}", clean_runs, f"≤ {TARGETS['clean build']:.0f} s"),
            ("prose-only rebuild", f"{prose:.1f}", prose_runs, f"≤ {0.15 * clean:.1f} s (15 %)"),
            ("test suite", f"{suite:.1f}", counted[-1] if counted else "?", f"≤ {TARGETS['test suite']:.0f} s"),
        ]
        weights = page_weights(site)
        scores = lighthouse.markdown(site)  # tests/lighthouse.py: six pages, offline
    total = sum(s for _, s in snippet_times())
    report = "\n\n".join([
        f"# Benchmark ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)",
        machine_line(),
        table(("what", "seconds", "what ran", "target"), timings),
        f"## Snippet run times (sum {total:.1f} s; the build runs them {os.cpu_count()} at a time)",
        table(("snippet", "seconds"), snippet_times()),
        "## Page weight (bytes)",
        table(("page", "HTML", "CSS", "JS"), weights),
        scores,
    ]) + "\n"
    REPORT.write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
