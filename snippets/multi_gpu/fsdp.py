"""FSDP2 (fully_shard), 4 ranks: parameters, gradients and Adam state sharded 4 ways.

    python snippets/multi_gpu/fsdp.py                      # starts its own 4 ranks
    torchrun --standalone --nproc_per_node=4 snippets/multi_gpu/fsdp.py

Each rank counts the bytes it holds after a few Adam steps and checks them against
the per-parameter formula of the memory page divided by 4; the trained parameters,
gathered with full_tensor(), must equal one process trained on the whole batch. Then
the same step runs with reshard_after_forward=True, False and 2, counting the
collectives, and a layer whose 10 rows do not divide by 4 shows the padding.
NCCL when each rank has a GPU, else gloo on 127.0.0.1.
"""
# snippet: timeout=180 cpu-independent
# The CPU profiles skip this file: it asserts the shards, the collectives and their sizes, and
# that FSDP2 trains as one process does with the same kernels on the same machine.

# --8<-- [start:setup]
import math

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode

from ddp import pick_device, process_group, run_or_spawn

WORLD_SIZE = 4
BATCH, STEPS, LR = 16, 3, 1e-2      # each rank trains on BATCH // WORLD_SIZE samples
SIZES = (32, 64, 64, 8)             # three Linear layers; 64, 64 and 8 divide by 4


def make_model():
    torch.manual_seed(0)
    layers = []
    for n_in, n_out in zip(SIZES, SIZES[1:]):
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])  # no ReLU after the last layer


def make_batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, SIZES[0], generator=g)
    return x, torch.randn(BATCH, SIZES[-1], generator=g)


def shard(model, mesh, reshard_after_forward=None):
    """fully_shard bottom-up: one group per Linear, then the root."""
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
# --8<-- [end:setup]


# --8<-- [start:count]
def local(t):
    """The part of a tensor that lives on this rank: a DTensor's local shard."""
    return t.to_local() if isinstance(t, DTensor) else t


def nbytes(tensors):
    return sum(local(t).numel() * local(t).element_size() for t in tensors)


def held_bytes(model, optimizer):
    return {
        "parameters": nbytes(model.parameters()),
        "gradients": nbytes(p.grad for p in model.parameters()),
        "Adam state": nbytes(t for s in optimizer.state.values() for t in s.values()),
    }


def formula(n_params, n_tensors, world_size, itemsize=4):
    """The memory page's 4 + 4 + 8 bytes per parameter, split world_size ways.

    Adam's one-element `step` counters are plain tensors, not DTensors: every rank
    keeps all of them.
    """
    share = n_params // world_size
    return {
        "parameters": share * itemsize,
        "gradients": share * itemsize,
        "Adam state": 2 * share * itemsize + 4 * n_tensors,
    }
# --8<-- [end:count]


# --8<-- [start:train]
def train(rank, world_size, device, mesh):
    model = shard(make_model().to(device), mesh)
    full = list(make_model().parameters())
    for p, whole in zip(model.parameters(), full):  # dim-0 sharding: rank r has chunk r
        assert isinstance(p, DTensor) and p.placements[0].is_shard(dim=0)
        assert torch.equal(p.to_local().cpu(), whole.detach().chunk(world_size)[rank])
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = make_batch()
    xs, ys = x.chunk(world_size)[rank].to(device), y.chunk(world_size)[rank].to(device)
    for _ in range(STEPS):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(xs), ys).backward()  # reduce-scatter: mean over ranks
        optimizer.step()
    return model, optimizer


def reference():
    """One process, the whole batch of 16, the same Adam steps."""
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = make_batch()
    for _ in range(STEPS):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return model
# --8<-- [end:train]


# --8<-- [start:check]
def check_training(rank, world_size, device, mesh):
    model, optimizer = train(rank, world_size, device, mesh)
    params = list(make_model().parameters())
    n_params, n_tensors = sum(p.numel() for p in params), len(params)
    mine = held_bytes(model, optimizer)
    expected = formula(n_params, n_tensors, world_size)
    assert mine == expected, (rank, mine, expected)
    everyone = [None] * world_size
    dist.all_gather_object(everyone, mine)

    gathered = [p.full_tensor().cpu() for p in model.parameters()]  # an all-gather each
    single = list(reference().parameters())
    worst = max((a - b).abs().max().item() for a, b in zip(gathered, single))
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(gathered, single))

    if rank == 0:
        one = formula(n_params, n_tensors, 1)
        print(f"model: {n_params:,} parameters in {n_tensors} tensors; "
              f"{world_size} ranks hold {n_params // world_size:,} each")
        ranks = "".join(f"{'rank ' + str(r):>9}" for r in range(world_size))
        print(f"{'bytes':<12}{ranks}{'formula':>9}{'1 device':>10}")
        for part in expected:
            print(f"{part:<12}" + "".join(f"{e[part]:>9,}" for e in everyone)
                  + f"{expected[part]:>9,}{one[part]:>10,}")
        total, whole = sum(expected.values()), sum(one.values())
        print(f"{'total':<12}" + "".join(f"{sum(e.values()):>9,}" for e in everyone)
              + f"{total:>9,}{whole:>10,}")
        print(f"per rank: 16 x {n_params:,} / {world_size} + 4 x {n_tensors} = {total:,} "
              f"bytes, against {whole:,} on one device")
        print(f"after {STEPS} Adam steps, full_tensor() == single-process parameters: "
              f"True (largest difference {worst:.1e})")
