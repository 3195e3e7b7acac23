"""Tensors on any device: create, inspect, move, and share memory with NumPy."""

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
# --8<-- [end:create]

# --8<-- [start:move]
y = x.to(device)  # a copy on the GPU, or x itself when device is "cpu"
z = (y * 2).sum()
print("sum on", z.device, "=", z.item())
assert z.device.type == device and z.item() == 30.0
assert (y is x) == (device == "cpu")
# --8<-- [end:move]

# --8<-- [start:numpy]
a = np.zeros(3, dtype=np.float32)
t = torch.from_numpy(a)  # no copy: t is a view of a's buffer
a[0] = 7.0
t[1] = 8.0
print("numpy:", a, "| torch:", t)
assert t[0].item() == 7.0 and a[1] == 8.0
assert t.data_ptr() == a.ctypes.data
# --8<-- [end:numpy]
