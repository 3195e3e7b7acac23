"""gpu_doctor: is PyTorch using the GPU, and if not, why not?

    python gpu_doctor.py          a text report
    python gpu_doctor.py --json   the same report as one JSON object

It needs nothing but torch. The exit code is 0 whenever the report ran, GPU or not;
a non-zero exit code means the script itself failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import warnings

import torch

MATMUL_SIZE = 64  # enough for a real GEMM kernel, small enough for any device
WIDTH = 80  # of the text report


def build_kind() -> str:
    """The GPU runtime this torch was compiled with: cuda, rocm, xpu, mps or cpu."""
    if torch.version.cuda:
        return "cuda"
    if getattr(torch.version, "hip", None):
        return "rocm"
    if getattr(torch.version, "xpu", None):
        return "xpu"
    if torch.backends.mps.is_built():  # the macOS wheels
        return "mps"
    return "cpu"


BUILDS = {"cpu": "CPU-only build", "cuda": "CUDA build", "rocm": "ROCm build",
          "xpu": "Intel XPU build", "mps": "macOS build with MPS"}


def hides_all_devices(visible: str | None) -> bool:
    """True when CUDA_VISIBLE_DEVICES leaves no GPU visible.

    An empty value hides every GPU, and CUDA reads the list only up to its first
    invalid entry, so a list that starts with a negative index hides them all too.
    """
    if visible is None:
        return False
    first = visible.split(",")[0].strip()
    return first == "" or (first.startswith("-") and first[1:].isdigit())


def nvidia_smi() -> dict | None:
    """What nvidia-smi says about the driver and the GPUs; None if it is not on PATH."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    query = [exe, "--query-gpu=name,driver_version,memory.total",
             "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"returncode": None, "lines": [str(error)]}
    text = out.stdout if out.returncode == 0 else out.stderr
    return {"returncode": out.returncode, "lines": text.strip().splitlines()}


def probe_cuda() -> tuple[bool, int, list[str]]:
    """is_available() and device_count(), and the warnings CUDA start-up raised.

    A CUDA build with a missing or outdated driver does not raise here: it warns
    ("CUDA initialization: ...") and reports no device. Those warnings are the best
    evidence of why, so they are kept.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
        count = torch.cuda.device_count()
    return available, count, [str(w.message) for w in caught]


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def matmul_check(device: str) -> dict:
    """A float32 matmul on `device`, against the same product in float64 on the CPU."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, generator=gen)
    b = torch.randn(MATMUL_SIZE, MATMUL_SIZE, generator=gen)
    reference = a.double() @ b.double()
    try:
        product = (a.to(device) @ b.to(device)).cpu().double()
    except RuntimeError as error:  # e.g. "no kernel image is available for execution"
        return {"ok": False, "error": str(error).strip().splitlines()[0]}
    diff = (product - reference).abs().max().item()
    # 1e-3 of the largest entry: loose enough for TF32, tight enough to catch garbage
    tolerance = 1e-3 * reference.abs().max().item()
    return {"ok": diff <= tolerance, "max_abs_diff": diff}


def other_devices() -> list[dict]:
    """Apple's MPS and Intel XPUs, which torch.cuda does not list."""
    found = []
    if torch.backends.mps.is_available():
        found.append({"device": "mps", "name": "Apple MPS (Metal Performance Shaders)",
                      "matmul": matmul_check("mps")})
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        found += [{"device": f"xpu:{i}", "name": xpu.get_device_name(i),
                   "matmul": matmul_check(f"xpu:{i}")} for i in range(xpu.device_count())]
    return found


