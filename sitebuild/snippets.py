"""Find the snippets and run one as a reader would: ``python snippets/<x>/<y>.py``.

Standard library only, so that ``python3 -m sitebuild.records`` can record a machine
that has Python and the snippets' own imports (torch, numpy, ...) but no mkdocs and no
venv. The build (``sitebuild/results.py``) and the tests use the same functions.

A snippet may carry a line ``# snippet: timeout=300 serial``: its timeout in seconds
(default 120) and ``serial``, which the build honours by running it alone. A third word,
``cpu-independent``, says that its outcome cannot depend on the CPU's kernels or threads,
so that the CPU profiles skip it (tests/test_cpu_profiles.py); the snippet says why.
"""

from __future__ import annotations

import ast
import getpass
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from pathlib import Path

from sitebuild import attribution, forkserver
from sitebuild.excerpts import INCLUDE, OUTPUT

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = ROOT / "snippets"
DEFAULT_TIMEOUT = 120
STDERR_TAIL = 25  # lines of stderr kept when a snippet fails

# Environment variables that make this machine's torch take a weaker CPU's code paths
# (tests/test_cpu_profiles.py shows that they do): ATen's kernels, oneDNN, MKL, threads.
CPU_PROFILES = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2"},  # an AVX2-only CPU, like CI's AMD EPYC
    "old-laptop": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                   "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "OMP_NUM_THREADS": "1"},
}
KERNEL_VARIABLES = sorted({name for profile in CPU_PROFILES.values() for name in profile})

# Where snippets run. Printed by a child process so that the caller needs no torch.
PROBE = r"""
import json, platform, shutil, subprocess, sys
import torch

def cpu_model():
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True)
        return out.stdout.strip() or platform.machine()
    return platform.processor() or platform.machine()

def driver():
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return None
    return out.stdout.split("\n")[0].strip() or None

# The array libraries' versions, where present: on the first GPU record, a numpy newer
# than its Numba supported broke Numba's kernels, and the record could not say which numpy.
def packages():
    from importlib import metadata
    found = {}
    for module in ("numpy", "numba", "numba_cuda", "cupy", "triton"):
        for dist in metadata.packages_distributions().get(module, [])[:1]:
            found[dist] = metadata.version(dist)
    return found

cpu = cpu_model()
gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
device = gpus[0] if gpus else f"mps: {cpu}" if mps else f"cpu: {cpu}"
print(json.dumps({"device": device, "torch": torch.__version__, "python": platform.python_version(),
                  "cuda": torch.version.cuda, "driver": driver(), "gpus": gpus, "cpu": cpu,
                  "os": platform.platform(), "packages": packages()}))
"""


@dataclass
class Result:
    path: str
    returncode: int | None  # None: killed at its timeout
    stdout: str
    stderr: str
    seconds: float
    timeout: int
    env: dict
    ran_on: str = field(default_factory=lambda: date.today().isoformat())
    figures: list[str] = field(default_factory=list)
    cached: bool = False
    # Which named section was running as each line of stdout was printed (sitebuild/attribution.py):
    # runs [[section name, or None where no section can take it, number of lines], ...] in order,
    # whose counts add up to len(stdout.splitlines()): a final line without a line break counts as
    # a line, for the section running when its last character was written. Empty: no attribution
    # (a result from before it, a run whose stdout had no offset, or no output at all).
    sections: list[list] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def why(self) -> str:
        return (f"timed out after {self.timeout} s" if self.returncode is None
                else f"exited with code {self.returncode}")

    def stderr_tail(self) -> str:
        return "\n".join(self.stderr.rstrip().splitlines()[-STDERR_TAIL:])

    def failure(self, pages: list[str] | None = None) -> str:
        """What went wrong: the header, the pages that include the snippet (when ``pages`` is
        given: the build's error, ``pages_including``), then the end of its stderr."""
        lines = [f"snippet {self.path} {self.why()}"]
        if pages is not None:
            lines.append(f"pages that include it: {', '.join(pages)}" if pages else "no page includes it")
        tail = self.stderr_tail()
        lines.append(f"--- its stderr (the last {STDERR_TAIL} lines at most) follows ---\n{tail}" if tail
                     else "--- its stderr was empty ---")
        return "\n".join(lines)


def cpu_flags() -> set[str]:
    """The flags /proc/cpuinfo lists for the first CPU (empty where there is none)."""
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return set()
    return next((set(line.split(":", 1)[1].split()) for line in lines if line.startswith("flags")), set())


def profile_in_effect(name: str) -> bool:
    """Whether this process already runs as that CPU profile: its variables are set here, as
    ``make bench PROFILE=...`` does."""
    return all(os.environ.get(key) == value for key, value in CPU_PROFILES[name].items())


