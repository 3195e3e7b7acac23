"""Matmul on CPU and GPU with torch.utils.benchmark; copies; a roofline."""
# snippet: timeout=120 serial

import os
import platform
import time
import sys
from pathlib import Path

# --8<-- [start:setup]
import torch
from torch.utils.benchmark import Timer

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
SIZES = [8, 64, 256, 512, 1024, 2048, 4096, 8192]  # tried in order, within the budget
CALL_BUDGET = 0.25  # seconds: no size whose single call would take longer
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
THREADS = torch.get_num_threads()  # Timer uses 1 thread unless told otherwise
# --8<-- [end:setup]



# --8<-- [start:time]
def matmul_flops(n: int) -> int:
    """n×n @ n×n: n multiplies and n adds for each of the n² entries."""
    return 2 * n**3


def median_seconds(stmt: str, **names) -> float:
    """Median time of `stmt`: Timer warms up, sets repeats, syncs the GPU."""
    timer = Timer(stmt, globals=names, num_threads=THREADS)
    return timer.blocked_autorange(min_run_time=0.2).median


def time_matmul(device: str, dtype: str, n: int) -> dict:
    a = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
    b = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
    seconds = median_seconds("a @ b", a=a, b=b)
    flops = matmul_flops(n)
    return {"device": device, "dtype": dtype, "n": n, "seconds": seconds,
            "flops": flops, "gflops": flops / seconds / 1e9}


def sweep(device: str, dtype: str) -> list[dict]:
    """Growing sizes until the next one would break the budget.

    From n = 256 on, a matmul's time grows like n³, so the next size's call is
    predicted from the last one; a slow CPU (or a slow dtype) measures fewer sizes,
    not longer. Smaller sizes are mostly overhead and cost little anywhere.
    """
    measured = []
    for n in SIZES:
        last = measured[-1] if measured else None
        if last and last["n"] >= 256 and last["seconds"] * (n / last["n"]) ** 3 > CALL_BUDGET:
            break
        measured.append(time_matmul(device, dtype, n))
    return measured
# --8<-- [end:time]


def cpu_flags() -> set[str]:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    return next((set(line.partition(":")[2].split()) for line in lines
                 if line.startswith("flags")), set())


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    return next((line.partition(":")[2].strip() for line in lines
                 if line.startswith("model name")), platform.processor() or "unknown")


def rows(device: str, dtype: str) -> list[dict]:
    return [r for r in results if (r["device"], r["dtype"]) == (device, dtype)]


def rows_at(measured: list[dict], n: int) -> dict:
    return next(r for r in measured if r["n"] == n)


def duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e3:.2f} ms"


# --8<-- [start:run]
flags = cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
print(f"CPU: {cpu_model()} | {' '.join(sorted(flags)) or 'no AVX2'} | "
      f"ATen kernels: {torch.backends.cpu.get_cpu_capability()} | {THREADS} threads")
results = [r for device in DEVICES for dtype in DTYPES for r in sweep(device, dtype)]

print(f"{'device':<6} {'dtype':<9} {'n':>5} {'median':>10} {'GFLOP/s':>10}")
for r in results:
    print(f"{r['device']:<6} {r['dtype']:<9} {r['n']:>5} "
          f"{duration(r['seconds']):>10} {r['gflops']:>10.1f}")
    assert r["flops"] == 2 * r["n"] ** 3 and r["gflops"] > 0
    assert abs(r["gflops"] * 1e9 * r["seconds"] / r["flops"] - 1) < 1e-6
# --8<-- [end:run]

# --8<-- [start:claims]
for device in DEVICES:
    for dtype in DTYPES:
        same = rows(device, dtype)
        gain = same[-1]["gflops"] / same[0]["gflops"]
        print(f"{device} {dtype}: n={same[-1]['n']} runs {gain:.0f}x more FLOP/s "
              f"than n={same[0]['n']}")

# oneDNN takes bf16 matmuls on any CPU with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT,
# natively where AVX512-BF16 or AMX exists; an AVX2-only CPU falls back to a slow
# generic kernel. Whether bf16 then beats float32 varies, so it is asserted only
# where AMX tiles do the work: AMX listed, oneDNN not capped below it
# (ONEDNN_MAX_CPU_ISA), and n >= 1024, where the arithmetic, not the call, dominates.
fp32, bf16 = rows("cpu", "float32"), rows("cpu", "bfloat16")
n = min(fp32[-1]["n"], bf16[-1]["n"])
onednn_cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
if "amx_bf16" not in flags:
    check, why = False, "the CPU lists no amx_bf16"
elif "AMX" not in onednn_cap and onednn_cap != "ALL":
    check, why = False, f"AMX listed, but ONEDNN_MAX_CPU_ISA={onednn_cap} keeps oneDNN off it"
elif n < 1024:
    check, why = False, f"AMX listed, but the budget stopped the sweep at n={n}"
else:
    check, why = True, "AMX in use"
ratio = rows_at(bf16, n)["gflops"] / rows_at(fp32, n)["gflops"]
print(f"cpu bfloat16 vs float32 at n={n}: {ratio:.2f}x "
      f"({why}: {'checked, bf16 must be faster' if check else 'not checked'})")
if check:
    assert ratio > 1, "AMX bf16 matmul should beat float32"
# --8<-- [end:claims]
# --8<-- [end:run]


