"""Distributed checkpoint (DCP) of an FSDP2 model: saved by 4 ranks, loaded by 4, by 2 and by one process.

    python snippets/multi_gpu/distributed_checkpoint.py     # starts its own ranks

4 ranks train the FSDP page's model for 3 Adam steps and save model and optimizer with
torch.distributed.checkpoint.save: each rank writes only its own shards, one .distcp
file per rank, and rank 0 writes the .metadata that says where every piece lies. The
same 4 ranks load it back into a freshly sharded model, and try dcp.async_save; a
second launch with 2 ranks loads it into a model sharded 2 ways (resharding on load);
then this process, with no process group at all, loads it into a plain nn.Module.
NCCL when each rank has a GPU, else gloo on 127.0.0.1.
"""
# snippet: timeout=180 cpu-independent
# The CPU profiles skip this file: what it checks is which files the ranks write and that the
# bytes loaded back equal the bytes saved, which no CPU kernel or thread count changes.

# --8<-- [start:setup]
import os
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.nn import functional as F

from ddp import join_store, pick_device, process_group, spawn
from fsdp import LR, STEPS, make_batch, make_model, shard

SAVED_BY, LOADED_BY = 4, 2   # ranks that save, ranks that load the same checkpoint
MAIN = __name__ == "__main__"  # False in the spawned ranks, which import this file


