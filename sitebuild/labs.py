"""Lab notebooks: one run for both languages, .ipynb downloads, mkdocs-jupyter's cache under i18n.

hooks/notebooks.py calls this module from MkDocs' events; the CSS is slimmed by
sitebuild/notebook_css.py.

Labs are jupytext-markdown files, ``docs/labs/<name>.md`` and ``<name>.zh.md``
(static-i18n turns ``.py``/``.ipynb`` notebook pages into raw text, its issue #198).

* One run for both languages: each English lab is executed once, by nbclient, and
  cached by its code and the machine (as the snippets are) in
  ``.cache/notebooks/executed/``, or ``$LAB_CACHE_DIR``. Each language's notebook,
  its own prose with that run's outputs, is written as ``.ipynb``; mkdocs-jupyter
  renders the page from it without running anything (``execute: false``), and
  readers download it, outputs included. The zh labs' code is the English labs'
  code (tests/test_parity.py; the build refuses to go on otherwise), so running it
  again gave the same outputs for twice the time.
* Download: that ``<name>.ipynb`` is served next to its page (under ``zh/`` for
  Chinese) and linked by a button under the page title. Material has no such button
  for notebooks, and mkdocs-jupyter's ``include_source`` would offer the ``.md``.
* Keyboard: code cells that scroll sideways get ``tabindex="0"``, as their outputs
  already have, so that keyboard users can scroll them (axe: scrollable-region-focusable).
* Copy buttons: mkdocs-jupyter labels them in English on every page, and a comma
  in its template leaves a stray attribute; Chinese labs get Material's own words.
  The button and the copy of the cell's code it copies from are no text to search:
  the search index had each code cell twice, after the button's "Copied!".
* Cache: static-i18n runs one build per language and mkdocs-jupyter evicts, after
  each build, every cache entry that build did not use, so the two languages evict
  each other and the cache never hits. One cache folder per language fixes that.
* Weight: mkdocs-jupyter (0.26.3 has no option for it) inlines JupyterLab's CSS,
  about 590 KB, into every notebook page. Those ``<style>`` blocks are moved, in
  order, into one file named by its content's hash, ``assets/jupyter/<hash>.css``,
  linked from where the first block stood, so the cascade and the look are the
  same and browsers fetch it once for all labs. Rules whose selectors need a class
  that no notebook page can carry (JupyterLab's file browser, dialogs, menus ...)
  are left out: a class can be carried only if it is a word of the templates that
  write the page (nbconvert's and mkdocs-jupyter's, Material's), a Pygments token
  class, or a class of the page itself. So are rules that can match nothing at
  all: mkdocs-jupyter scopes every selector under ``.jupyter-wrapper``, which turns
  JupyterLab's ``:root`` variables (87 KB, mostly icons as data URIs) into
  ``.jupyter-wrapper :root``, and the root element is inside no wrapper. Of two
  identical rules the earlier one is dropped: the later one wins in any case. That
  takes the file from 590 KB to about 56 KB; screenshots of every lab, light and
  dark, were pixel-identical before and after.
* Links: nbconvert keeps a markdown cell's links as written, so ``../practice/memory.md``
  would go to ``labs/practice/memory.md``, a 404 that the strict build never sees. Each
  relative ``*.md`` / ``*.md#anchor`` link of a lab page becomes the URL of the page it
  names in the page's language (as MkDocs does on other pages); one that names no page
  is a warning, so the strict build fails. tests/test_links.py crawls the built site.
* Heading ids: mkdocs-jupyter gives a heading the id of an ASCII-only slug, ``id=""`` for
  a Chinese one, while the page's table of contents (and Material's skip link) uses
  Python-Markdown's slugs: ``#_2``, or ``#mlp_1`` for a second heading slugged ``mlp``.
  Each heading takes the id its contents entry links, in order, as on other pages.
* Kernels: on Linux each is forked from an interpreter that has imported torch
  (sitebuild/forked_kernel.py), as the snippets are: about 15 s less of CPU for the ten labs
  on a 2-core EPYC. nbclient talks to each kernel over IPC (Unix sockets in a private folder)
  instead of TCP on localhost, where any local user could connect to the kernel's ports
  and where ipykernel warns about unencrypted TCP on every start (Windows keeps TCP).
* Dead loaders: the mermaid loader is dropped from pages without a diagram (none
  has one): it would import mermaid from a CDN. So is the MathJax block, a
  ``<script src="">`` (mkdocs-jupyter gives it no URL) and a configuration that
  runs only once MathJax has loaded, which it never does.
"""


