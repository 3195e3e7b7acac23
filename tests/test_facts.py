"""Facts that pages state and that their snippets cannot assert on the build's CPU: checked
here against the code that the page shows and against the installed torch.

Each is a statement that an accuracy review found wrong or misleading, in its corrected form:
the occupancy arithmetic of the kernels page (CUDA's rules, not a simplified division), the
default timeout of a process group and the Flight Recorder's dump on timeout (the debugging
page).
"""

import re
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT

KERNELS = ROOT / "snippets" / "performance" / "kernels.py"
SECTION = re.compile(r"^# --8<-- \[start:(?P<name>[\w-]+)\]\n(?P<body>.*?)^# --8<-- \[end:(?P=name)\]\n",
                     re.M | re.S)
TORCH = Path(torch.__file__).parent
KB = 1024


@pytest.fixture(scope="module")
def occupancy():
    """The `limits` and `occupancy` sections of the kernels page's snippet, the code the page
    shows, run on their own (the rest of the script needs triton and draws a figure)."""
    sections = {m["name"]: m["body"] for m in SECTION.finditer(KERNELS.read_text(encoding="utf-8"))}
    namespace = {}
    exec(compile("import math\n" + sections["limits"] + sections["occupancy"], str(KERNELS), "exec"),
         namespace)
    return namespace["occupancy"]


@pytest.mark.parametrize("threads, registers, shared, blocks, limit", [
    # registers come from the SM's four quarters, 16,384 each, in units of 256 per warp:
    # 12 warps of 1,280 fit in a quarter, 48 in all; one pool of 65,536 would say 17 blocks
    (96, 40, 0, 16, "registers"),
    # 6 warps of 2,560 per quarter, 24 in all; one pool would say 25
    (32, 80, 0, 24, "registers"),
    # CUDA reserves 1 KB of shared memory per block (compute capability 8.0 and up):
    # 228 // (57 + 1) = 3 blocks, not 228 // 57 = 4
    (256, 32, 57 * KB, 3, "shared memory"),
])
def test_occupancy_follows_cudas_occupancy_calculator(occupancy, threads, registers, shared, blocks,
                                                       limit):
    """cudaOccMaxBlocksPerSMRegsLimit and cudaOccMaxBlocksPerSMSmemLimit in cuda_occupancy.h
    (CUDA 13.0), for an SM of compute capability 9.0: 65,536 registers, 2,048 threads,
    32 blocks, 228 KB of shared memory, at most 227 KB for one block, 1 KB reserved per block."""
    result = occupancy(threads, registers, shared)
    assert result["blocks"] == blocks, (threads, registers, shared, result)
    assert limit in result["limited by"]


def test_default_timeout_is_30_minutes_unless_the_backend_is_exactly_nccl():
    """`init_process_group` without `timeout=` takes `_get_default_timeout(backend)`: NCCL's
    10 minutes only for the backend string "nccl"; no backend ("undefined", which picks NCCL
    for CUDA tensors lazily) and "cpu:gloo,cuda:nccl" get the 30 minutes of the others."""
    from torch.distributed import Backend, constants
    from torch.distributed.distributed_c10d import _get_default_timeout

    assert constants.default_pg_timeout == timedelta(minutes=30)
    for backend in ("gloo", "undefined", "cpu:gloo,cuda:nccl"):
        assert _get_default_timeout(Backend(backend)) == timedelta(minutes=30), backend
    # The NCCL default lives in C++ (a CPU wheel has no ProcessGroupNCCL to ask), and the
    # Python side hands it out for the exact string "nccl" only.
    header = (TORCH / "include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp").read_text()
    assert re.search(r"kProcessGroupNCCLDefaultTimeout =\s*std::chrono::milliseconds\(10 \* 60 \* 1000\)",
                     header)
    source = (TORCH / "distributed/distributed_c10d.py").read_text()
    assert "if backend == Backend.NCCL:" in source and "return default_pg_nccl_timeout" in source
    assert 'backend = "undefined"' in source  # init_process_group() with neither backend nor device_id


def test_flight_recorder_dumps_on_timeout_by_default_under_the_cache_folder():
    """Since PR #143446, TORCH_NCCL_DUMP_ON_TIMEOUT defaults to true (ProcessGroupNCCL.cpp, in
    libtorch_cuda.so, which a CPU wheel lacks; torch's own test suite has to switch it off).
    Without TORCH_FR_DUMP_TEMP_FILE the files go to $XDG_CACHE_HOME/torch, else
    $HOME/.cache/torch (DebugInfoWriter::getWriter, in libtorch_cpu.so)."""
    suite = (TORCH / "testing/_internal/distributed/distributed_test.py").read_text()
    assert "Need to disable TORCH_NCCL_DUMP_ON_TIMEOUT otherwise this test times out" in suite
    assert 'os.environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "0"' in suite
    library = next((TORCH / "lib").glob("libtorch_cpu.*")).read_bytes()
    at = library.find(b"TORCH_FR_DUMP_TEMP_FILE\0")
    assert at >= 0
    # the strings that follow it are the default path's pieces, in the order getWriter uses them
    nearby = re.findall(rb"[\x20-\x7e]{4,}", library[at:at + 200])
    pieces = [b"XDG_CACHE_HOME", b"HOME", b"/tmp", b"/.cache", b"/torch"]
    assert [s for s in nearby if s in pieces] == pieces, nearby
