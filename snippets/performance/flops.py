"""FLOPs of a training step, counted by FlopCounterMode and checked against 2N, 6N and 8N per
token; then MFU and HFU: achieved FLOP/s divided by a peak (measured here, or a datasheet's)."""
# snippet: timeout=120 cpu-independent
# The CPU profiles skip this file: what it asserts are FLOP counts, which FlopCounterMode
# derives from shapes alone; the timings and MFU it prints are never asserted.

import re
import statistics
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both

# --8<-- [start:model]
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.benchmark import Timer
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

VOCAB, D, HEADS, LAYERS, SEQ, BATCH = 128, 64, 4, 2, 32, 2


class Block(nn.Module):
    """A pre-norm decoder block. No Linear has a bias, so each weight is one matmul operand."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)   # 3d² weights
        self.proj = nn.Linear(d, d, bias=False)      # d²
        self.up = nn.Linear(d, 4 * d, bias=False)    # 4d²
        self.down = nn.Linear(4 * d, d, bias=False)  # 4d²: 12d² per block

    def forward(self, x):
        b, s, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (b, heads, s, d / heads)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab=VOCAB, d=D, heads=HEADS, layers=LAYERS, seq=SEQ):
        super().__init__()
        self.vocab, self.d, self.layers, self.seq = vocab, d, layers, seq
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)  # lookups
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)  # not tied to self.tok
        self.checkpointing = None  # or checkpoint()'s early_stop: True (its default) or False

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            if self.checkpointing is None:
                x = block(x)
            else:
                x = checkpoint(block, x, use_reentrant=False, early_stop=self.checkpointing)
        return self.head(self.ln(x))


def matmul_params(module: nn.Module) -> int:
    """N as this page uses it: the weights that enter a matmul (every Linear's)."""
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))
# --8<-- [end:model]


# --8<-- [start:count]
def batch_of(model: TinyGPT, batch: int):
    gen = torch.Generator().manual_seed(0)
    device = next(model.parameters()).device
    idx = torch.randint(0, model.vocab, (batch, model.seq), generator=gen).to(device)
    targets = torch.randint(0, model.vocab, (batch, model.seq), generator=gen).to(device)
    return idx, targets


def loss_of(model: TinyGPT, idx, targets):
    return F.cross_entropy(model(idx).flatten(0, 1).float(), targets.flatten())


def count_step(model: TinyGPT, batch: int, checkpointing: bool | None = None) -> dict:
    """Forward and backward FLOPs of one training step, as FlopCounterMode counts them."""
    model.checkpointing = checkpointing
    idx, targets = batch_of(model, batch)
    with FlopCounterMode(display=False) as fwd:
        loss = loss_of(model, idx, targets)
    with FlopCounterMode(display=False) as bwd:
        loss.backward()  # with checkpointing, the blocks' forward runs again in here
    model.zero_grad(set_to_none=True)
    model.checkpointing = None
    by_op = {str(op).removeprefix("aten."): n
             for op, n in fwd.get_flop_counts().get("Global", {}).items()}
    return {"forward": fwd.get_total_flops(), "backward": bwd.get_total_flops(),
            "by_op": by_op}


torch.manual_seed(0)
model = TinyGPT()
N = matmul_params(model)
N_blocks = matmul_params(model.blocks)
print(f"model: {LAYERS} blocks, d_model {D}, vocab {VOCAB}; batch {BATCH} × {SEQ} tokens")
print(f"parameters: {sum(p.numel() for p in model.parameters()):,} in all, "
      f"N = {N:,} in matmuls (blocks {N_blocks:,}, head {N - N_blocks:,})")
assert N_blocks == LAYERS * 12 * D * D and N - N_blocks == D * VOCAB

with sdpa_kernel(SDPBackend.MATH):  # attention as two bmm calls, which the counter knows
    plain = count_step(model, BATCH)
    ckpt = count_step(model, BATCH, checkpointing=True)         # early_stop=True, the default
    ckpt_full = count_step(model, BATCH, checkpointing=False)   # early_stop=False
print("forward FLOPs by operator:", ", ".join(f"{op} {n:,}" for op, n in plain["by_op"].items()))

default = count_step(model, BATCH)  # the kernel scaled_dot_product_attention picks on the CPU
print(f"with the default attention kernel: {default['forward']:,} forward FLOPs, "
      f"{plain['forward'] - default['forward']:,} fewer than with the math backend")
