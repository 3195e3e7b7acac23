"""Kernel-level performance: occupancy, coalescing, bank conflicts, tile and wave quantization.

Most of it is arithmetic on NVIDIA's published limits, checked with asserts, so it runs
the same on a laptop and on a GPU: an occupancy calculator for compute capability 9.0
(H100, H200), the byte addresses a contiguous and a strided Triton load read (Triton's
interpreter runs them on CPU tensors), the shared-memory bank of each lane of a warp,
and how many 128 × 128 output tiles and waves a matmul needs on 132 SMs. Only two parts
need CUDA: printing the GPU's own limits beside the table, and timing matmuls just below
and above a wave boundary. Without a GPU each of them prints one line saying so.
"""
# snippet: timeout=120 cpu-independent
# The CPU profiles skip this file: its numbers are arithmetic on NVIDIA's published limits and
# the addresses that Triton's interpreter (NumPy) computes; no ATen kernel's result is printed.

# --8<-- [start:setup]
import math
import os
import sys
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both  # noqa: E402

device = "cuda" if torch.cuda.is_available() else "cpu"
# --8<-- [end:setup]


# --8<-- [start:limits]
# Compute capability 9.0 (H100, H200), from the CUDA C++ Programming Guide, appendix
# "Compute Capabilities", tables 30 and 31 (there K = 1024 and KB = 1024 bytes).
CC90 = {
    "warp size": 32,
    "max threads per block": 1024,
    "max resident warps per SM": 64,
    "max resident blocks per SM": 32,
    "32-bit registers per SM": 64 * 1024,
    "max registers per thread": 255,
    "max shared memory per SM": 228 * 1024,     # bytes
    "max shared memory per block": 227 * 1024,  # bytes, above 48 KB only by opt-in
    "shared memory reserved per block": 1024,   # bytes that CUDA itself takes (8.0 and up)
}
# How the SM hands out what a block asks for, as CUDA's own occupancy calculator
# (the header cuda_occupancy.h of the CUDA toolkit) models compute capability 9.0:
REGISTER_UNIT = 256   # registers go to a warp in multiples of 256
SUB_PARTITIONS = 4    # an SM is four quarters with a quarter of the registers each, and
                      # all the registers of one warp come from one quarter
SHARED_UNIT = 128     # bytes: shared memory goes to a block in multiples of 128
# --8<-- [end:limits]


# --8<-- [start:occupancy]
def occupancy(threads: int, registers: int, shared: int = 0, limits: dict = CC90) -> dict:
    """Resident blocks and warps per SM for one kernel, and what limits them.

    threads and registers per thread, shared memory in bytes per block (what the kernel
    declares plus what it asks for at launch).
    """
    assert threads <= limits["max threads per block"]
    assert registers <= limits["max registers per thread"]
    assert shared <= limits["max shared memory per block"]
    warps = math.ceil(threads / limits["warp size"])
    # Registers: each warp's, rounded up to 256, come from one quarter of the SM, so the
    # SM holds as many warps as fit whole into each quarter, times four.
    per_warp = math.ceil(registers * limits["warp size"] / REGISTER_UNIT) * REGISTER_UNIT
    quarter = limits["32-bit registers per SM"] // SUB_PARTITIONS
    warps_by_registers = quarter // per_warp * SUB_PARTITIONS if per_warp else math.inf
    # Shared memory: the block's own plus the 1 KB CUDA reserves, rounded up to 128 bytes.
    per_block = math.ceil((shared + limits["shared memory reserved per block"])
                          / SHARED_UNIT) * SHARED_UNIT
    blocks_by = {
        "warps": limits["max resident warps per SM"] // warps,
        "blocks": limits["max resident blocks per SM"],
        "registers": warps_by_registers // warps,
        "shared memory": limits["max shared memory per SM"] // per_block,
    }
    blocks = min(blocks_by.values())
    return {"blocks": blocks, "warps": blocks * warps,
            "occupancy": blocks * warps / limits["max resident warps per SM"],
            "limited by": [name for name, n in blocks_by.items() if n == blocks]}


