"""Prefill and decode on the roofline: the arithmetic intensity of each from shapes, the batch at
which decode stops being memory-bound on an H100 and an H200 SXM, and decode's tokens per second
and memory-bandwidth utilization (MBU) measured on this machine."""
# snippet: timeout=120 serial
# serial: the decode rates and MBU it prints are timings, and a copy bandwidth measured while
# other snippets run would be too low.

import math
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both
from _model import Config, KVCache, TinyLM

# --8<-- [start:intensity]
BF16 = 2  # bytes


def linear_intensity(tokens: int, k: int, n: int, itemsize: int = BF16) -> float:
    """FLOP per byte of (tokens × k) @ (k × n) when the weight, the input and the output each
    move between memory and the chip once."""
    return 2 * tokens * k * n / (itemsize * (k * n + tokens * k + tokens * n))


def decode_attention_intensity(heads: int, kv_heads: int, itemsize: int = BF16) -> float:
    """One new token per sequence against L cached positions: QKᵀ and AV cost 4·heads·head_dim·L
    FLOPs, and the cache's keys and values are 2·kv_heads·head_dim·L numbers. L cancels, and
    so does the batch: every sequence reads its own cache."""
    return 4 * heads / (2 * kv_heads * itemsize)


D = 4096  # a 4096 × 4096 weight, like the attention projections of Llama-3-8B
prefill = linear_intensity(2048, D, D)
print(f"prefill, 2,048 tokens through a {D} × {D} bf16 weight: {prefill:,.0f} FLOP/byte")
assert prefill == 1024                      # 2048 / (1 + 2048/4096 + 2048/4096)
for batch in (1, 16, 64, 256):
    decode = linear_intensity(batch, D, D)
    print(f"decode, batch {batch:>3}, the same weight: {decode:7.2f} FLOP/byte")
    assert abs(decode - batch / (1 + 2 * batch / D)) < 1e-9 and decode < batch
for heads, kv_heads in ((32, 32), (32, 8)):
    attention = decode_attention_intensity(heads, kv_heads)
    print(f"decode attention, {heads} query heads, {kv_heads} KV heads: {attention:g} FLOP/byte "
          f"at any batch and length")
    assert attention == heads / kv_heads
# --8<-- [end:intensity]


# --8<-- [start:ridge]
# NVIDIA datasheets, SXM boards. Dense bf16 is half the "with sparsity" 1,979 TFLOPS, as on
# ../performance/flops.md; HBM3 at 3.35 TB/s on the H100, HBM3e at 4.8 TB/s on the H200.
GPUS = {"H100 SXM": {"flops": 989.5e12, "bandwidth": 3.35e12},
        "H200 SXM": {"flops": 989.5e12, "bandwidth": 4.80e12}}
print(f"\n{'':<10}{'ridge':>11}{'decode compute-bound from':>28}{'batch 1':>10}")
print(f"{'':<10}{'FLOP/byte':>11}{'b ≥ ridge':>12}{'exact, 4096²':>16}{'reaches':>10}")
for name, gpu in GPUS.items():
    gpu["ridge"] = gpu["flops"] / gpu["bandwidth"]               # FLOP/byte
    rule = math.ceil(gpu["ridge"])                              # intensity ≈ batch
    exact = next(b for b in range(1, 10**4) if linear_intensity(b, D, D) >= gpu["ridge"])
    batch1 = gpu["bandwidth"] * linear_intensity(1, D, D) / gpu["flops"]  # of the peak
    gpu |= {"rule": rule, "exact": exact}
    print(f"{name:<10}{gpu['ridge']:>11.1f}{rule:>12}{exact:>16}{batch1:>10.2%}")
    assert rule < exact and batch1 < 0.005
assert (GPUS["H100 SXM"]["rule"], GPUS["H200 SXM"]["rule"]) == (296, 207)

# Llama-3-8B's config.json: hidden 4096, MLP 14336 (gate, up and down), 32 layers, 32 query
# heads and 8 KV heads of 128, vocabulary 128256. Decode reads every matmul weight once a step.
layer = 4096 * 4096 * 2 + 2 * 4096 * 8 * 128 + 3 * 4096 * 14336  # q, out; k, v; MLP
weights = BF16 * (32 * layer + 4096 * 128256)                     # + the output layer
print(f"Llama-3-8B, bf16: {weights / 1e9:.2f} GB of matmul weights to read for every step")
for name, gpu in GPUS.items():
    step = weights / gpu["bandwidth"]
    print(f"  {name}: at least {step * 1e3:.2f} ms a step: at most {1 / step:.0f} tokens/s "
          f"for one sequence")
assert weights == 15_009_316_864
# --8<-- [end:ridge]


# --8<-- [start:mbu]
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.benchmark import Timer
from torch.utils.flop_counter import FlopCounterMode

device = "cuda" if torch.cuda.is_available() else "cpu"


