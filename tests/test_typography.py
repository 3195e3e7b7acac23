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
- a bold label is written ``**标签**：正文``, not ``**标签。**正文``, ``**标签：**正文``
  or ``**标签：** 正文``.

Punctuation and spacing, in prose and in table cells (each cell on its own):

- no space beside full-width punctuation (``“Add your machine” 一节``, ``数据。 生成``);
  the middle dot ``·``, which the home page's topic map uses as a separator, is exempt;
- no space between two Han characters, which is what a link or bold text written
  with spaces around it leaves (``见 [多机训练](…) 一页``);
- no space between a number and ``%`` (``40–50%``);
- a list of topics after a colon is joined by 、, not by ，
  (``混合精度：格式、autocast、梯度缩放``);
- quotation marks are “”, never 「」, 『』 or ASCII ``"`` (an admonition's title
  keeps the ``"`` of its syntax);
- a GPU's number is a word of its own: ``GPU 0``, not ``GPU0`` (a PyTorch message
  quoted verbatim stays in inline code);
- times are written ``s``, ``ms``, ``µs`` and ``ns``, as in the code's output and the
  English pages, never 毫秒, 微秒 or 纳秒, nor 秒 after a number (``38 ms 对 14 ms``,
  ``几 µs``, ``2 s 的超时``); 秒 without a number is a word (每秒, 几秒, 秒级).

Naming a page of the site (``page_names``): a link to the page whose text is that page's
title, as its ``# heading`` gives it, followed by 一页: ``[显存](memory.md)一页``,
``[DLPack](dlpack.md) 一页``. A title's closing note in full-width brackets may be left
out (``[Apache MXNet](mxnet.md) 一页`` for 「Apache MXNet（已退役）」), and the home page
may be called 首页, its name in the navigation. Reported: ``[DLPack 一页](dlpack.md)``
(一页 inside the link), ``[显存页](memory.md)`` or ``[运行记录](provenance.md)页``
(页 without 一), a link text that is not the title (``[GPU 检查](check_gpu.md)一页``), and a
page named with 一页 but no link at all (``显存一页``). 这一页, 那一页 and 同一页 point
back at a page already named, 另一页 is any other page, and a quoted “一页” is the word
itself: these are fine.
"""

import re
from pathlib import Path

import pytest
from functools import cache

from tests.pages import DOCS, twin, zh_pages
from tests.zh_text import CODE, FULL_PUNCT, HAN, INLINE_CODE, inline, is_table, prose, where

CJK = HAN + FULL_PUNCT
GLUED = re.compile(rf"(?=([{HAN}][A-Za-z0-9{CODE}]|[A-Za-z0-9{CODE}][{HAN}]))")  # overlapping
BOLD_LABEL = re.compile(rf"\*\*[^*\n]{{1,16}}[。：:.]\*\*(?=[ \t]*[^\s*])")
# Full-width punctuation that takes no space beside it (the middle dot · is a separator).
SPACED = FULL_PUNCT.replace("\u00b7", "")
SPACE_BY_PUNCT = re.compile(rf"(?<=[^\s·])[ \t]+(?=[{SPACED}])|(?<=[{SPACED}])[ \t]+(?=[^\s·])")
SPACE_IN_HAN = re.compile(rf"[{HAN}][ \t]+[{HAN}]")
PERCENT = re.compile(r"\d[ \t]+%")
QUOTES = re.compile(r'[「」『』"]')
GPU_NUMBER = re.compile(r"(?<![A-Za-z0-9_])GPU\d")
TIME_UNIT = re.compile(r"毫秒|微秒|纳秒|\d[ \t]*秒")  # 「2 秒」, not 「每秒」 or 「几秒」
# A link to a page of the site, with what follows it when that names the page: 「一页」 or 「页」.
PAGE_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<href>[^)#\s:]+\.md)(?:#[^)\s]*)?\)"
                       r"(?P<after>\s?一?页(?!面))?")
BARE_PAGE = re.compile(r"(?<![这那同上下每第另“])一页")  # 这一页, 那一页: a page named just before
H1 = re.compile(r"^# (.*?)(?:\s*\{[^{}]*\})?\s*$")
CLOSING_NOTE = re.compile(r"（[^（）]*）$")  # 「Apache MXNet（已退役）」
HOME = "首页"  # the home page's name in the navigation (mkdocs.yml, nav_translations)
# Where a prose line's text starts: after list, quote and heading markers.
LINE_START = re.compile(r"^\s*(?:(?:[-*+]|\d+[.)])\s+|>\s*|#{1,6}\s+)*")
# An admonition's first line: only its title is text, without the quotes of the syntax.
ADMONITION = re.compile(r'^\s*(?:!!!|\?\?\?\+?)\s+[\w-]+(?:\s+inline(?:\s+end)?)?(?:\s+"(?P<title>.*)")?\s*$')
SENTENCE_END = re.compile(r"[。；！？]")
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


def texts(line: str) -> list[str]:
    """The runs of text of one prose line: its table cells, or the line without markers."""
    text = inline(line).replace("**", "")
    if is_table(text):
        return [cell.strip() for cell in text.strip().strip("|").split("|")]
    if admonition := ADMONITION.match(text):
        return [admonition.group("title") or ""]
    return [LINE_START.sub("", text).strip()]


def punctuation(text: str) -> list[str]:
    """What is wrong with the spaces and punctuation of one run of text (see the docstring)."""
    found = []

    def report(pattern: re.Pattern, what: str) -> None:
        for match in pattern.finditer(text):
            context = text[max(match.start() - 6, 0):match.end() + 6].replace(CODE, "`…`")
            found.append(f"{what} in {context!r}")

    report(SPACE_BY_PUNCT, "space beside full-width punctuation")
    report(SPACE_IN_HAN, "space between Han characters (a link or bold text needs none)")
    report(PERCENT, "space before %")
    report(QUOTES, "quotation marks: write “…”")
    report(GPU_NUMBER, "a GPU's number is its own word: write GPU 0")
    report(TIME_UNIT, "time unit: write s, ms, µs or ns")
    if "：" in text:  # a list of topics after a colon: 「显存：A，B，C」 → 「显存：A、B、C」
        items = text.rsplit("：", 1)[1].split("，")
        if len(items) >= 3 and all(0 < len(item.strip()) <= 16 and not SENTENCE_END.search(item)
                                   for item in items):
            found.append(f"a list joined by ，: write 、 in {text[-40:]!r}")
    return found


def spacing(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, what) for the punctuation and spacing rules of the docstring."""
    return [(number, what) for number, line in enumerate(lines, start=1) if line.strip()
            for text in texts(line) for what in punctuation(text)]


