"""Hardware records: every snippet run on one machine, kept as ``records/<machine>.json``.

    python3 -m sitebuild.records   # from the repository root: needs only Python and
                                   # the snippets' own imports (no mkdocs, no venv)
    make record                    # the same, with the project's .venv
    python3 -m sitebuild.records --out DIR --budget 480
                                   # a lent machine: the record and failures.txt in DIR,
                                   # and only what fits in 480 s (what does not is left out)
    python3 -m sitebuild.records --dry-run [--device "NVIDIA H200"]
                                   # the order a run would take, and why; nothing runs
    python3 -m sitebuild.records add FILE...
                                   # records made elsewhere, merged by machine and day

Each snippet runs as a reader runs it (``python snippets/<x>/<y>.py``, its timeout,
every core), one after the other. A failing snippet is kept with its return code and
the end of its stderr, never dropped. ``<machine>`` is a slug of the device and the
date, so a second run on the same machine and day replaces the first. Figures under
200 KB (SVG) are kept in ``records/<machine>/<section>/<page>/``.

The contract, checked by ``load()`` (the build and the tests use it)::

    {"machine": {"device", "torch", "python", "cuda", "driver", "gpus", "cpu", "os",
                 "packages": {"numpy": "2.4.6", ...}},     # packages: from 2026-12-06 on
     "recorded": "YYYY-MM-DD",
     "left_out": ["snippets/y.py", ...],                 # optional: what a time budget cut
     "snippets": {"snippets/x.py": {"returncode": 0, "stdout": "...", "stderr_tail": "...",
                  "seconds": 1.2, "sources": {"snippets/x.py": "<sha256>", ...},
                  "figures": ["plot.svg"],
                  "sections": [["create", 2], ["dtype", 1], ...]}}}  # optional (2026-12-06 on)

``sections`` says which named section of the snippet was running as each line of stdout was
printed (sitebuild/attribution.py), so that a record's tab stands under the right excerpt
(sitebuild/excerpts.py); a record without it shows its output in the page's whole output only.

An entry is *current* while every file in its ``sources`` still has that hash, and
*stale* once one changed or is gone. A page shows a stale entry only where its device has
no current or failed one, labelled as the run of an earlier version, with the files changed
since, and in its whole output only, never under an excerpt (sitebuild/output_blocks.py).

A lent machine's minutes go where they show most (``plan``, ``--dry-run``), and ``add``
merges a record into the one of the same machine and day keeping the better run of each
snippet (``best``).

**A record is untrusted input**: it arrives by pull request, from a reader's Colab run or
from a runner, and a diff of a few hundred lines of output is easy to approve unread. So
the contract also bounds what a record may hold: machine fields are short printable text
without ``<``, ``>``, a backtick or ``|``; ``stdout`` and ``stderr_tail`` are printable text
(line breaks, tabs and the ESC of terminal colours allowed) of at most ``TEXT_LIMIT`` bytes;
snippet and source paths are plain relative ``.py`` paths (``snippets/x/y.py``); figure names are plain
``*.svg`` file names. Whatever passes still reaches a page only as escaped text
(sitebuild/output_blocks.py). Record figures are kept in ``records/`` but neither shown
nor served today: every figure on the site comes from the build's own run.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from sitebuild import excerpts, snippets

RECORDS = snippets.ROOT / "records"
FIGURE_LIMIT = 200_000  # bytes; larger figures are left out
KILLED = -9  # the return code recorded for a snippet killed at its timeout
MIN_SLOT = 15  # seconds: under a budget, a snippet is not started with less time than this

OPTIONAL = (str, type(None))
MACHINE = {"device": str, "torch": str, "python": str, "cuda": OPTIONAL, "driver": OPTIONAL,
           "gpus": list, "cpu": str, "os": str}
ENTRY = {"returncode": int, "stdout": str, "stderr_tail": str, "seconds": (int, float),
         "sources": dict, "figures": list}
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
SHA256 = re.compile(r"[0-9a-f]{64}")
FIELD_LIMIT = 200  # characters of a machine field; the longest today, an OS string, has 49
TEXT_LIMIT = 64_000  # bytes of a stdout or stderr_tail; the largest today has 3 KB
FILE_LIMIT = 4_000_000  # bytes of a record file, read only below this size
MARKUP = set("<>`|")  # never in a machine field: it becomes tab labels and table cells
TEXT_CONTROLS = set("\n\t\x1b")  # in outputs: line breaks, tabs, terminal colours (Numba's warnings)
PLAIN_PATH = re.compile(r"(?:[A-Za-z0-9_-]+/)*[A-Za-z0-9_-]+\.py")  # snippets/x/y.py: no "..", no "/" first
FIGURE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*\.svg")
# The order of a run (``plan``): what one device's records hold of a snippet, most wanted first.
PLAN = {"never": "never recorded on {device}", "stale": "stale on {device}",
        "failed": "failed on {device}", "current": "current on {device}"}
CUDA = re.compile(r"\bcuda\b")
MEASURES = re.compile(r"perf_counter|benchmark\.Timer|\bTimer\(|elapsed_time|torch\.profiler|"
                      r"memory_allocated|memory_reserved|max_memory")


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
    left_out: list = field(default_factory=list)  # snippets a time budget kept from running

    def status(self, path: str, root: Path | None = None) -> tuple[str, list[str]]:
        """('current' | 'failed' | 'stale' | 'missing' | 'cut', files changed since the run);
        'cut': the record's time budget ran out before the snippet ran, or while it ran."""
        entry = self.snippets.get(path)
        if entry is None:
            return ("cut" if path in self.left_out else "missing"), []
        if found := changed(entry, root):
            return "stale", found
        return ("current" if entry["returncode"] == 0 else "failed"), []


