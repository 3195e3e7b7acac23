"""Mixed precision: float16, bfloat16, autocast, gradient scaling and TF32, run on any device."""

import os
import re
import sys
import warnings

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
print("device:", device, "| torch:", torch.__version__)

# --8<-- [start:finfo]
print(f"{'dtype':<15}{'bits':>5}{'max':>12}{'tiny (normal)':>15}{'eps':>12}")
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    info = torch.finfo(dtype)
    print(f"{str(dtype):<15}{info.bits:>5}{info.max:>12.4g}{info.tiny:>15.4g}"
          f"{info.eps:>12.4g}")
f32, f16, bf16 = (torch.finfo(t) for t in (torch.float32, torch.float16, torch.bfloat16))
assert (f16.max, f16.tiny, f16.eps) == (65504.0, 2.0**-14, 2.0**-10)
subnormal = torch.tensor([2.0**-24, 2.0**-25]).half()  # float16's smallest step
assert subnormal[0] == 2.0**-24 and subnormal[1] == 0
assert f32.eps == 2.0**-23 and bf16.eps == 2.0**-7  # 23 vs 7 stored mantissa bits
assert bf16.tiny == f32.tiny == 2.0**-126             # the same 8-bit exponent ...
assert bf16.max > 3.3e38 and f32.max > 3.4e38         # ... so the same range
# --8<-- [end:finfo]

# --8<-- [start:underflow]
grad = torch.tensor([1e-3, 1e-6, 1e-8, 1e-9])      # true gradients, float32
print("float32 :", grad.tolist())
print("float16 :", grad.half().float().tolist())    # what a float16 tensor keeps
scale = 2.0**16                                     # GradScaler's default init_scale
scaled = (grad * scale).half()                      # the backward pass sees these
print("scaled  :", scaled.float().tolist())
print("unscaled:", (scaled.float() / scale).tolist())
assert grad.half()[2:].eq(0).all()                  # 1e-8 and 1e-9 are lost
assert scaled.ne(0).all()                           # all four survive scaling
rel = (scaled.float() / scale - grad).abs() / grad
assert rel.max() < 2.0**-10                          # float16 rounding, nothing lost
print("bfloat16:", grad.bfloat16().float().tolist())
assert grad.bfloat16().ne(0).all()                   # bfloat16 keeps all four
print("70000 as float16:", torch.tensor(70000.0).half().item(),
      "| as bfloat16:", torch.tensor(70000.0).bfloat16().item())
assert torch.tensor(70000.0).half().isinf() and torch.tensor(70000.0).bfloat16().isfinite()
# --8<-- [end:underflow]


# --8<-- [start:scaler]
def weight_grad(dtype, scaler=None):
    """Gradient of a tiny loss for one Linear layer under autocast on `device`."""
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 64, device=device)
    with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
        out = model(x)                              # float16/bfloat16 under autocast
        loss = out.float().pow(2).mean() * 1e-6     # a small loss: small gradients
    if scaler is None:
        loss.backward()
    else:
        scaler.scale(loss).backward()               # backward of loss * scale
        scaler.unscale_(opt)                        # grads divided back, in float32
        scaler.step(opt)                            # skipped if any grad is inf/nan
        scaler.update()
    return model.weight.grad


reference = weight_grad(torch.float32)
plain = weight_grad(torch.float16)
scaler = torch.amp.GradScaler(device)               # init_scale=2.0**16
scaled = weight_grad(torch.float16, scaler)
bf = weight_grad(torch.bfloat16)
def rel_error(g):
    return ((g - reference).norm() / reference.norm()).item()


def zeros(g):
    return g.eq(0).float().mean().item()


for name, g in [("float32", reference), ("float16", plain),
                ("float16 + GradScaler", scaled), ("bfloat16", bf)]:
    print(f"{name:<21} zero grads: {zeros(g):7.2%}  relative error: {rel_error(g):.2e}")
print("scale after the step:", scaler.get_scale())
assert zeros(reference) == 0 and zeros(plain) > 0.5     # float16 lost most of them
assert zeros(scaled) < 0.01 and rel_error(scaled) < 1e-2  # float16 rounding only
assert zeros(bf) < 0.01 and rel_error(bf) < 5e-2          # bfloat16 rounding only
assert scaler.get_scale() == 2.0**16
# --8<-- [end:scaler]

