"""A Numba CUDA kernel: vector add on a GPU, or in the simulator on a CPU."""

import subprocess
import sys

# --8<-- [start:mode]
import os
import time

import torch

# Numba picks the real CUDA target or its simulator when numba.cuda is first
# imported, so decide before that import. Ask torch whether there is a GPU:
# under the simulator numba.cuda.is_available() says True even without one.
SIMULATED = (os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
             or not torch.cuda.is_available())
if SIMULATED:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

started = time.perf_counter()
from numba import cuda  # noqa: E402

print(f"import numba.cuda: {time.perf_counter() - started:.2f} s",
      f"| target: {cuda.implementation}",
      "| simulator on the CPU" if SIMULATED else "| real GPU")
device = "cpu" if SIMULATED else "cuda"
# --8<-- [end:mode]


# --8<-- [start:kernel]
@cuda.jit
def vector_add(x, y, out):
    i = cuda.grid(1)  # this thread's index in the whole grid
    if i < out.shape[0]:  # the last block may run past the end
        out[i] = x[i] + y[i]
# --8<-- [end:kernel]


# --8<-- [start:position]
@cuda.jit
def record_position(block_of, thread_of, index_of):
    # the index by hand: what cuda.grid(1) computes
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if i < index_of.shape[0]:
        block_of[i] = cuda.blockIdx.x
        thread_of[i] = cuda.threadIdx.x
        index_of[i] = cuda.grid(1)
# --8<-- [end:position]


# --8<-- [start:launch]
def launch(kernel, n, threads_per_block, *tensors):
    """Run kernel over n elements; return the number of blocks."""
    blocks = (n + threads_per_block - 1) // threads_per_block  # round up
    # A CUDA tensor goes in as it is: Numba reads its CUDA Array Interface.
    # The simulator gets a NumPy view of the CPU tensor. Neither copies.
    args = (t if t.is_cuda else t.numpy() for t in tensors)
    kernel[blocks, threads_per_block](*args)
    return blocks


def rerun_simulated(error):
    """The GPU is there, but numba cannot build or load code for it: say why, and
    run this same script under the simulator, whose exit status becomes ours."""
    lines = [line for line in str(error).splitlines() if line.strip()] or [""]
    print(f"numba cannot run kernels on this GPU: {type(error).__name__}: {lines[0]}")
    print("running the same script under the simulator instead", flush=True)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    sys.exit(subprocess.run([sys.executable, __file__], env=env).returncode)


n = 1000
x = torch.arange(n, dtype=torch.float32, device=device)
y = 2 * x
out = torch.zeros_like(x)
try:  # the first launch compiles (NVVM + libdevice), loads (driver) and launches
    blocks = launch(vector_add, n, 128, x, y, out)
except AssertionError:
    raise  # a failed check is never a reason to fall back
except Exception as error:  # no driver, NVVM or libdevice; PTX newer than the driver
    # Their exception types differ between numba and numba-cuda releases, so this
    # one call catches them all. A bug in the script fails again in the rerun.
    if SIMULATED:
        raise
    rerun_simulated(error)
# Numba launched on the default stream, which torch uses too: this waits.
assert torch.equal(out, 3 * x) and blocks == 8
print(f"vector_add: {n} elements, {blocks} blocks x 128 threads",
      f"= {blocks * 128} threads")
print(f"out[:4] = {out[:4].tolist()}, out[-1] = {out[-1].item()}")
# --8<-- [end:launch]

# --8<-- [start:grid]
n, threads_per_block = 10, 4
block_of, thread_of, index_of = (
    torch.full((n,), -1, dtype=torch.int32, device=device) for _ in range(3))
blocks = launch(record_position, n, threads_per_block,
                block_of, thread_of, index_of)
print(f"{blocks} blocks x {threads_per_block} threads for {n} elements:")
rows = {"element": range(n), "blockIdx.x": block_of,
        "threadIdx.x": thread_of, "cuda.grid(1)": index_of}
for name, row in rows.items():
    print(f"  {name:>12}: " + " ".join(f"{int(v):2d}" for v in row))
expected = torch.arange(n, dtype=torch.int32, device=device)
assert torch.equal(index_of, expected)
assert torch.equal(block_of * threads_per_block + thread_of, expected)
# --8<-- [end:grid]
print("numba import + compiling and running both kernels:",
      f"{time.perf_counter() - started:.2f} s")
