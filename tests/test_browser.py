"""The built site in a real browser: Debian's Chromium driven by Playwright.

Every page in both languages, and the one 404 page: no console error, no failed
load, no request to any host but the local server, no serious or critical axe-core
violation (colour contrast on the pages that cover every page's styled contexts:
tests/contrast_cover.py), and a language switcher that links to the same page in the other
language (clicked on one page per language). Plus search in both languages, the
copy button, the palette toggle, and screenshots of both home pages (saved under
test-artifacts/).

Under `make test`, a page check, or a test marked ``visits``, that passed is skipped while
the pages it loads are unchanged: their HTML, the files they load, a search index
(tests/check_cache.py). The screenshots are taken every time: they are for a person to see.
"""

import asyncio
import functools
import http.server
import json
import re
import threading
from concurrent.futures import Future
from pathlib import Path
from urllib.parse import parse_qs, quote, urljoin, urlsplit

import pytest
from axe_playwright_python.async_playwright import Axe as AsyncAxe
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import async_playwright
from playwright.sync_api import sync_playwright

from sitebuild import output_blocks, page_actions, records
from tests import check_cache, contrast_cover
from tests.conftest import KEY, REPO_URL, ROOT, background
from tests.pages import en_pages, url_path

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = ROOT / "test-artifacts"
PAGE_TIMEOUT = 120  # seconds for one page check; on one loaded core they take under 15


NOT_FOUND = "404.html"  # one page for both languages; its switcher leads to the Chinese home
PATHS = [url_path(p, lang) for lang in ("en", "zh") for p in en_pages()] + [NOT_FOUND]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@functools.lru_cache(maxsize=None)
def serve(site: Path) -> str:
    """The site on a local port, for the rest of the session (a daemon thread)."""
    handler = functools.partial(QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/"


@pytest.fixture(scope="session")
def server(site):
    return serve(site)


def chromium() -> str:
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} missing: apt-get install chromium fonts-noto-cjk (.ci/run does)")
    return CHROMIUM


@pytest.fixture(scope="module")  # closed before tests/test_pdf.py starts a Playwright of its own
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def tab(request, site):
    """A new tab; under `make test`, a test marked ``visits`` that passed on the same pages is
    skipped before the browser starts."""
    mark = request.node.get_closest_marker("visits")
    if mark and check_cache.enabled():
        key = request.node.stash[KEY] = visits_key(request.node.nodeid, site, mark.args)
        if check_cache.get(key) is not None:
            pytest.skip("passed before on the same pages, machine and code (tests/check_cache.py); "
                        "make test-all runs it")
    context = request.getfixturevalue("browser").new_context(permissions=["clipboard-read", "clipboard-write"])
    yield context.new_page()
    context.close()


def visits_key(test: str, site: Path, paths) -> str:
    """The pages a test loads: each page's key, or the hash of the files a glob names (a search
    index, the search worker)."""
    inputs = [check_cache.digest(b"".join(f.read_bytes() for f in sorted(site.glob(path))))
              if path.endswith((".json", ".js")) else page_key(site, path) for path in paths]
    return check_cache.key(f"test {test}", inputs, [Path(__file__)])


class Leaving:
    """Set once the test itself navigates away or closes the tab; ``handlers``: what
    ``record_problems`` listens with."""
    now = False
    handlers: dict = {}


def record_problems(tab, server, leaving: Leaving):
    """Console errors, page errors, failed or 4xx/5xx loads, and foreign requests.

    A request that Chromium aborts (net::ERR_ABORTED) after the test has started to
    leave the page was cancelled by the test, not by a defect: on a slow machine the
    search worker may still be fetching lunr then. Every other failure counts.
    """
    local = urlsplit(server).netloc
    problems = []

    def failed(request):
        if not (leaving.now and "ERR_ABORTED" in (request.failure or "")):
            problems.append(f"failed: {request.url} {request.failure}")

    handlers = {
        "console": lambda m: m.type == "error" and problems.append(f"console: {m.text}"),
        "pageerror": lambda e: problems.append(f"page error: {e}"),
        "requestfailed": failed,
        "response": lambda r: r.status >= 400 and problems.append(f"{r.status}: {r.url}"),
        "request": lambda r: urlsplit(r.url).scheme in ("http", "https")
        and urlsplit(r.url).netloc != local and problems.append(f"third-party: {r.url}"),
    }
    for event, handler in handlers.items():
        tab.on(event, handler)
    leaving.handlers = handlers  # for forget_problems
    return problems


