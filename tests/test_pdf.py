"""The PDFs of `make pdf` (sitebuild/pdf.py): one per language, every page in nav order, no boxes.

Both languages are printed once per session from the session's build (about 1,000 A4 pages:
84 s and 91 CPU-s alone on the 2-core AMX Xeon, 2026-12-07), then read back with pdftotext,
pdfinfo and pdffonts (poppler-utils). The printing starts in the background as soon as the
build is done (``start``, called by conftest.py), so that it fills the cores the tests in
between leave idle. Under `make test`, a language whose print page and the files it loads are
unchanged since its PDF passed gets that PDF back instead (tests/check_cache.py); the checks
below read it.
"""

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import Future, wait
from pathlib import Path

import pytest
from sitebuild import build_info, pdf, print_pages
from tests import check_cache
from tests.conftest import JOBS, ROOT, background
from tests.pages import DOCS, headings, outputs, twin


NAV_ENTRY = re.compile(r"^\s+- (?:[^:\n]+: )?([\w/]+\.md)\s*$", re.M)
SENTENCE_PAGE = DOCS / "pytorch" / "autograd.zh.md"
OUTPUT_SNIPPET = "snippets/pytorch/autograd.py"
ARTIFACTS = ROOT / "test-artifacts"


def squeeze(text: str) -> str:
    """pdftotext breaks lines where the PDF does; compare without any whitespace."""
    return re.sub(r"\s+", "", text)


def nav_pages() -> list[str]:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    return NAV_ENTRY.findall(config.partition("\nnav:\n")[2])


def title(page) -> str:
    first = next(h for h in headings(page.read_text(encoding="utf-8")) if h.startswith("# "))
    return re.sub(r"\{\s*#[\w-]+\s*\}|[`*]", "", first[2:]).strip()


def unstamped(text: str) -> str:
    """The print page without the commit and the minute on its cover: kept in the key, they
    would print both PDFs again at every build."""
    return print_pages.BUILT_AT.sub("", text.replace(build_info.commit()[0], ""))


def start(site) -> Future:
    return background("pdfs", printed, site)


def printed(site: Path) -> dict[str, Path]:
    """Each language's PDF: printed now, or kept from a print of the same inputs."""
    keys = {}
    for lang in pdf.LANGS:
        page = pdf.source(site, lang)
        text = page.read_text(encoding="utf-8") if page.is_file() else ""
        keys[lang] = check_cache.key(f"pdf {lang}", [check_cache.digest(unstamped(text).encode()),
                                                     check_cache.loaded(page, text)],
                                     [Path(pdf.__file__), Path(__file__)])
    todo = [lang for lang in pdf.LANGS if check_cache.get(keys[lang]) is None]
    written = pdf.render(site, todo) if todo else {}
    for lang in pdf.LANGS:
        if lang in written:
            check_cache.put(keys[lang], {"pdf": written[lang].name}, files=(written[lang],))
        else:
            written[lang] = Path(shutil.copy2(check_cache.kept_file(keys[lang], pdf.target(site, lang).name),
                                              pdf.target(site, lang)))
    return {lang: written[lang] for lang in pdf.LANGS}


@pytest.fixture(scope="session")
def pdfs(site):
    try:
        written = start(site).result()  # the same job when the build started it
    except pdf.PdfError as error:
        pytest.fail(str(error))
    return {lang: (path, subprocess.run(["pdftotext", str(path), "-"], capture_output=True, text=True,
                                        check=True).stdout) for lang, path in written.items()}


def test_both_languages_every_page_in_nav_order(pdfs):
    for lang, (path, text) in pdfs.items():
        sheets = [squeeze(sheet) for sheet in text.split("\f")]
        assert pdf.pages(path) == len(sheets) - 1 >= len(nav_pages()) + 2  # + provenance and contents
        position = 1
        for entry in nav_pages():
            page = DOCS / entry if lang == "en" else twin(DOCS / entry)
            start = squeeze(title(page))
            found = next((i for i in range(position + 1, len(sheets)) if sheets[i].startswith(start)), None)
            assert found, f"{lang}: {entry} ('{title(page)}') does not start a page after page {position + 1}"
            position = found


def test_first_page_carries_the_provenance(pdfs, snippet_results):
    commit = os.environ.get("GITHUB_SHA") or subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    env = snippet_results[OUTPUT_SNIPPET].env
    for lang, (_, text) in pdfs.items():
        first = squeeze(text.split("\f")[0])
        for fact in (commit, env["device"], env["torch"], env["python"]):
            assert squeeze(fact) in first, f"{lang}: provenance page lacks {fact!r}"


