"""`make soak`: every multi-process snippet, run again and again while two busy loops load both cores.

A multi-process snippet that fails one time in N fails CI at random, and a reader who runs it
may meet the same. So each one (init_process_group, mp.spawn, torchrun) runs ``RUNS`` times
as ``python FILE`` and ``RUNS`` times as the build runs it (forked from a server that has
imported torch, its ranks forked too: sitebuild/forkserver.py, sitebuild/forked_spawn.py),
one run at a time, while two processes spin on the CPU. It prints one row per snippet and
way of running, and the end of each failure's stderr; it exits 1 if any run failed.

Not part of `make test`: 10 snippets x 2 ways x 5 runs took 56 minutes on a 2-core AMD EPYC
(with other work running beside the busy loops).
``python -m tests.soak [RUNS] [NAME ...]``: fewer runs, or only the snippets whose path holds a NAME.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from sitebuild import snippets
from sitebuild.snippets import ROOT

MULTI_PROCESS = re.compile(r"init_process_group|mp\.spawn|\bspawn\(|torchrun")
BUSY = [sys.executable, "-c", "while True: pass"]


def multi_process(names: list[str]) -> list[Path]:
    found = [p for p in snippets.discover() if MULTI_PROCESS.search(p.read_text(encoding="utf-8"))]
    return [p for p in found if not names or any(name in str(p) for name in names)]


@contextmanager
def busy_loops(n: int = 2):
    loops = [subprocess.Popen(BUSY) for _ in range(n)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def plain(path: Path, out: Path) -> tuple[bool, float, str]:
    """``python FILE`` from the repository root, as the README says to run one."""
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(path.relative_to(ROOT))], cwd=ROOT, capture_output=True, text=True,
                              timeout=snippets.options(path)[0], env=os.environ | {"SNIPPET_OUTPUT_DIR": str(out)})
        ok, err = proc.returncode == 0, proc.stderr
    except subprocess.TimeoutExpired as timeout:
        ok, err = False, f"timed out after {timeout.timeout} s\n{timeout.stderr or ''}"
    return ok, time.perf_counter() - start, err


def as_built(path: Path, out: Path) -> tuple[bool, float, str]:
    result = snippets.execute(path, out, preloaded=True)
    return result.ok, result.seconds, result.stderr


WAYS = {"python FILE": plain, "as the build runs it": as_built}


def main(argv: list[str]) -> int:
    runs = int(argv[0]) if argv and argv[0].isdigit() else 5
    paths = multi_process([a for a in argv if not a.isdigit()])
    rows, failures = [], []
    print(f"{len(paths)} multi-process snippets, {runs} runs each way, two busy loops; "
          f"on {snippets.machine()['device']}", flush=True)
    with busy_loops():
        for path in paths:
            for way, run in WAYS.items():
                times, failed = [], 0
                for _ in range(runs):
                    with tempfile.TemporaryDirectory(prefix="soak-") as out:
                        ok, seconds, err = run(path, Path(out))
                    times.append(seconds)
                    if not ok:
                        failed += 1
                        failures.append(f"--- {snippets.relative(path)} ({way}) ---\n{err[-3000:]}")
                rows.append((snippets.relative(path), way, runs, failed, max(times)))
                print(f"| {rows[-1][0]} | {way} | {runs} | {failed} | {max(times):.1f} s |", flush=True)
    print("\n| snippet | run as | runs | failures | slowest |\n|---|---|---:|---:|---:|")
    for name, way, n, failed, slowest in rows:
        print(f"| {name} | {way} | {n} | {failed} | {slowest:.1f} s |")
    for failure in failures:
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