# --8<-- [start:bandwidth]
def copy_gbps(device: str, mib: int = 256) -> float:
    """Bandwidth of a large copy: each byte is read once and written once."""
    src = torch.ones(mib * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    seconds = median_seconds("dst.copy_(src)", src=src, dst=dst)
    return 2 * src.nbytes / seconds / 1e9


bandwidth = {device: copy_gbps(device) for device in DEVICES}
print()
for device, gbps in bandwidth.items():
    print(f"{device} memory copy, 256 MiB: {gbps:.1f} GB/s")
    assert gbps > 0
# --8<-- [end:bandwidth]


# --8<-- [start:host-to-device]
def host_to_device_gbps(pinned: bool, mib: int = 256) -> float:
    host = torch.ones(mib * 2**20 // 4, pin_memory=pinned)
    stmt = "host.to('cuda', non_blocking=True)" if pinned else "host.to('cuda')"
    return host.nbytes / median_seconds(stmt, host=host) / 1e9


if torch.cuda.is_available():
    pageable, pinned = host_to_device_gbps(False), host_to_device_gbps(True)
    print(f"host-to-device, 256 MiB: pageable {pageable:.1f} GB/s, "
          f"pinned {pinned:.1f} GB/s")
    assert pageable > 0 and pinned > 0
else:
    print("host-to-device copies: not run, this build has no CUDA device")
# --8<-- [end:host-to-device]


# --8<-- [start:sync]
def launch_and_kernel_seconds(n: int = 4096) -> tuple[float, float]:
    """Wall time of queueing a matmul, and its GPU time from CUDA events."""
    a = torch.randn(n, n, device="cuda")
    a @ a  # warm-up
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    a @ a  # returns as soon as the kernel is queued
    end.record()
    queued = time.perf_counter() - t0
    end.synchronize()  # wait for the kernel before reading the events
    return queued, start.elapsed_time(end) / 1e3


if torch.cuda.is_available():
    queued, kernel = launch_and_kernel_seconds()
    print(f"4096² matmul: perf_counter without sync {duration(queued)}, "
          f"CUDA events {duration(kernel)}")
    assert kernel > 0
else:
    print("CUDA events vs unsynchronized timing: not run, no CUDA device")
# --8<-- [end:sync]


# --8<-- [start:roofline]
# Dense BF16 Tensor Core peak and HBM bandwidth, from NVIDIA's datasheets.
# They list BF16 "with sparsity" (1,979 TFLOPS); dense is half of that.
DATASHEET = {"H100 SXM bf16 (datasheet)": {"gflops": 989_400, "gbps": 3_350},
             "H200 SXM bf16 (datasheet)": {"gflops": 989_400, "gbps": 4_800}}


def intensity(n: int, itemsize: int) -> float:
    """FLOP per byte of an n×n matmul that moves A, B and C once each."""
    return matmul_flops(n) / (3 * n * n * itemsize)


machines = {f"this {device.upper()} {dtype} (measured)": {
    "gflops": max(r["gflops"] for r in rows(device, dtype)),
    "gbps": bandwidth[device]} for device in DEVICES for dtype in DTYPES}
machines |= DATASHEET

print(f"\n{'machine':<29} {'peak GFLOP/s':>12} {'GB/s':>7}",
      f"{'ridge FLOP/B':>12}")
for name, m in machines.items():
    m["ridge"] = m["gflops"] / m["gbps"]  # below it, memory is the limit
    print(f"{name:<29} {m['gflops']:>12,.0f} {m['gbps']:>7,.0f} "
          f"{m['ridge']:>12.1f}")
    assert m["ridge"] > 0

h100 = machines["H100 SXM bf16 (datasheet)"]
smallest = next(n for n in range(1, 10**5) if intensity(n, 2) >= h100["ridge"])
print(f"H100 SXM: a bf16 matmul is compute-bound from n = {smallest} "
      f"(n/3 ≥ {h100['ridge']:.0f} FLOP/B)")
assert abs(intensity(smallest, 2) - smallest / 3) < 1e-9
# --8<-- [end:roofline]


sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both  # noqa: E402

# Each chart is drawn once per language (snippets/_figures.py): matmul.svg, matmul.zh.svg, ...
# "names" rewrites the roofline's machine names, phrase by phrase.
LABELS = {
    "en": {"n": "n  (n×n @ n×n)",
           "intensity": "FLOP / byte  (arithmetic intensity)",
           "points": "this CPU, bf16 matmuls (measured)", "names": {}},
    "zh": {"n": "矩阵尺寸 n（n×n @ n×n）",
           "intensity": "算术强度（FLOP/字节）",
           "points": "本机 CPU 的 bf16 矩阵乘法（实测）",
           "names": {"this ": "本机 ", " (measured)": "（实测）",
                     " (datasheet)": "（规格数据）"}},
}


def legend_name(name: str, labels: dict) -> str:
    for english, translated in labels["names"].items():
        name = name.replace(english, translated)
    return name


def plot_matmul(fig, labels: dict) -> None:
    ax = fig.subplots()
    for device in DEVICES:
        for dtype in DTYPES:
            data = rows(device, dtype)
            ax.plot([r["n"] for r in data], [r["gflops"] for r in data], "o-",
                    label=f"{device} {dtype}")
    ax.set(xscale="log", yscale="log", xlabel=labels["n"], ylabel="GFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()


def plot_roofline(fig, labels: dict) -> None:
    ax = fig.subplots()
    x = [2.0**k for k in range(-3, 14)]
    for name, m in machines.items():
        style = "--" if name in DATASHEET else "-"
        roof = [min(m["gflops"], m["gbps"] * i) for i in x]
        ax.plot(x, roof, style, label=legend_name(name, labels))
    cpu = rows("cpu", "bfloat16")
    ax.plot([intensity(r["n"], 2) for r in cpu], [r["gflops"] for r in cpu],
            "k^", label=labels["points"])
    ax.set(xscale="log", yscale="log", ylabel="GFLOP/s", xlabel=labels["intensity"])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))


draw_both("matmul", LABELS, plot_matmul, figsize=(6.4, 4))
draw_both("roofline", LABELS, plot_roofline, figsize=(5.6, 4))
