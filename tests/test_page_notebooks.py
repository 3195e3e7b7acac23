"""The page notebooks (sitebuild/page_notebooks.py): up to date, in both languages, and a run of
one on this CPU comes back as a record that the build takes and shows."""

import re
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from sitebuild import labs, output_blocks, page_notebooks, records, snippets
from tests.conftest import ROOT

PAGE = page_notebooks.DOCS / "pytorch" / "tensors.zh.md"
SNIPPET = "snippets/pytorch/tensors.py"


def test_every_notebook_is_what_make_notebooks_writes():
    stale = [page.relative_to(ROOT).as_posix() for page in page_notebooks.pages()
             if not page_notebooks.target(page).is_file()
             or page_notebooks.target(page).read_text(encoding="utf-8") != page_notebooks.rendered(page)]
    extra = set(page_notebooks.OUT.rglob("*.ipynb")) - {page_notebooks.target(p) for p in page_notebooks.pages()}
    assert not stale and not extra, f"out of date: {stale}; without a page: {sorted(extra)}. Run `make notebooks`"


def test_a_lab_that_imports_a_snippet_helper_carries_it_and_is_keyed_on_it(monkeypatch):
    """labs/fast_generation imports snippets/inference/_model.py: its Colab notebook writes the
    module whole before the lab's cells (Colab has no clone), and its stored run is named by the
    module's content too, so that a change to the model runs the lab again."""
    lab, helper = ROOT / "docs" / "labs" / "fast_generation.md", ROOT / "snippets" / "inference" / "_model.py"
    assert snippets.helpers_imported(labs.code(labs.read(lab))) == [helper]
    sources = [c["source"] for c in page_notebooks.notebook(lab)["cells"]]
    written = "%%writefile snippets/inference/_model.py\n" + helper.read_text(encoding="utf-8")
    assert written in sources and sources.index(written) < next(
        n for n, source in enumerate(sources) if "from _model import" in source)
    before, sha256 = labs.stored(lab), snippets.sha256
    monkeypatch.setattr(snippets, "sha256", lambda p: "changed" if p == helper else sha256(p))
    assert labs.stored(lab) != before


def test_both_languages_have_the_same_notebooks():
    by_language = {lang: {p.relative_to(page_notebooks.OUT / lang) for p in (page_notebooks.OUT / lang).rglob("*.ipynb")}
                   for lang in ("en", "zh")}
    assert by_language["en"] == by_language["zh"] and len(by_language["en"]) >= 20


def test_a_notebook_never_installs_torch_and_warns_below_the_floor(capsys):
    runtime = next(c["source"] for c in page_notebooks.notebook(PAGE)["cells"] if "MACHINE = " in c["source"])
    assert not re.search(r"install[^\n]*\btorch\b", runtime) and "torch" not in page_notebooks.pinned()
    lines = runtime.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("if tuple"))
    check = "\n".join(lines[start:start + 2])  # the floor's comparison and its warning
    words = {"old_torch": page_notebooks.TEXT["zh"]["old_torch"]}
    for version, warned in (("2.10.1+cu128", True), ("2.11.0+cu130", False), ("2.13.0+cpu", False)):
        exec(check, {"re": re, "MACHINE": {"torch": version}, "TEXT": words})
        assert ("比本站支持的最低版本 2.11 旧" in capsys.readouterr().out) == warned, version


def test_the_last_cells_say_to_add_the_record_with_records_add():
    """`records add` merges a run into the record of the same machine and day; a file copied into
    records/ (what the notebooks used to ask for first) would replace it."""
    for page, lang in ((PAGE, "zh"), (PAGE.with_name("tensors.md"), "en")):
        cells = page_notebooks.notebook(page)["cells"]
        note, code = cells[-2]["source"], cells[-1]["source"]
        assert page_notebooks.TEXT[lang]["record"] in note and 'TEXT["wrote"]' in code
        first = note.split("`python3 -m sitebuild.records add FILE`")[0]
        assert "records/" not in first, f"the {lang} note names records/ before the command: {first!r}"
        wrote = page_notebooks.TEXT[lang]["wrote"].format(file="x-2026-12-06.json", n=1, failed=0)
        assert wrote.endswith("python3 -m sitebuild.records add x-2026-12-06.json"), wrote


def test_a_run_on_this_cpu_becomes_a_record_the_build_shows(tmp_path):
    notebook = nbformat.read(page_notebooks.target(PAGE), as_version=4)
    with tempfile.TemporaryDirectory(prefix="nb-kernel-") as sockets:
        NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
                       config=labs.transport(sockets)).execute()
    (written,) = tmp_path.glob("*.json")
    kept = tmp_path / "records"
    kept.mkdir()
    rec, = records.load(records.add(written, kept).parent)
    assert list(rec.snippets) == [SNIPPET] and rec.status(SNIPPET) == ("current", [])
    labels = output_blocks.LABELS["zh"]
    block = output_blocks.output_block(SNIPPET, output_blocks.result(SNIPPET), labels, [rec])
    assert f'=== "{output_blocks.record_label(rec, labels)}"' in block and rec.snippets[SNIPPET]["stdout"].splitlines()[0] in block
    assert output_blocks.matrix_cell(rec, SNIPPET, labels) == "✓"
    assert output_blocks.matrix_cell(rec, "snippets/pytorch/nn.py", labels) == labels["missing"] == "不在此记录中"  # not failed
