"""One notebook per page with snippets, per language, so that a reader can run the page on
Colab's GPU (or any Jupyter) and send the run back as a hardware record.

    python -m sitebuild.page_notebooks   # make notebooks: rewrite notebooks/<lang>/<section>/<page>.ipynb

The notebooks are committed under ``notebooks/``: Colab opens a notebook straight from a
repository's branch (``colab.research.google.com/github/<owner>/<repo>/blob/main/<path>``),
so a committed file needs no publishing step and is the same file a reviewer reads in the
pull request. They are generated, never edited: tests/test_page_notebooks.py fails when one
differs from what this module writes now.

A notebook holds, in the page's language:

1. the runtime: torch, device, CUDA, driver; a warning when torch is older than
   ``TORCH_FLOOR``; the pinned versions of numpy, numba and matplotlib installed only where
   they are missing (torch is never installed or replaced);
2. for each output line of the page, in order, the snippet as one whole file (and the local
   modules it imports), written with ``%%writefile``, then run as ``python <file>`` with its
   timeout, the way sitebuild.records runs it;
3. the record: this run's entries for this page's snippets in the contract of records/
   (sitebuild/records.py), written to ``<device>-<date>.json`` and offered for download.
   A page's record holds only its own snippets; the site shows the others as not recorded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from sitebuild import snippets
from sitebuild.language import DEFAULT, LANGUAGES

ROOT = snippets.ROOT
DOCS = ROOT / "docs"
OUT = ROOT / "notebooks"
TORCH_FLOOR = "2.11"  # the oldest torch the site supports: what the lent H200 had (README)
OUTPUT = re.compile(r"^<!-- output: (snippets/\S+\.py) -->$", re.M)
MESSAGES = ("old_torch", "no_torch", "installing", "wrote")  # the words the code cells print
EXTRAS = ("numpy", "numba", "matplotlib")  # what snippets import besides torch, pinned in requirements.txt
TEXT = {
    "en": {
        "intro": ("This notebook runs the code of the page **{title}** (`{page}`): each script whole, "
                  "as the site's build runs it. It was generated from the page and its snippets by "
                  "`make notebooks`; do not edit it by hand."),
        "runtime": "## The runtime\n\nWhat this notebook runs on. Missing packages are installed at the versions the site pins; torch is never touched.",
        "snippet": "## `{path}`\n\nThe whole script, written to a file and run as `python {path}`.",
        "record": ("## Send this run back\n\nThe cell below writes this run as a hardware record "
                   "(records/ in the repository). To add it to the site, open a pull request that adds "
                   "the file to `records/` (or run `python3 -m sitebuild.records add FILE` in a clone, "
                   "which merges it with a record of the same machine and day)."),
        "old_torch": "warning: torch {found} is older than {floor}, the oldest version this site supports; some cells may fail",
        "no_torch": "torch is not installed here; install a build for this machine from pytorch.org first",
        "installing": "installing what is missing",
        "wrote": "wrote {file}: {n} snippets, {failed} failed. Add it to the site as records/{file}",
    },
    "zh": {
        "intro": ("本 notebook 运行页面 **{title}**（`{page}`）的代码：每个脚本完整运行，与本站构建时的运行方式相同。"
                  "它由 `make notebooks` 根据页面和示例生成，请勿手工修改。"),
        "runtime": "## 运行环境\n\n本 notebook 在什么环境中运行。缺少的包按本站锁定的版本安装；torch 一律不动。",
        "snippet": "## `{path}`\n\n完整的脚本：先写入文件，再以 `python {path}` 运行。",
        "record": ("## 把这次运行交回本站\n\n下面的单元把这次运行写成一份运行记录（仓库中的 records/）。"
                   "要把它加入本站，请提交一个拉取请求（pull request），把该文件加到 `records/` 下"
                   "（也可以在克隆的仓库中运行 `python3 -m sitebuild.records add FILE`，"
                   "它会与同一机器、同一天的记录合并）。"),
        "old_torch": "警告：torch {found} 比本站支持的最低版本 {floor} 旧，部分单元可能失败",
        "no_torch": "这里没有安装 torch；请先从 pytorch.org 安装适合本机的版本",
        "installing": "正在安装缺少的包",
        "wrote": "已写入 {file}：{n} 个示例，{failed} 个失败。请把它作为 records/{file} 加入本站",
    },
}

RUNTIME = '''\
import importlib.util, json, re, subprocess, sys
TEXT = {text}
if importlib.util.find_spec("torch") is None:
    raise SystemExit(TEXT["no_torch"])
missing = [f"{{name}}=={{version}}" for name, version in {pins}.items() if importlib.util.find_spec(name) is None]
if missing:
    print(TEXT["installing"], *missing)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *missing], check=True)
PROBE = {probe}
MACHINE = json.loads(subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout)
if tuple(map(int, re.findall(r"\\d+", MACHINE["torch"])[:2])) < {floor}:
    print(TEXT["old_torch"].format(found=MACHINE["torch"], floor="{floor_text}"))
print(json.dumps(MACHINE, indent=1))
'''

RUN = '''\
import hashlib, os, subprocess, sys, time
from pathlib import Path
RESULTS = {{}}
for folder in {folders}:
    os.makedirs(folder, exist_ok=True)


def run(path, sources, timeout):
    """Run one snippet as the site's recorder does, show its output, keep its entry."""
    env = dict(os.environ, SNIPPET_OUTPUT_DIR=".", MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=timeout, env=env)
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as error:
        code, stdout, stderr = -9, error.stdout or "", f"[killed: timed out after {{timeout}} s]"
    print(stdout, end="")
    print(stderr, end="", file=sys.stderr)
    RESULTS[path] = {{"returncode": code, "stdout": stdout,
                     "stderr_tail": "\\n".join(stderr.rstrip().splitlines()[-{tail}:]),
                     "seconds": round(time.perf_counter() - start, 2), "figures": [],
                     "sources": {{f: hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in sources}}}}
