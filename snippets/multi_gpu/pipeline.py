"""Pipeline parallelism, 2 ranks: each rank holds one stage, a run of consecutive layers.

    python snippets/multi_gpu/pipeline.py                      # starts its own 2 ranks
    torchrun --standalone --nproc_per_node=2 snippets/multi_gpu/pipeline.py

An MLP is cut into 2 stages; torch.distributed.pipelining runs a batch of 4 micro-batches
through them with the GPipe schedule and with 1F1B. Both must give the unsplit model's loss
and gradients. Each forward and backward action is recorded with its time: the order of the
actions and the number of micro-batches whose activations a stage holds are checked, the
idle time is compared with the bubble formula (p - 1) / (m + p - 1), and the timeline of the
two schedules is drawn. NCCL when each rank has a GPU, else gloo on 127.0.0.1.
"""
# snippet: timeout=180 cpu-independent
# The CPU profiles skip this file: it asserts the schedules' order of work, which torch's
# schedule code fixes, and that the pipelined model equals the unsplit one computed by the
# same kernels on the same machine; the times it prints are never asserted.

# --8<-- [start:setup]
import os
import pickle
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from ddp import join_store, pick_device, process_group, spawn

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both

WORLD_SIZE = 2        # p: one pipeline stage per rank
MICROBATCHES = 4      # m: the batch is cut into m micro-batches
DIM, BATCH = 1024, 256  # micro-batches of 64 rows
STEPS = 3             # training steps per schedule; the fastest one is reported
SCHEDULES = ("GPipe", "1F1B")


def make_model(stages, layers_per_stage):
    """stages x layers_per_stage blocks of Linear + ReLU: equal stages, as the formula assumes."""
    torch.manual_seed(0)  # the same weights on every rank, and in the reference
    blocks = [nn.Sequential(nn.Linear(DIM, DIM), nn.ReLU())
              for _ in range(stages * layers_per_stage)]
    return nn.Sequential(*blocks)


def stage_of(model, rank, layers_per_stage):
    """The layers rank `rank` runs: a slice of the model, sharing its parameters."""
    return model[rank * layers_per_stage:(rank + 1) * layers_per_stage]


def make_batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, DIM, generator=g), torch.randn(BATCH, DIM, generator=g)
# --8<-- [end:setup]


# --8<-- [start:record]
class Recorder:
    """Notes every forward (F) and backward (B) action that the schedule runs on a stage.

    The schedules call stage.forward_one_chunk(i, ...) and stage.backward_one_chunk(i, ...)
    once per micro-batch i; wrapping the two methods of this one stage object records
    which action ran, when, and how many micro-batches' activations the stage holds
    afterwards (stage.fwd_cache keeps a micro-batch's inputs and outputs, and with them
    its autograd graph, from its forward until its backward). torch is not changed.
    """

    def __init__(self, stage, device):
        self.events = []  # (kind, micro-batch, start, end, micro-batches held)
        for kind, name in (("F", "forward_one_chunk"), ("B", "backward_one_chunk")):
            setattr(stage, name, self.timed(kind, getattr(stage, name), stage, device))

    def timed(self, kind, action, stage, device):
        def run(mb, *args, **kwargs):
            sync(device)
            start = time.perf_counter()  # one clock for all ranks of one machine
            result = action(mb, *args, **kwargs)
            sync(device)  # a GPU runs asynchronously: wait until the action is done
            self.events.append((kind, mb, start, time.perf_counter(), len(stage.fwd_cache)))
            return result
        return run


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
# --8<-- [end:record]


