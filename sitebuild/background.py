"""`mkdocs serve` without the wait: snippets and labs that have no result yet run in the background.

`mkdocs build` runs every snippet and lab before it renders a page, as a strict build must.
`mkdocs serve` did the same, so on a fresh clone it showed nothing for minutes (144 s on a
2-core AMD EPYC). Once the MkDocs adapter calls ``enable()`` (serve only), a page whose result
is not there yet shows a placeholder, "running…", and the run is queued here. The queue starts
when the server does (``start()``, from on_serve), so the first build has the cores to itself.
When a batch is done, a file is written into ``READY``, a folder the adapter gives the
server's watcher: the site rebuilds and the browser reloads by itself. A failed snippet is
kept in this process's memory only (sitebuild/results.py never stores one), so its page shows
the failure until the snippet changes, and a strict build still stops on it. Until a snippet
has run, every file of its that a page links (a figure, a trace) is a placeholder that says so,
so the strict first build of a fresh clone finds each link's target.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from pathlib import Path

from mkdocs.plugins import get_plugin_logger

from sitebuild import forkserver, snippets
from sitebuild.snippets import ROOT

log = get_plugin_logger("background")
progress = get_plugin_logger("snippets")  # the progress of the snippets' runs: "snippets: 12/25 done"

READY = ROOT / ".cache" / "serve-ready"  # watched: a file written here means "rebuild"
FIGURES = ROOT / ".cache" / "serve-figures"  # placeholder figures (outside READY: writing
                                             # them must not trigger a rebuild)
DONE = "background runs done; rebuilding with their results"  # tests/bench.py waits for it
_enabled = False
_started = threading.Event()
_lock = threading.Lock()
_queued: set[str] = set()  # what is queued or running, by key
_jobs: queue.Queue = queue.Queue()


def enable():
    """From now on (this process is `mkdocs serve`), results may be pending. The machine
    probe starts now, beside the first build, which needs it only late or not at all."""
    global _enabled
    _enabled = True
    READY.mkdir(parents=True, exist_ok=True)
    threading.Thread(target=snippets.machine, daemon=True).start()
    threading.Thread(target=_worker, daemon=True, name="serve-runs").start()


def stop():
    """Serve has stopped (Ctrl+C): end the snippet runs going on, start no more."""
    forkserver.stop()


def enabled() -> bool:
    return _enabled


def start():
    """The server is up: run what was queued, and from now on what is queued next."""
    _started.set()


def submit(keys: set[str], work, *args) -> bool:
    """``work(*args)`` in the background thread, then a rebuild, unless all of ``keys`` are
    queued already (False). The batches run one after the other: each takes every core."""
    with _lock:
        if keys <= _queued:
            return False
        _queued.update(keys)
    _jobs.put((keys, work, args))
    return True


class Progress:
    """``each`` for a background batch of snippets (results.run_all): the server's log says how
    far the batch is as each result arrives, "snippets: 12/25 done", and when the last is in,
    how many passed and which failed. Without it serve said nothing for minutes."""

    def __init__(self, total: int):
        self.total, self.passed, self.failed = total, 0, []
        self._lock = threading.Lock()

    def __call__(self, result) -> None:
        with self._lock:
            if result.ok:
                self.passed += 1
            else:
                self.failed.append(result.path)
            done, passed, failed = self.passed + len(self.failed), self.passed, list(self.failed)
        progress.info(f"{done}/{self.total} done" + ("" if result.ok else f" ({result.path} failed)"))
        if done == self.total:
            progress.info(f"{passed} passed, {len(failed)} failed"
                          + (f": {', '.join(failed)} (each page shows why)" if failed else ""))


def _worker():
    """One thread, a daemon, so that a serve that stops (or fails its first build) never waits for it."""
    while True:
        _run(*_jobs.get())


def _run(keys: set[str], work, args: tuple):
    _started.wait()
    try:
        work(*args)
    except forkserver.Stopped:  # serve is stopping (``stop``)
        return
    except Exception:  # nobody waits on this thread: say it in the server's log
        log.exception(f"background run of {getattr(work, '__qualname__', work)} failed")
    finally:
        with _lock:
            _queued.difference_update(keys)
            done = not _queued
        if done:
            log.info(DONE)
        (READY / "ready").write_text(f"{time.time()}\n", encoding="utf-8")


PLACEHOLDER = """<svg xmlns="http://www.w3.org/2000/svg" width="640" height="120" viewBox="0 0 640 120" role="img">
<title>{text}</title><rect width="640" height="120" fill="#eceff1" stroke="#90a4ae"/>
<text x="320" y="66" font-family="sans-serif" font-size="18" text-anchor="middle" fill="#37474f">{text}</text>
</svg>
"""
WORDS = {"running": {"en": "running… {path}", "zh": "运行中…{path}"},
         "failed": {"en": "failed: {path} (its output block says why)", "zh": "运行失败：{path}（原因见其输出）"}}
GENERATED_LINK = re.compile(r"generated/([\w/.-]+)/([\w.-]+\.\w+)")


def generated_links() -> dict[str, set[str]]:
    """The files that snippets write and pages link (figures, traces, downloads), by folder:
    ``{"gpu/benchmark": {"matmul.svg", ...}, "performance/profiling": {"trace.json"}}``."""
    found: dict[str, set[str]] = {}
    for page in (ROOT / "docs").rglob("*.md"):
        for folder, name in GENERATED_LINK.findall(page.read_text(encoding="utf-8")):
            found.setdefault(folder, set()).add(name)
    return found


def placeholder(uri: str, state: str, path: str) -> Path:
    """``FIGURES/<uri>``: a stand-in that says its snippet is running or failed, in the file's
    language (``*.zh.svg``: Chinese): a figure for an SVG, else text (a JSON string for JSON),
    so that a link to it resolves until the snippet has written the real file."""
    text = WORDS[state]["zh" if uri.endswith(".zh.svg") else "en"].format(path=path)
    target = FIGURES / uri
    target.parent.mkdir(parents=True, exist_ok=True)
    body = {".svg": PLACEHOLDER.format(text=text), ".json": json.dumps(text) + "\n"}.get(target.suffix, text + "\n")
    target.write_text(body, encoding="utf-8")
    return target
