"""The small decoder-only language model that every page of the Inference section generates with.

Imported by the snippets and the lab, not run (its name starts with ``_``). It depends on
torch alone. ``forward(idx, cache, pos)`` takes the new tokens, the cache (or None: the whole
prefix is recomputed) and the position of the first new token, and returns their logits.
Both caches hand each layer back its keys and values for every position up to the last new
token, so one attention code path serves no cache, a growing cache and a static one.

``trained()`` fits a model for a second or so to a toy language in which each token is
followed by its successor in a fixed shuffle of the vocabulary: two models that have learned
it agree on most greedy tokens, which speculative decoding needs; random ones would not.
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


# --8<-- [start:config]
@dataclass(frozen=True)
class Config:
    vocab: int = 64
    d: int = 64          # model width
    heads: int = 4       # query heads
    kv_heads: int = 4    # key/value heads: = heads is multi-head, 1 is multi-query, else grouped
    layers: int = 2
    max_seq: int = 128   # positions the model knows, and the static cache's length

    @property
    def head_dim(self) -> int:
        return self.d // self.heads
# --8<-- [end:config]


# --8<-- [start:caches]
class KVCache:
    """Grows by concatenation: each step adds the new tokens' keys and values per layer."""

    def __init__(self, cfg: Config):
        self.k: list = [None] * cfg.layers
        self.v: list = [None] * cfg.layers

    def update(self, layer, k, v, pos):
        if self.k[layer] is not None:
            k, v = torch.cat([self.k[layer], k], dim=2), torch.cat([self.v[layer], v], dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v


class StaticKVCache:
    """Preallocated to max_seq positions: each step writes its tokens at their positions, so
    every tensor keeps its shape from the first step to the last (what torch.compile and CUDA
    graphs need). Positions not written yet are masked out by the causal mask."""

    def __init__(self, cfg: Config, batch: int, device=None, dtype=torch.float32):
        shape = (cfg.layers, batch, cfg.kv_heads, cfg.max_seq, cfg.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)

    def update(self, layer, k, v, pos):
        at = pos + torch.arange(k.shape[2], device=k.device)  # a tensor: no recompile per step
        self.k[layer].index_copy_(2, at, k)
        self.v[layer].index_copy_(2, at, v)
        return self.k[layer], self.v[layer]
# --8<-- [end:caches]


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.q = nn.Linear(cfg.d, cfg.heads * cfg.head_dim, bias=False)
        self.kv = nn.Linear(cfg.d, 2 * cfg.kv_heads * cfg.head_dim, bias=False)
        self.out = nn.Linear(cfg.d, cfg.d, bias=False)

    def forward(self, x, layer, cache, pos):
        cfg, (b, t, _) = self.cfg, x.shape
        q = self.q(x).view(b, t, cfg.heads, cfg.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, cfg.kv_heads, cfg.head_dim).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.update(layer, k, v, pos)
        # new token i sits at position pos + i and sees every key at or before it
        seen = torch.arange(k.shape[2], device=x.device) <= pos + torch.arange(t, device=x.device)[:, None]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=seen,
                                           enable_gqa=cfg.kv_heads != cfg.heads)
        return self.out(a.transpose(1, 2).reshape(b, t, cfg.d))


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d), nn.LayerNorm(cfg.d)
        self.attn = Attention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d, 4 * cfg.d, bias=False), nn.GELU(),
                                 nn.Linear(4 * cfg.d, cfg.d, bias=False))

    def forward(self, x, layer, cache, pos):
        x = x + self.attn(self.ln1(x), layer, cache, pos)
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, cfg: Config = Config()):
        super().__init__()
        self.cfg = cfg
        self.tok, self.pos = nn.Embedding(cfg.vocab, cfg.d), nn.Embedding(cfg.max_seq, cfg.d)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.d)
        self.head = nn.Linear(cfg.d, cfg.vocab, bias=False)

    def forward(self, idx, cache=None, pos=0):
        """Logits of the tokens idx (batch, t), the first of which sits at position pos."""
        x = self.tok(idx) + self.pos(pos + torch.arange(idx.shape[1], device=idx.device))
        for layer, block in enumerate(self.blocks):
            x = block(x, layer, cache, pos)
        return self.head(self.ln(x))


def toy_batch(cfg: Config, batch: int, seq: int, generator: torch.Generator):
    """Sequences in which each token is followed by its successor in a fixed shuffle of the
    vocabulary (the same shuffle for every seed)."""
    successor = torch.randperm(cfg.vocab, generator=torch.Generator().manual_seed(1234))
    seqs = torch.randint(cfg.vocab, (batch, 1), generator=generator)
    while seqs.shape[1] < seq:
        seqs = torch.cat([seqs, successor[seqs[:, -1:]]], dim=1)
    return seqs


def trained(cfg: Config = Config(), steps: int = 60, seed: int = 0) -> TinyLM:
    """A TinyLM fitted to the toy language for `steps` Adam steps, in eval mode, on the CPU."""
    torch.manual_seed(seed)
    model, generator = TinyLM(cfg), torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        seqs = toy_batch(cfg, 32, 16, generator)
        loss = F.cross_entropy(model(seqs[:, :-1]).flatten(0, 1), seqs[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval().requires_grad_(False)


def prompt(cfg: Config, batch: int = 1, length: int = 8, seed: int = 1):
    """A fixed prompt in the toy language: each row starts from a random token."""
    return toy_batch(cfg, batch, length, torch.Generator().manual_seed(seed))
