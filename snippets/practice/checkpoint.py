"""Checkpoint and resume: what a checkpoint must hold for a resumed run to continue bit for bit.

A small model with dropout trains 12 steps with AdamW, a cosine learning-rate schedule,
float16 autocast with a GradScaler, a toy augmentation that draws from NumPy and from
Python's random, and a shuffled DataLoader, saving a checkpoint after step 7 (in the
middle of the second epoch). A new process (multiprocessing's spawn) loads it with
torch.load(weights_only=True) and trains steps 8 to 12: its losses and final parameters
must equal the uninterrupted run's bit for bit. The same resume with one part of the
state left out differs, and the script prints the first step at which it does. Last, a
save that crashes halfway: written in place it destroys the old checkpoint, written to a
temporary file and renamed with os.replace it does not.
"""
# snippet: cpu-independent
# The CPU profiles skip this file: every check compares two runs of the same computation on
# the same machine (uninterrupted against resumed), which any CPU's kernels repeat exactly.


# --8<-- [start:setup]
import io
import multiprocessing
import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both

STEPS, SAVE_AT = 12, 7        # train 12 steps; the checkpoint is taken after step 7
SAMPLES, BATCH = 40, 8        # 5 batches per epoch: step 7 is the 2nd batch of epoch 1
device = "cuda" if torch.cuda.is_available() else "cpu"
MAIN = __name__ == "__main__"  # False in the spawned process, which imports this file


def make_dataset():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 16, generator=g)
    return TensorDataset(x, x[:, :4].sum(1, keepdim=True) + 0.1 * torch.randn(SAMPLES, 1, generator=g))


class Run:
    """Everything a training run changes as it goes, built from the seeds."""

    def __init__(self):
        torch.manual_seed(0)  # the script "seeds everything" at the top, as scripts do
        np.random.seed(0)
        random.seed(0)
        self.model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.3),
                                   nn.Linear(32, 1)).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=STEPS)
        self.scaler = torch.amp.GradScaler(device, init_scale=2.0**10, growth_interval=2)
        self.loader = DataLoader(make_dataset(), batch_size=BATCH, shuffle=True,
                                 generator=torch.Generator().manual_seed(1))
        self.step = 0                                  # optimizer steps done
        self.epoch, self.seen = 0, 0                   # batches done in this epoch
        self.shuffle = self.loader.generator.get_state()  # the generator as this epoch began
        self.skipped = []  # steps whose update the GradScaler skipped (not saved: a log)
# --8<-- [end:setup]


# --8<-- [start:train]
def augment(x):
    """A toy augmentation that, like many data pipelines, draws from NumPy and random."""
    noise = torch.from_numpy(np.random.normal(0.0, 0.05, size=tuple(x.shape)).astype(np.float32))
    return x * random.uniform(0.9, 1.1) + noise


def train(run, until, losses, save=None):
    """Train from run.step to `until`; call save(run) after step SAVE_AT."""
    while run.step < until:
        run.loader.generator.set_state(run.shuffle)  # iter() draws this epoch's order from it
        for i, (x, y) in enumerate(run.loader):
            if i < run.seen:
                continue  # trained on before the checkpoint
            x, y = augment(x).to(device), y.to(device)
            with torch.autocast(device, dtype=torch.float16):
                loss = nn.functional.mse_loss(run.model(x).float(), y)
            run.optimizer.zero_grad()
            run.scaler.scale(loss).backward()
            scale = run.scaler.get_scale()
            run.scaler.step(run.optimizer)  # skipped when a gradient is inf or NaN
            run.scaler.update()             # then halves the scale; else doubles it every 2 steps
            if run.scaler.get_scale() < scale:
                run.skipped.append(run.step + 1)
            run.scheduler.step()
            run.step, run.seen = run.step + 1, run.seen + 1
            losses.append(loss.item())
            if save and run.step == SAVE_AT:
                save(run)
            if run.step == until:
                return
        run.epoch, run.seen = run.epoch + 1, 0
        run.shuffle = run.loader.generator.get_state()  # where the next epoch's order comes from
# --8<-- [end:train]


# --8<-- [start:state]
def rng_state():
    kind, key, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),  # dropout on the CPU, torch.randn, ...
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": (kind, torch.from_numpy(key), pos, has_gauss, gauss),  # ndarray -> tensor
        "random": random.getstate(),  # a tuple of ints: weights_only loads it as it is
    }


