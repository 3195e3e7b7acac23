"""Each excerpt's output below it (sitebuild/excerpts.py, sitebuild/output_blocks.py): where the
blocks go, which lines they hold, the fallback to one block, and both languages alike."""

import re

import markdown
import pytest

from sitebuild import excerpts, output_blocks, records, snippets
from tests.pages import en_pages, outputs, url_path
from tests.test_records import MACHINE, entry

PATH = "snippets/pytorch/tensors.py"
STDOUT = "setup\ncreated 1\ncreated 2\ntyped\n"
SECTIONS = [[None, 1], ["create", 2], ["dtype", 1]]
PAGE = f"""Intro.

```python title="{PATH}"
--8<-- "{PATH}:create"
```

Between.

```python title="{PATH}"
--8<-- "{PATH}:dtype"
```

```python title="snippets/gpu/gpu_doctor.py"
--8<-- "snippets/gpu/gpu_doctor.py:probe"
```

<!-- output: {PATH} -->
"""
EXTENSIONS = ["sitebuild.output_blocks", "attr_list", "pymdownx.superfences", "pymdownx.tabbed",
              "pymdownx.details", "admonition"]


def build(sections, stdout=STDOUT):
    return snippets.Result(PATH, 0, stdout, "", 1.0, 120, {"device": "cpu: Test", "torch": "2.13.0+cpu",
                                                            "python": "3.11.7"}, sections=sections)


def test_a_fence_of_a_shown_snippet_s_sections_is_followed_by_its_excerpt_line():
    lines = excerpts.marked(PAGE.split("\n"))
    marks = [line for line in lines if line.startswith(excerpts.EXCERPT_LINE)]
    # gpu_doctor.py has no output line on this page: its excerpt gets no block
    assert marks == [f"<!-- excerpt-output: {PATH}:create -->", f"<!-- excerpt-output: {PATH}:dtype -->"]
    assert lines[lines.index(marks[0]) - 1] == "```", "right after the fence's closing line"


def test_each_section_gets_the_lines_printed_while_it_ran():
    assert excerpts.lines_of(STDOUT, SECTIONS, ["create"]) == "created 1\ncreated 2"
    assert excerpts.lines_of(STDOUT, SECTIONS, ["create", "dtype"]) == "created 1\ncreated 2\ntyped"
    assert excerpts.lines_of(STDOUT, SECTIONS, ["nowhere"]) == ""
    # a blank line that parts two tables in the whole output is not an excerpt's first line
    assert excerpts.lines_of("a\n\nb\n\n", [["x", 1], ["y", 3]], ["y"]) == "b"
    for broken in ([], [["create", 3]], [["create", "2"]], [("create", 4)], None, [[None, True], ["x", 3]]):
        assert excerpts.lines_of(STDOUT, broken, ["create"]) is None, broken


def rendered(monkeypatch, found, recs=(), lang="en"):
    monkeypatch.setattr(output_blocks, "result", lambda path: found)
    monkeypatch.setattr(output_blocks, "records_now", lambda: list(recs))
    return markdown.markdown(PAGE, extensions=EXTENSIONS,
                             extension_configs={"sitebuild.output_blocks": {"language": lang}})


