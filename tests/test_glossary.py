"""The Chinese pages keep to the glossary's terms.

docs/glossary.zh.md is the single source: each row of its tables gives the English
term, the chosen Chinese term (column 中文) and the variants to avoid (column 避免,
separated by 「、」, or 「—」 when there are none). A zh page that uses an avoided
variant in its prose fails, with file:line for each use. Code is not prose: fenced
blocks (the notebooks' code cells too), inline code, link addresses and HTML comments
are skipped. A gloss in full-width brackets right after the chosen term, such as
“钩子（hook）”, is allowed: that is how a page introduces the term.

A Han variant is found anywhere in a line, inside longer text too: 「累加」 catches
「梯度会累加」 and 「往 .grad 上累加」. (Before, the variants were whole phrases such as
「梯度累加」, which 「梯度会累加」 does not contain, and 「分发器」 was not listed at all.)
A Latin variant is matched as a whole word, any case: 「batch」 is not found in
「batches」, which the glossary lists on its own. Short variants have legitimate uses in
longer phrases; EXCEPTIONS lists each of them, with why it is not the avoided sense.

The glossary itself is checked too: its prose and its columns 中文 and 含义 (the
columns 英文 and 避免 name the variants on purpose). Where its prose names a variant to
warn against it, the variant stands in quotation marks, “原文”, and is not counted.
"""

import re
from pathlib import Path

import pytest
from sitebuild.glossary import GLOSS, GLOSSARY, glossary_rows
from tests.pages import DOCS, zh_pages
from tests.zh_text import inline, prose, where

LATIN = re.compile(r"[A-Za-z][A-Za-z .-]*")
QUOTED = re.compile(r"“[^”\n]*”")  # a variant named in the glossary's prose, not used
CHECKED_COLUMNS = ("中文", "含义")  # of the glossary's own tables

# The legitimate uses of an avoided variant inside longer text, per variant: each pattern
# is blanked out of a line before that variant is looked for. Every entry must still
# match some zh page (test_every_exception_is_used), so that none outlives its use.
# (乘加, multiply-add, needs no entry: it does not contain 累加.)
EXCEPTIONS: dict[str, tuple[re.Pattern, ...]] = {
    "累加": (
        # practice/mixed_precision: TF32 matmuls accumulate their products in float32;
        # that is a matmul's accumulation, not gradients adding up in .grad.
        re.compile(r"乘积在 float32 中累加"),
    ),
    "降到": (
        # A number falling to a value, the word's plain sense: 「从 1024 降到 512」
        # (practice/mixed_precision), 「从约 7.6 降到 0.01」 and 「降到了噪声底线」,
        # 「应当降到的底线」 (pytorch/optim), 「降到一半」 (practice/data_loading,
        # labs/memory_estimate). The avoided sense is lowering a graph: 下降（lower）为.
        re.compile(r"降到(?=了?\s*(?:约\s*)?\d|一半|了?噪声底线|的底线)"),
    ),
    "CUDA Graphs": (
        # compile/torch_compile: the title of a section of the PyTorch docs, quoted.
        re.compile(r"“CUDA Graphs”"),
    ),
}


def avoided(rows: list[dict[str, str]]) -> dict[str, str]:
    """{variant: chosen term}"""
    return {variant.strip(): row["中文"] for row in rows
            for variant in row["避免"].split("、") if variant.strip() not in ("", "—")}


def variant_pattern(variant: str) -> re.Pattern:
    if LATIN.fullmatch(variant):  # a Latin word: whole words only, any case
        return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(variant)}(?![A-Za-z0-9_])", re.I)
    return re.compile(re.escape(variant))


def glossary_lines(lines: list[str]) -> list[str]:
    """The glossary's lines with only the columns 中文 and 含义 of its tables, quotes removed."""
    kept, header = [], None
    for line in lines:
        if not line.lstrip().startswith("|"):
            header = None
            kept.append(QUOTED.sub("", line))
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        header = header or cells
        kept.append(" | ".join(QUOTED.sub("", cell) for name, cell in zip(header, cells)
                               if name in CHECKED_COLUMNS))
    return kept


