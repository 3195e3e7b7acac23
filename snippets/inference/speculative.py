"""Speculative decoding: a 1-layer draft model proposes k tokens, the section's target model
checks them in one call and the caches roll back past the first rejection; greedy output equals
the target's own, token for token. Then the sampling rule, computed exactly on a 5-token
vocabulary: accepting with min(1, p/q) and resampling from the residual gives back p."""
# snippet: timeout=120

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both
from _model import Config, KVCache, prompt, trained

# --8<-- [start:models]
import statistics
import time
from dataclasses import replace
from fractions import Fraction

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
cfg = Config()
target = trained(cfg).to(device)                                  # 2 layers, d = 64
draft = trained(replace(cfg, layers=1, d=32), seed=3).to(device)  # 1 layer, d = 32
sizes = {name: sum(p.numel() for p in m.parameters()) for name, m in
         (("target", target), ("draft", draft))}
print(f"target {sizes['target']:,} parameters, draft {sizes['draft']:,} "
      f"({sizes['draft'] / sizes['target']:.0%})")
PROMPT, NEW = prompt(cfg, 1, 8).to(device), 64
# --8<-- [end:models]


# --8<-- [start:speculative]
def cached(cache: KVCache) -> int:
    """Positions the cache holds."""
    return 0 if cache.k[0] is None else cache.k[0].shape[2]


def rollback(cache: KVCache, length: int):
    """Forget every position from `length` on: the keys and values of rejected tokens."""
    cache.k = [k[:, :, :length] for k in cache.k]
    cache.v = [v[:, :, :length] for v in cache.v]


def greedy(model, idx, new):
    """Plain greedy decoding: one call of the model per token."""
    cache, out = KVCache(model.cfg), idx[0].tolist()
    logits = model(idx, cache, 0)
    while len(out) < idx.shape[1] + new:
        out.append(logits[0, -1].argmax().item())
        logits = model(torch.tensor([out[-1:]], device=idx.device), cache, len(out) - 1)
    return out


def speculative(target, draft, idx, new, k):
    """Greedy speculative decoding. Both caches hold every token but the last one when a round
    starts; a round is one target call, and `rounds` records what happened in each."""
    seq, rounds = idx[0].tolist(), []
    t_cache, d_cache = KVCache(target.cfg), KVCache(draft.cfg)
    target(idx[:, :-1], t_cache, 0)  # prefill: the prompt but its last token
    draft(idx[:, :-1], d_cache, 0)
    while len(seq) < idx.shape[1] + new:
        proposals, feed = [], seq[cached(d_cache):]  # 1 token, or 2 after a full acceptance
        for _ in range(k):  # the draft runs k times, one token each
            logits = draft(torch.tensor([feed], device=idx.device), d_cache, cached(d_cache))
            proposals.append(logits[0, -1].argmax().item())
            feed = proposals[-1:]
        # one target call over the last token and the k proposals: k + 1 predictions
        logits = target(torch.tensor([seq[-1:] + proposals], device=idx.device), t_cache,
                        len(seq) - 1)
        best = logits[0].argmax(-1).tolist()  # best[i]: the target's token after proposal i-1
        accepted = 0
        while accepted < k and proposals[accepted] == best[accepted]:
            accepted += 1
        rounds.append((len(seq), proposals, accepted, best[accepted]))
        seq += proposals[:accepted] + [best[accepted]]  # the target's own token comes free
        rollback(t_cache, len(seq) - 1)
        rollback(d_cache, min(cached(d_cache), len(seq) - 1))
    return seq, rounds


reference = greedy(target, PROMPT, NEW + 8)  # the last round may overshoot by up to k = 8
K = 4
out, rounds = speculative(target, draft, PROMPT, NEW, K)
assert out == reference[:len(out)]  # the target's greedy output, token for token
generated = len(out) - PROMPT.shape[1]
print(f"k = {K}: {generated} tokens in {len(rounds)} target calls (greedy decoding needs "
      f"{generated}); the same tokens as the target's greedy decoding")
for start, proposals, accepted, token in rounds[:3]:
    print(f"  at position {start}: draft proposed {proposals}, target kept {accepted} and "
          f"added {token}")
# --8<-- [end:speculative]


