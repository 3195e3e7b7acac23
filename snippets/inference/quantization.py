"""Weight-only quantization with torchao's quantize_ on the section's trained TinyLM: int8 and
int4 weights (and int8 weights with int8 activations), their bytes counted from the tensors,
how far the logits and the greedy tokens move, and why fewer bytes per weight speed up decode
but not prefill."""
# snippet: timeout=120

import copy
import logging
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both

# --8<-- [start:import]
import torch
from torch import nn
from _model import Config, KVCache, prompt, trained

device = "cuda" if torch.cuda.is_available() else "cpu"
# Importing torchao logs warnings that do not concern this page (see ../performance/
# low_precision.md#import): one from torch about an Enum torchao registers, and, with a torch
# built without CUDA, one per CUDA extension torchao cannot load. Errors still come through.
quiet = [logging.getLogger("torch.utils._pytree")]
if torch.version.cuda is None and torch.version.hip is None:
    quiet.append(logging.getLogger("torchao"))
levels = [log.level for log in quiet]
try:
    for log in quiet:
        log.setLevel(logging.ERROR)
    import torchao
    from torchao.prototype.quantization.int4 import PrototypeInt4WeightOnlyConfig
    from torchao.quantization import (Int4WeightOnlyConfig, Int8DynamicActivationInt8WeightConfig,
                                      Int8WeightOnlyConfig, quantize_)
except ImportError as error:
    print(f"torchao: not run here, {error} (pip install torchao==0.18.0)")
    raise SystemExit(0)
finally:
    for log, level in zip(quiet, levels):
        log.setLevel(level)
print(f"torchao {torchao.__version__}, on the {device}")
# --8<-- [end:import]


# --8<-- [start:model]
cfg = Config()
model = trained(cfg).to(device)
linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
N = sum(m.weight.numel() for m in linears.values())
embeddings = model.tok.weight.numel() + model.pos.weight.numel()
print(f"TinyLM: {len(linears)} Linear layers with {N:,} weights, "
      f"{N / sum(p.numel() for p in model.parameters()):.0%} of the parameters; "
      f"embeddings {embeddings:,}")
assert N == cfg.layers * 12 * cfg.d**2 + cfg.d * cfg.vocab == 102_400


def every_linear(module: nn.Module, fqn: str) -> bool:
    """What quantize_ converts here: every nn.Linear, the output layer ("head") included. The
    embeddings are lookups, not Linear layers, and stay float32: a decode step reads one row
    of each, not the whole table."""
    return isinstance(module, nn.Linear)


def weight_bytes(layer: nn.Linear) -> int:
    """Bytes of a weight as stored: for a torchao tensor subclass, the sum of its inner
    tensors (the integer data, the scales, the zero points), listed by __tensor_flatten__."""
    w = layer.weight
    if not hasattr(w, "__tensor_flatten__"):
        return w.numel() * w.element_size()
    names, _ = w.__tensor_flatten__()
    return sum(getattr(w, n).numel() * getattr(w, n).element_size() for n in names)
# --8<-- [end:model]


# --8<-- [start:int4-layouts]
GROUP = 32  # int4: one scale and one zero point per 32 weights of a row


