"""The training script of debugging.py's restart demo, started by torchrun (not run by itself).

    python -m torch.distributed.run --nproc-per-node=2 --max-restarts=1 ... _restart_worker.py DIR

Each worker trains STEPS steps of a small linear model on batches that depend only on
(step, rank), averages the gradients with all_reduce, and after each step rank 0 saves a
checkpoint to DIR atomically. In the first attempt (TORCHELASTIC_RESTART_COUNT == "0"),
rank 1 kills itself with SIGKILL in step CRASH_AT, as the kernel's out-of-memory killer
would. torchrun then stops rank 0 and starts both workers again; they resume from the
checkpoint. Every worker appends one JSON line per event to DIR/events.jsonl, the timeline
that debugging.py checks and draws. debugging.py imports the model, the batches and the
update from here, to compute the run that never crashed.
"""

# --8<-- [start:worker]
import ctypes
import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

BEGIN = time.time()  # before `import torch`: the timeline shows the start-up too
PARENT = os.getppid()  # torchrun's agent

import torch
import torch.distributed as dist

STEPS, CRASH_AT = 6, 3  # 6 steps; in attempt 0, rank 1 dies in step 3
STEP_TIME = 0.1  # seconds: stands for the real work of a step (and makes it visible)
LR = 0.1


def make_model():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 1)


def batch(step, rank):
    """The data depends only on (step, rank): a resumed run sees the same batches."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 8, generator=g)
    return x, x[:, :3].sum(1, keepdim=True)


def local_gradient(model, step, rank):
    x, y = batch(step, rank)
    loss = torch.nn.functional.mse_loss(model(x), y)
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, model.parameters())])


def sgd_step(model, gradient):
    with torch.no_grad():
        offset = 0
        for p in model.parameters():
            p -= LR * gradient[offset:offset + p.numel()].view_as(p)
            offset += p.numel()


def die_with_parent(parent=None, prctl=ctypes.CDLL(None).prctl if sys.platform == "linux"
                    else None):
    """Linux: the kernel sends this process SIGKILL when its parent dies (PR_SET_PDEATHSIG = 1).

    prctl is looked up in advance: debugging.py calls this between fork and exec too."""
    if prctl is not None:
        prctl(1, signal.SIGKILL)
    if parent is not None and os.getppid() != parent:  # it died before prctl
        os._exit(1)


def save_atomically(obj, path):
    """A process killed during the save, even by SIGKILL, leaves the previous checkpoint
    intact. Not a power loss: that also needs os.fsync (see practice/checkpoint.py)."""
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)  # atomic on POSIX: the name points at the old file or the new one
# --8<-- [end:worker]


# --8<-- [start:main]
def main(folder):
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])  # 0, then 1 after a restart
    die_with_parent(PARENT)  # torchrun killed: this worker goes too
    events = (folder / "events.jsonl").open("a")

    def log(event, step, start=None):
        line = dict(attempt=attempt, rank=rank, event=event, step=step,
                    start=start or time.time(), end=time.time())
        events.write(json.dumps(line) + "\n")
        events.flush()

    log("start", -1, start=BEGIN)
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))  # MASTER_ADDR/PORT
    model, first = make_model(), 0
    checkpoint = folder / "checkpoint.pt"
    if checkpoint.exists():  # a restart: continue after the last saved step
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        first = state["step"] + 1
    log("resume" if first else "ready", first - 1)
    for step in range(first, STEPS):
        start = time.time()
        gradient = local_gradient(model, step, rank)
        time.sleep(STEP_TIME)
        if attempt == 0 and rank == 1 and step == CRASH_AT:
            log("crash", step, start)
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(gradient)  # sum over ranks ...
        gradient /= world_size     # ... then the mean
        sgd_step(model, gradient)
        if rank == 0:
            save_atomically({"step": step, "model": model.state_dict()}, checkpoint)
        dist.barrier()  # the checkpoint of `step` is complete before anyone goes on
        log("step", step, start)
    if rank == 0:
        save_atomically(model.state_dict(), folder / "final.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
# --8<-- [end:main]
