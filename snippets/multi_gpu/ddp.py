"""DistributedDataParallel, 4 ranks: one process per device, gradients all-reduced.

    python snippets/multi_gpu/ddp.py                      # starts its own 4 ranks
    torchrun --standalone --nproc_per_node=4 snippets/multi_gpu/ddp.py

Each rank takes a [4, 10, 5] shard of the article's [16, 10, 5] batch through a
DistributedSampler and checks that DDP's averaged gradient equals the gradient that
one process computes on the whole batch. NCCL when each rank has a GPU, else gloo.
"""
# snippet: cpu-independent
# The CPU profiles skip this file: it asserts the shards each rank sees and that DDP's
# gradients equal one process's on the whole batch, computed on the same machine.

# --8<-- [start:setup]
import os
import socket
import sys
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

WORLD_SIZE = 4  # the article's four devices
BATCH = 16  # the global batch; each rank gets BATCH // world_size samples
TIMEOUT = timedelta(seconds=60)  # a lost rank makes the others fail instead of hang
LOOPBACK = "lo" if sys.platform == "linux" else "lo0"  # the loopback network interface


def make_dataset():
    """The same 16 samples on every rank (fixed seed), with their indices."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, 10, 5, generator=g)
    y = torch.randn(BATCH, 10, 2, generator=g)
    return TensorDataset(x, y, torch.arange(BATCH))


def make_model():
    torch.manual_seed(0)
    return nn.Linear(5, 2)
# --8<-- [end:setup]


# --8<-- [start:device]
def pick_device(local_rank, local_world_size):
    """A GPU per rank with NCCL when there are enough GPUs, else the CPU with gloo."""
    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world_size:
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), "nccl"
    torch.set_num_threads(1)  # the ranks share this machine's cores
    return torch.device("cpu"), "gloo"
# --8<-- [end:device]


# --8<-- [start:rank]
def run_rank(rank, world_size, local_rank, local_world_size, node=0, store=None):
    """One process of the job. Without a store, it reads MASTER_ADDR and MASTER_PORT."""
    if BATCH % world_size:  # the sampler would pad the batch, and the checks assume even shards
        raise SystemExit(f"ddp.py splits its batch of {BATCH} evenly: start it on a number of "
                         f"ranks that divides {BATCH} (torchrun --nproc_per_node=4), not {world_size}.")
    device, backend = pick_device(local_rank, local_world_size)
    gpu = device if device.type == "cuda" else None
    with process_group(backend, store=store, rank=rank, world_size=world_size, device_id=gpu):
        if rank == 0:
            where = f"{store.host}:{store.port}" if store else (
                f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")
            print(f"{world_size} ranks, backend {backend}, device {device.type}, "
                  f"store {where}", flush=True)
        who = f"node {node}, local rank {local_rank}, rank {rank}/{world_size}"
        train(rank, world_size, who, device)
# --8<-- [end:rank]


# --8<-- [start:train]
def train(rank, world_size, who, device):
    dataset = make_dataset()
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=0)
    loader = DataLoader(dataset, batch_size=BATCH // world_size, sampler=sampler)
    model = make_model().to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    seen, worst = [], 0.0
    for epoch in range(2):
        sampler.set_epoch(epoch)  # a new shuffle per epoch, the same on every rank
        for x, y, idx in loader:
            line = f"[{who}] epoch {epoch}: shard {x.shape}, samples {idx.tolist()}"
            in_rank_order(rank, world_size, line)
            start = [p.detach().clone() for p in model.parameters()]
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(ddp_model(x.to(device)), y.to(device))
            loss.backward()  # DDP all-reduces (averages) the gradients meanwhile
            worst = max(worst, gradient_error(model, start, dataset, device))
            optimizer.step()
            seen.append(idx.tolist())
    check_shards(seen, world_size)
    check_replicas(model, world_size)
    if rank == 0:
        print("averaged gradient == full-batch gradient on every rank: True "
              f"(largest difference on rank 0: {worst:.1e})")
        print("after each step all replicas hold identical parameters: True")
# --8<-- [end:train]


# --8<-- [start:checks]
def gradient_error(model, params, dataset, device):
    """DDP's gradient vs. one process's gradient of the mean loss on all 16 samples."""
    single = make_model().to(device)
    with torch.no_grad():
        for p, value in zip(single.parameters(), params):
            p.copy_(value)
    x, y, _ = dataset.tensors
    nn.functional.mse_loss(single(x.to(device)), y.to(device)).backward()
    pairs = list(zip(model.parameters(), single.parameters()))
    assert all(torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6) for a, b in pairs)
    return max((a.grad - b.grad).abs().max().item() for a, b in pairs)


def check_shards(seen, world_size):
    """In each epoch the ranks' shards are disjoint and together cover the dataset."""
    everyone = [None] * world_size
    dist.all_gather_object(everyone, seen)
    for epoch in range(len(seen)):
        shards = [i for ranks_seen in everyone for i in ranks_seen[epoch]]
        assert sorted(shards) == list(range(BATCH))
    assert seen[0] != seen[1], "set_epoch(1) should change the shuffle"