# --8<-- [end:count]


# --8<-- [start:formula]
def forward_formula(n: int, tokens: int, layers: int, seq: int, d: int) -> dict:
    """Forward FLOPs: 2 per weight per token, plus QKᵀ and AV over the full seq × seq scores."""
    return {"mm": 2 * n * tokens, "bmm": layers * 2 * (2 * seq * d) * tokens}


T = BATCH * SEQ
f = forward_formula(N, T, LAYERS, SEQ, D)
f_blocks = forward_formula(N_blocks, T, LAYERS, SEQ, D)  # what checkpointing can rerun
fwd, fwd_blocks = sum(f.values()), sum(f_blocks.values())
last_matmul = LAYERS * 2 * (4 * D * D) * T  # each block's `down`: its output is saved by no one
assert plain["by_op"] == f                        # forward: 2·N·T + attention, exactly
assert plain["backward"] == 2 * fwd               # backward: two matmuls per forward matmul
recompute = ckpt["backward"] - plain["backward"]
recompute_full = ckpt_full["backward"] - plain["backward"]
assert ckpt["forward"] == ckpt_full["forward"] == fwd
assert recompute_full == fwd_blocks               # every block's forward, once more
assert recompute == fwd_blocks - last_matmul      # early stop: not the block's last matmul

rows = [  # (what, counted, formula, the formula in words)
    ("forward", plain["forward"], fwd, "2NT + attention"),
    ("backward", plain["backward"], 2 * fwd, "2 × forward"),
    ("training step", plain["forward"] + plain["backward"], 3 * fwd, "3 × forward"),
    ("+ checkpointing", ckpt["forward"] + ckpt["backward"], 3 * fwd + recompute,
     "+ blocks' forward − last matmul"),
    ("  early_stop=False", ckpt_full["forward"] + ckpt_full["backward"], 3 * fwd + fwd_blocks,
     "+ blocks' forward"),
]
print(f"\n{'':<20}{'counted':>12}{'formula':>12}{'/ (N·T)':>9}  formula")
for what, counted, formula, words in rows:
    print(f"{what:<20}{counted:>12,}{formula:>12,}{counted / (N * T):>9.2f}  {words}")
    assert counted == formula
print(f"attention: {f['bmm'] / fwd:.1%} of the forward; a checkpointed step is "
      f"{rows[3][1] / rows[2][1]:.3f}× a plain one ({rows[4][1] / rows[2][1]:.3f}× without "
      f"early stop; 8N/6N = 1.333)")
# --8<-- [end:formula]


# --8<-- [start:peak]
def matmul_gflops(n: int, device: str, dtype=torch.float32) -> tuple[float, float]:
    """Achieved GFLOP/s of an n×n @ n×n matmul (2n³ FLOPs), and the seconds of one call."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    timer = Timer("a @ b", globals={"a": a, "b": b}, num_threads=torch.get_num_threads())
    seconds = timer.blocked_autorange(min_run_time=0.1).median
    return 2 * n**3 / seconds / 1e9, seconds


def measured_peak(device: str, call_budget: float = 0.1) -> tuple[float, int]:
    """The best rate over growing sizes, as ../gpu/benchmark.md measures it. From n = 512 on,
    a call's time grows like n³, so a size whose call would pass the budget is not tried."""
    best, last = (0.0, 0), None
    for n in (256, 512, 1024, 2048, 4096):
        if last and last[0] >= 512 and last[1] * (n / last[0]) ** 3 > call_budget:
            break
        gflops, seconds = matmul_gflops(n, device)
        best, last = max(best, (gflops, n)), (n, seconds)
    return best


peak_gflops, peak_n = measured_peak("cpu")
print(f"\nthis CPU's peak, measured: {peak_gflops:,.1f} GFLOP/s "
      f"(float32 matmul, n = {peak_n}, {torch.get_num_threads()} threads)")
assert peak_gflops > 0
# --8<-- [end:peak]


