"""The Chinese pages keep to the glossary's terms."""

import re

import pytest
from tests.pages import DOCS, zh_pages

# Translations that other texts use, and the one this site chose.
VARIANTS = {"固定内存": "锁页内存", "页锁定内存": "锁页内存", "零复制": "零拷贝", "内核函数": "核函数",
            "流多处理器": "流式多处理器", "显卡内存": "显存", "全规约": "全归约", "集体通信": "集合通信"}


def glossary_terms() -> set[str]:
    rows = re.findall(r"^\| [^|]+ \| ([^|]+) \|", (DOCS / "glossary.zh.md").read_text(encoding="utf-8"), re.M)
    return {row.strip() for row in rows} - {"中文"}


def test_chosen_terms_are_in_the_glossary():
    terms = " ".join(glossary_terms())
    assert all(chosen in terms for chosen in VARIANTS.values())


@pytest.mark.parametrize("page", zh_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_no_variant_translations(page):
    text = page.read_text(encoding="utf-8")
    found = {v: chosen for v, chosen in VARIANTS.items() if v in text}
    assert not found, f"use the glossary's term instead: {found}"