def changed(entry: dict, root: Path | None = None) -> list[str]:
    """The files of an entry's ``sources`` that changed or are gone since it ran (under ``root``,
    by default the repository's, read when called)."""
    root = root or snippets.ROOT
    return [f for f, digest in entry["sources"].items()
            if not (root / f).is_file() or snippets.sha256(root / f) != digest]


def problems(data) -> list[str]:
    """Every way ``data`` breaks the contract, as readable phrases."""
    if not isinstance(data, dict):
        return ["not a JSON object"]
    found = [f"missing key '{key}'" for key in ("machine", "recorded", "snippets") if key not in data]
    if found:
        return found
    found += typed("machine", data["machine"], MACHINE) or machine_problems(data["machine"])
    if not (isinstance(data["recorded"], str) and is_day(data["recorded"])):
        found.append("'recorded' is not a YYYY-MM-DD date")
    if not isinstance(data["snippets"], dict):
        return found + ["'snippets' is not an object"]
    left_out = data.get("left_out", [])
    if not (isinstance(left_out, list) and all(isinstance(p, str) and PLAIN_PATH.fullmatch(p) for p in left_out)):
        found.append("'left_out' is not a list of plain relative paths to .py files")
    for path, entry in data["snippets"].items():
        if not PLAIN_PATH.fullmatch(path):
            found.append(f"snippet {shown(path)}: not a plain relative path to a .py file")
            continue
        found += typed(path, entry, ENTRY) or entry_problems(path, entry)
    return found


def is_day(text: str) -> bool:
    try:
        return bool(DAY.fullmatch(text)) and bool(date.fromisoformat(text))
    except ValueError:
        return False


def shown(text: str) -> str:
    """A value quoted in an error message: escaped and cut, since it may be anything."""
    return repr(text[:60] + ("…" if len(text) > 60 else ""))


def machine_problems(machine: dict) -> list[str]:
    """Machine fields become tab labels, provenance lines and table cells: short plain text."""
    values = [(key, machine[key]) for key in MACHINE if isinstance(machine[key], str)]
    values += [("gpus", gpu) for gpu in machine["gpus"]]
    packages = machine.get("packages", {})
    if not isinstance(packages, dict):
        return ["machine: 'packages' is not an object"]
    values += [("packages", text) for item in packages.items() for text in item]
    found = [f"machine: '{key}' holds a {type(text).__name__}, not text" for key, text in values
             if not isinstance(text, str)]
    values = [(key, text) for key, text in values if isinstance(text, str)]
    for key, value in values:
        if len(value) > FIELD_LIMIT:
            found.append(f"machine: '{key}' is longer than {FIELD_LIMIT} characters")
        elif not value.isprintable():  # control, format (bidi overrides, zero width) and separator characters
            found.append(f"machine: '{key}' holds a control or formatting character: {shown(value)}")
        elif MARKUP & set(value):
            found.append(f"machine: '{key}' holds one of < > ` |: {shown(value)}")
    return found


