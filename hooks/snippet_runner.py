"""Run every snippet once per build and put its real output on both language pages.

A page shows code with a pymdownx.snippets include inside a titled fence, and the
output of the whole script with one line of its own::

    ```python title="snippets/pytorch/tensors.py"
    --8<-- "snippets/pytorch/tensors.py:create"
    ```
    <!-- output: snippets/pytorch/tensors.py -->

That line becomes this build's output and provenance, followed by one tab per
hardware record (``records/*.json``, see tools/records.py) whose entry for the
snippet is current; ``<!-- snippet-provenance -->`` becomes the "Verified on" matrix.
Files a snippet writes into ``$SNIPPET_OUTPUT_DIR`` (plots) are served at
``generated/<snippet path without .py>/<name>``, so pages link them like any image.

Why a hook and not markdown-exec: static-i18n builds the site once per language,
and markdown-exec runs code in the mkdocs process while each page renders, so
every example would run twice per build, share one interpreter's global state
(torch threads, seeds, multiprocessing), and run again on every prose-only
rebuild. Here each snippet runs once, in its own process group, with a timeout,
cached on disk by the hash of its source (and of the local modules it imports)
and of the machine it ran on. ``make bench`` measures it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import get_plugin_logger
from mkdocs.structure.files import File

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import records  # noqa: E402  (tools/records.py)
import snippets  # noqa: E402  (tools/snippets.py)
from snippets import ROOT, SNIPPETS, Result, discover, options, relative  # noqa: E402

log = get_plugin_logger("snippets")
FORMAT = 2  # bump when the cached result's layout changes

OUTPUT_LINE = "<!-- output: "
PROVENANCE_LINE = "<!-- snippet-provenance -->"
LABELS = {
    "en": {"output": "Output", "ran": "Ran in this build on", "no_output": "(no output)",
           "build": "This build", "recorded": "Recorded on", "failed": "Failed: exit code",
           "snippet": "Snippet", "current": "✓", "stale": "stale", "missing": "not recorded",
           "changed": "changed since", "driver": "driver", "colon": ": "},
    "zh": {"output": "输出", "ran": "本次构建实际运行于", "no_output": "（无输出）",
           "build": "本次构建", "recorded": "记录于", "failed": "运行失败：退出码",
           "snippet": "示例", "current": "✓", "stale": "已过期", "missing": "未记录",
           "changed": "此后改动的文件", "driver": "驱动", "colon": "："},
}


def cache_dir() -> Path:
    return Path(os.environ.get("SNIPPET_CACHE_DIR", ROOT / ".cache" / "snippets"))


def cache_key(path: Path) -> str:
    """The machine and the sources' hashes: the same hashes a hardware record keeps."""
    key = [FORMAT, snippets.machine(), snippets.source_hashes(path)]
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def run(path: Path, threads: int | None = None) -> Result:
    """The snippet's result: from the cache when its key is known, else a fresh run.

    ``threads`` caps torch's intra-op threads (OMP_NUM_THREADS) unless the caller's
    environment already sets them.
    """
    entry = cache_dir() / cache_key(path)
    stored = entry / "result.json"
    if stored.is_file():
        return Result(**{**json.loads(stored.read_text(encoding="utf-8")), "cached": True})
    env = {"OMP_NUM_THREADS": str(threads)} if threads and "OMP_NUM_THREADS" not in os.environ else {}
    with tempfile.TemporaryDirectory() as tmp:
        result = snippets.execute(path, snippets.output_dir(Path(tmp) / "generated", path), env)
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
_records: list[records.Record] = []


def on_config(config):
    """Read the hardware records once per build; a malformed one stops the build."""
    try:
        _records[:] = records.load()
    except records.RecordError as error:
        raise PluginError(f"records/{error}") from None
    return config


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


def text_block(text: str, title: str) -> str:
    fence = "````" if "```" in text else "```"
    return f'{fence}text title="{title}"\n{text}\n{fence}'


def record_label(rec: records.Record) -> str:
    return f"{rec.machine['device']} · {rec.recorded}"


def record_provenance(rec: records.Record, labels: dict) -> str:
    m = rec.machine
    return (f"{labels['recorded']} {m['device']} · torch {m['torch']} · CUDA {m['cuda'] or '—'} · "
            f"{labels['driver']} {m['driver'] or '—'} · {rec.recorded}")


def build_provenance(result: Result, labels: dict) -> str:
    env = result.env
    return f"{labels['ran']} {env['device']} · torch {env['torch']} · Python {env['python']} · {result.ran_on}"


def record_tab(rec: records.Record, path: str, labels: dict) -> str:
    """A current record entry as tab content: its output, or its failure."""
    entry = rec.snippets[path]
    if entry["returncode"] == 0:
        body = text_block(entry["stdout"].rstrip() or labels["no_output"], f"{labels['output']} · {path}")
    else:
        body = (f"**{labels['failed']} {entry['returncode']}**\n\n"
                + text_block(entry["stderr_tail"].rstrip() or "(empty)", f"stderr · {path}"))
    return f"{body}\n\n{record_provenance(rec, labels)}\n{{: .snippet-provenance }}"


def output_block(result: Result, labels: dict) -> str:
    """This build's output first; then one tab per record whose entry is current or failed."""
    ours = (text_block(result.stdout.rstrip() or labels["no_output"], f"{labels['output']} · {result.path}")
            + f"\n\n{build_provenance(result, labels)}\n{{: .snippet-provenance }}")
    shown = [r for r in _records if r.status(result.path)[0] in ("current", "failed")]
    if not shown:
        return ours + "\n"
    tabs = [(labels["build"], ours)] + [(record_label(r), record_tab(r, result.path, labels)) for r in shown]
    return "\n".join(f'=== "{label}"\n\n' + indent(body) + "\n" for label, body in tabs)


def indent(text: str) -> str:
    return "\n".join(("    " + line) if line else "" for line in text.split("\n"))


def matrix_cell(rec: records.Record, path: str, labels: dict) -> str:
    state, changed = rec.status(path)
    if state == "stale":
        files = ", ".join(f"`{f}`" for f in changed)
        return f"{labels['stale']} ({rec.recorded}; {labels['changed']}{labels['colon']}{files})"
    if state == "failed":
        return f"✗ ({rec.snippets[path]['returncode']})"
    return labels["current"] if state == "current" else labels["missing"]


def provenance_table(labels: dict) -> str:
    """Rows are snippets; columns are this build and each record."""
    head = [labels["snippet"], labels["build"]] + [record_label(r) for r in _records]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(_results.values(), key=lambda r: r.path):
        cells = [f"`{r.path}`", f"✓ {r.seconds:.1f} s"] + [matrix_cell(rec, r.path, labels) for rec in _records]
        rows.append("| " + " | ".join(cells) + " |")
    env = next(iter(_results.values())).env
    build = f"{labels['build']}{labels['colon']}{env['device']} · torch {env['torch']} · Python {env['python']}"
    lines = [f"- {build}"] + [f"- {record_provenance(rec, labels)} (`records/{rec.name}.json`)" for rec in _records]
    return "\n".join(lines) + "\n\n" + "\n".join(rows)


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
    server.watch(str(records.RECORDS))
    return server
