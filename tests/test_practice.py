"""The practice pages' snippets on setups that the build machine does not have by default."""

import os
import subprocess
import sys

from tests.conftest import ROOT


def test_mixed_precision_under_the_tf32_override():
    """TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes "high" the default precision (ATen/Context.h):
    the snippet must report it and still pass, not assert "highest"."""
    env = dict(os.environ, TORCH_ALLOW_TF32_CUBLAS_OVERRIDE="1")
    proc = subprocess.run([sys.executable, "snippets/practice/mixed_precision.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "default precision: high | TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1: True" in proc.stdout
