"""Snippet results, kept on disk by the hash of their sources, of the machine and of the
variables set that pick its kernels and threads (``snippets.KERNEL_VARIABLES``).

A result is computed once per change of a snippet (or of a local module it imports),
of the machine or of those variables, in its own process group with its timeout, and read back from
``.cache/snippets/<key>/`` (or ``$SNIPPET_CACHE_DIR``) by every build and every
engine after that. Failures are never written to disk, so the next build runs a
failed snippet again; within one process each key is run at most once.
Standard library only, like ``sitebuild.snippets``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from sitebuild import snippets
from sitebuild.snippets import ROOT, Result, options

FORMAT = 4  # bump when the cached result's layout or meaning changes (3: the attribution, sections; 4: ranks' lines their own)
_memo: dict[tuple[str, str], Result] = {}  # (cache folder, key) -> this process's result


def cache_dir() -> Path:
    return Path(os.environ.get("SNIPPET_CACHE_DIR", ROOT / ".cache" / "snippets"))


def cache_key(path: Path) -> str:
    """The machine, the variables set here that pick its kernels and threads (a CPU profile's, as
    `make bench` sets them, or a reader's own), and the sources' hashes: the same hashes a hardware
    record keeps. Without the variables, a build under a profile took the native runs from the cache."""
    chosen = {name: os.environ[name] for name in snippets.KERNEL_VARIABLES if name in os.environ}
    key = [FORMAT, snippets.machine(), chosen, snippets.source_hashes(path)]
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def run(path: Path, threads: int | None = None) -> Result:
    """The snippet's result: from this process, from the disk cache, else a fresh run.

    ``threads`` caps torch's intra-op threads (OMP_NUM_THREADS) unless the caller's
    environment already sets them.
    """
    found = known(path)
    if found is None:
        key = cache_key(path)
        found = _memo[(str(cache_dir()), key)] = execute(path, key, threads)
    return found


def known(path: Path) -> Result | None:
    """The snippet's result if this process or the disk cache has one; never runs it.

    Nothing at all is known on a fresh clone: then the machine is not even asked."""
    if not (_memo or cache_dir().is_dir()):
        return None
    key = cache_key(path)
    memo = (str(cache_dir()), key)
    if memo not in _memo and (found := stored(key)):
        _memo[memo] = found
    return _memo.get(memo)


def stored(key: str) -> Result | None:
    file = cache_dir() / key / "result.json"
    if not file.is_file():
        return None
    return Result(**{**json.loads(file.read_text(encoding="utf-8")), "cached": True})


def execute(path: Path, key: str, threads: int | None) -> Result:
    env = {"OMP_NUM_THREADS": str(threads)} if threads and "OMP_NUM_THREADS" not in os.environ else {}
    entry = cache_dir() / key
    with tempfile.TemporaryDirectory() as tmp:
        result = snippets.execute(path, snippets.output_dir(Path(tmp) / "generated", path), env, preloaded=True)
        if result.ok:
            (Path(tmp) / "result.json").write_text(json.dumps(asdict(result), indent=1), encoding="utf-8")
            entry.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(entry, ignore_errors=True)
            shutil.copytree(tmp, entry)
    return result


def run_all(paths: list[Path], each=None) -> dict[str, Result]:
    """Run snippets one per core, each with one thread, then the serial ones alone.

    Two torch processes with two threads each on two cores slowed small snippets
    several times over; serial snippets (timings) get every core. ``each(result)``, if
    given, is called as each result arrives (serve's progress: sitebuild/background.py).
    """
    def one(path: Path, threads: int | None = None) -> Result:
        result = run(path, threads)
        if each is not None:
            each(result)
        return result

    parallel = [p for p in paths if not options(p)[1]]
    serial = [p for p in paths if options(p)[1]]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda p: one(p, threads=1), parallel))
    results += [one(p) for p in serial]
    return {r.path: r for r in results}