def check_replicas(model, world_size):
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(copies, flat)
    assert all(torch.equal(c, flat) for c in copies)
# --8<-- [end:checks]


def in_rank_order(rank, world_size, line):
    """Each rank prints its own line, one rank after the other."""
    for turn in range(world_size):
        if turn == rank:
            print(line, flush=True)
        dist.barrier()


# --8<-- [start:leave]
_last_collective = None  # held until the interpreter exits


@contextmanager
def process_group(backend, **options):
    """init_process_group() on entry; on exit, destroy_process_group(), done safely.

    A gloo worker thread may still own the tensors of the last collectives. When it
    frees them while Python is shutting down, the process aborts with "terminate
    called without an active exception" (seen with torch 2.13). A final barrier takes
    those collectives over, and keeping it until exit leaves the freeing to Python.
    """
    global _last_collective
    dist.init_process_group(backend, timeout=TIMEOUT, **options)
    try:
        yield
    except BaseException:
        dist.destroy_process_group()  # failing: do not wait for the other ranks
        raise
    _last_collective = dist.barrier(async_op=True)
    _last_collective.wait()
    dist.destroy_process_group()
# --8<-- [end:leave]


# --8<-- [start:launch]
def host_store():
    """The rendezvous: a key-value store all ranks reach (torchrun's agent hosts one).

    It listens on 127.0.0.1 only, on a port the OS picks, so two runs never collide.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    store = dist.TCPStore("127.0.0.1", listener.getsockname()[1], is_master=True,
                          master_listen_fd=listener.fileno(), wait_for_workers=False)
    return store, listener  # keep both alive while the ranks run


def join_store(port):
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT)


def spawn(fn, nprocs, *args):
    """Run fn(rank, nprocs, store_port, *args) in nprocs processes on this machine."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", LOOPBACK)  # gloo's sockets too
    store, _listener = host_store()  # both stay open until the ranks are done
    mp.spawn(fn, args=(nprocs, store.port, *args), nprocs=nprocs, join=True)


def spawned_rank(rank, world_size, port, run=None):
    """A rank that spawn started on this machine: local rank = rank. `run`: another
    snippet's run_rank (run_or_spawn), else this file's."""
    (run or run_rank)(rank, world_size, rank, world_size, store=join_store(port))


# set by torchrun for every worker; GROUP_RANK is the node's rank
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")

if __name__ == "__main__":
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        run_rank(*(int(os.environ[name]) for name in TORCHRUN_VARS))
    else:  # plain `python ddp.py`: this process starts the 4 ranks itself
        spawn(spawned_rank, WORLD_SIZE)
# --8<-- [end:launch]


def run_or_spawn(run, world_size):
    """The entry point of the snippets that reuse this launcher (fsdp.py, tensor_parallel.py,
    layouts.py): under torchrun, run this process's rank; under plain python, start
    world_size ranks here. `run(rank, world_size, local_rank, local_world_size, store=None)`."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        run(*(int(os.environ[name]) for name in TORCHRUN_VARS[:4]))
    else:
        spawn(spawned_rank, world_size, run)