def forget_problems(tab, leaving):
    """Stops recording what ``record_problems(tab, ..., leaving)`` records."""
    for event, handler in leaving.handlers.items():
        tab.remove_listener(event, handler)


async def check_pages(context, server, paths: list[str], colour: dict, reports: dict[str, list[str]]):
    """Page after page in one tab, with about:blank loaded in between: once it has loaded, no
    event of the page before can come. A tab whose check did not finish is replaced."""
    tab = await context.new_page()
    while paths:
        path = paths.pop(0)
        try:  # a page that never settles is a finding, not a stalled suite
            reports[path] = await asyncio.wait_for(check_tab(tab, server, path, colour[path]), PAGE_TIMEOUT)
        except asyncio.TimeoutError:
            reports[path] = [f"the page check did not finish within {PAGE_TIMEOUT} s"]
            await tab.close()
            tab = await context.new_page()
    await tab.close()


def other_language(path: str) -> str:
    if path == NOT_FOUND:
        return "zh/"
    return path.removeprefix("zh/") if path.startswith("zh/") else "zh/" + path


def switcher(tab, path: str):
    """The language selector's link to the other language."""
    return tab.locator(f".md-select__link[hreflang={'en' if path.startswith('zh/') else 'zh'}]")


# The axe-core rules each page check runs, in the page (axe-core 4.12, pinned with
# axe-playwright-python). axe gives every finding its rule's impact (finalizeRuleResult), and only
# serious and critical findings count here, so a rule that can find nothing worse than moderate
# is not run: the same findings for 20 to 40 % less of axe's CPU on a page. The colour rules
# (cat.color: color-contrast and link-in-text-block, axe's two costliest) run on the pages of
# tests/contrast_cover.py only, whose contexts cover every page's: on the other pages they would
# measure the same CSS on the same kinds of element again. ``axe._audit`` is axe's own rule list;
# if a new axe renames it, every page check reports the error.
AXE_RUN = """async colour => {
  const rules = {};
  for (const rule of axe._audit.rules)
    if (!['serious', 'critical'].includes(rule.impact) || (!colour && rule.tags.includes('cat.color')))
      rules[rule.id] = {enabled: false};
  return (await axe.run(document, {resultTypes: ['violations'], rules})).violations;
}"""
AXE_SCRIPT = AsyncAxe().axe_script


def html_file(site: Path, path: str) -> Path:
    return site / (path if path.endswith(".html") else path + "index.html")


# Each output's provenance line ("Ran in this build on …", "Recorded on …"), in every tab of
# its block, each excerpt's block included: below its code block, not overlapping it, not
# covered at its top or bottom; and each tab, clicked, shows its block.
PROVENANCE_CLEAR = """() => {
  const found = new Set();
  document.querySelectorAll('details').forEach(d => d.open = true);  // the whole output, folded below excerpts
  const measure = (scope, where) => {
    for (const line of scope.querySelectorAll('.snippet-provenance')) {
      if (!line.offsetParent) continue;  // in a tab not shown
      const block = line.previousElementSibling;
      line.scrollIntoView({block: 'center'});
      const mine = line.getBoundingClientRect(), above = block.getBoundingClientRect();
      const name = `${where}: "${line.innerText.slice(0, 50)}"`;
      if (mine.top < above.bottom - 0.5)
        found.add(`${name} overlaps the block above it by ${(above.bottom - mine.top).toFixed(1)} px`);
      for (const y of [mine.top + 1, mine.bottom - 1]) {
        const hit = document.elementFromPoint(mine.left + 4, y);
        if (!line.contains(hit)) found.add(`${name} is covered by ${hit ? hit.tagName.toLowerCase() + '.' + hit.className : 'nothing'}`);
      }
    }
  };
  measure(document, 'first tab');
  for (const set of document.querySelectorAll('.tabbed-set')) {  // switched as a reader does, by its label
    const labels = [...set.querySelectorAll(':scope > .tabbed-labels > label')];
    const blocks = [...set.querySelectorAll(':scope > .tabbed-content > .tabbed-block')];
    labels.forEach((label, i) => {
      label.click();
      if (!blocks[i] || !blocks[i].offsetHeight) found.add(`tab "${label.innerText}" shows nothing when clicked`);
      measure(set, `tab ${i + 1}`);
    });
    if (labels.length) labels[0].click();
  }
  return [...found];
}"""