from __future__ import annotations

import copy
import hashlib
import html as html_lib
import json
import os
import posixpath
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path, PurePath

import jupytext
import nbformat
from jupyter_client.manager import AsyncKernelManager
from mkdocs.exceptions import PluginError
from mkdocs.plugins import get_plugin_logger
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from traitlets.config import Config

from sitebuild import forkserver, snippets
from sitebuild.forked_kernel import ForkedKernelManager
from sitebuild.language import language
from sitebuild.notebook_css import external_css, without_dead_loaders
from sitebuild.snippets import ROOT

LABS = ROOT / "docs" / "labs"
OUT = ROOT / ".cache" / "notebooks"
EXECUTED = Path(os.environ.get("LAB_CACHE_DIR", OUT / "executed"))  # tests: an empty one
CACHE = ROOT / ".cache" / "mkdocs-jupyter"
CELL_TIMEOUT = 120  # seconds per cell, as a snippet's default timeout
log = get_plugin_logger("notebooks")


CODE_CELL = '<div class="highlight-ipynb hl-python">'
BUTTON = {"en": "Download this notebook (.ipynb)", "zh": "下载本 notebook（.ipynb）"}
COPY_BUTTON = '<clipboard-copy ,="" aria-label="Copy to Clipboard"'
COPY_WORDS = {"en": ("Copy to Clipboard", "Copied!"), "zh": ("复制", "已复制")}
COPY_PARTS = ('<div class="zeroclipboard-container"', '<div class="clipboard-copy-txt"')  # button; code it copies
NOT_SEARCHED = ' data-search-exclude="true"'  # Material's search skips the element, then drops the attribute


def ipynb_uri(lab: Path) -> str:
    """labs/autograd.md -> labs/autograd/autograd.ipynb; autograd.zh.md -> zh/labs/...

    static-i18n leaves files from outside docs/ alone, so the language prefix is ours.
    """
    name, _, lang = lab.name.removesuffix(".md").partition(".")
    return f"{lang + '/' if lang else ''}labs/{name}/{name}.ipynb"


def code(notebook) -> list[str]:
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def read(lab: Path) -> nbformat.NotebookNode:
    """The lab as a notebook, a fresh copy: its callers change it."""
    return copy.deepcopy(_read(lab, lab.stat().st_mtime_ns))


@lru_cache(maxsize=64)  # jupytext parses and validates every cell: a tenth of a rebuild's time
def _read(lab: Path, mtime_ns: int) -> nbformat.NotebookNode:
    return jupytext.read(lab)


def stored(lab: Path) -> Path:
    """Where the English lab's run is kept: named by its code and the machine."""
    cells = code(read(lab))
    helpers = {snippets.relative(p): snippets.sha256(p) for p in snippets.helpers_imported(cells)}
    key = hashlib.sha256(json.dumps([snippets.machine(), cells, helpers]).encode()).hexdigest()[:16]
    return EXECUTED / f"{lab.stem}-{key}.ipynb"


def execute(lab: Path) -> nbformat.NotebookNode:
    """The English lab, run once per change of its code or of the machine."""
    kept = stored(lab)
    if kept.is_file():
        return join_streams(nbformat.read(kept, as_version=4))  # also a run stored before it joined them
    notebook = run(lab, forked=forkserver.AVAILABLE)
    log.info(f"lab {lab.relative_to(ROOT)} executed")
    join_streams(notebook)
    EXECUTED.mkdir(parents=True, exist_ok=True)
    for old in EXECUTED.glob(f"{lab.stem}-*.ipynb"):
        old.unlink()
    nbformat.write(notebook, kept)
    return notebook


