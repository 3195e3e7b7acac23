# snippet: serial timeout=180
"""DDP throughput with 1, 2 and 4 CPU ranks on one fixed workload, and a plot of it.

The global batch stays the same (strong scaling): with n ranks each rank gets
GLOBAL_BATCH / n samples per step. Each rank uses CORES // n threads (at least 1),
so that 1 and 2 ranks use the cores of this machine once, and 4 ranks on 2 cores
oversubscribe it. Every configuration is timed as normal DDP and inside ddp.no_sync(),
which skips the gradient all-reduce; the difference is what communication costs.
"""

# --8<-- [start:workload]
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp import join_store, process_group, spawn

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both  # noqa: E402

RANKS = (1, 2, 4)
GLOBAL_BATCH, FEATURES, HIDDEN = 256, 512, 2048
WARMUP, STEPS, REPEATS = 2, 3, 4  # best of up to 4: other load can only slow a run down
BUDGET = 1.5  # seconds of timing per configuration: a slow CPU repeats less
CORES = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
         else os.cpu_count())  # the cores this process may use


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, FEATURES))
# --8<-- [end:workload]


# --8<-- [start:measure]
def training_step(model, optimizer, x, y, all_reduce):
    optimizer.zero_grad()
    with nullcontext() if all_reduce else model.no_sync():  # no_sync: no all-reduce
        nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()


def seconds_per_step(model, optimizer, x, y, group, all_reduce):
    """Time of one step, between two barriers of the ranks being measured."""
    dist.barrier(group)
    start = time.perf_counter()
    for _ in range(STEPS):
        training_step(model, optimizer, x, y, all_reduce)
    dist.barrier(group)
    return (time.perf_counter() - start) / STEPS


def over_budget(elapsed, group):
    """Rank 0 decides for all ranks, which must run the same number of barriers."""
    flag = torch.tensor([float(elapsed > BUDGET)])
    dist.broadcast(flag, src=0, group=group)
    return bool(flag.item())


def same_everywhere(model, group, n):
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(n)]
    dist.all_gather(copies, flat, group=group)
    return all(torch.equal(c, flat) for c in copies)


def measure(rank, n, group):
    """Samples/s with n ranks, with and without the all-reduce (ranks < n only)."""
    torch.set_num_threads(max(1, CORES // n))
    x = torch.randn(GLOBAL_BATCH // n, FEATURES)
    y = torch.randn(GLOBAL_BATCH // n, FEATURES)
    model = DDP(make_model(), process_group=group)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(WARMUP):
        training_step(model, optimizer, x, y, all_reduce=True)
    assert same_everywhere(model, group, n)  # it really is data-parallel training
    timings = {True: [], False: []}
    start = time.perf_counter()
    for _ in range(REPEATS):  # alternate, so that both see the same background load
        for all_reduce in (True, False):
            seconds = seconds_per_step(model, optimizer, x, y, group, all_reduce)
            timings[all_reduce].append(seconds)
        if over_budget(time.perf_counter() - start, group):
            break
    best = {sync: GLOBAL_BATCH / min(seconds) for sync, seconds in timings.items()}
    return n, torch.get_num_threads(), best[True], best[False]
# --8<-- [end:measure]


def load_average():
    """The 1-minute load average: how busy the machine was (Unix only)."""
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "unknown"


def run_rank(rank, world_size, port):
    with process_group("gloo", store=join_store(port), rank=rank, world_size=world_size):
        load_before, rows = load_average(), []
        for n in RANKS:
            group = dist.new_group(list(range(n)))  # all ranks must create it
            if rank < n:
                rows.append(measure(rank, n, group))
            dist.barrier()  # the other ranks wait, asleep, while these n run
        if rank == 0:
            report(rows)
            print(f"load average (1 min) on {CORES} cores: {load_before} before, "
                  f"{load_average()} after")


# --8<-- [start:report]
def report(rows):
    params = sum(p.numel() for p in make_model().parameters())
    print(f"workload: MLP {FEATURES}-{HIDDEN}-{FEATURES}, global batch {GLOBAL_BATCH}, "
          f"{params * 4 / 1e6:.1f} MB of gradients all-reduced per step; "
          f"{CORES} CPU cores")
    print(f"{'ranks':>5} {'threads/rank':>12} {'samples/s':>10} {'vs 1 rank':>9} "
          f"{'no all-reduce':>13} {'all-reduce share':>16}")
    base = rows[0][2]
    for n, threads, rate, rate_local in rows:
        share = f"{1 - rate / rate_local:.0%}" if n > 1 else "(no peer)"
        print(f"{n:>5} {threads:>12} {rate:>10.0f} {rate / base:>8.2f}x "
              f"{rate_local:>13.0f} {share:>16}")
    assert [r[0] for r in rows] == list(RANKS)
    assert all(rate > 0 and rate_local > 0 for _, _, rate, rate_local in rows)
    draw_both("throughput", LABELS, lambda fig, labels: plot(fig, labels, rows), figsize=(6, 3.6))
# --8<-- [end:report]


# The same chart once per language (snippets/_figures.py): throughput.svg, throughput.zh.svg
LABELS = {
    "en": {"series": ("DDP", "DDP + no_sync(): no all-reduce"),
           "tick": "{ranks} × {threads} thr", "x": "ranks × threads per rank", "y": "samples/s",
           "title": "CPU, {cores} cores, global batch {batch}"},
    "zh": {"series": ("DDP", "DDP + no_sync()：不做 All-Reduce"),
           "tick": "{ranks} rank × {threads} 线程", "x": "rank 数 × 每个 rank 的线程数",
           "y": "每秒样本数", "title": "CPU {cores} 核，全局批大小 {batch}"},
}


def plot(fig, labels, rows):
    ax = fig.subplots()
    where = range(len(rows))
    for offset, column, label in zip((-0.2, 0.2), (2, 3), labels["series"]):
        bars = ax.bar([i + offset for i in where], [r[column] for r in rows], 0.4, label=label)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(list(where), [labels["tick"].format(ranks=r[0], threads=r[1]) for r in rows])
    ax.set(xlabel=labels["x"], ylabel=labels["y"], ylim=(0, 1.3 * max(r[3] for r in rows)))
    ax.set_title(labels["title"].format(cores=CORES, batch=GLOBAL_BATCH), fontsize=10)
    ax.legend(loc="upper center", ncols=2, frameon=False)
    fig.tight_layout()


if __name__ == "__main__":
    spawn(run_rank, max(RANKS))
