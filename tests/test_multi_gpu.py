"""The Multi-GPU section: ddp.py under torchrun, which the generic snippet test (plain
`python ddp.py`) does not cover. Distributed code runs only in subprocesses, with timeouts."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from tests.conftest import ROOT

DDP = ROOT / "snippets" / "multi_gpu" / "ddp.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"
SHARD = re.compile(r"\[node 0, local rank (\d), rank (\d)/4\] epoch (\d): shard torch\.Size\(\[4, 10, 5\]\)")


def test_ddp_runs_under_torchrun_and_leaves_no_process_behind():
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([str(TORCHRUN), "--standalone", "--nproc_per_node=4", str(DDP)],
                            cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # timed out: take torchrun and its workers down
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    shards = sorted(SHARD.findall(out))
    assert shards == sorted((str(r), str(r), str(e)) for r in range(4) for e in range(2)), out
    assert "averaged gradient == full-batch gradient on every rank: True" in out
    assert "terminate called" not in err
    try:  # every worker exited with torchrun: its process group is empty
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        pass
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("processes of the torchrun run were left behind")