def without_exceptions(variant: str, line: str) -> str:
    """The line with the legitimate longer uses of ``variant`` (EXCEPTIONS) blanked out."""
    for exception in EXCEPTIONS.get(variant, ()):
        line = exception.sub(lambda match: " " * len(match.group(0)), line)
    return line


def find_variants(path: Path, rows: list[dict[str, str]], glossary: bool = False) -> list[str]:
    """'file:line: variant → chosen' for every avoided variant in the page's prose.

    With ``glossary``, the page is read as the glossary is (see the module's docstring).
    """
    terms = {term.strip() for row in rows for term in GLOSS.sub("", row["中文"]).split("、")}
    glosses = [re.compile(rf"{re.escape(term)}（[^）]*）") for term in terms if term]
    patterns = {variant: (variant_pattern(variant), chosen) for variant, chosen in avoided(rows).items()}
    found = []
    lines = prose(path.read_text(encoding="utf-8"))
    for number, line in enumerate(glossary_lines(lines) if glossary else lines, start=1):
        line = inline(line)
        for gloss in glosses:
            line = gloss.sub("", line)
        for variant, (pattern, chosen) in patterns.items():
            if pattern.search(without_exceptions(variant, line)):
                found.append(f"{where(path)}:{number}: 「{variant}」 → 「{chosen}」")
    return found


ROWS = glossary_rows()


def test_glossary_lists_variants_to_avoid():
    variants = avoided(ROWS)
    # The variants this test checked before the glossary became its source stay covered.
    for old in ("固定内存", "页锁定内存", "零复制", "内核函数", "流多处理器", "显卡内存", "全规约", "集体通信",
                "梯度累加", "发射核函数", "epoch", "store", "device-side assert", "伪造的 CUDA 张量",
                "两个动量", "本页的输出", "本页的运行结果", "资料来源",
                # added after the fourth review (issue 36): each slipped through before
                "累加", "分发器", "旁路流", "CUDA Graphs", "栅栏", "降到", "分割器",
                # added after the review of the Chinese edition in issue 44
                "规格表", "规格页", "逐比特", "跟踪", "跟踪库", "即时执行", "不确定性", "主维度",
                "重计算", "模型浮点利用率", "硬件浮点利用率"):
        assert old in variants, f"the glossary no longer lists 「{old}」 as a variant to avoid"
    for variant, chosen in variants.items():
        assert variant not in chosen, f"「{variant}」 is avoided but is part of the chosen term 「{chosen}」"