@cache
def page_titles(page: Path) -> tuple[str, frozenset[str]]:
    """A zh page's title, and the names that may stand for it before 一页 (see the docstring)."""
    title = next((m.group(1).strip() for line in prose(page.read_text(encoding="utf-8"))
                  if (m := H1.match(line))), "")
    names = {title, CLOSING_NOTE.sub("", title).strip()}
    if page == DOCS / "index.zh.md":
        names.add(HOME)
    return title, frozenset(names)


def page_names(path: Path, lines: list[str]) -> list[tuple[int, str]]:
    """(line number, what) for each page of the site named otherwise than 「[title](page.md)一页」."""
    found = []
    for number, line in enumerate(lines, start=1):
        line = INLINE_CODE.sub(CODE, line)

        def check(match: re.Match) -> str:
            text = match.group("text").replace("`", "").strip()
            after = (match.group("after") or "").strip()
            target = twin((path.parent / match.group("href")).resolve())
            if (text.endswith("页") or after) and target.is_file():
                title, names = page_titles(target)
                if not ((after == "一页" and text in names) or (not after and text == HOME and HOME in names)):
                    found.append((number, f"name the page as [{title}]({match.group('href')})一页, "
                                          f"not {match.group(0)!r}"))
            return CODE

        rest = PAGE_LINK.sub(check, line)
        for match in BARE_PAGE.finditer(rest):
            context = rest[max(match.start() - 12, 0):match.end()].replace(CODE, "`…`")
            found.append((number, f"a page named without a link to it, in {context!r}: "
                                  f"write [its title](page.md)一页"))
    return found


def problems(path: Path) -> list[str]:
    lines = prose(path.read_text(encoding="utf-8"))
    found = [f"{where(path)}:{n}: hard line break inside a Chinese paragraph" for n in hard_breaks(lines)]
    found += [f"{where(path)}:{n}: {what}" for n, what in glued(lines)]
    found += [f"{where(path)}:{n}: {what}" for n, what in spacing(lines)]
    found += [f"{where(path)}:{n}: {what}" for n, what in page_names(path, lines)]
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
        "见[文档](https://example.com/a中b)和 `x` 的说明（GPU）。\n"  # 25: fine
        "<!-- output: snippets/x.py -->\n"                 # 26: fine
        "那篇文章叫《pytorch gpu计算》，**这是一整句加粗的话**。下一句。\n",  # 27: fine
        encoding="utf-8")
    found = problems(page)
    lines = [int(f.split(":")[1]) for f in found]
    assert lines == [9, 12, 14, 14, 14, 14, 16], "\n".join(found)