async def check_tab(tab, server, path, colour: bool) -> list[str]:
    """The checks of one page, in its own tab.

    The switcher is a plain link, so its target is checked here without following
    it; test_language_switcher_lands_on_the_same_page clicks it.
    """
    leaving = Leaving()
    problems = record_problems(tab, server, leaving)
    try:
        await tab.goto(server + path, wait_until="networkidle")
        if not await tab.locator("h1").count():
            problems.append("no h1")
        await tab.evaluate(AXE_SCRIPT)
        violations = await tab.evaluate(AXE_RUN, colour)
        problems += [f"axe {v['id']} ({v['impact']}): {v['help']} -> {[n['target'] for n in v['nodes']][:3]}"
                     for v in violations]  # serious or critical only: AXE_RUN runs no other rule
        problems += await tab.evaluate(PROVENANCE_CLEAR)
        target = urljoin(tab.url, await switcher(tab, path).get_attribute("href"))
        if target != server + other_language(path):
            problems.append(f"language switcher links to {target}, not {server + other_language(path)}")
    except PlaywrightError as error:
        problems.append(f"{type(error).__name__}: {error}")
    finally:
        leaving.now = True
        try:
            await tab.goto("about:blank")
        except PlaywrightError as error:
            problems.append(f"leaving the page: {type(error).__name__}: {error}")
        forget_problems(tab, leaving)
    return problems


def check_all(server, site: Path) -> dict[str, list[str]]:
    """Every page checked, in four tabs at once: most of a page check is waiting.

    The tabs share one browser context: a fresh context per page cost about 40 %
    more CPU (axe-core's script compiled anew each time), and a page check changes no
    state that another could see. Each tab checks page after page: a new tab per page
    cost about a fifth more CPU (81 against 67 core-s for the 93 pages, 2-core AMX Xeon).
    Under `make test`, a page that passed is not checked again until its HTML or a file
    it loads changes (tests/check_cache.py).

    Each page's search worker gets its language's index without documents: building the
    real index anew on every page cost a quarter of the page checks' CPU, and
    test_search_finds_the_page loads the real one in both languages.
    """
    contrast = contrast_cover.cover({path: html_file(site, path) for path in PATHS})
    colour = {path: path in contrast for path in PATHS}
    keys = {path: page_key(site, path, colour[path]) for path in PATHS}
    reports = {path: [] for path in PATHS if check_cache.get(keys[path]) is not None}
    todo = [path for path in PATHS if path not in reports]
    reports.update(check_in_tabs(server, site, todo, colour) if todo else {})
    for path in todo:
        if not reports[path]:
            check_cache.put(keys[path], [])
    return reports


def check_in_tabs(server, site: Path, paths: list[str], colour: dict, tabs: int = 4) -> dict[str, list[str]]:
    """``check_tab`` on each of these pages, in this many tabs of one browser."""
    async def run():
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=chromium(), args=FLAGS)
            context = await browser.new_context()
            await context.route("**/search/search_index.json", functools.partial(without_documents, site))
            found, left = {}, list(paths)
            await asyncio.gather(*(check_pages(context, server, left, colour, found) for _ in range(tabs)))
            await browser.close()
        return found
    return asyncio.run(run())


async def without_documents(site: Path, route):
    """The requested search index's configuration, with an empty list of documents."""
    await route.fulfill(content_type="application/json", body=empty_index(site / urlsplit(route.request.url).path[1:]))


@functools.lru_cache(maxsize=None)
def empty_index(index: Path) -> str:
    return json.dumps({"config": json.loads(index.read_text(encoding="utf-8"))["config"], "docs": []})


LINKED = re.compile(r'<a\s[^>]*href="([^"#?:]+)')


def page_key(site: Path, path: str, colour: bool | None = None) -> str:
    """The page's HTML, every local file it loads, whether each page it links exists, and
    whether the colour rules run on it."""
    html = html_file(site, path)
    text = without_commit(html.read_text(encoding="utf-8"), page_actions.build_facts()["commit"])
    linked = sorted(ref for ref in set(LINKED.findall(text)) if not (html.parent / ref).resolve().exists())
    return check_cache.key(f"page {path}", [check_cache.digest(text.encode()), check_cache.loaded(html, text),
                                            linked, colour],
                           [Path(__file__)])


def without_commit(text: str, commit: str) -> str:
    """Every page's "report a problem" link names the commit (and "+ uncommitted changes"):
    kept in the key, each commit and the first edit after it would re-check every page."""
    return text.replace(quote(commit, safe=""), "")


