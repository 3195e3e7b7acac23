# snippet: timeout=180 cpu-independent
# The CPU profiles skip this file: it asserts the shards, the collectives, and that the
# tensor-parallel layers compute what one process computes on the same machine.
"""Tensor parallelism with DTensor, 2 ranks: each rank holds half of every weight.

    python snippets/multi_gpu/tensor_parallel.py                      # starts its own 2 ranks
    torchrun --standalone --nproc_per_node=2 snippets/multi_gpu/tensor_parallel.py

First a DTensor on a one-dimensional device mesh: what each rank holds locally under
Shard(0), Shard(1), Replicate() and Partial(), and which collective each change of
placement runs. Then a two-layer MLP split with ColwiseParallel and RowwiseParallel:
its output, gradients and one optimizer step must equal those of the unsharded MLP.
NCCL when each rank has a GPU, else gloo on 127.0.0.1.
"""

# --8<-- [start:setup]

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

from ddp import pick_device, process_group, run_or_spawn

WORLD_SIZE = 2  # the tensor-parallel degree: how many ranks share each layer
DIM, HIDDEN, BATCH = 8, 16, 4  # tiny, and divisible by the world size


class MLP(nn.Module):
    """The transformer's feed-forward block: widen, ReLU, narrow back."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def make_mlp():
    torch.manual_seed(0)  # the same weights on every rank, and in the reference
    return MLP()


def make_batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, DIM, generator=g), torch.randn(BATCH, DIM, generator=g)
# --8<-- [end:setup]


def short(counts):
    """{c10d_functional.all_reduce: 1} -> {'all_reduce': 1}"""
    return {str(op).split(".")[-1]: n for op, n in counts.items()}


def collectives(comm):
    """The collectives a CommDebugMode counted, by name."""
    return short(comm.get_comm_counts())


def in_rank_order(rank, world_size, line):
    """Each rank prints its own line, one rank after the other."""
    for turn in range(world_size):
        if turn == rank:
            print(line, flush=True)
        dist.barrier()


# --8<-- [start:dtensor]
def show_placements(mesh, rank, world_size):
    """One global 4 x 4 tensor, laid out over the mesh in three ways."""
    full = torch.arange(16.0, device=mesh.device_type).reshape(4, 4)
    mine = full + 100 * rank  # rank 1 passes other values on purpose
    for placement in (Shard(0), Shard(1), Replicate()):
        d = distribute_tensor(mine, mesh, [placement])  # rank 0's copy is the truth
        local = d.to_local()  # the plain tensor this rank stores
        if isinstance(placement, Shard):
            expected = full.chunk(world_size, dim=placement.dim)[rank]
            held = local.tolist()
        else:
            expected, held = full, "the whole tensor"
        assert torch.equal(local, expected) and d.shape == full.shape
        in_rank_order(rank, world_size, f"[rank {rank}] {placement!r}: global "
                      f"{tuple(d.shape)}, local {tuple(local.shape)} {held}")
        with CommDebugMode() as comm:
            assert torch.equal(d.full_tensor(), full)  # reassemble the global tensor
        if rank == 0:
            print(f"  full_tensor() ran {collectives(comm) or 'no collective'}")
# --8<-- [end:dtensor]


# --8<-- [start:partial]
def show_partial(mesh, rank, world_size):
    """A Partial DTensor: every rank holds a summand; the global value is the sum."""
    local = torch.full((2, 2), float(rank + 1), device=mesh.device_type)
    p = DTensor.from_local(local, mesh, [Partial()])  # no communication yet
    in_rank_order(rank, world_size, f"[rank {rank}] Partial(sum): global "
                  f"{tuple(p.shape)}, local {tuple(local.shape)} all {rank + 1.0}")
    total = float(sum(range(1, world_size + 1)))  # 1 + 2 on two ranks
    for target in (Replicate(), Shard(0)):
        with CommDebugMode() as comm:
            d = p.redistribute(mesh, [target])
        value = d.to_local()
        rows = 2 if target == Replicate() else 2 // world_size
        assert value.shape == (rows, 2) and (value == total).all()
        if rank == 0:
            print(f"Partial(sum) -> {target!r}: local {tuple(value.shape)}, every "
                  f"element {total}, ran {collectives(comm)}")
# --8<-- [end:partial]


# --8<-- [start:tp]
def tensor_parallel(mesh, rank, world_size, device):
    reference = make_mlp().to(device)  # the whole MLP, on every rank
    model = parallelize_module(make_mlp().to(device), mesh, {
        "up": ColwiseParallel(),  # weight [HIDDEN, DIM] split by rows: Shard(0)
        "down": RowwiseParallel(),  # weight [DIM, HIDDEN] split by columns: Shard(1)
    })
    for name, param in model.named_parameters():
        in_rank_order(rank, world_size, f"[rank {rank}] {name:11} {param.placements[0]!r:13}"
                      f" global {tuple(param.shape)}, local {tuple(param.to_local().shape)}")
    stored = sum(p.to_local().numel() for p in model.parameters())
    total = sum(p.numel() for p in reference.parameters())
    # both weights and the first bias are split; the last bias (DIM numbers) is not
    assert stored == (total - DIM) // world_size + DIM
    if rank == 0:
        print(f"each rank stores {stored} of the MLP's {total} parameters "
              f"= ({total} - {DIM}) / {world_size} + {DIM}")

    x, y = (t.to(device) for t in make_batch())
    # x stands for the output of an earlier layer, so it needs a gradient too
    x_tp, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    with CommDebugMode() as comm:
        out = model(x_tp)  # a plain tensor, replicated: RowwiseParallel's default
        nn.functional.mse_loss(out, y).backward()
    expected = reference(x_ref)
    nn.functional.mse_loss(expected, y).backward()

    where = {}  # which layer ran which collective, in forward and in backward
    for name in ("up", "down"):
        counts = comm.comm_module_counts.get(f"MLP.{name}", {})
        where[name] = {step: short(counts.get(step, {})) for step in ("forward", "backward")}
        if rank == 0:
            print(f"{name:4}: forward ran {where[name]['forward'] or 'no collective'}, "
                  f"backward ran {where[name]['backward'] or 'no collective'}")
    assert collectives(comm) == {"all_reduce": 2}
    assert where["down"]["forward"] == where["up"]["backward"] == {"all_reduce": 1}

    assert out.shape == expected.shape and torch.allclose(out, expected, atol=1e-6)
    worst = (out - expected).abs().max().item()
    grads = {name: p.grad for name, p in model.named_parameters()}
    for name, p in reference.named_parameters():
        assert torch.allclose(grads[name].full_tensor(), p.grad, atol=1e-6), name
    assert torch.allclose(x_tp.grad, x_ref.grad, atol=1e-6)
    if rank == 0:
        print(f"TP output == unsharded MLP output: True (largest difference {worst:.1e})")
        print("TP gradients == unsharded gradients (weights, biases, input): True")
    return model, reference
# --8<-- [end:tp]


# --8<-- [start:step]
def one_step(model, reference, rank):
    """SGD on the shards gives the shards of SGD on the whole MLP."""
    with CommDebugMode() as comm:
        torch.optim.SGD(model.parameters(), lr=0.1).step()  # each rank: its own shards
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    assert collectives(comm) == {}
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.allclose(p.full_tensor(), q, atol=1e-6), name
    if rank == 0:
        print("SGD step on the shards ran no collective; after it, "
              "TP parameters == unsharded parameters: True")
# --8<-- [end:step]


# --8<-- [start:rank]
def run_rank(rank, world_size, local_rank, local_world_size, store=None):
    if world_size != WORLD_SIZE:  # e.g. torchrun --nproc_per_node=4
        raise SystemExit(f"tensor_parallel.py is written for {WORLD_SIZE} ranks, not "
                         f"{world_size}: the shapes it splits and the values it checks assume "
                         f"{WORLD_SIZE}. Start it with python, or torchrun --nproc_per_node={WORLD_SIZE}.")
    device, backend = pick_device(local_rank, local_world_size)
    gpu = device if device.type == "cuda" else None
    with process_group(backend, store=store, rank=rank, world_size=world_size, device_id=gpu):
        mesh = init_device_mesh(device.type, (world_size,), mesh_dim_names=("tp",))
        if rank == 0:
            print(f"{world_size} ranks, backend {backend}, mesh {mesh.mesh.tolist()} "
                  f"named {mesh.mesh_dim_names}")
        show_placements(mesh, rank, world_size)
        show_partial(mesh, rank, world_size)
        model, reference = tensor_parallel(mesh, rank, world_size, device)
        one_step(model, reference, rank)


if __name__ == "__main__":  # torchrun's rank, or (plain python) start the ranks here
    run_or_spawn(run_rank, WORLD_SIZE)
# --8<-- [end:rank]
