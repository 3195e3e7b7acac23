"""multiprocessing's spawn start method, with the new interpreters forked from one that has imported torch.

``torch.multiprocessing.spawn`` starts each rank as a new ``python -c "...spawn_main(...)"``, which
imports torch again: about 1.3 s of CPU per rank, most of what a small multi-process snippet costs.
In a forked snippet run (sitebuild/forkserver.py), ``install`` first forks a *spawn server*: a copy
of the run's interpreter from before the snippet started, torch and ``torch._dynamo`` imported and
nothing else (a rank that sets a variable these read is stopped, as its snippet would be:
sitebuild/import_env.py). Then it points ``multiprocessing.set_executable`` at a stub (``STUB``): a
Python without site that sends its arguments, environment, working directory and open file
descriptors to the spawn server and becomes a proxy of the process forked there (its exit status,
SIGTERM and SIGINT). That process runs the same ``-c`` program a new interpreter would, with the
same descriptors, so spawn's own protocol does the rest as usual: the parent's preparation data,
the main module imported anew as ``__mp_main__``, the pickled function.

What differs from a new interpreter: torch and ``torch._dynamo`` are imported before the main
module is, and interpreter options before ``-c`` (none for ``python snippet.py``) are not applied.
Where the spawn server cannot be reached, the stub runs the real interpreter instead. Standard
library only.
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import select
import socket
import sys
import traceback
from pathlib import Path

from sitebuild import import_env

STUB = r"""
import json, os, signal, socket, sys
fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
fds = [fd for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")]
server = socket.socket(socket.AF_UNIX)
try:
    server.connect(SOCKET)
except OSError:  # no spawn server: start a real interpreter, as multiprocessing would have
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
job = {"argv": sys.argv[1:], "environ": dict(os.environ), "cwd": os.getcwd(), "fds": fds}
socket.send_fds(server, [json.dumps(job).encode()], fds)
replies = server.makefile()
pid = int(replies.readline())
forwarded = (signal.SIGTERM, signal.SIGINT)
for sig in forwarded:
    signal.signal(sig, lambda sig, frame: os.kill(pid, sig))
status = int(replies.readline())
if os.WIFSIGNALED(status):  # end by the same signal
    for sig in forwarded:
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status))
"""


def install(folder: Path):
    """Fork the spawn server and make spawn start its processes through ``folder``'s stub."""
    stub, address = folder / "python", str(folder / "spawn.sock")
    shebang = f"#!{sys.executable} -IS\n"
    if len(shebang) > 127 or len(address) > 100:  # Linux's limits: keep real interpreters
        return
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    listener.listen(64)
    if os.fork() == 0:
        serve(listener)  # never returns
    listener.close()
    stub.write_text(f"{shebang}SOCKET = {address!r}{STUB}", encoding="utf-8")
    stub.chmod(0o700)
    multiprocessing.set_executable(str(stub))


def serve(listener: socket.socket):
    """Fork a process per stub that connects; tell each stub its pid, then its wait status."""
    waiting = {}  # pid -> the stub's connection
    while True:
        if select.select([listener], [], [], 0.05)[0]:
            connection, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 256)
            pid = os.fork()
            if pid == 0:  # close this server's sockets as objects first (see ``run``)
                for sock in (listener, connection, *waiting.values()):
                    sock.close()
                run(json.loads(message), fds)  # never returns
            for fd in fds:
                os.close(fd)
            connection.sendall(f"{pid}\n".encode())
            waiting[pid] = connection
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = waiting.pop(pid)
            connection.sendall(f"{status}\n".encode())
            connection.close()


def run(job: dict, received: list[int]):
    """Become the process the stub stands for: its descriptors, environment, directory, program.

    Every descriptor but the stub's is closed by number, so no Python object of the server may
    still own one: its finalizer would close that number again at the rank's exit, when it is
    something of the rank's own. The stubs' connections in ``serve``'s ``waiting`` once did: the
    second and later ranks closed their TCPStore socket, or gloo's epoll descriptor under its loop
    thread (``epoll_wait`` -> EBADF, "loop.cc:212 nfds != -1", SIGABRT; issue 44)."""
    above = max(job["fds"] + received) + 1  # so that no descriptor is overwritten before it moved
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in received]
    for fd, target in zip(moved, job["fds"]):
        os.dup2(fd, target)
    keep = set(job["fds"])
    for fd in [int(fd) for fd in os.listdir("/proc/self/fd")]:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:  # the listing's own descriptor
                pass
    os.chdir(job["cwd"])
    with import_env.unwatched():
        os.environ.clear()
        os.environ.update(job["environ"])
    argv = job["argv"]
    program = argv[argv.index("-c") + 1]
    sys.argv = ["-c", *argv[argv.index("-c") + 2:]]
    try:
        exec(compile(program, "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        raise SystemExit(1) from None
    raise SystemExit(0)
