"""nn.DataParallel's four steps by hand: scatter, replicate, parallel_apply, gather.

On a CPU the steps are written in plain torch: chunk, copy.deepcopy, threads, cat.
On a machine with two or more CUDA devices, the real nn.DataParallel and the real
torch.nn.parallel functions run too, on the same batch, and must agree.
"""

# --8<-- [start:model]
import copy
import threading

import torch
from torch import nn

N_DEVICES = 4  # the article's four GPUs; on a CPU they are four replicas on "cpu"
print_lock = threading.Lock()  # replicas run in threads that share stdout


class Model(nn.Module):
    """One linear layer that reports the size of what it sees."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 2)

    def forward(self, x):
        y = self.fc(x)
        where = f"{x.device}, {threading.current_thread().name}"
        with print_lock:
            print("  In Model: input size", x.size(), "output size", y.size(),
                  "|", where)
        return y


torch.manual_seed(0)
model = Model()
batch = torch.randn(16, 10, 5)  # 16 samples of shape [10, 5]
# --8<-- [end:model]

# --8<-- [start:reference]
print("Unsplit module, one call:")
reference = model(batch)
reference.sum().backward()
reference_grads = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
# --8<-- [end:reference]

# --8<-- [start:scatter]
chunks = batch.chunk(N_DEVICES, dim=0)  # DataParallel's scatter splits with chunk too
assert [c.shape for c in chunks] == [torch.Size([4, 10, 5])] * 4
# --8<-- [end:scatter]

# --8<-- [start:replicate]
replicas = [copy.deepcopy(model) for _ in chunks]  # a whole module per device
# --8<-- [end:replicate]

# --8<-- [start:parallel_apply]
outputs = [None] * len(replicas)


def run_replica(i):
    outputs[i] = replicas[i](chunks[i])


print(f"Hand-made DataParallel, {len(replicas)} replicas in threads:")
threads = [threading.Thread(target=run_replica, args=(i,), name=f"replica-{i}")
           for i in range(len(replicas))]
for t in threads:
    t.start()
for t in threads:
    t.join()
# --8<-- [end:parallel_apply]

# --8<-- [start:gather]
output = torch.cat(outputs, dim=0)  # on output_device (default: device_ids[0])
print("Outside: input size", batch.size(), "output size", output.size())
assert output.shape == (16, 10, 2)
assert torch.allclose(output, reference)
# --8<-- [end:gather]

# --8<-- [start:backward]
output.sum().backward()  # each replica's parameters get the gradient of its own chunk
for original, *copies in zip(model.parameters(), *(r.parameters() for r in replicas)):
    original.grad = sum(c.grad for c in copies)  # onto the module on device_ids[0]
for got, want in zip(model.parameters(), reference_grads):
    assert torch.allclose(got.grad, want, atol=1e-6)
print("outputs and gradients equal the unsplit module's: True")
# --8<-- [end:backward]

# --8<-- [start:uneven]
from torch.utils.data import DistributedSampler


def split_sizes(size):
    x = torch.zeros(size, 10, 5)
    by_chunk = [len(c) for c in x.chunk(N_DEVICES)]  # what scatter does
    by_split = [len(c) for c in x.tensor_split(N_DEVICES)]
    by_sampler = [len(DistributedSampler(range(size), num_replicas=N_DEVICES, rank=r))
                  for r in range(N_DEVICES)]  # what DDP's usual data loading does
    return by_chunk, by_split, by_sampler


for size in (30, 6):
    by_chunk, by_split, by_sampler = split_sizes(size)
    print(f"batch {size} on {N_DEVICES} devices: chunk {by_chunk}, "
          f"tensor_split {by_split}, DistributedSampler {by_sampler}")
assert split_sizes(30) == ([8, 8, 8, 6], [8, 8, 7, 7], [8, 8, 8, 8])  # 2 repeated
assert split_sizes(6)[0] == [2, 2, 2]  # only 3 chunks: the 4th device gets no work
# --8<-- [end:uneven]

# --8<-- [start:output_device]
# DataParallel.__init__ passes output_device through this function:
from torch._utils import _get_device_index

assert _get_device_index(-1, True) == -1  # -1 means "gather on the CPU"
try:
    _get_device_index("cpu", True)
except ValueError as error:
    print("output_device='cpu' is refused:", error)
else:
    raise AssertionError("expected ValueError for output_device='cpu'")
# --8<-- [end:output_device]

# --8<-- [start:real]
from torch._utils import _get_all_device_indices, _get_available_device_type


def real_data_parallel_plan(device_type, n_devices):
    """What the real nn.DataParallel can show here, decided before touching a GPU.

    device_type is what DataParallel.__init__ consults (_get_available_device_type):
    None or "mps" leaves device_ids == [] and makes it a plain call; any other
    accelerator gives device_ids = all its devices, and with only one of them the
    constructor moves the module to that device.
    """
    if device_type in (None, "mps"):
        return "plain call"
    if device_type == "cuda" and n_devices >= 2:
        return "run"
    return "too few"


device_type = _get_available_device_type()
n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
plan = real_data_parallel_plan(device_type, n_gpus)
if plan != "run":
    print(f"Real nn.DataParallel: NOT RUN here: {n_gpus} CUDA "
          f"device{'' if n_gpus == 1 else 's'}, it needs 2 or more.")
if plan == "plain call":
    wrapped = nn.DataParallel(model)  # returns early: nothing is moved
    assert wrapped.device_ids == [] and wrapped.module is model  # a plain call
    print("  (Here nn.DataParallel(model) has device_ids == [] and calls the module.)")
elif plan == "too few":
    # Not constructed: with one device, DataParallel.__init__ would take
    # device_ids=[0] and move `model` itself to that device.
    ids = _get_all_device_indices()  # what DataParallel(model) would use
    moves = f" and move the module to {device_type}:{ids[0]}" if len(ids) == 1 else ""
    print(f"  (Here nn.DataParallel(model) would take device_ids == {ids}{moves}; "
          "it was not constructed, so the model stays where it was.)")
    if device_type == "cuda":
        assert ids == list(range(n_gpus))
    assert all(p.device.type == "cpu" for p in model.parameters())  # model stayed
else:
    from torch.nn.parallel import gather, parallel_apply, replicate, scatter

    device_ids = list(range(min(n_gpus, N_DEVICES)))
    print(f"Real nn.DataParallel, {torch.cuda.get_device_name(0)} x {n_gpus}, "
          f"device_ids={device_ids}:")
    gpu_model = copy.deepcopy(model).cuda(device_ids[0])  # on device_ids[0]
    dp = nn.DataParallel(gpu_model, device_ids=device_ids)
    dp_output = dp(batch)  # the batch is still on the CPU
    print("Outside: input size", batch.size(), "output size", dp_output.size(),
          "on", dp_output.device)
    dp_output.sum().backward()
    assert dp_output.device == torch.device("cuda", device_ids[0])
    assert torch.allclose(dp_output.cpu(), reference, atol=1e-5)
    for got, want in zip(gpu_model.parameters(), reference_grads):
        assert got.grad.device == dp_output.device
        assert torch.allclose(got.grad.cpu(), want, atol=1e-5)
    print("Real nn.DataParallel: outputs and gradients equal the unsplit ones: True")

    flipped = device_ids[::-1]  # device_ids[0] need not be GPU 0
    try:
        nn.DataParallel(gpu_model, device_ids=flipped)(batch)
    except RuntimeError as error:
        print(f"module on cuda:{device_ids[0]}, device_ids[0] == {flipped[0]}:", error)
    else:
        raise AssertionError("expected RuntimeError: parameters not on device_ids[0]")
    moved = copy.deepcopy(model).cuda(flipped[0])
    cpu_output = nn.DataParallel(moved, device_ids=flipped, output_device=-1)(batch)
    print(f"device_ids={flipped}, output_device=-1: output on", cpu_output.device)
    assert cpu_output.device.type == "cpu"
    assert torch.allclose(cpu_output, reference, atol=1e-5)

    print("The same four steps with torch.nn.parallel:")
    inputs = scatter(batch, device_ids)
    copies = replicate(gpu_model, device_ids[: len(inputs)])
    results = parallel_apply(copies, inputs, devices=device_ids[: len(inputs)])
    merged = gather(results, "cpu")
    print("  scatter ->", [f"{tuple(t.shape)} on {t.device}" for t in inputs])
    print("  gather  ->", tuple(merged.shape), "on", merged.device)
    assert torch.allclose(merged, reference, atol=1e-5)
    thirty = [len(t) for t in scatter(torch.zeros(30, 10, 5), device_ids)]
    print("  scatter of a batch of 30 ->", thirty)
    assert thirty == [len(c) for c in torch.zeros(30).chunk(len(device_ids))]
# --8<-- [end:real]
