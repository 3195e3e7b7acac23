"""Snippet runs without importing torch each time: a process that has imported it forks one per run.

``import torch`` takes about a second of CPU, most of a small snippet's run, and the test
suite runs every snippet three times (the build, then two CPU profiles). A server imports
torch once under one environment (``python -m sitebuild.forkserver``) and then forks a child
per snippet. The child does what ``python snippets/x.py`` does: its own session (process
group), the snippet's folder first on ``sys.path``, its path as ``sys.argv[0]``, the
caller's environment and working directory, stdout and stderr unbuffered into files, stdin
from /dev/null, the file run as ``__main__`` (``mp.spawn`` finds it there), a traceback that
starts at the snippet's own frame, and the usual interpreter exit (atexit, threads joined):
the same code as a fresh run's bootstrap (sitebuild/attribution.py: ``become``, ``run``), which
also notes which named section printed each line of stdout.
What ``import torch`` printed to stderr is written first, as a fresh process would print it.
The processes that multiprocessing's spawn starts in the child are forked too (``forked_spawn``).
A lab's Jupyter kernel is such a child as well (``forked_kernel``): a job may ask for the file to be
run as ``python -m`` runs a module, with arguments, and without forked ranks. A server whose caller
goes away kills the child it waits for, and ends (``ended``).

The server also imports ``torch._dynamo`` (``LATER``), which torch imports once a program builds
an optimizer, DDP, FSDP, a DTensor or ``torch.compile``: 0.85 s of CPU in each of the 22 forked
processes (snippets and their ranks) of a run of every snippet. Importing it earlier changes no
result, with two guards: it is preloaded only while its import prints nothing, since a fresh
process would print that later or never (where it prints, the server refuses to serve and the
runs are fresh); and a run that sets a variable which these imports read is stopped and done
again fresh (sitebuild/import_env.py).

Forking a process that has imported torch is what DataLoader workers do by default on Linux;
torch resets its thread pools in the child. CUDA is not initialised by the import. Linux only:
on macOS Apple's frameworks are not safe to use after fork (Python spawns there), and Windows
has no fork. Variables that libraries read at import (``ATEN_CPU_CAPABILITY``, ``OMP_NUM_THREADS``,
...) must be set before it, so each environment gets servers of its own (``run``); only
``SNIPPET_OUTPUT_DIR`` may differ between the runs one server forks. Standard library only.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from sitebuild import attribution, forked_spawn, import_env

AVAILABLE = sys.platform == "linux"
# Set anew for each run and read by nobody at import: a snippet's output folder, and the test
# that pytest is in when a background thread starts a run (the CPU profiles).
PER_RUN = {"SNIPPET_OUTPUT_DIR", "PYTEST_CURRENT_TEST"}
LATER = ["torch._dynamo"]  # imported after torch, while silent: see above


class ServerGone(RuntimeError):
    pass


class Server:
    """One preloaded interpreter; one run at a time."""

    def __init__(self, environ: dict, cwd: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "sitebuild.forkserver"], cwd=cwd, env=environ,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        track(self.proc.pid)
        self.buffer = b""
        ready = self.reply(time.monotonic() + 120)
        if not (ready and ready["ready"]):
            self.proc.kill()
            raise ServerGone(ready["why"] if ready else "the server did not import torch within 120 s")
        self.silent = ready["silent"]  # importing torch printed nothing (a lab kernel may be forked)

    def run(self, path: Path, environ: dict, cwd: Path, timeout: float) -> tuple[int | None, str, str, list[list]] | None:
        """(exit code or None at the timeout, stdout, stderr, attribution); the child's process group is
        killed after. None: the run changed a variable that the server's imports read, and must be done fresh."""
        with tempfile.TemporaryDirectory(prefix="snippet-run-") as tmp:
            out, err, record = Path(tmp, "stdout"), Path(tmp, "stderr"), Path(tmp, "attribution")
            pid = self.start({"path": str(path), "environ": environ, "cwd": str(cwd), "stdout": str(out),
                              "stderr": str(err), "attribution": str(record)})
            ended = self.reply(time.monotonic() + timeout)
            kill_group(pid)  # at the timeout, or what the snippet left behind
            untrack(pid)
            if ended is None:
                self.reply(None)  # the server has reaped the killed child
            if import_env.changed(Path(tmp)):
                return None
            stdout, sections = attribution.read(out, record, Path(cwd, path))
            return None if ended is None else ended["code"], stdout, err.read_text(errors="replace"), sections

    def start(self, job: dict) -> int:
        """Fork a child for ``job`` (see ``child``); its pid. Its end is the server's next ``reply``."""
        self.proc.stdin.write(json.dumps(job).encode() + b"\n")
        self.proc.stdin.flush()
        pid = self.reply(None)["pid"]
        track(pid)
        return pid

    def reply(self, deadline: float | None) -> dict | None:
        """The server's next line, or None if it does not come before ``deadline``."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise ServerGone(f"the snippet server exited with code {self.proc.wait()}")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def kill_group(pid: int):
    """SIGKILL to the process group a run started (its own session); gone already is fine."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Stopped(RuntimeError):
    """``stop()`` was called: this process starts no more runs."""