def weight_bytes(model) -> int:
    """Bytes of the matmul weights: what a decode step must read once, whatever the batch."""
    return sum(m.weight.nbytes for m in model.modules() if isinstance(m, torch.nn.Linear))


def cache_bytes(cfg: Config, tokens: int, itemsize: int) -> int:
    return 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * tokens * itemsize


def decode_step(model, batch: int, context: int) -> dict:
    """FLOPs and bytes that must move for one new token per sequence, `context` tokens cached."""
    cfg, itemsize = model.cfg, model.head.weight.element_size()
    n = weight_bytes(model) // itemsize                   # matmul weights: 2 FLOPs each a token
    keys = context + 1                                    # the new token sees itself too
    return {"flops": batch * (2 * n + 4 * cfg.layers * cfg.d * keys),
            "bytes": weight_bytes(model) + batch * cache_bytes(cfg, keys, itemsize)}


def prefill_step(model, tokens: int) -> dict:
    """The same for a prompt of `tokens` tokens: every weight once, the cache written once."""
    cfg, itemsize = model.cfg, model.head.weight.element_size()
    n = weight_bytes(model) // itemsize
    return {"flops": 2 * n * tokens + 4 * cfg.layers * cfg.d * tokens**2,  # full score matrix
            "bytes": weight_bytes(model) + cache_bytes(cfg, tokens, itemsize)}


def mbu(step: dict, seconds: float, peak_bandwidth: float) -> float:
    return step["bytes"] / seconds / peak_bandwidth


def copy_bandwidth(device: str, mib: int = 256) -> float:
    """Bytes/s of copying a large tensor: each byte is read once and written once."""
    src = torch.ones(mib * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    timer = Timer("dst.copy_(src)", globals={"src": src, "dst": dst},
                  num_threads=torch.get_num_threads())
    return 2 * src.nbytes / timer.blocked_autorange(min_run_time=0.2).median


def datasheet(name: str) -> dict | None:
    """The SXM figures for a GPU named H100 or H200; None for their PCIe and NVL boards, whose
    figures differ, and for any other device."""
    if "PCIe" in name or "NVL" in name:
        return None
    return next((GPUS[g] for g in GPUS if re.search(rf"\b{g.split()[0]}\b", name)), None)


torch.manual_seed(0)
small = TinyLM(Config()).eval().requires_grad_(False).to(device)
cache = KVCache(small.cfg)
small(torch.zeros(2, 9, dtype=torch.long, device=device), cache, pos=0)  # 9 tokens cached
with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
    small(torch.zeros(2, 1, dtype=torch.long, device=device), cache, pos=9)
assert counter.get_total_flops() == decode_step(small, 2, 9)["flops"]
assert sum(t.nbytes for t in cache.k + cache.v) == 2 * cache_bytes(small.cfg, 10, 4)
measured = copy_bandwidth(device)
name = torch.cuda.get_device_name() if device == "cuda" else "this CPU"
sheet = datasheet(name) if device == "cuda" else None
peak_bandwidth = sheet["bandwidth"] if sheet else measured
print(f"{name}: a 256 MiB copy runs at {measured / 1e9:,.1f} GB/s; MBU below divides by "
      + (f"the datasheet's {peak_bandwidth / 1e9:,.0f} GB/s" if sheet else
         "this copy's rate, a rough figure"))
# --8<-- [end:mbu]


# --8<-- [start:measure]
def seconds_per_step(model, batch: int, context: int, budget: float = 0.3) -> float:
    """Median time of a decode step for `batch` sequences that start with `context` tokens
    cached. The token ids are random: the speed does not depend on them."""
    ids = torch.randint(model.cfg.vocab, (batch, context + 1), device=device)
    cache = KVCache(model.cfg)
    model(ids[:, :-1], cache, pos=0)                      # prefill, not timed
    token, times = ids[:, -1:], []
    while len(times) < 4 or (sum(times) < budget and len(times) < 30):
        sync()
        start = time.perf_counter()
        token = model(token, cache, pos=context + len(times))[:, -1:].argmax(-1)
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])                   # the first step warms up


def seconds_per_prefill(model, tokens: int, runs: int = 3) -> float:
    ids = torch.randint(model.cfg.vocab, (1, tokens), device=device)
    times = []
    for _ in range(runs + 1):
        sync()
        start = time.perf_counter()
        model(ids, KVCache(model.cfg), pos=0)
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
if device == "cuda":  # bf16, 1.7 GB of matmul weights: more than the 50 MB of an H100's L2
    wide_cfg = Config(vocab=32768, d=4096, heads=32, kv_heads=8, layers=4, max_seq=1024)
    dtype, prompt_tokens = torch.bfloat16, 512
    batches = (1, 16, 64, 256)
else:                 # float32, 180 MB of matmul weights: more than most CPUs' caches
    wide_cfg = Config(vocab=4096, d=768, heads=12, kv_heads=12, layers=6, max_seq=256)
    dtype, prompt_tokens = torch.float32, 32
    batches = (1, 4, 16, 64)
