"""The page on Triton and C++ kernels as operators: the claims its output carries, and the
machines where part of it cannot run, where the snippet must say why and exit 0: without a
C++ compiler, without ninja, and without triton (macOS, Windows)."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT

SNIPPET = "snippets/compile/kernel_ops.py"
NO_TOOLCHAIN = "load_inline cannot build the C++ operator here: no "
NOT_RUN = "Not run: the C++ part of this page."

# The snippet as a reader runs it, after `setup` (Python code) has run: runpy does not put the
# snippet's folder on sys.path as `python x.py` does, so PYTHONPATH brings its _toolchain.py.
RUN_AFTER = """
import runpy, sys
exec(sys.argv[1])
sys.argv = [{snippet!r}]
runpy.run_path({snippet!r}, run_name="__main__")
""".format(snippet=SNIPPET)


def run(tmp_path, setup: str = "", **env: str) -> subprocess.CompletedProcess:
    """The snippet on the CPU, with Triton's and Inductor's caches fresh, and `env` on top."""
    environ = {key: value for key, value in os.environ.items()
               if key not in ("TRITON_INTERPRET", "CXX")}
    environ |= {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT / "snippets" / "compile"),
                "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"),
                "TRITON_CACHE_DIR": str(tmp_path / "triton-cache")} | env
    return subprocess.run([sys.executable, "-c", RUN_AFTER, setup], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=300)


def check_triton_claims(lines: list[str]) -> None:
    """The Triton part, on a CPU with triton installed."""
    assert lines[0] == "registered: site_kernel_ops::add_relu_triton(Tensor x, Tensor y) -> Tensor"
    assert lines[1].startswith("eager call on cpu: RuntimeError: ")
    assert lines[2].startswith("compiled call on cpu: RuntimeError: ")
    # No GPU target to compile the kernel to TTIR: torch cannot tell what it writes, takes
    # every tensor argument as written, and aot_eager copies the new x and y back into them.
    assert lines[3] == ("forward graph: aten.empty_like.default, "
                        "triton_kernel_wrapper_functional, aten.mul.Tensor, "
                        "aten.copy_.default, aten.copy_.default")
    assert lines[4].endswith("written: ['x_ptr', 'y_ptr', 'out_ptr']")
    assert lines[5] == "with register_kernel('cpu'), eager on cpu: equal to relu(a + b): True"
    assert lines[6].startswith("  compiled on cpu: RuntimeError: ")  # the kernel, not the CPU one
    assert lines[7] == lines[3].replace("forward graph", "  its forward graph")
    assert lines[8] == "add_relu_anywhere, compiled on cpu: equal to relu(a + b) * 2: True"
    assert lines[9] == "  its forward graph: aten.add.Tensor, aten.relu.default, aten.mul.Tensor"
    assert lines[10] == "Inductor with the Triton kernel: not run here, no CUDA device"


def check_cpp_claims(lines: list[str]) -> None:
    """The C++ part, from the compiler's line on."""
    assert lines[0].startswith("C++ compiler: ") and "; ninja " in lines[0]
    assert lines[1].startswith("load_inline: ") and lines[1].endswith("site_kernel_ops.so")
    assert lines[2:] == [
        "registered: site_kernel_ops::add_relu(Tensor x, Tensor y) -> Tensor",
        "  kernels: CPU (from main.cpp)",
        "torch.ops.site_kernel_ops.add_relu on cpu: equal to relu(x + y): True",
        "compiled before register_fake: Unsupported: Operator does not support running with "
        "fake tensors",
        "after register_fake, compiled with fullgraph=True: equal to relu(x + y) * 2: True",
        "  forward graph: site_kernel_ops.add_relu.default, aten.mul.Tensor",
        "  kernels: CPU (from main.cpp), Meta (from library.py)",
    ]


def test_output_carries_the_claims(snippet_results):
    result = snippet_results[SNIPPET]
    assert result.ok, result.failure()
    lines = result.stdout.splitlines()
    if torch.cuda.is_available():
        pytest.skip("the claims below are those of a CPU machine; the GPU branch asserts its own")
    if lines[0].startswith("triton cannot be imported here"):
        lines = lines[1:]
    else:
        check_triton_claims(lines)
        lines = lines[11:]
    if lines[0].startswith(NO_TOOLCHAIN):
        assert lines[-1].endswith(NOT_RUN)
    else:
        check_cpp_claims(lines)


def test_without_a_cpp_compiler_it_says_why_and_exits_0(tmp_path):
    """load_inline runs $CXX (else c++) through ninja, and would only fail in ninja's build;
    the snippet looks for the compiler first. A fresh extensions folder makes sure that no
    library built earlier could be loaded instead."""
    missing = tmp_path / "no-such-compiler" / "c++"
    proc = run(tmp_path, CXX=str(missing), TORCH_EXTENSIONS_DIR=str(tmp_path / "extensions"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    check_triton_claims(lines)  # the Triton part needs no C++ compiler on a CPU
    assert lines[11:] == [
        f"{NO_TOOLCHAIN}C++ compiler {missing} ($CXX, else c++).",
        "A C++ extension needs a C++ compiler (g++ or clang++; MSVC on Windows) and ninja "
        f"(pip install ninja). {NOT_RUN}"]
    assert not (tmp_path / "extensions").exists()


def test_without_ninja_it_says_why_and_exits_0(tmp_path):
    """torch.utils.cpp_extension.verify_ninja_availability runs `ninja --version` from PATH.
    Here PATH is an empty folder and pip's ninja package cannot be imported, so the snippet
    cannot put it on PATH either; the compiler is given by its full path."""
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler here: the test above covers that case")
    (tmp_path / "bin").mkdir()
    proc = run(tmp_path, 'sys.modules["ninja"] = None', PATH=str(tmp_path / "bin"),
               CXX=compiler, TORCH_EXTENSIONS_DIR=str(tmp_path / "extensions"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[-2] == f"{NO_TOOLCHAIN}ninja on PATH."
    assert lines[-1].endswith(NOT_RUN)


def test_without_triton_the_cpp_part_still_runs(tmp_path):
    """As on macOS and Windows, which have no triton wheel: `import triton` fails. The
    extension is built where the build builds it (TORCH_EXTENSIONS_DIR, else torch's cache)."""
    proc = run(tmp_path, 'sys.modules["triton"] = None')
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == ("triton cannot be imported here (import of triton halted; None in "
                        "sys.modules): the Triton part of this page did not run.")
    if lines[1].startswith(NO_TOOLCHAIN):
        pytest.skip(f"no C++ toolchain here: {lines[1]}")
    check_cpp_claims(lines[1:])
