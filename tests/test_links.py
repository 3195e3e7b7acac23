"""External links are listed for a person to check, never fetched: the build has no network.

Internal links and anchors are checked by the strict build (see test_bad_input.py)."""

import re

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
