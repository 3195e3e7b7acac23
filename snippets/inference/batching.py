"""Static batching against continuous batching on a fixed list of requests, counted in decode
steps and wasted token slots; then a paged KV cache (a pool of fixed-size blocks and a block
table per request) that runs the continuous schedule with the section's model, gives the same
logits as a contiguous cache and holds less than one block of slack per request."""
# snippet: timeout=120

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both
from _model import Config, KVCache, TinyLM, prompt

# --8<-- [start:requests]
import math
from dataclasses import dataclass

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
SLOTS = 4  # requests the server decodes at once


@dataclass(frozen=True)
class Request:
    rid: int
    prompt: int  # prompt tokens
    output: int  # tokens to generate: one per step the request runs


def requests_of(n: int, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(4, 33, (n,), generator=g).tolist()
    outputs = torch.randint(2, 49, (n,), generator=g).tolist()
    return [Request(i, p, o) for i, (p, o) in enumerate(zip(prompts, outputs))]


REQUESTS = requests_of(12)
print("requests (prompt tokens, tokens to generate):",
      " ".join(f"r{r.rid}({r.prompt},{r.output})" for r in REQUESTS))
# --8<-- [end:requests]


# --8<-- [start:schedules]
def static_schedule(requests, slots):
    """Batches of `slots` requests in arrival order. A batch starts when the previous one has
    finished, and keeps its slots until its longest request is done."""
    runs, step = [], 0  # runs: (slot, request, first step, step after the last)
    for i in range(0, len(requests), slots):
        batch = requests[i:i + slots]
        runs += [(slot, r, step, step + r.output) for slot, r in enumerate(batch)]
        step += max(r.output for r in batch)
    return runs


def continuous_schedule(requests, slots):
    """Iteration-level scheduling: after every step, a finished request leaves and the next
    waiting one takes its slot at the next step."""
    free_at, runs = [0] * slots, []
    for r in requests:  # in arrival order, each to the slot that frees first
        slot = min(range(slots), key=lambda s: free_at[s])
        runs.append((slot, r, free_at[slot], free_at[slot] + r.output))
        free_at[slot] += r.output
    return runs


def prompt_padding(requests, slots):
    """Prefill of a static batch pads every prompt to the batch's longest one."""
    return sum(max(r.prompt for r in requests[i:i + slots]) - r.prompt
               for i in range(0, len(requests), slots) for r in requests[i:i + slots])


useful = sum(r.output for r in REQUESTS)
schedules = {"static": static_schedule(REQUESTS, SLOTS),
             "continuous": continuous_schedule(REQUESTS, SLOTS)}
summary = {}
print(f"\n{SLOTS} slots, {useful} tokens to generate")
print(f"{'':<11}{'steps':>6}{'slots×steps':>13}{'idle slots':>16}{'tokens/step':>13}")
for name, runs in schedules.items():
    steps = max(end for *_, end in runs)
    assert sum(end - start for *_, start, end in runs) == useful  # the same tokens in both
    idle = SLOTS * steps - useful  # slots held by a finished request, or by no request
    summary[name] = steps
    idle_share = f"{idle} ({idle / (SLOTS * steps):.0%})"
    print(f"{name:<11}{steps:>6}{SLOTS * steps:>13}{idle_share:>16}{useful / steps:>13.2f}")

batches = [REQUESTS[i:i + SLOTS] for i in range(0, len(REQUESTS), SLOTS)]
assert summary["static"] == sum(max(r.output for r in b) for b in batches)
assert max(max(r.output for r in REQUESTS), math.ceil(useful / SLOTS)) <= summary["continuous"]
assert summary["continuous"] < summary["static"]
padding = prompt_padding(REQUESTS, SLOTS)
prompt_tokens = sum(r.prompt for r in REQUESTS)
print(f"continuous batching: {summary['static'] / summary['continuous']:.2f}× the tokens per "
      f"step; static prefill also pads {padding} tokens onto {prompt_tokens} prompt tokens")
# --8<-- [end:schedules]


# --8<-- [start:paged]
class BlockPool:
    """Keys and values of every request, in blocks of `block_size` positions:
    (layers, num_blocks, kv_heads, block_size, head_dim), with a list of the free blocks."""

    def __init__(self, cfg: Config, num_blocks: int, block_size: int, device=None):
        shape = (cfg.layers, num_blocks, cfg.kv_heads, block_size, cfg.head_dim)
        self.k = torch.zeros(shape, device=device)
        self.v = torch.zeros(shape, device=device)
        self.block_size = block_size
        self.free = list(range(num_blocks - 1, -1, -1))  # pop() hands out 0, 1, 2, … first

    def allocate(self) -> int:
        if not self.free:
            raise RuntimeError("the block pool is full")
        return self.free.pop()

    def release(self, blocks):
        self.free += reversed(blocks)  # freed blocks are the next ones handed out


class PagedKVCache:
    """One request's view of the pool, with the model's cache interface: `table` lists the
    blocks that hold its positions 0…block_size-1, block_size…2·block_size-1, …"""

    def __init__(self, pool: BlockPool):
        self.pool, self.table, self.length = pool, [], 0

    def update(self, layer, k, v, pos):
        pool, bs, t = self.pool, self.pool.block_size, k.shape[2]
        while len(self.table) * bs < pos + t:  # a new block only when the last one is full
            self.table.append(pool.allocate())
        at = torch.arange(pos, pos + t, device=k.device)
        blocks = torch.tensor(self.table, device=k.device)
        # write: position p goes to block table[p // bs], row p % bs
        pool.k[layer, blocks[at // bs], :, at % bs] = k[0].transpose(0, 1)
        pool.v[layer, blocks[at // bs], :, at % bs] = v[0].transpose(0, 1)
        self.length = pos + t
        # read: the request's blocks in table order, laid end to end, cut at its length
        return self.gather(pool.k[layer], blocks), self.gather(pool.v[layer], blocks)

    def gather(self, pool_layer, blocks):
        kv = pool_layer[blocks].transpose(0, 1)  # (kv_heads, blocks, block_size, head_dim)
        return kv.flatten(1, 2)[None, :, :self.length]
# --8<-- [end:paged]


# --8<-- [start:equal]
def generate_paged(model, runs, pool, fullest):
    """The continuous schedule, step by step: every running request adds one token; a
    request's blocks go back to the pool at the end of its last step. Yields each request
    as it finishes; `fullest` receives the block tables at the step the pool is fullest."""
    caches, fed, logits = {}, {}, {}
    for step in range(max(end for *_, end in runs)):
        running = [(r, start, end) for _, r, start, end in runs if start <= step < end]
        for r, start, end in running:
            if step == start:  # prefill: the whole prompt in one call
                caches[r.rid], logits[r.rid] = PagedKVCache(pool), []
                fed[r.rid] = prompt(model.cfg, 1, r.prompt, seed=r.rid).to(device)
                out = model(fed[r.rid], caches[r.rid], 0)
            else:  # decode: the token chosen last step, at the next position
                token = logits[r.rid][-1].argmax(-1, keepdim=True)
                fed[r.rid] = torch.cat([fed[r.rid], token], dim=1)
                out = model(token, caches[r.rid], caches[r.rid].length)
            logits[r.rid].append(out[:, -1])
        in_use = sum(len(caches[r.rid].table) for r, *_ in running)
        if in_use > fullest.get("blocks", 0):
            fullest.update(blocks=in_use, step=step, tables={
                r.rid: (list(caches[r.rid].table), caches[r.rid].length) for r, *_ in running})
        for r, start, end in running:
            if step == end - 1:
                yield r, fed[r.rid], torch.cat(logits[r.rid]), caches[r.rid]
                pool.release(caches[r.rid].table)


cfg = Config()
torch.manual_seed(0)
model = TinyLM(cfg).eval().requires_grad_(False).to(device)  # weights do not matter here
BLOCK, NUM_BLOCKS = 8, SLOTS * cfg.max_seq // 8 // 2  # half of max_seq for every slot
pool, fullest, held = BlockPool(cfg, NUM_BLOCKS, BLOCK, device), {}, {}
for r, tokens, paged_logits, paged in generate_paged(model, schedules["continuous"], pool,
                                                     fullest):
    assert paged.length == tokens.shape[1] == r.prompt + r.output - 1  # last token not fed
    held[r.rid] = (len(paged.table), paged.length)  # blocks and positions at the end
    contiguous = KVCache(cfg)  # the same tokens in one call, into the contiguous cache
    logits = model(tokens, contiguous, 0)[0, r.prompt - 1:]
    torch.testing.assert_close(paged_logits, logits)
    blocks = torch.tensor(paged.table, device=device)
    for layer in range(cfg.layers):
        torch.testing.assert_close(paged.gather(pool.k[layer], blocks), contiguous.k[layer])
        torch.testing.assert_close(paged.gather(pool.v[layer], blocks), contiguous.v[layer])
print(f"{len(REQUESTS)} requests decoded through one pool of {NUM_BLOCKS} blocks × {BLOCK} "
      f"positions: the logits of every step, and each request's keys and values gathered "
      f"through its block table, equal a contiguous KVCache's")
# --8<-- [end:equal]


# --8<-- [start:memory]
bytes_per_position = 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * pool.k.element_size()
assert bytes_per_position == pool.k[:, 0, :, 0].nbytes * 2  # a key and a value per layer
lengths = [held[r.rid][1] for r in REQUESTS]     # positions each request stored
n_blocks = [held[r.rid][0] for r in REQUESTS]   # blocks it held when it finished
assert n_blocks == [math.ceil(n / BLOCK) for n in lengths]  # a block only when needed
slack = [b * BLOCK - n for b, n in zip(n_blocks, lengths)]
assert all(0 <= s < BLOCK for s in slack)       # only the last block is partly empty
reserved = len(REQUESTS) * cfg.max_seq          # a contiguous max_seq cache per request
print(f"\nKV cache: {bytes_per_position:,} bytes per position ({cfg.layers} layers × K and V"
      f" × {cfg.kv_heads} heads × {cfg.head_dim} × {pool.k.element_size()} bytes)")
print(f"{len(REQUESTS)} requests store {sum(lengths):,} positions; reserving max_seq = "
      f"{cfg.max_seq} each takes {reserved:,} ({reserved * bytes_per_position / 2**10:,.0f} KiB, "
      f"{1 - sum(lengths) / reserved:.0%} unused); blocks of {BLOCK} take "
      f"{sum(n_blocks) * BLOCK:,} ({sum(n_blocks) * BLOCK * bytes_per_position / 2**10:,.0f} "
      f"KiB, {sum(slack) / (sum(n_blocks) * BLOCK):.1%} unused, at most {max(slack)} per "
      f"request)")

reserved_slots = SLOTS * cfg.max_seq // BLOCK
print(f"with {SLOTS} requests running at once, at most {fullest['blocks']} blocks were in use "
      f"(decode step {fullest['step']}); reserving max_seq for each slot takes the room of "
      f"{reserved_slots} blocks, and the pool of {NUM_BLOCKS} was never full")
assert fullest["blocks"] <= NUM_BLOCKS == reserved_slots // 2
assert sorted(pool.free) == list(range(NUM_BLOCKS))  # every block came back
# --8<-- [end:memory]


# --8<-- [start:figure]
LABELS = {
    "en": {"static": "static batching, {steps} steps: a batch holds its slots until its longest "
                     "request ends",
           "continuous": "continuous batching, {steps} steps: a freed slot takes the next "
                         "request",
           "slot": "slot {s}", "x": "decode step", "idle": "slot idle or held by a finished request",
           "table": "block tables", "pool": "block pool: {n} blocks × {bs} positions",
           "req": "r{rid}, {n} positions", "slack": "pale: the unused rest of a last block",
           "title": "Decode step {step} of the continuous schedule, when the pool is fullest"},
    "zh": {"static": "静态批处理，{steps} 步：一批请求占着槽位，直到其中最长的请求结束",
           "continuous": "连续批处理，{steps} 步：空出的槽位立即接下一个请求",
           "slot": "槽位 {s}", "x": "解码步", "idle": "槽位空闲，或被已结束的请求占着",
           "table": "块表", "pool": "块池：{n} 个块 × 每块 {bs} 个位置",
           "req": "r{rid}，{n} 个位置", "slack": "浅色：最后一个块里没用上的部分",
           "title": "连续批处理的第 {step} 个解码步，块池最满的时刻"},
}
COLORS = [f"C{i}" for i in range(10)] + ["#8c6d31", "#637939"]


def draw_schedules(fig, text):
    from matplotlib.patches import Patch
    axes = fig.subplots(2, 1, sharex=True)
    for ax, (name, runs) in zip(axes, schedules.items()):
        ax.barh(range(SLOTS), summary[name], height=0.8, color="#eeeeee", hatch="///",
                edgecolor="#bbbbbb", linewidth=0)  # idle wherever no request covers it
        for slot, r, start, end in runs:
            ax.barh(slot, end - start, left=start, height=0.8, color=COLORS[r.rid],
                    edgecolor="white")
            ax.text((start + end) / 2, slot, f"r{r.rid}", ha="center", va="center", fontsize=7)
        ax.axvline(summary[name], color="black", linewidth=1)
        ax.set_yticks(range(SLOTS), [text["slot"].format(s=s) for s in range(SLOTS)])
        ax.invert_yaxis()
        ax.set_title(text[name].format(steps=summary[name]), fontsize=9, loc="left")
    axes[-1].set_xlabel(text["x"])
    axes[-1].set_xlim(0, max(summary.values()) + 1)
    fig.legend(handles=[Patch(facecolor="#eeeeee", hatch="///", edgecolor="#bbbbbb",
                              label=text["idle"])],
               loc="lower center", bbox_to_anchor=(0.5, -0.04), frameon=False, fontsize=8)
    fig.tight_layout()


def draw_block_table(fig, text):
    from matplotlib.patches import Rectangle
    ax, tables, cols, x0 = fig.add_subplot(), fullest["tables"], 8, 8.5  # pool from x0 on
    rows = NUM_BLOCKS // cols
    where = {b: (x0 + b % cols, rows - 1 - b // cols) for b in range(NUM_BLOCKS)}
    written = {}  # block: (request, positions written in it)
    for rid, (table, length) in tables.items():
        written |= {b: (rid, min(BLOCK, length - i * BLOCK)) for i, b in enumerate(table)}
    for b, (x, y) in where.items():
        if b in written:
            rid, n = written[b]
            ax.add_patch(Rectangle((x, y), 0.9, 0.8, color=COLORS[rid], alpha=0.25))
            ax.add_patch(Rectangle((x, y), 0.9 * n / BLOCK, 0.8, color=COLORS[rid]))
        ax.add_patch(Rectangle((x, y), 0.9, 0.8, fill=False, edgecolor="#999999", lw=0.6))
        ax.text(x + 0.45, y + 0.4, str(b), ha="center", va="center", fontsize=7)
    top = min(tables)  # the request drawn on the first row
    for row, (rid, (table, length)) in enumerate(sorted(tables.items())):
        y = rows - 1 - row * (rows - 1) / max(1, len(tables) - 1)
        ax.text(-0.2, y + 0.4, text["req"].format(rid=rid, n=length), ha="right",
                va="center", fontsize=8)
        for i, b in enumerate(table):
            ax.add_patch(Rectangle((i, y), 0.9, 0.8, color=COLORS[rid]))
            ax.text(i + 0.45, y + 0.4, str(b), ha="center", va="center", fontsize=7,
                    color="white")
            if rid == top:  # one request's arrows: table entry i → its block in the pool
                ax.annotate("", xy=(where[b][0] + 0.45, where[b][1] + 0.8),
                            xytext=(i + 0.45, y + 0.8), arrowprops={
                                "arrowstyle": "->", "lw": 0.7, "color": COLORS[rid],
                                "connectionstyle": "arc3,rad=-0.25"})
    ax.text(-0.2, rows + 0.2, text["table"], ha="right", fontsize=9)
    ax.text(x0, rows + 0.2, text["pool"].format(n=NUM_BLOCKS, bs=BLOCK), fontsize=9)
    ax.text(x0, -0.6, text["slack"], fontsize=7, va="center")
    ax.set(xlim=(-4.2, x0 + cols), ylim=(-0.9, rows + 1.2), aspect="equal")
    ax.axis("off")
    ax.set_title(text["title"].format(step=fullest["step"]), fontsize=10)


draw_both("schedules", LABELS, draw_schedules, figsize=(7.2, 3.6))
draw_both("block_table", LABELS, draw_block_table, figsize=(7.2, 3.2))
# --8<-- [end:figure]
