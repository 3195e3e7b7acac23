"""Tensors on any device: create, inspect dtype and shape, move, and share memory with NumPy."""

# --8<-- [start:device]
import numpy as np
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
print("device:", device)
# --8<-- [end:device]

# --8<-- [start:create]
x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
print(x)
print("dtype:", x.dtype, "| shape:", tuple(x.shape), "| device:", x.device)
assert x.dtype == torch.float32 and x.shape == (2, 3) and x.device.type == "cpu"

zeros = torch.zeros(2, 3, device=device)  # allocated directly on the device
like = torch.full_like(zeros, 7.0)  # same shape, dtype and device as zeros
noise = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))  # a private, seeded RNG
again = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))
print("zeros on", zeros.device, "| full_like:", like[0].tolist(),
      "| same seed, same numbers:", torch.equal(noise, again))
assert zeros.device.type == device and like.device == zeros.device and (like == 7).all()
assert torch.equal(noise, again)
# --8<-- [end:create]

# --8<-- [start:dtype]
print("from ints:", torch.tensor([1, 2]).dtype, "| from floats:", torch.tensor([1.0]).dtype,
      "| from bools:", torch.tensor([True]).dtype)
assert torch.tensor([1, 2]).dtype == torch.int64 and torch.tensor([1.0]).dtype == torch.float32

mixed = torch.tensor([1, 2]) + torch.tensor([0.5, 0.5])  # int64 + float32 promotes
half = x.to(torch.float16)  # a converted copy; x keeps its dtype
print("int64 + float32 ->", mixed.dtype, "| float16 element:", half.element_size(), "bytes")
assert mixed.dtype == torch.float32 and half.element_size() == 2 and x.dtype == torch.float32
# --8<-- [end:dtype]

# --8<-- [start:shape]
m = torch.arange(6.0)
grid = m.view(2, 3)  # a view: same memory, new shape
grid[0, 0] = 100.0
print("view wrote through:", m[0].item(), "| ndim:", grid.ndim, "| numel:", grid.numel())
assert m[0].item() == 100.0 and grid.data_ptr() == m.data_ptr()

cols = grid.t()  # the transpose swaps strides; its memory is no longer row-major
print("strides:", grid.stride(), "->", cols.stride(), "| contiguous:", cols.is_contiguous())
assert cols.stride() == (1, 3) and not cols.is_contiguous()
try:
    cols.view(6)
except RuntimeError:
    print("view() of the transpose: RuntimeError; reshape() copies instead")
    assert cols.reshape(6).data_ptr() != m.data_ptr()
else:
    raise AssertionError("view of a non-contiguous tensor should fail")
# --8<-- [end:shape]

# --8<-- [start:move]
y = x.to(device)  # a copy on the GPU, or x itself when device is "cpu"
z = (y * 2).sum()
print("sum on", z.device, "=", z.item())
assert z.device.type == device and z.item() == 30.0
assert (y is x) == (device == "cpu")

back = y.cpu()  # always a CPU tensor; a copy only when y lives elsewhere
assert back.device.type == "cpu" and torch.equal(back, x)
# --8<-- [end:move]

# --8<-- [start:mixed]
if device == "cuda":
    try:
        x + y  # one operand in host RAM, the other in GPU memory
    except RuntimeError:
        print("cpu + cuda: RuntimeError (operands must share a device)")
    else:
        raise AssertionError("adding a CPU and a CUDA tensor should fail")
else:
    print("cpu + cuda: not checked, no CUDA device here")
# --8<-- [end:mixed]

# --8<-- [start:numpy]
a = np.zeros(3, dtype=np.float32)
t = torch.from_numpy(a)  # no copy: t is a view of a's buffer
a[0] = 7.0
t[1] = 8.0
print("numpy:", a, "| torch:", t)
assert t[0].item() == 7.0 and a[1] == 8.0
assert t.data_ptr() == a.ctypes.data
# --8<-- [end:numpy]

# --8<-- [start:to-numpy]
w = torch.ones(3)
n = w.numpy()  # no copy either: n is a view of w's storage
w.add_(1)  # in-place on the tensor side
n[2] = -1.0  # in-place on the NumPy side
print("tensor:", w, "| numpy:", n)
assert n.tolist() == [2.0, 2.0, -1.0] and w[2].item() == -1.0
assert n.ctypes.data == w.data_ptr()
# --8<-- [end:to-numpy]

# --8<-- [start:copies]
c = torch.tensor(a)  # torch.tensor always copies
a[2] = 9.0
print("torch.tensor copy after a[2] = 9:", c.tolist(), "| from_numpy keeps float64:",
      torch.from_numpy(np.zeros(1)).dtype)
assert c[2].item() == 0.0 and torch.from_numpy(np.zeros(1)).dtype == torch.float64

leaf = torch.ones(2, requires_grad=True)
try:
    leaf.numpy()
except RuntimeError:
    print("numpy() of a tensor that requires grad: RuntimeError; use .detach().numpy()")
    assert leaf.detach().numpy().ctypes.data == leaf.data_ptr()
else:
    raise AssertionError("numpy() should refuse a tensor that requires grad")

if device == "cuda":
    try:
        y.numpy()
    except TypeError:
        print("numpy() of a CUDA tensor: TypeError; copy it to the host with .cpu() first")
    else:
        raise AssertionError("numpy() should refuse a CUDA tensor")
else:
    print("numpy() of a CUDA tensor: not checked, no CUDA device here")
# --8<-- [end:copies]
