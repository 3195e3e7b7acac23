"""Every snippet runs as the build runs it, on the weakest CPU a reader brings: forked from an
interpreter that imported torch under the profile's variables, which prints what
``python snippets/...py`` prints (sitebuild/forkserver.py, tests/test_forkserver.py). Only a
snippet marked ``# snippet: cpu-independent`` is left out, and it says why: what it asserts
cannot depend on the CPU's kernels or threads (counts, shapes, collectives, API behaviour, two
computations on the same machine that must agree), and its timings are printed, never
asserted. A snippet that keeps a time budget stays in, so the profile shows that the budget
holds on a slow CPU.

CI and readers do not share one CPU model: one CI host is a Xeon with AMX, another an
AMD EPYC with AVX2 only, and readers bring old laptops. These variables make this
machine's torch take the code paths of such a CPU (``snippets.CPU_PROFILES``):

* ``ATEN_CPU_CAPABILITY`` picks ATen's vectorised kernels (``default`` = no AVX);
* ``ONEDNN_MAX_CPU_ISA`` caps oneDNN (bf16 matmuls, convolutions);
* ``MKL_ENABLE_INSTRUCTIONS`` caps MKL (float32 GEMM) on Intel CPUs; on AMD, MKL
  neither promises to honour it nor names its code path;
* ``OMP_NUM_THREADS=1`` leaves one thread, as on a one-core laptop.

The suite runs one profile, ``old-laptop`` (``SUITE``): no AVX and one thread. It lies below
the AVX2-only EPYC on every axis the snippets depend on (ATen, oneDNN and MKL on a lower ISA,
no AMX or AVX-512 bf16, fewer threads, slower), so a claim that holds there and on this
machine fails on the EPYC alone only if it depends on rounding that differs between the ISAs
(a tolerance met with and without AVX but not with AVX2), which CI's runs on the EPYC catch.
The snippets that branch on the CPU (gpu/benchmark.py on AMX under oneDNN's cap,
practice/mixed_precision.py on AMX-FP16) take the EPYC's branch under it on both CI hosts.
The ``avx2`` profile stays for `make bench`, which emulates the EPYC for whole builds, and a
CI run on the EPYC is itself an AVX2 run. Running it here too cost 33 runs and about 190 s
of a core in each fresh-clone suite on the AMX Xeon.

The profile draws no chart (``SNIPPET_FIGURES=off``, snippets/_figures.py): matplotlib
draws the same way whatever torch's kernels, and the drawing was about half of a
charting snippet's run (kv_cache.py: 2.2 of 3.8 s on the 2-core EPYC).

``test_profile_really_changes_the_kernels`` shows that both profiles take effect here, as far
as each library reports it on this CPU. Each
snippet must also finish within half its timeout, which is what its time budget is
for. Each snippet's seconds are written to ``test-artifacts/cpu-profiles.txt``.
Under `make test`, a snippet that passed under the profile is not run again under it
until it, a module it imports, this file or the machine changes (tests/check_cache.py).

The runs start as soon as the tests are collected (``start``, from conftest.py), in
the background, one after another: the build and the later tests leave a core idle at
times. Where this process already runs as the profile (``make bench PROFILE=old-laptop``
sets its variables), the build's own runs of the snippets are the profile's runs, and
they are not repeated.
"""

import dataclasses
import os
import platform
import re
import subprocess
import sys
import tempfile
import warnings
from concurrent.futures import Future
from pathlib import Path

import pytest
from sitebuild import attribution, snippets
from tests import check_cache
from tests.conftest import ROOT, background

CODE = [Path(__file__), Path(snippets.__file__), Path(attribution.__file__)]  # a change to one reruns the profiles

PROFILES = snippets.CPU_PROFILES
SUITE = ("old-laptop",)  # the profiles the suite runs every snippet under (see above)
NO_FIGURES = {"SNIPPET_FIGURES": "off"}  # snippets/_figures.py: nothing to learn from a chart on a weaker CPU
# What each profile must show, where the CPU has at least that much.
KERNELS = {"avx2": ("AVX2", "Intel AVX2", "AVX2"), "old-laptop": ("DEFAULT", "Intel SSE4.1", "SSE4.2")}
PROBE = """
import torch
print("capability", torch.backends.cpu.get_cpu_capability())
a = torch.randn(64, 64)
a @ a
torch.nn.functional.conv2d(torch.randn(1, 64, 56, 56), torch.randn(64, 64, 3, 3))  # oneDNN
"""


