"""Two Triton kernels, a vector add and a fused row softmax, each checked against torch.

On a CUDA GPU Triton compiles them to machine code for the GPU. Without one, the
script sets TRITON_INTERPRET=1 before triton is imported, and Triton's interpreter
runs them on the CPU with NumPy: the results are checked the same way, but nothing
here is a GPU, and the interpreter's times say nothing about one. Where triton is
not installed (PyPI has triton wheels for Linux only), or where a GPU machine lacks the
C compiler or the Python headers that Triton builds its launcher with, the script says
why and exits with status 0.

The file is called triton_kernels.py, not triton.py: Python puts the folder of the
script it runs first on sys.path, so `python snippets/compile/triton.py` would find
that very file when it says `import triton`, instead of the triton package.
"""

# --8<-- [start:mode]
import os
import platform
import sys
import time

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cpu":
    # Read when a kernel is decorated, so it must be set before that: here, before
    # triton is even imported. Only without a GPU: with one, the kernels compile.
    os.environ["TRITON_INTERPRET"] = "1"

try:
    import triton
    import triton.language as tl
except ImportError as error:
    print(f"triton cannot be imported here ({error}); nothing below ran.")
    print(f"This is {platform.system()} on {platform.machine()}. PyPI has triton wheels "
          "for Linux only (triton 3.9.0: x86-64 and aarch64), none for macOS or Windows; "
          "on Linux, pip install triton adds it.")
    sys.exit(0)
# --8<-- [end:mode]


# --8<-- [start:launcher]
import subprocess
import sysconfig


def launcher_problem(error: Exception) -> str | None:
    """What keeps Triton from building its launcher here, or None for other errors."""
    if isinstance(error, RuntimeError) and "Failed to find C compiler" in str(error):
        return "no C compiler (Triton tries $CC, then gcc, then clang): install gcc"
    if isinstance(error, subprocess.CalledProcessError):
        scheme = sysconfig.get_default_scheme()   # the include folder Triton passes
        scheme = "posix_prefix" if scheme == "posix_local" else scheme
        include = sysconfig.get_paths(scheme=scheme)["include"]
        if not os.path.isfile(os.path.join(include, "Python.h")):
            return (f"no Python headers (Python.h is not in {include}): install them, "
                    "python3-dev on Debian and Ubuntu")
        return f"the C compiler exited with status {error.returncode}; its message is above"
    return None


if device == "cuda":
    # Triton's driver compiles a small C module the first time it is used, at the
    # first launch: triton/backends/nvidia/driver.c, which includes Python.h. Start
    # the driver here, so that a missing compiler or header stops the script now.
    try:
        triton.runtime.driver.active.get_current_target()
    except (RuntimeError, subprocess.CalledProcessError) as error:
        why = launcher_problem(error)
        if why is None:
            raise
        print(f"Triton could not build its launcher here: {why}. Nothing below ran.")
        print("On a GPU, Triton compiles C code before its first launch, so it needs a C "
              "compiler and Python's headers as well as triton itself.")
        sys.exit(0)
# --8<-- [end:launcher]


# --8<-- [start:add]
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)                  # which program instance this is
    offsets = pid * BLOCK + tl.arange(0, BLOCK)  # the BLOCK elements it owns
    mask = offsets < n                           # the last block runs past the end
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor, block: int = 1024):
    """x + y by add_kernel; returns the sum, the grid, and what the launch returned."""
    assert x.shape == y.shape and x.is_contiguous() and y.is_contiguous()
    out = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), block),)      # one program per block, rounded up
    launched = add_kernel[grid](x, y, out, x.numel(), BLOCK=block)
    return out, grid, launched
# --8<-- [end:add]


# --8<-- [start:where]
INTERPRETED = type(add_kernel).__name__ == "InterpretedFunction"
if INTERPRETED:
    print(f"triton {triton.__version__}, TRITON_INTERPRET=1: Triton's interpreter runs "
          "the kernels on the CPU with NumPy.")
    print("  This is not a GPU, nothing is compiled, and the interpreter's times below "
          "say nothing about a GPU's speed.")
else:
    print(f"triton {triton.__version__}: kernels compiled for {torch.cuda.get_device_name()}")


