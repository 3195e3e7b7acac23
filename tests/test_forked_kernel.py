"""A lab's kernel forked from a server that has imported torch shows what a new kernel shows
(sitebuild/forked_kernel.py): the build runs every lab that way on Linux."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sitebuild import forkserver, labs
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not forkserver.AVAILABLE, reason=f"no fork server on {sys.platform}: new kernels only")

HEADER = "---\njupyter:\n  kernelspec:\n    display_name: Python 3\n    language: python\n    name: python3\n---\n"
PRELOADED = "import sys\nprint('torch' in sys.modules)"  # first: any later cell may import torch


def lab(tmp_path, *cells: str):
    path = tmp_path / "lab.md"
    path.write_text(HEADER + "".join(f"\n```python\n{textwrap.dedent(cell).strip()}\n```\n" for cell in cells),
                    encoding="utf-8")
    return path


def outputs(notebook) -> list[list[dict]]:
    """Each code cell's outputs, without the counts that say nothing about the kernel."""
    return [[{k: v for k, v in output.items() if k != "execution_count"} for output in cell.outputs]
            for cell in notebook.cells if cell.cell_type == "code"]


def printed(notebook) -> list[str]:
    return ["".join(output.get("text", "") for output in cell) for cell in outputs(notebook)]


SEEN = [  # what a lab could notice of its interpreter
    """
    import os, signal
    print(sys.argv[1], sys.path, os.getcwd(), sys.executable, os.getpgid(0) == os.getpid())
    print(sorted(os.environ), [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)])
    """,
    "print('to stderr', file=sys.stderr)",
    "from IPython.display import HTML\nHTML('<b>shown</b>')",
    "import torch\ntorch.arange(3)",
]


def test_a_forked_kernel_shows_what_a_new_kernel_shows(tmp_path):
    path = lab(tmp_path, PRELOADED, *SEEN)
    fresh, forked = labs.run(path, forked=False), labs.run(path, forked=True)
    assert printed(fresh)[0] == "False\n" and printed(forked)[0] == "True\n"  # it really was forked
    assert outputs(forked)[1:] == outputs(fresh)[1:]
    assert printed(forked)[2] == "to stderr\n" and "tensor([0, 1, 2])" in str(outputs(forked)[4])


def test_a_lab_that_sets_what_the_preloaded_imports_read_runs_again_in_a_new_kernel(tmp_path):
    """The server imported Inductor's config with the build's environment: only a new
    interpreter sees the 7 (sitebuild/import_env.py)."""
    sets = """
    import os
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "7"
    import torch._inductor.config
    print("compile threads", torch._inductor.config.compile_threads)
    """
    assert printed(labs.run(lab(tmp_path, PRELOADED, sets), forked=True)) == ["False\n", "compile threads 7\n"]


def test_a_forked_kernel_does_not_outlive_a_killed_build(tmp_path):
    """Killed, the build cannot shut its kernels down: each kernel's server kills it then, and ends."""
    pid_file = tmp_path / "kernel.pid"
    path = lab(tmp_path, f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)")
    build = subprocess.Popen([sys.executable, "-c", f"from sitebuild import labs; labs.run(labs.Path({str(path)!r}), True)"],
                             cwd=ROOT, env=dict(os.environ, TMPDIR=str(tmp_path)))  # the folders a killed build leaves
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    kernel = int(pid_file.read_text())
    server = int(Path(f"/proc/{kernel}/stat").read_text().rsplit(")", 1)[1].split()[1])
    build.kill()
    build.wait()
    deadline = time.monotonic() + 10
    while (left := [pid for pid in (kernel, server) if running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"still running after the build was killed: {left} (kernel {kernel}, server {server})"


def running(pid: int) -> bool:
    """Not gone, and not a zombie waiting for its parent."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except FileNotFoundError:
        return False