def discover() -> list[Path]:
    """Every runnable snippet; modules whose name starts with '_' are helpers."""
    return sorted(p for p in SNIPPETS.rglob("*.py") if not p.name.startswith("_"))


def pages_including(path: str, root: Path | None = None) -> list[str]:
    """The pages (docs/..., both languages) that show the snippet ``path`` ("snippets/x/y.py"):
    with an output line, ``<!-- output: snippets/x/y.py -->``, or an include of its code,
    ``--8<-- "snippets/x/y.py"`` or ``--8<-- "snippets/x/y.py:section"``."""
    root = root or ROOT

    def shows(text: str) -> bool:
        return path in OUTPUT.findall(text) or any(m.group(1) == path for m in INCLUDE.finditer(text))
    return sorted(page.relative_to(root).as_posix() for page in (root / "docs").rglob("*.md")
                  if shows(page.read_text(encoding="utf-8")))


def relative(path: Path, root: Path | None = None) -> str:
    return path.resolve().relative_to(root or ROOT).as_posix()


def header(path: Path) -> list[str]:
    """The words of the ``# snippet:`` line, anywhere in the file."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# snippet:"):
            return line.split(":", 1)[1].split()
    return []


def options(path: Path) -> tuple[int, bool]:
    """(timeout, serial) from a ``# snippet: timeout=N serial`` line."""
    words = header(path)
    timeout = next((int(w.split("=", 1)[1]) for w in words if w.startswith("timeout=")), DEFAULT_TIMEOUT)
    return timeout, "serial" in words


def cpu_independent(path: Path) -> bool:
    return "cpu-independent" in header(path)


def local_sources(path: Path, seen: set[Path] | None = None) -> list[Path]:
    """The snippet and, recursively, the modules it imports from snippets/."""
    seen = seen if seen is not None else set()
    if path in seen:
        return []
    seen.add(path)
    found = [path]
    for module in _imports(path, path.stat().st_mtime_ns):
        if module.is_file():  # asked each time: a module may appear after the snippet was parsed
            found += local_sources(module, seen)
    return found


@lru_cache(maxsize=512)
def _imports(path: Path, mtime_ns: int) -> tuple[Path, ...]:
    """Where the modules ``path`` imports would lie under snippets/, parsed again only once the
    file changed: every build asks for every snippet's sources, and `mkdocs serve` rebuilds often."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        for name in names:
            found += [base / (name.replace(".", "/") + ".py") for base in (path.parent, SNIPPETS)]
    return tuple(found)


def helpers_imported(cells: list[str]) -> list[Path]:
    """The snippet helpers (``snippets/**/_name.py``) that a lab's code cells import by module
    name, with the local modules they import in turn: what a lab, which puts a helper's folder
    on sys.path, takes from the repository. Its cache key and its Colab notebook need them.
    IPython's lines (``%magic``, ``!shell``) and cell magics (``%%writefile``) are not Python."""
    python = "\n".join(line for cell in cells if not cell.startswith("%%")
                        for line in cell.splitlines() if not line.lstrip().startswith(("%", "!")))
    names = {name for node in ast.walk(ast.parse(python))
             for name in ([a.name for a in node.names] if isinstance(node, ast.Import)
                          else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
             if name.startswith("_")}
    seen, found = set(), []
    for name in sorted(names):
        for helper in sorted(SNIPPETS.rglob(f"{name}.py"))[:1]:
            found += local_sources(helper, seen)
    return found


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_hashes(path: Path) -> dict[str, str]:
    """sha256 of the snippet and of every local module it imports, by repository path."""
    return {relative(p): sha256(p) for p in local_sources(path)}


_probing = threading.Lock()
# The probe's answer, handed to the processes this one starts: each build that a test session
# starts would otherwise import torch once more for it (a second of CPU).
HANDED = "SITEBUILD_MACHINE"
# What hides devices from torch: a child that sets one of these differently probes anew.
VISIBILITY = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def machine() -> dict:
    """Device, torch, Python, CUDA, driver, GPUs, CPU and OS of this Python's torch.

    Asked once per process tree (a child that imports torch: seconds), also when a thread
    started it early (sitebuild/background.py) and another asks meanwhile."""
    with _probing:
        return _machine()


@lru_cache(maxsize=1)
def _machine() -> dict:
    """The answer a parent handed down (``HANDED``) where this process would probe the same
    (the same interpreter, the same devices visible); otherwise a probe, handed on in turn."""
    handed, me = json.loads(os.environ.get(HANDED) or "{}"), asker()
    if handed.get("asker") == me:
        return handed["machine"]
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=DEFAULT_TIMEOUT, check=True)
    found = json.loads(out.stdout)
    os.environ[HANDED] = json.dumps({"asker": me, "machine": found})
    return found


