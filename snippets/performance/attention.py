"""Which kernel scaled_dot_product_attention runs, how to force one, what each costs in memory,
and FlexAttention's masks checked against SDPA.

Every backend is tried alone and compared with the math backend; the peak memory of the math
and flash backends is measured on the CPU, tensor by tensor, while the sequence grows.
"""
# snippet: timeout=120

import sys
import time
import warnings
from pathlib import Path

# --8<-- [start:setup]
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

device = "cuda" if torch.cuda.is_available() else "cpu"
# CUDA's flash and cuDNN kernels take only float16/bfloat16; the CPU runs everything in float32
dtype = torch.float16 if device == "cuda" else torch.float32
B, H, S, D = 2, 4, 256, 64                 # batch, heads, sequence length, head dimension


def qkv(s=S, b=B, h=H, d=D, dev=device, dt=dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=g).to(dev, dt) for _ in range(3)]


print(f"device {device}, dtype {str(dtype).removeprefix('torch.')}, "
      f"q/k/v of shape (B, H, S, D) = {(B, H, S, D)}")
# --8<-- [end:setup]

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared helpers
from _figures import draw_both  # noqa: E402

# --8<-- [start:track]
from _storage import LiveStorages  # noqa: E402  snippets/_storage.py, shared with the memory page

FUSED = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
         "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
         "_scaled_dot_product_fused_attention_overrideable")


class Allocations(LiveStorages):
    """The operators below scaled_dot_product_attention, and the bytes they allocate."""

    def kernel(self):
        fused = [op for op in self.ops if op in FUSED]
        if fused:
            return fused[0]
        views = {"transpose", "expand", "view", "_unsafe_view"}
        return "math: " + ", ".join(op for op in self.ops if op not in views)
# --8<-- [end:track]


# --8<-- [start:default]
q, k, v = qkv()
with Allocations() as seen:
    F.scaled_dot_product_attention(q, k, v)
print(f"default choice:        {seen.kernel()}")
with Allocations() as seen_dropout:
    F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
print(f"with dropout_p=0.1:    {seen_dropout.kernel()}")
if device == "cpu":  # CPU order: flash, then math; the CPU flash kernel has no dropout
    assert seen.kernel() == "_scaled_dot_product_flash_attention_for_cpu"
    assert seen_dropout.kernel().startswith("math")
# --8<-- [end:default]


# --8<-- [start:each]
with sdpa_kernel(SDPBackend.MATH):  # the reference: math backend, float32
    reference = F.scaled_dot_product_attention(*(t.float() for t in (q, k, v)))
tol = 5e-3 if dtype == torch.float16 else 1e-5
ran = []
for backend in SDPBackend.__members__.values():
    if backend == SDPBackend.ERROR:
        continue
    try:
        with sdpa_kernel(backend), Allocations() as seen:
            out = F.scaled_dot_product_attention(q, k, v)
    except RuntimeError as err:
        print(f"{backend.name:<20} refused: RuntimeError: {str(err).split('.')[0]}")
        continue
    worst = (out.float() - reference).abs().max().item()
    print(f"{backend.name:<20} ran {seen.kernel()}, max |diff| vs math {worst:.1e}")
    torch.testing.assert_close(out.float(), reference, atol=tol, rtol=tol)
    ran.append(backend)
if device == "cpu":
    assert ran == [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION], ran
# --8<-- [end:each]


# --8<-- [start:memory]
def attention_bytes(backend, s, b=1, h=1, d=64):
    """Peak and largest allocation of one float32 SDPA call on the CPU, in bytes."""
    q, k, v = qkv(s, b, h, d, dev="cpu", dt=torch.float32)
    with sdpa_kernel(backend), Allocations() as seen:
        F.scaled_dot_product_attention(q, k, v)
    return seen.peak, seen.largest


BUDGET_S, MAX_MATRIX = 1.2, 64 * 2**20  # seconds for the sweep; bytes of one S x S matrix
sizes, rows, start, s, step = [], [], time.perf_counter(), 128, 0.0
while len(sizes) < 3 or (time.perf_counter() - start + 4 * step < BUDGET_S
                         and s * s * 4 <= MAX_MATRIX):
    t0 = time.perf_counter()
    math_peak, math_big = attention_bytes(SDPBackend.MATH, s)
    flash_peak, flash_big = attention_bytes(SDPBackend.FLASH_ATTENTION, s)
    step = time.perf_counter() - t0            # the next S costs about 4x this
    assert math_big == s * s * 4               # the B*H*S*S float32 score matrix
    assert math_peak == 2 * s * s * 4 + s * 64 * 4  # scores + probabilities + a scaled copy
    assert flash_big == s * 64 * 4             # the output, B*H*S*D
    assert flash_peak == s * 64 * 4 + s * 4    # output plus one float32 logsumexp per row
    sizes.append(s)
    rows.append((math_peak, flash_peak))
    print(f"S={s:>5}: math peak {math_peak / 2**20:8.2f} MiB, "
          f"flash peak {flash_peak / 2**20:6.3f} MiB, ratio {math_peak / flash_peak:6.1f}")
    s *= 2
first, last = rows[0], rows[-1]
grow = sizes[-1] // sizes[0]
print(f"S grew {grow}x: math peak grew {last[0] / first[0]:.0f}x, flash peak {last[1] / first[1]:.0f}x")
assert last[1] * sizes[0] == first[1] * sizes[-1]          # flash: exactly linear in S
# --8<-- [end:memory]


