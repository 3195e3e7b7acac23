"""Low precision beyond bf16: FP8 (E4M3, E5M2), scaling, MX blocks, torchao's Float8Linear.

The formats and the scalings run on CPU tensors, so their numbers are the same on every
machine: a cast to an 8-bit float is a bit-exact operation, power-of-two scales are exact, and
the test tensor comes from torch.rand, whose values are exact multiples of 2**-24. torchao's
float8 training swap runs on the CPU as well (torch 2.13 has a CPU kernel for torch._scaled_mm),
or on a GPU of compute capability 8.9 or newer, where FP8 matmuls run in hardware; only there
the script also times an FP8 matmul against bf16. Elsewhere that part prints one line.
"""
# snippet: timeout=120

# --8<-- [start:formats]
import math
import sys
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both  # noqa: E402

device = "cuda" if torch.cuda.is_available() else "cpu"
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
LAYOUT = {E4M3: (4, 3, 7), E5M2: (5, 2, 15)}  # exponent bits, mantissa bits, exponent bias


def all_values(dtype: torch.dtype) -> torch.Tensor:
    """The 256 bit patterns of an 8-bit format, read as numbers."""
    return torch.arange(256, dtype=torch.uint8).view(dtype).float()


print(f"{'format':<15}{'s/e/m':>6}{'bias':>6}{'max':>8}{'min normal':>12}"
      f"{'min subnormal':>15}{'eps':>7}{'finite':>8}{'NaN':>5}{'inf':>5}")
for dtype in (E4M3, E5M2):
    fi, v = torch.finfo(dtype), all_values(dtype)
    e, m, bias = LAYOUT[dtype]
    finite = v[v.isfinite()]
    print(f"{str(dtype)[6:]:<15}{f'1/{e}/{m}':>6}{bias:>6}{fi.max:>8g}{fi.smallest_normal:>12.3g}"
          f"{finite[finite > 0].min().item():>15.3g}{fi.eps:>7g}{len(finite):>8}"
          f"{int(v.isnan().sum()):>5}{int(v.isinf().sum()):>5}")
    assert fi.bits == 1 + e + m and fi.eps == 2.0**-m
    assert fi.smallest_normal == 2.0 ** (1 - bias)
    assert finite[finite > 0].min() == 2.0 ** (1 - bias - m)  # the smallest subnormal
    assert finite.max() == fi.max

# E5M2 keeps IEEE's rule: the top exponent is inf and NaN, so its largest number is
# 1.75 * 2**(30 - 15). E4M3 "fn" (finite, NaN) gives that exponent back to numbers and keeps
# only S.1111.111 as NaN, so its largest is 1.75 * 2**(15 - 7) (1.875 would be the NaN pattern).
assert torch.finfo(E5M2).max == 1.75 * 2.0**15 == 57344
assert torch.finfo(E4M3).max == 1.75 * 2.0**8 == 448
assert [int(all_values(d).isnan().sum()) for d in (E4M3, E5M2)] == [2, 6]
assert [int(all_values(d).isinf().sum()) for d in (E4M3, E5M2)] == [0, 2]
# --8<-- [end:formats]


# --8<-- [start:rounding]
# torch 2.12 made casts past E4M3's largest number saturate (PR #178817); the site also supports
# 2.11 (README), where they did not: there only the values within range are asserted.
SATURATES = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 12)
values = torch.tensor([0.1, 1 / 3, 300.0, 449.0, 1000.0])
expected = {E4M3: [0.1015625, 0.34375, 288.0, 448.0, 448.0],
            E5M2: [0.09375, 0.3125, 320.0, 448.0, 1024.0]}
print(f"\n{'value':<15}" + "".join(f"{v:>10.4g}" for v in values.tolist()))
for dtype in (E4M3, E5M2):
    got = values.to(dtype).float().tolist()
    print(f"{str(dtype)[6:]:<15}" + "".join(f"{v:>10.7g}" for v in got))
    assert got == expected[dtype] if SATURATES else got[:3] == expected[dtype][:3]