_live: set[int] = set()  # the process groups of the servers and of the runs going on now
_stopped = threading.Event()


def track(pid: int):
    """A process group that ``stop`` kills: a server, or a run (forked or fresh) while it lasts."""
    if _stopped.is_set():
        kill_group(pid)
        raise Stopped("the snippet runs were stopped")
    _live.add(pid)


def untrack(pid: int):
    _live.discard(pid)


def stopped() -> bool:
    return _stopped.is_set()


def stop():
    """Kill every run going on and every server, and start no more: `mkdocs serve` stopped with
    Ctrl+C would otherwise leave them running (their own sessions do not get the signal)."""
    _stopped.set()
    for pid in list(_live):
        kill_group(pid)


_idle: dict[tuple, list[Server]] = {}
_lock = threading.Lock()


def run(path: Path, environ: dict, cwd: Path, timeout: float) -> tuple[int | None, str, str, list[list]] | None:
    """Run ``path`` in a child of an idle server of this environment; start one if none is idle.
    None: it must be run fresh instead (``Server.run``)."""
    server = take(environ, cwd)
    result = server.run(path, environ, cwd, timeout)
    give_back(server)
    return result


def take(environ: dict, cwd: Path) -> Server:
    """An idle server of this environment, or a new one: the caller's until ``give_back``."""
    key = tuple(sorted((k, v) for k, v in environ.items() if k not in PER_RUN))
    with _lock:
        free = _idle.setdefault(key, [])
        server = free.pop() if free else None
    server = server or Server(environ, cwd)
    server.key = key
    return server


def give_back(server: Server):
    with _lock:
        _idle[server.key].append(server)


# The server side: ``python -m sitebuild.forkserver``, started by Server.

def serve():
    with import_env.recording():
        preloaded = import_quietly(["torch"])
        later = import_quietly(LATER)
    if later:
        send({"ready": False, "why": f"importing {', '.join(LATER)} printed: {later[-2000:]}"})
        return
    send({"ready": True, "silent": not preloaded})
    for line in sys.stdin.buffer:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            child(job, preloaded)  # never returns: the child exits like an interpreter
        send({"pid": pid})
        send({"code": ended(pid)})


def ended(pid: int) -> int:
    """The child's exit code. If the caller goes away first (stdin closes: it writes nothing while a
    child runs), the child's process group is killed and the server exits: the build was killed,
    and a lab's kernel (sitebuild/forked_kernel.py) would otherwise wait for messages forever."""
    try:
        handle = os.pidfd_open(pid)
    except OSError:  # Linux before 5.3
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    try:
        while handle not in select.select([handle, 0], [], [])[0]:
            if not os.read(0, 1):
                kill_group(pid)
                os._exit(1)
    finally:
        os.close(handle)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def import_quietly(modules) -> str:
    """Import ``modules``, with whatever they write to stderr captured and returned."""
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            for module in modules:
                importlib.import_module(module)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        return captured.read().decode(errors="replace")


def send(message: dict):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def child(job: dict, preloaded: str):
    os.setsid()
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["environ"])
    redirect(0, os.devnull, os.O_RDONLY)
    redirect(1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    redirect(2, job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    sys.stdout = unbuffered(1, sys.__stdout__)
    sys.stderr = unbuffered(2, sys.__stderr__)
    sys.stderr.write(preloaded)
    path = job["path"]
    attribution.become(path, job.get("as_module", False))
    sys.argv += job.get("args", [])
    folder = Path(job["stdout"]).parent
    import_env.watch(folder)
    if job.get("fork_ranks", True):
        forked_spawn.install(folder)  # ranks started by spawn fork too, and are watched too
    attribution.run(path, job.get("attribution"))  # as __main__, its sections noted; exits as an interpreter


def redirect(fd: int, name: str, flags: int):
    opened = os.open(name, flags, 0o600)
    os.dup2(opened, fd)
    os.close(opened)


def unbuffered(fd: int, like: io.TextIOWrapper) -> io.TextIOWrapper:
    """What PYTHONUNBUFFERED=1 gives a fresh interpreter: every write reaches the file at once."""
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding=like.encoding,
                            errors=like.errors, write_through=True)


if __name__ == "__main__":
    serve()
