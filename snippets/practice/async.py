"""Asynchronous execution: a profiled training step, sync points, streams and overlap."""

import tempfile
import time
from pathlib import Path

# --8<-- [start:step]
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
optimizer = torch.optim.Adam(model.parameters())
x = torch.randn(64, 256, device=device)
y = torch.randint(0, 10, (64,), device=device)


def train_step() -> float:
    optimizer.zero_grad()
    with record_function("forward"):
        loss = nn.functional.cross_entropy(model(x), y)
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()
    with record_function("loss.item()"):
        return loss.item()          # the one line that needs the number on the host


train_step()                        # warm-up: first calls allocate and pick kernels
activities = [ProfilerActivity.CPU]
if device == "cuda":
    activities.append(ProfilerActivity.CUDA)
with profile(activities=activities) as prof:
    train_step()
# --8<-- [end:step]


# --8<-- [start:phases]
PHASES = ["forward", "backward", "optimizer", "loss.item()"]
events = prof.events()
host = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]


def ops_in(label: str) -> list[str]:
    """Names of the host-side events that started inside a labelled range.

    On a GPU the autograd engine runs backward on a thread of its own, so
    the range is matched by time, not by parent.
    """
    mark = next(e for e in host if e.name == label)
    start, end = mark.time_range.start, mark.time_range.end
    return [e.name for e in sorted(host, key=lambda e: e.time_range.start)
            if e is not mark and start <= e.time_range.start <= end]


PLUMBING = {"t", "transpose", "as_strided", "expand", "view", "resolve_conj", "copy_",
            "empty", "empty_like", "empty_strided", "ones_like", "fill_", "zero_",
            "to", "_to_copy", "detach"}


def landmarks(label: str, names: list[str]) -> list[str]:
    """The events worth reading: autograd nodes in backward, real work elsewhere."""
    if label == "backward":
        keep = [n for n in names if n.endswith("Backward0") and "::" not in n]
    else:
        keep = [n for n in names if n.startswith(("aten::", "Optimizer."))
                and n.removeprefix("aten::") not in PLUMBING]
    return list(dict.fromkeys(keep))   # first occurrence of each, in order


inside = {label: ops_in(label) for label in PHASES}
for label, names in inside.items():
    print(f"{label:<12} {len(names):>4} host events: "
          f"{', '.join(landmarks(label, names)[:5])}")

assert "aten::addmm" in inside["forward"]
assert "autograd::engine::evaluate_function: AddmmBackward0" in inside["backward"]
assert "Optimizer.step#Adam.step" in inside["optimizer"]
assert "aten::_local_scalar_dense" in inside["loss.item()"]

with tempfile.TemporaryDirectory() as tmp:    # keep a copy to open in ui.perfetto.dev
    trace = Path(tmp) / "train_step.json"
    prof.export_chrome_trace(str(trace))
    print(f"chrome trace: {len(events)} events, {trace.stat().st_size:,} bytes")
# --8<-- [end:phases]


# --8<-- [start:gpu-trace]
if device == "cuda":
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    runtime = [n for n in inside["loss.item()"] if n.startswith("cuda")]
    print(f"GPU kernels in the step: {len(kernels)}; "
          f"CUDA runtime calls inside loss.item(): {', '.join(runtime) or 'none'}")
else:
    print("GPU side of the trace (kernels, cudaStreamSynchronize): not run here, "
          "no CUDA device")
# --8<-- [end:gpu-trace]


# --8<-- [start:sync-points]
def synchronizes(fn) -> bool:
    """True if fn makes the host wait for the GPU (sync debug mode turned to error)."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
        return False
    except RuntimeError:
        return True
    finally:
        torch.cuda.set_sync_debug_mode("default")


if device == "cuda":
    a = torch.randn(1000, 1000, device="cuda")
    checks = {"a + 1": lambda: a + 1,
              "a.sum()": lambda: a.sum(),
              "a.sum().item()": lambda: a.sum().item(),
              "a.cpu()": lambda: a.cpu(),
              "str(a)": lambda: str(a)}          # what print(a) calls
    found = {name: synchronizes(fn) for name, fn in checks.items()}
    for name, waits in found.items():
        print(f"{name:<16} {'waits for the GPU' if waits else 'only queues work'}")
    assert found == {"a + 1": False, "a.sum()": False, "a.sum().item()": True,
                     "a.cpu()": True, "str(a)": True}
else:
    print("sync points under torch.cuda.set_sync_debug_mode: not run here, "
          "no CUDA device")
# --8<-- [end:sync-points]


# --8<-- [start:timing]
def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


if device == "cuda":
    m = torch.randn(4096, 4096, device="cuda")
    m @ m
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        m @ m
    queued = time.perf_counter() - t0            # wrong: the GPU is still busy
    torch.cuda.synchronize()
    finished = time.perf_counter() - t0          # right: includes the kernels
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        m @ m
    end.record()
    end.synchronize()
    print(f"20 matmuls 4096²: {ms(queued)} to queue, {ms(finished)} to finish, "
          f"{start.elapsed_time(end):.2f} ms between CUDA events")
    assert start.elapsed_time(end) > 0
else:
    print("queue time vs finish time on a GPU: not run here, no CUDA device")
# --8<-- [end:timing]


# --8<-- [start:streams]
if device == "cuda":
    a = torch.randn(2048, 2048, device="cuda")
    expected = a @ a                               # on the default stream
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # a is ready before side uses it
    with torch.cuda.stream(side):
        result = a @ a                             # queued on the side stream
    a.record_stream(side)                          # keep a's memory until side is done
    done = torch.cuda.Event()
    done.record(side)
    torch.cuda.current_stream().wait_event(done)   # default stream waits for side
    assert torch.allclose(result, expected, rtol=1e-4, atol=1e-3)  # cuBLAS may pick another algorithm
    print("side stream result, after wait_event: equal to the default stream's")
else:
    print("streams and events: not run here, no CUDA device")
# --8<-- [end:streams]


# --8<-- [start:overlap]
def wall(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


if device == "cuda":
    host_batch = torch.randn(64 * 2**20 // 4).pin_memory()     # 64 MiB, page-locked
    m = torch.randn(4096, 4096, device="cuda")
    copy_stream = torch.cuda.Stream()

    def copy():
        with torch.cuda.stream(copy_stream):
            return host_batch.to("cuda", non_blocking=True)

    def compute():
        for _ in range(10):
            m @ m

    def both():
        compute()                    # queued on the default stream ...
        return copy()                # ... while the copy engine moves the batch

    copy(), compute()                # warm-up
    t_copy, t_compute, t_both = wall(copy), wall(compute), wall(both)
    print(f"copy {ms(t_copy)}, compute {ms(t_compute)}, both {ms(t_both)} "
          f"(sum {ms(t_copy + t_compute)})")
    on_gpu = both()
    torch.cuda.current_stream().wait_stream(copy_stream)  # before using the batch
    assert torch.equal(on_gpu.cpu(), host_batch)
else:
    print("copy/compute overlap with pinned memory: not run here, no CUDA device")
# --8<-- [end:overlap]
