"""Hardware records: every snippet run on one machine, kept as ``records/<machine>.json``.

    python3 -m sitebuild.records   # from the repository root: needs only Python and
                                   # the snippets' own imports (no mkdocs, no venv)
    make record                    # the same, with the project's .venv

Each snippet runs as a reader runs it (``python snippets/<x>/<y>.py``, its timeout,
every core), one after the other. A failing snippet is kept with its return code and
the end of its stderr, never dropped. ``<machine>`` is a slug of the device and the
date, so a second run on the same machine and day replaces the first. Figures under
200 KB (SVG) are kept in ``records/<machine>/<section>/<page>/``.

The contract, checked by ``load()`` (the build and the tests use it)::

    {"machine": {"device", "torch", "python", "cuda", "driver", "gpus", "cpu", "os"},
     "recorded": "YYYY-MM-DD",
     "snippets": {"snippets/x.py": {"returncode": 0, "stdout": "...", "stderr_tail": "...",
                  "seconds": 1.2, "sources": {"snippets/x.py": "<sha256>", ...},
                  "figures": ["plot.svg"]}}}

An entry is *current* while every file in its ``sources`` still has that hash, and
*stale* once one changed or is gone; stale entries are listed, never shown as output.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from sitebuild import snippets

RECORDS = snippets.ROOT / "records"
FIGURE_LIMIT = 200_000  # bytes; larger figures are left out
KILLED = -9  # the return code recorded for a snippet killed at its timeout

OPTIONAL = (str, type(None))
MACHINE = {"device": str, "torch": str, "python": str, "cuda": OPTIONAL, "driver": OPTIONAL,
           "gpus": list, "cpu": str, "os": str}
ENTRY = {"returncode": int, "stdout": str, "stderr_tail": str, "seconds": (int, float),
         "sources": dict, "figures": list}
DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


class RecordError(ValueError):
    """A record that breaks the contract; the message starts with its file name."""


def slug(device: str, day: str) -> str:
    """'NVIDIA H200', '2026-12-03' -> 'nvidia-h200-2026-12-03'."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") + "-" + day


@dataclass
class Record:
    name: str
    machine: dict
    recorded: str
    snippets: dict

    def status(self, path: str, root: Path = snippets.ROOT) -> tuple[str, list[str]]:
        """('current' | 'failed' | 'stale' | 'missing', files changed since the run)."""
        entry = self.snippets.get(path)
        if entry is None:
            return "missing", []
        changed = [f for f, digest in entry["sources"].items()
                   if not (root / f).is_file() or snippets.sha256(root / f) != digest]
        if changed:
            return "stale", changed
        return ("current" if entry["returncode"] == 0 else "failed"), []


def problems(data) -> list[str]:
    """Every way ``data`` breaks the contract, as readable phrases."""
    if not isinstance(data, dict):
        return ["not a JSON object"]
    found = [f"missing key '{key}'" for key in ("machine", "recorded", "snippets") if key not in data]
    if found:
        return found
    found += typed("machine", data["machine"], MACHINE)
    if not (isinstance(data["recorded"], str) and DAY.match(data["recorded"])):
        found.append("'recorded' is not a YYYY-MM-DD date")
    if not isinstance(data["snippets"], dict):
        return found + ["'snippets' is not an object"]
    for path, entry in data["snippets"].items():
        found += typed(path, entry, ENTRY)
        sources = entry.get("sources") if isinstance(entry, dict) else None
        if isinstance(sources, dict) and not all(isinstance(d, str) and SHA256.match(d)
                                                 for d in sources.values()):
            found.append(f"{path}: a source hash is not a sha256")
    return found


def typed(where: str, value, fields: dict) -> list[str]:
    if not isinstance(value, dict):
        return [f"'{where}' is not an object"]
    found = [f"{where}: missing key '{key}'" for key in fields if key not in value]
    # bool is an int in Python, but a returncode of true is not a return code
    found += [f"{where}: '{key}' has the wrong type ({type(value[key]).__name__})"
              for key, kind in fields.items()
              if key in value and (not isinstance(value[key], kind) or isinstance(value[key], bool))]
    return found


def read(file: Path) -> Record:
    """One record file, checked against the contract and its own name."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RecordError(f"{file.name}: not valid JSON ({error})") from None
    found = problems(data)
    if found:
        raise RecordError(f"{file.name}: " + "; ".join(found))
    name = slug(data["machine"]["device"], data["recorded"])
    if file.stem != name:  # one file per machine and day: a later run replaces it
        raise RecordError(f"{file.name}: should be named {name}.json (device and date)")
    return Record(name, data["machine"], data["recorded"], data["snippets"])


def load(folder: Path = RECORDS) -> list[Record]:
    """Every committed record, newest first."""
    found = [read(f) for f in sorted(folder.glob("*.json"))]
    return sorted(found, key=lambda r: (r.recorded, r.name), reverse=True)


def entry(result: snippets.Result, path: Path, figures: Path) -> dict:
    kept = [f for f in result.figures
            if f.endswith(".svg") and (figures / f).stat().st_size < FIGURE_LIMIT]
    tail = result.stderr_tail() + ("" if result.returncode is not None else
                                   f"\n[killed: {result.why()}]")
    return {"returncode": KILLED if result.returncode is None else result.returncode,
            "stdout": result.stdout, "stderr_tail": tail, "seconds": result.seconds,
            "sources": snippets.source_hashes(path), "figures": kept}


def record(folder: Path = RECORDS) -> Path:
    """Run every snippet here and write ``<folder>/<machine>.json``."""
    machine = snippets.machine()
    day = date.today().isoformat()
    name = slug(machine["device"], day)
    shutil.rmtree(folder / name, ignore_errors=True)
    results = {}
    for path in snippets.discover():
        with tempfile.TemporaryDirectory() as tmp:
            outdir = snippets.output_dir(Path(tmp), path)
            result = snippets.execute(path, outdir)
            results[result.path] = entry(result, path, outdir)
            for figure in results[result.path]["figures"]:
                target = snippets.output_dir(folder / name, path)
                shutil.copy2(outdir / figure, target / figure)
        state = "ok" if result.ok else f"FAILED ({result.why()})"
        print(f"{result.seconds:7.1f} s  {result.path}  {state}", flush=True)
    file = folder / f"{name}.json"
    folder.mkdir(exist_ok=True)
    file.write_text(json.dumps({"machine": machine, "recorded": day, "snippets": results},
                               indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return file


def summary(rec: Record) -> str:
    passed = sum(e["returncode"] == 0 for e in rec.snippets.values())
    m = rec.machine
    return (f"{rec.name}: {m['device']} · torch {m['torch']} · CUDA {m['cuda'] or 'none'} · "
            f"driver {m['driver'] or 'none'} · {rec.recorded} · {passed} passed, "
            f"{len(rec.snippets) - passed} failed")


if __name__ == "__main__":
    written = record()
    print(f"wrote {written.relative_to(snippets.ROOT)}\n{summary(read(written))}")