def code_texts(html: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", code).strip() for code in re.findall(r"<code>(.*?)</code>", html, re.S)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_excerpts_show_their_lines_and_the_whole_output_folds_below(monkeypatch, lang):
    html = rendered(monkeypatch, build(SECTIONS), lang=lang)
    blocks = [text.strip() for text in code_texts(html) if "created" in text or "typed" in text]
    assert blocks == ["created 1\ncreated 2", "typed", STDOUT.strip()]
    assert html.index("Between.") < html.index("typed")  # the first block stands before the second excerpt
    assert re.search(rf'<details class="abstract">\s*<summary>{output_blocks.LABELS[lang]["whole"]}</summary>', html)
    assert html.count('class="snippet-provenance"') == 3


@pytest.mark.parametrize("sections", [[], [["create", 9]]], ids=["missing", "broken"])
def test_without_a_sound_attribution_the_page_shows_the_whole_output_once_as_before(monkeypatch, sections):
    html = rendered(monkeypatch, build(sections))
    assert [text.strip() for text in code_texts(html) if "created" in text] == [STDOUT.strip()]
    assert "<details" not in html and "excerpt-output" not in html


def test_a_record_s_tab_stands_under_the_excerpt_only_where_it_carries_an_attribution(monkeypatch):
    gpu = records.Record("gpu", MACHINE, "2026-12-03", {PATH: {**entry(stdout="gpu setup\ngpu created\ngpu typed\n"),
                                                              "sections": [[None, 1], ["create", 1], ["dtype", 1]]}})
    old = records.Record("old", {**MACHINE, "device": "Old GPU"}, "2026-12-02", {PATH: entry(stdout="old\n")})
    html = rendered(monkeypatch, build(SECTIONS), [gpu, old])
    texts = code_texts(html)
    assert texts.index("gpu created") < texts.index("typed") < texts.index("gpu typed")
    assert "old" in texts and html.count("Old GPU · 2026-12-02") == 1  # the whole output's tab only


def test_a_stale_record_s_tab_stays_in_the_whole_output_with_its_label_even_with_sections(monkeypatch):
    """Its sections were named by an earlier version of the script: its lines under today's
    code would say that this code printed them."""
    stale = records.Record("gpu", MACHINE, "2026-12-03", {PATH: {
        **entry(stdout="gpu setup\ngpu created\ngpu typed\n"), "sources": {PATH: "0" * 64},
        "sections": [[None, 1], ["create", 1], ["dtype", 1]]}})
    html = rendered(monkeypatch, build(SECTIONS), [stale])
    texts = code_texts(html)
    assert "gpu created" not in texts and "gpu setup\ngpu created\ngpu typed" in texts
    whole = html[html.index("<details"):]
    assert f"NVIDIA H200 · 2026-12-03 · {output_blocks.LABELS['en']['earlier']}</em>" in whole
    assert html.count('class="snippet-stale"') == 1 and html.count('class="snippet-stale-note"') == 1


def test_an_excerpt_that_printed_nothing_gets_no_block(monkeypatch):
    html = rendered(monkeypatch, build([[None, 1], ["create", 3]]))  # dtype printed nothing
    assert [text for text in code_texts(html) if "typed" in text] == ["created 1\ncreated 2\ntyped", STDOUT.strip()]
    assert html.count('class="snippet-provenance"') == 2


def excerpt_titles(html: str) -> list[str]:
    return re.findall(r'<span class="filename">[^<]*· (snippets/[^<]+:[^<]+)</span>', html)


def test_both_languages_show_the_same_excerpt_blocks_in_the_same_places(site):
    """The blocks follow the includes, which the parity test keeps alike; this checks the
    built pages, where a block could still be missing in one language."""
    split = 0
    for page in en_pages():
        if not outputs(page.read_text(encoding="utf-8")):
            continue
        en, zh = ((site / url_path(page, lang) / "index.html").read_text(encoding="utf-8") for lang in ("en", "zh"))
        assert excerpt_titles(en) == excerpt_titles(zh), page.name
        split += bool(excerpt_titles(en))
    assert split >= 10, f"only {split} pages show outputs below their excerpts"


def test_the_print_pages_show_the_excerpt_blocks_and_open_the_whole_output(site):
    """The PDFs are printed from these pages (sitebuild/print_pages.py)."""
    for lang, prefix in (("en", ""), ("zh", "zh/")):
        printed = (site / prefix / "pdf" / "print.html").read_text(encoding="utf-8")
        label = output_blocks.LABELS[lang]["output"]
        assert f'<span class="filename">{label} · {PATH}:create</span>' in printed, lang
        assert "<details open" in printed and not re.search(r"<details(?![^>]*\sopen)", printed), lang
