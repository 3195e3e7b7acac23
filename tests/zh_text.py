"""The prose of a Chinese page, with everything that is not prose masked out.

Both tests/test_glossary.py and tests/test_typography.py read pages through
``prose()``: it blanks front matter, fenced code blocks (the code cells of the lab
notebooks too) and HTML comments such as ``<!-- output: ... -->`` line by line, so
line numbers stay those of the file. Within a line, ``inline()`` swaps inline code for
one placeholder character (CODE), keeps a link's or an image's text and drops its
address, and drops HTML tags and heading attribute lists (``{ #anchor }``).
"""

import re
from pathlib import Path

from tests.pages import DOCS

HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# Full-width punctuation: CJK symbols, full-width forms, and the curly quotes,
# ellipsis and dash that Chinese text uses as full-width marks.
FULL_PUNCT = "\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65\u2018\u2019\u201c\u201d\u2026\u2014\u00b7"
CODE = "\ue000"  # stands for one inline code span

FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)
FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[^\n]*\n.*?^[ \t]*(?P=fence)[ \t]*$", re.M | re.S)
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
REF_LINK = re.compile(r"!?\[([^\]]*)\]\[[^\]]*\]")
HTML_TAG = re.compile(r"</?[A-Za-z][^>\n]*>")
ATTR_LIST = re.compile(r"\s*\{[^{}\n]*\}\s*$")


def _blank(match: re.Match) -> str:
    return "\n" * match.group(0).count("\n")


def prose(text: str) -> list[str]:
    """The page's lines with front matter, fenced code and HTML comments blanked."""
    for pattern in (FRONT_MATTER, FENCE, HTML_COMMENT):
        text = pattern.sub(_blank, text)
    return text.split("\n")


def inline(line: str) -> str:
    """One prose line as a reader sees its words: code spans as CODE, links as their text."""
    line = INLINE_CODE.sub(CODE, line)
    line = LINK.sub(r"\1", line)
    line = REF_LINK.sub(r"\1", line)
    line = HTML_TAG.sub("", line)
    if line.lstrip().startswith("#"):
        line = ATTR_LIST.sub("", line)
    return line


def is_table(line: str) -> bool:
    return line.lstrip().startswith("|")


def where(path: Path) -> str:
    """docs/a/b.zh.md for a page of the site, the full path for any other file."""
    return path.relative_to(DOCS.parent).as_posix() if path.is_relative_to(DOCS.parent) else str(path)
