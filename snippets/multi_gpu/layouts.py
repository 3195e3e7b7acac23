"""Choosing a parallel layout: a memory and traffic calculator, checked on a 2 x 2 device mesh.

    python snippets/multi_gpu/layouts.py                      # calculator, figure, then 4 ranks
    torchrun --standalone --nproc_per_node=4 snippets/multi_gpu/layouts.py    # the 4 ranks only

First arithmetic only: per-GPU memory and per-step communication of a 70B model on 64
GPUs for a few layouts (DP, FSDP, TP with sequence parallelism, PP). Then 4 ranks on a
("dp", "tp") = (2, 2) device mesh run a tiny transformer: on each "tp" row, tensor
parallelism without and with sequence parallelism (+ loss_parallel) must equal the
unsharded model; then FSDP over "dp" on top of TP over "tp" trains 3 Adam steps and must
equal one process trained on the whole batch. Every collective is recorded with its mesh
dimension and size, and the counts must equal the calculator's. NCCL when each rank has a
GPU, else gloo on 127.0.0.1.
"""
# snippet: timeout=180 cpu-independent
# The CPU profiles skip this file: it asserts the calculator's arithmetic, the counts and
# sizes of the collectives, and that the 2-D mesh equals one process computing with the same
# kernels on the same machine.

# --8<-- [start:setup]
import math
import os
import sys
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)
from torch.utils._python_dispatch import TorchDispatchMode

from ddp import pick_device, process_group, run_or_spawn

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both  # noqa: E402

TORCHRUN = "RANK" in os.environ and "WORLD_SIZE" in os.environ  # started by torchrun
# --8<-- [end:setup]


# --8<-- [start:calculator]
@dataclass(frozen=True)
class Model:
    params: int   # P, all of them
    layers: int   # L transformer layers: attention + MLP, each behind a norm
    hidden: int   # h
    vocab: int    # V, the output layer's width
    seq: int      # s, tokens per sequence

    @property
    def norm_params(self):  # 2 norms per layer and a final one, h weights each
        return (2 * self.layers + 1) * self.hidden


@dataclass(frozen=True)
class Layout:
    dp: int = 1    # replicas; gradients all-reduced (with fsdp > 1: HSDP)
    fsdp: int = 1  # parameters, gradients and Adam state sharded
    tp: int = 1    # every weight matrix split, with sequence parallelism
    pp: int = 1    # the layers cut into pp stages

    def gpus(self):
        return self.dp * self.fsdp * self.tp * self.pp

    def __str__(self):
        parts = [f"{k.upper()} {getattr(self, k)}" for k in ("tp", "pp", "fsdp", "dp")
                 if getattr(self, k) > 1]
        return " x ".join(parts) or "1 GPU"


def local_params(m, lay):
    """Parameters on one GPU before FSDP: its stage's share, TP-split except the norms."""
    split = (m.params - m.norm_params) / lay.tp + m.norm_params
    return split / lay.pp


def memory(m, lay, micro_batch, checkpointing=False):
    """Bytes per GPU. 16 per parameter: bf16 weight and gradient (2 + 2), fp32 master
    weight and Adam's two moments (4 + 4 + 4). FSDP also holds 2 layers' bf16 weights
    and 1 layer's bf16 gradients unsharded (the layer computing and the prefetched one).
    Activations: 34 s b h bytes per layer (Korthikanti et al. 2022, 16-bit, attention
    scores not kept), split tp ways by TP + SP; with 1F1B the first stage holds pp
    micro-batches of its L/pp layers, L layers' worth. Checkpointing keeps each layer's
    input (2 s b h) and recomputes one layer at a time."""
    sbh = m.seq * micro_batch * m.hidden
    layer = 34 * sbh / lay.tp
    per_layer = local_params(m, lay) * lay.pp / m.layers
    return {
        "states": 16 * local_params(m, lay) / lay.fsdp,
        "FSDP buffers": 3 * 2 * per_layer if lay.fsdp > 1 else 0,
        "activations": m.layers * 2 * sbh / lay.tp + layer if checkpointing else m.layers * layer,
    }


