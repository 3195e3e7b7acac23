"""CuPy: NumPy's API on the GPU, and zero-copy exchange with PyTorch."""

# --8<-- [start:guard]
import importlib.util

import torch


def load_cupy():
    """Return (cupy, "") when it can run here, or (None, why it cannot)."""
    if importlib.util.find_spec("cupy") is None:
        return None, ("CuPy is not installed "
                      "(on a CUDA 12 machine: pip install cupy-cuda12x)")
    if not torch.cuda.is_available():
        return None, ("CuPy is installed but there is no CUDA device: "
                      "it imports, but cannot allocate an array")
    import cupy

    return cupy, ""
# --8<-- [end:guard]


# --8<-- [start:numpy_api]
def numpy_api_on_gpu(cp):
    x = cp.linspace(0, 2 * cp.pi, 8, dtype=cp.float32)  # in GPU memory
    ones = cp.sin(x) ** 2 + cp.cos(x) ** 2  # NumPy's spelling, GPU kernels
    host = cp.asnumpy(ones)  # an explicit copy back to host memory
    print("CuPy array on", x.device, "| sin^2 + cos^2 =", host)
    assert cp.allclose(ones, 1.0) and type(host).__module__ == "numpy"
# --8<-- [end:numpy_api]


# --8<-- [start:dlpack]
def via_dlpack(cp):
    t = torch.arange(6, dtype=torch.float32, device="cuda")
    c = cp.from_dlpack(t)  # PyTorch produces, CuPy consumes
    assert c.data.ptr == t.data_ptr()
    c[0] = 42.0  # a CuPy write lands in the tensor's memory
    back = torch.from_dlpack(c)  # and back again: still the same buffer
    print("DLPack: torch sees", t[:3].tolist(),
          "| same pointer:", back.data_ptr() == t.data_ptr())
    assert t[0].item() == 42.0 and back.data_ptr() == t.data_ptr()
# --8<-- [end:dlpack]


# --8<-- [start:cai]
def via_cuda_array_interface(cp):
    t = torch.ones(4, device="cuda")
    c = cp.asarray(t)  # reads t.__cuda_array_interface__ (v2, no stream)
    assert c.data.ptr == t.data_ptr()

    x = cp.arange(4, dtype=cp.float32)
    cai = x.__cuda_array_interface__
    print("CuPy exports CAI version", cai["version"],
          "with stream", cai["stream"])
    assert cai["version"] == 3 and cai["stream"] not in (None, 0)
    y = torch.as_tensor(x, device="cuda")  # wraps CuPy's memory, ignores "stream"
    y += 1
    assert y.data_ptr() == x.data.ptr
    assert cp.array_equal(x, cp.arange(1, 5, dtype=cp.float32))
    print("CAI: torch wrote", cp.asnumpy(x), "into CuPy's array")
# --8<-- [end:cai]


cp, reason = load_cupy()
if cp is None:
    print("CuPy examples skipped, nothing ran:", reason)
else:
    numpy_api_on_gpu(cp)
    via_dlpack(cp)
    via_cuda_array_interface(cp)