def start(site: Path) -> Future:
    """The page checks, in the background from the moment the site is built.

    They take the cores that the other tests leave idle (conftest.background, ``yields``):
    conftest.py moves their test items to the end of the session, so that the other tests
    run meanwhile.
    """
    return background("page checks", check_all, serve(site), site, yields=True)


@pytest.fixture(scope="session")
def page_reports(site):
    return start(site).result()  # the same job when conftest.py started it


@pytest.mark.parametrize("path", PATHS)
def test_page_in_browser(page_reports, path):
    assert not page_reports[path], "\n".join(page_reports[path])


PAGE = """<!doctype html><html lang="en"><head><title>{name}</title></head><body><main><h1>{name}</h1>
<a class="md-select__link" hreflang="zh" href="../zh/{name}/">中文</a>{extra}</main></body></html>"""
NOISY = """<img src="missing.png" alt="gone"><script>console.error("noisy at load");
setInterval(() => console.error("noisy still running"), 5)</script>"""


@pytest.mark.reads()  # this file and the machine only
def test_each_page_checked_in_a_shared_tab_gets_its_own_problems(tmp_path):
    """The page checks load page after page in one tab (check_pages): what a page does while it
    is checked is reported for it, and the page after it starts clean, though the page before
    would go on logging errors if it were not left for about:blank first."""
    for name, extra in (("noisy", NOISY), ("clean", "")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "index.html").write_text(PAGE.format(name=name, extra=extra), encoding="utf-8")
    paths = ["noisy/", "clean/"]
    reports = check_in_tabs(serve(tmp_path), tmp_path, paths, {p: False for p in paths}, tabs=1)
    assert reports["clean/"] == []
    noisy = "\n".join(reports["noisy/"])
    for problem in ("console: noisy at load", "404: ", "missing.png", "console: noisy still running"):
        assert problem in noisy, noisy


# A button with no name (critical), a skipped heading level (moderate), pale text (serious, a colour rule).
FINDINGS = '<button></button><h4>a skipped level</h4><p style="color:#ccc;background:#fff">pale text</p>'


@pytest.mark.reads()  # this file and the machine only
def test_axe_reports_what_is_serious_or_critical_and_colour_where_asked(tmp_path):
    """AXE_RUN: the same page, checked with and without the colour rules. A moderate finding is
    never reported, the critical one always, the serious colour one only where asked."""
    paths = ["colour/", "elsewhere/"]
    for path in paths:
        (tmp_path / path).mkdir()
        (tmp_path / path / "index.html").write_text(PAGE.format(name=path[:-1], extra=FINDINGS), encoding="utf-8")
    reports = check_in_tabs(serve(tmp_path), tmp_path, paths, {"colour/": True, "elsewhere/": False}, tabs=1)
    found = {path: sorted(line.split(":")[0] for line in lines) for path, lines in reports.items()}
    assert found == {"colour/": ["axe button-name (critical)", "axe color-contrast (serious)"],
                     "elsewhere/": ["axe button-name (critical)"]}, reports


def test_visits_key_follows_the_pages_visited_and_no_other(tmp_path):
    """A kept browser test runs again when a page it loads changes, and only then."""
    for folder in ("", "zh/", "search/"):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "index.html").write_text(f"<h1>{folder}</h1>", encoding="utf-8")
    index = tmp_path / "search" / "search_index.json"
    index.write_text("{}", encoding="utf-8")
    key = lambda: visits_key("test", tmp_path, ["", "search/search_index.json"])
    first = key()
    (tmp_path / "zh" / "index.html").write_text("<h1>changed</h1>", encoding="utf-8")
    assert key() == first
    for changed in (index, tmp_path / "index.html"):
        changed.write_text(changed.read_text(encoding="utf-8") + " ", encoding="utf-8")
        assert key() != first
        first = key()


def test_contrast_is_checked_wherever_a_page_brings_a_new_styled_context(tmp_path):
    """A page whose elements all sit in contexts another page has adds nothing; text in a new
    colour or a new container does, even on a page that is otherwise the same."""
    pages = {"full": '<div class="admonition note"><p>a <a href="x"><code>b</code></a></p></div>',
             "part": '<div class="admonition note"><p>a <a href="y">link</a></p></div>',
             "grey": '<div class="admonition note"><p><span style="color:#ddd">faint</span></p></div>',
             "tip": '<div class="admonition tip"><p>a <a href="x"><code>b</code></a></p></div>'}
    for name, body in pages.items():
        (tmp_path / f"{name}.html").write_text(f"<html><body>{body}</body></html>", encoding="utf-8")
    assert contrast_cover.cover({name: tmp_path / f"{name}.html" for name in pages}) == {"full", "grey", "tip"}


