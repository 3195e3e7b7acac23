"""What one training step keeps in memory, measured on the CPU and checked against a formula;
then what selective checkpointing and save_on_cpu keep, and what recomputation costs."""

import os
import pickle
import sys
import tempfile
from pathlib import Path

# --8<-- [start:model]
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

D_IN, HIDDEN, CLASSES, BATCH = 512, [1024, 1024, 1024], 10, 64


def make_model(dtype=torch.float32) -> nn.Sequential:
    torch.manual_seed(0)
    layers, width = [], D_IN
    for h in HIDDEN:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, CLASSES))
    return nn.Sequential(*layers).to(dtype)


def make_batch(dtype=torch.float32, batch=BATCH):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, D_IN, generator=gen).to(dtype)
    y = torch.randint(0, CLASSES, (batch,), generator=gen)
    return x, y
# --8<-- [end:model]


# --8<-- [start:count]
def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class SavedTensorBytes(torch.autograd.graph.saved_tensors_hooks):
    """Bytes of the tensors autograd keeps for backward, parameters excluded.

    The pack hook sees every tensor an operation saves. Two operations often
    save the same tensor (a ReLU's output is the next Linear's input), so
    storages are counted once.
    """

    def __init__(self, model: nn.Module):
        skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.storages: dict[int, int] = {}

        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in skip:
                self.storages[ptr] = t.untyped_storage().nbytes()
            return t

        super().__init__(pack, lambda t: t)

    def __enter__(self):
        super().__enter__()
        return self

    @property
    def total(self) -> int:
        return sum(self.storages.values())
# --8<-- [end:count]


# --8<-- [start:measure]
model = make_model()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = make_batch()

with SavedTensorBytes(model) as saved:
    loss = nn.functional.cross_entropy(model(x), y)
loss.backward()
optimizer.step()

measured = {
    "parameters": tensor_bytes(model.parameters()),
    "gradients": tensor_bytes(p.grad for p in model.parameters()),
    "Adam state": tensor_bytes(t for state in optimizer.state.values()
                               for t in state.values()),
    "saved activations": saved.total,
}
# --8<-- [end:measure]


# --8<-- [start:formula]
def estimate(n_params: int, n_tensors: int, itemsize: int = 4, batch: int = BATCH) -> dict:
    """Bytes of one Adam training step of the MLP above, from its sizes alone."""
    return {
        "parameters": n_params * itemsize,
        "gradients": n_params * itemsize,              # one gradient per parameter
        "Adam state": 2 * n_params * itemsize          # exp_avg and exp_avg_sq
                      + 4 * n_tensors,                  # a float32 `step` per tensor
        "saved activations": itemsize * (
            batch * D_IN                                # input of the first Linear
            + batch * sum(HIDDEN)                       # each ReLU's output
            + batch * CLASSES                           # log-softmax of the loss
            + 1)                                        # the loss's weight total
            + 8 * batch,                                # int64 class labels
    }


params = list(model.parameters())
n_params = sum(p.numel() for p in params)
predicted = estimate(n_params, len(params))
print(f"model: {n_params:,} parameters in {len(params)} tensors, batch {BATCH}")
print(f"{'part':<18}{'formula':>14}{'measured':>14}")
for part in measured:
    print(f"{part:<18}{predicted[part]:>14,}{measured[part]:>14,}")
    assert measured[part] == predicted[part], part
total = sum(measured.values())
print(f"{'total':<18}{sum(predicted.values()):>14,}{total:>14,}  "
      f"({total / 2**20:.1f} MiB)")
print(f"bytes per parameter, activations left out: "
      f"{(total - measured['saved activations']) / n_params:.2f}")
# --8<-- [end:formula]


# --8<-- [start:accumulate]
def gradients(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


big = make_model()
x, y = make_batch()
nn.functional.cross_entropy(big(x), y).backward()         # one batch of 64

small = make_model()
STEPS = 4
for xs, ys in zip(x.chunk(STEPS), y.chunk(STEPS)):          # four of 16
    (nn.functional.cross_entropy(small(xs), ys) / STEPS).backward()  # grads add up

worst = max((a - b).abs().max().item()
            for a, b in zip(gradients(big), gradients(small)))
print(f"\ngradient accumulation: {STEPS} micro-batches of {BATCH // STEPS} vs one "
      f"batch of {BATCH}, largest difference {worst:.1e}")
assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7)
           for a, b in zip(gradients(big), gradients(small)))
