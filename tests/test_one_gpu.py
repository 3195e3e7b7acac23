"""data_parallel.py on a machine with exactly one CUDA device, simulated on a CPU build.

The real `nn.DataParallel` needs two or more GPUs. With one, its constructor takes
`device_ids=[0]` and moves the module to `cuda:0`, so the snippet must not construct it
on its model: it must say that the real part needs two GPUs and leave the model where
it was. The build machine has no GPU, so the test fakes only what DataParallel and the
snippet *ask*: `torch.cuda.is_available()` and `torch.cuda.device_count()`, which are
also what `torch._utils._get_available_device_type()` and `_get_all_device_indices()`
consult. Nothing here can fake a CUDA tensor, a `.to("cuda:0")` or a kernel on a CPU
build, so the one-GPU branch of the snippet is written to need none of them, and the
multi-GPU branch (real CUDA work) is covered only through its decision function.
"""

import ast
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SNIPPET = ROOT / "snippets" / "multi_gpu" / "data_parallel.py"

# Runs the whole snippet in a fresh interpreter with the given number of fake CUDA
# devices (None: nothing faked), spying on nn.DataParallel.__init__ without changing it.
RUNNER = r"""
import json, runpy, sys
import torch
from torch import nn

fake = json.loads(sys.argv[1])
if fake is not None:
    torch.cuda.is_available = lambda: fake > 0
    torch.cuda.device_count = lambda: fake
constructed = []
original_init = nn.DataParallel.__init__

def spy(self, module, *args, **kwargs):
    constructed.append(module)
    original_init(self, module, *args, **kwargs)

nn.DataParallel.__init__ = spy
g = runpy.run_path(sys.argv[2], run_name="__main__")
model = g["model"]
print("RESULT " + json.dumps({
    "plan": g["plan"],
    "device_type": g["device_type"],
    "wrapped_model": any(m is model for m in constructed),
    "model_devices": sorted({p.device.type for p in model.parameters()}),
}))
"""


def run_with_fake_gpus(n):
    proc = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(n), str(SNIPPET)],
                          cwd=SNIPPET.parent, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return proc.stdout, json.loads(result[len("RESULT "):])


def plan_function():
    """real_data_parallel_plan, taken from the snippet's source without running it."""
    tree = ast.parse(SNIPPET.read_text(encoding="utf-8"))
    node = next(n for n in tree.body
                if isinstance(n, ast.FunctionDef) and n.name == "real_data_parallel_plan")
    namespace = {}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(SNIPPET), "exec"), namespace)
    return namespace["real_data_parallel_plan"]


@pytest.mark.parametrize("device_type, n, expected", [
    (None, 0, "plain call"),  # CPU-only build, or a CUDA build without a GPU
    ("mps", 0, "plain call"),  # a Mac: DataParallel keeps device_ids == []
    ("cuda", 1, "too few"),  # the lent machine: one GPU
    ("cuda", 2, "run"),
    ("cuda", 8, "run"),
    ("xpu", 2, "too few"),  # the real branch uses .cuda(): not for other accelerators
])
def test_branch_decision(device_type, n, expected):
    assert plan_function()(device_type, n) == expected


def test_one_gpu_says_it_needs_two_and_leaves_the_model_alone():
    out, result = run_with_fake_gpus(1)
    assert result["device_type"] == "cuda"  # what DataParallel.__init__ would see
    assert result["plan"] == "too few"
    assert "Real nn.DataParallel: NOT RUN here: 1 CUDA device, it needs 2 or more." in out
    # what DataParallel(model) would have done, printed instead of done
    assert "would take device_ids == [0] and move the module to cuda:0" in out
    assert not result["wrapped_model"], "nn.DataParallel was constructed on the model"
    assert result["model_devices"] == ["cpu"]
    # the CPU part of the snippet ran in full before the guarded part
    assert "outputs and gradients equal the unsplit module's: True" in out


def test_no_gpu_is_a_plain_call():
    out, result = run_with_fake_gpus(0)
    assert result["plan"] == "plain call" and result["wrapped_model"]
    assert result["model_devices"] == ["cpu"]
    assert "NOT RUN here: 0 CUDA devices, it needs 2 or more." in out
    assert "has device_ids == [] and calls the module" in out