def entry_problems(path: str, entry: dict) -> list[str]:
    found = []
    for key in ("stdout", "stderr_tail"):
        if len(entry[key].encode("utf-8", "surrogatepass")) > TEXT_LIMIT:
            found.append(f"{path}: '{key}' is larger than {TEXT_LIMIT // 1000} KB")
        elif bad := sorted({c for c in entry[key] if not c.isprintable() and c not in TEXT_CONTROLS}):
            found.append(f"{path}: '{key}' holds a control or formatting character ({', '.join(map(ascii, bad[:5]))})")
    for source, digest in entry["sources"].items():
        if not PLAIN_PATH.fullmatch(source):
            found.append(f"{path}: source {shown(source)} is not a plain relative path to a .py file")
        elif not (isinstance(digest, str) and SHA256.fullmatch(digest)):
            found.append(f"{path}: the hash of {source} is not a sha256")
    if entry.get("sections", []) != [] and not excerpts.attributed(entry["stdout"], entry["sections"]):
        found.append(f"{path}: 'sections' is not a list of [section, lines] whose lines add up to stdout's")
    for figure in entry["figures"]:
        if not (isinstance(figure, str) and FIGURE_NAME.fullmatch(figure)):
            found.append(f"{path}: figure {shown(str(figure))} is not a plain file name ending in .svg")
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
    if file.stat().st_size > FILE_LIMIT:
        raise RecordError(f"{file.name}: larger than {FILE_LIMIT // 1_000_000} MB; a record of every snippet "
                          f"takes well under 100 KB")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
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
    return Record(name, data["machine"], data["recorded"], data["snippets"], data.get("left_out", []))


def load(folder: Path = RECORDS) -> list[Record]:
    """Every committed record, newest first."""
    found = [read(f) for f in sorted(folder.glob("*.json"))]
    return sorted(found, key=lambda r: (r.recorded, r.name), reverse=True)


def measures_gpu(path: Path) -> bool:
    """Whether the snippet's own code uses CUDA and a clock, the profiler or a memory counter:
    then only a GPU prints the numbers its page is about, and a CPU build shows none of them."""
    text = path.read_text(encoding="utf-8")
    return bool(CUDA.search(text) and MEASURES.search(text))


def standing(path: str, recs: list[Record]) -> str:
    """What ``recs`` (one device's records) hold of ``path`` at best: 'current', 'failed',
    'stale', or 'never' (no entry, or one its time budget cut)."""
    found = {rec.status(path)[0] for rec in recs}
    return next((state for state in reversed(PLAN) if state in found), "never")


def plan(device: str, recs: list[Record]) -> list[tuple[Path, str]]:
    """Every snippet in the order a run on ``device`` takes it, with the reason for its place.

    A lent GPU's minutes go first where its kind of GPU (the same ``device`` in any record)
    has shown nothing: never recorded, then stale, then failed (today's code, which will likely
    fail the same way), then current. Within each, the snippets that measure on the GPU
    (``measures_gpu``) come first; otherwise in path order."""
    mine = [rec for rec in recs if rec.machine["device"] == device]
    ranked = []
    for path in snippets.discover():
        state, gpu = standing(snippets.relative(path), mine), measures_gpu(path)
        reason = PLAN[state].format(device=device) + ("; measures on the GPU" if gpu else "")
        ranked.append(((list(PLAN).index(state), not gpu), path, reason))
    return [(path, reason) for _, path, reason in sorted(ranked, key=lambda r: r[0])]


