"""PyTorch tensors as the hub: each conversion that runs here, measured."""

import importlib.util

# --8<-- [start:check]
import numpy as np
import torch

measured = []  # (conversion, device, outcome): printed as a table at the end
not_run = []  # the rows that could not run here, and why


def check(conversion, before, after, zero_copy, device="cpu"):
    """Record whether a conversion kept the data pointer; fail if unexpected."""
    shared = before == after
    expected = "zero-copy" if zero_copy else "a copy"
    assert shared == zero_copy, f"{conversion}: expected {expected}"
    measured.append((conversion, device, "zero-copy" if shared else "copy"))
# --8<-- [end:check]


# --8<-- [start:numpy]
t = torch.arange(4.0)
a = np.arange(4.0)
p, q = t.data_ptr(), a.ctypes.data
check("t.numpy()", p, t.numpy().ctypes.data, zero_copy=True)
check("np.asarray(t)", p, np.asarray(t).ctypes.data, zero_copy=True)
check("np.from_dlpack(t)", p, np.from_dlpack(t).ctypes.data, zero_copy=True)
check("torch.from_numpy(a)", q, torch.from_numpy(a).data_ptr(), zero_copy=True)
check("torch.as_tensor(a)", q, torch.as_tensor(a).data_ptr(), zero_copy=True)
check("torch.from_dlpack(a)", q, torch.from_dlpack(a).data_ptr(),
      zero_copy=True)
check("torch.tensor(a)", q, torch.tensor(a).data_ptr(), zero_copy=False)
check("torch.as_tensor(a, dtype=float32)", q,  # a new dtype forces a copy
      torch.as_tensor(a, dtype=torch.float32).data_ptr(), zero_copy=False)
# --8<-- [end:numpy]

# --8<-- [start:numba_cpu]
from numba import njit  # noqa: E402


@njit
def scale_in_place(values, factor):
    for i in range(values.shape[0]):
        values[i] *= factor


w = torch.ones(3)
scale_in_place(w.numpy(), 5.0)  # compiled code writes through a NumPy view
assert w.tolist() == [5.0, 5.0, 5.0]
measured.append(("numba @njit on t.numpy()", "cpu", "zero-copy"))
# --8<-- [end:numba_cpu]

# --8<-- [start:gpu]
if torch.cuda.is_available():
    from numba import cuda

    g = torch.arange(4.0, device="cuda")
    check("g.cpu() (g on the GPU)", g.data_ptr(), g.cpu().data_ptr(),
          zero_copy=False, device="cuda->cpu")
    check("torch.from_dlpack(a, device='cuda')", q,
          torch.from_dlpack(a, device="cuda").data_ptr(),
          zero_copy=False, device="cpu->cuda")
    d = cuda.as_cuda_array(g)  # Numba reads g.__cuda_array_interface__
    check("numba.cuda.as_cuda_array(g)", g.data_ptr(),
          d.__cuda_array_interface__["data"][0], zero_copy=True,
          device="cuda")
    check("torch.as_tensor(numba_array, device='cuda')", g.data_ptr(),
          torch.as_tensor(d, device="cuda").data_ptr(), zero_copy=True,
          device="cuda")
else:
    not_run.append("no CUDA device: the GPU rows (Numba CUDA arrays, CuPy)")
if importlib.util.find_spec("jax") is None:
    not_run.append("JAX is not installed in this project: torch <-> JAX")
# --8<-- [end:gpu]

width = max(len(row[0]) for row in measured)
for conversion, device, outcome in measured:
    print(f"{conversion:<{width}}  {device:<9} {outcome}")
for reason in not_run:
    print("Not run here:", reason)