def set_rng_state(state):
    torch.set_rng_state(state["torch"])
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, key, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, key.numpy(), pos, has_gauss, gauss))
    random.setstate(state["random"])


def checkpoint(run):
    return {
        "model": run.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),  # AdamW's moments and step counts, the lr
        "scheduler": run.scheduler.state_dict(),
        "scaler": run.scaler.state_dict(),
        "rng": rng_state(),
        "data": {"epoch": run.epoch, "seen": run.seen, "shuffle": run.shuffle},
        "step": run.step,
    }


def save_atomic(obj, path):
    """Write to a temporary file in the same folder, make it durable, then rename it."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())   # the bytes are on the disk before the name points at them
    os.replace(tmp, path)      # atomic: readers see the old file or the new one, never half
    if os.name == "posix":     # make the rename itself durable too
        folder = os.open(path.parent, os.O_RDONLY)
        os.fsync(folder)
        os.close(folder)
# --8<-- [end:state]


# --8<-- [start:resume]
PARTS = ("model", "optimizer", "scheduler", "scaler", "rng", "data")


def resume(path, leave_out=None):
    """A fresh Run (seeded as at the start), then every part of the checkpoint but one."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)  # RNG states stay on the CPU
    run = Run()
    for part in PARTS:
        if part == leave_out:
            continue
        if part == "rng":
            set_rng_state(ckpt["rng"])
        elif part == "data":
            run.epoch, run.seen, run.shuffle = (ckpt["data"][k] for k in ("epoch", "seen", "shuffle"))
        else:
            getattr(run, part).load_state_dict(ckpt[part])
    run.step = ckpt["step"]
    return run


def resumed_process(path, out):
    """Runs in a new process: the exact resume, then one resume per part left out."""
    results = {}
    for leave_out in (None, "rng", "optimizer", "scheduler", "data", "scaler"):
        run, losses = resume(path, leave_out), []
        train(run, STEPS, losses)
        params = [p.detach().cpu() for p in run.model.parameters()]
        results[leave_out or "nothing"] = (losses, params, run.skipped)
    torch.save(results, out)
# --8<-- [end:resume]


# --8<-- [start:compare]
NAMES = {"nothing": "nothing", "rng": "the RNG states", "optimizer": "the optimizer state",
         "scheduler": "the scheduler state", "data": "the data position",
         "scaler": "the GradScaler state"}