def entry(result: snippets.Result, path: Path, figures: Path) -> dict:
    kept = [f for f in result.figures
            if f.endswith(".svg") and (figures / f).stat().st_size < FIGURE_LIMIT]
    tail = result.stderr_tail() + ("" if result.returncode is not None else
                                   f"\n[killed: {result.why()}]")
    return {"returncode": KILLED if result.returncode is None else result.returncode,
            "stdout": result.stdout, "stderr_tail": tail, "seconds": result.seconds,
            "sources": snippets.source_hashes(path), "figures": kept, "sections": result.sections}


def record(folder: Path = RECORDS, budget: float | None = None) -> tuple[Path, list[str]]:
    """Run every snippet here and write ``<folder>/<machine>.json``; return it and what was left out.

    The snippets run in ``plan``'s order, what this kind of machine has not shown first. With
    ``budget`` (seconds for all snippets together, as on a lent machine), a snippet runs only
    while time is left, its timeout cut to what is left. One that never ran, or was cut short,
    is left out of the record, so the pages show it as not recorded rather than failed, and is
    named in the list returned.
    """
    machine = snippets.machine()
    day = date.today().isoformat()
    name = slug(machine["device"], day)
    shutil.rmtree(folder / name, ignore_errors=True)
    deadline = time.monotonic() + budget if budget else None
    results, left_out, cut = {}, [], []
    for path, _ in plan(machine["device"], load()):
        own = snippets.options(path)[0]
        slot = own if deadline is None else min(own, int(deadline - time.monotonic()))
        if slot < MIN_SLOT:
            left_out.append(f"{snippets.relative(path)}: not run, the budget of {budget:.0f} s was spent")
            cut.append(snippets.relative(path))
            continue
        with tempfile.TemporaryDirectory() as tmp:
            outdir = snippets.output_dir(Path(tmp), path)
            result = snippets.execute(path, outdir, timeout=slot)
            if result.returncode is None and slot < own:
                left_out.append(f"{result.path}: cut at {slot} s by the budget (its own timeout: {own} s)")
                cut.append(result.path)
                continue
            results[result.path] = entry(result, path, outdir)
            for figure in results[result.path]["figures"]:
                target = snippets.output_dir(folder / name, path)
                shutil.copy2(outdir / figure, target / figure)
        state = "ok" if result.ok else f"FAILED ({result.why()})"
        print(f"{result.seconds:7.1f} s  {result.path}  {state}", flush=True)
    file = folder / f"{name}.json"
    write(file, {"machine": machine, "recorded": day, "snippets": dict(sorted(results.items())),
                 "left_out": sorted(cut)})
    return file, left_out


def write(file: Path, data: dict):
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def merged(old: dict | None, new: dict, source: str) -> dict:
    """``new``'s entries added to ``old``'s: the same machine and day, no entry of ``old`` lost.

    A snippet in both keeps the better entry (``best``). Two runs that differ in any
    machine field (another torch, driver or Python on the same device and day) are two
    machines, and one file cannot hold both: that is an error, never a silent choice.
    """
    if old is None:
        return new
    keys = [*MACHINE] + ["packages"] * ("packages" in old["machine"] and "packages" in new["machine"])
    differ = [key for key in keys if old["machine"].get(key) != new["machine"].get(key)]
    if differ:
        raise RecordError(f"{source}: its machine differs from the record already kept for "
                          f"{slug(new['machine']['device'], new['recorded'])} in {', '.join(differ)}; "
                          "record that machine on another day, or remove the older file first")
    entries = {**old["snippets"],
               **{path: best(old["snippets"].get(path), e)[0] for path, e in new["snippets"].items()}}
    cut = sorted({*old.get("left_out", []), *new.get("left_out", [])} - set(entries))
    return {**old, "snippets": dict(sorted(entries.items())), "left_out": cut}