@pytest.mark.parametrize(("line", "what"), [
    ("做法见 README 中的 “Add your machine” 一节。", "space beside full-width punctuation"),
    ("**本页没有测量任何 GPU 数据。** 生成本页的构建", "bold label"),
    ("- **融合注意力。** 在 GPU 上", "bold label"),
    ("**现象：** `torch.cuda.is_available()` 为 `False`", "bold label"),
    ("**选 float16 还是 bfloat16？** 在支持 bfloat16 的 GPU 上", "space beside full-width punctuation"),
    ("| 全局 rank，0 … `WORLD_SIZE - 1` |", "space beside full-width punctuation"),
    ("它是 [Python 数组 API 标准](https://example.com) 规定的机制", "space between Han characters"),
    ("（见 [多机训练](multi_node.md)）", "space between Han characters"),
    ("All-Reduce 占每步时间的 40–50 %。", "space before %"),
    ("| [显存](memory.md)：逐字节计数，梯度累积，激活检查点，缓存分配器 |", "a list joined by ，"),
    ("混合精度：格式的范围和精度，autocast，梯度缩放", "a list joined by ，"),
    ("页面使用下表「中文」一列", "quotation marks"),
    ('页面使用下表"中文"一列', "quotation marks"),
    ("输出设备默认是 GPU0。", "GPU 0"),
    ("乘法排队用了 0.69 毫秒，GPU 几微秒就跑完。", "time unit"),
    ("| 每步 | 15 毫秒 |", "time unit"),
    ("两个 rank 设了 2 秒的超时，编译要 8 到 40秒。", "time unit"),
    ("| 超时 | 60 秒 |", "time unit"),
])
def test_the_check_catches_each_slip(line, what):
    """Self-test: each slip that the checks above let through before is reported."""
    found = [what for number, what in glued([line]) + spacing([line])]
    assert any(what in f for f in found), f"{line!r} is not reported as {what!r}: {found}"


@pytest.mark.parametrize("line", [
    "做法见 README 中的“Add your machine”一节。",
    "**本页没有测量任何 GPU 数据**。生成本页的构建",
    "- **融合注意力**：在 GPU 上",
    "**选 float16 还是 bfloat16？**在支持 bfloat16 的 GPU 上",
    "| 全局 rank，从 0 到 `WORLD_SIZE - 1` |",
    "它是 [Python 数组 API 标准](https://example.com)规定的机制，见 [DLPack](dlpack.md) 一页",
    "All-Reduce 占每步时间的 40–50%。",
    "| [显存](memory.md)：逐字节计数、梯度累积、激活检查点、缓存分配器 |",
    "原因：同一个运算的输入分别在两个设备上，模型已经移过去，数据没有移。",
    "| **GPU** | [架构](gpu/architecture.md) · [MXNet（已退役）](arrays/mxnet.md) · [DLPack](a.md) |",
    '!!! warning "过时的说法：“几百个核心”"',
    "报错 `Found GPU0 which is of compute capability` 出现在 GPU 0 上；7·10⁹ 字节。",
    "**这是一整句加粗、不算标签的话，后面没有正文。**",
    "乘法排队用了 0.69 ms，GPU 几 µs 就跑完；以 ms 为单位的 `elapsed_time`。",
    "两个 rank 设了 2 s 的超时，每秒几百步，几秒之内就跑完。",
])
def test_the_check_lets_good_lines_through(line):
    """Self-test: the same lines, written as the guidelines say, are not reported."""
    found = glued([line]) + spacing([line])
    assert not found, found


def test_the_check_catches_page_names(tmp_path):
    """Self-test: a page named otherwise than 「[title](page.md)一页」 is reported, with its line."""
    (tmp_path / "memory.zh.md").write_text("# 显存 { #memory }\n", encoding="utf-8")
    (tmp_path / "mxnet.zh.md").write_text("# Apache MXNet（已退役） { #mxnet }\n", encoding="utf-8")
    page = tmp_path / "page.zh.md"
    page.write_text(
        "# 标题 { #t }\n\n"
        "见[显存](memory.md#oom)一页；[Apache MXNet](mxnet.md) 一页；那一页、这一页也可以。\n"  # 3: fine
        "见[Apache MXNet（已退役）](mxnet.md) 一页和[显存](memory.md)。\n"                   # 4: fine
        "见[显存页](memory.md)。\n"                                                           # 5
        "见[显存一页](memory.md)。\n"                                                         # 6
        "见[显存](memory.md)页上的表。\n"                                                     # 7
        "见[内存](memory.md)一页。\n"                                                         # 8
        "用的就是显存一页的计数方法。\n"                                                       # 9
        "| 表格 | 见[MXNet 一页](mxnet.md) |\n", encoding="utf-8")                              # 10
    found = [f for f in problems(page) if "name the page" in f or "without a link" in f]
    assert [int(f.split(":")[1]) for f in found] == [5, 6, 7, 8, 9, 10], "\n".join(found)
    assert "name the page as [显存](memory.md)一页" in found[0]
    assert "[Apache MXNet（已退役）](mxnet.md)一页" in found[-1]