def collectives(m, lay, micro_batch, micro_batches, sp=True):
    """{(parallelism, collective): [calls, elements]} for one step of one GPU. Elements
    are the unsharded side: an all-gather's output, a reduce-scatter's input."""
    out = {}

    def add(dim, kind, calls, elements, times=micro_batches):
        count = out.setdefault((dim, kind), [0, 0])
        count[0] += calls * times
        count[1] += round(elements * times)

    tokens = micro_batch * m.seq
    act = tokens * m.hidden                    # one [b, s, h] activation
    layers = m.layers // lay.pp
    if lay.tp > 1 and sp:   # per layer: attention and MLP; forward: AG in, RS out; backward:
        add("TP", "all-gather", 4 * layers + 1, (4 * layers + 1) * act)  # the reverse;
        add("TP", "reduce-scatter", 4 * layers + 1, (4 * layers + 1) * act)  # +1: output layer
        add("TP", "all-reduce", 3, 3 * tokens)  # loss_parallel: max, sum of exp, target logit
        add("TP", "all-reduce", 2 * layers + 1, (2 * layers + 1) * m.hidden)  # norm gradients
    elif lay.tp > 1:        # 2 all-reduces per block, the logits gathered for a plain loss
        add("TP", "all-reduce", 4 * layers + 1, (4 * layers + 1) * act)
        add("TP", "all-gather", 1, tokens * m.vocab)
    if lay.pp > 1:          # send the activation on, receive its gradient back: both ways
        add("PP", "send", 2, 2 * act / lay.tp)
    if lay.fsdp > 1:        # every group gathered in forward and again in backward
        add("FSDP", "all-gather", 2 * (layers + 1), 2 * local_params(m, lay))
        add("FSDP", "reduce-scatter", layers + 1, local_params(m, lay))
    if lay.dp > 1:          # once per step (no_sync), or after each reduce-scatter (HSDP)
        add("DP", "all-reduce", 1, local_params(m, lay) / lay.fsdp,
            times=micro_batches if lay.fsdp > 1 else 1)
    return out


def sent(kind, n, elements):
    """Elements one rank sends: (n-1)/n of the unsharded side in a ring all-gather or
    reduce-scatter, twice that in a ring all-reduce (a reduce-scatter, then an all-gather)."""
    if kind == "send":
        return elements
    return (2 if kind == "all-reduce" else 1) * (n - 1) / n * elements


def traffic(m, lay, micro_batch, micro_batches, bytes_per=2):
    """Bytes one GPU sends per step, by parallelism (bf16: 2 bytes an element)."""
    size = {"TP": lay.tp, "PP": 2, "FSDP": lay.fsdp, "DP": lay.dp}
    per_dim = Counter()
    for (dim, kind), (_, elements) in collectives(m, lay, micro_batch, micro_batches).items():
        per_dim[dim] += sent(kind, size[dim], elements) * bytes_per
    return per_dim
# --8<-- [end:calculator]


# --8<-- [start:llama]
LLAMA = Model(params=70 * 10**9, layers=80, hidden=8192, vocab=32000, seq=4096)
GPUS, GPU_GB, BATCH_SEQS = 64, 80, 256   # 256 sequences of 4096: about 1M tokens a step
LAYOUTS = [  # (layout, micro-batch, activation checkpointing)
    (Layout(fsdp=64), 1, False),
    (Layout(fsdp=64), 4, True),
    (Layout(dp=8, tp=8), 1, False),
    (Layout(fsdp=8, tp=8), 1, False),
    (Layout(fsdp=8, tp=8), 4, False),
    (Layout(dp=2, pp=4, tp=8), 1, False),
]


