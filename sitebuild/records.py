"""Hardware records: every snippet run on one machine, kept as ``records/<machine>.json``.

    python3 -m sitebuild.records   # from the repository root: needs only Python and
                                   # the snippets' own imports (no mkdocs, no venv)
    make record                    # the same, with the project's .venv
    python3 -m sitebuild.records --out DIR --budget 480
                                   # a lent machine: the record and failures.txt in DIR,
                                   # and only what fits in 480 s (what does not is left out)
    python3 -m sitebuild.records add FILE...
                                   # records made elsewhere, merged by machine and day

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

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from sitebuild import snippets

RECORDS = snippets.ROOT / "records"
FIGURE_LIMIT = 200_000  # bytes; larger figures are left out
KILLED = -9  # the return code recorded for a snippet killed at its timeout
MIN_SLOT = 15  # seconds: under a budget, a snippet is not started with less time than this

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


def contents(file: Path) -> dict:
    """A record file's data, checked against the contract."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RecordError(f"{file.name}: not valid JSON ({error})") from None
    found = problems(data)
    if found:
        raise RecordError(f"{file.name}: " + "; ".join(found))
    return data


def read(file: Path) -> Record:
    """One record file, checked against the contract and its own name."""
    data = contents(file)
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


def record(folder: Path = RECORDS, budget: float | None = None) -> tuple[Path, list[str]]:
    """Run every snippet here and write ``<folder>/<machine>.json``; return it and what was left out.

    With ``budget`` (seconds for all snippets together, as on a lent machine), a snippet
    runs only while time is left, its timeout cut to what is left. One that never ran,
    or was cut short, is left out of the record, so the pages show it as not recorded
    rather than failed, and is named in the list returned.
    """
    machine = snippets.machine()
    day = date.today().isoformat()
    name = slug(machine["device"], day)
    shutil.rmtree(folder / name, ignore_errors=True)
    deadline = time.monotonic() + budget if budget else None
    results, left_out = {}, []
    for path in snippets.discover():
        own = snippets.options(path)[0]
        slot = own if deadline is None else min(own, int(deadline - time.monotonic()))
        if slot < MIN_SLOT:
            left_out.append(f"{snippets.relative(path)}: not run, the budget of {budget:.0f} s was spent")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            outdir = snippets.output_dir(Path(tmp), path)
            result = snippets.execute(path, outdir, timeout=slot)
            if result.returncode is None and slot < own:
                left_out.append(f"{result.path}: cut at {slot} s by the budget (its own timeout: {own} s)")
                continue
            results[result.path] = entry(result, path, outdir)
            for figure in results[result.path]["figures"]:
                target = snippets.output_dir(folder / name, path)
                shutil.copy2(outdir / figure, target / figure)
        state = "ok" if result.ok else f"FAILED ({result.why()})"
        print(f"{result.seconds:7.1f} s  {result.path}  {state}", flush=True)
    file = folder / f"{name}.json"
    write(file, {"machine": machine, "recorded": day, "snippets": results})
    return file, left_out


def write(file: Path, data: dict):
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def merged(old: dict | None, new: dict, source: str) -> dict:
    """``new``'s entries added to ``old``'s: the same machine and day, no entry of ``old`` lost.

    A snippet in both keeps ``new``'s entry, the later run. Two runs that differ in any
    machine field (another torch, driver or Python on the same device and day) are two
    machines, and one file cannot hold both: that is an error, never a silent choice.
    """
    if old is None:
        return new
    differ = [key for key in MACHINE if old["machine"].get(key) != new["machine"].get(key)]
    if differ:
        raise RecordError(f"{source}: its machine differs from the record already kept for "
                          f"{slug(new['machine']['device'], new['recorded'])} in {', '.join(differ)}; "
                          "record that machine on another day, or remove the older file first")
    return {**old, "snippets": {**old["snippets"], **new["snippets"]}}


def add(file: Path, folder: Path = RECORDS) -> Path:
    """Add a record made elsewhere (a notebook, a lent machine) to ``folder``, merging by machine and day.

    Its figures, if any, lie beside it in a folder of the file's own name.
    """
    data = contents(file)
    name = slug(data["machine"]["device"], data["recorded"])
    target = folder / f"{name}.json"
    old = json.loads(target.read_text(encoding="utf-8")) if target.is_file() else None
    combined = merged(old, data, file.name)
    if file.with_suffix("").is_dir() and file.with_suffix("").resolve() != (folder / name).resolve():
        shutil.copytree(file.with_suffix(""), folder / name, dirs_exist_ok=True)
    write(target, combined)
    read(target)
    return target


def failures(rec: Record) -> str:
    """Each failed snippet with the end of its stderr."""
    return "\n\n".join(f"{path} exited with code {e['returncode']}\n{e['stderr_tail']}"
                        for path, e in rec.snippets.items() if e["returncode"] != 0)


def summary(rec: Record) -> str:
    passed = sum(e["returncode"] == 0 for e in rec.snippets.values())
    m = rec.machine
    return (f"{rec.name}: {m['device']} · torch {m['torch']} · CUDA {m['cuda'] or 'none'} · "
            f"driver {m['driver'] or 'none'} · {rec.recorded} · {passed} passed, "
            f"{len(rec.snippets) - passed} failed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m sitebuild.records", description=(
        "Run every snippet and write records/<device>-<date>.json; or, with `add FILE...`, "
        "add records made elsewhere, merging those of the same machine and day."))
    parser.add_argument("--out", type=Path, help="where to write the record and failures.txt (default: records/)")
    parser.add_argument("--budget", type=float, help="seconds for all snippets together; what does not fit is left out")
    args, rest = parser.parse_known_args(argv)
    if rest[:1] == ["add"] and len(rest) > 1:
        for file in rest[1:]:
            print(f"added to {add(Path(file))}")
        return 0
    if rest:
        parser.error(f"unknown arguments: {' '.join(rest)} (to add records: add FILE...)")
    written, left_out = record(args.out or RECORDS, args.budget)
    rec = read(written)
    if args.out:  # a lent machine's $OUT: what failed, for the person who reads it back
        report = "\n\n".join(filter(None, [failures(rec), "\n".join(left_out)]))
        (args.out / "failures.txt").write_text(report + "\n" if report else "", encoding="utf-8")
    print(f"wrote {written}\n{summary(rec)}" + (f"\nleft out:\n" + "\n".join(left_out) if left_out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
