"""The glossary, docs/glossary.zh.md: one Chinese term per English one, and the variants to avoid.

Read by tests/test_glossary.py (no avoided variant in the Chinese prose) and by
sitebuild/search_index.py (the Chinese terms are whole words to the search index).
"""

from __future__ import annotations

import re
from pathlib import Path

GLOSSARY = Path(__file__).resolve().parent.parent / "docs" / "glossary.zh.md"
ROW = re.compile(r"^\|(.*)\|\s*$")
GLOSS = re.compile(r"（[^）]*）")  # 「即时执行（eager）」: the gloss is not part of the term
HAN_WORD = re.compile(r"[\u4e00-\u9fff]{2,}")  # a phrase with Latin in it is no word


def glossary_rows(text: str | None = None) -> list[dict[str, str]]:
    """Every row of every table whose header has the columns 中文 and 避免."""
    text = GLOSSARY.read_text(encoding="utf-8") if text is None else text
    rows, header = [], None
    for line in text.splitlines():
        match = ROW.match(line.strip())
        if not match:
            header = None
            continue
        cells = [cell.strip() for cell in match.group(1).split("|")]
        if header is None:
            header = cells
        elif not set(cells) <= {"", "---", ":---", "---:"} and {"中文", "避免"} <= set(header):
            rows.append(dict(zip(header, cells)))
    return rows


def chinese_terms() -> list[str]:
    """The chosen terms that are Han words: 「流式多处理器（SM）」 gives 流式多处理器."""
    cells = (GLOSS.sub("", row["中文"]).split("、") for row in glossary_rows())
    return sorted({term.strip() for parts in cells for term in parts if HAN_WORD.fullmatch(term.strip())})
