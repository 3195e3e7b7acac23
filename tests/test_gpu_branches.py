"""GPU- and world-size-dependent branches of the snippets, simulated on a CPU.

No GPU runs these tests, so each one fakes only what torch would hand the snippet on a
GPU machine, as torch 2.13's source says it would, and runs the snippet's real code on it:

* profiling.py: with CUDA profiled, Kineto adds a GPU-side copy of every
  record_function range that launched GPU work (`GenericActivityProfiler::
  handleGpuActivity` and `GpuUserEventMap` in libkineto; the range is the innermost
  `USER_SCOPE` record function, `ThreadLocalSubqueue::begin_op` in
  torch/csrc/profiler/collection.cpp). In `prof.events()` and `key_averages()` the copy
  has the same name and `device_type == DeviceType.CUDA` (`deviceTypeFromActivity`); in
  trace.json it is an "X" event in the category `gpu_user_annotation`.
* attention.py: `torch.compile(flex_attention)` on a CUDA machine whose Triton cannot
  build its launcher (no C compiler, or no Python.h).
"""

import ast
import json
import os
import shutil
import subprocess
import sys

import pytest
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent

from tests.conftest import ROOT

PROFILING = ROOT / "snippets" / "performance" / "profiling.py"
ATTENTION = ROOT / "snippets" / "performance" / "attention.py"


def functions(snippet, *names):
    """Functions of a snippet, taken from its source without running it."""
    tree = ast.parse(snippet.read_text(encoding="utf-8"))
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert sorted(n.name for n in nodes) == sorted(names), f"{snippet.name} lacks one of {names}"
    namespace = {"DeviceType": DeviceType}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(snippet), "exec"), namespace)
    return [namespace[name] for name in names]


# --- profiling.py -------------------------------------------------------------------------

def gpu_copy(e: FunctionEvent, shift_us: float = 3.0) -> FunctionEvent:
    """The GPU-side copy that Kineto makes of a CPU user annotation: same name and trace
    name, on device 0's stream 7, a little later (the kernels run after their launch)."""
    return FunctionEvent(id=e.id, name=e.name, trace_name=e.trace_name, thread=7,
                         start_us=e.time_range.start + shift_us, end_us=e.time_range.end + shift_us,
                         device_type=DeviceType.CUDA, device_index=0, device_resource_id=7,
                         is_user_annotation=True, use_device=e.use_device, stack=[],
                         input_shapes=[])


def annotation(name, start, end, thread=1):
    return FunctionEvent(id=start, name=name, trace_name=name, thread=thread, start_us=start,
                         end_us=end, is_user_annotation=True, stack=[], input_shapes=[])