@pytest.mark.parametrize("page", zh_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_no_avoided_variants(page):
    found = find_variants(page, ROWS, glossary=page == GLOSSARY)
    assert not found, "use the glossary's term (docs/glossary.zh.md):\n" + "\n".join(found)


def test_the_check_catches_a_variant(tmp_path):
    """Self-test: 屋顶线 in prose is reported with its line; in code it is not."""
    page = tmp_path / "page.zh.md"
    page.write_text("# 标题 { #t }\n\n这是 `屋顶线` 代码。\n\n```python\n# 屋顶线\n```\n\n"
                    "按屋顶线估算上界。\n\n钩子（hook）是回调，hook 不是。\n", encoding="utf-8")
    found = find_variants(page, ROWS)
    assert [f.split(": ", 1)[0].rsplit(":", 1)[1] for f in found] == ["9", "11"], found
    assert "「屋顶线」 → 「Roofline 模型」" in found[0]


def test_the_check_reads_the_glossary_itself(tmp_path):
    """Self-test: in the glossary, a variant in 含义 or in prose is reported; in 英文 or 避免,
    or quoted as a variant to avoid, it is not."""
    page = tmp_path / "glossary.zh.md"
    page.write_text("# 术语表 { #glossary }\n\n"
                    "本页不写“屋顶线”。\n\n"                                  # 3: quoted, fine
                    "| 英文 | 中文 | 避免 | 含义 |\n|---|---|---|---|\n"
                    "| roofline | Roofline 模型 | 屋顶线 | 性能上界 |\n"       # 7: fine
                    "| epoch | 轮 | epoch | 一轮即完整遍历一遍训练集 |\n"        # 8: fine
                    "| data parallelism | 数据并行 | — | 把一个 batch 拆开 |\n\n"  # 9: bare batch
                    "按屋顶线估算上界。\n", encoding="utf-8")                   # 11
    found = find_variants(page, ROWS, glossary=True)
    assert [f.split(": ", 1)[0].rsplit(":", 1)[1] for f in found] == ["9", "11"], found
    assert "「batch」 → 「小批次」" in found[0]


def test_the_check_finds_a_variant_inside_longer_text(tmp_path):
    """Self-test: 「梯度会累加」 and 「分发器」, which slipped through before, are reported;
    each exception of EXCEPTIONS is not, and a variant next to an exception still is."""
    page = tmp_path / "page.zh.md"
    page.write_text("# 标题 { #t }\n\n"
                    "[梯度会累加](autograd.md#accumulation)。\n\n"           # 3
                    "经过 PyTorch 的分发器。\n\n"                            # 5
                    "乘积在 float32 中累加，缩放因子从 1024 降到 512。\n\n"     # 7: fine
                    "见 PyTorch 文档中的“CUDA Graphs”一节。\n\n"              # 9: fine
                    "把每张图降到 ATen 算子，再用 CUDA Graphs 重放。\n\n"       # 11: two
                    "乘积在 float32 中累加，梯度在 `.grad` 里累加。\n", encoding="utf-8")  # 13
    found = find_variants(page, ROWS)
    assert [f.split(": ", 1)[0].rsplit(":", 1)[1] for f in found] == ["3", "5", "11", "11", "13"], found
    assert "「累加」 → 「梯度累积」" in found[0] and "「分发器」 → 「分派器（dispatcher）」" in found[1]


def test_every_exception_is_used():
    """Each entry of EXCEPTIONS is for an avoided variant and still matches a zh page other
    than the glossary (which may cite an exception as its example)."""
    variants = avoided(ROWS)
    texts = [inline(line) for page in zh_pages() if page != GLOSSARY
             for line in prose(page.read_text(encoding="utf-8"))]
    for variant, exceptions in EXCEPTIONS.items():
        assert variant in variants, f"EXCEPTIONS lists 「{variant}」, which the glossary does not avoid"
        for exception in exceptions:
            assert any(exception.search(text) for text in texts), \
                f"no zh page uses the exception {exception.pattern!r} of 「{variant}」 any more: remove it"


def glossary_table(path: Path) -> dict[str, list[tuple[str, str]]]:
    """{section anchor: [(English term, Chinese term), ...]} of one language's glossary page."""
    sections, rows, header = {}, None, None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            anchor = re.search(r"\{\s*#([\w-]+)\s*\}", line)
            rows = sections.setdefault(anchor.group(1) if anchor else line, [])
            header = None
        elif line.startswith("|") and rows is not None:
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not set(cells) <= {"", "---", ":---", "---:"}:
                rows.append((cells[0], cells[1]))
        else:
            header = None
    return sections


def test_both_glossaries_have_the_same_entries():
    """docs/glossary.md lists the same terms, section by section and in the same order,
    with the same Chinese term, as docs/glossary.zh.md (whose extra column 避免 the
    English page leaves out)."""
    en, zh = glossary_table(GLOSSARY.with_name("glossary.md")), glossary_table(GLOSSARY)
    assert list(en) == list(zh), f"sections differ: {list(en)} against {list(zh)}"
    for section in zh:
        only_zh = [row for row in zh[section] if row not in en[section]]
        only_en = [row for row in en[section] if row not in zh[section]]
        assert not only_zh and not only_en and en[section] == zh[section], (
            f"glossary section #{section}: only in glossary.zh.md {only_zh}, "
            f"only in glossary.md {only_en}" + ("" if only_zh or only_en else "; the order differs"))