def asker() -> list:
    return [sys.executable, *(os.environ.get(name) for name in VISIBILITY)]


def execute(path: Path, outdir: Path, env: dict | None = None, timeout: int | None = None,
            preloaded: bool = False, root: Path | None = None) -> Result:
    """Run one snippet in its own process group; kill the whole group when it ends.

    ``env`` is added to this process's environment (for example a CPU profile, or
    ``OMP_NUM_THREADS``); figures land in ``outdir`` ($SNIPPET_OUTPUT_DIR). ``timeout``
    replaces the snippet's own (a recorder's time budget may leave less). ``preloaded``:
    forked from a process that has imported torch already (sitebuild/forkserver.py), on Linux.
    ``root``: the working directory, which the result's path is relative to (default: the repository).
    """
    timeout = timeout or options(path)[0]
    root = root or ROOT
    environ = dict(os.environ, SNIPPET_OUTPUT_DIR=str(outdir), MPLBACKEND="Agg",
                   PYTHONUNBUFFERED="1") | (env or {})
    for own in (HANDED, RUN_LOG):  # the build's own: a snippet has no use for them, as it has not in a reader's shell
        environ.pop(own, None)
    environ |= inductor_cache(environ)
    start = time.perf_counter()
    ran = None
    if preloaded and forkserver.AVAILABLE:
        try:
            ran = forkserver.run(path, environ, root, timeout)
        except forkserver.ServerGone:  # torch does not import there, say: a fresh run says why
            pass
    code, stdout, stderr, sections = ran or fresh(path, environ, timeout, root)  # None: it set what the server's imports read
    result = Result(relative(path, root), code, stdout, stderr, round(time.perf_counter() - start, 2),
                    timeout, machine(), figures=sorted(p.name for p in outdir.iterdir()), sections=sections)
    note_run(result, env or {})
    return result


RUN_LOG = "SNIPPET_RUN_LOG"  # a file each run appends a line to: `make bench`'s count of runs (tests/bench.py)


def note_run(result: Result, env: dict):
    """With $SNIPPET_RUN_LOG, one JSON line per run: the snippet, its seconds, and what ran it
    (the build, a CPU profile, or the test file that was running)."""
    log = os.environ.get(RUN_LOG)
    if not log:
        return
    profile = env.get("ATEN_CPU_CAPABILITY")
    by = f"CPU profile ({profile})" if profile else os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0] or "build"
    with open(log, "a", encoding="utf-8") as file:
        file.write(json.dumps({"path": result.path, "seconds": result.seconds, "by": by}) + "\n")


def fresh(path: Path, environ: dict, timeout: int, root: Path) -> tuple[int | None, str, str, list[list]]:
    """``python <path>``: (exit code or None at the timeout, stdout, stderr, attribution).

    Run as ``python <path>`` runs it, by the attribution's bootstrap (``attribution.command``),
    with stdout and stderr in files: the side channel reads stdout's file offset. The run ends
    when the snippet's process does; what it left behind is killed with its process group."""
    with tempfile.TemporaryDirectory(prefix="snippet-run-") as tmp:
        out, err, record = Path(tmp, "stdout"), Path(tmp, "stderr"), Path(tmp, "attribution")
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(attribution.command(path), cwd=root, env=environ | {attribution.VARIABLE: str(record)},
                                    stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            forkserver.track(proc.pid)
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            forkserver.kill_group(proc.pid)  # also any child the snippet left behind
            forkserver.untrack(proc.pid)
        if code is None:
            proc.wait()
        text, sections = attribution.read(out, record, Path(root, path))
        return code, text, err.read_text(errors="replace"), sections


def inductor_cache(environ: dict) -> dict:
    """Under ATEN_CPU_CAPABILITY, an Inductor cache of that capability's own.

    torch 2.13's FX graph cache key leaves out the vector ISA that this variable picks
    (torch/_inductor/codecache.py, FxGraphHashDetails): on an AVX-512 Xeon, GELU compiled
    under the avx2 profile and loaded from the shared cache by a native run gave 8 wrong
    values of 2**20, and the other way round half of them. The folder given, or torch's
    default (which torch also writes into os.environ once it has used it), gets a suffix."""
    capability = environ.get("ATEN_CPU_CAPABILITY")
    if capability is None:
        return {}
    base = environ.get("TORCHINDUCTOR_CACHE_DIR") or str(
        Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}")
    return {"TORCHINDUCTOR_CACHE_DIR": f"{base}_{capability}"}


def output_dir(base: Path, path: Path) -> Path:
    """Where a snippet's figures go: ``<base>/<section>/<page>/``."""
    folder = base / relative(path).removeprefix("snippets/").removesuffix(".py")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