def best(old: dict | None, new: dict) -> tuple[dict, str]:
    """Of two runs of one snippet on one machine and day, the entry a record keeps, and why
    when it is ``old``: a run of today's code over a run of an earlier version, whatever either
    printed (a stale run says nothing of today's code); of two runs of the same code, a pass
    over a failure, which on a lent machine is more often the machine (its memory taken, a
    package missing) than the code, and stays in that run's failures.txt; otherwise the later
    run, ``new``."""
    if old is None:
        return new, ""
    if changed(new) and not changed(old):
        return old, "it ran today's code, this one an earlier version"
    if old["sources"] == new["sources"] and old["returncode"] == 0 != new["returncode"]:
        return old, f"it passed, this run of the same code failed (exit code {new['returncode']})"
    return new, ""


def add(file: Path, folder: Path = RECORDS) -> Path:
    """Add a record made elsewhere (a notebook, a lent machine) to ``folder``, merging by machine and day.

    Its figures, if any, lie beside it in a folder of the file's own name.
    """
    data = contents(file)
    name = slug(data["machine"]["device"], data["recorded"])
    target = folder / f"{name}.json"
    old = json.loads(target.read_text(encoding="utf-8")) if target.is_file() else None
    combined = merged(old, data, file.name)
    kept = old["snippets"] if old else {}
    for path, entry in data["snippets"].items():
        if why := best(kept.get(path), entry)[1]:
            print(f"{path}: kept the entry already in {target.name}: {why}")
    taken = {path: e for path, e in data["snippets"].items() if combined["snippets"][path] is e}
    if file.with_suffix("").resolve() != (folder / name).resolve():
        copy_figures(taken, file.with_suffix(""), folder / name)
    write(target, combined)
    read(target)
    return target


def copy_figures(entries: dict, source: Path, target: Path):
    """The figures the entries name (those the merge took), and nothing else of the folder beside
    it: no other file, no link (whose target could lie anywhere), nothing over ``FIGURE_LIMIT``."""
    for path, entry in entries.items():
        page = path.removeprefix("snippets/").removesuffix(".py")
        for figure in entry["figures"]:
            found = source / page / figure
            if found.is_file() and not found.is_symlink() and found.stat().st_size < FIGURE_LIMIT:
                (target / page).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(found, target / page / figure)


def fence(text: str) -> str:
    """A backtick fence that no line of ``text`` can close: longer than its longest run of
    backticks (CommonMark closes a fence on a run at least as long; SuperFences on one
    exactly as long). Tildes cannot close a backtick fence."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def fenced(text: str) -> str:
    """``text`` as a fenced block of Markdown (the gpu-record workflow's pull request body)."""
    return f"{fence(text)}\n{text}\n{fence(text)}"


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
    parser = argparse.ArgumentParser(prog="python3 -m sitebuild.records", usage=(
        "python3 -m sitebuild.records [--out DIR] [--budget SECONDS]\n"
        "       python3 -m sitebuild.records --dry-run [--device NAME]\n"
        "       python3 -m sitebuild.records add FILE [FILE ...]"), description=(
        "Run every snippet and write records/<device>-<date>.json, what this kind of machine has "
        "not recorded first (never, then stale, then failed, then current; those that measure on "
        "the GPU first within each); or, with `add FILE...`, add records made elsewhere (a "
        "notebook's, a lent machine's) to records/, merging those of the same machine and day: "
        "no entry already kept is lost, and a snippet in both keeps a run of today's code over "
        "an earlier version's, a pass over a failure of the same code, else the later run. A "
        "record that breaks the contract is refused, naming its file and field."))
    parser.add_argument("--out", type=Path, help="where to write the record and failures.txt (default: records/)")
    parser.add_argument("--budget", type=float, help="seconds for all snippets together; what does not fit is left out")
    parser.add_argument("--dry-run", action="store_true", help="print the order of the runs and why; run nothing")
    parser.add_argument("--device", help="with --dry-run: the order on this device (default: this machine's)")
    args, rest = parser.parse_known_args(argv)
    if args.dry_run:
        device = args.device or snippets.machine()["device"]
        for number, (path, reason) in enumerate(plan(device, load()), 1):
            print(f"{number:3}. {snippets.relative(path):45} {reason}")
        return 0
    if rest[:1] == ["add"] and len(rest) > 1:
        for file in rest[1:]:
            try:
                print(f"added to {add(Path(file))}")
            except RecordError as error:
                parser.exit(2, f"refused: {error}\n")
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