# Beyond the largest number: torch 2.13 saturates E4M3 (no inf to go to), E5M2 gives inf.
special = torch.tensor([1e5, float("inf"), float("nan")])
bits = {E4M3: [0x7E, 0x7E, 0x7F], E5M2: [0x7C, 0x7C, 0x7F]}  # 448, 448, NaN / inf, inf, NaN
print(f"\n{'value':<15}" + "".join(f"{v:>10g}" for v in special.tolist()))
for dtype in (E4M3, E5M2):
    cast = special.to(dtype)
    print(f"{str(dtype)[6:]:<15}" + "".join(f"{v:>10g}" for v in cast.float().tolist())
          + "   bits " + " ".join(f"{b:#04x}" for b in cast.view(torch.uint8).tolist()))
    assert cast.view(torch.uint8).tolist() == bits[dtype] or not SATURATES
if not SATURATES:
    print(f"torch {torch.__version__}: before 2.12 these casts did not saturate; not asserted here")
# --8<-- [end:rounding]


# --8<-- [start:grid]
grid = {}
for dtype in (E4M3, E5M2):
    v = all_values(dtype)
    grid[dtype] = v[v.isfinite() & (v > 0)]
    assert torch.equal(grid[dtype], grid[dtype].sort().values)  # bit order is number order
span = {d: math.log2(g.max() / g.min()) for d, g in grid.items()}
print(f"\npositive values: E4M3 {len(grid[E4M3])} over 2^{span[E4M3]:.1f}, "
      f"E5M2 {len(grid[E5M2])} over 2^{span[E5M2]:.1f}")
assert (len(grid[E4M3]), len(grid[E5M2])) == (126, 123)
labels = {
    "en": {"title": "Every positive number of the two FP8 formats",
           "rows": [f"E5M2\n{len(grid[E5M2])} values", f"E4M3\n{len(grid[E4M3])} values"],
           "normal": "normal", "subnormal": "subnormal", "x": "value (log scale)"},
    "zh": {"title": "两种 FP8 格式能表示的全部正数",
           "rows": [f"E5M2\n{len(grid[E5M2])} 个", f"E4M3\n{len(grid[E4M3])} 个"],
           "normal": "规格化数", "subnormal": "非规格化数", "x": "数值（对数坐标）"},
}


def draw(fig, lab):
    ax = fig.add_subplot()
    for row, dtype in enumerate((E5M2, E4M3)):
        v = grid[dtype]
        low = v < torch.finfo(dtype).smallest_normal
        ax.vlines(v[~low], row - 0.35, row + 0.35, color="tab:blue", lw=0.8,
                  label=lab["normal"] if row == 0 else None)
        ax.vlines(v[low], row - 0.35, row + 0.35, color="tab:orange", lw=0.8,
                  label=lab["subnormal"] if row == 0 else None)
        ax.annotate(f"{v.max().item():g}", (v.max().item(), row + 0.38), ha="center", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yticks([0, 1], lab["rows"])
    ax.set_ylim(-0.6, 1.7)
    ax.set_xlabel(lab["x"])
    ax.set_title(lab["title"])
    ax.legend(loc="upper left", fontsize=8)


draw_both("fp8_grid", labels, draw, figsize=(7.0, 2.8))
# --8<-- [end:grid]


# --8<-- [start:scaling]
def pow2_scale(amax: torch.Tensor, fmt_max: float) -> torch.Tensor:
    """The largest power of two s with amax * s <= fmt_max, from the exponents alone (exact)."""
    m, e = torch.frexp(amax)  # amax = m * 2**e, 0.5 <= m < 1
    fm, fe = math.frexp(fmt_max)  # 448 = 0.875 * 2**9
    return torch.ldexp(torch.ones_like(amax), fe - e - (m > fm).int())


def fp8_scaled(x, dtype=E4M3, group=None):
    """Scale, cast, cast back, unscale: what a matmul would see. group=None: one scale for
    the tensor; "row": one per row; an int: one per block of that many elements of a row."""
    fmt_max = torch.finfo(dtype).max
    if group in (None, "row"):
        amax = x.abs().max() if group is None else x.abs().amax(dim=1, keepdim=True)
        s = pow2_scale(amax, fmt_max)
        return (x * s).to(dtype).float() / s
    blocks = x.reshape(x.shape[0], -1, group)  # MX: 32 elements share a power-of-two scale
    s = pow2_scale(blocks.abs().amax(dim=-1, keepdim=True), fmt_max)
    scale_e8m0 = (1 / s).to(torch.float8_e8m0fnu)  # one byte per block: just an exponent
    assert torch.equal(scale_e8m0.float(), 1 / s)  # exact: powers of two are all it holds
    return ((blocks * s).to(dtype).float() * scale_e8m0.float()).reshape(x.shape)


E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6])  # FP4's eight magnitudes; index = bit code


