"""Common CUDA errors: reproduced where a CPU can, with the build's real messages."""

import datetime
import multiprocessing
import os
import socket
import subprocess
import sys
import time

import torch

# --8<-- [start:build]
if torch.version.cuda is not None:
    build = "cuda"
elif torch.version.hip is not None:
    build = "rocm"
else:
    build = "no-cuda"                          # a +cpu wheel, or a Mac wheel
print("torch", torch.__version__, "| build:", build,
      "| torch.cuda.is_available():", torch.cuda.is_available())
# --8<-- [end:build]


# --8<-- [start:not-compiled]
def first_cuda_tensor() -> str:
    """What creating one CUDA tensor does in this process."""
    try:
        torch.ones(1, device="cuda")
    except (AssertionError, RuntimeError) as error:
        return f"{type(error).__name__}: {error}"
    return "ok"


said = first_cuda_tensor()
print("torch.ones(1, device='cuda') ->", said)
if build == "no-cuda":
    assert said == "AssertionError: Torch not compiled with CUDA enabled"
elif torch.cuda.is_available():
    assert said == "ok"
else:                                           # a GPU build that finds no GPU
    assert said.startswith("RuntimeError")
# --8<-- [end:not-compiled]


# --8<-- [start:visible]
probe = ("import torch; print(torch.cuda.is_available(), torch.cuda.device_count())")
hidden = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), check=True)
print("with CUDA_VISIBLE_DEVICES='':", hidden.stdout.strip())
assert hidden.stdout.split() == ["False", "0"]  # an empty list hides every GPU
# --8<-- [end:visible]


# --8<-- [start:oom]
assert torch.cuda.OutOfMemoryError is torch.OutOfMemoryError
assert issubclass(torch.OutOfMemoryError, RuntimeError)
try:
    torch.empty(2**62, dtype=torch.uint8)      # 4 EiB on the CPU
except RuntimeError as error:
    cpu_error = error
print("CPU:", type(cpu_error).__name__, str(cpu_error)[str(cpu_error).find("Default"):])
assert "DefaultCPUAllocator" in str(cpu_error)
assert not isinstance(cpu_error, torch.OutOfMemoryError)  # a plain RuntimeError
if torch.cuda.is_available():
    free, total = torch.cuda.mem_get_info()
    try:
        torch.empty(2 * total, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as error:
        print("GPU: OutOfMemoryError:", str(error).split(". ")[0])
    else:
        raise AssertionError("twice the GPU's memory must not fit")
    torch.cuda.empty_cache()
else:
    print("GPU: not run, no CUDA device")
# --8<-- [end:oom]

# --8<-- [start:bad-index]
logits, labels = torch.randn(2, 3), torch.tensor([0, 5])  # 3 classes, label 5
for name, bad_call in [
    ("cross_entropy", lambda: torch.nn.functional.cross_entropy(logits, labels)),
    ("embedding", lambda: torch.nn.Embedding(3, 2)(torch.tensor([3]))),
    ("indexing", lambda: torch.arange(3)[torch.tensor([5])]),
]:
    try:
        bad_call()
    except IndexError as error:                 # raised at once, on this line
        print(f"CPU {name:<13} IndexError: {error}")
    else:
        raise AssertionError(f"{name} with a bad index must fail")
# --8<-- [end:bad-index]

# --8<-- [start:arch]
arch = torch.cuda.get_arch_list()
print("torch.cuda.get_arch_list():", arch)
if build == "no-cuda":
    assert arch == []                           # no CUDA kernels at all
if torch.cuda.is_available():
    major, minor = torch.cuda.get_device_capability()
    print(f"this GPU: sm_{major}{minor}", "| built for it exactly:",
          f"sm_{major}{minor}" in arch)
# --8<-- [end:arch]


# --8<-- [start:timeout]
def rank_main(rank, port, report, release):
    """Rank 0 joins an all_reduce that rank 1 never calls."""
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=False,  # a lost host fails
                                       timeout=datetime.timedelta(seconds=30))  # in 30 s, not 5 min
    torch.distributed.init_process_group(
        "gloo", store=store, rank=rank, world_size=2,
        timeout=datetime.timedelta(seconds=1))  # the default is 30 min (10 for NCCL)
    if rank == 0:
        start = time.perf_counter()
        try:
            torch.distributed.all_reduce(torch.ones(4))
            report.put(("no error", 0.0))
        except RuntimeError as error:
            report.put((f"{type(error).__name__}: {error}", time.perf_counter() - start))
    else:
        release.wait(30)                        # alive, but in no collective
    torch.distributed.destroy_process_group()


if not torch.distributed.is_available():
    print("torch.distributed is not available in this build")
elif sys.platform != "linux":   # the demo forks; elsewhere spawn would rerun this file
    print("collective timeout demo: runs on Linux only")
else:
    from torch.distributed.constants import default_pg_nccl_timeout, default_pg_timeout

    print("default timeouts: gloo", default_pg_timeout, "| nccl", default_pg_nccl_timeout)
    assert default_pg_timeout == datetime.timedelta(minutes=30)
    assert default_pg_nccl_timeout in (None, datetime.timedelta(minutes=10))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo on the loopback device
    listener = socket.create_server(("127.0.0.1", 0))  # loopback only
    server = torch.distributed.TCPStore(
        "127.0.0.1", listener.getsockname()[1], is_master=True,
        master_listen_fd=listener.fileno(), wait_for_workers=False)
    context = multiprocessing.get_context("fork")  # the ranks never touch CUDA
    report, release = context.Queue(), context.Event()
    ranks = [context.Process(target=rank_main, args=(r, server.port, report, release))
             for r in range(2)]
    for rank in ranks:
        rank.start()
    said, waited = report.get(timeout=60)
    release.set()
    for rank in ranks:
        rank.join(30)
    print(f"rank 0 after {waited:.1f} s: {said}")
    assert "Timed out" in said and waited >= 1.0
    assert [rank.exitcode for rank in ranks] == [0, 0]
# --8<-- [end:timeout]
