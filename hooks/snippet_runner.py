"""Run every snippet once per build and put its real output on both language pages.

A page shows code with a pymdownx.snippets include inside a titled fence, and the
output of the whole script with one line of its own::

    ```python title="snippets/pytorch/tensors.py"
    --8<-- "snippets/pytorch/tensors.py:create"
    ```
    <!-- output: snippets/pytorch/tensors.py -->

Files a snippet writes into ``$SNIPPET_OUTPUT_DIR`` (plots) are served at
``generated/<snippet path without .py>/<name>``, so pages link them like any image.
A snippet may carry a line ``# snippet: timeout=300 serial``: ``serial`` runs it alone,
after the others, for timings that another process would disturb.

Why a hook and not markdown-exec: static-i18n builds the site once per language,
and markdown-exec runs code in the mkdocs process while each page renders, so
every example would run twice per build, share one interpreter's global state
(torch threads, seeds, multiprocessing), and run again on every prose-only
rebuild. Here each snippet runs once, in its own process group, with a timeout,
cached on disk by the hash of its source (and of the local modules it imports),
the torch version, the Python version and the device. ``make bench`` measures it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date
from functools import lru_cache
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import get_plugin_logger
from mkdocs.structure.files import File

log = get_plugin_logger("snippets")
ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = ROOT / "snippets"
DEFAULT_TIMEOUT = 120
STDERR_TAIL = 25  # lines of stderr quoted when a snippet fails
FORMAT = 1  # bump when the cached result's layout changes

OUTPUT_LINE = "<!-- output: "
PROVENANCE_LINE = "<!-- snippet-provenance -->"
LABELS = {
    "en": {"output": "Output", "ran": "Ran in this build on", "no_output": "(no output)",
           "head": ("Snippet", "Device", "torch", "Python", "Date", "Seconds")},
    "zh": {"output": "输出", "ran": "本次构建实际运行于", "no_output": "（无输出）",
           "head": ("示例", "设备", "torch", "Python", "日期", "耗时（秒）")},
}

PROBE = r"""
import json, platform, sys, torch
if torch.cuda.is_available():
    n = torch.cuda.device_count()
    device = f"cuda × {n}: {torch.cuda.get_device_name(0)}"
else:
    name = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor() or platform.machine())
    device = f"cpu: {name}"
print(json.dumps({"device": device, "torch": torch.__version__, "python": platform.python_version()}))
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

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def failure(self) -> str:
        why = (f"timed out after {self.timeout} s" if self.returncode is None
               else f"exited with code {self.returncode}")
        tail = "\n".join(self.stderr.rstrip().splitlines()[-STDERR_TAIL:])
        return f"snippet {self.path} {why}\n--- end of its stderr ---\n{tail or '(empty)'}"


def cache_dir() -> Path:
    return Path(os.environ.get("SNIPPET_CACHE_DIR", ROOT / ".cache" / "snippets"))


def discover() -> list[Path]:
    """Every runnable snippet; modules whose name starts with '_' are helpers."""
    return sorted(p for p in SNIPPETS.rglob("*.py") if not p.name.startswith("_"))


def options(path: Path) -> tuple[int, bool]:
    """(timeout, serial) from a ``# snippet: timeout=N serial`` line, anywhere in the file."""
    timeout, serial = DEFAULT_TIMEOUT, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# snippet:"):
            for word in line.split(":", 1)[1].split():
                if word.startswith("timeout="):
                    timeout = int(word.split("=", 1)[1])
                elif word == "serial":
                    serial = True
    return timeout, serial


def local_sources(path: Path, seen: set[Path] | None = None) -> list[Path]:
    """The snippet and, recursively, the modules it imports from snippets/."""
    seen = seen if seen is not None else set()
    if path in seen:
        return []
    seen.add(path)
    found = [path]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        for name in names:
            for base in (path.parent, SNIPPETS):
                candidate = base / (name.replace(".", "/") + ".py")
                if candidate.is_file():
                    found += local_sources(candidate, seen)
    return found