def e2m1_codes(v: torch.Tensor) -> torch.Tensor:
    """Round to the nearest E2M1 value, ties to an even code, saturating at 6: 4-bit codes."""
    mag = v.abs()[..., None]
    down = torch.tensor([0.25, 1.25, 2.5, 5.0])  # a tie here goes down to the even code
    up = torch.tensor([0.75, 1.75, 3.5])  # a tie here goes up to the even code
    code = (mag > down).sum(-1) + (mag >= up).sum(-1)
    return code | (v < 0).long() << 3  # bit 3 is the sign


def fp4_scaled(x, block=None):
    """block=None: FP4 with one power-of-two scale per tensor. block=16: NVFP4, one E4M3
    scale per 16 values under one float32 scale per tensor, values packed two to a byte."""
    if block is None:
        s = pow2_scale(x.abs().max(), 6.0)
        codes, descale = e2m1_codes(x * s), 1 / s
    else:
        blocks = x.reshape(x.shape[0], -1, block)
        tensor_scale = x.abs().max() / (448 * 6)  # so the largest block scale lands on 448
        block_scale = (blocks.abs().amax(-1, keepdim=True) / 6 / tensor_scale).to(E4M3)
        descale = block_scale.float() * tensor_scale
        codes = e2m1_codes(torch.where(descale > 0, blocks / descale, 0.0))
    packed = (codes[..., 0::2] | codes[..., 1::2] << 4).to(torch.uint8)
    packed = packed.view(torch.float4_e2m1fn_x2)  # torch stores it, but cannot cast to it
    assert packed.numel() * packed.element_size() == x.numel() // 2
    nibbles = packed.view(torch.uint8).long()
    codes = torch.stack([nibbles & 15, nibbles >> 4], dim=-1).flatten(-2)  # unpack
    values = E2M1[codes & 7] * (1 - 2 * (codes >> 3))
    return (values * descale).reshape(x.shape)


schemes = {  # name: (bits per value for a 64 x 256 tensor, function)
    "E4M3 tensor": (8 + 32 / 16384, lambda x: fp8_scaled(x)),
    "E4M3 row": (8 + 32 / 256, lambda x: fp8_scaled(x, group="row")),
    "MXFP8": (8 + 8 / 32, lambda x: fp8_scaled(x, group=32)),
    "E5M2 tensor": (8 + 32 / 16384, lambda x: fp8_scaled(x, E5M2)),
    "FP4 tensor": (4 + 32 / 16384, lambda x: fp4_scaled(x)),
    "NVFP4": (4 + 8 / 16 + 32 / 16384, lambda x: fp4_scaled(x, block=16)),
}
bulk = torch.rand(64, 256, generator=torch.Generator().manual_seed(0)) * 4 - 2  # [-2, 2)
ordinary = torch.ones_like(bulk, dtype=torch.bool)
ordinary[5, 40] = False  # where the outlier goes
print(f"\nrelative error of the {int(ordinary.sum()):,} ordinary values, and how many became 0")
print(f"{'outlier':<8}" + "".join(f"{name:>14}" for name in schemes))
print(f"{'bits':<8}" + "".join(f"{bits:>14.3f}" for bits, _ in schemes.values()))
errors = {}
for outlier in (None, 1e3, 1e5):
    x = bulk.clone()
    if outlier:
        x[5, 40] = outlier
    row = f"{outlier:<8g}" if outlier else f"{'none':<8}"
    for name, (_, quantize) in schemes.items():
        q = quantize(x)
        errors[outlier, name] = err = q - x
        rel = (err[ordinary].norm() / x[ordinary].norm()).item()
        row += f"{rel:>8.2%} {int(((q == 0) & ordinary).sum()):>5}"
    print(row)

    # With power-of-two scales, a finer group's grid contains the coarser one's points
    # (in range), so no element can get worse: checked element by element.
    t, r, b = (errors[outlier, n].abs() for n in ("E4M3 tensor", "E4M3 row", "MXFP8"))
    assert (b <= r).all() and (r <= t).all()