def cuda_device(index: int) -> dict:
    props = torch.cuda.get_device_properties(index)
    return {"device": f"cuda:{index}", "name": props.name,
            "total_memory_gib": round(props.total_memory / 2**30, 1),
            "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "matmul": matmul_check(f"cuda:{index}")}


def collect() -> dict:
    """Everything the diagnosis needs, as plain JSON values."""
    available, count, init_warnings = probe_cuda()
    cudnn = torch.backends.cudnn
    devices = [{"device": "cpu", "name": cpu_name(), "matmul": matmul_check("cpu")}]
    if available:  # on a ROCm build, torch.cuda drives the AMD GPUs
        devices += [cuda_device(i) for i in range(count)]
    devices += other_devices()
    report = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "build": build_kind(),
        "cuda_runtime": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": cudnn.version() if cudnn.is_available() else None,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nvidia_smi": nvidia_smi(),
        "cuda_available": available,
        "device_count": count,
        "init_warnings": init_warnings,
        "devices": devices,
    }
    working = [d for d in devices if d["device"] != "cpu" and d["matmul"]["ok"]]
    report["gpu_used"] = bool(working)
    report["gpu"] = gpu_in_use(working[0], report["build"]) if working else None
    report["reason"] = diagnose(report)
    report["notes"] = notes(report)
    return report


def gpu_in_use(device: dict, build: str) -> str:
    """'cuda:0 (NVIDIA H200)', or "Apple's MPS" on a Mac."""
    if device["device"] == "mps":
        return "Apple's MPS (device 'mps')"
    through = " through ROCm" if build == "rocm" else ""
    return f"{device['device']} ({device['name']}){through}"


def finding(code: str, message: str, fix: str) -> dict:
    return {"code": code, "message": message, "fix": fix}


def diagnose(report: dict) -> dict | None:
    """The most likely reason no GPU is used, with its fix; None if a GPU works."""
    if report["gpu_used"]:
        return None
    gpus = [d for d in report["devices"] if d["device"] != "cpu"]
    warned = " ".join(report["init_warnings"]).lower()
    visible = report["cuda_visible_devices"]
    if gpus:
        error = next(d["matmul"].get("error", "wrong result") for d in gpus)
        return finding(
            "gpu-matmul-failed", f"A GPU is visible, but its matmul failed: {error}",
            "'no kernel image is available' means this torch was not compiled for the "
            "GPU's compute capability: install a newer torch build. For other errors, "
            "rerun with CUDA_LAUNCH_BLOCKING=1 to see which call fails.")
    if report["build"] == "cpu":
        return finding(
            "cpu-only-build",
            f"This torch ({report['torch']}) is a CPU-only build: torch.version.cuda "
            "is None, so it contains no CUDA code at all.",
            "Install a CUDA build of torch: on Linux x86-64 the default `pip install "
            "torch` from PyPI is one; elsewhere use the command from pytorch.org's "
            "install selector. Then torch.version.cuda shows a version.")
    if hides_all_devices(visible):
        return finding(
            "cuda-visible-devices",
            f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from this process.",
            "Unset CUDA_VISIBLE_DEVICES, or set it to the GPUs you want (e.g. "
            "CUDA_VISIBLE_DEVICES=0,1) before the process starts.")
    if report["build"] == "cuda" and "too old" in warned:
        return finding(
            "driver-too-old",
            "The NVIDIA driver is older than the CUDA runtime this torch was built "
            f"with (CUDA {report['cuda_runtime']}).",
            "Update the NVIDIA driver (the 'CUDA Version' in nvidia-smi's header is "
            "the newest CUDA it supports), or install a torch built for an older CUDA "
            "that the driver supports.")
    if report["build"] == "cuda" and ("no nvidia driver" in warned
                                      or report["nvidia_smi"] is None):
        return finding(
            "no-driver",
            "This torch is a CUDA build, but no NVIDIA driver answers (nvidia-smi is "
            "not on PATH, or CUDA found no driver). `pip install torch` on Linux "
            "x86-64 gives a CUDA build whether or not the machine has an NVIDIA GPU.",
            "If the machine has an NVIDIA GPU, install its driver; in a container, "
            "start it with access to the GPU (e.g. `docker run --gpus all` with the "
            "NVIDIA Container Toolkit). If it has none (most laptops with Intel or AMD "
            "graphics), CUDA cannot help: run on the CPU, and install the much smaller "
            "CPU-only wheel from pytorch.org's install selector.")
    if report["build"] == "mps":
        return finding(
            "mps-unavailable",
            "This macOS build of torch supports Apple's MPS, but "
            "torch.backends.mps.is_available() is False.",
            "Current torch (2.11 and newer) runs MPS on macOS 14.0 or newer, on a Mac "
            "with Apple silicon: the last PyTorch wheels for Intel Macs were 2.2. "
            "On an Apple-silicon Mac, also check that the process can reach Metal (a "
            "virtual machine or a sandbox may hide it); on an older Mac the CPU is "
            "all there is.")
    return finding(
        "no-visible-device", f"The {BUILDS[report['build']]}'s GPU runtime started but "
        "reports no device.",
        "Check that `nvidia-smi -L` (CUDA), `rocm-smi` (ROCm) or `xpu-smi discovery` "
        "(Intel) lists the GPU, that CUDA_VISIBLE_DEVICES (HIP_VISIBLE_DEVICES, "
        "ZE_AFFINITY_MASK) names it, and that a container or job scheduler gave this "
        "process access to it.")


