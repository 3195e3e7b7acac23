"""Claims of the Arrays section that the generic snippet test does not pin down."""

import importlib.util
import inspect
import os
import subprocess
import sys

import pytest
import torch

@pytest.fixture
def output_of(snippet_results):
    """A snippet's stdout, from this session's build."""
    def stdout(name: str) -> str:
        result = snippet_results[f"snippets/arrays/{name}"]
        assert result.ok, result.failure()
        return result.stdout
    return stdout


def test_torch_exports_cai_version_2_without_stream():
    """The page quotes torch's source; read it here, where no GPU is needed."""
    source = inspect.getsource(torch.Tensor.__cuda_array_interface__.fget)
    assert "version=2" in source and "stream" not in source


@pytest.mark.skipif(not torch.__version__.startswith("2.13."), reason="the abort is documented for torch 2.13")
def test_negative_stride_guard_reports_the_abort(output_of):
    lines = [line for line in output_of("dlpack.py").splitlines() if line.startswith("torch.from_dlpack(np.arange")]
    assert len(lines) == 1 and "killed by SIGABRT" in lines[0] and "Storage size calculation overflowed" in lines[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the kernels run on the device")
def test_numba_kernel_uses_the_simulator_without_a_gpu(output_of):
    first = output_of("numba_kernel.py").splitlines()[0]
    assert "simulator on the CPU" in first and "Built-in" in first


def test_simulator_claims_to_have_cuda():
    """Why the snippet asks torch, not numba, whether a GPU is there."""
    probe = subprocess.run([sys.executable, "-c", "from numba import cuda; print(cuda.is_available())"],
                           env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1"), capture_output=True, text=True,
                           check=True, timeout=120)
    assert probe.stdout.strip() == "True"


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None and torch.cuda.is_available(),
                    reason="CuPy can run here")
def test_cupy_snippet_prints_only_why_it_skipped(output_of):
    lines = output_of("cupy_interop.py").splitlines()
    assert len(lines) == 1 and lines[0].startswith("CuPy examples skipped, nothing ran:")
