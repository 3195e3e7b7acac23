"""The NumPy array interface, the CUDA Array Interface, a hand-made producer."""

import os
import subprocess
import sys

# --8<-- [start:numpy]
import numpy as np
import torch

a = np.arange(6, dtype=np.float32).reshape(2, 3)
ai = a.__array_interface__
print("a.__array_interface__ =", ai)
assert ai["shape"] == (2, 3) and ai["typestr"] == "<f4"
assert ai["data"] == (a.ctypes.data, False)  # (address, read-only?)
assert ai["strides"] is None and ai["version"] == 3  # None: plain C order

at = a.T.__array_interface__  # a view: same address, other strides
print("a.T strides in bytes:", at["strides"])
assert at["data"][0] == ai["data"][0] and at["strides"] == (4, 12)
# --8<-- [end:numpy]

# --8<-- [start:torch]
device = "cuda" if torch.cuda.is_available() else "cpu"
t = torch.from_numpy(a).to(device)  # on the CPU: no copy, a's own memory

if device == "cuda":
    cai = t.__cuda_array_interface__
    print("CUDA tensor's __cuda_array_interface__ =", cai)
    assert cai["version"] == 2 and "stream" not in cai  # v2, no stream
    assert cai["data"] == (t.data_ptr(), False) and cai["strides"] is None
else:
    # The property raises AttributeError on a CPU tensor: hasattr is False.
    assert not hasattr(t, "__cuda_array_interface__")
    view = t.numpy().__array_interface__
    print("no CUDA here; the same data via __array_interface__ =", view)
    assert view["data"][0] == t.data_ptr() == a.ctypes.data
# --8<-- [end:torch]


# --8<-- [start:producer]
class CudaArrayView:
    """The smallest CAI v3 producer: pointer, shape, type, and the owner.

    The interface has no slot for the owner of the memory, so the producer
    keeps a reference to it: the memory must outlive every consumer.
    """

    def __init__(self, owner, pointer, shape, typestr):
        self._owner = owner
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (pointer, False),
            "version": 3,
            "strides": None,  # C-contiguous
            "stream": None,  # no pending work: consumers need not sync
        }


if device == "cuda":
    view = CudaArrayView(t, t.data_ptr(), tuple(t.shape), "<f4")
else:  # a host pointer: enough for an attribute check, not for a consumer
    view = CudaArrayView(a, a.ctypes.data, a.shape, a.dtype.str)
# --8<-- [end:producer]

# --8<-- [start:numba]
from numba import cuda  # noqa: E402
from numba.cuda.cudadrv.error import CudaSupportError  # noqa: E402

print("numba.cuda.is_cuda_array(view):", cuda.is_cuda_array(view))
# is_cuda_array only checks that the attribute exists
assert cuda.is_cuda_array(view) and not cuda.is_cuda_array(a)


def first_line(error):
    lines = [s for s in str(error).splitlines() if s.strip()]
    return next((s for s in lines if "driver init" not in s), lines[0])


if device == "cuda":
    d = cuda.as_cuda_array(view)  # a Numba device array, same memory
    back = torch.as_tensor(view, device="cuda")  # torch as a consumer
    pointer = d.__cuda_array_interface__["data"][0]
    assert pointer == back.data_ptr() == t.data_ptr()
    print("numba and torch both wrapped the tensor's memory, no copy")
else:
    try:
        cuda.as_cuda_array(view)  # needs a CUDA driver and a context
    except CudaSupportError as e:
        print("numba.cuda.as_cuda_array(view): CudaSupportError:",
              first_line(e))
    else:
        raise AssertionError("as_cuda_array worked without a GPU")
    try:
        torch.as_tensor(view)  # torch sees the attribute, tries CUDA
    except RuntimeError as e:
        print("torch.as_tensor(view): RuntimeError:", str(e).split(".")[0])
    else:
        raise AssertionError("torch built a CUDA tensor without a GPU")
# --8<-- [end:numba]

# --8<-- [start:simulator]
# The simulator is chosen when numba.cuda is first imported: use a child.
PROBE = """
import numpy as np
from numba import cuda
device_array = cuda.to_device(np.zeros(3))
print(hasattr(cuda, "is_cuda_array"),
      hasattr(device_array, "__cuda_array_interface__"))
"""
probe = subprocess.run([sys.executable, "-c", PROBE], check=True,
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1"))
has_check, has_cai = probe.stdout.split()
print("under NUMBA_ENABLE_CUDASIM=1: cuda.is_cuda_array exists:", has_check)
print("  simulated device arrays have __cuda_array_interface__:", has_cai)
assert (has_check, has_cai) == ("False", "False")
# --8<-- [end:simulator]