def show_layouts():
    tokens = BATCH_SEQS * LLAMA.seq
    print(f"70B model: {LLAMA.layers} layers, hidden {LLAMA.hidden}, sequence {LLAMA.seq}; "
          f"{GPUS} GPUs of {GPU_GB} GB; {BATCH_SEQS} sequences ({tokens:,} tokens) a step")
    print(f"{'GB per GPU':31}{'states':>7}{'FSDP':>6}{'activ.':>8}{'total':>7}  fits   "
          f"{'sent per GPU per step, GB':>26}")
    for lay, b, ckpt in LAYOUTS:
        assert lay.gpus() == GPUS
        m = BATCH_SEQS // (lay.dp * lay.fsdp * b)       # micro-batches per replica and step
        mem = {k: v / 1e9 for k, v in memory(LLAMA, lay, b, ckpt).items()}
        total = sum(mem.values())
        fits = total <= 0.9 * GPU_GB                    # 10% for context, NCCL, temporaries
        sent_gb = {k: v / 1e9 for k, v in traffic(LLAMA, lay, b, m).items()}
        name = f"{lay}, b={b}, m={m}" + (", ckpt" if ckpt else "")
        print(f"{name:31}{mem['states']:7.1f}{mem['FSDP buffers']:6.1f}{mem['activations']:8.1f}"
              f"{total:7.1f}  {'yes' if fits else 'no ':4}  "
              + ", ".join(f"{k} {v:,.1f}" for k, v in sent_gb.items()))
    flops = 6 * LLAMA.params * tokens / GPUS
    print(f"arithmetic per GPU and step, 6 x P x tokens / {GPUS}: {flops:.2e} FLOP "
          "(a third more with checkpointing)")

    # the claims the page makes from this table
    fsdp64 = memory(LLAMA, Layout(fsdp=64), 1)
    assert fsdp64["states"] == 16 * LLAMA.params / 64 and sum(fsdp64.values()) > GPU_GB * 1e9
    assert memory(LLAMA, Layout(dp=8, tp=8), 1)["states"] > GPU_GB * 1e9
    tp8 = [traffic(LLAMA, lay, b, BATCH_SEQS // (lay.dp * lay.fsdp * b))["TP"]
           for lay, b, _ in LAYOUTS if lay.tp == 8]
    assert max(tp8) < 1.01 * min(tp8)   # TP's bytes follow the tokens, not the layout
    pp = traffic(LLAMA, Layout(dp=2, pp=4, tp=8), 1, BATCH_SEQS // 2)
    assert pp["PP"] < pp["DP"] < pp["TP"] / 100


if __name__ == "__main__" and not TORCHRUN:
    show_layouts()
# --8<-- [end:llama]


# --8<-- [start:model]
H, HEAD, FFN, VOCAB, LAYERS = 8, 4, 16, 16, 2   # hidden 8: 2 heads of 4, one per TP rank
BATCH, SEQ, STEPS, LR = 4, 4, 3, 1e-2
PER_LAYER = 2 * H + 4 * H * H + 2 * H * FFN   # 2 norms, q k v o, up and down
TINY = Model(params=LAYERS * PER_LAYER + H + VOCAB * H,   # + final norm and output layer
             layers=LAYERS, hidden=H, vocab=VOCAB, seq=SEQ)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(H, H, bias=False) for _ in range(4))

    def forward(self, x):  # under TP, q(x) has only this rank's heads: hence the -1
        q, k, v = (f(x).unflatten(-1, (-1, HEAD)).transpose(1, 2) for f in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(out.transpose(1, 2).flatten(2))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.mlp_norm = nn.LayerNorm(H, bias=False), nn.LayerNorm(H, bias=False)
        self.attn = Attention()
        self.up, self.down = nn.Linear(H, FFN, bias=False), nn.Linear(FFN, H, bias=False)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.down(F.relu(self.up(self.mlp_norm(x))))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(H, bias=False), nn.Linear(H, VOCAB, bias=False)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def make_model(device):
    torch.manual_seed(0)
    return TinyLM().to(device)


def make_batch(device):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, SEQ, H, generator=g)   # stands for embedded tokens
    return x.to(device), torch.randint(VOCAB, (BATCH, SEQ), generator=g).to(device)


def tp_plan(sp):
    """Megatron's split of each block; with sp, the norms and residuals run on a
    sequence shard, Shard(1), between the blocks."""
    between = Shard(1) if sp else Replicate()
    plan = {"head": ColwiseParallel(input_layouts=between, output_layouts=Shard(-1),
                                    use_local_output=False) if sp
            else ColwiseParallel(output_layouts=Replicate())}
    for i in range(LAYERS):
        block = {"attn": PrepareModuleInput(input_layouts=(between,),  # one gather for q, k, v
                                            desired_input_layouts=(Replicate(),)),
                 "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(),
                 "attn.v": ColwiseParallel(), "attn.o": RowwiseParallel(output_layouts=between),
                 "up": ColwiseParallel(input_layouts=between),
                 "down": RowwiseParallel(output_layouts=between)}
        if sp:
            block |= {"attn_norm": SequenceParallel(), "mlp_norm": SequenceParallel()}
        plan |= {f"layers.{i}.{name}": style for name, style in block.items()}
    if sp:
        plan["norm"] = SequenceParallel()
    return plan
# --8<-- [end:model]


# --8<-- [start:count]
NAMES = {"dp": "FSDP", "tp": "TP"}  # what each dimension of the 2 x 2 mesh runs
KINDS = {"all_gather_into_tensor": "all-gather", "_allgather_base_": "all-gather",
         "reduce_scatter_tensor": "reduce-scatter", "_reduce_scatter_base_": "reduce-scatter",
         "all_reduce": "all-reduce", "allreduce_": "all-reduce"}


class Collectives(TorchDispatchMode):
    """Counts collectives by parallelism: {("TP" or "FSDP", kind): [calls, elements]}.

    DTensor (TP) runs _c10d_functional operators, FSDP2 runs c10d ones. Returning
    NotImplemented for DTensor arguments lets DTensor turn its operation into plain
    tensor operators first, which then pass through here (as in CommDebugMode)."""

    def __init__(self, mesh, names):
        super().__init__()
        self.names = {mesh[d].get_group().group_name: names[d] for d in mesh.mesh_dim_names}
        self.seen = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented
        name = func.__name__.split(".")[0]
        if func.namespace in ("c10d", "_c10d_functional") and name in KINDS:
            kind = KINDS[name]
            if func.namespace == "c10d":  # (output, input, group, ...) or ([tensors], group, ...)
                tensor, group = {"all-gather": (args[0], args[2]),
                                 "reduce-scatter": (args[1], args[2]),
                                 "all-reduce": (args[0][0], args[1])}[kind]
                group, elements = unbox(group).group_name, tensor.numel()
            else:                         # (input, ..., [group_size,] group_name)
                group = args[-1]
                elements = args[0].numel() * (args[1] if kind == "all-gather" else 1)
            count = self.seen.setdefault((self.names[group], kind), [0, 0])
            count[0] += 1
            count[1] += elements
        return func(*args, **(kwargs or {}))


unbox = torch._C._distributed_c10d.ProcessGroup.unbox  # the group a c10d operator received
# --8<-- [end:count]


# --8<-- [start:sp]
def check_sequence_parallel(mesh, device):
    """On each "tp" row: TP without and with SP + loss_parallel, one SGD step, against
    the unsharded model. Rows run this at the same time, on the same full batch."""
    tp, rank = mesh["tp"], dist.get_rank()
    x, y = make_batch(device)
    reference = make_model(device)
    expected = reference(x)
    ref_loss = F.cross_entropy(expected.flatten(0, 1), y.flatten())
    ref_loss.backward()
    torch.optim.SGD(reference.parameters(), lr=LR).step()
    for sp in (False, True):
        model = parallelize_module(make_model(device), tp, tp_plan(sp))
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        mine = x.chunk(tp.size(), dim=1)[tp.get_local_rank()] if sp else x  # SP: my tokens
        with Collectives(mesh, NAMES) as seen:
            with loss_parallel() if sp else nullcontext():
                out = model(mine)           # SP: logits Shard(-1), split by vocabulary
                loss = F.cross_entropy(out.flatten(0, 1), y.flatten())
                loss.backward()
            optimizer.step()                # SP: the norms' Partial gradients all-reduced
        logits = out.full_tensor() if sp else out
        value = loss.full_tensor() if sp else loss
        assert torch.allclose(logits, expected, atol=1e-5)
        assert torch.allclose(value, ref_loss, atol=1e-6)
        for p, q in zip(model.parameters(), reference.parameters()):
            assert torch.allclose(p.full_tensor() if isinstance(p, DTensor) else p, q, atol=1e-6)
        calc = collectives(TINY, Layout(tp=tp.size()), BATCH, 1, sp=sp)
        calc = {k: [c, int(e)] for k, (c, e) in calc.items()}
        assert seen.seen == calc, (seen.seen, calc)
        if rank == 0:
            label = "TP + SP + loss_parallel" if sp else "TP (no SP)"
            print(f"{label:24} loss {value.item():.6f} (unsharded {ref_loss.item():.6f}); "
                  "logits, and parameters after one SGD step, equal the unsharded model's")
            for (dim, kind), (calls, elements) in sorted(seen.seen.items()):
                moved = sent(kind, tp.size(), elements)
                print(f"    {dim} {kind:15}{calls:3} calls {elements:6,} elements "
                      f"-> {moved:6,.0f} sent per rank")
    if rank == 0:
        print("measured collectives == calculator, both variants: True")
# --8<-- [end:sp]


# --8<-- [start:mesh2d]
def rows_held(model, mesh, device):
    """The rows of layers.0.attn.q.weight this rank holds: TP's piece, then FSDP's piece
    of it. Returns the weight and each rank's first row."""
    dp, tp = mesh["dp"], mesh["tp"]
    weight = model.layers[0].attn.q.weight
    whole = make_model(device).layers[0].attn.q.weight.detach()
    tp_rows = H // tp.size()
    start = tp.get_local_rank() * tp_rows + dp.get_local_rank() * (tp_rows // dp.size())
    assert torch.equal(weight.to_local(), whole[start:start + tp_rows // dp.size()])
    starts = [None] * dist.get_world_size()
    dist.all_gather_object(starts, start)
    return weight, starts


def check_2d(mesh, device):
    """FSDP over "dp" on top of TP + SP over "tp": 3 Adam steps, against one process."""
    dp, tp, rank = mesh["dp"], mesh["tp"], dist.get_rank()
    model = parallelize_module(make_model(device), tp, tp_plan(sp=True))  # 1-D sub-mesh
    for layer in model.layers:
        fully_shard(layer, mesh=dp, reshard_after_forward=True)
    fully_shard(model, mesh=dp, reshard_after_forward=True)   # the root: norm and head
    weight, starts = rows_held(model, mesh, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = make_batch(device)
    rows = x.chunk(dp.size())[dp.get_local_rank()]             # my samples,
    mine = rows.chunk(tp.size(), dim=1)[tp.get_local_rank()]   # my tokens of them
    target = y.chunk(dp.size())[dp.get_local_rank()]
    for step in range(STEPS):
        optimizer.zero_grad()
        with Collectives(mesh, NAMES) as seen, loss_parallel():
            F.cross_entropy(model(mine).flatten(0, 1), target.flatten()).backward()
        optimizer.step()
        if step == 0:
            first = seen.seen

    reference = make_model(device)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=LR)
    for _ in range(STEPS):
        ref_opt.zero_grad()
        F.cross_entropy(reference(x).flatten(0, 1), y.flatten()).backward()
        ref_opt.step()
    worst = 0.0
    for p, ref in zip(model.parameters(), reference.parameters()):  # my piece of each
        piece = distribute_tensor(ref.detach(), p.device_mesh, p.placements).to_local()
        assert p.to_local().shape == piece.shape
        assert torch.allclose(p.to_local(), piece, atol=1e-6)
        worst = max(worst, (p.to_local() - piece).abs().max().item())

    lay = Layout(fsdp=dp.size(), tp=tp.size())
    calc = collectives(TINY, lay, BATCH // dp.size(), 1)
    assert first == {k: [c, int(e)] for k, (c, e) in calc.items()}, (first, calc)
    held = sum(p.to_local().numel() for p in model.parameters())
    assert held == local_params(TINY, lay) / lay.fsdp
    if rank == 0:
        print(f"{TINY.params:,} parameters; after TP ({TINY.params:,} - {TINY.norm_params}) / "
              f"{lay.tp} + {TINY.norm_params} = {local_params(TINY, lay):.0f} per rank "
              f"(the norms stay whole), after FSDP {held} per rank")
        n = weight.to_local().shape[0]
        print(f"layers.0.attn.q.weight: global {tuple(weight.shape)}, placements "
              f"{weight.placements}, local {tuple(weight.to_local().shape)}: rows "
              + ", ".join(f"{r}-{r + n - 1} on rank {i}" for i, r in enumerate(starts)))
        print(f"after {STEPS} Adam steps, every rank's pieces == one process on the whole "
              f"batch: True (largest difference {worst:.1e})")
        print(f"one step on rank 0, by mesh dimension (calculator: {lay}, "
              f"micro-batch {BATCH // dp.size()}):")
        for (dim, kind), (calls, elements) in sorted(first.items()):
            n = mesh[{"FSDP": "dp", "TP": "tp"}[dim]].size()
            print(f"    {dim} {kind:15}{calls:3} calls {elements:6,} elements "
                  f"-> {sent(kind, n, elements):6,.0f} sent per rank")
        print("measured collectives == calculator: True")
# --8<-- [end:mesh2d]


# --8<-- [start:figure]
LABELS = {
    "en": {"title": 'init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))',
           "gpu": "rank {r}\nnode {n}, GPU {g}", "row": 'mesh["tp"]: ranks {a}-{b}\n= node {n}',
           "tp": "blue rows, TP: all-gather and reduce-scatter\nof activations in every layer "
                 "(inside a node: NVLink)",
           "col": 'mesh["dp"]', "dp": "dashed columns, FSDP: all-gather weights,\n"
                                       "reduce-scatter gradients (across nodes: network)"},
    "zh": {"title": 'init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))',
           "gpu": "rank {r}\n节点 {n}，GPU {g}", "row": 'mesh["tp"]：rank {a}-{b}\n= 节点 {n}',
           "tp": "蓝色的行，张量并行：每层对激活值做\n"
                 "All-Gather 和 Reduce-Scatter（节点内：NVLink）",
           "col": 'mesh["dp"]', "dp": "虚线的列，FSDP：All-Gather 权重、\n"
                                       "Reduce-Scatter 梯度（跨节点：网络）"},
}
MESH_SHAPE = (2, 4)


def draw_mesh(fig, t):
    from matplotlib.patches import FancyBboxPatch

    ranks = torch.arange(math.prod(MESH_SHAPE)).view(MESH_SHAPE)  # init_device_mesh's order
    rows, cols = MESH_SHAPE
    width = cols * 1.5 - 0.1
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set(xlim=(-0.3, width + 1.6), ylim=(-1.75, rows * 1.3 + 0.4))
    ax.axis("off")
    ax.text(-0.2, rows * 1.3 + 0.1, t["title"], family="monospace", fontsize=9)
    for i in range(rows):  # the "tp" groups: one row each, one node
        y = (rows - 1 - i) * 1.3
        ax.add_patch(FancyBboxPatch((-0.2, y - 0.12), width, 0.94, boxstyle="round,pad=0.02",
                                    fc="#dbe8f7", ec="#2b6cb0", lw=1.5))
        ax.text(width - 0.1, y + 0.35, t["row"].format(a=ranks[i, 0], b=ranks[i, -1], n=i),
                fontsize=8.5, color="#2b6cb0", va="center")
        for j in range(cols):
            ax.add_patch(FancyBboxPatch((j * 1.5, y), 1.1, 0.7, boxstyle="round,pad=0.02",
                                        fc="white", ec="#444"))
            ax.text(j * 1.5 + 0.55, y + 0.35, t["gpu"].format(r=ranks[i, j].item(), n=i, g=j),
                    ha="center", va="center", fontsize=7.5)
    for j in range(cols):  # the "dp" groups: one column each, across the nodes
        ax.add_patch(FancyBboxPatch((j * 1.5 - 0.08, -0.2), 1.26, rows * 1.3 - 0.1,
                                    boxstyle="round,pad=0.02", fc="none", ec="#dd6b20",
                                    lw=1.5, ls="--"))
        ax.text(j * 1.5 + 0.55, -0.45, t["col"], ha="center", fontsize=8, color="#dd6b20",
                family="monospace")
    ax.text(-0.2, -1.2, t["tp"], fontsize=8.5, color="#2b6cb0", va="center")
    ax.text(width / 2 + 0.2, -1.2, t["dp"], fontsize=8.5, color="#dd6b20", va="center")


if __name__ == "__main__" and not TORCHRUN:
    draw_both("mesh", LABELS, draw_mesh, figsize=(8.4, 3.8))
# --8<-- [end:figure]


# --8<-- [start:launch]
WORLD_SIZE = 4  # the (dp, tp) = (2, 2) mesh


def run_rank(rank, world_size, local_rank, local_world_size, store=None):
    if world_size != WORLD_SIZE:
        raise SystemExit(f"layouts.py is written for {WORLD_SIZE} ranks, not {world_size}: "
                         f"its mesh is 2 x 2. Start it with python, or torchrun "
                         f"--nproc_per_node={WORLD_SIZE}.")
    device, backend = pick_device(local_rank, local_world_size)
    gpu = device if device.type == "cuda" else None
    with process_group(backend, store=store, rank=rank, world_size=world_size, device_id=gpu):
        mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("dp", "tp"))
        if rank == 0:
            print(f"{world_size} ranks, backend {backend}, mesh {mesh.mesh.tolist()} named "
                  f"{mesh.mesh_dim_names}: tp rows {mesh['tp'].mesh.tolist()} on rank 0, "
                  f"dp column {mesh['dp'].mesh.tolist()}")
        check_sequence_parallel(mesh, device)
        check_2d(mesh, device)


if __name__ == "__main__":  # torchrun's rank, or (plain python) start the 4 ranks here
    run_or_spawn(run_rank, WORLD_SIZE)
# --8<-- [end:launch]
