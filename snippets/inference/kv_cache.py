"""Greedy generation with and without a KV cache: the same tokens, FlopCounterMode's FLOPs per
new token for both, and the cache's bytes against 2 × layers × KV heads × head dim × tokens ×
bytes, for multi-head, grouped-query and multi-query attention."""
# snippet: timeout=120

import dataclasses
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both
from _model import Config, KVCache, StaticKVCache, TinyLM, prompt, trained

# --8<-- [start:generate]
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

device = "cuda" if torch.cuda.is_available() else "cpu"


def generate_without_cache(model, idx, new_tokens):
    """Greedy decoding that runs the whole sequence through the model for every new token."""
    for _ in range(new_tokens):
        logits = model(idx)                       # logits of every position, again
        idx = torch.cat([idx, logits[:, -1:].argmax(-1)], dim=1)
    return idx


def generate_with_cache(model, idx, new_tokens, cache):
    """Greedy decoding that feeds the model only the newest token, with the others in `cache`."""
    logits = model(idx, cache, pos=0)             # the prompt at once: its keys and values stored
    for _ in range(new_tokens):
        token = logits[:, -1:].argmax(-1)
        idx = torch.cat([idx, token], dim=1)
        logits = model(token, cache, pos=idx.shape[1] - 1)  # one token, at the last position
    return idx


cfg = Config()
model = trained(cfg).to(device)
start = prompt(cfg, batch=2, length=8).to(device)
NEW = 56
plain = generate_without_cache(model, start, NEW)
cache = KVCache(cfg)
cached = generate_with_cache(model, start, NEW, cache)
assert torch.equal(plain, cached)
print(f"prompt  {start[0].tolist()}")
print(f"greedy  {cached[0, 8:24].tolist()} … ({NEW} new tokens, 2 sequences)")
print(f"with and without the cache: the same {plain.numel()} tokens; the cache holds "
      f"{cache.k[0].shape[2]} positions per layer")
assert cache.k[0].shape == (2, cfg.kv_heads, 8 + NEW, cfg.head_dim)
# --8<-- [end:generate]


