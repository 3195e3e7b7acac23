"""The second engine: ProperDocs builds the same site from the same mkdocs.yml.

ProperDocs (a fork of MkDocs 1.x, pinned in requirements.txt) is where the site can go
when MkDocs and Material stop getting fixes (CONTRIBUTING.md, "Build engine"). Its build starts in
the background once the session's MkDocs build is done, with the same snippet and lab
caches, so it runs nothing again (about 20 s on 2 cores). The tests then hold the two
sites side by side: the same files in both languages, the same output blocks, the same
search entries, and every file the same byte for byte but for ``EXPECTED``.
"""

import gzip
import json
import os
import re
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from tests.conftest import REPO_URL, ROOT, background

# What may differ between the two builds, and why.
EXPECTED = {
    "each engine names itself in the generator tag": re.compile(rb'<meta name="generator" content="[^"]*">'),
}
INDEXES = ("search/search_index.json", "zh/search/search_index.json")
OUTPUT_TITLE = re.compile('class="filename">(?:Output|输出) · '.encode())  # what output_blocks selects


def properdocs_build(site: Path) -> tuple[subprocess.CompletedProcess, Path]:
    out = site.parent / "site-properdocs"
    proc = subprocess.run(  # -f: ProperDocs looks for properdocs.yml and warns about mkdocs.yml
        [sys.executable, "-m", "properdocs", "build", "--strict", "-f", "mkdocs.yml", "-d", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "REPO_URL": REPO_URL},
    )
    return proc, out


def start(site: Path) -> Future:
    return background("properdocs", properdocs_build, site, yields=True)


@pytest.fixture(scope="session")
def sites(site) -> tuple[Path, Path]:
    proc, out = start(site).result()  # the same job when the build started it
    assert proc.returncode == 0, f"ProperDocs build failed:\n{proc.stderr[-4000:]}"
    return site, out


def files(root: Path) -> set[str]:
    """What the engine wrote: the PDFs are printed into the session's site afterwards (test_pdf.py)."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".pdf" not in p.suffixes}


def normalised(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".gz":  # gzip stores the time it was written; compare what it holds
        data = gzip.decompress(data)
    for pattern in EXPECTED.values():
        data = pattern.sub(b"", data)
    return data


def output_blocks(page: Path) -> list[str]:
    """Each output block's title, text and provenance line, in page order."""
    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    blocks = [title.find_parent("div").get_text() for title in soup.select(".filename")
              if title.get_text().startswith(("Output · ", "输出 · "))]
    return blocks + [p.get_text() for p in soup.select(".snippet-provenance")]


def test_properdocs_names_itself(sites):
    mkdocs, properdocs = sites
    assert "ProperDocs" in (properdocs / "index.html").read_text(encoding="utf-8")
    assert "ProperDocs" not in (mkdocs / "index.html").read_text(encoding="utf-8")


def test_same_pages_in_both_languages(sites):
    mkdocs, properdocs = sites
    assert files(mkdocs) == files(properdocs)
    assert {"index.html", "zh/index.html", "multi_gpu/ddp/index.html", "zh/multi_gpu/ddp/index.html"} <= files(mkdocs)


def test_same_output_blocks(sites):
    """Parsed only where a page differs at all: parsing all of them took 20 s of CPU, and a
    page the same byte for byte (test_every_file_the_same_but_for_what_is_expected) shows
    the same blocks."""
    mkdocs, properdocs = sites
    pages = sorted(p for p in files(mkdocs) if p.endswith(".html"))
    titles = sum(len(OUTPUT_TITLE.findall((mkdocs / p).read_bytes())) for p in pages)
    assert titles > 100, "the output blocks were not found: did their markup change?"
    differ = [p for p in pages if normalised(mkdocs / p) != normalised(properdocs / p)]
    assert {p: output_blocks(properdocs / p) for p in differ} == {p: output_blocks(mkdocs / p) for p in differ}


def test_same_search_entries(sites):
    for index in INDEXES:
        ours, theirs = (json.loads((root / index).read_text(encoding="utf-8"))["docs"] for root in sites)
        assert len(ours) > 100 and theirs == ours, index


def test_every_file_the_same_but_for_what_is_expected(sites):
    mkdocs, properdocs = sites
    differ = [f for f in sorted(files(mkdocs)) if normalised(mkdocs / f) != normalised(properdocs / f)]
    assert not differ, f"{len(differ)} files differ beyond {list(EXPECTED)}: {differ[:10]}"
