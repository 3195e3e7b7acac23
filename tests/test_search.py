"""What the search indexes hold, and the query cut the search worker is given (sitebuild/search_index.py).

Read from the session's build; a query typed in the browser, its ranking and its
highlights, are tested in tests/test_browser.py.
"""

import html
import json
import re
from pathlib import Path

import pytest
from material import templates
from sitebuild import glossary, search_index
from tests.pages import en_pages, is_lab, notebook_code, twin

TAG = re.compile(r"<[^>]+>")
THEME_WORKERS = Path(templates.__file__).parent / search_index.WORKER


def docs(site: Path, lang: str) -> list[dict]:
    return json.loads((site / ("" if lang == "en" else f"{lang}/") / "search" / "search_index.json")
                      .read_text(encoding="utf-8"))["docs"]


def words(text: str) -> str:
    """An entry's text as a reader reads it: without markup, whitespace collapsed, and without
    the zero-width breaks between the words jieba cut Chinese into (code cells hold Chinese too)."""
    return " ".join(html.unescape(TAG.sub(" ", text)).replace("\u200b", "").split())


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_lab_holds_each_code_cell_once_and_no_copy_button(site, lang):
    """mkdocs-jupyter's copy button says "Copied!" and keeps a second copy of the cell's code
    (sitebuild/labs.py): neither is text to search."""
    entries = docs(site, lang)
    for lab in (page for page in en_pages() if is_lab(page)):
        location = f"labs/{lab.name.removesuffix('.md')}/"
        text = words(" ".join(e["text"] for e in entries if e["location"].split("#")[0] == location))
        assert text, f"{lang}: no search entry for {location}"
        for word in ("Copied!", "Copy to Clipboard", "已复制"):
            assert word not in text, f"{lang} {location}: the copy button's {word!r} is indexed"
        cells = [" ".join(cell.split()) for cell in notebook_code(lab if lang == "en" else twin(lab))]
        counted = {cell[:60]: text.count(cell) for cell in set(cells) if len(cell) >= 20}
        assert counted and all(n == 1 for n in counted.values()), f"{lang} {location}: {counted}"


def test_every_glossary_term_is_a_whole_word_of_the_chinese_index(site):
    """jieba alone cut 「读到张量值」 into 读到/张/量值, and a lone 张 cut the query 张量 to 张."""
    pattern = re.compile("|".join(search_index.longest_first(glossary.chinese_terms())))
    cut = []
    for entry in docs(site, "zh"):
        for field in ("title", "text"):
            plain, breaks = "", set()
            for char in entry[field]:
                if char == "\u200b":
                    breaks.add(len(plain))
                else:
                    plain += char
            cut += [f"{entry['location']}: {plain[max(m.start() - 8, 0):m.end() + 8]!r} cut in {m.group(0)}"
                    for m in pattern.finditer(plain) if any(m.start() < at < m.end() for at in breaks)]
    assert not cut, "\n".join(cut)


def test_the_site_has_the_patched_search_worker(site):
    workers = sorted((site / search_index.WORKER).glob("search.*.min.js"))
    assert [w.name for w in workers] == [w.name for w in sorted(THEME_WORKERS.glob("search.*.min.js"))]
    text = workers[0].read_text(encoding="utf-8")
    assert text.startswith("/* sitebuild/search_index.py") and json.dumps("张量", ensure_ascii=False) in text


def test_the_worker_keeps_its_query_cut_for_the_text_between_terms():
    """The patch replaces Material's segment() by siteCut, which calls it, renamed, between terms."""
    source = next(THEME_WORKERS.glob("search.*.min.js")).read_text(encoding="utf-8")
    name = search_index.SEGMENT.search(source).group(1)
    patched = search_index.patched_worker(source)
    assert f"function {name}(" in patched and f"function material_{name}(" in patched
    assert patched.count("siteCut(") == 1  # the call that replaces segment()
    with pytest.raises(search_index.SearchError, match="update SEGMENT"):
        search_index.patched_worker(source.replace("new Uint16Array", "new Uint32Array"))
