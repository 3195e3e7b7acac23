"""Both languages carry the same pages, anchors, includes, outputs, figures and code.

Every figure comes in both languages: the zh page shows ``X.zh.svg`` wherever the en page
shows ``X.svg``, under docs/ and under generated/ (a snippet writes both files).
"""

import pytest
from sitebuild import translations
from tests.pages import (ANCHOR, DOCS, anchors, code_blocks, en_pages, headings, images, includes, is_lab,
                   notebook_code, outputs, twin)

PAIRS = [p for p in en_pages() if twin(p).is_file()]
PROSE = [p for p in PAIRS if not is_lab(p)]
LABS = [p for p in PAIRS if is_lab(p)]
FIGURES = {".svg", ".png", ".jpg", ".jpeg", ".gif", ".webp"}


def name(page):
    return page.relative_to(DOCS).as_posix()


def test_every_page_has_both_languages():
    """The one report of a missing twin: the build stops on the same lines (hooks/translations.py),
    and the tests of the built site are skipped for it (tests/conftest.py)."""
    missing = translations.missing_twins(DOCS)
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("page", PROSE, ids=name)
def test_every_heading_has_an_explicit_anchor(page):
    for path in (page, twin(page)):
        text = path.read_text(encoding="utf-8")
        bare = [h for h in headings(text) if not ANCHOR.search(h)]
        assert not bare, f"{name(path)}: headings without {{ #anchor }}: {bare}"


@pytest.mark.parametrize("page", PROSE, ids=name)
def test_same_structure(page):
    en = page.read_text(encoding="utf-8")
    zh = twin(page).read_text(encoding="utf-8")
    for what in (anchors, includes, outputs, code_blocks):
        assert what(en) == what(zh), f"{name(page)}: {what.__name__} differ between en and zh"


def zh_figure(path: str) -> str:
    """../assets/gpu/sm-memory.svg -> ../assets/gpu/sm-memory.zh.svg"""
    stem, _, suffix = path.rpartition(".")
    return f"{stem}.zh.{suffix}"


@pytest.mark.parametrize("page", PROSE, ids=name)
def test_zh_page_shows_the_zh_twin_of_each_figure(page):
    en = images(page.read_text(encoding="utf-8"))
    zh = images(twin(page).read_text(encoding="utf-8"))
    assert not [f for f in en if ".zh." in f], f"{name(page)} shows a Chinese figure"
    wanted = [zh_figure(f) for f in en]
    assert zh == wanted, f"{name(twin(page))}: shows {zh}, should show the zh twins {wanted}"


def test_every_figure_has_a_twin():
    en = [p for p in DOCS.rglob("*") if p.suffix in FIGURES and ".zh." not in p.name]
    zh = [p for p in DOCS.rglob("*") if p.suffix in FIGURES and ".zh." in p.name]
    missing = [name(p) for p in en if not p.with_name(zh_figure(p.name)).is_file()]
    orphans = [name(p) for p in zh if not p.with_name(p.name.replace(".zh.", ".")).is_file()]
    assert not missing, "figures without a .zh twin: " + ", ".join(missing)
    assert not orphans, ".zh figures without an English original: " + ", ".join(orphans)


@pytest.mark.parametrize("page", LABS, ids=name)
def test_same_notebook_code(page):
    en, zh = notebook_code(page), notebook_code(twin(page))
    assert en, f"{name(page)} has no code cell"
    assert en == zh, f"{name(page)}: code cells differ between en and zh"


def test_anchors_unique_per_page():
    for page in en_pages():
        found = anchors(page.read_text(encoding="utf-8"))
        assert len(found) == len(set(found)), f"{name(page)}: duplicate anchors {found}"