KB = 1024
configs = [  # threads, registers per thread, shared memory per block; expected blocks, warps
    (256, 32, 0, 8, 64),
    (256, 64, 0, 4, 32),
    (256, 128, 0, 2, 16),
    (256, 32, 48 * KB, 4, 32),
    (256, 32, 57 * KB, 3, 24),
    (256, 32, 100 * KB, 2, 16),
    (128, 37, 0, 12, 48),
    (96, 40, 0, 16, 48),
    (32, 80, 0, 24, 24),
    (32, 32, 0, 32, 32),
]
print("compute capability 9.0: 64 warps, 32 blocks, 65,536 registers, 228 KB of "
      "shared memory per SM")
print(f"{'threads':>7} {'regs':>4} {'shared':>7} {'blocks':>6} {'warps':>5} "
      f"{'occupancy':>9}  limited by")
for threads, registers, shared, blocks, warps in configs:
    r = occupancy(threads, registers, shared)
    print(f"{threads:>7} {registers:>4} {shared // KB:>4} KB {r['blocks']:>6} "
          f"{r['warps']:>5} {r['occupancy']:>9.0%}  {', '.join(r['limited by'])}")
    assert (r["blocks"], r["warps"]) == (blocks, warps), (threads, registers, shared)

# What each rule changes. 37 registers: 37 × 32 = 1,184 per warp, allocated as 1,280, so
# 12 blocks of 4 warps fit instead of 13. 40 registers in blocks of 3 warps: the 65,536
# registers as one pool would hold 17 blocks, but each quarter of 16,384 holds 12 warps of
# 1,280, 48 in all: 16 blocks. 57 KB of shared memory: 228 // 57 = 4 blocks without the
# reserved kilobyte, 228 // 58 = 3 with it.
assert 65536 // (37 * 32 * 4) == 13 and 65536 // (1280 * 4) == 12
assert 65536 // (1280 * 3) == 17 and 16384 // 1280 * 4 // 3 == 16
assert 65536 // (80 * 32) == 25 and 16384 // (80 * 32) * 4 == 24
assert 228 // 57 == 4 and 228 // 58 == 3
# --8<-- [end:occupancy]


# --8<-- [start:device-limits]
if device == "cuda":
    props = torch.cuda.get_device_properties(0)
    major, minor = torch.cuda.get_device_capability(0)
    print(f"\n{props.name}, compute capability {major}.{minor}, "
          f"{props.multi_processor_count} SMs; its limits beside the 9.0 table:")
    fields = [  # (attribute of get_device_properties, its value in the 9.0 table)
        ("warp_size", CC90["warp size"]),
        ("max_threads_per_multi_processor",
         CC90["max resident warps per SM"] * CC90["warp size"]),
        ("regs_per_multiprocessor", CC90["32-bit registers per SM"]),
        ("shared_memory_per_multiprocessor", CC90["max shared memory per SM"]),
        ("shared_memory_per_block_optin", CC90["max shared memory per block"]),
        ("shared_memory_per_block", 48 * KB),
    ]
    for name, table in fields:
        value = getattr(props, name, None)
        shown = f"{value:,}" if value is not None else "not in this torch build"
        print(f"  {name:<34} {shown:>24}   table: {table:,}")
else:
    print("\nGPU limits from torch.cuda.get_device_properties: not run, no CUDA device")
# --8<-- [end:device-limits]


# --8<-- [start:coalescing]
# Read before a kernel is decorated: set before triton is imported. The interpreter
# runs every program on the CPU with NumPy, so CPU tensors work on any machine.
os.environ["TRITON_INTERPRET"] = "1"
try:
    import triton
    import triton.language as tl
except ImportError as error:
    triton = None
    print(f"\ncoalescing: not run, triton cannot be imported here ({error}); "
          "PyPI has triton wheels for Linux only")