# --8<-- [start:skip]
model = torch.nn.Linear(4, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler(device, init_scale=1024.0)
before = model.weight.detach().clone()
loss = model(torch.ones(2, 4, device=device)).sum() * float("inf")  # an overflow
scaler.scale(loss).backward()
scaler.step(opt)                                    # sees inf: skips opt.step()
scaler.update()                                     # and halves the scale
print("weights unchanged:", torch.equal(model.weight, before),
      "| scale 1024 ->", scaler.get_scale())
assert torch.equal(model.weight, before) and scaler.get_scale() == 512.0
if not torch.cuda.is_available():                   # a CUDA scaler without CUDA:
    with warnings.catch_warnings(record=True):      # it warns and switches itself off
        warnings.simplefilter("always")
        assert not torch.amp.GradScaler("cuda").is_enabled()
# --8<-- [end:skip]

# --8<-- [start:autocast]
x = torch.randn(8, 16)
w = torch.randn(4, 16)
target = torch.randint(0, 4, (8,))
with torch.autocast("cpu", dtype=torch.bfloat16):
    logits = torch.nn.functional.linear(x, w)       # lower-precision list
    mm = x @ x.T
    ce = torch.nn.functional.cross_entropy(logits, target)  # float32 list
    mse = torch.nn.functional.mse_loss(logits, torch.zeros_like(logits))
    total = logits + x[:, :4]                       # not listed: type promotion
    soft = torch.softmax(logits, dim=-1)            # not listed on the CPU
for name, t in [("linear", logits), ("matmul", mm), ("cross_entropy", ce),
                ("mse_loss", mse), ("bf16 + fp32 add", total), ("softmax", soft)]:
    print(f"autocast cpu  {name:<16} -> {t.dtype}")
assert logits.dtype == mm.dtype == torch.bfloat16
assert ce.dtype == mse.dtype == torch.float32
assert total.dtype == torch.float32                 # bf16 + fp32 promotes
assert soft.dtype == torch.bfloat16                 # follows its bf16 input
assert x.dtype == w.dtype == torch.float32          # the inputs are not changed
if device == "cuda":                                # CUDA: float16, softmax in float32
    xc = x.to(device)
    with torch.autocast("cuda", dtype=torch.float16):
        lc = torch.nn.functional.linear(xc, w.to(device))
        sc = torch.softmax(lc, dim=-1)
    print("autocast cuda linear ->", lc.dtype, "| softmax ->", sc.dtype)
    assert lc.dtype == torch.float16 and sc.dtype == torch.float32
else:
    print("autocast cuda: not run, no CUDA device")
# --8<-- [end:autocast]


# --8<-- [start:tf32]
def matmul_error(precision: str, dev: str) -> float:
    """Largest error of a float32 matmul against float64, at one precision setting."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        gen = torch.Generator().manual_seed(0)
        a, b = (torch.randn(512, 512, generator=gen) for _ in range(2))
        exact = a.double() @ b.double()
        out = (a.to(dev) @ b.to(dev)).cpu()
        assert out.dtype == torch.float32           # the dtype never changes
        return (out.double() - exact).abs().max().item()
    finally:
        torch.set_float32_matmul_precision(before)


# The default, unless TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes it "high" (ATen/Context.h)
override = os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1"
print("default precision:", torch.get_float32_matmul_precision(),
      "| TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1:", override)
assert torch.get_float32_matmul_precision() == ("high" if override else "highest")
errors = {p: matmul_error(p, "cpu") for p in ("highest", "high", "medium")}
print("CPU float32 matmul, max error vs float64:",
      {p: f"{e:.1e}" for p, e in errors.items()})
assert errors["highest"] < 1e-3                      # float32 accuracy
cpu_flags = ""
if sys.platform == "linux":
    with open("/proc/cpuinfo") as info:
        cpu_flags = info.read()
if sys.platform == "linux" and not re.search(r"\bamx_fp16\b", cpu_flags):
    assert errors["high"] < 1e-3                     # no TF32 on this CPU
print("'medium' used bfloat16 inside this CPU matmul:", errors["medium"] > 1e-2)
if device == "cuda":
    major, minor = torch.cuda.get_device_capability()
    gpu = {p: matmul_error(p, "cuda") for p in ("highest", "high")}
    print(f"GPU sm_{major}{minor} max error:", {p: f"{e:.1e}" for p, e in gpu.items()})
    assert gpu["highest"] < 1e-3
else:
    print("GPU TF32 comparison: not run, no CUDA device")
# --8<-- [end:tf32]
