"""The strict build passes, yields both languages, and runs each snippet once."""

import html
import json
import re

import pytest
from sitebuild import output_blocks, snippets
from tests import check_cache
from tests.conftest import skip_if_a_twin_is_missing
from tests.pages import en_pages, is_lab, outputs, url_path


def html_of(site, page, lang):
    return (site / url_path(page, lang) / "index.html").read_text(encoding="utf-8")


def test_build_needs_no_network(build):
    proc, _, reason = build
    if reason:
        pytest.skip(f"cannot cut the network here ({reason}); the build ran online")
    skip_if_a_twin_is_missing(proc)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_build_has_both_languages(site):
    for page in en_pages():
        assert 'lang="en"' in html_of(site, page, "en")
        assert 'lang="zh"' in html_of(site, page, "zh")


def test_chinese_pages_label_their_controls_in_chinese(site):
    """Heading permalinks, the labs' copy buttons and the footer (hooks/material_fixes.py,
    sitebuild/labs.py, overrides/partials/copyright.html)."""
    for page in en_pages():
        zh = html_of(site, page, "zh")
        assert "本站由 <a" in zh, url_path(page, "zh")
        for english in ('title="Permanent link"', "Copy to Clipboard", "Copied!", "Made with"):
            assert english not in zh, f"{url_path(page, 'zh')}: {english}"
        if 'class="headerlink"' in zh:
            assert 'title="永久链接"' in zh, url_path(page, "zh")
        if "<clipboard-copy" in zh:
            assert '<clipboard-copy aria-label="复制"' in zh and ">已复制<" in zh, url_path(page, "zh")


def test_build_log_is_clean(site):
    log = (site.parent / "build.log").read_text(encoding="utf-8")
    assert not re.search(r"^(WARNING|ERROR)", log, re.M), log


def test_snippets_run_once_per_build(site):
    """Every snippet ran once for both languages: all of them from the empty cache of
    `make test-all`, those without a kept result under `make test` (tests/check_cache.py)."""
    log = (site.parent / "build.log").read_text(encoding="utf-8")
    lines = [(int(ran), int(kept)) for ran, kept in re.findall(r"(\d+) snippets ran, (\d+) from cache", log)]
    assert len(lines) == 1 and sum(lines[0]) == len(snippets.discover()), log
    assert check_cache.enabled() or lines[0][1] == 0, log


def test_outputs_on_both_pages(site, snippet_results):
    for page in en_pages():
        for path in outputs(page.read_text(encoding="utf-8")):
            result = snippet_results[path]
            first = result.stdout.strip().splitlines()[0]
            for lang, label in (("en", "Ran in this build on"), ("zh", "本次构建实际运行于")):
                text = visible_text(html_of(site, page, lang))
                assert first in text, f"{page}: {lang} page lacks {path}'s output"
                assert f"{label} {output_blocks.device(result.env['device'], output_blocks.LABELS[lang])}" in text


def test_each_language_has_its_own_search_index(site):
    """sitebuild/search_index.py: every page of a language in its index, and nothing else."""
    for lang, index in (("en", "search"), ("zh", "zh/search")):
        data = json.loads((site / index / "search_index.json").read_text(encoding="utf-8"))
        indexed = {doc["location"].split("#")[0] for doc in data["docs"]}
        expected = {url_path(page, lang).removeprefix("zh/") for page in en_pages()}
        assert indexed == expected, f"{lang}: missing {expected - indexed}, foreign {indexed - expected}"
        assert data["config"]["lang"] == (["en"] if lang == "en" else ["en", "zh"])


def test_each_lab_runs_once_and_both_languages_show_that_run(site):
    """sitebuild/labs.py: one run per lab; each language's download carries its outputs."""
    log = (site.parent / "build.log").read_text(encoding="utf-8")
    labs = sorted(p for p in en_pages() if is_lab(p))
    executed = sorted(re.findall(r"lab (docs/labs/\S+) executed", log))
    assert len(set(executed)) == len(executed) and set(executed) <= {f"docs/labs/{p.name}" for p in labs}
    assert check_cache.enabled() or executed == [f"docs/labs/{p.name}" for p in labs]  # an empty cache
    for lab in labs:
        name = lab.stem
        en, zh = (json.loads((site / f"{lang}labs/{name}/{name}.ipynb").read_text(encoding="utf-8"))
                  for lang in ("", "zh/"))
        outputs = [[cell["outputs"] for cell in nb["cells"] if cell["cell_type"] == "code"] for nb in (en, zh)]
        assert outputs[0] == outputs[1] and any(outputs[0]), name
        assert en["cells"][0]["source"] != zh["cells"][0]["source"], f"{name}: zh shows the English prose"


def visible_text(page_html):
    return html.unescape(re.sub(r"<[^>]+>", "", page_html))


def test_one_404_page_in_the_default_language_for_both(site):
    """The server's one 404.html: English chrome (not the last language built), both
    languages in the body, each linking to its home page (hooks/material_fixes.py)."""
    page = (site / "404.html").read_text(encoding="utf-8")
    assert '<html lang="en"' in page and "页面不存在 · PyTorch on GPUs</title>" in page
    assert not (site / "zh" / "404.html").exists()
    assert '<section lang="zh">' in page and "页面不存在" in page
    for home in re.findall(r'<article.*?href="([^"]+)".*?href="([^"]+)"', page, re.S)[0]:
        assert (site / home.lstrip("/") / "index.html").is_file(), home