# --8<-- [start:mfu]
def seconds_per_step(model, batch: int, modes=(None,), budget=0.2) -> list[float]:
    """Median time of a training step (AdamW included) for each checkpointing mode.

    The modes take turns, step by step, so a machine that slows down midway slows all of
    them; the first round is a warm-up."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx, targets = batch_of(model, batch)
    sync = torch.cuda.synchronize if idx.is_cuda else (lambda: None)
    times = {mode: [] for mode in modes}
    while len(times[modes[0]]) < 4 or (
            sum(map(sum, times.values())) < budget and len(times[modes[0]]) < 20):
        for mode in modes:
            model.checkpointing = mode
            sync()
            start = time.perf_counter()
            loss_of(model, idx, targets).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            sync()
            times[mode].append(time.perf_counter() - start)
    model.checkpointing = None
    return [statistics.median(times[mode][1:]) for mode in modes]


peak = peak_gflops * 1e9
print(f"\n{'':>13}{'plain step':>19}{'every block checkpointed':>30}")
print(f"{'batch':>5}{'tokens':>8}{'time':>11}{'MFU':>8}{'time':>11}{'MFU':>8}{'HFU':>8}"
      f"{'HFU/MFU':>9}")
results, step_budget = [], 0.1
for batch in (2, 8, 32, 128, 512):
    if results and results[-1]["seconds"] * batch / results[-1]["batch"] > step_budget:
        break  # the next size's step would take too long on this machine
    with sdpa_kernel(SDPBackend.MATH):
        plain_b, ckpt_b = count_step(model, batch), count_step(model, batch, checkpointing=True)
    model_flops = plain_b["forward"] + plain_b["backward"]    # the model's: no recompute
    hardware_flops = ckpt_b["forward"] + ckpt_b["backward"]   # what the CPU computes
    assert model_flops == 3 * sum(forward_formula(N, batch * SEQ, LAYERS, SEQ, D).values())
    seconds, seconds_ckpt = seconds_per_step(model, batch, modes=(None, True))
    mfu, mfu_ckpt = model_flops / seconds / peak, model_flops / seconds_ckpt / peak
    hfu_ckpt = hardware_flops / seconds_ckpt / peak
    results.append({"batch": batch, "seconds": seconds, "mfu": mfu})
    print(f"{batch:>5}{batch * SEQ:>8}{seconds * 1e3:>9.2f}ms{mfu:>8.1%}"
          f"{seconds_ckpt * 1e3:>9.2f}ms{mfu_ckpt:>8.1%}{hfu_ckpt:>8.1%}"
          f"{hfu_ckpt / mfu_ckpt:>9.3f}")
    assert abs(hfu_ckpt / mfu_ckpt - hardware_flops / model_flops) < 1e-9
# --8<-- [end:mfu]


# --8<-- [start:datasheet]
# NVIDIA's H100 SXM and H200 SXM datasheets print their Tensor Core rates "with sparsity"
# (2:4 structured sparsity); a dense matmul, the kind training runs, gets half of that.
SPARSE_TFLOPS = {"bf16": 1979, "fp8": 3958}           # both datasheets, SXM columns
DENSE_TFLOPS = {dtype: tf / 2 for dtype, tf in SPARSE_TFLOPS.items()}
print(f"\nH100 SXM / H200 SXM datasheet, dense: bf16 {DENSE_TFLOPS['bf16']:,g} TFLOPS, "
      f"fp8 {DENSE_TFLOPS['fp8']:,g} TFLOPS (the sheets print {SPARSE_TFLOPS['bf16']:,} "
      f"and {SPARSE_TFLOPS['fp8']:,} with sparsity)")
assert DENSE_TFLOPS == {"bf16": 989.5, "fp8": 1979}


def datasheet_peak(name: str, dtype: str) -> float | None:
    """Dense FLOP/s for an H100 or H200 in its SXM form; None for any other GPU."""
    hopper = re.search(r"\bH[12]00\b", name) is not None  # not "GH200", another product
    other_board = any(word in name for word in ("PCIe", "NVL"))  # lower clocks, other figures
    return DENSE_TFLOPS[dtype] * 1e12 if hopper and not other_board else None


if torch.cuda.is_available():
    name = torch.cuda.get_device_name()
    torch.manual_seed(0)
    gpu = TinyGPT(vocab=8192, d=1024, heads=16, layers=4, seq=1024).cuda().bfloat16()
    n_gpu, batch = matmul_params(gpu), 8
    tokens = batch * gpu.seq
    model_flops = 3 * sum(forward_formula(n_gpu, tokens, gpu.layers, gpu.seq, gpu.d).values())
    counted = count_step(gpu, batch)  # the GPU's default attention kernel
    seconds, = seconds_per_step(gpu, batch, budget=0.5)
    achieved = model_flops / seconds
    print(f"{name}: bf16, N = {n_gpu:,}, {tokens:,} tokens a step, step {seconds * 1e3:.2f} ms,"
          f" {achieved / 1e12:.1f} TFLOP/s of model FLOPs")
    print(f"  counted with the default attention kernel: "
          f"{counted['forward'] + counted['backward']:,}; model FLOPs: {model_flops:,}")
    peak = datasheet_peak(name, "bf16")
    if peak is None:
        print(f"  MFU: no datasheet peak for '{name}' in this snippet")
    else:
        print(f"  MFU against the dense bf16 datasheet peak: {achieved / peak:.1%}")
else:
    print("GPU MFU against a datasheet peak: not run here, no CUDA device")
# --8<-- [end:datasheet]


# --8<-- [start:example]
N_7B, SEQ_7B, SEQUENCES = 7 * 10**9, 4096, 256
tokens_7b = SEQUENCES * SEQ_7B                       # 1,048,576 tokens a step
flops_7b = 6 * N_7B * tokens_7b                      # 6N per token, no recompute
h100 = DENSE_TFLOPS["bf16"] * 1e12
seconds_7b = flops_7b / (0.40 * h100)                # at 40% MFU, one H100 SXM
print(f"\n7B model, {SEQUENCES} sequences of {SEQ_7B}: {tokens_7b:,} tokens, "
      f"6N·T = {flops_7b:.4e} FLOPs a step")
print(f"one H100 SXM at 40% MFU ({0.40 * DENSE_TFLOPS['bf16']:.1f} TFLOP/s): "
      f"{seconds_7b:.1f} s a step; 8 of them at the same MFU: {seconds_7b / 8:.1f} s")
assert tokens_7b == 2**20 and flops_7b == 44_040_192 * 10**9
assert abs(seconds_7b * 0.40 * h100 - flops_7b) < 1e-6 * flops_7b

L_7B, D_7B = 32, 4096                                # a typical 7B shape: 32 layers of 4096
attention_7b = 12 * L_7B * SEQ_7B * D_7B * tokens_7b  # 3 × (QKᵀ and AV) for the whole step
print(f"attention products, 12·L·S·d per token: +{attention_7b / flops_7b:.1%}; "
      f"full recompute at 40% MFU means an HFU of {0.40 * 8 / 6:.1%}")
assert attention_7b == 12 * 32 * 4096 * 4096 * 2**20
# --8<-- [end:example]


# --8<-- [start:figure]
LABELS = {
    "en": {"bars": ["forward\nonly", "training\nstep", "checkpointed\n(default)",
                    "checkpointed\nearly_stop=False"],
           "parts": ["forward", "backward", "recompute"],
           "y": f"MFLOP (batch {BATCH} × {SEQ} tokens)",
           "title": "FLOPs counted by FlopCounterMode, against multiples of N·T"},
    "zh": {"bars": ["只做\n前向计算", "训练\n一步", "激活检查点\n（默认）",
                    "激活检查点\nearly_stop=False"],
           "parts": ["前向计算", "反向传播", "重算"],
           "y": f"MFLOP（{BATCH} 条序列 × 每条 {SEQ} 个 token）",
           "title": "FlopCounterMode 计出的 FLOPs 与 N·T 的倍数"},
}
stacks = [  # forward, backward, recompute: the counts above, in FLOPs
    (plain["forward"], 0, 0),
    (plain["forward"], plain["backward"], 0),
    (ckpt["forward"], plain["backward"], recompute),
    (ckpt_full["forward"], plain["backward"], recompute_full),
]


def draw(fig, text):
    ax = fig.add_subplot()
    bottoms = [0.0] * len(stacks)
    for i, (part, color) in enumerate(zip(text["parts"], ("C0", "C1", "C3"))):
        heights = [s[i] / 1e6 for s in stacks]
        ax.bar(text["bars"], heights, bottom=bottoms, color=color, label=part, width=0.6)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for k, style in ((2, ":"), (6, "--"), (8, "-.")):
        ax.axhline(k * N * T / 1e6, color="gray", linestyle=style, linewidth=1)
        ax.text(3.4, k * N * T / 1e6, f"{k}N·T", va="center", fontsize="small")
    ax.set(ylabel=text["y"], title=text["title"], xlim=(-0.5, 3.85))
    ax.legend(loc="upper left", fontsize="small")


draw_both("flops", LABELS, draw, figsize=(7.2, 4))
# --8<-- [end:figure]