def run(lab: Path, forked: bool) -> nbformat.NotebookNode:
    """The lab run in a new kernel: ``forked`` from a fork server's interpreter where it can be
    (sitebuild/forked_kernel.py), else a new interpreter, as for a lab that sets what torch's
    import reads."""
    notebook = read(lab)
    kernel = []  # its provisioner: nbclient forgets its kernel manager once the run ends

    def started(notebook):
        kernel.append(client.km.provisioner)
        forkserver.track(kernel[0].pid)  # its process group, which serve's Ctrl+C does not reach

    with tempfile.TemporaryDirectory(prefix="lab-kernel-") as sockets:
        client = NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3", on_notebook_start=started,
                                resources={"metadata": {"path": str(LABS)}}, config=transport(sockets),
                                kernel_manager_class=ForkedKernelManager if forked else AsyncKernelManager)
        try:
            client.execute()
        except Exception as error:
            if forkserver.stopped():  # killed by it, whatever nbclient made of that
                raise forkserver.Stopped("the lab runs were stopped") from None
            if forked and kernel and kernel[0].changed_at_import():
                return run(lab, forked=False)
            if isinstance(error, CellExecutionError):
                raise PluginError(f"lab {lab.relative_to(ROOT)} failed:\n{error}") from None
            raise
        finally:
            for provisioner in kernel:
                forkserver.untrack(provisioner.pid)
    return notebook


def join_streams(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """One output per run of text on the same stream: Jupyter splits a cell's stdout where its
    messages happened to arrive, so the same prints would show as one box or two by chance."""
    for cell in notebook.cells:
        joined = []
        for output in cell.get("outputs", []):
            previous = joined[-1] if joined else None
            if (output.output_type == "stream" and previous is not None and previous.output_type == "stream"
                    and previous.name == output.name):
                previous.text += output.text
            else:
                joined.append(output)
        if "outputs" in cell:
            cell.outputs = joined
    return notebook


def transport(sockets: str) -> Config:
    """IPC: the kernel's sockets are files in ``sockets``, a folder only this user can open."""
    if os.name != "posix":  # zmq's ipc:// needs Unix sockets
        return Config()
    return Config({"KernelManager": {"transport": "ipc", "ip": os.path.join(sockets, "kernel")}})


def with_outputs(lab: Path, run: nbformat.NotebookNode | None, note: str = "") -> nbformat.NotebookNode:
    """This language's notebook, with the English run's outputs cell by cell; without a run
    (serve, sitebuild/background.py), with ``note`` under its title instead."""
    notebook = read(lab)
    if run is None:
        notebook.cells.insert(1, nbformat.v4.new_markdown_cell(note))
    elif code(notebook) != code(run):
        raise PluginError(f"{lab.relative_to(ROOT)}: its code cells differ from the English lab's, "
                          "whose one run both languages show")
    else:
        ran = [cell for cell in run.cells if cell.cell_type == "code"]
        for cell, done in zip((c for c in notebook.cells if c.cell_type == "code"), ran):
            cell.outputs, cell.execution_count = done.outputs, done.execution_count
    for number, cell in enumerate(notebook.cells):  # jupytext draws random ids; the
        cell.id = f"cell-{number}"                  # render cache keys on the content
    return notebook


def english() -> list[Path]:
    return sorted(p for p in LABS.glob("*.md") if p.name.count(".") == 1)


_failed: dict[Path, str] = {}  # serve: stored-run path -> why that run failed
PENDING = {"en": ("> **Running…** This lab is being run in the background; the page reloads with "
                  "its outputs when the run ends."),
           "zh": "> **运行中…** 本实验正在后台运行，运行结束后本页会带着输出自动刷新。"}
FAILED = {"en": "> **This lab failed**, and `mkdocs build --strict` stops on it:\n\n```text\n{error}\n```",
          "zh": "> **本实验运行失败**，`mkdocs build --strict` 会因此中止：\n\n```text\n{error}\n```"}


def run_all(english_labs: list[Path], keep_failures: bool = False) -> list[nbformat.NotebookNode | None]:
    """Run these English labs, one kernel per core. ``keep_failures`` (serve): a failure is
    logged and kept for the lab's page (``write_notebooks``) instead of stopping the build."""
    def one(lab: Path) -> nbformat.NotebookNode | None:
        try:
            return execute(lab)
        except PluginError as error:
            if not keep_failures:
                raise
            _failed[stored(lab)] = str(error)
            log.error(str(error))
            return None

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(one, english_labs))


def write_notebooks(wait: bool = True) -> list[Path]:
    """Write every language's notebook, with the English labs' runs.

    ``wait`` (build): run the labs that have no stored run first. Without it (serve), such a
    lab's notebook says it is running (or why it failed) and the lab is returned, to be run
    in the background."""
    labs = english()
    runs = dict(zip(labs, run_all(labs) if wait else [kept_run(lab) for lab in labs]))
    for lab in sorted(LABS.glob("*.md")):
        source = LABS / f"{lab.name.split('.')[0]}.md"
        lang = language(src_uri=lab.name)
        failure = _failed.get(stored(source)) if _failed else None
        note = FAILED[lang].format(error=failure) if failure else PENDING[lang]
        target = OUT / ipynb_uri(lab)
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(with_outputs(lab, runs[source], note), target)
    return [lab for lab in labs if runs[lab] is None and not (_failed and stored(lab) in _failed)]


