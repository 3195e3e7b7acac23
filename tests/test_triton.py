"""The Triton page's snippet where triton is missing or (on a GPU) cannot build its
launcher, and the claims its page makes about the interpreter and about the snippet's
file name."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT

SNIPPET = "snippets/compile/triton_kernels.py"

# Run the snippet as a reader would, but in a Python where `import triton` fails, as it
# does on macOS and Windows, which have no triton wheel.
WITHOUT_TRITON = f"""
import runpy, sys
sys.modules["triton"] = None        # makes `import triton` raise ImportError
sys.argv = [{SNIPPET!r}]
runpy.run_path({SNIPPET!r}, run_name="__main__")
"""


def test_snippet_without_triton_says_why_and_exits_0():
    proc = subprocess.run([sys.executable, "-c", WITHOUT_TRITON], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    assert lines[0].startswith("triton cannot be imported here (") and lines[0].endswith("nothing below ran.")
    assert "PyPI has triton wheels for Linux only" in lines[1] and "none for macOS or Windows" in lines[1]
    assert "vector add" not in proc.stdout


# A CUDA machine without the tools Triton builds its launcher with, simulated on the
# CPU. torch reports a CUDA device, so the snippet takes its GPU branch and Triton picks
# its NVIDIA driver (CudaDriver.is_active asks torch). Starting that driver runs Triton's
# real build of triton/backends/nvidia/driver.c, which fails as it would on such a GPU
# machine: with no C compiler on PATH, or with Python's include folder pointing where
# there is no Python.h (as under a Python without its -dev package).
ON_A_GPU_WITHOUT = f"""
import runpy, sys, sysconfig
import torch
torch.cuda.is_available = lambda: True
include = sys.argv[1]
if include != "-":
    real_paths = sysconfig.get_paths
    sysconfig.get_paths = lambda *args, **kwargs: {{**real_paths(*args, **kwargs),
                                                   "include": include}}
sys.argv = [{SNIPPET!r}]
runpy.run_path({SNIPPET!r}, run_name="__main__")
"""


@pytest.mark.parametrize("missing", ["C compiler", "Python headers"])
def test_on_a_gpu_without_triton_build_tools_it_says_why_and_exits_0(missing, tmp_path):
    env = {key: value for key, value in os.environ.items()
           if key not in ("CC", "TRITON_INTERPRET", "TRITON_DEFAULT_BACKEND")}
    env |= {"TRITON_CACHE_DIR": str(tmp_path / "triton-cache"),  # nothing built earlier
            "TRITON_LIBCUDA_PATH": str(tmp_path)}                 # no libcuda is looked for
    headers = tmp_path / "no-python-headers"
    if missing == "C compiler":
        (tmp_path / "bin").mkdir()
        env["PATH"] = str(tmp_path / "bin")                       # neither gcc nor clang
        argument = "-"
    else:
        if not (shutil.which("gcc") or shutil.which("clang")):
            pytest.skip("no C compiler here to fail on the missing header")
        argument = str(headers)
    proc = subprocess.run([sys.executable, "-c", ON_A_GPU_WITHOUT, argument], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    assert lines[0].startswith("Triton could not build its launcher here: no " + missing)
    assert lines[0].endswith("Nothing below ran.")
    if missing == "C compiler":
        assert "install gcc" in lines[0]
    else:
        assert f"Python.h is not in {headers}" in lines[0] and "python3-dev" in lines[0]
        assert "Python.h: No such file or directory" in proc.stderr  # the compiler's own error
    assert "needs a C compiler and Python's headers" in lines[1]
    assert "vector add" not in proc.stdout


def test_a_script_named_triton_py_shadows_the_package(tmp_path):
    """Why the snippet is not called triton.py: the script's folder comes first on sys.path."""
    script = tmp_path / "triton.py"
    script.write_text("import triton\nprint(triton.__file__)\n")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONSAFEPATH"}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    # The script runs as __main__, imports itself as `triton`, and both print its own path.
    assert proc.stdout.splitlines() == [str(script)] * 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the kernels are compiled, not interpreted")
def test_output_says_interpreter_not_gpu(snippet_results):
    result = snippet_results[SNIPPET]
    assert result.ok, result.failure()
    lines = result.stdout.splitlines()
    if lines[0].startswith("triton cannot be imported here"):
        pytest.skip("triton is not installed here")
    assert "Triton's interpreter runs the kernels on the CPU with NumPy" in lines[0]
    assert "This is not a GPU" in lines[1] and "say nothing about a GPU's speed" in lines[1]
    assert "equal to x + y: True" in result.stdout
    assert "allclose to torch.softmax: True" in result.stdout
    assert result.stdout.count("not run: no CUDA device") == 2
