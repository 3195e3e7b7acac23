"""The search index readers get: one per language, and Chinese terms kept whole.

static-i18n merges every language into Material's single ``search/search_index.json``
(its issue #271: Material reads the index from one fixed path). An English reader who
searched "DataParallel" got Chinese pages among the first results, a Chinese reader
got English ones first, and every page downloaded and indexed both languages (1.2 MB).

After the last language is built, ``split`` divides the merged index: the default
language keeps ``search/search_index.json``, each other language gets
``<locale>/search/search_index.json`` with locations relative to ``<locale>/``.
Material finds the index, and resolves result links, from the ``base`` of the page's
``__config``; on a ``<locale>/`` page that base is rewritten to point at ``<locale>/``.
``base`` also serves Material's version selector and instant navigation, which this
site does not use.

Chinese text reaches the index cut into words by jieba, but a reader's query is not
cut: 「数据并行」 typed as one word found nothing called that, because jieba had indexed
数据 and 并行. Every Chinese term of the glossary (sitebuild/glossary.py) is therefore a
word to jieba, so it is indexed whole and a query for it matches. Material's trailing
wildcard still finds a term from its start (「自动」 finds 自动求导), not from its middle.

Material indexes every page on every build: it parses the page's HTML and jieba cuts
the Chinese, a quarter of a rebuild's time. ``remember_entries`` keeps each page's
entries by everything they are made of (its URL, title, HTML, table of contents and
front matter; the search settings, the glossary's words, Material's and jieba's
versions), in memory for `mkdocs serve` and on disk in ``.cache/search/`` (or
``$SEARCH_CACHE_DIR``) for the next build, so only the pages that changed are indexed
again; the index written is the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from functools import cache
from importlib import metadata
from pathlib import Path

from mkdocs.utils import get_relative_url

from sitebuild import glossary
from sitebuild.snippets import ROOT

CONFIG = re.compile(r'(<script id="__config" type="application/json">)(.*?)(</script>)', re.S)


@cache  # jieba's words are the process's: once is enough
def add_glossary_words():
    """Every Chinese glossary term becomes a word to jieba, when it is installed. Called before
    the first page that is indexed anew: the first word makes jieba load its dictionary (half
    a second), which a build whose pages' entries are all kept never needs."""
    try:
        import jieba  # what Material's search plugin segments Chinese with
    except ImportError:
        return
    for term in glossary.chinese_terms():
        jieba.add_word(term)


def rebased(output: str, root: str, page_url: str) -> str:
    """The page's ``__config`` with its base at ``root`` (its language's root)."""

    def rebase(match):
        settings = json.loads(match.group(2))
        settings["base"] = get_relative_url(root, page_url)
        return match.group(1) + json.dumps(settings) + match.group(3)

    return CONFIG.sub(rebase, output, count=1)


def split(site: Path, default: str, locales: list[str]):
    """Material's merged index, one per language: ``search/`` and ``<locale>/search/``."""
    merged = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    docs = {locale: [] for locale in locales}
    for doc in merged["docs"]:
        locale, _, rest = doc["location"].partition("/")
        if locale in docs and locale != default:
            docs[locale].append(dict(doc, location=rest))
        else:
            docs[default].append(doc)
    for locale, own in docs.items():
        is_default = locale == default
        # English terms run through Chinese prose (names of APIs), so both pipelines.
        lang = [default] + ([] if is_default else [locale])
        index = dict(merged, config=dict(merged["config"], lang=lang), docs=own)
        path = site / ("" if is_default else locale) / "search" / "search_index.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(index, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


_entries: dict[str, list[dict]] = {}  # what a page's content made, by remember_entries' key


def cache_dir() -> Path:
    return Path(os.environ.get("SEARCH_CACHE_DIR", ROOT / ".cache" / "search"))


def remember_entries(index):
    """Material's ``SearchIndex`` (material/plugins/search/plugin.py, 9.8.2) indexing a page
    it indexed before, unchanged, by appending the entries that page made then."""
    index_page = index.add_entry_from_context
    setting = [index.config, glossary.chinese_terms(), versions()]

    def add_entry_from_context(page):
        key = hashlib.sha256(json.dumps([page.url, page.title, page.content, str(page.toc), page.meta, setting],
                                        sort_keys=True, default=str).encode()).hexdigest()
        file = cache_dir() / f"{key[:32]}.json"
        if key not in _entries and file.is_file():
            _entries[key] = json.loads(file.read_text(encoding="utf-8"))
        if key not in _entries:
            add_glossary_words()
            start = len(index.entries)
            index_page(page)
            _entries[key] = [dict(entry) for entry in index.entries[start:]]
            file.parent.mkdir(parents=True, exist_ok=True)
            part = file.with_suffix(f".{os.getpid()}.part")  # builds side by side never read half a file
            part.write_text(json.dumps(_entries[key], ensure_ascii=False), encoding="utf-8")
            part.replace(file)
        else:
            index.entries += [dict(entry) for entry in _entries[key]]

    index.add_entry_from_context = add_entry_from_context


def versions() -> dict[str, str | None]:
    """Material's and jieba's: what turns a page into entries."""
    found = {}
    for name in ("mkdocs-material", "jieba"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found
