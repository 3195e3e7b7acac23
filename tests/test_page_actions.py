"""Page actions (sitebuild/page_actions.py, hooks/page_actions.py): with REPO_URL, every page of both languages links its own
source file and a prefilled issue form; without it, nothing is rendered and the build is unchanged.

The session build runs with REPO_URL set, as the Pages workflow does (tests/conftest.py);
the case without it loads the config and renders a page with the hook directly, with no
second build.
"""

import html
import logging
import os
import re
import subprocess
from datetime import datetime, timezone
from urllib.parse import parse_qs, urlsplit

from mkdocs.config import load_config
from mkdocs.structure.files import File
from mkdocs.structure.pages import Page

from sitebuild import build_info, page_actions, page_notebooks, print_pages, snippets
from tests.conftest import REPO_URL, ROOT
from tests.pages import DOCS, en_pages, twin, url_path

ACTION = re.compile(r'<a href="([^"]+)" title="([^"]+)"(?: aria-label="[^"]+")? class="md-content__button md-icon"')
# (English page, language): url_path() takes the English page for both languages.
PAGES = [(page, "en") for page in en_pages()] + [(page, "zh") for page in en_pages() if twin(page).is_file()]
TITLE = {"en": "Problem on the page “", "zh": "页面问题："}
LANGUAGE = {"en": "**Language:** English (en)", "zh": "**语言**：中文（zh）"}


def built_from() -> str:
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"]
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def actions(site, page, lang) -> dict[str, str]:
    """The page's action links by title, in the order Material and the hook render them."""
    text = (site / url_path(page, lang) / "index.html").read_text(encoding="utf-8")
    return {title: html.unescape(href) for href, title in ACTION.findall(text)}


def test_every_page_links_its_own_language_file(site):
    wrong = []
    for page, lang in PAGES:
        source = (page if lang == "en" else twin(page)).relative_to(ROOT).as_posix()  # docs/<page>.zh.md in zh
        hrefs = set(actions(site, page, lang).values())
        for expected in (f"{REPO_URL}/edit/main/{source}", f"{REPO_URL}/raw/main/{source}"):
            if expected not in hrefs:
                wrong.append(f"{url_path(page, lang) or '/'}: no link to {expected} among {sorted(hrefs)}")
    assert not wrong, "\n".join(wrong)


# The session's builds share one SOURCE_DATE_EPOCH (tests/conftest.py): every page carries its day.
BUILD_DAY = datetime.fromtimestamp(int(os.environ["SOURCE_DATE_EPOCH"]), timezone.utc).date().isoformat()


def test_every_page_offers_a_prefilled_report(site):
    commit, torch = built_from(), snippets.machine()["torch"]
    wrong = []
    for page, lang in PAGES:
        where = url_path(page, lang) or "/"
        reports = [href for href in actions(site, page, lang).values() if "/issues/new?" in href]
        if len(reports) != 1:
            wrong.append(f"{where}: {len(reports)} report links")
            continue
        url = urlsplit(reports[0])
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        body = query.get("body", "")
        checks = {
            "repository": f"{url.scheme}://{url.netloc}{url.path}" == f"{REPO_URL}/issues/new",
            "title in the page's language": query.get("title", "").startswith(TITLE[lang]),
            "page URL": f"/{url_path(page, lang)}\n" in body,
            "language": LANGUAGE[lang] in body,
            "commit": commit in body,
            "torch": f"torch {torch} · " in body,
            "build date": f" · {BUILD_DAY}\n" in body,  # one date for the whole build
        }
        wrong += [f"{where}: report link lacks the {what}: {query}" for what, ok in checks.items() if not ok]
    assert not wrong, "\n".join(wrong[:20])


