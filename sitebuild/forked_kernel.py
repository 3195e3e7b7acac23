"""Lab kernels forked from an interpreter that has imported torch (sitebuild/forkserver.py).

Each lab runs in a kernel of its own, and its first cell imports torch: 1.5 s of CPU, 3 s with
``torch._dynamo``, which most labs import through an optimizer or ``torch.compile``. jupyter_client
starts a kernel as ``python -m ipykernel_launcher -f <connection file>``; ``ForkedProvisioner``
has a fork server's child run that same launcher instead, as a script with the same arguments,
in the kernel's environment and working directory. The child is what a forked snippet run is:
a session of its own, stdin from /dev/null, torch and ``torch._dynamo`` imported already, and
its writes to the variables that those imports read watched: a lab that sets one is stopped and
run again in a new interpreter (``changed_at_import``; sitebuild/labs.py). The kernel's own
stdout and stderr, which a notebook never shows, go to files; what a cell prints reaches the
notebook through the kernel's messages, as from any kernel.

Unlike a snippet's, a kernel's ranks are not forked (sitebuild/forked_spawn.py): at shutdown,
ipykernel signals every child in its process group and waits, up to 14 s, until none is left,
and the spawn server, which nobody waits for, stays listed as a zombie (10 s more per lab).
No lab starts ranks; one that did would start new interpreters, as a new kernel does.

A kernel is forked only where importing torch printed nothing: a new interpreter would show that
in the output of the cell that imports torch. Linux only, as the fork server.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
import uuid
from pathlib import Path

import ipykernel_launcher
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner

from sitebuild import forkserver, import_env


class ForkedKernel:
    """The forked kernel as LocalProvisioner uses a Popen: its exit status comes from its server."""

    stdin = stdout = stderr = None

    def __init__(self, server: forkserver.Server, job: dict, folder: tempfile.TemporaryDirectory):
        self.server, self.folder, self.returncode = server, folder, None
        self.changed_at_import = False  # stopped for setting a variable that torch's import reads
        self.pid = server.start(job)

    def poll(self) -> int | None:
        return self._ended(time.monotonic())

    def wait(self) -> int | None:
        return self._ended(None)

    def _ended(self, deadline: float | None) -> int | None:
        """The exit code once the server reports it (waiting until ``deadline``, None: for ever), and
        the kernel's leftovers cleared; None while it runs. Not Popen.wait's ``timeout``, hence private."""
        if self.returncode is None and (ended := self.server.reply(deadline)) is not None:
            self.returncode = ended["code"]
            forkserver.kill_group(self.pid)  # what the lab left running
            forkserver.untrack(self.pid)
            forkserver.give_back(self.server)
            self.changed_at_import = import_env.changed(Path(self.folder.name))
            self.folder.cleanup()
        return self.returncode

    def send_signal(self, signum: int):
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)


class ForkedProvisioner(LocalProvisioner):
    """LocalProvisioner, with the kernel forked where the fork server can (else started as usual)."""

    forked: ForkedKernel | None = None

    async def launch_kernel(self, cmd: list[str], **kwargs):
        cwd = kwargs.get("cwd") or os.getcwd()
        server = None
        if forkserver.AVAILABLE and cmd[1:3] == ["-m", "ipykernel_launcher"]:
            try:
                server = forkserver.take(kwargs["env"], Path(cwd))
            except forkserver.ServerGone:  # torch does not import: the lab's own cell says why
                pass
        if server is None or not server.silent:
            if server is not None:
                forkserver.give_back(server)
            return await super().launch_kernel(cmd, **kwargs)
        folder = tempfile.TemporaryDirectory(prefix="lab-kernel-")
        files = {name: os.path.join(folder.name, name) for name in ("stdout", "stderr")}
        environ = kwargs["env"] | {"JPY_PARENT_PID": str(server.proc.pid)}  # the kernel ends if its parent does
        job = {"path": ipykernel_launcher.__file__, "args": cmd[3:], "environ": environ, "cwd": str(cwd),
               "as_module": True, "fork_ranks": False, **files}
        self.process = self.forked = ForkedKernel(server, job, folder)
        self.pid = self.pgid = self.forked.pid  # its own session
        self.cwd = cwd
        return self.connection_info

    def changed_at_import(self) -> bool:
        """Whether the kernel was forked and stopped for setting a variable that torch's import reads."""
        return self.forked is not None and self.forked.poll() is not None and self.forked.changed_at_import


class ForkedKernelManager(AsyncKernelManager):
    """nbclient's kernel manager, with a ForkedProvisioner (give nbclient the class, not an
    instance: it shuts down only the kernels of managers that it made)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.kernel_id = str(uuid.uuid4())
        self.provisioner = ForkedProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self)
