"""`make` refuses an unsuitable Python plainly, before touching the virtual environment."""

import subprocess

from tests.conftest import ROOT


def test_unsuitable_python_is_refused(tmp_path):
    venv = tmp_path / "venv"
    proc = subprocess.run(["make", "-s", "serve", "PYTHON=/nonexistent/python3", f"VENV={venv}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "'/nonexistent/python3' is missing or unsuitable" in proc.stderr
    assert not venv.exists()