def tiles(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


if device == "cuda":
    # tinygemm (aten._weight_int4pack_mm): bf16 only, Ampere (compute capability 8.0) or newer;
    # it pads each row to a multiple of 1024 weights and the rows to a multiple of 8.
    INT4 = Int4WeightOnlyConfig(group_size=GROUP, int4_packing_format="tile_packed_to_4d")
    INT4_DTYPE = torch.bfloat16
    INT4_OK = torch.version.cuda is not None and torch.cuda.get_device_capability() >= (8, 0)
    int4_bytes = lambda n, k: (tiles(n, 8) * tiles(k, 1024) // 2             # 2 weights a byte
                               + tiles(k, 1024) // GROUP * tiles(n, 8) * 2 * 2)  # bf16 scale, zero
else:
    # The CPU kernel ATen ships (aten._weight_int4pack_mm_for_cpu), in torchao's prototype.
    INT4 = PrototypeInt4WeightOnlyConfig(group_size=GROUP)
    INT4_DTYPE, INT4_OK = torch.float32, True
    int4_bytes = lambda n, k: n * k // 2 + k // GROUP * n * 2 * 4            # fp32 scale, zero
    for packing in ("plain", "tile_packed_to_4d"):    # the stable config's layouts
        try:
            bf16 = copy.deepcopy(model).to(torch.bfloat16)  # the dtype both layouts take
            quantize_(bf16, Int4WeightOnlyConfig(GROUP, int4_packing_format=packing))
        except Exception as error:
            why = str(error).splitlines()[0]
            print(f"Int4WeightOnlyConfig, packing {packing!r}: {type(error).__name__}: {why}")
        else:
            print(f"Int4WeightOnlyConfig, packing {packing!r}: works here, not used below")
print(f"int4 here: {type(INT4).__name__}, {INT4_DTYPE}" + ("" if INT4_OK else
      ", not run: tinygemm needs an NVIDIA GPU of compute capability 8.0 or newer"))
# --8<-- [end:int4-layouts]


# --8<-- [start:quantize]
SCHEMES = {  # name: (config, dtype of the model, bytes of an n × k weight)
    "int8 weight-only": (Int8WeightOnlyConfig(), torch.float32, lambda n, k: n * k + n * (4 + 1)),
    "int8 weights, int8 activations": (Int8DynamicActivationInt8WeightConfig(), torch.float32,
                                       lambda n, k: n * k + n * (4 + 1)),
}
if INT4_OK:
    SCHEMES["int4 weight-only"] = (INT4, INT4_DTYPE, int4_bytes)

quantized = {}
for name, (config, dtype, expected) in SCHEMES.items():
    config.set_inductor_config = False  # nothing is compiled here: leave Inductor's settings
    q = copy.deepcopy(model).to(dtype)
    quantize_(q, config, filter_fn=every_linear)
    layers = [m for m in q.modules() if isinstance(m, nn.Linear)]
    stored = sum(weight_bytes(m) for m in layers)
    kinds = sorted({type(m.weight).__name__ for m in layers})
    quantized[name] = q
    print(f"{name}: {kinds[0]}, {stored:,} bytes of Linear weights")
    assert len(kinds) == 1 and kinds[0] != "Parameter"                     # every Linear converted
    assert stored == sum(expected(*m.weight.shape) for m in linears.values())  # the arithmetic
    assert type(q.tok.weight) is nn.Parameter and q.tok.weight.dtype == dtype  # embeddings kept
float_bytes = sum(weight_bytes(m) for m in linears.values())
print(f"float32: {float_bytes:,} bytes of Linear weights")
assert float_bytes == 4 * N
# --8<-- [end:quantize]


# --8<-- [start:rounding]
def dequantized(layer: nn.Linear) -> torch.Tensor:
    """The weight a quantized layer multiplies by: its output for the identity matrix."""
    k = layer.in_features
    eye = torch.eye(k, device=device, dtype=layer.weight.dtype)
    return layer(eye).T.float()


def allowed_error(w: torch.Tensor, name: str) -> torch.Tensor:
    """How far rounding to nearest may move each weight: half a step, from the weights alone."""
    if name.startswith("int8"):        # symmetric, per row: a step of amax / 127.5
        return (w.abs().amax(dim=1, keepdim=True) / 127.5 / 2).expand_as(w)
    g = w.view(w.shape[0], -1, GROUP)   # asymmetric, per group: 16 levels over [min, max]
    half = (g.amax(-1) - g.amin(-1)) / 15 / 2
    if SCHEMES[name][1] == torch.bfloat16:  # tinygemm's bf16 scale, zero point and result are
        half = half + 2**-5 * g.abs().amax(-1)  # each rounded to 8 significant bits
    return half.repeat_interleave(GROUP, dim=1)


for name in ("int8 weight-only", "int4 weight-only"):
    if name not in quantized:
        continue
    worst = 0.0
    for fqn, layer in quantized[name].named_modules():
        if isinstance(layer, nn.Linear):
            w = linears[fqn].weight.to(SCHEMES[name][1]).float()  # what quantize_ was given
            error = (dequantized(layer) - w).abs()
            worst = max(worst, (error / allowed_error(w, name)).max().item())
    print(f"{name}: largest rounding error {worst:.5f} of what rounding to nearest allows")
    assert worst <= 1 + 1e-3  # 1e-3: float32 rounding in the scale and in the product
a, b = (quantized[n].head.weight for n in ("int8 weight-only", "int8 weights, int8 activations"))
assert torch.equal(a.qdata, b.qdata)  # the same int8 weights: only the activations differ
# --8<-- [end:rounding]


# --8<-- [start:logits]
def greedy(m: nn.Module, idx: torch.Tensor, steps: int) -> torch.Tensor:
    """The prompt followed by `steps` greedy tokens, decoded with a growing cache."""
    cache, out = KVCache(cfg), idx
    logits = m(idx, cache, 0)
    for _ in range(steps):
        out = torch.cat([out, logits[:, -1:].argmax(-1)], dim=1)
        logits = m(out[:, -1:], cache, out.shape[1] - 1)
    return out


P = prompt(cfg, batch=4, length=8).to(device)
STEPS = 24
reference = greedy(model, P, STEPS)
float_logits = model(reference)  # every position of the float model's own text
top2 = float_logits.topk(2, dim=-1).values
margin = (top2[..., 0] - top2[..., 1])[:, P.shape[1] - 1:-1].min().item()
print(f"{P.shape[0]} prompts × {STEPS} greedy tokens; smallest top-1 lead of the float model: "
      f"{margin:.3f}")
for name, q in quantized.items():
    diff = (q(reference).float() - float_logits).abs().max().item()
    tokens = greedy(q, P, STEPS)
    same = (tokens == reference)[:, P.shape[1]:].float().mean().item()
    # Same prefix, logits within diff of the float model's: if 2·diff is below the lead, no
    # step can swap the top two, so the texts must agree (1e-3: cache vs no cache rounding).
    sure = 2 * diff + 1e-3 < margin
    print(f"  {name}: max |Δ logit| {diff:.4f}; greedy tokens equal to float: {same:.0%}"
          f" ({'guaranteed' if sure else 'not guaranteed'}: 2 × {diff:.4f} vs {margin:.3f})")
    if sure:
        assert torch.equal(tokens, reference)
# --8<-- [end:logits]


# --8<-- [start:bytes]
# A decode step of one sequence reads every Linear weight once (plus the KV cache, which grows
# with the context, and one row of each embedding).
print(f"\nbytes of weights read per decode token, TinyLM (d {cfg.d}):")
for name, scheme in [("float32", None)] + list(SCHEMES.items()):
    layers = linears.values() if scheme is None else \
        [m for m in quantized[name].modules() if isinstance(m, nn.Linear)]
    stored = sum(weight_bytes(m) for m in layers)
    print(f"  {name:<32}{stored:>9,}  {stored / N:.3f} per weight")

# Llama-3-8B's matmul weights (hidden 4096, MLP 14336, 32 layers, 8 KV heads of 128, vocabulary
# 128256), as docs/inference/prefill_decode.md counts them, served in bf16.
SHAPES = 32 * [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096),
               (14336, 4096), (14336, 4096), (4096, 14336)] + [(128256, 4096)]
LLAMA = {  # bytes of an n × k weight
    "bf16": lambda n, k: 2 * n * k,
    "int8": lambda n, k: n * k + 5 * n,                  # + a float32 scale, an int8 zero a row
    "int4": lambda n, k: n * k // 2 + k // 128 * n * 4,  # + bf16 scale and zero per 128 weights
}
BANDWIDTH = {"H100 SXM": 3.35e12, "H200 SXM": 4.8e12}  # bytes/s, NVIDIA datasheets
print("Llama-3-8B, GB of weights per decode token, and the most tokens/s that leaves:")
llama = {}
for name, size in LLAMA.items():
    llama[name] = sum(size(n, k) for n, k in SHAPES)
    print(f"  {name:<6}{llama[name] / 1e9:6.2f} GB  "
          + ", ".join(f"{gpu} {bw / llama[name]:4.0f}" for gpu, bw in BANDWIDTH.items()))
assert llama["bf16"] == 15_009_316_864
assert abs(llama["bf16"] / llama["int4"] - 2 / (0.5 + 4 / 128)) < 1e-9
# --8<-- [end:bytes]


# --8<-- [start:prefill]
# A step with T tokens (prefill, or T sequences decoding together) does 2 FLOPs per weight per
# token and reads each weight once: 2T / (bytes per weight) FLOP per byte of weights.
PEAK = {"bf16": 989.5e12, "int8": 1979e12}  # H100 SXM dense Tensor Core rates, datasheet / 2
ridge = PEAK["bf16"] / BANDWIDTH["H100 SXM"]
print(f"\nH100 SXM ridge point: {ridge:.1f} FLOP/byte; weights stop being the limit at")
per_weight = {name: size / (sum(n * k for n, k in SHAPES)) for name, size in llama.items()}
for name, b in per_weight.items():
    print(f"  {name:<6}T = {ridge * b / 2:4.0f} tokens per step")
print(f"beyond that the step is compute-bound: weight-only quantization leaves the FLOPs as they "
      f"were, int8 × int8 runs at {PEAK['int8'] / PEAK['bf16']:.0f}× the bf16 rate")
assert round(ridge * per_weight["bf16"] / 2) == 295
# --8<-- [end:prefill]


# --8<-- [start:figure]
LABELS = {
    "en": {"x": "tokens per step (prompt length, or sequences decoding together)",
           "y": "tokens/s, upper bound",
           "title": "Llama-3-8B on one H100 SXM: datasheet bounds",
           "lines": ["bf16", "int8 weight-only", "int4 weight-only",
                     "int8 weights and activations"]},
    "zh": {"x": "每步的 token 数（提示词长度，或一起解码的序列数）",
           "y": "每秒 token 数上限",
           "title": "一块 H100 SXM 上的 Llama-3-8B：按数据手册算出的上限",
           "lines": ["bf16", "int8 仅权重量化", "int4 仅权重量化", "int8 权重与激活值"]},
}
T = [2 ** (i / 4) for i in range(49)]                       # 1 to 4096 tokens per step
FLOPS = 2 * sum(n * k for n, k in SHAPES)                  # per token


def bound(t: float, size: float, peak: float) -> float:
    """Tokens/s if a step of t tokens takes the longer of reading `size` bytes of weights and
    computing at `peak`."""
    return t / max(size / BANDWIDTH["H100 SXM"], t * FLOPS / peak)


curves = [(llama["bf16"], PEAK["bf16"]), (llama["int8"], PEAK["bf16"]),
          (llama["int4"], PEAK["bf16"]), (llama["int8"], PEAK["int8"])]  # the last: int8 × int8


def draw(fig, text):
    ax = fig.add_subplot()
    for (size, peak), label, style in zip(curves, text["lines"], ("-", "--", "-.", ":")):
        ax.plot(T, [bound(t, size, peak) for t in T], style, linewidth=2, label=label)
    ax.set(xscale="log", yscale="log", xlabel=text["x"], ylabel=text["y"], title=text["title"])
    ax.legend(fontsize="small")


draw_both("bounds", LABELS, draw, figsize=(6.4, 3.8))
# --8<-- [end:figure]