def kept_run(lab: Path) -> nbformat.NotebookNode | None:
    """The lab's stored run, if any (on a fresh clone, without asking the machine)."""
    return execute(lab) if EXECUTED.is_dir() and stored(lab).is_file() else None


def is_lab(src_uri: str) -> bool:
    return src_uri.startswith("labs/") and src_uri.endswith(".md")


def page_html(html: str, page, files, config, lang: str) -> str:
    """A lab page's HTML: download button, keyboard, copy words, links, ids, CSS."""
    name = page.file.src_uri.removeprefix("labs/").split(".")[0]
    button = f'<p><a class="md-button" href="{name}.ipynb" download>{BUTTON[lang]}</a></p>'
    html = external_css(html, page, config)  # first: the passes below then read ~110 KB of the page, not ~650 KB
    html = html.replace(CODE_CELL, CODE_CELL[:-1] + ' tabindex="0">')
    label, done = COPY_WORDS[lang]
    html = html.replace(COPY_BUTTON, f'<clipboard-copy aria-label="{label}"').replace(">Copied!<", f">{done}<")
    for part in COPY_PARTS:
        html = html.replace(part, part + NOT_SEARCHED)
    html = heading_ids(page_links(html, page, files), page)
    html = without_dead_loaders(html)
    head, sep, rest = html.partition("</h1>")
    return head + sep + button + rest if sep else button + html


MD_HREF = re.compile(r'(?<=\s)href="([^":?#]+\.md)(#[^"]*)?"')


def page_links(html: str, page, files) -> str:
    """href="../practice/memory.md#x" -> the built page's URL, relative to this page."""
    folder = posixpath.dirname(page.file.src_uri)

    def url(match: re.Match) -> str:
        path, anchor = html_lib.unescape(match.group(1)), match.group(2) or ""
        target = None if path.startswith("/") else files.get_file_from_path(
            posixpath.normpath(posixpath.join(folder, path)))
        if target is None or not target.is_documentation_page():
            log.warning(f"lab {page.file.src_uri} links '{path}', which is no page of the site")
            return match.group(0)
        return f'href="{html_lib.escape(target.url_relative_to(page.file))}{anchor}"'

    return MD_HREF.sub(url, html)


HEADING = re.compile(r'<h([1-6]) id="[^"]*">(.*?)<a class="anchor-link" href="#[^"]*">', re.S)


def toc_ids(items) -> list[str]:
    return [i for item in items for i in [item.id, *toc_ids(item.children)]]


def heading_ids(html: str, page) -> str:
    """Every heading's id (and its ¶ link) as the table of contents links it."""
    ids = toc_ids(page.toc)
    if len(ids) != len(HEADING.findall(html)):
        log.warning(f"lab {page.file.src_uri}: {len(HEADING.findall(html))} headings, "
                    f"{len(ids)} entries in its table of contents")
        return html
    order = iter(ids)

    def heading(match: re.Match) -> str:
        anchor = next(order)
        return f'<h{match[1]} id="{anchor}">{match[2]}<a class="anchor-link" href="#{anchor}">'

    return HEADING.sub(heading, html)


def only_included(plugin):
    """mkdocs-jupyter 0.26.3's ``should_include`` with its ``include`` patterns asked first.

    It parses every ``.md`` page with jupytext, to see whether it is a notebook, before it
    looks at the patterns, twice per page and language: 250 parses, 40 % of a rebuild.
    A page outside the patterns is never included, so asking them first changes nothing
    but the time; the labs' own parses are memoised by file and modification time."""
    should_include = plugin.should_include

    def included(file) -> bool:
        path = file.abs_src_path
        if path is None or not any(PurePath(path).match(pattern) for pattern in plugin.config["include"]):
            return False
        key = (path, Path(path).stat().st_mtime_ns)
        if key not in _notebooks:
            _notebooks[key] = should_include(file)
        return _notebooks[key]

    plugin.should_include = included


_notebooks: dict[tuple[str, int], bool] = {}  # (path, modification time) -> whether it is a notebook