# --8<-- [start:step]
def train(name, rank, world_size, device, layers_per_stage):
    """STEPS steps of one schedule; this rank's stage is checked against the unsplit model."""
    # imported here, in the ranks: the process that only starts them can skip its cost
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    x, y = (t.to(device) for t in make_batch())
    part = stage_of(make_model(world_size, layers_per_stage), rank, layers_per_stage).to(device)
    stage = PipelineStage(part, stage_index=rank, num_stages=world_size, device=device)
    recorder = Recorder(stage, device)
    Schedule = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[name]
    schedule = Schedule(stage, n_microbatches=MICROBATCHES,
                        loss_fn=nn.functional.mse_loss)  # a mean over each micro-batch
    steps = []
    for _ in range(STEPS):
        part.zero_grad()
        recorder.events.clear()
        losses = []  # filled on the last stage: one loss per micro-batch
        dist.barrier()
        if rank == 0:
            schedule.step(x)  # the first stage takes the whole batch and cuts it
        elif rank == world_size - 1:
            schedule.step(target=y, losses=losses)  # the last stage computes the loss
        else:
            schedule.step()  # a middle stage only receives and sends
        steps.append(list(recorder.events))

    # The reference: the whole model, the whole batch, one process, on this rank.
    reference = make_model(world_size, layers_per_stage).to(device)
    loss = nn.functional.mse_loss(reference(x), y)
    loss.backward()
    same = stage_of(reference, rank, layers_per_stage)  # the layers this rank holds
    worst = max((a.grad - b.grad).abs().max().item()
                for a, b in zip(part.parameters(), same.parameters()))
    assert all(torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7)
               for a, b in zip(part.parameters(), same.parameters())), name
    result = {"steps": steps, "grad_diff": worst}
    if rank == world_size - 1:  # equal micro-batches: the mean of their mean losses
        pipelined = torch.stack(losses).mean()
        assert torch.allclose(pipelined, loss, rtol=1e-5), (pipelined, loss)
        result["loss"] = (pipelined.item(), loss.item())
    return result
# --8<-- [end:step]


# --8<-- [start:rank]
TARGET_F = 0.005  # aim at about 5 ms per stage forward, so compute outweighs messaging
MAX_LAYERS = 8