def total(outlier, name):
    return errors[outlier, name][ordinary].norm().item()


assert total(1e5, "E4M3 tensor") > total(1e5, "E4M3 row") > total(1e5, "MXFP8")
assert total(None, "E5M2 tensor") > total(None, "E4M3 tensor")  # one mantissa bit less
assert total(1e5, "E5M2 tensor") < total(1e5, "E4M3 tensor")  # but 2^14 more range
assert total(1e3, "NVFP4") < total(1e3, "FP4 tensor") == bulk[ordinary].norm().item()
# --8<-- [end:scaling]


# --8<-- [start:speed]
def native_fp8(dev: str) -> bool:
    """FP8 tensor-core matmuls on NVIDIA: compute capability 8.9 (Ada) and 9.0 (Hopper) onward.
    A ROCm build also reports "cuda" devices, with AMD's own version numbers: not measured here."""
    return (dev == "cuda" and torch.version.cuda is not None
            and torch.cuda.get_device_capability() >= (8, 9))


def gpu_ms(fn, reps: int = 10) -> float:
    fn()  # warm-up: cuBLAS picks its kernel
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


if native_fp8(device):
    print(f"{torch.cuda.get_device_name()}, compute capability "
          f"{'.'.join(map(str, torch.cuda.get_device_capability()))}")
    one = torch.ones((), device="cuda")  # per-tensor scales: float32 scalars
    for n in (2048, 4096, 8192):
        a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        a8, b8 = a.to(E4M3), b.to(E4M3).T  # _scaled_mm wants its second operand column-major
        a16, b16 = a.bfloat16(), b.bfloat16().T
        ms8 = gpu_ms(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                              out_dtype=torch.bfloat16, use_fast_accum=True))
        ms16 = gpu_ms(lambda: a16 @ b16)
        print(f"n={n}: FP8 {2 * n**3 / ms8 / 1e9:6.0f} TFLOP/s, bf16 {2 * n**3 / ms16 / 1e9:6.0f}"
              f" TFLOP/s, FP8 {ms16 / ms8:.2f}x as fast")
        if 10 * ms16 > 200:  # budget: stop before one size's timing passes 0.2 s
            break
else:
    why = ("no CUDA device" if device == "cpu"
           else "a ROCm build: this comparison is written for NVIDIA GPUs" if torch.version.hip
           else "this GPU has no FP8 tensor cores (below 8.9)")
    print(f"FP8 matmul timing (torch._scaled_mm against bf16): not run here, {why}")
# --8<-- [end:speed]


# --8<-- [start:import]
import contextlib
import logging


@contextlib.contextmanager
def loggers_at_error(*names: str):
    """Raise the named loggers to ERROR inside the block: their warnings are dropped, their
    errors (and every exception) still come through; other loggers are untouched."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


# torchao 0.18 registers an Enum with torch.utils._pytree.register_constant; torch 2.13 logs
# a deprecation warning for that on its logger "torch.utils._pytree" (logging, not warnings).
quiet = ["torch.utils._pytree"]
if torch.version.cuda is None and torch.version.hip is None:
    # torchao/__init__.py loads its compiled extensions (_C_mxfp8, _C_cutlass_90a) and logs each
    # failure as a warning on the logger "torchao". They link libtorch_cuda.so, which a CPU-only
    # torch does not ship, and only GPU kernels (MXFP8 casts, CUTLASS for sm_90a) live there.
    quiet.append("torchao")
try:
    with loggers_at_error(*quiet):
        import torchao
        from torchao.float8 import convert_to_float8_training
except ImportError as error:  # a GPU box or a notebook without it: the rest needs torchao
    print(f"torchao's Float8Linear: not run here, {error} (pip install torchao==0.18.0)")
    raise SystemExit(0)
print(f"torchao {torchao.__version__}")
# --8<-- [end:import]


# --8<-- [start:convert]
from collections import Counter

from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode


fp8_device = "cuda" if native_fp8(device) else "cpu"  # torch._scaled_mm also runs on a CPU


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(fp8_device)


def dims_multiple_of_16(module: nn.Module, fqn: str) -> bool:
    """module_filter_fn: called with each nn.Linear and its name; True means convert it."""
    return module.in_features % 16 == 0 and module.out_features % 16 == 0


model = make_model()
fp8_model = convert_to_float8_training(make_model(), module_filter_fn=dims_multiple_of_16)
print(fp8_model)
assert type(fp8_model[0]).__name__ == "Float8Linear" and type(fp8_model[2]) is nn.Linear
assert fp8_model[0].weight.dtype == torch.float32  # the parameter itself stays float32
config = fp8_model[0].config
for role in ("input", "weight", "grad_output"):
    cast = getattr(config, f"cast_config_{role}")
    print(f"  {role:<12}{str(cast.target_dtype):<22}{cast.scaling_type.value} "
          f"{cast.scaling_granularity.value}")
assert [getattr(config, f"cast_config_{r}").target_dtype
        for r in ("input", "weight", "grad_output")] == [E4M3, E4M3, E5M2]


class AtenOps(TorchDispatchMode):
    """Records the name of every ATen operation that runs inside the block."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1)).to(fp8_device)