@lru_cache(maxsize=1)
def environment() -> dict:
    """Where snippets run: device, torch and Python versions (one probe per build)."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=DEFAULT_TIMEOUT, check=True)
    return json.loads(out.stdout)


def cache_key(path: Path) -> str:
    digest = hashlib.sha256(json.dumps([FORMAT, environment()], sort_keys=True).encode())
    for source in local_sources(path):
        digest.update(source.relative_to(ROOT).as_posix().encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:20]


def relative(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def execute(path: Path, timeout: int, outdir: Path, threads: int | None) -> Result:
    """Run one snippet in its own process group; kill the whole group when done."""
    env = dict(os.environ, SNIPPET_OUTPUT_DIR=str(outdir), MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    if threads and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(threads)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(path)], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        code = None
    finally:
        try:  # also reaps any child the snippet left behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if code is None:
        stdout, stderr = proc.communicate()
    return Result(relative(path), code, stdout, stderr, round(time.perf_counter() - start, 2),
                  timeout, environment(), figures=sorted(p.name for p in outdir.iterdir()))


def run(path: Path, threads: int | None = None) -> Result:
    """The snippet's result: from the cache when its key is known, else a fresh run.

    ``threads`` caps torch's intra-op threads (OMP_NUM_THREADS) for the run.
    """
    entry = cache_dir() / cache_key(path)
    stored = entry / "result.json"
    if stored.is_file():
        return Result(**{**json.loads(stored.read_text(encoding="utf-8")), "cached": True})
    timeout, _ = options(path)
    with tempfile.TemporaryDirectory() as tmp:
        outdir = Path(tmp) / "generated" / relative(path).removeprefix("snippets/").removesuffix(".py")
        outdir.mkdir(parents=True)
        result = execute(path, timeout, outdir, threads)
        if result.ok:  # failures are never cached
            (Path(tmp) / "result.json").write_text(json.dumps(asdict(result), indent=1), encoding="utf-8")
            entry.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(entry, ignore_errors=True)
            shutil.copytree(tmp, entry)
    return result


def run_all(paths: list[Path]) -> dict[str, Result]:
    """Run snippets one per core, each with one thread, then the serial ones alone.

    Two torch processes with two threads each on two cores slowed small snippets
    several times over; serial snippets (timings) get every core.
    """
    parallel = [p for p in paths if not options(p)[1]]
    serial = [p for p in paths if options(p)[1]]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda p: run(p, threads=1), parallel))
    results += [run(p) for p in serial]
    return {r.path: r for r in results}


# --- mkdocs events -------------------------------------------------------------

_results: dict[str, Result] = {}
_keys: dict[str, str] = {}


def on_files(files, config):
    """Run what changed (once for all languages); serve the snippets and their figures.

    Each snippet's source is served at ``snippets/...`` so that a page can offer it
    for download: ``[gpu_doctor.py](../snippets/gpu/gpu_doctor.py)``.
    """
    paths = discover()
    keys = {relative(p): cache_key(p) for p in paths}
    if keys != _keys:
        _results.clear()
        _results.update(run_all(paths))
        ran = sum(not r.cached for r in _results.values())
        log.info(f"{ran} snippets ran, {len(_results) - ran} from cache")
        _keys.clear()
        _keys.update(keys)
    failed = [r.failure() for r in _results.values() if not r.ok]
    if failed:
        raise PluginError("\n\n".join(failed))
    for result in _results.values():
        files.append(File(result.path, str(ROOT), config.site_dir, config.use_directory_urls))
        src_dir = cache_dir() / keys[result.path]
        folder = result.path.removeprefix("snippets/").removesuffix(".py")
        for name in result.figures:
            files.append(File(f"generated/{folder}/{name}", str(src_dir), config.site_dir,
                              config.use_directory_urls))
    return files


def locale(page, config) -> str:
    return getattr(page.file, "locale", None) or config.theme.locale.language


def provenance(result: Result, labels: dict) -> str:
    env = result.env
    return (f'<p class="snippet-provenance">{labels["ran"]} {env["device"]} · '
            f'torch {env["torch"]} · Python {env["python"]} · {result.ran_on}</p>')


def output_block(result: Result, labels: dict) -> str:
    text = result.stdout.rstrip() or labels["no_output"]
    fence = "````" if "```" in text else "```"
    return (f'{fence}text title="{labels["output"]} · {result.path}"\n{text}\n{fence}\n\n'
            f"{provenance(result, labels)}\n")


def provenance_table(labels: dict) -> str:
    rows = ["| " + " | ".join(labels["head"]) + " |", "|---|---|---|---|---|---:|"]
    for r in sorted(_results.values(), key=lambda r: r.path):
        rows.append(f"| `{r.path}` | {r.env['device']} | {r.env['torch']} | {r.env['python']} "
                    f"| {r.ran_on} | {r.seconds:.1f} |")
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    labels = LABELS[locale(page, config)]
    lines = []
    for line in markdown.split("\n"):
        stripped = line.strip()
        if stripped.startswith(OUTPUT_LINE) and stripped.endswith("-->"):
            path = stripped.removeprefix(OUTPUT_LINE).removesuffix("-->").strip()
            if path not in _results:
                raise PluginError(f"{page.file.src_uri}: no snippet '{path}' for its output line")
            lines.append(output_block(_results[path], labels))
        elif stripped == PROVENANCE_LINE:
            lines.append(provenance_table(labels))
        else:
            lines.append(line)
    return "\n".join(lines)


def on_serve(server, config, builder):
    server.watch(str(SNIPPETS))
    return server
