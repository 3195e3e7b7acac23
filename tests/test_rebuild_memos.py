"""What a rebuild under `mkdocs serve` reuses gives what a first build gives.

sitebuild/render_memo.py keeps Pygments' output and compiled templates from one build to
the next in the same process; sitebuild/search_index.py keeps each page's search entries
in the process and on disk, for the next build. Each must hand back exactly what the work
would have produced, and do the work again once its input changes.
"""

from types import SimpleNamespace

import jinja2
import markdown
from sitebuild import render_memo, search_index

CODE = "```python\nimport torch\nx = torch.ones(3)  # a comment\n```\n"
EXTENSIONS = ["pymdownx.highlight", "pymdownx.superfences"]


def html(source: str, **options) -> str:
    return markdown.markdown(source, extensions=EXTENSIONS, extension_configs={"pymdownx.highlight": options})


def test_highlighting_is_the_same_when_remembered():
    before = [html(CODE), html(CODE, linenums=True), html(CODE.replace("3", "4"))]
    render_memo.remember_highlighting()
    render_memo.remember_highlighting()  # once per process, however often it is asked
    assert [html(CODE), html(CODE, linenums=True), html(CODE.replace("3", "4"))] == before
    assert before[0] != before[1] != before[2]  # options and code are part of the key


def test_templates_compile_once_and_render_the_same():
    loader = jinja2.DictLoader({"page.html": "<h1>{{ title }}</h1>"})
    first = render_memo.remember_templates(jinja2.Environment(loader=loader))
    second = render_memo.remember_templates(jinja2.Environment(loader=loader))
    assert first.get_template("page.html").render(title="张量") == "<h1>张量</h1>"
    assert second.get_template("page.html").render(title="张量") == "<h1>张量</h1>"
    changed = render_memo.remember_templates(jinja2.Environment(loader=jinja2.DictLoader({"page.html": "<h2>{{ title }}</h2>"})))
    assert changed.get_template("page.html").render(title="x") == "<h2>x</h2>"  # the source is in the key


class Index:
    """Material's SearchIndex as far as remember_entries uses it; counts the pages it parses."""

    def __init__(self, **config):
        self.entries, self.parsed, self.config = [], 0, config or {"lang": ["en"]}

    def add_entry_from_context(self, page):
        self.parsed += 1
        self.entries += [{"location": page.url, "title": page.title, "text": page.content}]


def page(content: str) -> SimpleNamespace:
    return SimpleNamespace(url="pytorch/autograd/", title="Autograd", content=content, toc=[], meta={})


def test_search_entries_are_the_same_when_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("SEARCH_CACHE_DIR", str(tmp_path))
    first, second = Index(), Index()
    search_index.remember_entries(first)
    search_index.remember_entries(second)  # the next build's index
    first.add_entry_from_context(page("<p>grad</p>"))
    second.add_entry_from_context(page("<p>grad</p>"))
    assert second.entries == first.entries and second.parsed == 0
    second.add_entry_from_context(page("<p>grad, changed</p>"))
    assert second.parsed == 1 and second.entries[-1]["text"] == "<p>grad, changed</p>"


def test_the_next_build_reads_the_entries_from_disk_unless_a_setting_changed(tmp_path, monkeypatch):
    monkeypatch.setenv("SEARCH_CACHE_DIR", str(tmp_path))
    indexes = []
    for config, terms in (({}, ["张量"]), ({}, ["张量"]), ({"separator": "[\\s]+"}, ["张量"]), ({}, ["张量", "梯度"])):
        monkeypatch.setattr(search_index, "_entries", {})  # a new build process
        monkeypatch.setattr(search_index.glossary, "chinese_terms", lambda terms=terms: terms)
        index = Index(**config)
        search_index.remember_entries(index)
        index.add_entry_from_context(page("<p>grad</p>"))
        indexes.append(index)
    assert [index.parsed for index in indexes] == [1, 0, 1, 1]  # the search settings and jieba's words count
    assert all(index.entries == indexes[0].entries for index in indexes)