def test_page_key_ignores_the_commit_and_follows_the_text():
    """A new commit, or the first edit after it, must not re-check pages it did not change."""
    def page(commit: str, text: str) -> str:
        facts = {"commit": commit, "device": "cpu", "torch": "2", "date": "2026-12-05"}
        link = page_actions.report_url(REPO_URL, "T", "http://127.0.0.1/", "zh", facts)
        return without_commit(f'<a href="{link}">report</a><p>{text}</p>', commit)

    first = page("a" * 40, "Tensors")
    assert page("b" * 40 + " + uncommitted changes", "Tensors") == first
    assert page("b" * 40, "Tensors, changed") != first


def visiting(values, *paths):
    """A test's parameters, and the pages the test loads with them (its ``visits`` mark)."""
    return pytest.param(*(values if isinstance(values, tuple) else (values,)), marks=pytest.mark.visits(*paths))


def home(lang: str) -> str:
    return "zh/" if lang == "zh" else ""


@pytest.mark.parametrize("path", [visiting(p, p, other_language(p)) for p in ("gpu/check_gpu/", "zh/gpu/check_gpu/")])
def test_language_switcher_lands_on_the_same_page(tab, server, path):
    """The selector as a reader uses it: hover, click, and the other language's page loads."""
    leaving = Leaving()
    problems = record_problems(tab, server, leaving)
    tab.goto(server + path, wait_until="networkidle")
    tab.locator(".md-header__option .md-select").first.hover()
    leaving.now = True
    with tab.expect_navigation():
        switcher(tab, path).click()
    assert tab.url == server + other_language(path)
    assert not problems


WORKER = "assets/javascripts/workers/search.*.min.js"  # Material's, patched by sitebuild/search_index.py


def searching(case: tuple):
    """A search test's parameters; it loads the home page, its index and the search worker."""
    return visiting(case, home(case[0]), home(case[0]) + "search/search_index.json", WORKER)


def search(tab, server, lang: str, query: str):
    """The results of ``query`` typed on the home page of ``lang``."""
    tab.goto(server + home(lang), wait_until="networkidle")
    tab.locator(".md-search__input").fill(query)  # all at once: no results for a partial query
    tab.keyboard.press("End")  # Material searches on key events; the IME-style fill needs one
    tab.locator(".md-search-result__item a").first.wait_for(timeout=30_000)  # page checks run meanwhile
    return tab.locator(".md-search-result__item")


@pytest.mark.parametrize("lang, query, expected", [searching(case) for case in (
    ("zh", "自动求导", "zh/pytorch/autograd/"),
    ("zh", "数据并行", "zh/multi_gpu/data_parallel/"),
    ("zh", "DataParallel", "zh/multi_gpu/data_parallel/"),
    # The page titled 「任意设备上的张量」, not 「用 DTensor 做张量并行」, whose rarer word
    # 张量并行 the query's trailing wildcard matched as fully (sitebuild/search_index.py)
    ("zh", "张量", "zh/pytorch/tensors/"),
    ("en", "autograd", "pytorch/autograd/"),
    ("en", "DataParallel", "multi_gpu/data_parallel/"))
])
def test_search_finds_the_page(tab, server, lang, query, expected):
    """The page comes first, and every result is in the reader's language (sitebuild/search_index.py)."""
    links = search(tab, server, lang, query).locator("a").evaluate_all("links => links.map(a => a.href)")
    paths = [urlsplit(link).path.removeprefix("/") for link in links]  # Material adds ?h=<query>
    assert paths[0] == expected, paths
    other = [p for p in paths if p.startswith("zh/") != (lang == "zh")]
    assert not other, f"{lang} search for {query!r} lists pages of the other language: {other}"


@pytest.mark.parametrize("lang, query", [searching(("zh", "张量"))])
def test_search_marks_the_glossary_term_whole(tab, server, lang, query):
    """张量 is searched as itself: no lone 张, the measure word of 这张表 and 这张图."""
    results = search(tab, server, lang, query)
    marked = results.locator("mark").all_text_contents()  # in the folded results too
    assert marked and all(text.startswith(query) for text in marked), sorted(set(marked))
    links = results.locator("a").evaluate_all("links => links.map(a => a.href)")
    highlighted = {parse_qs(urlsplit(link).query).get("h", [""])[0] for link in links}  # what the page marks
    assert highlighted - {""} == {query}, highlighted  # "": a page listed for its sections only


