"""The Triton page's snippet where triton is missing, and the claims its page makes
about the interpreter and about the snippet's file name."""

import os
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
