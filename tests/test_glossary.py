"""The Chinese pages keep to the glossary's terms.

docs/glossary.zh.md is the single source: each row of its tables gives the English
term, the chosen Chinese term (column 中文) and the variants to avoid (column 避免,
separated by 「、」, or 「—」 when there are none). A zh page that uses an avoided
variant in its prose fails, with file:line for each use. Code is not prose: fenced
blocks (the notebooks' code cells too), inline code, link addresses and HTML comments
are skipped. A gloss in full-width brackets right after the chosen term, such as
「钩子（hook）」, is allowed: that is how a page introduces the term.
"""

import re
from pathlib import Path

import pytest
from glossary import GLOSSARY, glossary_rows
from tests.pages import DOCS, zh_pages
from tests.zh_text import inline, prose, where

LATIN = re.compile(r"[A-Za-z][A-Za-z .-]*")


def avoided(rows: list[dict[str, str]]) -> dict[str, str]:
    """{variant: chosen term}"""
    return {variant.strip(): row["中文"] for row in rows
            for variant in row["避免"].split("、") if variant.strip() not in ("", "—")}


def variant_pattern(variant: str) -> re.Pattern:
    if LATIN.fullmatch(variant):  # a Latin word: whole words only, any case
        return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(variant)}(?![A-Za-z0-9_])", re.I)
    return re.compile(re.escape(variant))


def find_variants(path: Path, rows: list[dict[str, str]]) -> list[str]:
    """'file:line: variant → chosen' for every avoided variant in the page's prose."""
    glosses = [re.compile(rf"{re.escape(row['中文'])}（[^）]*）") for row in rows]
    patterns = {variant: (variant_pattern(variant), chosen) for variant, chosen in avoided(rows).items()}
    found = []
    for number, line in enumerate(prose(path.read_text(encoding="utf-8")), start=1):
        line = inline(line)
        for gloss in glosses:
            line = gloss.sub("", line)
        for variant, (pattern, chosen) in patterns.items():
            if pattern.search(line):
                found.append(f"{where(path)}:{number}: 「{variant}」 → 「{chosen}」")
    return found


ROWS = glossary_rows()


def test_glossary_lists_variants_to_avoid():
    variants = avoided(ROWS)
    # The variants this test checked before the glossary became its source stay covered.
    for old in ("固定内存", "页锁定内存", "零复制", "内核函数", "流多处理器", "显卡内存", "全规约", "集体通信"):
        assert old in variants, f"the glossary no longer lists 「{old}」 as a variant to avoid"
    for variant, chosen in variants.items():
        assert variant not in chosen, f"「{variant}」 is avoided but is part of the chosen term 「{chosen}」"


@pytest.mark.parametrize("page", [p for p in zh_pages() if p != GLOSSARY],
                         ids=lambda p: p.relative_to(DOCS).as_posix())
def test_no_avoided_variants(page):
    found = find_variants(page, ROWS)
    assert not found, "use the glossary's term (docs/glossary.zh.md):\n" + "\n".join(found)


def test_the_check_catches_a_variant(tmp_path):
    """Self-test: 屋顶线 in prose is reported with its line; in code it is not."""
    page = tmp_path / "page.zh.md"
    page.write_text("# 标题 { #t }\n\n这是 `屋顶线` 代码。\n\n```python\n# 屋顶线\n```\n\n"
                    "按屋顶线估算上界。\n\n钩子（hook）是回调，hook 不是。\n", encoding="utf-8")
    found = find_variants(page, ROWS)
    assert [f.split(": ", 1)[0].rsplit(":", 1)[1] for f in found] == ["9", "11"], found
    assert "「屋顶线」 → 「Roofline 模型」" in found[0]
