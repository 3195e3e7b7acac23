"""The Multi-GPU section under torchrun, which the generic snippet test (plain `python
<snippet>.py`, where each script spawns its own ranks) does not cover: the path that reads
RANK, WORLD_SIZE and LOCAL_RANK from the environment. Distributed code runs only in
subprocesses, with timeouts, and no process of a run may be left behind."""

import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from tests.conftest import ROOT

TORCHRUN = Path(sys.executable).parent / "torchrun"
SHARD = re.compile(r"\[node 0, local rank (\d), rank (\d)/4\] epoch (\d): shard torch\.Size\(\[4, 10, 5\]\)")


def torchrun(script: str, ranks: int, ok: bool = True) -> str:
    """stdout of `torchrun --standalone` on 127.0.0.1, or its stderr where the run is to
    fail (ok=False); fails on another outcome or on a leftover process."""
    # torchrun's torchelastic_* log folder goes there, not to /tmp; a worker left behind (reported below)
    # may still write into it while it is removed.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as temp:
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", TMPDIR=temp)
        proc = subprocess.Popen([str(TORCHRUN), "--standalone", f"--nproc_per_node={ranks}",
                                 str(ROOT / "snippets" / "multi_gpu" / script)],
                                cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=150)
        finally:
            if proc.poll() is None:  # timed out: take torchrun and its workers down
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    assert (proc.returncode == 0) == ok, err[-3000:] if ok else out[-3000:]
    assert "terminate called" not in err
    try:  # every worker exited with torchrun: its process group is empty
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return out if ok else err
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("processes of the torchrun run were left behind")


def test_ddp_under_torchrun():
    out = torchrun("ddp.py", 4)
    shards = sorted(SHARD.findall(out))
    assert shards == sorted((str(r), str(r), str(e)) for r in range(4) for e in range(2)), out
    assert "averaged gradient == full-batch gradient on every rank: True" in out


@pytest.mark.parametrize("script, ranks, lines", [
    ("fsdp.py", 4, ["per rank: 16 x 6,792 / 4 + 4 x 6 = 27,192 bytes",
                    "full_tensor() == single-process parameters: True",
                    "weight rows per rank [3, 3, 3, 1]"]),
    ("tensor_parallel.py", 2, ["[rank 0] up.weight   Shard(dim=0)  global (16, 8), local (8, 8)",
                               "[rank 1] up.weight   Shard(dim=0)  global (16, 8), local (8, 8)",
                               "down: forward ran {'all_reduce': 1}, backward ran no collective",
                               "TP output == unsharded MLP output: True"]),
])
def test_sharded_training_under_torchrun(script, ranks, lines):
    out = torchrun(script, ranks)
    missing = [line for line in lines if line not in out]
    assert not missing, f"{script} under torchrun did not print {missing}:\n{out}"


def test_tensor_parallel_refuses_another_world_size():
    """Under --nproc_per_node=4 its 2 x 2 Partial tensor would leave two ranks without a
    row, and an assert would fail on some ranks only; the script stops before that, on
    every rank, and says why."""
    err = torchrun("tensor_parallel.py", 4, ok=False)
    assert "tensor_parallel.py is written for 2 ranks, not 4: " in err, err[-3000:]
    assert "torchrun --nproc_per_node=2" in err


def test_ddp_refuses_a_world_size_that_does_not_divide_its_batch():
    """With 3 ranks DistributedSampler pads 16 samples to 18, and the gradient check failed with
    a bare AssertionError on every rank; the script now says why before it joins a group."""
    err = torchrun("ddp.py", 3, ok=False)
    assert "ddp.py splits its batch of 16 evenly: start it on a number of ranks that divides 16" in err, err[-3000:]
    assert "AssertionError" not in err