# --8<-- [start:acceptance]
def stats(rounds, k):
    """Acceptance rate α: accepted proposals over checked ones. A round checks proposals up
    to the first rejection; those after it are thrown away unchecked."""
    accepted = sum(a for _, _, a, _ in rounds)
    rejected = sum(a < k for _, _, a, _ in rounds)
    alpha = accepted / (accepted + rejected)
    per_call = (accepted + len(rounds)) / len(rounds)  # a round yields a + 1 tokens
    expected = (1 - alpha ** (k + 1)) / (1 - alpha) if alpha < 1 else k + 1
    assert abs(expected - sum(alpha ** i for i in range(k + 1))) < 1e-12
    return alpha, per_call, expected


print(f"\n{'k':>2}{'target calls':>14}{'draft calls':>13}{'α':>7}"
      f"{'tokens per target call':>24}{'(1 − α^(k+1)) / (1 − α)':>26}")
for k in (1, 2, 4, 8):
    seq, rounds_k = speculative(target, draft, PROMPT, NEW, k)
    assert seq == reference[:len(seq)]
    alpha, per_call, expected = stats(rounds_k, k)
    assert 1 <= per_call <= k + 1
    print(f"{k:>2}{len(rounds_k):>14}{k * len(rounds_k):>13}{alpha:>7.2f}{per_call:>24.2f}"
          f"{expected:>26.2f}")

# floating point: a token could differ only where the target's top two logits nearly tie
logits = target(torch.tensor([reference], device=device))[0, PROMPT.shape[1] - 1:-1]
top2 = logits.topk(2).values
print(f"smallest gap between the target's two best logits on this output: "
      f"{(top2[:, 0] - top2[:, 1]).min().item():.2f}")
# --8<-- [end:acceptance]


# --8<-- [start:timing]
def seconds(fn, budget=0.15):
    """Median wall time of fn() over repeats that fit in the budget (at least 3)."""
    times = []
    while len(times) < 3 or sum(times) < budget:
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


plain = seconds(lambda: greedy(target, PROMPT, NEW))
spec = seconds(lambda: speculative(target, draft, PROMPT, NEW, K))
print(f"\n{device}, {NEW} tokens: greedy {plain * 1e3:.1f} ms, speculative (k = {K}) "
      f"{spec * 1e3:.1f} ms, a speed-up of {plain / spec:.2f}×")

one, five = PROMPT[:, :1], PROMPT[:, :K + 1]
t_one = seconds(lambda: target(one), 0.05)
c = seconds(lambda: draft(one), 0.05) / t_one         # a draft call, in target calls
r = seconds(lambda: target(five), 0.05) / t_one       # a check of k + 1 tokens, likewise
alpha = stats(rounds, K)[0]
tokens = (1 - alpha ** (K + 1)) / (1 - alpha)
print(f"c = {c:.2f} (draft call / target call), a target call over {K + 1} tokens costs "
      f"{r:.2f} target calls over 1")
print(f"speed-up predicted by tokens / (c·k + 1): {tokens / (c * K + 1):.2f}×; "
      f"with the check's own cost, tokens / (c·k + {r:.2f}): {tokens / (c * K + r):.2f}×")
# --8<-- [end:timing]


# --8<-- [start:sampling]
def speculative_sample_distribution(p, q):
    """Exact distribution of the token that one draft proposal yields: the draft samples x
    from q; x is kept with probability min(1, p(x)/q(x)); otherwise a token is drawn from
    the residual max(0, p - q), normalized."""
    keep = [min(Fraction(1), pi / qi) if qi else Fraction(0) for pi, qi in zip(p, q)]
    accept = sum(qi * ki for qi, ki in zip(q, keep))  # probability the proposal is kept
    residual = [max(Fraction(0), pi - qi) for pi, qi in zip(p, q)]
    out = [qi * ki + (1 - accept) * ri / sum(residual) for qi, ki, ri in zip(q, keep, residual)]
    return out, accept