'''

RECORD = '''\
import datetime, json, re
day = datetime.date.today().isoformat()
file = re.sub(r"[^a-z0-9]+", "-", MACHINE["device"].lower()).strip("-") + "-" + day + ".json"
with open(file, "w", encoding="utf-8") as out:
    json.dump({"machine": MACHINE, "recorded": day, "snippets": RESULTS}, out, indent=1, ensure_ascii=False)
    out.write("\\n")
failed = sum(entry["returncode"] != 0 for entry in RESULTS.values())
print(TEXT["wrote"].format(file=file, n=len(RESULTS), failed=failed))
try:
    from google.colab import files
    files.download(file)
except ImportError:  # not on Colab: the file lies beside the notebook
    pass
'''


def pinned() -> dict[str, str]:
    """The versions requirements.txt pins for the packages a notebook may install."""
    text = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", text, re.M))
    return {name: pins[name] for name in EXTRAS}


def pages() -> list[Path]:
    """Every page, in either language, with at least one output line."""
    return sorted(p for p in DOCS.rglob("*.md") if OUTPUT.search(p.read_text(encoding="utf-8")))


def page_language(page: Path) -> str:
    suffix = page.suffixes[-2:-1]
    return suffix[0][1:] if suffix and suffix[0][1:] in LANGUAGES else DEFAULT


def target(page: Path) -> Path:
    """notebooks/<lang>/<section>/<page>.ipynb."""
    lang = page_language(page)
    relative = page.relative_to(DOCS).as_posix().removesuffix(".md").removesuffix(f".{lang}")
    return OUT / lang / f"{relative}.ipynb"


def cell(kind: str, source: str) -> dict:
    base = {"cell_type": kind, "metadata": {}, "source": source}
    return base | ({"execution_count": None, "outputs": []} if kind == "code" else {})


def snippet_cells(path: str, words: dict, written: set[str]) -> tuple[list[dict], list[str]]:
    """Heading, each file not yet ``written`` whole (the modules it imports first), then the run."""
    sources = [snippets.relative(p) for p in snippets.local_sources(ROOT / path)]
    cells = [cell("markdown", words["snippet"].format(path=path))]
    for source in reversed(sources):
        if source not in written:
            written.add(source)
            cells.append(cell("code", f"%%writefile {source}\n" + (ROOT / source).read_text(encoding="utf-8")))
    cells.append(cell("code", f"run({path!r}, {sources!r}, timeout={snippets.options(ROOT / path)[0]})"))
    return cells, sources


def notebook(page: Path) -> dict:
    words = TEXT[page_language(page)]
    text = page.read_text(encoding="utf-8")
    title = re.search(r"^# (.+?)(?:\s*\{[^}]*\})?$", text, re.M).group(1).strip()
    body, folders, written = [], set(), set()
    for path in dict.fromkeys(OUTPUT.findall(text)):  # in page order, once each
        cells, sources = snippet_cells(path, words, written)
        body += cells
        folders |= {str(Path(source).parent) for source in sources}
    floor = tuple(int(part) for part in TORCH_FLOOR.split("."))
    intro = words["intro"].format(title=title, page=page.relative_to(ROOT).as_posix())
    cells = [cell("markdown", f"# {title}\n\n{intro}"), cell("markdown", words["runtime"]),
             cell("code", RUNTIME.format(text=json.dumps({key: words[key] for key in MESSAGES}, ensure_ascii=False),
                                         pins=json.dumps(pinned()),
                                         probe=json.dumps(snippets.PROBE), floor=floor, floor_text=TORCH_FLOOR)),
             cell("code", RUN.format(folders=sorted(folders), tail=snippets.STDERR_TAIL)),
             *body, cell("markdown", words["record"]), cell("code", RECORD)]
    metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                "language_info": {"name": "python"}, "accelerator": "GPU"}
    return {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 4}


def rendered(page: Path) -> str:
    return json.dumps(notebook(page), indent=1, ensure_ascii=False) + "\n"


def write_all() -> list[Path]:
    """Rewrite notebooks/ from the pages; remove a notebook whose page is gone."""
    written = []
    for page in pages():
        file = target(page)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(rendered(page), encoding="utf-8")
        written.append(file)
    for old in set(OUT.rglob("*.ipynb")) - set(written):
        old.unlink()
    return written


if __name__ == "__main__":
    print(f"wrote {len(write_all())} notebooks under {OUT.relative_to(ROOT)}/")
