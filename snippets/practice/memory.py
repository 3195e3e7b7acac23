"""What one training step keeps in memory, measured on the CPU and checked against a formula."""

import os
import pickle
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