@pytest.mark.visits("pytorch/tensors/")
def test_copy_button_copies_the_code(tab, server):
    tab.goto(server + "pytorch/tensors/", wait_until="networkidle")
    block = tab.locator(".highlight").filter(has=tab.locator(".md-code__button")).first
    expected = block.locator("code").inner_text().rstrip()
    block.hover()
    block.locator(".md-code__button").first.click()
    assert tab.evaluate("navigator.clipboard.readText()").rstrip() == expected


@pytest.mark.visits("")
def test_palette_toggle_switches_scheme(tab, server):
    tab.goto(server, wait_until="networkidle")
    scheme = lambda: tab.evaluate("document.body.getAttribute('data-md-color-scheme')")
    before = scheme()
    tab.locator("label.md-header__button[for^=__palette]:visible").first.click()
    assert {before, scheme()} == {"default", "slate"}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_home_screenshot(tab, server, lang):
    """Saved for a person to look at: the Chinese one must show CJK glyphs, not boxes."""
    tab.goto(server + home(lang), wait_until="networkidle")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"home-{lang}.png"
    tab.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


@pytest.mark.parametrize("lang", [visiting(lang, home(lang) + "pytorch/tensors/") for lang in ("en", "zh")])
def test_output_tabs_show_the_build_then_each_record(tab, server, lang):
    """The build's own run is the first tab; a current record's tab shows its run and provenance."""
    path = "snippets/pytorch/tensors.py"
    shown = [r for r in records.load() if r.status(path)[0] in ("current", "failed")]
    if not shown:
        pytest.skip(f"no record holds today's {path}: nothing to show beside the build")
    labels = output_blocks.LABELS[lang]
    tab.goto(server + home(lang) + "pytorch/tensors/", wait_until="networkidle")
    tab.locator("details summary").filter(has_text=labels["whole"]).click()  # the whole output, folded
    tabs = tab.locator(".tabbed-set").filter(has_text=labels["build"]).last
    names = [name.strip() for name in tabs.locator(".tabbed-labels label").all_inner_texts()]
    assert names == [labels["build"]] + [output_blocks.record_label(r, labels) for r in shown]
    tabs.locator(".tabbed-labels label").nth(1).click()
    provenance = tabs.locator(".tabbed-block").nth(1).locator(".snippet-provenance")
    assert provenance.inner_text().startswith(f"{labels['recorded']} {output_blocks.device(shown[0].machine['device'], labels)}")
    ARTIFACTS.mkdir(exist_ok=True)
    tabs.screenshot(path=str(ARTIFACTS / f"record-tabs-{lang}.png"))


@pytest.mark.parametrize("lang", [visiting(lang, home(lang) + "compile/torch_compile/") for lang in ("en", "zh")])
def test_a_stale_tab_says_what_it_is_whole_on_a_phone(tab, server, lang):
    """A record's tab for an earlier version of the script: its label, in words and a dashed
    frame, fits a 360-pixel screen whole once chosen, and a note above its output says the same."""
    path = "snippets/compile/torch_compile.py"
    if not any(r.status(path)[0] == "stale" for r in output_blocks.with_tabs(path, records.load())):
        pytest.skip(f"no record holds an earlier version of {path} alone: no stale tab to show")
    labels = output_blocks.LABELS[lang]
    tab.set_viewport_size({"width": 360, "height": 640})
    tab.goto(server + home(lang) + "compile/torch_compile/", wait_until="networkidle")
    tab.locator("details summary").filter(has_text=labels["whole"]).click()
    label = tab.locator(".tabbed-labels label:has(.snippet-stale)")
    label.click()
    tab.wait_for_timeout(500)  # Material scrolls the row of tabs to the chosen one
    box, row = label.bounding_box(), label.locator("xpath=..").bounding_box()
    assert labels["earlier"] in label.inner_text() and row["x"] - 1 <= box["x"] and box["x"] + box["width"] <= min(
        row["x"] + row["width"], 360) + 1, f"the label is cut: {box} in {row}"
    assert label.evaluate("l => getComputedStyle(l).borderTopStyle") == "dashed"
    note = tab.locator(".tabbed-block:visible .snippet-stale-note")
    assert note.is_visible() and note.inner_text().startswith(labels["earlier_note"].split("{")[0])
    label.evaluate("l => { l.scrollIntoView({block: 'start'}); window.scrollBy(0, -90); }")  # below the header
    ARTIFACTS.mkdir(exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"stale-tab-{lang}.png"))