with torch.device(device):
    wide = TinyLM(wide_cfg).to(dtype).eval().requires_grad_(False)
print(f"wide model: d {wide_cfg.d}, {wide_cfg.layers} layers, {dtype}, "
      f"{weight_bytes(wide) / 1e6:,.0f} MB of matmul weights")

seconds, step = seconds_per_prefill(wide, prompt_tokens), prefill_step(wide, prompt_tokens)
compute_rate = step["flops"] / seconds                   # this machine's, on big matmuls
print(f"prefill of {prompt_tokens} tokens, wide: {seconds * 1e3:.2f} ms, "
      f"{prompt_tokens / seconds:,.0f} tokens/s, {compute_rate / 1e9:,.1f} GFLOP/s, "
      f"{step['flops'] / step['bytes']:.0f} FLOP/byte")
if sheet:
    print(f"  MFU against the dense bf16 datasheet peak: {compute_rate / sheet['flops']:.1%}")

CONTEXT, CALL_BUDGET = 16, 0.1
print(f"\n{'decode':<8}{'batch':>6}{'step':>10}{'tokens/s':>10}{'MB/step':>9}{'GB/s':>8}"
      f"{'MBU':>7}{'GFLOP/s':>10}")
for label, model, sizes in (("TinyLM", small, (1, 16)), ("wide", wide, batches)):
    last = 0.0
    for batch in sizes:
        step = decode_step(model, batch, CONTEXT)
        # the roofline of this machine, and the last step as a floor for the overhead
        if max(last, step["bytes"] / measured, step["flops"] / compute_rate) > CALL_BUDGET:
            break                                         # a step would take too long here
        last = seconds_per_step(model, batch, CONTEXT)
        print(f"{label:<8}{batch:>6}{last * 1e3:>8.2f}ms{batch / last:>10,.0f}"
              f"{step['bytes'] / 1e6:>9.1f}{step['bytes'] / last / 1e9:>8.1f}"
              f"{mbu(step, last, peak_bandwidth):>7.1%}{step['flops'] / last / 1e9:>10,.1f}")
# --8<-- [end:measure]


# --8<-- [start:figure]
LABELS = {
    "en": {"x": "arithmetic intensity (FLOP/byte, bf16)", "y": "attainable TFLOP/s",
           "title": "Prefill and decode on the H100 and H200 SXM rooflines (datasheets)",
           "gpus": {"H100 SXM": "H100 SXM", "H200 SXM": "H200 SXM"},
           "points": ["decode attention, MHA", "decode attention, 32/8 GQA",
                      "decode, batch 1", "decode, batch 16", "decode, batch 64",
                      "decode, batch 256", "prefill, 2,048 tokens"]},
    "zh": {"x": "算术强度（FLOP/字节，bf16）", "y": "可达到的 TFLOP/s",
           "title": "H100 与 H200 SXM 的 Roofline 上的预填充与解码（数据手册）",
           "gpus": {"H100 SXM": "H100 SXM", "H200 SXM": "H200 SXM"},
           "points": ["解码的注意力，MHA", "解码的注意力，32/8 GQA",
                      "解码，批大小 1", "解码，批大小 16", "解码，批大小 64",
                      "解码，批大小 256", "预填充，2,048 个 token"]},
}
POINTS = [decode_attention_intensity(32, 32), decode_attention_intensity(32, 8),
          *(linear_intensity(b, D, D) for b in (1, 16, 64, 256)), prefill]


def draw(fig, text):
    ax = fig.add_subplot()
    xs = [2 ** (i / 8) for i in range(-8, 8 * 12)]             # 0.5 to 2,000 FLOP/byte
    for (name, gpu), style in zip(GPUS.items(), ("-", "--")):
        ax.loglog(xs, [min(gpu["flops"], gpu["bandwidth"] * x) / 1e12 for x in xs], style,
                  color="gray", label=text["gpus"][name])
    for i, (x, label) in enumerate(zip(POINTS, text["points"])):
        h100, h200 = (min(g["flops"], g["bandwidth"] * x) / 1e12 for g in GPUS.values())
        style = {"marker": "s", "markersize": 9, "markerfacecolor": "none"} if i < 2 else \
            {"marker": "o", "markersize": 5}              # attention: hollow squares
        ax.plot([x, x], [h100, h200], linestyle="none", color=f"C{i}", label=label, **style)
    for (name, gpu), (dx, dy, ha) in zip(GPUS.items(), ((4, -12, "left"), (-4, 6, "right"))):
        ax.annotate(f"{name.split()[0]}: {gpu['ridge']:.0f}", (gpu["ridge"], gpu["flops"] / 1e12),
                    xytext=(dx, dy), textcoords="offset points", ha=ha, fontsize="x-small")
    ax.set(xlabel=text["x"], ylabel=text["y"], title=text["title"])
    ax.title.set_fontsize("medium")
    ax.legend(fontsize="x-small", loc="lower right")


draw_both("roofline", LABELS, draw, figsize=(7.2, 4.4))
# --8<-- [end:figure]