def notes(report: dict) -> list[str]:
    """Secondary findings that matter even when they are not the main reason."""
    found = []
    visible = report["cuda_visible_devices"]
    if visible is not None:
        found.append(f"CUDA_VISIBLE_DEVICES={visible!r}: this process sees only the "
                     "GPUs it names, renumbered from cuda:0.")
        if report["build"] == "cpu" and hides_all_devices(visible):
            found.append("That value would hide every GPU even with a CUDA build.")
    if report["build"] == "cpu" and report["nvidia_smi"] is None:
        found.append("nvidia-smi is not on PATH either: this machine may have no "
                     "NVIDIA GPU or driver, and then a CUDA build would not help.")
    found += [f"CUDA start-up warning: {w}" for w in report["init_warnings"]]
    if report["gpu_used"]:
        found.append("The GPU works. If a program still runs on the CPU, print where "
                     "its data is: next(model.parameters()).device and batch.device.")
    return found


def wrap(label: str, text: str) -> str:
    """`text` after `label`, wrapped under its own first column."""
    return textwrap.fill(text, width=WIDTH, initial_indent=label,
                         subsequent_indent=" " * len(label), break_on_hyphens=False)


def matmul_text(check: dict) -> str:
    if "error" in check:
        return f"FAILED: {check['error']}"
    verdict = "ok" if check["ok"] else "WRONG RESULT"
    return f"max |diff| {check['max_abs_diff']:.1e}  {verdict}"


def render(report: dict) -> str:
    """The report as aligned text."""
    smi = report["nvidia_smi"]
    visible = report["cuda_visible_devices"]
    rows = [
        ("torch", f"{report['torch']} ({BUILDS[report['build']]})"),
        ("Python", f"{report['python']} on {report['platform']}"),
        ("CUDA runtime", report["cuda_runtime"] or "none (torch.version.cuda is None)"),
        ("cuDNN", report["cudnn"] or "none"),
        ("CUDA_VISIBLE_DEVICES", "(not set)" if visible is None else repr(visible)),
        ("nvidia-smi", "not found on PATH" if smi is None
         else "; ".join(smi["lines"]) or "(no output)"),
        ("torch.cuda", f"is_available() = {report['cuda_available']}, "
                       f"device_count() = {report['device_count']}"),
    ]
    lines = ["gpu_doctor: is PyTorch using the GPU?", ""]
    lines += [wrap(f"  {key:<21} ", str(value)) for key, value in rows]
    lines += ["", f"Devices: {MATMUL_SIZE}x{MATMUL_SIZE} float32 matmul, "
                  "checked against float64 on the CPU"]
    for d in report["devices"]:
        if "capability" in d:
            lines.append(f"  {d['device']:<7} {d['name']}, {d['total_memory_gib']} "
                         f"GiB, capability {d['capability']}, "
                         f"{d['multiprocessors']} SMs")
        else:
            lines.append(f"  {d['device']:<7} {d['name']}")
        lines.append(f"          {matmul_text(d['matmul'])}")
    reason = report["reason"]
    if reason is None:
        lines += ["", wrap("Verdict: ", f"the GPU in use is {report['gpu']}.")]
    else:
        lines += ["", "Verdict: no GPU is in use.",
                  wrap("  Reason  ", f"[{reason['code']}] {reason['message']}"),
                  wrap("  Fix     ", reason["fix"])]
    if report["notes"]:
        lines += ["", "Notes"] + [wrap("  - ", note) for note in report["notes"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true",
                        help="print the report as one JSON object")
    args = parser.parse_args(argv)
    report = collect()
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