def timed(fn):
    """fn's result and its wall time in ms; on a GPU, after the queue has drained."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return result, (time.perf_counter() - start) * 1e3


def first_call(ms: float) -> str:
    return (f"{ms:.1f} ms in the interpreter (not a GPU time)" if INTERPRETED
            else f"{ms:.1f} ms for the first call, compilation included")
# --8<-- [end:where]


# --8<-- [start:add-check]
torch.manual_seed(0)
n = 10_000                                       # not a multiple of the block size
x = torch.randn(n, device=device)
y = torch.randn(n, device=device)
(out, grid, launched), ms = timed(lambda: add(x, y))
assert torch.equal(out, x + y)                   # one rounding per element, both ways
assert grid == (10,)                             # 10 blocks of 1024 cover 10,000
print(f"vector add: {n:,} elements, grid {grid}, BLOCK=1024; the last program masks "
      f"off {grid[0] * 1024 - n} of its 1024 positions")
print(f"  equal to x + y: {torch.equal(out, x + y)}; {first_call(ms)}")
# --8<-- [end:add-check]


# --8<-- [start:programs]
@triton.jit
def whose_element(pid_out, pos_out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    positions = tl.arange(0, BLOCK)              # 0 .. BLOCK-1 inside the block
    offsets = pid * BLOCK + positions
    mask = offsets < n
    tl.store(pid_out + offsets, pid + positions * 0, mask=mask)  # pid, as a block
    tl.store(pos_out + offsets, positions, mask=mask)


n_small, block_small = 10, 4
pids = torch.full((n_small,), -1, dtype=torch.int32, device=device)
positions = torch.full((n_small,), -1, dtype=torch.int32, device=device)
whose_element[(triton.cdiv(n_small, block_small),)](pids, positions, n_small,
                                                    BLOCK=block_small)
print(f"{triton.cdiv(n_small, block_small)} programs x BLOCK={block_small} "
      f"for {n_small} elements:")
for name, row in {"element": range(n_small), "program_id": pids, "position": positions}.items():
    print(f"  {name:>10}: " + " ".join(f"{int(v):2d}" for v in row))
expected = torch.arange(n_small, dtype=torch.int32, device=device)
assert torch.equal(pids * block_small + positions, expected)
# --8<-- [end:programs]


# --8<-- [start:softmax]
@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols,
                   BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)                  # one program per row
    cols = tl.arange(0, BLOCK)                   # BLOCK >= n_cols, a power of two
    mask = cols < n_cols
    # Masked-off positions read -inf: they change neither the max nor the sum.
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)                    # for exp: no overflow
    numerator = tl.exp(x)
    denominator = tl.sum(numerator, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, numerator / denominator, mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """softmax(x, dim=1) of a 2-D tensor whose rows each have unit column stride."""
    rows, cols = x.shape
    assert x.stride(1) == 1
    out = torch.empty(rows, cols, dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(cols)         # a whole row in one block
    softmax_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=block,
                            num_warps=4)         # a GPU setting; the interpreter ignores it
    return out
# --8<-- [end:softmax]


# --8<-- [start:softmax-check]
wide = 4 * torch.randn(48, 1048, device=device)
logits = wide[:, :1000]                          # a view: its rows lie 1048 apart
probs, ms = timed(lambda: softmax(logits))
reference = torch.softmax(logits, dim=1)
difference = (probs - reference).abs().max().item()
assert logits.stride(0) == 1048 and probs.shape == (48, 1000)
assert torch.allclose(probs, reference, rtol=1e-5, atol=1e-6)
assert torch.allclose(probs.sum(dim=1), torch.ones(48, device=device))
print(f"fused softmax: 48 rows x 1000 columns (BLOCK=1024, row stride 1048), "
      f"one program per row")
print(f"  allclose to torch.softmax: True, largest difference {difference:.1e}; "
      f"{first_call(ms)}")
# --8<-- [end:softmax-check]


# --8<-- [start:compiled]
if INTERPRETED:
    print("compiled code (PTX, cubin, num_warps): not run: no CUDA device, "
          "the interpreter compiles nothing")
else:
    stages = list(launched.asm.keys())           # the compiler's stages, kept as text
    print(f"add_kernel compiled through {' -> '.join(stages)}; "
          f"num_warps={launched.metadata.num_warps}")
    if "ptx" in launched.asm:
        ptx = launched.asm["ptx"].splitlines()
        loads = [line.strip() for line in ptx if "ld.global" in line]
        print(f"  PTX: {len(ptx)} lines, {len(loads)} global loads, "
              f"the first: {loads[0] if loads else 'none'}")
# --8<-- [end:compiled]


# --8<-- [start:gpu-timing]
if INTERPRETED:
    print("GPU timings (triton.testing.do_bench): not run: no CUDA device")
else:
    from triton.testing import do_bench

    big = torch.randn(4096, 4096, device=device)
    moved = 2 * big.numel() * big.element_size()  # read once, write once

    def unfused(t):                               # five kernels, each through memory
        shifted = t - t.max(dim=1, keepdim=True).values
        numerator = shifted.exp()
        return numerator / numerator.sum(dim=1, keepdim=True)

    candidates = {"Triton softmax": lambda: softmax(big),
                  "torch.softmax": lambda: torch.softmax(big, dim=1),
                  "unfused torch ops": lambda: unfused(big)}
    for name, fn in candidates.items():
        ms = do_bench(fn)                         # its own warm-up and repeats, in ms
        print(f"{name:>18}: {ms:.3f} ms, {moved / ms / 1e6:.0f} GB/s "
              "if it moved the data once")
    assert torch.allclose(softmax(big), torch.softmax(big, dim=1), rtol=1e-5, atol=1e-6)
# --8<-- [end:gpu-timing]