p = [Fraction(n, 20) for n in (8, 6, 3, 3, 0)]  # target: 5 tokens
q = [Fraction(n, 20) for n in (4, 2, 8, 2, 4)]  # draft: too fond of tokens 2 and 4
assert sum(p) == sum(q) == 1
out, accept = speculative_sample_distribution(p, q)
tv = sum(abs(pi - qi) for pi, qi in zip(p, q)) / 2  # total variation distance
print(f"p            {[str(x) for x in p]}\nq            {[str(x) for x in q]}")
print(f"speculative  {[str(x) for x in out]}  (exactly p)")
print(f"P(accept) = Σ min(p, q) = {accept} = 1 − TV(p, q) = 1 − {tv}")
assert out == p
assert accept == sum(min(pi, qi) for pi, qi in zip(p, q)) == 1 - tv

# resampling from p itself after a rejection, instead of the residual, is biased
wrong = [qi * min(Fraction(1), pi / qi) + (1 - accept) * pi for pi, qi in zip(p, q)]
print(f"resampled from p instead: {[str(x) for x in wrong]}")
assert wrong != p
# --8<-- [end:sampling]


# --8<-- [start:sampling_models]
# the same quantity for the two trained models, position by position along the output
seq = torch.tensor([reference], device=device)
p_t = target(seq)[0, PROMPT.shape[1] - 1:-1].double().softmax(-1)
q_d = draft(seq)[0, PROMPT.shape[1] - 1:-1].double().softmax(-1)
beta = torch.minimum(p_t, q_d).sum(-1)  # acceptance probability when sampling at T = 1
torch.testing.assert_close(beta, 1 - (p_t - q_d).abs().sum(-1) / 2)
print(f"trained models, sampling at temperature 1: mean P(accept) {beta.mean().item():.2f} "
      f"over {len(beta)} positions (lowest {beta.min().item():.2f})")
# --8<-- [end:sampling_models]


# --8<-- [start:figure]
LABELS = {
    "en": {"x": "position in the output", "call": "call {i}",
           "accepted": "draft token accepted", "rejected": "draft token rejected",
           "unchecked": "after a rejection: discarded unchecked",
           "target": "target's own token (correction or bonus)",
           "title": "Speculative decoding, k = {k}: each row is one target call"},
    "zh": {"x": "输出中的位置", "call": "第 {i} 次",
           "accepted": "草稿 token 被接受", "rejected": "草稿 token 被拒绝",
           "unchecked": "拒绝之后：不经检查直接丢弃",
           "target": "目标模型自己的 token（纠正或额外所得）",
           "title": "投机解码，k = {k}：每一行是目标模型的一次调用"},
}
SHOWN = 8  # rounds drawn
COLORS = {"accepted": "#74c476", "rejected": "#fb6a4a", "unchecked": "#d9d9d9",
          "target": "#6baed6"}


def draw(fig, text):
    from matplotlib.patches import Patch, Rectangle
    ax, first = fig.add_subplot(), rounds[0][0]
    for row, (start, proposals, accepted, token) in enumerate(rounds[:SHOWN]):
        y = -row
        for i, t in enumerate(proposals):  # upper half: the draft's k proposals
            kind = ("accepted" if i < accepted else "rejected" if i == accepted
                    else "unchecked")
            x = start - first + i
            ax.add_patch(Rectangle((x, y + 0.05), 0.92, 0.42, color=COLORS[kind]))
            ax.text(x + 0.46, y + 0.26, t, ha="center", va="center", fontsize=6.5)
        x = start - first + accepted  # lower half: the target's token, where it goes
        ax.add_patch(Rectangle((x, y - 0.42), 0.92, 0.42, color=COLORS["target"]))
        ax.text(x + 0.46, y - 0.21, token, ha="center", va="center", fontsize=6.5)
    last = rounds[SHOWN - 1]
    ax.set(xlim=(-0.2, last[0] - first + K + 1.2), ylim=(-SHOWN + 0.4, 0.6))
    ax.set_yticks([-r for r in range(SHOWN)], [text["call"].format(i=r + 1)
                                               for r in range(SHOWN)])
    ax.set_xlabel(text["x"])
    ax.set_title(text["title"].format(k=K), fontsize=10)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.legend(handles=[Patch(color=COLORS[k], label=text[k]) for k in COLORS],
              loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False,
              fontsize=8)


draw_both("speculative", LABELS, draw, figsize=(7.2, 3.8))
# --8<-- [end:figure]
