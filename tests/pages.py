"""Reading the docs tree: page pairs, headings, anchors, includes and code."""

import re
from pathlib import Path

import jupytext

from sitebuild.excerpts import INCLUDE, OUTPUT

DOCS = Path(__file__).resolve().parent.parent / "docs"
FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=fence)\s*$", re.M | re.S)
HEADING = re.compile(r"^#{1,6} .*$", re.M)
ANCHOR = re.compile(r"\{\s*#([\w-]+)\s*\}\s*$")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)")


def en_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if not p.name.endswith(".zh.md"))


def zh_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.zh.md"))


def twin(page: Path) -> Path:
    """docs/a/b.md <-> docs/a/b.zh.md"""
    if page.name.endswith(".zh.md"):
        return page.with_name(page.name.removesuffix(".zh.md") + ".md")
    return page.with_suffix(".zh.md")


def url_path(page: Path, lang: str) -> str:
    """docs/a/b.md -> 'a/b/' in en, 'zh/a/b/' in zh; the home page is '' or 'zh/'."""
    rel = page.relative_to(DOCS).with_suffix("")
    parts = [*rel.parent.parts] + ([] if rel.name == "index" else [rel.name])
    return "".join(f"{part}/" for part in ([] if lang == "en" else ["zh"]) + parts)


def is_lab(page: Path) -> bool:
    return page.parent.name == "labs"


def without_code(text: str) -> str:
    """The text with fenced blocks removed, so '# comment' lines are not headings."""
    return FENCE.sub("", text)


def headings(text: str) -> list[str]:
    return HEADING.findall(without_code(text))


def anchors(text: str) -> list[str]:
    return [m.group(1) for h in headings(text) if (m := ANCHOR.search(h))]


def includes(text: str) -> list[str]:
    """What each include names: a file, or a file and one of its sections ("x.py:name")."""
    return [":".join(filter(None, m.groups())) for m in INCLUDE.finditer(text)]


def outputs(text: str) -> list[str]:
    return OUTPUT.findall(text)


def images(text: str) -> list[str]:
    return IMAGE.findall(text)


def code_blocks(text: str) -> list[str]:
    return [m.group("body") for m in FENCE.finditer(text)]


def notebook_code(page: Path) -> list[str]:
    notebook = jupytext.read(page)
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]
