"""Is PyTorch using the GPU? Each check, run device-agnostically."""

import contextlib
import io
import json
import shutil
import subprocess

import gpu_doctor

# --8<-- [start:build]
import torch

print("torch:", torch.__version__, "| torch.version.cuda:", torch.version.cuda,
      "| cuDNN:", torch.backends.cudnn.version())
available, count = torch.cuda.is_available(), torch.cuda.device_count()
print("torch.cuda.is_available():", available, "| torch.cuda.device_count():", count)
if count > 0 and not available:
    # device_count() asks NVML, which needs only a driver; is_available() asks the
    # CUDA runtime, which refuses a driver older than the wheel's CUDA
    print("GPUs are visible, but the CUDA runtime cannot use them: see the doctor below")
if torch.version.cuda is None and torch.version.hip is None:  # no CUDA, no ROCm
    assert not available and count == 0
# The local version suffix names the wheel, not the hardware: "+cpu" and "+cu130"
# on Linux and Windows, nothing at all on macOS, where MPS is the GPU.
suffix = torch.__version__.partition("+")[2] or "(none)"
print("version suffix:", suffix,
      "| torch.backends.mps.is_available():", torch.backends.mps.is_available())
# --8<-- [end:build]

# --8<-- [start:accelerator]
accelerator = torch.accelerator.current_accelerator(check_available=True)
print("torch.accelerator.is_available():", torch.accelerator.is_available())
print("current_accelerator(check_available=True):", accelerator)
assert (accelerator is None) != torch.accelerator.is_available()
# A GPU can be available and still run no kernel: a wheel built without code for its
# architecture fails with "no kernel image is available". One small matmul tells.
check = gpu_doctor.matmul_check(str(accelerator)) if accelerator else None
if check and not check["ok"]:
    print("a matmul on it failed:", check.get("error", "wrong result"))
device = accelerator if check and check["ok"] else torch.device("cpu")
print("device:", device)
# --8<-- [end:accelerator]


# --8<-- [start:queries]
def outcome(query) -> str:
    """What a torch.cuda query returns here, or the exception it raises."""
    try:
        return repr(query())
    except (AssertionError, RuntimeError) as error:
        return f"raises {type(error).__name__}: {error}"


QUERIES = {
    "current_device()": torch.cuda.current_device,
    "get_device_name(0)": lambda: torch.cuda.get_device_name(0),
    "get_device_capability(0)": lambda: torch.cuda.get_device_capability(0),
    "mem_get_info()": torch.cuda.mem_get_info,
    "synchronize()": torch.cuda.synchronize,
    "memory_allocated()": torch.cuda.memory_allocated,
    "max_memory_allocated()": torch.cuda.max_memory_allocated,
}
outcomes = {name: outcome(query) for name, query in QUERIES.items()}
print("torch.cuda queries:")
for name, result in outcomes.items():
    print(f"  {name:<24} {result}")
raised = [name for name, said in outcomes.items() if said.startswith("raises")]
if torch.cuda.is_available():
    assert raised == []
else:
    assert "current_device()" in raised and "memory_allocated()" not in raised
if torch.version.cuda is None and torch.version.hip is None:
    assert raised == list(QUERIES)[:5], "read in torch 2.11 and 2.13 without CUDA"
# --8<-- [end:queries]

# --8<-- [start:where]
x = torch.ones(3, device=device)
model = torch.nn.Linear(3, 2).to(device)
print("x.device:", x.device, "| x.is_cuda:", x.is_cuda,
      "| next(model.parameters()).device:", next(model.parameters()).device)
assert x.device.type == next(model.parameters()).device.type == device.type
assert x.is_cuda == (device.type == "cuda")
if device.type == "cuda":
    print("torch.cuda.memory_allocated():", torch.cuda.memory_allocated())
    assert torch.cuda.memory_allocated() > 0
# --8<-- [end:where]


# --8<-- [start:mismatch]
def add_cuda_to_cpu() -> str:
    """The error raised by one operation on a CUDA tensor and a CPU tensor."""
    try:
        torch.ones(3, device="cuda") + torch.ones(3)
    except RuntimeError as error:
        return str(error)
    raise AssertionError("mixing devices must fail")


if device.type == "cuda":
    message = add_cuda_to_cpu()
else:  # fake tensors have a device and a shape but no data: no GPU needed
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        message = add_cuda_to_cpu()
print(message)
# A real GPU, and fake tensors from torch 2.13 on, say "Expected all tensors to be on
# the same device"; the fake tensors of torch 2.11 and 2.12 word it differently.
assert "cuda:0" in message and "cpu" in message
if device.type == "cuda":
    assert message.startswith("Expected all tensors to be on the same device")
# --8<-- [end:mismatch]

# --8<-- [start:profiler]
from torch.profiler import ProfilerActivity, profile

activities = [ProfilerActivity.CPU]
if device.type == "cuda":
    activities.append(ProfilerActivity.CUDA)
a = torch.randn(256, 256, device=device)
with profile(activities=activities) as prof:
    (a @ a).sum().item()
ops = {event.key: event for event in prof.key_averages()}
gpu_us = sum(event.self_device_time_total for event in ops.values())
print("profiled aten::mm:", "aten::mm" in ops, f"| GPU time: {gpu_us:.0f} µs")
assert "aten::mm" in ops
assert (gpu_us > 0) == (device.type == "cuda")
# --8<-- [end:profiler]

# --8<-- [start:nvidia-smi]
smi = shutil.which("nvidia-smi")
if smi is None:
    print("nvidia-smi: not on PATH on this machine")
else:
    listing = subprocess.run([smi, "-L"], capture_output=True, text=True)
    print(listing.stdout.strip())
# --8<-- [end:nvidia-smi]

# --8<-- [start:doctor]
with contextlib.redirect_stdout(io.StringIO()) as captured:
    exit_code = gpu_doctor.main(["--json"])
report = json.loads(captured.getvalue())
# the doctor counts a GPU as used once a matmul on it is right, as `device` above does
assert exit_code == 0 and report["gpu_used"] == (device.type != "cpu")
assert report["torch"] == torch.__version__
assert report["device_count"] == torch.cuda.device_count()
print("gpu_doctor.py --json:")
print(captured.getvalue().rstrip())
# --8<-- [end:doctor]