def first_difference(a, b):
    """The step number of the first resumed loss that differs, or None."""
    return next((SAVE_AT + i + 1 for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def main(folder):
    path = folder / "ckpt.pt"
    run, losses = Run(), []
    train(run, STEPS, losses, save=lambda r: save_atomic(checkpoint(r), path))
    straight = [p.detach().cpu() for p in run.model.parameters()]
    ckpt = torch.load(path, weights_only=True)
    print(f"uninterrupted: {STEPS} steps on {device}; checkpoint after step {SAVE_AT} "
          f"(epoch {ckpt['data']['epoch']}, {ckpt['data']['seen']} batches into it), "
          f"{path.stat().st_size:,} bytes")
    version, internal, gauss = ckpt["rng"]["random"]
    print(f"  in it: lr {ckpt['optimizer']['param_groups'][0]['lr']:.6f}, GradScaler scale "
          f"{ckpt['scaler']['scale']:g}, random.getstate() loaded as a "
          f"{type(ckpt['rng']['random']).__name__}: ({version}, {len(internal)} ints, {gauss})")
    print(f"  updates skipped by the GradScaler (inf gradients): steps {run.skipped}")

    child = multiprocessing.get_context("spawn").Process(
        target=resumed_process, args=(path, folder / "resumed.pt"))
    child.start()
    child.join()
    assert child.exitcode == 0, f"the resumed process exited with {child.exitcode}"
    results = torch.load(folder / "resumed.pt", weights_only=True)

    tail = losses[SAVE_AT:]
    print(f"\nresumed in a new process, steps {SAVE_AT + 1}-{STEPS}:")
    print(f"{'left out of the checkpoint':<28}{'first differing loss':>21}"
          f"{'final parameters':>18}  skipped updates")
    first = {}
    for name, (resumed, params, skipped) in results.items():
        same = all(torch.equal(a, b) for a, b in zip(params, straight))
        first[name] = first_difference(resumed, tail)
        where = "none" if first[name] is None else f"step {first[name]}"
        print(f"{NAMES[name]:<28}{where:>21}{'identical' if same else 'differ':>18}  {skipped}")
    assert results["nothing"][0] == tail  # bit for bit: == on Python floats
    assert all(torch.equal(a, b) for a, b in zip(results["nothing"][1], straight))
    # the first resumed loss comes before any update: only the RNG and the data reach it
    assert first["rng"] == first["data"] == SAVE_AT + 1
    # A missing optimizer state changes the first update after the save that the GradScaler
    # applies (fresh moments), a missing scheduler the first one from step 9 on (its own
    # count sets the lr after step 8); the loss after that update is the first to differ.
    # Steps 8 and 9 are applied here on the CPU; on a GPU the dropout masks come from the
    # CUDA generator, so a skip could fall there and move both.
    applied = [step for step in range(SAVE_AT + 1, STEPS) if step not in run.skipped]
    applied.append(STEPS)  # an update in the last step changes no loss: no difference (None)
    assert first["optimizer"] == (applied[0] + 1 if applied[0] < STEPS else None)
    later = next(step for step in applied if step > SAVE_AT + 1)
    assert first["scheduler"] == (later + 1 if later < STEPS else None)
    print("resumed with everything == uninterrupted, losses and parameters: True (torch.equal)")
    return losses, results


if MAIN:
    workdir = tempfile.TemporaryDirectory()
    losses, results = main(Path(workdir.name))
# --8<-- [end:compare]


# --8<-- [start:atomic]
def loads(path):
    try:
        return torch.load(path, weights_only=True)["step"]
    except Exception as e:  # noqa: BLE001 - any failure to read counts
        return type(e).__name__


def crash_during_save(folder):
    """A save killed halfway has written the first part of the file's bytes, no more."""
    buffer = io.BytesIO()
    torch.save({"step": SAVE_AT + 5, "weights": torch.randn(1000)}, buffer)
    first_half = buffer.getvalue()[: buffer.tell() // 2]
    for how in ("in place", "atomic"):
        path = folder / f"{how.replace(' ', '_')}.pt"
        save_atomic({"step": SAVE_AT, "weights": torch.randn(1000)}, path)  # the last good one
        target = path if how == "in place" else path.with_name(path.name + ".tmp")
        with open(target, "wb") as f:  # "wb" empties the file at once
            f.write(first_half)        # ... and the process dies here: no os.replace
        print(f"killed halfway through the next save, {how:>8}: {path.name} now loads as "
              f"{loads(path)!r}")
    assert loads(folder / "in_place.pt") != SAVE_AT  # the old checkpoint is gone
    assert loads(folder / "atomic.pt") == SAVE_AT    # the old checkpoint, intact


if MAIN:
    print()
    crash_during_save(Path(workdir.name))
# --8<-- [end:atomic]


# --8<-- [start:figure]
LABELS = {
    "en": {"title": "Training loss per step", "x": "step", "y": "loss",
           "straight": "uninterrupted", "exact": "resumed from the checkpoint",
           "rng": "resumed without the RNG states", "optimizer": "resumed without the optimizer state",
           "save": "checkpoint saved"},
    "zh": {"title": "每一步的训练损失", "x": "步", "y": "损失",
           "straight": "未中断的运行", "exact": "从检查点续训",
           "rng": "续训时未恢复随机数状态", "optimizer": "续训时未恢复优化器状态",
           "save": "保存检查点"},
}


def figure(losses, results):
    steps = range(1, STEPS + 1)
    later = range(SAVE_AT + 1, STEPS + 1)

    def draw(fig, t):
        ax = fig.add_subplot()
        ax.plot(steps, losses, color="tab:blue", lw=3, label=t["straight"])
        ax.plot(later, results["nothing"][0], "--", color="black", lw=1.5, label=t["exact"])
        ax.plot(later, results["rng"][0], "o-", color="tab:red", ms=4, label=t["rng"])
        ax.plot(later, results["optimizer"][0], "s-", color="tab:orange", ms=4, label=t["optimizer"])
        ax.axvline(SAVE_AT + 0.5, color="gray", ls=":")
        ax.annotate(t["save"], (SAVE_AT + 0.5, max(losses)), ha="right", va="top",
                    color="gray", xytext=(-4, 0), textcoords="offset points")
        ax.set(title=t["title"], xlabel=t["x"], ylabel=t["y"], xticks=list(steps))
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)

    draw_both("resume", LABELS, draw)


if MAIN:
    figure(losses, results)
    workdir.cleanup()
# --8<-- [end:figure]