xm, ym = make_batch(batch=BATCH // STEPS)
with SavedTensorBytes(small) as micro:
    nn.functional.cross_entropy(small(xm), ym)
print(f"saved activations: {measured['saved activations']:,} bytes for the batch, "
      f"{micro.total:,} for a micro-batch")
assert micro.total == estimate(n_params, len(params), batch=BATCH // STEPS)[
    "saved activations"]
# --8<-- [end:accumulate]


# --8<-- [start:checkpoint]
def forward_checkpointed(model: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """The hidden layers keep only their input; their insides are recomputed."""
    hidden, last = model[:-1], model[-1]
    x = checkpoint(hidden, x, use_reentrant=False)
    return last(x)


plain, ckpt = make_model(), make_model()
x, y = make_batch()
with SavedTensorBytes(plain) as before:
    loss_plain = nn.functional.cross_entropy(plain(x), y)
with SavedTensorBytes(ckpt) as after:
    loss_ckpt = nn.functional.cross_entropy(forward_checkpointed(ckpt, x), y)
loss_plain.backward()
loss_ckpt.backward()                      # reruns the hidden layers first
print(f"\nsaved activations: {before.total:,} bytes plain, "
      f"{after.total:,} with checkpointing ({after.total / before.total:.0%})")
assert after.total < before.total
dropped = 4 * BATCH * sum(HIDDEN[:-1])      # the first two ReLU outputs
assert before.total - after.total == dropped
assert all(torch.allclose(a, b) for a, b in zip(gradients(plain), gradients(ckpt)))
print("gradients with and without checkpointing: equal")
# --8<-- [end:checkpoint]


# --8<-- [start:dtype]
half = make_model(torch.bfloat16)
x16, y16 = make_batch(torch.bfloat16)
with SavedTensorBytes(half) as saved16:
    nn.functional.cross_entropy(half(x16), y16).backward()
bf16 = estimate(n_params, len(params), itemsize=2)
print(f"\nbfloat16: parameters {tensor_bytes(half.parameters()):,} bytes, "
      f"saved activations {saved16.total:,} bytes")
assert tensor_bytes(half.parameters()) == measured["parameters"] // 2
assert saved16.total == bf16["saved activations"]
# --8<-- [end:dtype]


# --8<-- [start:sac]
import functools  # noqa: E402

from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts  # noqa: E402

WIDTH, INNER, BLOCKS, ROWS = 128, 512, 4, 64


def make_blocks() -> nn.Sequential:
    """BLOCKS blocks of Linear -> GELU -> Linear, the shape of a transformer's MLP."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, INNER), nn.GELU(), nn.Linear(INNER, WIDTH))
                           for _ in range(BLOCKS)])


def save_matmuls(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    """Keep what a matmul returns; recompute everything else (here: GELU)."""
    if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


selective = functools.partial(create_selective_checkpoint_contexts, save_matmuls)


def forward(model: nn.Sequential, x: torch.Tensor, mode: str, early_stop: bool = True):
    for block in model:
        if mode == "none":
            x = block(x)
        elif mode == "full":
            x = checkpoint(block, x, use_reentrant=False, early_stop=early_stop)
        else:  # "SAC"
            x = checkpoint(block, x, use_reentrant=False, context_fn=selective)
    return x
# --8<-- [end:sac]


sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared helpers

# --8<-- [start:held]
from _storage import LiveStorages  # noqa: E402  snippets/_storage.py, shared with the attention page
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

xb = torch.randn(ROWS, WIDTH, generator=torch.Generator().manual_seed(2))


def step(mode: str, early_stop: bool = True) -> dict:
    model = make_blocks()
    with LiveStorages() as fwd, SavedTensorBytes(model) as hooks:
        loss = forward(model, xb, mode, early_stop).square().mean()
    held = fwd.held             # alive after forward: what backward needs, and the loss
    with LiveStorages() as bwd, FlopCounterMode(display=False) as flops:
        loss.backward()
    return {"held": held, "hooks": hooks.total, "ops": bwd.ops,
            "flops": flops.get_total_flops(), "grads": gradients(model)}


def held_formula(kept_per_block: int) -> int:
    """float32 bytes: each block's output (the next block's input; the last one is saved
    by the loss), kept_per_block tensors of ROWS x INNER inside each block, the loss."""
    return 4 * (BLOCKS * ROWS * WIDTH + kept_per_block * BLOCKS * ROWS * INNER + 1)


KEPT = {"none": 2, "SAC": 1, "full": 0}    # GELU's input and output | the matmul's output | none
runs = {mode: step(mode) for mode in KEPT}
print(f"\n{BLOCKS} blocks of Linear({WIDTH}, {INNER}) -> GELU -> Linear({INNER}, {WIDTH}), "
      f"{ROWS} rows, float32")
print(f"{'mode':<6}{'held after forward':>20}{'formula':>11}{'saved-tensor hooks':>20}")
for mode, kept in KEPT.items():
    r = runs[mode]
    print(f"{mode:<6}{r['held']:>20,}{held_formula(kept):>11,}{r['hooks']:>20,}")
    assert r["held"] == held_formula(kept), mode
assert runs["SAC"]["hooks"] == runs["full"]["hooks"] == 4 * (BLOCKS + 1) * ROWS * WIDTH
for mode in ("SAC", "full"):
    assert all(torch.allclose(a, b) for a, b in zip(runs["none"]["grads"], runs[mode]["grads"]))
print("gradients of none, SAC and full: equal")
# --8<-- [end:held]


# --8<-- [start:recompute]
import time  # noqa: E402


def ms_per_step(budget_s: float = 0.3) -> dict:
    """Best time of one forward and backward per mode; the modes take turns until
    budget_s is spent, after one untimed round."""
    models, times = {mode: make_blocks() for mode in KEPT}, {mode: [] for mode in KEPT}
    for mode, model in models.items():
        forward(model, xb, mode).square().mean().backward()
    while sum(map(sum, times.values())) < budget_s:
        for mode, model in models.items():
            start = time.perf_counter()
            forward(model, xb, mode).square().mean().backward()
            times[mode].append(time.perf_counter() - start)
    return {mode: 1e3 * min(t) for mode, t in times.items()}


runs["full, no early stop"] = step("full", early_stop=False)
LINEAR = 2 * ROWS * WIDTH * INNER           # FLOPs of one Linear's forward matmul
base = runs["none"]["flops"]                # backward alone: two matmuls per Linear, but
assert base == (4 * BLOCKS - 1) * LINEAR    # no input gradient for the first Linear
print(f"{'mode':<21}{'forward ops rerun in backward':>31}{'recomputed FLOPs':>18}")
for mode, r in runs.items():
    rerun = ", ".join(f"{op} x{r['ops'][op]}" for op in ("addmm", "gelu") if r["ops"][op]) or "-"
    print(f"{mode:<21}{rerun:>31}{r['flops'] - base:>18,}")
expected = {"none": (0, 0), "SAC": (0, BLOCKS), "full": (BLOCKS, BLOCKS),
            "full, no early stop": (2 * BLOCKS, BLOCKS)}    # (addmm, gelu) per backward
for mode, (addmm, gelu) in expected.items():
    assert (runs[mode]["ops"]["addmm"], runs[mode]["ops"]["gelu"]) == (addmm, gelu), mode
    assert runs[mode]["flops"] - base == addmm * LINEAR, mode
assert all(torch.allclose(a, b) for a, b in
           zip(runs["none"]["grads"], runs["full, no early stop"]["grads"]))
print("forward + backward on the CPU, best time: " + ", ".join(
    f"{mode} {ms:.2f} ms" for mode, ms in ms_per_step().items()))
# --8<-- [end:recompute]


# --8<-- [start:sac_figure]
from _figures import draw_both  # noqa: E402

SAC_LABELS = {
    "en": {"modes": ["no checkpoint", "SAC", "full"], "held": "held for backward (KiB)",
           "flops": "recomputed in backward (matmul MFLOP)"},
    "zh": {"modes": ["不做检查点", "选择性检查点", "完整检查点"], "held": "留给反向传播的内存（KiB）",
           "flops": "反向传播时重算的矩阵乘法（MFLOP）"},
}


def draw_sac(fig, text):
    held = [runs[m]["held"] / 1024 for m in KEPT]
    again = [(runs[m]["flops"] - base) / 1e6 for m in KEPT]
    rerun = [", ".join(f"{op} ×{runs[m]['ops'][op]}" for op in ("addmm", "gelu") if runs[m]["ops"][op])
             for m in KEPT]                # the operators behind each bar, the same in both languages
    panels = ((held, text["held"], [f"{v:.0f}" for v in held]),
              (again, text["flops"], [f"{v:.1f}\n{ops}".rstrip() for v, ops in zip(again, rerun)]))
    for i, (values, title, bar_text) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        bars = ax.bar(text["modes"], values, color=["#888888", "#4c72b0", "#dd8452"])
        ax.bar_label(bars, bar_text, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.margins(y=0.25)


draw_both("sac", SAC_LABELS, draw_sac, figsize=(7.2, 3.2))
# --8<-- [end:sac_figure]


# --8<-- [start:allocator]
def mib(n: int) -> str:
    return f"{n / 2**20:8.1f} MiB"


if torch.cuda.is_available():
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    block = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")  # 64 MiB
    print(f"\nafter allocating 64 MiB: allocated {mib(torch.cuda.memory_allocated())}, "
          f"reserved {mib(torch.cuda.memory_reserved())}")
    assert torch.cuda.memory_allocated() - base == block.nbytes
    del block
    print(f"after del:               allocated {mib(torch.cuda.memory_allocated())}, "
          f"reserved {mib(torch.cuda.memory_reserved())}")
    assert torch.cuda.memory_allocated() == base
    if not os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"):
        assert torch.cuda.memory_reserved() >= 64 * 2**20  # still cached
    torch.cuda.empty_cache()
    print(f"after empty_cache():     allocated {mib(torch.cuda.memory_allocated())}, "
          f"reserved {mib(torch.cuda.memory_reserved())}")
    print("PYTORCH_CUDA_ALLOC_CONF =", os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
          "| PYTORCH_ALLOC_CONF =", os.environ.get("PYTORCH_ALLOC_CONF"))
else:
    print("\ncaching allocator (memory_allocated, memory_reserved, empty_cache): "
          "not run here, no CUDA device")
# --8<-- [end:allocator]


# --8<-- [start:snapshot]
if torch.cuda.is_available():
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    gpu_model = make_model().cuda()
    gpu_opt = torch.optim.Adam(gpu_model.parameters())
    xg, yg = (t.cuda() for t in make_batch())
    nn.functional.cross_entropy(gpu_model(xg), yg).backward()
    gpu_opt.step()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)   # stop recording
    with tempfile.TemporaryDirectory() as tmp:  # keep a copy to open at pytorch.org/memory_viz
        path = Path(tmp) / "memory_snapshot.pickle"
        path.write_bytes(pickle.dumps(snapshot))
        written = path.stat().st_size
    events = snapshot["device_traces"][0]
    segments = snapshot["segments"]
    print(f"snapshot: {len(segments)} segments, "
          f"{sum(s['total_size'] for s in segments) / 2**20:.1f} MiB reserved, "
          f"{len(events)} allocator events recorded, {written:,} bytes as a pickle")
    assert any(e["action"] == "alloc" for e in events)
else:
    print("memory snapshot (torch.cuda.memory._record_memory_history): "
          "not run here, no CUDA device")
# --8<-- [end:snapshot]


# Last in the file, although the page shows it earlier: its GPU part sets up cuBLAS and
# fills the allocator's cache, which would change what the allocator sections above print.
# --8<-- [start:save_on_cpu]
import contextlib  # noqa: E402

from torch.autograd.graph import save_on_cpu  # noqa: E402


def copied_bytes(rows: int) -> int:
    """float32 bytes of one copy per saved tensor, each time an operator saves it: per block
    the first Linear's input and weight, GELU's input, the second Linear's input and weight;
    then the loss's input. The model's input needs no gradient, so the weight that
    multiplies it is not saved."""
    per_block = rows * WIDTH + WIDTH * INNER + 2 * rows * INNER + INNER * WIDTH
    return 4 * (BLOCKS * per_block - WIDTH * INNER + rows * WIDTH)


def held_under(hooks) -> int:
    model = make_blocks()
    with LiveStorages() as fwd, hooks:
        loss = forward(model, xb, "none").square().mean()
    held = fwd.held
    loss.backward()
    return held


same, pinned = held_under(save_on_cpu()), held_under(save_on_cpu(pin_memory=True))
print(f"\nsave_on_cpu on CPU tensors: held {same:,} bytes (plain {runs['none']['held']:,}); "
      f"with pin_memory=True {pinned:,}")
assert same == runs["none"]["held"]       # already in host memory: nothing is copied
assert pinned == copied_bytes(ROWS) + 4   # a fresh copy of every saved tensor, and the loss
if torch.cuda.is_available():
    gpu_rows = 16384                      # activations much larger than the weights
    gpu_model = make_blocks().cuda()
    xg = torch.randn(gpu_rows, WIDTH, device="cuda")

    def gpu_step(hooks) -> tuple[int, float]:
        gpu_model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start_bytes, start = torch.cuda.memory_allocated(), time.perf_counter()
        with hooks:
            loss = forward(gpu_model, xg, "none").square().mean()
        loss.backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - start_bytes, time.perf_counter() - start

    for hooks in (contextlib.nullcontext(), save_on_cpu(pin_memory=True)):
        gpu_step(hooks)                   # warm-up: cuBLAS, pinned host blocks
    (plain_peak, plain_s), (cpu_peak, cpu_s) = (
        gpu_step(h) for h in (contextlib.nullcontext(), save_on_cpu(pin_memory=True)))
    print(f"GPU, {gpu_rows} rows: peak {plain_peak / 2**20:.1f} MiB in {plain_s * 1e3:.1f} ms plain, "
          f"{cpu_peak / 2**20:.1f} MiB in {cpu_s * 1e3:.1f} ms with save_on_cpu(pin_memory=True); "
          f"{copied_bytes(gpu_rows) / 2**20:.1f} MiB copied each way")
    assert cpu_peak < plain_peak
else:
    print("save_on_cpu on a GPU (peak memory with and without): not run here, no CUDA device")
# --8<-- [end:save_on_cpu]