def sharded(mesh, device):
    """The FSDP page's model, sharded over `mesh`, and its Adam."""
    model = shard(make_model().to(device), mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    return model, optimizer


def state_of(model, optimizer):
    """DTensors keyed by parameter name; for a new optimizer, this creates Adam's state."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optim": optim_sd}


def full(state):
    """A nested state dict with every DTensor gathered into a whole CPU tensor."""
    if isinstance(state, dict):
        return {k: full(v) for k, v in state.items()}
    if hasattr(state, "full_tensor"):
        return state.full_tensor().cpu()   # an all-gather: every rank calls it
    return state.cpu() if isinstance(state, torch.Tensor) else state


def same(a, b):
    """Two nested state dicts hold the same keys, values and tensors, bit for bit."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(u, v) for u, v in zip(a, b))
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
# --8<-- [end:setup]


# --8<-- [start:save]
def save_on_4(rank, world_size, device, mesh, folder):
    model, optimizer = sharded(mesh, device)
    x, y = (t.chunk(world_size)[rank].to(device) for t in make_batch())
    for _ in range(STEPS):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()

    state = state_of(model, optimizer)
    dcp.save(state, checkpoint_id=folder / "step3")   # each rank writes its own shards
    reference = full(state)
    if rank == 0:
        torch.save(reference, folder / "reference.pt")  # whole tensors, to check the loads

    model2, optimizer2 = sharded(mesh, device)           # a fresh model, sharded 4 ways
    state2 = state_of(model2, optimizer2)
    dcp.load(state2, checkpoint_id=folder / "step3")     # fills those DTensors in place
    set_state_dict(model2, optimizer2, model_state_dict=state2["model"],
                   optim_state_dict=state2["optim"])
    assert all(torch.equal(a.to_local(), b.to_local())
               for a, b in zip(model.parameters(), model2.parameters()))
    assert same(full(state_of(model2, optimizer2)), reference)
    if rank == 0:
        print(f"{world_size} ranks trained {STEPS} steps and saved; the same {world_size} ranks "
              "loaded it into a fresh model: every shard and Adam moment identical: True")
    return model, optimizer, x, y
# --8<-- [end:save]


# --8<-- [start:async]
def async_save_while_training(rank, model, optimizer, x, y, folder):
    """dcp.async_save copies the state first; a thread writes the files while training goes on."""
    group = dist.new_group(backend="gloo")  # a CPU group of its own for the writer thread
    state = state_of(model, optimizer)
    before = full(state["model"])
    future = dcp.async_save(state, checkpoint_id=folder / "step3_async", process_group=group)
    optimizer.zero_grad()                   # step 4 changes the parameters in place ...
    F.mse_loss(model(x), y).backward()
    optimizer.step()
    future.result()                         # ... maybe while files are still written
    changed = not same(full(state_of(model, optimizer)["model"]), before)
    if rank == 0:
        torch.save({"returned": type(future).__name__, "changed": changed}, folder / "async.pt")
    dist.destroy_process_group(group)
# --8<-- [end:async]


# --8<-- [start:launch]
def rank_main(rank, world_size, port, folder, job):
    device, backend = pick_device(rank, world_size)
    gpu = device if device.type == "cuda" else None
    with process_group(backend, store=join_store(port), rank=rank, world_size=world_size,
                       device_id=gpu):
        mesh = init_device_mesh(device.type, (world_size,))
        if job == "save":
            model, optimizer, x, y = save_on_4(rank, world_size, device, mesh, folder)
            async_save_while_training(rank, model, optimizer, x, y, folder)
        else:
            load_on_2(rank, world_size, device, mesh, folder)


if MAIN:
    if "RANK" in os.environ:  # torchrun would start this launcher once per rank
        sys.exit("distributed_checkpoint.py starts its own 4 and then 2 ranks: "
                 "run it with python, not torchrun")
    workdir = tempfile.TemporaryDirectory()
    folder = Path(workdir.name)
    spawn(rank_main, SAVED_BY, folder, "save")
# --8<-- [end:launch]


# --8<-- [start:files]
def show_files(checkpoint):
    """The files of a checkpoint folder, and what each .distcp file holds."""
    metadata = dcp.FileSystemReader(checkpoint).read_metadata()
    shards, whole = {}, {}
    for index, info in metadata.storage_data.items():
        chunks = getattr(metadata.state_dict_metadata[index.fqn], "chunks", [])
        kind = shards if len(chunks) > 1 else whole  # split over ranks, or one piece
        kind[info.relative_path] = kind.get(info.relative_path, 0) + 1
    files = sorted(p.name for p in checkpoint.iterdir())
    print(f"{checkpoint.name}/")
    for name in files:
        what = "" if name == ".metadata" else (
            f": {shards.get(name, 0)} shards, {whole.get(name, 0)} items written once")
        print(f"  {name:<14}{(checkpoint / name).stat().st_size:>8,} bytes{what}")
    assert files == [".metadata"] + [f"__{r}_0.distcp" for r in range(SAVED_BY)]


if MAIN:
    show_files(folder / "step3")
# --8<-- [end:files]


# --8<-- [start:reshard]
def load_on_2(rank, world_size, device, mesh, folder):
    model, optimizer = sharded(mesh, device)                # sharded 2 ways this time
    state = state_of(model, optimizer)
    dcp.load(state, checkpoint_id=folder / "step3")         # reads the pieces it needs
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    reference = torch.load(folder / "reference.pt", weights_only=True)
    assert same(full(state_of(model, optimizer)), reference)
    if rank == 0:
        local = tuple(model[0].weight.to_local().shape)
        print(f"{world_size} ranks loaded the {SAVED_BY}-rank checkpoint: each holds "
              f"0.weight as {local}; full_tensor() of every parameter and Adam moment "
              f"== what {SAVED_BY} ranks saved: True")


def rows(start, length):
    return f"rows {start}-{start + length - 1}"


def show_resharding(checkpoint, key="model.0.weight"):
    """Where the saved pieces of one tensor lie, and which of them a load on N ranks reads."""
    metadata = dcp.FileSystemReader(checkpoint).read_metadata()
    saved = metadata.state_dict_metadata[key]
    print(f"\n{key}, global size {tuple(saved.size)}, in .metadata:")
    for index, info in metadata.storage_data.items():
        if index.fqn == key:
            print(f"  chunk at offsets {tuple(index.offset)}: {info.relative_path}, "
                  f"bytes {info.offset:,}-{info.offset + info.length:,}")
    n_rows, n_cols = saved.size
    for ranks in (LOADED_BY, 3):
        print(f"a load on {ranks} ranks reads:")
        start = 0
        for rank, length in enumerate(len(c) for c in torch.arange(n_rows).chunk(ranks)):
            wanted = ChunkStorageMetadata(torch.Size([start, 0]), torch.Size([length, n_cols]))
            reads = create_read_items_for_chunk_list(key, saved, [wanted])
            pieces = [(r.storage_index.offset[0] + r.storage_offsets[0], r.lengths[0],
                       metadata.storage_data[r.storage_index].relative_path) for r in reads]
            assert sum(n for _, n, _ in pieces) == length  # its rows, each read once
            print(f"  rank {rank}, {rows(start, length)}: "
                  + ", ".join(f"{rows(s, n)} from {f}" for s, n, f in pieces))
            start += length


if MAIN:
    show_resharding(folder / "step3")
    spawn(rank_main, LOADED_BY, folder, "load")
# --8<-- [end:reshard]


# --8<-- [start:single]
def load_without_process_group(checkpoint):
    """No process group: dcp.load reads the shards of all ranks into plain tensors."""
    model = make_model()
    state = {"model": model.state_dict()}  # only the model: the optimizer part stays on disk
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled")
        dcp.load(state, checkpoint_id=checkpoint, no_dist=True)
    model.load_state_dict(state["model"])
    return model


if MAIN:
    reference = torch.load(folder / "reference.pt", weights_only=True)
    model = load_without_process_group(folder / "step3")
    assert same(model.state_dict(), reference["model"])
    print("\none process, no process group: dcp.load into a plain nn.Module == saved: True")
    dcp_to_torch_save(folder / "step3", folder / "step3.pt")  # the whole checkpoint, one file
    whole = torch.load(folder / "step3.pt", weights_only=True)
    assert same(whole, reference)
    print(f"dcp_to_torch_save: one torch.save file of {(folder / 'step3.pt').stat().st_size:,} "
          f"bytes, keys {sorted(whole)}, == saved: True")
# --8<-- [end:single]


# --8<-- [start:async-check]
if MAIN:
    told = torch.load(folder / "async.pt", weights_only=True)
    model = load_without_process_group(folder / "step3_async")
    assert told["changed"] and same(model.state_dict(), reference["model"])
    print(f"dcp.async_save returned a {told['returned']}; step 4 ran before waiting on it "
          "and changed the parameters; the files hold step 3: True")
    show_files(folder / "step3_async")
    workdir.cleanup()
# --8<-- [end:async-check]