def test_pages_with_a_notebook_offer_it_on_colab_in_their_language(site):
    wrong, offered = [], 0
    for page, lang in PAGES:
        source = page if lang == "en" else twin(page)
        notebook = page_notebooks.target(source)
        expected = ([f"https://colab.research.google.com/github/{REPO_URL.removeprefix('https://github.com/')}"
                     f"/blob/main/notebooks/{lang}/{notebook.relative_to(page_notebooks.OUT / lang).as_posix()}"]
                    if notebook.is_file() else [])
        links = [href for title, href in actions(site, page, lang).items()
                 if title == page_actions.LABELS[lang]["colab"]]
        offered += len(links)
        if links != expected:
            wrong.append(f"{url_path(page, lang) or '/'}: {links} instead of {expected}")
    assert not wrong, "\n".join(wrong)
    assert offered >= 40  # both languages


def test_colab_is_offered_only_for_a_github_repository():
    page = "pytorch/tensors.zh.md"
    assert page_actions.colab_url("https://github.com/o/r", page).endswith("/github/o/r/blob/main/notebooks/zh/pytorch/tensors.ipynb")
    assert page_actions.colab_url("https://gitlab.com/o/r", page) is None
    assert page_actions.colab_url("https://github.com/o/r", "glossary.md") is None  # no snippet, no notebook


def test_the_header_repository_link_makes_no_request(site):
    """Material's JavaScript asks api.github.com about any data-md-component="source"."""
    marked = [p for p in site.rglob("*.html") if 'data-md-component="source"' in p.read_text(encoding="utf-8")]
    assert not marked, marked[:5]
    assert f'<a href="{REPO_URL}" title=' in (site / "index.html").read_text(encoding="utf-8")


def test_the_report_url_is_one_encoded_link():
    facts = {"commit": "abc", "device": "cpu: x", "torch": "2.13.0+cpu", "date": "2026-01-01"}
    url = page_actions.report_url("https://github.com/o/r/", "A & B #1?", "https://h/zh/a/", "zh", facts)
    parts = urlsplit(url)
    assert (parts.netloc, parts.path) == ("github.com", "/o/r/issues/new")
    assert not re.search(r"[\s#&](?!body=)", url.split("?", 1)[1]), url
    query = parse_qs(parts.query)
    assert query["title"] == ["页面问题：A & B #1?"]
    assert query["body"][0].startswith("**页面**：https://h/zh/a/\n**语言**：中文（zh）\n**构建所用的提交**：abc\n")


def test_without_repo_url_nothing_is_rendered(monkeypatch, caplog):
    monkeypatch.delenv("REPO_URL", raising=False)
    config = load_config(str(ROOT / "mkdocs.yml"))
    assert config.repo_url is None
    hook = config.plugins["hooks/page_actions.py"]  # MkDocs loads each hook as a plugin
    config = hook.on_config(config)
    assert config.edit_uri is None
    with caplog.at_level(logging.WARNING):
        page = Page(None, File("pytorch/tensors.zh.md", str(DOCS), config.site_dir, True), config)
    assert page.edit_url is None  # Material renders no edit or view link
    assert not caplog.records, [r.getMessage() for r in caplog.records]  # strict would fail on one
    rendered = '<html><article class="md-content__inner md-typeset"><h1>T</h1></article></html>'
    assert hook.on_post_page(rendered, page, config) == rendered


def test_the_pages_workflow_sets_repo_url():
    workflow = (ROOT / ".github" / "workflows" / "pages.yml").read_text(encoding="utf-8")
    assert "REPO_URL: ${{ github.server_url }}/${{ github.repository }}" in workflow


def test_a_build_reads_the_clock_once(monkeypatch):
    """The date in the report links and on the print cover is read once per build, so a build
    that crosses midnight gives every page the same one; SOURCE_DATE_EPOCH sets it."""
    before_midnight = 1796687999  # 2026-12-07 23:59:59 UTC
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(before_midnight))
    page_actions.forget_facts()
    assert page_actions.build_facts()["date"] == "2026-12-07"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(before_midnight + 1))  # the clock moves on mid-build
    assert page_actions.build_facts()["date"] == "2026-12-07"
    assert build_info.built().strftime(print_pages.BUILT) == "2026-12-07 23:59 UTC"
    page_actions.forget_facts()  # the next build
    assert page_actions.build_facts()["date"] == "2026-12-08"
    page_actions.forget_facts()
