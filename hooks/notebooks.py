"""Lab notebooks: offer each as .ipynb, and keep mkdocs-jupyter's cache working under i18n.

Labs are jupytext-markdown files, ``docs/labs/<name>.md`` and ``<name>.zh.md``
(static-i18n turns ``.py``/``.ipynb`` notebook pages into raw text, its issue #198).

* Download: each lab is converted with jupytext during the build, served next to its
  page as ``<name>.ipynb`` (under ``zh/`` for Chinese), and linked by a button under
  the page title. Material has no such button for notebooks, and mkdocs-jupyter's
  ``include_source`` would offer the ``.md`` source instead.
* Keyboard: code cells that scroll sideways get ``tabindex="0"``, as their outputs
  already have, so that keyboard users can scroll them (axe: scrollable-region-focusable).
* Cache: static-i18n runs one build per language and mkdocs-jupyter evicts, after
  each build, every cache entry that build did not use, so the two languages evict
  each other and the cache never hits. One cache folder per language fixes that.
"""

from __future__ import annotations

from pathlib import Path
import jupytext
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
LABS = ROOT / "docs" / "labs"
OUT = ROOT / ".cache" / "notebooks"
CACHE = ROOT / ".cache" / "mkdocs-jupyter"


def language(config) -> str:
    return config.plugins["i18n"].current_language or "en"


def on_pre_build(config):
    config.plugins["mkdocs-jupyter"].config["cache_dir"] = str(CACHE / language(config))


CODE_CELL = '<div class="highlight-ipynb hl-python">'
BUTTON = {"en": "Download this notebook (.ipynb)", "zh": "下载本 notebook（.ipynb）"}


def ipynb_uri(lab: Path) -> str:
    """labs/autograd.md -> labs/autograd/autograd.ipynb; autograd.zh.md -> zh/labs/...

    static-i18n leaves files from outside docs/ alone, so the language prefix is ours.
    """
    name, _, lang = lab.name.removesuffix(".md").partition(".")
    return f"{lang + '/' if lang else ''}labs/{name}/{name}.ipynb"


def on_files(files, config):
    for lab in sorted(LABS.glob("*.md")):
        target = OUT / ipynb_uri(lab)
        if not target.is_file() or target.stat().st_mtime < lab.stat().st_mtime:
            target.parent.mkdir(parents=True, exist_ok=True)
            jupytext.write(jupytext.read(lab), target, fmt="ipynb")
        files.append(File(ipynb_uri(lab), str(OUT), config.site_dir, config.use_directory_urls))
    return files


def on_page_content(html, page, config, files):
    if not (page.file.src_uri.startswith("labs/") and page.file.src_uri.endswith(".md")):
        return html
    name = page.file.src_uri.removeprefix("labs/").split(".")[0]
    button = (f'<p><a class="md-button" href="{name}.ipynb" download>'
              f"{BUTTON[language(config)]}</a></p>")
    html = html.replace(CODE_CELL, CODE_CELL[:-1] + ' tabindex="0">')
    head, sep, rest = html.partition("</h1>")
    return head + sep + button + rest if sep else button + html
