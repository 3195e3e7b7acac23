"""The torch.compile page: the claims its output carries, and the machines without a
C++ compiler, or (on a GPU) without the Python headers Triton builds with, where the
snippet must say so and exit 0; the export page's snippet likewise without a compiler."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT

SNIPPET = "snippets/compile/torch_compile.py"
NO_TOOLCHAIN = "torch.compile could not build a kernel on this machine: "


def check_claims(stdout: str) -> None:
    """What the page says its output shows, on any machine."""
    lines = stdout.splitlines()
    assert "Dynamo captured 1 graph for 2 calls: ops ['relu', 'mul', 'sub']" in lines[0]
    assert any(line.startswith("recompile for a new shape: ") and "size mismatch" in line
               for line in lines)
    assert any(line.startswith("after shapes 8, 16, 32: 2 graphs") for line in lines)
    assert any(line.startswith("recompile for a new dtype: ") and "dtype mismatch" in line
               for line in lines)
    assert "after float64: 3 graphs" in lines
    assert any(line.startswith("dynamic=True, shapes 8, 16, 32: 1 graph,") for line in lines)
    assert any(line.startswith("graph breaks before the fix: 1 (2 graphs)") for line in lines)
    assert "graph breaks after the fix: 0 (1 graph)" in lines
    assert "gelu_tanh in eager mode: 9 operations, each a pass over memory" in lines
    if any(line.startswith(NO_TOOLCHAIN) for line in lines):
        return                               # a reader's machine without a compiler
    assert any(line.startswith("first call (compile included): ") for line in lines)
    assert any(line.startswith("second call, same shape: no recompile") for line in lines)
    kernels = next(line for line in lines if line.startswith("generated kernels: "))
    assert kernels.count("fused_add_mul_tanh") == 1, kernels


def test_output_carries_the_claims(snippet_results):
    result = snippet_results[SNIPPET]
    assert result.ok, result.failure()
    check_claims(result.stdout)
    if not torch.cuda.is_available():
        assert "reduce-overhead on the CPU: CUDA graphs skipped (1)" in result.stdout
        assert "CUDA graph capture and replay: not run here, no CUDA device" in result.stdout


def test_without_a_cpp_compiler_it_says_why_and_exits_0(tmp_path):
    """Inductor looks for its compiler in torch._inductor.config.cpp.cxx: (None, $CXX or
    g++). None means "install g++ from conda", which it skips unless
    TORCH_INDUCTOR_INSTALL_GXX is set (torch/_inductor/cpp_builder.py). A CXX that does
    not exist leaves it nothing. A fresh cache directory makes sure that no kernel built
    earlier can be loaded instead; no visible GPU keeps the snippet on the CPU backend."""
    env = {key: value for key, value in os.environ.items() if key != "TORCH_INDUCTOR_INSTALL_GXX"}
    env |= {"CXX": str(tmp_path / "no-such-compiler" / "c++"),
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"),
            "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, SNIPPET], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_claims(proc.stdout)               # the Dynamo part needs no compiler
    lines = proc.stdout.splitlines()
    why = next(line for line in lines if line.startswith(NO_TOOLCHAIN))
    assert "InvalidCxxCompiler" in why and "no-such-compiler" in why
    assert lines[-1].startswith("Inductor needs a C++ compiler (g++ or clang++")
    assert lines[-1].endswith("Not run: Inductor's part of this page.")
    assert "steady state" not in proc.stdout



def test_export_without_a_cpp_compiler_exports_and_says_why_it_stops(tmp_path):
    """snippets/compile/export.py: torch.export needs no compiler; AOTInductor's package does,
    and without one the snippet says so and exits 0, after every export claim still ran."""
    env = {key: value for key, value in os.environ.items() if key != "TORCH_INDUCTOR_INSTALL_GXX"}
    env |= {"CXX": str(tmp_path / "no-such-compiler" / "c++"),
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"),
            "CUDA_VISIBLE_DEVICES": "", "SNIPPET_OUTPUT_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "snippets/compile/export.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("exported with torch.cond: ") for line in lines)
    why = next(line for line in lines if line.startswith("AOTInductor could not build the package"))
    assert "no-such-compiler" in why or "InvalidCxxCompiler" in why, why
    assert lines[-1].endswith("Not run: the .pt2 part.")
    assert "aoti_compile_and_package:" not in proc.stdout

# A GPU machine whose Python lacks its headers, simulated on the CPU. On a GPU, Inductor's
# first call makes Triton build its launcher (triton/backends/nvidia/driver.c, which
# includes Python.h), and a failed build raises subprocess.CalledProcessError, which
# reaches the snippet inside Inductor's InductorError, not as one of Inductor's toolchain
# errors. Here Inductor's C++ build step runs that same Triton build instead, with
# Python's include folder pointing where there is no Python.h.
TRITON_BUILD_WITHOUT_HEADERS = f"""
import runpy, sys, sysconfig
import torch._inductor.cpp_builder
from triton.backends.nvidia.driver import CudaUtils

include = sys.argv[1]
real_paths = sysconfig.get_paths
sysconfig.get_paths = lambda *args, **kwargs: {{**real_paths(*args, **kwargs), "include": include}}


def triton_builds_its_launcher(cmd_line, cwd):
    CudaUtils()         # what Triton's driver runs the first time it is used

torch._inductor.cpp_builder.run_compile_cmd = triton_builds_its_launcher
sys.argv = [{SNIPPET!r}]
runpy.run_path({SNIPPET!r}, run_name="__main__")
"""


def test_on_a_gpu_without_python_headers_it_says_why_and_exits_0(tmp_path):
    """A fresh Inductor cache makes sure the build runs, and a fresh Triton cache that
    Triton's build runs too; TRITON_LIBCUDA_PATH spares Triton its search for libcuda,
    which a CPU machine does not have. The compiler is the real one."""
    if not (shutil.which("gcc") or shutil.which("clang")):
        pytest.skip("no C compiler here to fail on the missing header")
    headers = tmp_path / "no-python-headers"
    env = {key: value for key, value in os.environ.items()
           if key not in ("CC", "TORCHINDUCTOR_COMPILE_THREADS")}
    env |= {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"),
            "TRITON_CACHE_DIR": str(tmp_path / "triton-cache"),
            "TRITON_LIBCUDA_PATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": "",
            "PYTHONPATH": str(ROOT / "snippets" / "compile")}  # its _toolchain.py, as `python x.py` finds it
    proc = subprocess.run([sys.executable, "-c", TRITON_BUILD_WITHOUT_HEADERS, str(headers)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_claims(proc.stdout)
    lines = proc.stdout.splitlines()
    why = next(line for line in lines if line.startswith(NO_TOOLCHAIN))
    assert why == (f"{NO_TOOLCHAIN}CalledProcessError: the C compiler exited with status 1; "
                   f"Python.h is not in {headers}")
    assert "Python.h: No such file or directory" in proc.stderr  # the compiler's own error
    assert "Triton, which needs a C compiler (CC, gcc or clang) and Python's headers" in lines[-1]
    assert lines[-1].endswith("Not run: Inductor's part of this page.")
    assert "steady state" not in proc.stdout


@pytest.mark.parametrize("name", ["InvalidCxxCompiler", "CppCompileError"])
def test_the_errors_the_snippet_catches_exist(name):
    """The snippet names these exception classes; a torch that renamed them would make
    the guard miss silently."""
    import torch._inductor.exc
    assert issubclass(getattr(torch._inductor.exc, name), RuntimeError)