# --8<-- [start:flops]
def flops(fn) -> dict:
    """FLOPs of fn() by operator, with attention as two bmm (the math kernel): the CPU's fused
    kernel has no formula in FlopCounterMode and would count as 0."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        fn()
    counts = counter.get_flop_counts().get("Global", {})
    return {str(op).removeprefix("aten."): n for op, n in counts.items()}


def per_new_token(model, seq) -> tuple[dict, dict]:
    """FLOPs of the step that predicts token L + 1 of a sequence of L tokens."""
    L = seq.shape[1]
    no_cache = flops(lambda: model(seq))          # all L positions
    cache = KVCache(model.cfg)
    model(seq[:, :-1], cache, pos=0)              # L - 1 positions already in the cache
    with_cache = flops(lambda: model(seq[:, -1:], cache, pos=L - 1))
    return no_cache, with_cache


N = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
print(f"N = {N:,} weights in matmuls; a step for a sequence of L tokens, batch 1:")
print(f"{'L':>5}{'no cache':>12}{'with cache':>12}{'ratio':>7}"
      f"{'  cache: mm':>12}{'bmm':>8}")
rows, seq = [], prompt(cfg, batch=1, length=cfg.max_seq).to(device)
for L in (8, 16, 32, 64, 128):
    no_cache, with_cache = per_new_token(model, seq[:, :L])
    attention = 4 * cfg.layers * cfg.d * L        # QKᵀ and AV: 2·d FLOPs each per key
    assert with_cache == {"mm": 2 * N, "bmm": attention}          # weights: constant
    assert no_cache == {"mm": 2 * N * L, "bmm": attention * L}    # everything × L
    total, total_cached = sum(no_cache.values()), sum(with_cache.values())
    assert total == L * total_cached
    rows.append((L, total, total_cached))
    print(f"{L:>5}{total:>12,}{total_cached:>12,}{total / total_cached:>7.0f}"
          f"{with_cache['mm']:>12,}{with_cache['bmm']:>8,}")
# --8<-- [end:flops]


# --8<-- [start:size]
def cache_bytes(cache: KVCache) -> int:
    return sum(t.nbytes for t in cache.k + cache.v)


def formula_bytes(cfg: Config, tokens: int, itemsize: int) -> int:
    """Keys and values (2) of every layer, KV head and position, per sequence."""
    return 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * tokens * itemsize


print(f"\n{'attention':<12}{'KV heads':>9}{'bytes/token':>12}{'cache':>9}  same tokens as no cache")
for name, kv_heads in (("multi-head", 4), ("grouped", 2), ("multi-query", 1)):
    c = dataclasses.replace(cfg, kv_heads=kv_heads)
    torch.manual_seed(0)  # any weights will do: the cache must not change the tokens
    m = model if kv_heads == cfg.kv_heads else TinyLM(c).eval().requires_grad_(False).to(device)
    cache = KVCache(c)
    out = generate_with_cache(m, start, NEW, cache)
    same = torch.equal(out, generate_without_cache(m, start, NEW))
    itemsize, tokens = cache.k[0].element_size(), out.shape[1]
    assert same and cache_bytes(cache) == out.shape[0] * formula_bytes(c, tokens, itemsize)
    print(f"{name:<12}{kv_heads:>9}{formula_bytes(c, 1, itemsize):>12,}"
          f"{cache_bytes(cache):>9,}  {same}")
print(f"(float32, {out.shape[0]} sequences of {tokens} tokens)")

static = StaticKVCache(cfg, batch=2, device=device)  # every position, from the first step
assert static.k.nbytes + static.v.nbytes == 2 * formula_bytes(cfg, cfg.max_seq, static.k.element_size())
print(f"a StaticKVCache for 2 sequences holds all {cfg.max_seq} positions from the start: "
      f"{static.k.nbytes + static.v.nbytes:,} bytes")
# --8<-- [end:size]


# --8<-- [start:llama]
# Meta-Llama-3-8B's config.json: 32 layers, 32 query heads of 4096 / 32 = 128, 8 KV heads.
LLAMA3_8B = Config(vocab=128256, d=4096, heads=32, kv_heads=8, layers=32, max_seq=8192)
BF16 = 2
print(f"\nLlama-3-8B shape, bf16: {LLAMA3_8B.layers} layers, head dim {LLAMA3_8B.head_dim}")
for kv_heads in (32, 8, 1):
    c = dataclasses.replace(LLAMA3_8B, kv_heads=kv_heads)
    per_token = formula_bytes(c, 1, BF16)
    full = formula_bytes(c, c.max_seq, BF16)
    print(f"  KV heads {kv_heads:>2}: {per_token // 1024:>4} KiB per token, "
          f"{full / 2**30:.3f} GiB for {c.max_seq:,} tokens")
assert formula_bytes(LLAMA3_8B, 1, BF16) == 128 * 1024   # 2 · 32 · 8 · 128 · 2
assert formula_bytes(LLAMA3_8B, 8192, BF16) == 2**30     # 1 GiB per 8k-token sequence
# --8<-- [end:llama]


# --8<-- [start:figure]
LABELS = {
    "en": {"flops_title": "FLOPs per new token (TinyLM, counted)",
           "length": "tokens in the sequence, L", "flops": "FLOPs",
           "plain": "no cache", "cached": "KV cache",
           "cache_title": "KV cache per sequence, Llama-3-8B shape, bf16",
           "tokens": "tokens", "gib": "GiB",
           "kinds": {32: "32 KV heads (multi-head)", 8: "8 KV heads (grouped, as released)",
                     1: "1 KV head (multi-query)"}},
    "zh": {"flops_title": "每个新 token 的 FLOPs（TinyLM，实际计数）",
           "length": "序列中的 token 数 L", "flops": "FLOPs",
           "plain": "不用缓存", "cached": "KV 缓存",
           "cache_title": "每条序列的 KV 缓存（Llama-3-8B 的形状，bf16）",
           "tokens": "token 数", "gib": "GiB",
           "kinds": {32: "32 个 KV 头（多头）", 8: "8 个 KV 头（分组，模型实际所用）",
                     1: "1 个 KV 头（多查询）"}},
}


def draw(fig, text):
    left, right = fig.subplots(1, 2)
    lengths = [r[0] for r in rows]
    left.loglog(lengths, [r[1] for r in rows], "o-", label=text["plain"])
    left.loglog(lengths, [r[2] for r in rows], "s-", label=text["cached"])
    left.set(title=text["flops_title"], xlabel=text["length"], ylabel=text["flops"])
    left.set_xticks(lengths, [str(n) for n in lengths], minor=False)
    left.minorticks_off()
    left.legend(fontsize="small")
    tokens = [0, 2048, 4096, 8192]
    for kv_heads, style in ((32, "-"), (8, "--"), (1, ":")):
        c = dataclasses.replace(LLAMA3_8B, kv_heads=kv_heads)
        right.plot(tokens, [formula_bytes(c, t, BF16) / 2**30 for t in tokens], style,
                   label=text["kinds"][kv_heads])
    right.set(title=text["cache_title"], xlabel=text["tokens"], ylabel=text["gib"])
    right.legend(fontsize="small")
    for ax in (left, right):
        ax.title.set_fontsize("medium")


draw_both("kv_cache", LABELS, draw, figsize=(11, 4))
# --8<-- [end:figure]