def layers_for_budget(device):
    """How many layers per stage: one Linear's forward on a micro-batch, timed here."""
    layer = nn.Linear(DIM, DIM).to(device)
    mb = torch.randn(BATCH // MICROBATCHES, DIM, device=device)
    best = float("inf")
    with torch.no_grad():
        for _ in range(3):
            sync(device)
            start = time.perf_counter()
            layer(mb)
            sync(device)
            best = min(best, time.perf_counter() - start)
    return max(1, min(MAX_LAYERS, round(TARGET_F / best)))


def run_rank(rank, world_size, local_rank, local_world_size, store=None):
    """One process: both schedules; rank 0 returns what every rank recorded."""
    if not 2 <= world_size <= MICROBATCHES:  # 1F1B needs m >= p
        raise SystemExit(f"pipeline.py needs 2 to {MICROBATCHES} ranks, not {world_size}")
    device, backend = pick_device(local_rank, local_world_size)
    gpu = device if device.type == "cuda" else None
    with process_group(backend, store=store, rank=rank, world_size=world_size, device_id=gpu):
        choice = [layers_for_budget(device) if rank == 0 else None]
        dist.broadcast_object_list(choice, src=0)  # every rank builds the same model
        runs = {"backend": backend, "device": device.type, "layers": choice[0]}
        for name in SCHEDULES:
            mine = train(name, rank, world_size, device, choice[0])
            everyone = [None] * world_size
            dist.all_gather_object(everyone, mine)
            runs[name] = everyone  # runs[name][rank]
    return runs if rank == 0 else None


def spawned_rank(rank, world_size, port, out):
    runs = run_rank(rank, world_size, rank, world_size, store=join_store(port))
    if runs is not None:  # rank 0 hands the records to the process that started it
        Path(out).write_bytes(pickle.dumps(runs))


def launch():
    """The records, in the process that reports: the parent, or torchrun's rank 0."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        return run_rank(*(int(os.environ[name]) for name in
                          ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "runs.pickle"
        spawn(spawned_rank, WORLD_SIZE, str(out))
        return pickle.loads(out.read_bytes())


if __name__ == "__main__":
    runs = launch()
    if runs is None:  # torchrun's other ranks: rank 0 reports
        raise SystemExit(0)
    P, M = len(runs["GPipe"]), MICROBATCHES
    print(f"{P} stages on {P} ranks ({runs['backend']}, {runs['device']}), {M} micro-batches "
          f"of {BATCH // M} rows, {runs['layers']} Linear({DIM}, {DIM}) + ReLU per stage")
    for name in SCHEDULES:
        mine, theirs = runs[name][-1]["loss"]
        print(f"{name}: loss {mine:.6f}, unsplit model {theirs:.6f}; gradients == unsplit: "
              f"True on every stage (largest difference "
              f"{max(r['grad_diff'] for r in runs[name]):.1e})")
# --8<-- [end:rank]


# --8<-- [start:order]
def expected_order(name, rank, p, m):
    """The actions of one rank, in torch 2.13's order (schedules.py, _step_microbatches)."""
    if name == "GPipe":  # all forwards, then all backwards
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warmup = min(m, p - rank)  # 1F1B: p - rank forwards, then B and F by turns
    order = [("F", i) for i in range(warmup)]
    for i in range(m):
        order.append(("B", i))
        if warmup + i < m:
            order.append(("F", warmup + i))
    return order


def held_peak(order):
    """The most micro-batches whose activations are alive at once: + 1 per F, - 1 per B."""
    alive = peak = 0
    for kind, _ in order:
        alive += 1 if kind == "F" else -1
        peak = max(peak, alive)
    return peak


if __name__ == "__main__":
    orders = {}
    for name in SCHEDULES:
        orders[name] = [[(k, i) for k, i, *_ in runs[name][r]["steps"][0]] for r in range(P)]
        for r in range(P):
            for events in runs[name][r]["steps"]:  # the same order in every step
                assert [(k, i) for k, i, *_ in events] == expected_order(name, r, P, M)
            peak = held_peak(orders[name][r])
            cached = max(e[4] for events in runs[name][r]["steps"] for e in events)
            assert peak == cached == (M if name == "GPipe" else min(M, P - r))
            print(f"{name:5} rank {r}: {' '.join(k + str(i) for k, i in orders[name][r])}"
                  f"   activations held at most: {peak} micro-batch{'es' * (peak > 1)}")
# --8<-- [end:order]


# --8<-- [start:bubble]
def unit_slots(orders, f=1, b=2):
    """Start and end of every action if F takes f slots and B takes b, on every stage,
    messages cost nothing, and each action starts as soon as its rank is free and its
    input is there: F(i) on rank r after F(i) on r - 1, B(i) after B(i) on r + 1."""
    p = len(orders)
    end, free, nxt = {}, [0] * p, [0] * p
    timeline = [[] for _ in range(p)]
    while any(nxt[r] < len(orders[r]) for r in range(p)):
        moved = False
        for r in range(p):
            if nxt[r] == len(orders[r]):
                continue
            kind, i = orders[r][nxt[r]]
            need = ((r - 1, "F", i) if kind == "F" and r > 0 else
                    (r + 1, "B", i) if kind == "B" and r < p - 1 else None)
            if need is not None and need not in end:
                continue  # waits for another rank
            start = max(free[r], end.get(need, 0))
            end[(r, kind, i)] = free[r] = start + (f if kind == "F" else b)
            timeline[r].append((kind, i, start, free[r]))
            nxt[r] += 1
            moved = True
        assert moved, "the order deadlocks"
    return timeline


def idle_fractions(timeline):
    """Per rank: the share of the step (first start to last end, all ranks) spent idle."""
    span = max(t[-1][3] for t in timeline) - min(t[0][2] for t in timeline)
    return [(span - sum(e - s for *_, s, e in t)) / span for t in timeline], span


def share(x):
    return " / ".join(f"{float(v):.0%}" for v in x)


if __name__ == "__main__":
    formula = Fraction(P - 1, M + P - 1)
    print(f"bubble formula (p - 1) / (m + p - 1) = {P - 1}/{M + P - 1} = {float(formula):.0%} "
          f"of the step on every rank; below, rank 0 / rank 1 / ...")
    slots = {}
    for name in SCHEDULES:
        for b in (1, 2):  # the formula does not depend on how long B takes next to F
            timeline = unit_slots(orders[name], f=Fraction(1), b=Fraction(b))  # exact
            idle, span = idle_fractions(timeline)
            assert span == (M + P - 1) * (1 + b) and all(x == formula for x in idle)
        slots[name] = unit_slots(orders[name])  # the figure's: B twice as long as F
        print(f"{name:5} from the order, F = 1 slot, B = 2: step {span} slots, idle {share(idle)}")
        # Measured: the fastest of the steps, on the clock the ranks of one machine share.
        steps = [[[(k, i, s, e) for k, i, s, e, _ in runs[name][r]["steps"][n]]
                  for r in range(P)] for n in range(STEPS)]
        times = min(steps, key=lambda t: idle_fractions(t)[1])
        idle, span = idle_fractions(times)
        mean = {kind: 1e3 * sum(e - s for t in times for k, _, s, e in t if k == kind) / (P * M)
                for kind in "FB"}
        print(f"{name:5} measured: step {span * 1e3:.1f} ms, F {mean['F']:.1f} ms and "
              f"B {mean['B']:.1f} ms on average, idle {share(idle)}")
    for p, m in ((4, 4), (4, 16), (4, 64)):
        print(f"  p = {p}, m = {m:2}: bubble {p - 1}/{m + p - 1} = {(p - 1) / (m + p - 1):.0%}")
# --8<-- [end:bubble]


# --8<-- [start:figure]
LABELS = {
    "en": {"title": {"GPipe": "GPipe: all forwards, then all backwards",
                     "1F1B": "1F1B: after the warm-up, one forward, one backward"},
           "rank": "rank {r}", "held": "keeps ≤ {n} micro-batch{s}", "bubble": "bubble (idle)",
           "forward": "forward F", "backward": "backward B",
           "x": "time in slots (F = 1, B = 2), from the recorded order"},
    "zh": {"title": {"GPipe": "GPipe：先做完全部前向，再做全部反向",
                     "1F1B": "1F1B：预热之后，一次前向、一次反向交替"},
           "rank": "rank {r}", "held": "最多保存 {n} 个微批次", "bubble": "气泡（空闲）",
           "forward": "前向 F", "backward": "反向 B",
           "x": "时间（格；F = 1、B = 2），由记录下的顺序推出"},
}


def draw(fig, text):
    from matplotlib.patches import Patch
    axes = fig.subplots(len(slots), 1, sharex=True)
    for ax, (name, timeline) in zip(axes, slots.items()):
        span = max(t[-1][3] for t in timeline)
        for r, actions in enumerate(timeline):
            ax.barh(r, span, left=0, height=0.8, color="#eeeeee", hatch="///",
                    edgecolor="#bbbbbb", linewidth=0)  # idle unless an action covers it
            for kind, i, start, stop in actions:
                ax.barh(r, stop - start, left=start, height=0.8, edgecolor="white",
                        color="#6baed6" if kind == "F" else "#fd8d3c")
                ax.text((start + stop) / 2, r, f"{kind}{i}", ha="center", va="center",
                        fontsize=8)
            n = held_peak(orders[name][r])
            ax.text(span + 0.3, r, text["held"].format(n=n, s="es" * (n > 1)),
                    va="center", fontsize=8)
        ax.set_yticks(range(len(timeline)), [text["rank"].format(r=r)
                                              for r in range(len(timeline))])
        ax.invert_yaxis()
        ax.set_title(text["title"][name], fontsize=10, loc="left")
        ax.set_xlim(0, span + 6)
        ax.set_xticks(range(0, span + 1, 3))
    axes[-1].set_xlabel(text["x"])
    fig.legend(handles=[Patch(color="#6baed6", label=text["forward"]),
                        Patch(color="#fd8d3c", label=text["backward"]),
                        Patch(facecolor="#eeeeee", hatch="///", edgecolor="#bbbbbb",
                              label=text["bubble"])],
               loc="lower center", ncol=3, bbox_to_anchor=(0.5, -0.08), frameon=False)
    fig.tight_layout()


if __name__ == "__main__":
    draw_both("schedules", LABELS, draw, figsize=(7.2, 3.8))
# --8<-- [end:figure]
