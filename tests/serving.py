"""`mkdocs serve` as a writer runs it, driven from Python: tests/test_serve.py and `make bench`."""

from __future__ import annotations

import queue
import shutil
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
    """`python -m mkdocs serve --strict` in ``folder`` (which imports that folder's sitebuild),
    its log read line by line, with the time each line arrived."""

    def __init__(self, folder: Path, env: dict):
        self.port = free_port()
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mkdocs", "serve", "--strict", "--dev-addr", f"127.0.0.1:{self.port}"],
            cwd=folder, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
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

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
