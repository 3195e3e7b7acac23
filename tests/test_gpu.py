"""gpu_doctor.py: its report on this machine, the JSON form, exit codes, and the
diagnosis branches that a machine without a GPU can only simulate."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
from tests.conftest import ROOT

DOCTOR = ROOT / "snippets" / "gpu" / "gpu_doctor.py"
CPU_ONLY = torch.version.cuda is None and torch.version.hip is None
KEYS = {"torch", "python", "platform", "build", "cuda_runtime", "hip", "cudnn",
        "cuda_visible_devices", "nvidia_smi", "cuda_available", "device_count",
        "init_warnings", "devices", "gpu_used", "gpu", "reason", "notes"}
OLD_DRIVER = ("CUDA initialization: The NVIDIA driver on your system is too old "
              "(found version 12020). Please update your GPU driver.")


def run_doctor(*args: str, **env: str) -> subprocess.CompletedProcess:
    """The doctor as a reader runs it, in a fresh process; CUDA_VISIBLE_DEVICES only if given."""
    environ = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"} | env
    return subprocess.run([sys.executable, str(DOCTOR), *args], capture_output=True,
                          text=True, env=environ, timeout=120)


@pytest.fixture(scope="module")
def doctor():
    spec = importlib.util.spec_from_file_location("gpu_doctor", DOCTOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report() -> dict:
    proc = run_doctor("--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def simulated(doctor, **changes) -> dict:
    """A report from a CUDA build that sees no GPU, with `changes` applied."""
    base = {"torch": "2.13.0+cu130", "build": "cuda", "cuda_runtime": "13.0",
            "cuda_visible_devices": None, "init_warnings": [], "gpu_used": False,
            "nvidia_smi": {"returncode": 0, "lines": ["NVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB"]},
            "devices": [{"device": "cpu", "name": "CPU", "matmul": {"ok": True, "max_abs_diff": 1e-5}}]}
    return base | changes


def test_text_report_exits_zero_and_names_the_build():
    proc = run_doctor()
    assert proc.returncode == 0, proc.stderr
    assert torch.__version__ in proc.stdout and "Verdict:" in proc.stdout
    if CPU_ONLY:
        assert "(CPU-only build)" in proc.stdout and "[cpu-only-build]" in proc.stdout


def test_json_is_one_object_that_matches_this_torch(report):
    assert set(report) == KEYS
    assert report["torch"] == torch.__version__
    assert report["cuda_runtime"] == torch.version.cuda
    assert report["cuda_available"] == torch.cuda.is_available()
    assert report["device_count"] == torch.cuda.device_count()
    assert report["gpu_used"] == torch.cuda.is_available()
    assert (report["reason"] is None) == report["gpu_used"]
    cpu = report["devices"][0]
    assert cpu["device"] == "cpu" and cpu["matmul"]["ok"] and cpu["matmul"]["max_abs_diff"] < 1e-3
    assert len(report["devices"]) == 1 + torch.cuda.device_count()


@pytest.mark.skipif(not CPU_ONLY, reason="this torch has GPU support")
def test_json_says_plainly_this_is_a_cpu_only_build(report):
    assert report["build"] == "cpu" and report["cuda_runtime"] is None
    assert report["reason"]["code"] == "cpu-only-build"
    assert "CPU-only build" in report["reason"]["message"]


def test_empty_cuda_visible_devices_hides_every_gpu():
    proc = run_doctor("--json", CUDA_VISIBLE_DEVICES="")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["cuda_visible_devices"] == ""
    assert report["device_count"] == 0 and not report["gpu_used"]
    assert report["reason"]["code"] == ("cpu-only-build" if CPU_ONLY else "cuda-visible-devices")
    assert any("CUDA_VISIBLE_DEVICES=''" in note for note in report["notes"])


def test_a_bad_argument_is_the_scripts_own_failure():
    proc = run_doctor("--no-such-flag")
    assert proc.returncode == 2 and "usage:" in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("value, hidden", [
    (None, False), ("", True), (" ", True), ("-1", True), ("-1,0", True),
    ("0", False), ("0,-1", False), ("1,0", False), ("GPU-8932f937", False),
])
def test_which_cuda_visible_devices_values_hide_every_gpu(doctor, value, hidden):
    assert doctor.hides_all_devices(value) is hidden


@pytest.mark.parametrize("changes, code", [
    ({}, "no-visible-device"),
    ({"cuda_visible_devices": ""}, "cuda-visible-devices"),
    ({"cuda_visible_devices": "-1"}, "cuda-visible-devices"),
    ({"init_warnings": [OLD_DRIVER]}, "driver-too-old"),
    ({"init_warnings": ["CUDA initialization: Found no NVIDIA driver on your system."]}, "no-driver"),
    ({"nvidia_smi": None}, "no-driver"),
    ({"build": "cpu", "cuda_runtime": None, "torch": "2.13.0+cpu"}, "cpu-only-build"),
])
def test_diagnosis_of_a_machine_without_a_usable_gpu(doctor, changes, code):
    assert doctor.diagnose(simulated(doctor, **changes))["code"] == code


def test_a_gpu_whose_matmul_fails_is_reported_with_the_error(doctor):
    gpu = {"device": "cuda:0", "name": "NVIDIA H100", "total_memory_gib": 79.2, "capability": "9.0",
           "multiprocessors": 132, "matmul": {"ok": False, "error": "CUDA error: no kernel image"}}
    base = simulated(doctor)
    reason = doctor.diagnose(base | {"devices": base["devices"] + [gpu]})
    assert reason["code"] == "gpu-matmul-failed" and "no kernel image" in reason["message"]


def test_a_working_gpu_gets_no_reason_and_a_hint(doctor):
    gpu = {"device": "cuda:0", "name": "NVIDIA H100", "total_memory_gib": 79.2, "capability": "9.0",
           "multiprocessors": 132, "matmul": {"ok": True, "max_abs_diff": 2e-5}}
    report = simulated(doctor, gpu_used=True, cuda_available=True, device_count=1,
                       python="3.11", platform="Linux", cudnn=91000,
                       gpu=doctor.gpu_in_use(gpu, "cuda"))
    report["devices"] = report["devices"] + [gpu]
    report["reason"], report["notes"] = doctor.diagnose(report), doctor.notes(report)
    text = doctor.render(report)
    assert report["reason"] is None and "the GPU in use is cuda:0 (NVIDIA H100)" in text
    assert "capability 9.0, 132 SMs" in text and "next(model.parameters()).device" in text


def test_an_old_driver_is_diagnosed_end_to_end(doctor, monkeypatch, capsys):
    """collect() and main() on a simulated CUDA build whose driver is too old."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(doctor, "build_kind", lambda: "cuda")
    monkeypatch.setattr(doctor, "probe_cuda", lambda: (False, 0, [OLD_DRIVER]))
    assert doctor.main(["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["reason"]["code"] == "driver-too-old" and not report["gpu_used"]
    assert any("too old" in note for note in report["notes"])



@pytest.fixture
def machine(doctor, monkeypatch):
    """Simulate another build of torch on another machine, then run collect().

    What is faked: the build's version fields, whether MPS is built and available,
    what CUDA start-up reports, what nvidia-smi says, and the matmul on any device
    other than the CPU (there is none here to run it on). The rest of the doctor,
    diagnosis and rendering included, is the real code.
    """
    def simulate(cuda=None, hip=None, mps=(False, False), probe=(False, 0, []), smi=None):
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setattr(torch.version, "hip", hip)
        monkeypatch.setattr(torch.backends.mps, "is_built", lambda: mps[0])
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps[1])
        monkeypatch.setattr(doctor, "probe_cuda", lambda: probe)
        monkeypatch.setattr(doctor, "nvidia_smi", lambda: smi)
        real = doctor.matmul_check
        monkeypatch.setattr(doctor, "matmul_check", lambda device: real("cpu"))
        report = doctor.collect()
        return report, doctor.render(report)
    return simulate


def test_a_mac_with_mps_is_using_apples_gpu(machine):
    report, text = machine(mps=(True, True))
    assert report["build"] == "mps" and report["gpu_used"] and report["reason"] is None
    assert "Verdict: the GPU in use is Apple's MPS" in text and "no GPU" not in text


def test_a_mac_without_mps_says_why(machine):
    report, _ = machine(mps=(True, False))
    assert report["reason"]["code"] == "mps-unavailable"


def test_a_rocm_build_is_named_not_called_cpu_only(machine):
    report, text = machine(hip="6.4.43482")
    assert report["build"] == "rocm" and "(ROCm build)" in text
    assert report["reason"]["code"] == "no-visible-device"


def test_a_rocm_gpu_is_used_through_torch_cuda(machine, monkeypatch, doctor):
    monkeypatch.setattr(doctor, "cuda_device", lambda i: {
        "device": f"cuda:{i}", "name": "AMD Instinct MI300X", "total_memory_gib": 192.0,
        "capability": "9.4", "multiprocessors": 304, "matmul": {"ok": True, "max_abs_diff": 1e-5}})
    report, text = machine(hip="6.4.43482", probe=(True, 1, []))
    assert report["gpu"] == "cuda:0 (AMD Instinct MI300X) through ROCm"
    assert report["reason"] is None and "ROCm" in text


def test_a_cuda_build_on_a_machine_without_a_driver(machine):
    report, text = machine(cuda="13.0")
    assert report["build"] == "cuda" and report["reason"]["code"] == "no-driver"
    assert "CPU-only wheel" in report["reason"]["fix"] and "[no-driver]" in text


def test_a_cpu_only_build_is_called_cpu_only(machine):
    report, text = machine()
    assert report["reason"]["code"] == "cpu-only-build" and "(CPU-only build)" in text


def test_an_xpu_build_is_named(machine, monkeypatch):
    monkeypatch.setattr(torch.version, "xpu", "20250201", raising=False)
    report, text = machine()
    assert report["build"] == "xpu" and "(Intel XPU build)" in text
    assert report["reason"]["code"] == "no-visible-device"


# check_gpu.py as a whole on a broken machine, in a fresh interpreter: what torch
# reports is faked (as above), the rest of the snippet and the doctor are real.
BROKEN = r"""
import importlib.util, json, runpy, sys, warnings
import torch
# the doctor, loaded from beside the snippet, is the module check_gpu.py will import
spec = importlib.util.spec_from_file_location("gpu_doctor", sys.argv[2].rsplit("/", 1)[0] + "/gpu_doctor.py")
gpu_doctor = sys.modules["gpu_doctor"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_doctor)

case = sys.argv[1]
torch.version.cuda = "13.0"
gpu = case == "no-kernel-image"

def is_available():
    if case == "old-driver":
        warnings.warn(%r)
    return gpu

torch.cuda.is_available = is_available
torch.cuda.device_count = lambda: 1  # NVML counts the GPU in both cases
torch.accelerator.is_available = lambda: gpu
torch.accelerator.current_accelerator = lambda check_available=False: (
    torch.device("cuda") if gpu or not check_available else None)
if gpu:  # the queries that need no kernel answer; every kernel fails
    failed = {"ok": False, "error": "CUDA error: no kernel image is available for execution on the device"}
    real = gpu_doctor.matmul_check
    gpu_doctor.matmul_check = lambda device: real(device) if device == "cpu" else failed
    gpu_doctor.cuda_device = lambda i: {
        "device": f"cuda:{i}", "name": "NVIDIA GeForce RTX 5090", "total_memory_gib": 31.4,
        "capability": "12.0", "multiprocessors": 170, "matmul": failed}
    for name, value in {"current_device": 0, "get_device_name": "NVIDIA GeForce RTX 5090",
                        "get_device_capability": (12, 0), "mem_get_info": (2**34, 2**35),
                        "synchronize": None, "memory_allocated": 0, "max_memory_allocated": 0}.items():
        setattr(torch.cuda, name, lambda *args, value=value: value)
runpy.run_path(sys.argv[2], run_name="__main__")
""" % OLD_DRIVER


@pytest.mark.parametrize("case, verdict", [
    ("old-driver", "driver-too-old"),  # device_count() > 0, is_available() False
    ("no-kernel-image", "gpu-matmul-failed"),  # available, but no kernel runs
])
def test_check_gpu_diagnoses_a_broken_machine_and_exits_zero(case, verdict):
    snippet = ROOT / "snippets" / "gpu" / "check_gpu.py"
    proc = subprocess.run([sys.executable, "-c", BROKEN, case, str(snippet)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f'"code": "{verdict}"' in proc.stdout and '"gpu_used": false' in proc.stdout
    assert "device: cpu" in proc.stdout
    if case == "old-driver":
        assert "GPUs are visible, but the CUDA runtime cannot use them" in proc.stdout
    else:
        assert "a matmul on it failed: CUDA error: no kernel image" in proc.stdout
