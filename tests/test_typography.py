"""Chinese typography of the zh pages, after 中文文案排版指北.

The convention is sparanoid's *Chinese Copywriting Guidelines* (中文文案排版指北,
https://github.com/sparanoid/chinese-copywriting-guidelines): a space between Han
characters and Latin letters or Arabic numerals, none between Han characters and
full-width punctuation. This site treats inline code like a Latin word. Markdown
adds one rule of its own: a line break inside a paragraph renders as a space, so
Chinese prose is never hard-wrapped (one paragraph, one source line).

Checked in every docs/**/*.zh.md page, the markdown cells of the lab notebooks
included, in prose only (see tests/zh_text.py for what is masked):

- no line break inside a paragraph next to a Han character or full-width
  punctuation (between two Han characters it renders as a stray space; after
  full-width punctuation too; next to a Latin word it is merely a wrapped line, which
  the one-line rule forbids as well);
- no Latin letter, digit or inline code glued to a Han character. Tables are not
  checked (their cells are labels, units and API names); link addresses, HTML tags
  and comments, heading anchors and front matter are masked; a title quoted in
  《书名号》 is kept as its author wrote it; full-width punctuation needs no space;
- a bold label is written ``**标签**：正文``, not ``**标签。**正文`` or ``**标签：**正文``.
"""

import re
from pathlib import Path

import pytest
from tests.pages import DOCS, zh_pages
from tests.zh_text import CODE, FULL_PUNCT, HAN, inline, is_table, prose, where

CJK = HAN + FULL_PUNCT
GLUED = re.compile(rf"(?=([{HAN}][A-Za-z0-9{CODE}]|[A-Za-z0-9{CODE}][{HAN}]))")  # overlapping
BOLD_LABEL = re.compile(rf"\*\*[^*\n]{{1,16}}[。：:.]\*\*(?=[^\s*])")
TITLE = re.compile(r"《[^》\n]*》")
# A line that starts a new block rather than continuing the paragraph above it.
BLOCK_START = re.compile(r"^\s*(#|\||[-*+]\s|\d+[.)]\s|>|!!!|\?\?\?|===|<|---|\[\^|\*\[|--8<--|:)")
# Emphasis markers around the first or last character of a line.
MARKS = "*_~"


def hard_breaks(lines: list[str]) -> list[int]:
    """Line numbers of lines that continue a paragraph across a break beside Chinese text."""
    found = []
    for number in range(1, len(lines)):
        before, line = lines[number - 1].rstrip(), lines[number].strip()
        if not before.strip() or not line or BLOCK_START.match(line):
            continue
        if is_table(before) or before.lstrip().startswith(("#", "!!!", "???", "===")):
            continue
        if before.endswith(("  ", "\\")):  # an explicit Markdown line break
            continue
        last, first = before.rstrip(MARKS)[-1:], line.lstrip(MARKS)[:1]
        if re.match(rf"[{CJK}]", last) or re.match(rf"[{CJK}]", first):
            found.append(number + 1)
    return found


def glued(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, what) for Latin, digits or code touching Han without a space."""
    found = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or is_table(line):
            continue
        for match in BOLD_LABEL.finditer(line):
            found.append((number, f"bold label {match.group(0)!r}: write **标签**：正文"))
        text = TITLE.sub("《》", inline(line).replace("**", ""))
        for match in GLUED.finditer(text):
            start = max(match.start() - 6, 0)
            context = text[start:match.start() + 8].replace(CODE, "`…`")
            found.append((number, f"no space in {context!r}"))
    return found


def problems(path: Path) -> list[str]:
    lines = prose(path.read_text(encoding="utf-8"))
    found = [f"{where(path)}:{n}: hard line break inside a Chinese paragraph" for n in hard_breaks(lines)]
    found += [f"{where(path)}:{n}: {what}" for n, what in glued(lines)]
    return sorted(found, key=lambda f: int(f.split(":")[1]))


@pytest.mark.parametrize("page", zh_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_typography(page):
    found = problems(page)
    assert not found, "中文文案排版指北 (see this module's docstring):\n" + "\n".join(found)


def test_the_check_catches_breaks_and_missing_spaces(tmp_path):
    """Self-test: a hard break and glued code are reported; code, tables and links are not."""
    page = tmp_path / "page.zh.md"
    page.write_text(
        "---\njupyter:\n  kernelspec: {}\n---\n\n"       # 1-5: front matter
        "# 标题 { #title }\n\n"                         # 6
        "第一句话写完了。\n第二句话被硬换行。\n\n"            # 8-9: break after 。
        "中文\n中文\n\n"                                 # 11-12: break between Han
        "调用`torch.cuda`查询，共4张卡。\n\n"               # 14: glued code and digit
        "**标签。**正文；**标签**：正文。\n\n"               # 16: bold label
        "```python\nx = 1  # 中文x\n```\n\n"               # 18-20: code is skipped
        "| 表格 | a中 |\n|---|---|\n\n"                    # 22-23: tables are skipped
        "见 [文档](https://example.com/a中b) 和 `x` 的说明（GPU）。\n"  # 25: fine
        "<!-- output: snippets/x.py -->\n"                 # 26: fine
        "那篇文章叫《pytorch gpu计算》，**这是一整句加粗的话。** 下一句。\n",  # 27: fine
        encoding="utf-8")
    found = problems(page)
    lines = [int(f.split(":")[1]) for f in found]
    assert lines == [9, 12, 14, 14, 14, 14, 16], "\n".join(found)