# --8<-- [end:check]


# --8<-- [start:reshard]
COLLECTIVES = {"_allgather_base_": "all-gather", "_reduce_scatter_base_": "reduce-scatter",
               "allreduce_": "all-reduce"}


def numel(arg):
    if isinstance(arg, torch.Tensor):
        return arg.numel()
    return sum(numel(a) for a in arg) if isinstance(arg, (list, tuple)) else 0


class Collectives(TorchDispatchMode):
    """Records the collectives run inside it, with the number of elements on their
    unsharded side: an all-gather's output, a reduce-scatter's input.
    """

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if func.namespace == "c10d" and name in COLLECTIVES:
            self.calls.append((COLLECTIVES[name], max(numel(args[0]), numel(args[1]))))
        return func(*args, **(kwargs or {}))

    def count(self, name):
        return sum(1 for n, _ in self.calls if n == name)

    def elements(self, name):
        return sum(e for n, e in self.calls if n == name)


def one_step(model, device):
    """Forward, then backward: what the module holds between the two, what moved."""
    x, y = (t.to(device) for t in make_batch())
    with Collectives() as seen:
        out = model(x)
        between = nbytes(model.parameters())  # the parameters registered after forward
        nn.functional.mse_loss(out, y).backward()
    return between, seen


def check_reshard(rank, world_size, device, mesh):
    n_params = sum(p.numel() for p in make_model().parameters())
    layers = len(SIZES) - 1
    gpu = [device.index] if device.type == "cuda" else None
    ddp = DDP(make_model().to(device), device_ids=gpu)
    runs = [("DDP", None, ddp)] + [
        (f"FSDP2, reshard {option}", option, shard(make_model().to(device), mesh, option))
        for option in (True, False, 2)]  # 2: reshard to groups of 2 ranks after forward
    if rank == 0:
        print(f"\n{'one step, each rank':<22}{'params after forward':>20}  "
              f"{'collectives':<31}{'elements':>15}")
    for name, option, model in runs:
        between, seen = one_step(model, device)
        if option is None:  # DDP: whole parameters, one all-reduce of the gradients
            assert between == 4 * n_params
            assert seen.elements("all-reduce") == n_params
            what, moved = f"{seen.count('all-reduce')} all-reduce", f"{n_params:,}"
        else:
            split = world_size if option is True else 1 if option is False else option
            assert between == 4 * n_params // split
            gathers = layers if option is False else 2 * layers  # forward (+ backward)
            assert seen.count("all-gather") == gathers
            assert seen.elements("all-gather") == n_params * gathers // layers
            assert seen.count("reduce-scatter") == layers
            assert seen.elements("reduce-scatter") == n_params  # the full gradients
            what = f"{gathers} all-gather, {layers} reduce-scatter"
            moved = f"{seen.elements('all-gather'):,} + {n_params:,}"
        if rank == 0:
            print(f"{name:<22}{between:>14,} bytes  {what:<31}{moved:>15}")
# --8<-- [end:reshard]


# --8<-- [start:padding]
def check_padding(rank, world_size, device, mesh):
    """10 rows on 4 ranks: torch.chunk gives 3, 3, 3, 1; the collectives move 4 x 3."""
    layer = nn.Linear(4, 10).to(device)
    fully_shard(layer, mesh=mesh)
    with Collectives() as seen:
        layer(torch.ones(2, 4, device=device)).sum().backward()
    rows = [None] * world_size
    dist.all_gather_object(rows, layer.weight.to_local().shape[0])
    assert rows == [len(c) for c in torch.arange(10).chunk(world_size)]
    padded = math.ceil(10 / world_size)          # every rank's shard is padded to this
    per_rank = padded * 4 + padded               # weight rows x 4 columns, and bias
    assert seen.elements("all-gather") == world_size * per_rank
    if rank == 0:
        print(f"\nLinear(4, 10) on {world_size} ranks: weight rows per rank {rows}; "
              f"the all-gather returns {world_size * per_rank} elements for the "
              f"{10 * 4 + 10} parameters ({world_size * per_rank - 50} of padding)")
# --8<-- [end:padding]


# --8<-- [start:launch]
def run_rank(rank, world_size, local_rank, local_world_size, store=None):
    device, backend = pick_device(local_rank, local_world_size)
    gpu = device if device.type == "cuda" else None
    options = dict(store=store, rank=rank, world_size=world_size, device_id=gpu)
    with process_group(backend, **options):
        assert world_size == WORLD_SIZE, f"written for {WORLD_SIZE} ranks"
        mesh = init_device_mesh(device.type, (world_size,))
        if rank == 0:
            print(f"{world_size} ranks, backend {backend}, device mesh {mesh}")
        check_training(rank, world_size, device, mesh)
        check_reshard(rank, world_size, device, mesh)
        check_padding(rank, world_size, device, mesh)


if __name__ == "__main__":  # torchrun's rank, or (plain python) start the 4 ranks here
    run_or_spawn(run_rank, WORLD_SIZE)
# --8<-- [end:launch]
