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

Chinese text reaches the index cut into words by jieba: 「数据并行」 typed as one word
found nothing called that, because jieba had indexed 数据 and 并行. Even with every
glossary term a word to jieba, it cut a term that runs into the next word: 「读到张量值」
became 读到/张/量值. ``segmenter`` therefore cuts every Chinese term of the glossary
(sitebuild/glossary.py) out of the text first, whole, and lets jieba cut only the text
between them (otherwise as Material's ``_segment_chinese``). Material's trailing wildcard
still finds a term from its start (「自动」 finds 自动求导), not from its middle.

The query is cut in the reader's browser, by Material's search worker: each run of
Han characters becomes the longest words of the index that start it (its ``segment``),
and every word gets a trailing wildcard. That cut never tries the whole run, so 「张量」
became 「张*」 once 张 stood alone in the index, and found 这张表 and 这张图; 「数据并行」
became 「数据*」. And a wildcard matches a longer word as fully as the word itself, so
for 「张量」 the rarer 张量并行 in the title 「用 DTensor 做张量并行」 outranked the page
titled 「任意设备上的张量」. ``patched_worker`` gives the worker a cut in which each
glossary term of the query stays whole and counts ``EXACT`` times as itself as it does
as the start of a longer word (``张量^10 张量*``); the text between terms is cut as before.

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
from importlib import metadata
from pathlib import Path

from backrefs import bre
from mkdocs.utils import get_relative_url

from sitebuild import glossary
from sitebuild.snippets import ROOT

CONFIG = re.compile(r'(<script id="__config" type="application/json">)(.*?)(</script>)', re.S)


HAN = bre.compile(r"(\p{script: Han}+)", bre.UNICODE)  # as Material finds the Chinese to cut
CUT = "glossary terms whole"  # how ``segmenter`` cuts: a change re-indexes every page


def longest_first(terms: list[str]) -> list[str]:
    return sorted(terms, key=lambda term: (-len(term), term))  # 张量并行 before 张量


def segmenter(terms: list[str]):
    """Material's ``_segment_chinese`` (jieba's words joined by U+200B), with each of ``terms`` whole.
    Material calls it only where jieba is installed; jieba loads its dictionary (half a second) at
    its first cut, which a build whose pages' entries are all kept never makes."""
    whole = set(terms)
    pattern = re.compile("(" + "|".join(longest_first(terms)) + ")") if terms else None

    def segmented(text: str) -> str:
        import jieba

        def cut(match):
            pieces = pattern.split(match.group(0)) if pattern else [match.group(0)]
            words = [word for piece in pieces if piece
                     for word in ([piece] if piece in whole else jieba.cut(piece))]
            return "\u200b" + "\u200b".join(words) + "\u200b"

        return HAN.sub(cut, text).strip("\u200b")

    return segmented


# --- the query, cut in the browser ----------------------------------------------------

EXACT = 10  # how much more a glossary term of the query counts as itself than as the start of a longer word
WORKER = "assets/javascripts/workers"
# Material's segment(query, index), minified (src/templates/assets/javascripts/integrations/search/query/segment)
SEGMENT = re.compile(r'function (\w+)\((\w+),(\w+)\)\{let \w+=new Set,\w+=new Uint16Array\(\2\.length\);.*?'
                     r'return \w+\.has\(""\)\?new Set\(\[\2\]\):\w+\}')
CUT_QUERY = """/* sitebuild/search_index.py: a glossary term of a Chinese query stays whole */
var siteCut = (function (terms, exact) {
  const whole = new Set(terms), split = new RegExp("(" + terms.join("|") + ")", "u")
  return (run, index, material) => !terms.length ? material(run, index) : run.split(split)
    .filter(Boolean)
    .flatMap(piece => whole.has(piece) ? [piece + "^" + exact + " " + piece] : [...material(piece, index)])
})(%s, %d);
"""


class SearchError(Exception):
    pass


def patched_worker(source: str) -> str:
    """Material's search worker, its query cut replaced by ``siteCut`` (above)."""
    found = list(SEGMENT.finditer(source))
    if len(found) != 1:
        raise SearchError(f"Material's search worker has {len(found)} functions like its segment(query, index),"
                          " not one: sitebuild/search_index.py replaces it (SEGMENT) to keep glossary terms"
                          " whole in Chinese queries; read the new one and update SEGMENT")
    match = found[0]
    name, query, index = match.groups()
    material = f"material_{name}"
    own = f"function {name}({query},{index}){{return siteCut({query},{index},{material})}}"
    terms = json.dumps(longest_first(glossary.chinese_terms()), ensure_ascii=False)
    return (CUT_QUERY % (terms, EXACT) + source[:match.start()] + own
            + f"function {material}" + match.group(0).removeprefix(f"function {name}") + source[match.end():])


def patch_worker(site: Path, theme_dirs: list[str]):
    """The site's copy of Material's search worker, patched from the theme's own file."""
    for worker in (site / WORKER).glob("search.*.min.js"):
        sources = [Path(d) / WORKER / worker.name for d in theme_dirs if (Path(d) / WORKER / worker.name).is_file()]
        if not sources:
            raise SearchError(f"{WORKER}/{worker.name} is in the site but in no theme folder: {theme_dirs}")
        worker.write_text(patched_worker(sources[0].read_text(encoding="utf-8")), encoding="utf-8")


def rebased(output: str, root: str, page_url: str) -> str:
    """The page's ``__config`` with its base at ``root`` (its language's root)."""

    def rebase(match):
        settings = json.loads(match.group(2))
        settings["base"] = get_relative_url(root, page_url)
        return match.group(1) + json.dumps(settings) + match.group(3)

    return CONFIG.sub(rebase, output, count=1)


def split(site: Path, default: str, locales: list[str], order: list[str] = ()):
    """Material's merged index, one per language: ``search/`` and ``<locale>/search/``. Each
    page's entries in the ``order`` of its URL, the navigation's: of two results with the same
    score, Material lists first the one that comes first in the index, as a reader meets them,
    not as their files sort (「以 PyTorch 张量为枢纽」 in arrays/ before 「任意设备上的张量」)."""
    merged = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    rank = {url: n for n, url in enumerate(order)}
    docs = {locale: [] for locale in locales}
    for doc in sorted(merged["docs"], key=lambda doc: rank.get(doc["location"].partition("#")[0], len(rank))):
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
    terms = glossary.chinese_terms()
    index._segment_chinese = segmenter(terms)
    setting = [index.config, terms, versions(), CUT]

    def add_entry_from_context(page):
        key = hashlib.sha256(json.dumps([page.url, page.title, page.content, str(page.toc), page.meta, setting],
                                        sort_keys=True, default=str).encode()).hexdigest()
        file = cache_dir() / f"{key[:32]}.json"
        if key not in _entries and file.is_file():
            _entries[key] = json.loads(file.read_text(encoding="utf-8"))
        if key not in _entries:
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