def test_chinese_sentence_and_output_line(pdfs, snippet_results):
    sentences = [part for line in SENTENCE_PAGE.read_text(encoding="utf-8").splitlines()
                 if not line.startswith(("#", "|", "!", "<", "-", ">", " ", "`"))
                 for part in line.split("。")
                 if re.search(r"[\u4e00-\u9fff]{8}", part) and not re.search(r"[#`*_\[\]<>|!]", part)]
    assert sentences, f"{SENTENCE_PAGE.name} has no plain Chinese sentence to look for"
    sentence = sentences[0]
    sheets = [squeeze(sheet) for sheet in pdfs["zh"][1].split("\f")]
    found = [i for i, sheet in enumerate(sheets, 1) if squeeze(sentence) in sheet]
    assert found, f"zh PDF lacks {sentence!r}"
    ARTIFACTS.mkdir(exist_ok=True)  # that page as a picture, for a person to look at
    subprocess.run(["pdftoppm", "-png", "-r", "80", "-singlefile", "-f", str(found[0]), "-l", str(found[0]),
                    str(pdfs["zh"][0]), str(ARTIFACTS / "pdf-zh-page")], check=True)
    assert OUTPUT_SNIPPET in outputs((DOCS / "pytorch" / "autograd.md").read_text(encoding="utf-8"))
    line = snippet_results[OUTPUT_SNIPPET].stdout.strip().splitlines()[0]
    for lang, (_, text) in pdfs.items():
        assert squeeze(line) in squeeze(text), f"{lang}: output line {line!r} missing"


def test_fonts_embedded_and_chinese_in_noto_cjk(pdfs):
    for lang, (path, _) in pdfs.items():
        fonts = pdf.fonts(path)
        assert fonts and all(f["emb"] == "yes" for f in fonts), fonts
    assert pdf.CJK_PDF_NAME in pdf.embedded_names(pdfs["zh"][0])


def test_offered_on_each_home_page(site, pdfs, monkeypatch):
    """A build told that its PDFs will be made (SITE_PDF=1: make pdf) links each from its home
    page, where sitebuild/pdf.py writes it. This session's build, like make serve's, has no
    PDF and says so instead (tests/test_links.py)."""
    for lang, url in (("en", ""), ("zh", "zh/")):
        home = site / url / "index.html"
        assert home.is_file()
        monkeypatch.setenv(print_pages.PDF_ENV, "1")
        link = print_pages.with_download(print_pages.MARKER, lang, url)
        href = re.search(r'<a class="md-button" href="([^"]+\.pdf)" download>', link)
        assert href and (home.parent / href.group(1)).resolve() == pdfs[lang][0].resolve()


def test_only_a_changed_print_page_is_printed_again(tmp_path, monkeypatch):
    """Under `make test` (tests/check_cache.py): the other language's PDF comes back as it was."""
    monkeypatch.setenv("CHECK_CACHE", "1")
    monkeypatch.setattr(check_cache, "CACHE", tmp_path / "checks")
    site, calls = tmp_path / "site", []

    def render(site, langs):
        calls.append(list(langs))
        for lang in langs:
            pdf.target(site, lang).write_bytes(b"%PDF " + pdf.source(site, lang).read_bytes())
        return {lang: pdf.target(site, lang) for lang in langs}

    monkeypatch.setattr(pdf, "render", render)
    for lang in pdf.LANGS:
        pdf.source(site, lang).parent.mkdir(parents=True, exist_ok=True)
        pdf.source(site, lang).write_text(f"<p>{lang}</p>", encoding="utf-8")
    printed(site)
    pdf.source(site, "zh").write_text("<p>zh, edited</p>", encoding="utf-8")
    for lang in pdf.LANGS:
        pdf.target(site, lang).unlink()
    written = printed(site)
    assert calls == [["en", "zh"], ["zh"]]
    assert written["en"].read_bytes() == b"%PDF <p>en</p>"
    assert written["zh"].read_bytes() == b"%PDF <p>zh, edited</p>"


# --- bad input: missing fonts fail, never ship boxes -------------------------------------

@pytest.fixture
def no_cjk_fonts(tmp_path, monkeypatch):
    """A fontconfig that knows only DejaVu: Chinese would print as boxes."""
    wait(list(JOBS.values()))  # the environment is the whole process's: no job may see this one
    conf = tmp_path / "fonts.conf"
    conf.write_text('<?xml version="1.0"?><fontconfig><dir>/usr/share/fonts/truetype/dejavu</dir>'
                    f"<cachedir>{tmp_path / 'cache'}</cachedir></fontconfig>", encoding="utf-8")
    monkeypatch.setenv("FONTCONFIG_FILE", str(conf))
    return conf


def test_missing_cjk_font_stops_the_build(no_cjk_fonts):
    with pytest.raises(pdf.PdfError, match="Noto Sans CJK SC"):
        pdf.check_fonts()
    with pytest.raises(pdf.PdfError, match="no installed font has '张'"):
        pdf.check_glyphs("张量 tensor")


def test_pdf_with_boxes_is_refused(no_cjk_fonts, tmp_path):
    from playwright.sync_api import sync_playwright

    page = tmp_path / "zh.html"
    page.write_text('<!doctype html><html lang="zh"><meta charset="utf-8"><p>张量与自动求导</p>', encoding="utf-8")
    boxes = tmp_path / "boxes.pdf"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=pdf.CHROMIUM, args=pdf.FLAGS, env=dict(os.environ))
        tab = browser.new_page()
        tab.goto(page.as_uri())
        tab.pdf(path=str(boxes))
        browser.close()
    assert "自动求导" in subprocess.run(["pdftotext", str(boxes), "-"], capture_output=True, text=True).stdout
    with pytest.raises(pdf.PdfError, match="is not embedded"):  # pdftotext alone would not notice
        pdf.check_pdf(boxes, "zh")
