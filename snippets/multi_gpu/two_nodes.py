"""Two "nodes" on one machine: two torchrun invocations meet at a c10d rendezvous.

Each invocation stands for one machine with 2 devices (2 processes). They find each
other through the rendezvous endpoint 127.0.0.1:<free port>, form one job of 4
ranks, and run ddp.py unchanged. On real machines the endpoint is the address of
one of them, and the same command runs on every machine.
"""
# snippet: cpu-independent
# The CPU profiles skip this file: what it adds to ddp.py is the launch (torchrun, the
# rendezvous), which no CPU kernel or thread count reaches; ddp.py, which its workers run,
# compares its gradients with one process's on the same machine.

# --8<-- [start:launch]
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

from ddp import LOOPBACK

SCRIPT = Path(__file__).with_name("ddp.py")
NODES, PER_NODE = 2, 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_args(endpoint, job_id):
    """What you would type on each machine: `torchrun <these> ddp.py`."""
    return [f"--nnodes={NODES}", f"--nproc-per-node={PER_NODE}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}", f"--rdzv-id={job_id}"]


def start_node(args):
    # Both "nodes" share this machine's GPUs: node 1's local rank 0 would take cuda:0
    # like node 0's, and NCCL refuses two ranks on one GPU. Hide the GPUs, so that
    # ddp.py picks the CPU and gloo for the simulation.
    env = dict(os.environ, GLOO_SOCKET_IFNAME=LOOPBACK, OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="")
    # `python -m torch.distributed.run` is what the `torchrun` command runs
    command = [sys.executable, "-m", "torch.distributed.run", *args, str(SCRIPT)]
    return subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


endpoint, job_id = f"127.0.0.1:{free_port()}", f"demo-{uuid.uuid4().hex[:8]}"
print("on each node: torchrun", " ".join(torchrun_args(endpoint, job_id)), SCRIPT.name)
nodes = [start_node(torchrun_args(endpoint, job_id)) for _ in range(NODES)]
try:
    results = [node.communicate(timeout=90) for node in nodes]
finally:
    for node in nodes:  # on timeout or error, take each node's workers down with it
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()
# --8<-- [end:launch]

# --8<-- [start:check]
for i, (node, (out, err)) in enumerate(zip(nodes, results)):
    assert node.returncode == 0, f"invocation {i} failed:\n{err[-3000:]}"
    print(f"--- output of torchrun invocation {i} ---")
    print(out.rstrip())

lines = "\n".join(out for out, _ in results)
found = sorted(set(re.findall(r"\[node (\d), local rank (\d), rank (\d)/4\]", lines)))
expected = [(str(r // PER_NODE), str(r % PER_NODE), str(r)) for r in range(4)]
assert found == expected, found
assert "backend gloo, device cpu" in lines  # the GPUs, if any, were hidden
store = re.search(r"store ([\w.\-]+:\d+)", lines).group(1)
# a second port, opened by node 0's agent for the workers
assert store.rsplit(":", 1)[1] != endpoint.rsplit(":", 1)[1]
print(f"one job of 4 ranks on {NODES} nodes: rendezvous at {endpoint}, "
      f"workers' store (MASTER_ADDR:MASTER_PORT) at {store}")
# --8<-- [end:check]
