"""DLPack between NumPy and PyTorch on the CPU: zero-copy, and a sharp edge."""

import signal
import subprocess
import sys

# --8<-- [start:protocol]
import numpy as np
import torch


def capsule_name(capsule) -> str:
    return repr(capsule).split('"')[1]  # <capsule object "dltensor" at 0x..>


a = np.arange(6, dtype=np.float32)
print("a.__dlpack_device__():", a.__dlpack_device__())
print("torch.zeros(1).__dlpack_device__():", torch.zeros(1).__dlpack_device__())
assert a.__dlpack_device__() == (1, 0)  # (kDLCPU, device 0)
old, new = a.__dlpack__(), a.__dlpack__(max_version=(1, 0))
print("capsules:", capsule_name(old), "and", capsule_name(new))
assert capsule_name(new) == "dltensor_versioned"  # DLPack 1.0 or later
# --8<-- [end:protocol]

# --8<-- [start:numpy_to_torch]
t = torch.from_dlpack(a)  # NumPy produces, PyTorch consumes
assert t.data_ptr() == a.ctypes.data  # one buffer, two views
a[0] = 100.0  # write through NumPy ...
t[1] = 200.0  # ... and through PyTorch
print("numpy:", a, "| torch:", t)
assert t[0].item() == 100.0 and a[1] == 200.0
# --8<-- [end:numpy_to_torch]

# --8<-- [start:torch_to_numpy]
u = torch.linspace(0, 1, 5)
b = np.from_dlpack(u)  # PyTorch produces, NumPy consumes
assert b.ctypes.data == u.data_ptr()
u.mul_(10)  # an in-place op on the tensor shows up in the array
print("torch:", u, "| numpy:", b)
assert np.array_equal(b, [0.0, 2.5, 5.0, 7.5, 10.0])
# --8<-- [end:torch_to_numpy]

# --8<-- [start:strides_copy]
m = np.arange(6, dtype=np.float32).reshape(2, 3)
mt = torch.from_dlpack(m.T)  # a transposed view: the strides travel along
print("m.T strides (bytes):", m.T.strides,
      "-> tensor strides (elements):", mt.stride())
assert mt.stride() == (1, 3) and mt.data_ptr() == m.ctypes.data
c = torch.from_dlpack(m, copy=True)  # ask for a copy and get one
assert c.data_ptr() != m.ctypes.data and torch.equal(c, torch.from_numpy(m))
# --8<-- [end:strides_copy]

# --8<-- [start:negative_stride]
# torch 2.13 aborts the whole process on this, so it only runs in a child.
NEGATIVE_STRIDE = """
import numpy as np, torch
torch.from_dlpack(np.arange(6.0)[::-1])
"""


def how_the_child_ended(code: str) -> str:
    child = subprocess.run([sys.executable, "-c", code], capture_output=True,
                           text=True, timeout=120)
    lines = [" ".join(line.split()) for line in child.stderr.splitlines()]
    if child.returncode == -signal.SIGABRT:
        what = next((line for line in lines if "what()" in line), "")
        return f"the child process was killed by SIGABRT ({what})"
    last = next((line for line in reversed(lines) if line), "no error")
    return f"the child exited with status {child.returncode}: {last}"


outcome = how_the_child_ended(NEGATIVE_STRIDE)
print("torch.from_dlpack(np.arange(6.0)[::-1]):", outcome)
# later torch releases are expected to raise a RuntimeError instead
assert "SIGABRT" in outcome or "RuntimeError" in outcome
# --8<-- [end:negative_stride]

# --8<-- [start:from_numpy]
reversed_view = np.arange(6.0)[::-1]
print("reversed_view.strides:", reversed_view.strides)
try:
    torch.from_numpy(reversed_view)  # checks the strides, raises cleanly
except ValueError as e:
    print("torch.from_numpy: ValueError:", str(e).split(".")[0])
else:
    raise AssertionError("from_numpy accepted a negative stride")
# one copy into a contiguous array, then zero-copy again
fixed = torch.from_dlpack(np.ascontiguousarray(reversed_view))
assert fixed.tolist() == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]
# --8<-- [end:from_numpy]
