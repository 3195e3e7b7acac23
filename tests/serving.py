"""`mkdocs serve` as a writer runs it, driven from Python: tests/test_serve.py and `make bench`."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from sitebuild.snippets import ROOT


def fresh_copy(folder: Path) -> Path:
    """The tree as a fresh clone has it (tracked and untracked files, nothing git ignores)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Served:
    """`mkdocs serve --strict` in ``folder`` (which imports that folder's sitebuild), its log read
    line by line, with the time each line arrived. ``command``: how it is started, by default
    `python -m mkdocs serve`; it gets the port to listen on."""

    def __init__(self, folder: Path, env: dict, command=None):
        self.port = free_port()
        self.started = time.perf_counter()
        argv = (command or default_command)(f"127.0.0.1:{self.port}")
        self.proc = subprocess.Popen(argv, cwd=folder, env=env, stderr=subprocess.STDOUT if command else subprocess.PIPE,
                                     stdout=subprocess.PIPE if command else subprocess.DEVNULL, text=True,
                                     start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout or self.proc.stderr:
            self.lines.put((time.perf_counter(), line))

    def until(self, text: str, limit: float = 600) -> float:
        """When the next log line holding ``text`` arrived; an error after ``limit`` seconds."""
        deadline = time.perf_counter() + limit
        while (left := deadline - time.perf_counter()) > 0:
            try:
                when, line = self.lines.get(timeout=min(left, 5))
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.log.append(line)
            if text in line:
                return when
        raise TimeoutError(f"mkdocs serve logged no {text!r} within {limit:.0f} s:\n{''.join(self.log[-40:])}")

    def page(self, path: str = "") -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/{path}", timeout=60) as answer:
            return answer.read().decode("utf-8")

    def stop(self, limit: float = 60):
        """Ctrl+C, as a writer stops it, then wait until every process of the group is gone:
        mkdocs serve removes its temporary site (``mkdocs_*``) on Ctrl+C, not on SIGTERM.
        SIGKILL only if something is still there after ``limit`` seconds."""
        group = self.proc.pid
        try:
            os.killpg(group, signal.SIGINT)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            self.proc.poll()  # reaps the leader, which would otherwise stay in the group as a zombie
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
        os.killpg(group, signal.SIGKILL)
        self.proc.wait()


def default_command(address: str) -> list[str]:
    return [sys.executable, "-m", "mkdocs", "serve", "--strict", "--dev-addr", address]