# --8<-- [start:figure]
def draw(fig, text):
    ax = fig.add_subplot()
    ax.loglog(sizes, [r[0] for r in rows], "o-", label=text["math"])
    ax.loglog(sizes, [r[1] for r in rows], "s-", label=text["flash"])
    ax.set_xscale("log", base=2)
    ax.set_xlabel(text["x"])
    ax.set_ylabel(text["y"])
    ax.set_title(text["title"])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


draw_both("attention_memory", {
    "en": {"math": "MATH backend", "flash": "FLASH_ATTENTION backend (CPU)",
           "x": "sequence length S", "y": "peak bytes of one call",
           "title": "SDPA memory on the CPU, B = H = 1, D = 64, float32"},
    "zh": {"math": "MATH 后端", "flash": "FLASH_ATTENTION 后端（CPU）",
           "x": "序列长度 S", "y": "一次调用的峰值字节数",
           "title": "CPU 上 SDPA 的内存，B = H = 1，D = 64，float32"},
}, draw)
# --8<-- [end:figure]


# --8<-- [start:cuda-memory]
if device == "cuda":
    qc, kc, vc = qkv(4096, 1, 8, 64)
    for backend in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        try:
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(qc, kc, vc)
        except RuntimeError:
            print(f"{backend.name:<20} refused at S=4096")
            continue
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - before
        print(f"{backend.name:<20} S=4096, H=8, float16: max_memory_allocated "
              f"rose {extra / 2**20:7.1f} MiB (output alone {out.nbytes / 2**20:.1f} MiB)")
        del out
else:
    print("torch.cuda.max_memory_allocated per backend: not run here, no CUDA device")
# --8<-- [end:cuda-memory]


# --8<-- [start:flex-score]
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

from compile._toolchain import missing_toolchain  # noqa: E402  snippets/compile/_toolchain.py


def compiled_or_eager(fn, *args, **kwargs):
    """torch.compile(fn) and its first call. Where Inductor cannot build the kernel on this
    machine (Triton needs a C compiler and Python.h), say why and go on with fn, eager."""
    compiled = torch.compile(fn)
    try:
        return compiled, compiled(*args, **kwargs)
    except Exception as error:
        why = missing_toolchain(error)
        if why is None:
            raise
        print(f"torch.compile could not build flex_attention's kernel on this machine: {why}")
        print("flex_attention runs eager from here on: the same results, unfused")
        return fn, fn(*args, **kwargs)


FB, FH, FS, FD, WINDOW = 1, 2, 512, 32, 128
fq, fk, fv = qkv(FS, FB, FH, FD, dt=torch.float32)
ftol = 1e-4 if device == "cuda" else 1e-5


def causal_score(score, b, h, q_idx, kv_idx):          # score_mod: rewrites each score
    return torch.where(q_idx >= kv_idx, score, -float("inf"))


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    if device == "cuda":        # torch.compile generates the fused kernel (Triton)
        flex, by_score = compiled_or_eager(flex_attention, fq, fk, fv, score_mod=causal_score)
    else:                       # eager on the CPU: correct but unfused
        flex = flex_attention
        by_score = flex(fq, fk, fv, score_mod=causal_score)
if flex is flex_attention:
    assert any("torch.compile" in str(w.message) for w in caught)
    print("eager flex_attention warned once: unfused, it materialises the full score matrix")
else:
    print("flex_attention compiled by torch.compile into a fused kernel")
sdpa_causal = F.scaled_dot_product_attention(fq, fk, fv, is_causal=True)
torch.testing.assert_close(by_score, sdpa_causal, atol=ftol, rtol=ftol)
print(f"score_mod=causal_score matches SDPA is_causal=True, max |diff| "
      f"{(by_score - sdpa_causal).abs().max().item():.1e}")
# --8<-- [end:flex-score]


# --8<-- [start:flex-mask]
def causal(b, h, q_idx, kv_idx):                        # mask_mod: keep (True) or drop
    return q_idx >= kv_idx


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)


i = torch.arange(FS, device=device)
window = sliding_window(0, 0, i[:, None], i[None, :])   # the same mask, as an FS x FS tensor
with Allocations() as seen:
    sdpa_window = F.scaled_dot_product_attention(fq, fk, fv, attn_mask=window)
print(f"SDPA with the explicit {FS}x{FS} window mask ran {seen.kernel()}")
if device == "cpu":
    assert seen.kernel() == "_scaled_dot_product_flash_attention_for_cpu"

for name, mask_mod, expected in (("causal", causal, sdpa_causal),
                                 (f"sliding window {WINDOW}", sliding_window, sdpa_window)):
    block_mask = create_block_mask(mask_mod, None, None, FS, FS, device=device)
    out = flex(fq, fk, fv, block_mask=block_mask)
    torch.testing.assert_close(out, expected, atol=ftol, rtol=ftol)
    dense = mask_mod(0, 0, i[:, None], i[None, :])
    n = FS // 128                                       # 128 x 128 blocks by default
    kept = dense.view(n, 128, n, 128).any(dim=3).any(dim=1).sum().item()
    assert abs(block_mask.sparsity() - 100 * (1 - kept / n**2)) < 1e-9
    print(f"block mask {name:<18}: {kept:>2} of {n * n} blocks computed "
          f"(sparsity {block_mask.sparsity():.2f}%), matches SDPA, max |diff| "
          f"{(out - expected).abs().max().item():.1e}")
# --8<-- [end:flex-mask]