for name, layer in (("nn.Linear", model[0]), ("Float8Linear", fp8_model[0])):
    with torch.no_grad(), AtenOps() as ops:
        layer(x)
    counts = Counter(ops.names)
    print(f"{name} forward: {len(ops.names)} ATen ops: "
          + ", ".join(f"{op} x{n}" if n > 1 else op for op, n in counts.items()))
assert counts["mm"] == 1 and counts["abs"] == counts["max"] == 2  # an amax per operand
# --8<-- [end:convert]


# --8<-- [start:accuracy]
def cast_error(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per element, the most that a cast with a per-tensor scale (max / amax) can move t."""
    fi = torch.finfo(dtype)
    scale = fi.max / t.abs().max()
    u = fi.eps / 2  # round to nearest: at most half a step, relative to the value
    return u * torch.clamp(t.abs(), min=fi.smallest_normal / scale)  # subnormals: fixed step


def matmul_error(a, b, da, db):
    """Bound on |a8 @ b8.T - a @ b.T| when |a8 - a| <= da and |b8 - b| <= db, per element."""
    rounding = da @ (b.abs() + db).T + a.abs() @ db.T
    sum_rounding = a.shape[1] * 2.0**-12 * ((a.abs() + da) @ (b.abs() + db).T)  # generous
    return rounding + sum_rounding


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


w1, w2 = model[0].weight.detach(), model[2].weight.detach()
with torch.no_grad():
    h, h8 = model[0](x), fp8_model[0](x)
    y, y8 = model(x), fp8_model(x)
bound = matmul_error(x, w1, cast_error(x, E4M3), cast_error(w1, E4M3))
assert ((h8 - h).abs() <= bound).all()  # the Float8Linear, element by element
# ReLU never enlarges a difference; the float32 Linear multiplies it by |w2| at most.
assert ((y8 - y).abs() <= bound @ w2.abs().T + 1e-5).all()
print(f"forward, relative error: Float8Linear {rel(h8, h):.2%} (worst case by the bound: "
      f"{bound.norm() / h.norm():.0%}), model output {rel(y8, y):.2%}")

x_in = x.clone().requires_grad_()
grad_out = torch.randn(32, 128, generator=torch.Generator().manual_seed(2)).to(fp8_device)
fp8_model[0](x_in).backward(grad_out)
d_go = cast_error(grad_out, E5M2)  # the backward casts grad_output to E5M2
grad_in_bound = matmul_error(grad_out, w1.T, d_go, cast_error(w1, E4M3).T)
grad_w_bound = matmul_error(grad_out.T, x.T, d_go.T, cast_error(x, E4M3).T)
assert ((x_in.grad - grad_out @ w1).abs() <= grad_in_bound).all()
assert ((fp8_model[0].weight.grad - grad_out.T @ x).abs() <= grad_w_bound).all()
print(f"backward, relative error: grad_input {rel(x_in.grad, grad_out @ w1):.2%}, "
      f"grad_weight {rel(fp8_model[0].weight.grad, grad_out.T @ x):.2%}")
# --8<-- [end:accuracy]