def run_profile(name: str) -> list[snippets.Result]:
    """Every snippet under the profile; under `make test`, only those whose sources changed
    since they last passed under it (tests/check_cache.py)."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in profiled():
            key = check_cache.key(f"profile {name}", [PROFILES[name], snippets.source_hashes(path)], CODE)
            kept = check_cache.get(key)
            if kept is not None:
                results.append(snippets.Result(**{**kept, "cached": True}))
                continue
            result = snippets.execute(path, snippets.output_dir(Path(tmp), path), env=PROFILES[name] | NO_FIGURES,
                                      preloaded=True)
            if result.ok:
                check_cache.put(key, dataclasses.asdict(result))
            results.append(result)
    return results


def profiled() -> list[Path]:
    """Every snippet but those whose outcome cannot depend on the CPU (``# snippet: cpu-independent``)."""
    return [path for path in snippets.discover() if not snippets.cpu_independent(path)]


def start() -> dict[str, Future]:
    """Each profile that this process is not already running as, in the background."""
    return {name: background(f"profile {name}", run_profile, name)
            for name in SUITE if not snippets.profile_in_effect(name)}


@pytest.fixture(scope="module")
def profile_runs(request) -> dict[str, list[snippets.Result]]:
    started = start()  # the same runs when conftest.py started them at collection
    runs, lines = {}, []
    for name in SUITE:
        if name in started:
            runs[name], source = started[name].result(), ""
        else:
            built = request.getfixturevalue("snippet_results")
            runs[name] = [built[snippets.relative(p)] for p in profiled()]
            source = " (the build's own runs: this process already runs as this profile)"
        lines.append(f"== {name}: " + " ".join(f"{k}={v}" for k, v in PROFILES[name].items()) + source)
        lines += [f"{r.seconds:7.1f} s / {r.timeout:3d} s  {r.path}  "
                  f"{'ok' if r.ok else 'FAILED: ' + r.why()}{' (kept: passed before)' if r.cached else ''}"
                  for r in runs[name]]
        lines.append(f"{sum(r.seconds for r in runs[name]):7.1f} s in all")
    lines += [f"not run under the profiles (# snippet: cpu-independent): {snippets.relative(p)}"
              for p in snippets.discover() if snippets.cpu_independent(p)]
    artifacts = ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "cpu-profiles.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return runs


@pytest.mark.parametrize("name", SUITE)
def test_every_snippet_passes_within_half_its_timeout(name, profile_runs):
    results = profile_runs[name]
    failed = [r.failure() for r in results if not r.ok]
    assert not failed, f"under the {name} profile:\n\n" + "\n\n".join(failed)
    slow = [f"{r.path}: {r.seconds} s of {r.timeout} s" for r in results if r.seconds > r.timeout / 2]
    assert not slow, f"under the {name} profile, over half the timeout: {slow}"


def test_each_profile_run_has_one_thread(profile_runs):
    """The profile's one thread reaches the forked snippets: benchmarking.py prints the threads
    torch uses (the fork server imported torch under the profile's variables). Where this
    process runs as the profile, its runs are the build's, under the same variables."""
    ran = [r for name in SUITE for r in profile_runs[name] if r.path == "snippets/performance/benchmarking.py"]
    assert ran and all("torch.get_num_threads() = 1;" in r.stdout for r in ran), [r.stdout[-600:] for r in ran]


def test_the_profiles_draw_no_chart_and_the_build_does(profile_runs, snippet_results):
    """NO_FIGURES reaches the snippets: a profile's runs leave no chart, and the build's runs of
    the same snippets leave theirs (a profile that is the build's own runs is the build)."""
    ran = [r for name in SUITE if not snippets.profile_in_effect(name) for r in profile_runs[name]]
    if not ran:
        pytest.skip("this process runs as the profile (make bench PROFILE=old-laptop): its runs are the build's, "
                    "which draw the charts")
    assert ran and not [r.path for r in ran if any(f.endswith(".svg") for f in r.figures)]
    charted = [r.path for r in ran if "not drawn (SNIPPET_FIGURES=off)" in r.stdout]
    assert charted and all(snippet_results[path].figures for path in charted)


@pytest.mark.parametrize("name", PROFILES)
def test_profile_really_changes_the_kernels(name):
    """ATen's capability and oneDNN's ISA as the libraries report them, on any x86 CPU.

    MKL names its code path only on Intel CPUs: on an AMD EPYC its verbose line says
    "Intel(R) Architecture processors" and nothing more, and MKL does not promise to
    honour ``MKL_ENABLE_INSTRUCTIONS`` there. So MKL's ISA is asserted only where MKL
    names one; elsewhere the test says so and checks what MKL does report everywhere:
    that it ran the GEMM, and with one thread under the one-thread profile.
    """
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"the profiles emulate x86 CPUs; this one is {platform.machine()}")
    if name == "avx2" and "avx2" not in snippets.cpu_flags():
        pytest.skip("this CPU has no AVX2: the avx2 profile cannot be checked here")
    env = dict(os.environ, **PROFILES[name], ONEDNN_VERBOSE="1", MKL_VERBOSE="1")
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    aten, onednn, mkl = KERNELS[name]
    assert f"capability {aten}" in out
    assert re.search(rf"onednn_verbose,.*info,cpu,isa:{re.escape(onednn)}", out), out[:2000]
    mkl_lines = [line for line in out.splitlines() if line.startswith("MKL_VERBOSE")]
    if not mkl_lines:
        pytest.skip("this torch does not use MKL (e.g. an ARM build)")
    header, gemm = mkl_lines[0], next((line for line in mkl_lines if "GEMM(" in line), "")
    assert gemm, f"MKL ran no GEMM for a float32 matmul:\n{out[:2000]}"
    if "OMP_NUM_THREADS" in PROFILES[name]:
        assert f"NThr:{PROFILES[name]['OMP_NUM_THREADS']}" in gemm, gemm
    isa = mkl_isa(header)
    if isa is None:
        warnings.warn(f"MKL names no instruction set on this CPU, so its cap is not checked: {header}")
        return
    assert isa == mkl, header


def mkl_isa(header: str) -> str | None:
    """The code path MKL's verbose header names (Intel CPUs only), e.g. "AVX2"."""
    isa = re.search(r"\(([^()]+)\) enabled processors", header.replace("Intel(R) ", ""))
    return isa.group(1) if isa else None


def test_mkl_header_is_read_on_both_vendors():
    intel = ("MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture "
             "Intel(R) Advanced Vector Extensions 2 (Intel(R) AVX2) enabled processors, Lnx 2.00GHz lp64 gnu_thread")
    amd = ("MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture "
           "Intel(R) Architecture processors, Lnx 2.45GHz lp64 gnu_thread")
    assert mkl_isa(intel) == "AVX2"
    assert mkl_isa(intel.replace("Advanced Vector Extensions 2 (Intel(R) AVX2)",
                                 "Streaming SIMD Extensions 4.2 (Intel(R) SSE4.2)")) == "SSE4.2"
    assert mkl_isa(amd) is None