def test_host_side_keeps_the_cpu_row_of_each_range():
    """key_averages() keeps the two devices' rows of a name apart (its key holds device_type),
    so a dict built from it by name kept the GPU's row, whose CPU time is 0."""
    host_side, = functions(PROFILING, "host_side")
    cpu = [annotation(f"ProfilerStep#{n}", 100 * n, 100 * n + 90) for n in (2, 3)]
    cpu += [annotation("forward", 100 * n + 10, 100 * n + 50) for n in (2, 3)]
    events = EventList(sorted(cpu + [gpu_copy(e) for e in cpu], key=lambda e: e.time_range.start))
    events._build_tree()
    steps = sorted(e.trace_name for e in host_side(events) if e.trace_name.startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    averages = events.key_averages()
    assert [a.key for a in averages].count("forward") == 2          # one row per device
    per_name = {a.key: a for a in host_side(averages)}
    assert per_name["forward"].count == 2 and per_name["forward"].device_type == DeviceType.CPU
    assert per_name["forward"].cpu_time_total == 80                  # 2 x 40 us, not the GPU's 0


def test_host_ranges_leave_out_gpu_user_annotation():
    host_ranges, = functions(PROFILING, "host_ranges")
    cpu = [{"ph": "X", "cat": "user_annotation", "name": n, "ts": t, "dur": 10, "pid": 1, "tid": 1}
           for n, t in (("ProfilerStep#2", 0), ("forward", 2), ("ProfilerStep#3", 20))]
    gpu = [dict(e, cat="gpu_user_annotation", pid=0, tid=7, ts=e["ts"] + 3) for e in cpu]
    kernel = {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 6, "dur": 1, "pid": 0, "tid": 7}
    assert host_ranges(cpu + gpu + [kernel]) == cpu


# Runs the whole snippet with every CPU user annotation doubled on the GPU's side, in the
# events the profiler parses and in the trace.json it writes, as torch would on a GPU.
PROFILED_CUDA = r"""
import json, runpy, sys
from torch.autograd import DeviceType
from torch.autograd.profiler import profile as autograd_profile
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import profile

from tests.test_gpu_branches import gpu_copy    # run from the repository's root

parse, export = autograd_profile._parse_kineto_results, profile.export_chrome_trace
copies = {"events": 0, "trace": 0}


def parse_with_gpu_copies(self, result, timeout_s=None):
    events = parse(self, result, timeout_s=timeout_s)
    extra = [gpu_copy(e) for e in events if e.is_user_annotation and e.device_type == DeviceType.CPU]
    copies["events"] += len(extra)
    return sorted(events + extra, key=lambda e: [e.time_range.start, -e.time_range.end])


def export_with_gpu_copies(self, path):
    export(self, path)
    with open(path) as f:
        trace = json.load(f)
    extra = [dict(e, cat="gpu_user_annotation", pid=0, tid=7, ts=e["ts"] + 3)
             for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]
    trace["traceEvents"] += extra           # Kineto writes them after the CPU's events
    copies["trace"] += len(extra)
    with open(path, "w") as f:
        json.dump(trace, f)


autograd_profile._parse_kineto_results = parse_with_gpu_copies
profile.export_chrome_trace = export_with_gpu_copies
g = runpy.run_path(sys.argv[1], run_name="__main__")
print("RESULT " + json.dumps({
    "copies": copies,
    "phase_rows": sorted({str(g["per_name"][p].device_type) for p in g["PHASES"]}),
    "step": g["step"]["cat"], "ranges": sorted({r["cat"] for r in g["ranges"]}),
}))
"""


def run_profiling_as_if_cuda_was_profiled(snippet, tmp_path):
    env = os.environ | {"SNIPPET_OUTPUT_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", PROFILED_CUDA, str(snippet)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return proc.stdout, json.loads(result[len("RESULT "):])


def test_profiling_with_gpu_side_copies_of_its_ranges(tmp_path):
    """The schedule's steps, the phase table and the trace's step and ranges are the CPU's,
    although every range (ProfilerStep#N included) also has a copy on the GPU's side."""
    out, result = run_profiling_as_if_cuda_was_profiled(PROFILING, tmp_path)
    assert result["copies"]["events"] > 0 and result["copies"]["trace"] > 0   # they were there
    assert "the steps it saw: ProfilerStep#2, ProfilerStep#3" in out
    assert result["phase_rows"] == ["DeviceType.CPU"]
    assert result["step"] == "user_annotation" and result["ranges"] == ["user_annotation"]


# --- attention.py -------------------------------------------------------------------------

# Runs attention.py but for its sections on SDPA as a CUDA machine would: the setup's device line
# says "cuda", and a TorchFunctionMode puts every tensor that asks for "cuda" on the CPU. So
# the CUDA branch runs torch.compile(flex_attention) for real, and Inductor's build step
# fails as it would on that machine: the C++ compiler is missing (CXX), or (with
# `headers` given) the build is Triton's launcher build, with no Python.h where Triton
# looks (as in tests/test_compile.py).
CUDA_ON_CPU = r"""
import re, sys, sysconfig
from pathlib import Path
import torch
from torch.overrides import TorchFunctionMode

snippet, headers = sys.argv[1], sys.argv[2]
if headers:
    import torch._inductor.cpp_builder
    from triton.backends.nvidia.driver import CudaUtils
    real_paths = sysconfig.get_paths
    sysconfig.get_paths = lambda *args, **kwargs: {**real_paths(*args, **kwargs), "include": headers}

    def triton_builds_its_launcher(cmd_line, cwd):
        CudaUtils()

    torch._inductor.cpp_builder.run_compile_cmd = triton_builds_its_launcher


def on_cpu(value):
    return "cpu" if isinstance(value, (str, torch.device)) and str(value).startswith("cuda") else value


class CudaOnCpu(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = {k: on_cpu(v) if k == "device" else v for k, v in (kwargs or {}).items()}
        return func(*(on_cpu(a) for a in args), **kwargs)


code = Path(snippet).read_text(encoding="utf-8")
for name in ("default", "each", "memory", "figure", "cuda-memory"):   # all but FlexAttention's
    code = re.sub(rf"# --8<-- \[start:{name}\]\n.*?# --8<-- \[end:{name}\]\n", "", code, flags=re.S)
line = 'device = "cuda" if torch.cuda.is_available() else "cpu"'
assert code.count(line) == 1
code = code.replace(line, 'device = "cuda"')
namespace = vars(sys.modules["__main__"])   # Dynamo's guards look globals up in __main__
namespace["__file__"] = snippet
with CudaOnCpu():
    exec(compile(code, snippet, "exec"), namespace)
print("RESULT eager" if namespace["flex"] is namespace["flex_attention"] else "RESULT compiled")
"""

FLEX_FALLBACK = "torch.compile could not build flex_attention's kernel on this machine: "


@pytest.mark.parametrize("missing", ["compiler", "headers"])
def test_attention_on_cuda_without_a_toolchain_runs_flex_eager(missing, tmp_path):
    """C2: the compiled call on CUDA raises Inductor's toolchain error; the snippet must say
    why, go on eager and still check every FlexAttention claim."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CC", "TORCH_INDUCTOR_INSTALL_GXX", "TORCHINDUCTOR_COMPILE_THREADS")}
    env |= {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"),
            "TRITON_CACHE_DIR": str(tmp_path / "triton-cache"), "TRITON_LIBCUDA_PATH": str(tmp_path),
            "CUDA_VISIBLE_DEVICES": "", "SNIPPET_OUTPUT_DIR": str(tmp_path)}
    headers = ""
    if missing == "compiler":
        env["CXX"] = str(tmp_path / "no-such-compiler" / "c++")
    else:
        if not (shutil.which("gcc") or shutil.which("clang")):
            pytest.skip("no C compiler here to fail on the missing header")
        headers = str(tmp_path / "no-python-headers")
        env["TORCHINDUCTOR_VEC_ISA_OK"] = "1"   # no probe build of the CPU's ISA: the first build is the kernel's
    proc = subprocess.run([sys.executable, "-c", CUDA_ON_CPU, str(ATTENTION), headers], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("device cuda, dtype float16")
    why = next(line for line in lines if line.startswith(FLEX_FALLBACK))
    if missing == "compiler":
        assert "InvalidCxxCompiler" in why and "no-such-compiler" in why, why
    else:
        assert why.endswith(f"CalledProcessError: the C compiler exited with status 1; "
                            f"Python.h is not in {headers}"), why
    assert "eager flex_attention warned once: unfused, it materialises the full score matrix" in lines
    assert any(line.startswith("score_mod=causal_score matches SDPA") for line in lines)
    assert sum(line.startswith("block mask ") and "matches SDPA" in line for line in lines) == 2
    assert lines[-1] == "RESULT eager"
