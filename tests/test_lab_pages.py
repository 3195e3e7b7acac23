"""Lab pages stay light: JupyterLab's CSS is one shared file, not inlined in every page.
And each run of a cell's stdout is one output, however Jupyter's messages arrived.

sitebuild/notebook_css.py moves mkdocs-jupyter's inline ``<style>`` blocks (about 590 KB)
into ``assets/jupyter/<hash>.css`` (about 56 KB), without the rules no lab can
match, and drops loaders that would fetch from a CDN or fetch nothing. Screenshots
before and after were pixel-identical; the browser tests check the pages' axe
results and failed loads.
"""

import re

import nbformat
import pytest
from sitebuild import labs
from tests.pages import DOCS, url_path

# A lab's own weight: its highlighted code, outputs and figures. The longest (slow_step, with
# an SVG figure) is about 230 KB; the CSS this module keeps out would add 590 KB to each.
LIMIT = 256 * 1024
LABS = sorted(p for p in (DOCS / "labs").glob("*.md") if not p.name.endswith(".zh.md"))
LINK = re.compile(r'<link rel="stylesheet" href="([^"]*assets/jupyter/[0-9a-f]{12}\.css)">')


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_lab_pages_link_one_shared_stylesheet(site, lang):
    targets = set()
    for lab in LABS:
        page = site / url_path(lab, lang) / "index.html"
        html = page.read_text(encoding="utf-8")
        assert len(html.encode()) <= LIMIT, f"{page.relative_to(site)}: {len(html.encode())} bytes"
        body = html.partition("</head>")[2]
        assert "<style" not in body, f"{page.relative_to(site)} still inlines CSS"
        assert "cdnjs" not in html, f"{page.relative_to(site)} still carries the mermaid loader"
        assert '<script src="">' not in html and "MathJax" not in html, f"{page.relative_to(site)}: a MathJax stub"
        links = LINK.findall(body)
        assert len(links) == 1, f"{page.relative_to(site)}: {links}"
        target = (page.parent / links[0]).resolve()
        css = target.read_text(encoding="utf-8")
        assert ".jupyter-wrapper .jp-OutputArea" in css and ".jupyter-wrapper .jp-InputArea" in css
        assert ".jupyter-wrapper :root" not in css, "a rule under .jupyter-wrapper :root matches nothing"
        targets.add(target)
    assert len(targets) == 1, targets


def test_a_cells_stdout_is_one_output_however_it_arrived():
    out = nbformat.v4.new_output
    cell = nbformat.v4.new_code_cell("...", outputs=[
        out("stream", name="stdout", text="epoch 5\n"), out("stream", name="stdout", text="epoch 10\n"),
        out("stream", name="stderr", text="warning\n"), out("stream", name="stdout", text="done\n")])
    notebook = nbformat.v4.new_notebook(cells=[cell, nbformat.v4.new_markdown_cell("text")])
    labs.join_streams(notebook)
    assert [(o.name, o.text) for o in notebook.cells[0].outputs] == [
        ("stdout", "epoch 5\nepoch 10\n"), ("stderr", "warning\n"), ("stdout", "done\n")]