SECTOR, LINE, LANES = 32, 128, 32  # bytes, bytes, threads in a warp

if triton is not None:
    @triton.jit
    def read_row(x_ptr, out_ptr, addr_ptr, ROW: tl.constexpr, LANES: tl.constexpr):
        lane = tl.arange(0, LANES)
        ptrs = x_ptr + tl.program_id(0) * ROW + lane  # lane i reads x[row, i]
        tl.store(out_ptr + tl.program_id(0) * LANES + lane, tl.load(ptrs))
        tl.store(addr_ptr + tl.program_id(0) * LANES + lane,
                 ptrs.to(tl.int64) - x_ptr.to(tl.int64))  # byte offset of each read

    @triton.jit
    def read_column(x_ptr, out_ptr, addr_ptr, ROW: tl.constexpr, LANES: tl.constexpr):
        lane = tl.arange(0, LANES)
        ptrs = x_ptr + tl.program_id(0) + lane * ROW  # lane i reads x[i, column]
        tl.store(out_ptr + tl.program_id(0) * LANES + lane, tl.load(ptrs))
        tl.store(addr_ptr + tl.program_id(0) * LANES + lane,
                 ptrs.to(tl.int64) - x_ptr.to(tl.int64))

    def touched(addresses, size=4):
        """The 32-byte sectors and 128-byte lines that these reads of `size` bytes cover."""
        sectors = {byte // SECTOR for a in addresses for byte in range(a, a + size)}
        lines = {s * SECTOR // LINE for s in sectors}
        return sectors, lines

    x = torch.arange(32 * 32, dtype=torch.float32).reshape(32, 32)  # row-major
    results = {}
    for name, kernel, expected in (("row (contiguous)", read_row, x),
                                   ("column (stride 32)", read_column, x.t())):
        out = torch.empty(32, LANES)
        addr = torch.empty(32, LANES, dtype=torch.int64)
        kernel[(32,)](x, out, addr, ROW=32, LANES=LANES)
        assert torch.equal(out, expected)  # each program read what its addresses say
        addresses = addr[0].tolist()        # program 0: one warp's worth of lanes
        sectors, lines = touched(addresses)
        results[name] = (len(sectors), len(lines))
        print(f"\n{name}: byte offset read by each lane of one warp")
        for first in (0, 16):
            print(f"  lanes {first:>2}-{first + 15:<2}: "
                  + " ".join(f"{a:>4}" for a in addresses[first:first + 16]))
        print(f"  {LANES} lanes × 4 B = {LANES * 4} B wanted; sectors of 32 B touched: "
              f"{len(sectors)}, lines of 128 B: {len(lines)}; {len(sectors) * SECTOR} B moved")
    assert results["row (contiguous)"] == (4, 1)
    assert results["column (stride 32)"] == (32, 32)
# --8<-- [end:coalescing]


# --8<-- [start:banks]
BANKS, BANK_BYTES = 32, 4


def worst_conflict(word_indices) -> int:
    """Largest number of lanes that hit one bank with different words (1 = no conflict)."""
    per_bank = {}
    for word in word_indices:
        per_bank.setdefault(word % BANKS, set()).add(word)
    return max(len(words) for words in per_bank.values())


column = 5  # a warp reads column 5 of a 32 × 32 float32 tile: lane i reads [i][5]
layouts = {
    "32 × 32, no padding": [i * 32 + column for i in range(32)],
    "32 × 33, one float of padding": [i * 33 + column for i in range(32)],
    "32 × 32, XOR swizzle": [i * 32 + (column ^ i) for i in range(32)],
}
print(f"\nshared memory: {BANKS} banks of {BANK_BYTES} B; a warp reads column {column} "
      "of a 32 × 32 float32 tile")
for name, words in layouts.items():
    banks = sorted({w % BANKS for w in words})
    print(f"  {name:<30} banks {banks[:4]}{' ...' if len(banks) > 4 else ''} "
          f"-> {worst_conflict(words)}-way")
assert worst_conflict(layouts["32 × 32, no padding"]) == 32
assert worst_conflict(layouts["32 × 33, one float of padding"]) == 1
assert worst_conflict(layouts["32 × 32, XOR swizzle"]) == 1
# rows stay conflict-free in all three layouts
assert worst_conflict([5 * 33 + c for c in range(32)]) == 1
assert worst_conflict([5 * 32 + (c ^ 5) for c in range(32)]) == 1
# --8<-- [end:banks]


# --8<-- [start:alignment]
def tensor_core_aligned(m: int, n: int, k: int, dtype: torch.dtype) -> bool:
    """cuBLAS's conditions for its fastest Tensor Core kernels, for contiguous tensors:
    every dimension (and so every leading dimension) is a multiple of 16 bytes."""
    size = torch.empty(0, dtype=dtype).element_size()
    return all(d * size % 16 == 0 for d in (m, n, k))


print("\nTensor Core alignment (cuBLAS: dimensions and pointers multiples of 16 bytes)")
for dtype in (torch.float8_e4m3fn, torch.bfloat16, torch.float16, torch.float32):
    size = torch.empty(0, dtype=dtype).element_size()
    print(f"  {str(dtype):<20} {size} B per element: dimensions in multiples of "
          f"{16 // size}")
assert tensor_core_aligned(4096, 4096, 4096, torch.bfloat16)
assert not tensor_core_aligned(4096, 4095, 4096, torch.bfloat16)
assert tensor_core_aligned(4096, 4100, 4096, torch.float32)  # 4 B: multiples of 4

vocab = 50257
padded = math.ceil(vocab / 64) * 64
print(f"  a vocabulary of {vocab:,} padded to {padded:,} = {padded // 64} × 64")
assert padded == 50304 and padded - vocab == 47

w = torch.empty(64, 64, dtype=torch.bfloat16)
offset = w[:, 1:].data_ptr() - w.data_ptr()
print(f"  w[:, 1:] starts {offset} B after w: a 16-byte aligned w gives a "
      "misaligned view")
assert offset == 2
# --8<-- [end:alignment]


# --8<-- [start:waves]
SMS = 132      # H100 SXM5 (NVIDIA); an H200 reports the same
TILE = 128     # a 128 × 128 output tile per thread block: a model, cuBLAS picks its own


def waves(m: int, n: int, sms: int = SMS, tile: int = TILE) -> dict:
    tiles = math.ceil(m / tile) * math.ceil(n / tile)
    n_waves = math.ceil(tiles / sms)
    last = tiles - (n_waves - 1) * sms                  # tiles in the last wave
    return {"tiles": tiles, "waves": n_waves, "last wave": last / sms,
            "tile use": m * n / (tiles * tile * tile),  # useful part of the tiles
            "efficiency": m * n / (n_waves * sms * tile * tile)}


shapes = [(1024, 1024), (2048, 1024), (2048, 1152), (2048, 1032),
          (4096, 4096), (4096, 4224), (4096, 4352), (8192, 8192)]
print(f"\n{TILE} × {TILE} output tiles on {SMS} SMs (model: one tile per SM at a time)")
print(f"{'M':>5} {'N':>5} {'tiles':>6} {'waves':>5} {'last wave':>9} {'tile use':>8} "
      f"{'efficiency':>10}")
table = {}
for m, n in shapes:
    r = table[m, n] = waves(m, n)
    print(f"{m:>5} {n:>5} {r['tiles']:>6} {r['waves']:>5} {r['last wave']:>9.1%} "
          f"{r['tile use']:>8.1%} {r['efficiency']:>10.1%}")
expected = {(1024, 1024): (64, 1), (2048, 1024): (128, 1), (2048, 1152): (144, 2),
            (2048, 1032): (144, 2), (4096, 4096): (1024, 8), (4096, 4224): (1056, 8),
            (4096, 4352): (1088, 9), (8192, 8192): (4096, 32)}
for shape, (tiles, n_waves) in expected.items():
    assert (table[shape]["tiles"], table[shape]["waves"]) == (tiles, n_waves), shape
assert table[4096, 4224]["efficiency"] == 1.0       # 1,056 = 8 × 132 exactly
assert table[2048, 1152]["last wave"] == 12 / 132   # 12 tiles in the second wave
# 12.5% more columns, twice the waves:
assert table[2048, 1152]["waves"] == 2 * table[2048, 1024]["waves"]
# --8<-- [end:waves]


# --8<-- [start:figure]
M_FIG = 2048
ns = list(range(128, 8192 + 1, 8))  # every N that keeps bf16 rows 16-byte aligned
curve = [100 * waves(M_FIG, n)["efficiency"] for n in ns]
cliffs = [n for n, prev, cur in zip(ns[1:], curve, curve[1:]) if cur < prev - 10]
print(f"\nM = {M_FIG}: efficiency drops by more than 10 points just after N = "
      + ", ".join(str(n - 8) for n in cliffs[:6]) + " ...")
assert cliffs[0] - 8 == 1024   # 128 tiles in one wave; the next column of tiles spills


def draw(fig, text):
    ax = fig.add_subplot()
    ax.plot(ns, curve, lw=1)
    for n in (1024, 1152):
        r = table[M_FIG, n]
        ax.plot(n, 100 * r["efficiency"], "o", color="C3")
        ax.annotate(text["point"].format(n=n, waves=r["waves"]),
                    (n, 100 * r["efficiency"]), textcoords="offset points",
                    xytext=(6, -4), fontsize=8)
    ax.set(xlabel=text["x"], ylabel=text["y"], ylim=(0, 105), title=text["title"])
    ax.grid(alpha=0.3)


draw_both("waves", {
    "en": {"x": "N  (M = 2048; K does not change the count)",
           "y": "M·N / (waves × 132 × 128²), %",
           "title": "Expected efficiency: 128 × 128 tiles on 132 SMs (a model)",
           "point": "N = {n}: {waves} wave(s)"},
    "zh": {"x": "N（M = 2048；K 不影响分块数）",
           "y": "M·N /（波次数 × 132 × 128²），%",
           "title": "预期效率：128 × 128 分块，132 个 SM（模型）",
           "point": "N = {n}：{waves} 个波次"},
}, draw)
# --8<-- [end:figure]


# --8<-- [start:gpu-timing]
if device == "cuda":
    BUDGET = 0.2  # seconds of timed calls per shape
    K = 4096
    print(f"\nbf16 matmuls on {torch.cuda.get_device_name(0)}, M = 2048, K = {K} "
          "(timed, not asserted):")
    for n in (1024, 1025, 1032, 1152, 2048, 2176):
        a = torch.randn(2048, K, device=device, dtype=torch.bfloat16)
        b = torch.randn(K, n, device=device, dtype=torch.bfloat16)
        for _ in range(3):
            a @ b                                     # warm-up: cuBLAS picks its kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        calls, spent = 0, 0.0
        began = time.perf_counter()
        while time.perf_counter() - began < BUDGET:
            start.record()
            for _ in range(10):
                a @ b
            end.record()
            end.synchronize()
            spent += start.elapsed_time(end) / 1e3   # seconds
            calls += 10
        seconds = spent / calls
        model = waves(2048, n)
        print(f"  N = {n:>4}: {seconds * 1e6:7.1f} µs, "
              f"{2 * 2048 * K * n / seconds / 1e12:6.1f} TFLOP/s; model: "
              f"{model['tiles']} tiles, {model['waves']} wave(s), "
              f"{'aligned' if tensor_core_aligned(2048, n, K, torch.bfloat16) else 'NOT 16-byte aligned'}")
else:
    print("\nmatmul timings around a wave boundary: not run, no CUDA device")
# --8<-- [end:gpu-timing]
