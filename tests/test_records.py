"""Hardware records: the contract, staleness, and how the pages show them."""

import json
import re
import shutil

import markdown
import pytest

from sitebuild import output_blocks, records, snippets
from tests.conftest import ROOT
from tests.test_build import html_of, visible_text
from tests.pages import DOCS, en_pages, outputs

MACHINE = {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "python": "3.12.3", "cuda": "13.0",
           "driver": "580.95.05", "gpus": ["NVIDIA H200"], "cpu": "AMD EPYC 9654", "os": "Linux"}


def entry(path="snippets/pytorch/tensors.py", returncode=0, stdout="tensor([1.])\n", root=ROOT):
    return {"returncode": returncode, "stdout": stdout, "stderr_tail": "" if returncode == 0 else
            "Traceback (most recent call last):\nRuntimeError: CUDA error: injected", "seconds": 1.5,
            "sources": snippets.source_hashes(root / path) if (root / path).is_file() else {path: "0" * 64},
            "figures": []}


def write(folder, data, name=None):
    file = folder / f"{name or records.slug(data['machine']['device'], data['recorded'])}.json"
    file.write_text(json.dumps(data), encoding="utf-8")
    return file


def record(**snippet_entries):
    return {"machine": MACHINE, "recorded": "2026-12-03", "snippets": snippet_entries}


def test_every_committed_record_keeps_the_contract():
    found = records.load()
    assert found, "no record in records/: `make record` writes one"
    for rec in found:
        assert rec.snippets, f"{rec.name}: no snippet recorded"


@pytest.mark.parametrize("text, problem", [
    ("{not json", "not valid JSON"),
    (json.dumps({"machine": MACHINE, "recorded": "2026-12-03"}), "missing key 'snippets'"),
    (json.dumps(record(**{"snippets/x.py": {**entry(), "returncode": "0"}})), "'returncode' has the wrong type"),
    (json.dumps(record(**{"snippets/x.py": {**entry(), "returncode": True}})), "'returncode' has the wrong type"),
    (json.dumps({**record(), "recorded": "3 Dec 2026"}), "not a YYYY-MM-DD date"),
    (json.dumps({**record(), "machine": {**MACHINE, "gpus": "H200"}}), "'gpus' has the wrong type"),
])
def test_a_malformed_record_is_refused_with_its_name(tmp_path, text, problem):
    (tmp_path / "nvidia-h200-2026-12-03.json").write_text(text, encoding="utf-8")
    with pytest.raises(records.RecordError, match=rf"^nvidia-h200-2026-12-03\.json: .*{problem}"):
        records.load(tmp_path)


def test_a_record_must_be_named_after_its_machine_and_day(tmp_path):
    write(tmp_path, record(**{"snippets/pytorch/tensors.py": entry()}), name="my-copy")
    with pytest.raises(records.RecordError, match="my-copy.json: should be named nvidia-h200-2026-12-03.json"):
        records.load(tmp_path)


def test_a_second_run_on_the_same_machine_and_day_replaces_the_first(tmp_path, patch_snippets):
    demo = tmp_path / "demo.py"
    patch_snippets.setattr(snippets, "ROOT", tmp_path)
    patch_snippets.setattr(snippets, "discover", lambda: [demo])
    for text in ("first", "second"):
        demo.write_text(f"print({text!r})\n")
        records.record(tmp_path / "records")
    files = list((tmp_path / "records").glob("*.json"))
    assert len(files) == 1
    (only,) = records.load(tmp_path / "records")
    assert only.snippets["demo.py"]["stdout"] == "second\n"


def test_a_failing_snippet_is_recorded_not_dropped(tmp_path, patch_snippets):
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('CUDA error: injected')\n")
    patch_snippets.setattr(snippets, "ROOT", tmp_path)
    patch_snippets.setattr(snippets, "discover", lambda: [broken])
    (rec,) = records.load(records.record(tmp_path)[0].parent)
    kept = rec.snippets["broken.py"]
    assert kept["returncode"] == 1 and "RuntimeError: CUDA error: injected" in kept["stderr_tail"]
    assert rec.status("broken.py", tmp_path) == ("failed", [])


def test_adding_records_of_the_same_machine_and_day_loses_no_entry(tmp_path):
    kept = tmp_path / "records"
    kept.mkdir()
    one, two = tmp_path / "one", tmp_path / "two"
    for folder in (one, two):
        folder.mkdir()
    records.add(write(one, record(**{"snippets/a.py": entry(), "snippets/b.py": entry(stdout="b, first\n")})), kept)
    records.add(write(two, record(**{"snippets/b.py": entry(stdout="b, again\n"), "snippets/c.py": entry()})), kept)
    (rec,) = records.load(kept)
    assert sorted(rec.snippets) == ["snippets/a.py", "snippets/b.py", "snippets/c.py"]
    assert rec.snippets["snippets/b.py"]["stdout"] == "b, again\n"  # the later run of the same snippet


def test_adding_a_record_of_another_torch_on_the_same_day_is_refused(tmp_path):
    kept = tmp_path / "records"
    kept.mkdir()
    write(kept, record(**{"snippets/a.py": entry()}))
    before = (kept / "nvidia-h200-2026-12-03.json").read_text(encoding="utf-8")
    other = {**record(**{"snippets/b.py": entry()}), "machine": {**MACHINE, "torch": "2.13.0+cu130"}}
    with pytest.raises(records.RecordError, match=r"^colab\.json: its machine differs .* in torch;"):
        records.add(write(tmp_path, other, name="colab"), kept)
    assert (kept / "nvidia-h200-2026-12-03.json").read_text(encoding="utf-8") == before


def test_a_budget_leaves_out_what_does_not_fit_and_says_so(tmp_path, patch_snippets):
    scripts = {"a_broken.py": "raise SystemExit('broken')\n", "b_fast.py": "print('fast')\n",
               "c_slow.py": "import time\ntime.sleep(60)\n", "d_late.py": "print('never started')\n"}
    for name, text in scripts.items():
        (tmp_path / name).write_text(text)
    patch_snippets.setattr(snippets, "ROOT", tmp_path)
    patch_snippets.setattr(snippets, "discover", lambda: sorted(tmp_path.glob("*.py")))
    patch_snippets.setattr(records, "MIN_SLOT", 1)
    patch_snippets.setattr(records, "slug", lambda device, day: "lent-gpu-" + day)
    committed, real = records.RECORDS, records.load  # whose names the patched slug would refuse
    patch_snippets.setattr(records, "load", lambda folder=committed: [] if folder == committed else real(folder))
    out = tmp_path / "out"
    assert records.main(["--out", str(out), "--budget", "3"]) == 0
    (rec,) = records.load(out)
    assert list(rec.snippets) == ["a_broken.py", "b_fast.py"]  # c cut short, d never started: not recorded
    report = (out / "failures.txt").read_text(encoding="utf-8")
    assert report.startswith("a_broken.py exited with code 1\nbroken\n")
    assert re.search(r"^c_slow\.py: cut at [12] s by the budget", report, re.M) and "d_late.py: not run" in report


def test_status_follows_the_sources(tmp_path, patch_snippets):
    shutil.copytree(ROOT / "snippets", tmp_path / "snippets")
    patch_snippets.setattr(snippets, "ROOT", tmp_path)
    patch_snippets.setattr(snippets, "SNIPPETS", tmp_path / "snippets")
    rec = records.Record("r", MACHINE, "2026-12-03", {
        "snippets/gpu/check_gpu.py": entry("snippets/gpu/check_gpu.py", root=tmp_path),
        "snippets/pytorch/tensors.py": entry(root=tmp_path)})
    assert rec.status("snippets/gpu/check_gpu.py", tmp_path) == ("current", [])
    assert rec.status("snippets/pytorch/nn.py", tmp_path) == ("missing", [])
    doctor = tmp_path / "snippets/gpu/gpu_doctor.py"  # imported by check_gpu.py
    doctor.write_text(doctor.read_text() + "\n# changed\n")
    assert rec.status("snippets/gpu/check_gpu.py", tmp_path) == ("stale", ["snippets/gpu/gpu_doctor.py"])
    (tmp_path / "snippets/pytorch/tensors.py").unlink()  # renamed or deleted
    assert rec.status("snippets/pytorch/tensors.py", tmp_path)[0] == "stale"


@pytest.fixture
def fake_build():
    """Three records for tensors.py (current, failed, stale), and a build of two snippets."""
    ours = [snippets.Result(path, 0, f"this build: {path}\n", "", 1.0, 120, {
        "device": "cpu: Test CPU", "torch": "2.13.0+cpu", "python": "3.11.7"})
        for path in ("snippets/pytorch/nn.py", "snippets/pytorch/tensors.py")]
    path = "snippets/pytorch/tensors.py"
    made = [records.Record(f"r{i}", {**MACHINE, "device": device}, "2026-12-03", {path: e})
            for i, (device, e) in enumerate([
                ("GPU A", entry(stdout="from GPU A\n")),
                ("GPU B", entry(returncode=1)),
                ("GPU C", {**entry(stdout="from GPU C\n"), "sources": {path: "0" * 64}})])]
    return ours, made


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_output_tabs_show_current_failed_and_labelled_stale_records(fake_build, lang, monkeypatch):
    """A stale entry keeps its tab, labelled and styled as the run of an earlier version, under
    a note naming the files changed since; a failed one stays a failure."""
    monkeypatch.delenv("REPO_URL", raising=False)
    ours, made = fake_build
    labels = output_blocks.LABELS[lang]
    block = output_blocks.output_block(ours[1].path, ours[1], labels, made)
    tabs = [line for line in block.splitlines() if line.startswith("=== ")]
    assert tabs == [f'=== "{labels["build"]}"', '=== "GPU A · 2026-12-03"', '=== "GPU B · 2026-12-03"',
                    f'=== "*GPU C · 2026-12-03 · {labels["earlier"]}*{{: .snippet-stale }}"']
    assert block.index("this build: snippets/pytorch/tensors.py") < block.index("from GPU A")
    assert f"{labels['failed']} 1" in block and "RuntimeError: CUDA error: injected" in block
    note = labels["earlier_note"].format(day="2026-12-03", files="`snippets/pytorch/tensors.py`")
    assert block.index(note + "\n    {: .snippet-stale-note }") < block.index("from GPU C"), "the note above the output"
    assert (f"{labels['recorded']} GPU A · torch 2.11.0+cu130 · CUDA 13.0 · "
            f"{labels['driver']} 580.95.05 · 2026-12-03") in block


def test_a_stale_note_links_each_changed_file_s_history_on_github_only(fake_build, monkeypatch):
    ours, made = fake_build
    path, labels = ours[1].path, output_blocks.LABELS["en"]
    monkeypatch.setenv("REPO_URL", "https://github.com/owner/site/")
    link = f"[`{path}`](https://github.com/owner/site/commits/main/{path}?since=2026-12-03)"
    assert labels["earlier_note"].format(day="2026-12-03", files=link) in output_blocks.output_block(
        path, ours[1], labels, made)
    monkeypatch.setenv("REPO_URL", "https://gitlab.com/owner/site")  # another host's history is elsewhere
    assert f"`{path}`](" not in output_blocks.output_block(path, ours[1], labels, made)


def test_a_stale_tab_is_shown_only_where_its_device_has_nothing_newer(fake_build):
    """One tab per device at most for stale entries: the newest, and none beside a current or
    failed entry of the same device, which says more of today's code."""
    ours, made = fake_build
    path, labels = ours[1].path, output_blocks.LABELS["en"]
    stale = made[2].snippets[path]
    older = records.Record("old", made[2].machine, "2026-11-30", {path: stale})
    again = records.Record("new", made[0].machine, "2026-12-05", {path: stale})  # GPU A: current on 12-03
    assert [r.name for r in output_blocks.with_tabs(path, [again, *made, older])] == ["r0", "r1", "r2"]
    block = output_blocks.output_block(path, ours[1], labels, [again, *made, older])
    assert block.count("{: .snippet-stale }") == 1 and "GPU C · 2026-11-30" not in block


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_verified_on_matrix_has_a_column_per_record(fake_build, lang):
    ours, made = fake_build
    labels = output_blocks.LABELS[lang]
    table = output_blocks.provenance_table({r.path: r for r in ours}, labels, made)
    row = next(line for line in table.splitlines() if line.startswith("| `snippets/pytorch/tensors.py`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:] == ["✓", "✗ (1)", f"{labels['stale']} (2026-12-03; {labels['changed']}{labels['colon']}"
                                         "`snippets/pytorch/tensors.py`)"]
    other = next(line for line in table.splitlines() if line.startswith("| `snippets/pytorch/nn.py`"))
    assert other.count(labels["missing"]) == 3


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_under_serve_a_pending_snippet_says_running_and_a_failed_one_shows_why(fake_build, lang):
    """sitebuild/background.py: what a page shows before a result exists, and a failure."""
    ours, made = fake_build
    labels = output_blocks.LABELS[lang]
    path = "snippets/pytorch/nn.py"
    pending = output_blocks.output_block(path, None, labels, made)
    assert labels["running"].format(path=path) in pending and "this build" not in pending
    failed = snippets.Result(path, 1, "", "Traceback\nRuntimeError: injected fault 31\n", 1.0, 120, ours[0].env)
    shown = output_blocks.output_block(path, failed, labels, made)
    assert labels["broke"].format(path=path) in shown and "RuntimeError: injected fault 31" in shown
    table = output_blocks.provenance_table({path: None, ours[1].path: failed}, labels, made)
    assert f"| `{path}` | {labels['pending']} |" in table and "✗ (exited with code 1)" in table


EXTENSIONS = ["sitebuild.output_blocks", "attr_list", "pymdownx.superfences", "pymdownx.tabbed"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_markdown_extension_renders_an_output_line_alone(snippet_results, lang):
    """Python-Markdown with the extension, no MkDocs: what ProperDocs or Zensical would run."""
    path = "snippets/pytorch/tensors.py"
    html = markdown.markdown(f"Text.\n\n<!-- output: {path} -->\n", extensions=EXTENSIONS,
                             extension_configs={"sitebuild.output_blocks": {"language": lang}})
    assert f'{output_blocks.LABELS[lang]["output"]} · {path}' in html
    assert snippet_results[path].stdout.strip().splitlines()[0].split()[0] in html
    assert 'class="snippet-provenance"' in html and "<!-- output:" not in html


def test_the_markdown_extension_refuses_what_it_cannot_show():
    with pytest.raises(output_blocks.SnippetError, match="no snippet 'snippets/nowhere.py'"):
        markdown.markdown("<!-- output: snippets/nowhere.py -->", extensions=EXTENSIONS)
    with pytest.raises(output_blocks.SnippetError, match="language 'fr'"):
        markdown.markdown("x", extensions=EXTENSIONS, extension_configs={"sitebuild.output_blocks": {"language": "fr"}})


def test_built_pages_show_each_current_record(site):
    """Whatever records/ holds: current and failed entries get a tab, and so does a stale one
    where its device has nothing newer, labelled as an earlier version in both languages."""
    recs = records.load()
    for rec in recs:
        for page in en_pages():
            paths = outputs(page.read_text(encoding="utf-8"))
            if not paths:  # "Verified on" lists every record, with no output of its own
                continue
            expected = [path for path in paths if rec in output_blocks.with_tabs(path, recs)]
            stale = any(rec.status(path)[0] == "stale" for path in expected)
            for lang in ("en", "zh"):
                labels = output_blocks.LABELS[lang]
                text = visible_text(html_of(site, page, lang))
                name = output_blocks.device(rec.machine["device"], labels)
                shown = f"{labels['recorded']} {name}" in text
                assert shown == bool(expected), f"{page.relative_to(DOCS)} ({lang}): {rec.name}"
                assert not stale or f"{name} · {rec.recorded} · {labels['earlier']}" in text, \
                    f"{page.relative_to(DOCS)} ({lang}): {rec.name}'s stale tab is not labelled"


def test_what_a_budget_cut_is_told_apart_from_what_the_record_never_had(fake_build):
    """'not run: time budget' for a snippet the record's budget left out; 'not in this record'
    for one it never had (newer than the record); both languages; kept by `add`'s merge."""
    ours, _ = fake_build
    rec = records.Record("r", MACHINE, "2026-12-03", {}, left_out=["snippets/pytorch/nn.py"])
    for lang in ("en", "zh"):
        labels = output_blocks.LABELS[lang]
        table = output_blocks.provenance_table({r.path: r for r in ours}, labels, [rec])
        assert f"| `snippets/pytorch/nn.py` | ✓ 1.0 s | {labels['cut']} |" in table
        assert f"| `snippets/pytorch/tensors.py` | ✓ 1.0 s | {labels['missing']} |" in table
    old = {**record(**{"snippets/a.py": entry()}), "left_out": ["snippets/b.py", "snippets/c.py"]}
    new = {**record(**{"snippets/b.py": entry()}), "left_out": ["snippets/d.py"]}
    assert records.merged(old, new, "new.json")["left_out"] == ["snippets/c.py", "snippets/d.py"]


def test_a_cpu_record_is_named_in_the_page_s_language():
    rec = records.Record("r", {**MACHINE, "device": "cpu: Intel(R) Xeon(R) Processor"}, "2026-12-03", {})
    assert output_blocks.record_label(rec, output_blocks.LABELS["en"]) == "cpu: Intel(R) Xeon(R) Processor · 2026-12-03"
    assert output_blocks.record_label(rec, output_blocks.LABELS["zh"]) == "CPU：Intel(R) Xeon(R) Processor · 2026-12-03"


def test_what_the_provenance_page_says_of_the_gpu_record_is_what_the_record_holds():
    """A sentence that counts a record's runs is checked against the record, in both languages."""
    (gpu,) = [r for r in records.load() if r.machine["gpus"]]
    runs, passed = len(gpu.snippets), sum(e["returncode"] == 0 for e in gpu.snippets.values())
    en = " ".join((DOCS / "provenance.md").read_text(encoding="utf-8").split())
    zh = (DOCS / "provenance.zh.md").read_text(encoding="utf-8")
    assert f"`records/{gpu.name}.json`, a run of all {runs} snippets" in en and f"in which all {passed} passed" in en
    assert f"把全部 {runs} 个示例各运行一遍" in zh and f"{passed} 个全部通过" in zh


SCRIPTS = {  # a tree of snippets for the order of a lent GPU's runs (records.plan)
    "a_plain.py": "print('a')\n", "b_timed.py": "# times cuda with time.perf_counter\nprint('b')\n",
    "c_stale.py": "print('c')\n", "d_failed.py": "print('d')\n",
    "e_timed.py": "# torch.cuda.max_memory_allocated\nprint('e')\n", "f_current.py": "print('f')\n",
}


@pytest.fixture
def tree(tmp_path, patch_snippets):
    """SCRIPTS as the repository's snippets, each appending its name to order.txt when run."""
    for name, text in SCRIPTS.items():
        (tmp_path / name).write_text(f"open({str(tmp_path / 'order.txt')!r}, 'a').write({name!r} + ' ')\n" + text)
    patch_snippets.setattr(snippets, "ROOT", tmp_path)
    patch_snippets.setattr(snippets, "discover", lambda: sorted(tmp_path.glob("*.py")))
    return tmp_path


def gpu_x(tmp_path) -> list[records.Record]:
    """GPU X's records of SCRIPTS: c stale, d failed, e and f current (and e stale in an older
    record); GPU Y's current entry of a counts for GPU Y only."""
    now = {name: entry(name, root=tmp_path) for name in SCRIPTS}
    stale = {name: {**e, "sources": {name: "0" * 64}} for name, e in now.items()}
    x = {**MACHINE, "device": "GPU X"}
    return [records.Record("x", x, "2026-12-04", {"c_stale.py": stale["c_stale.py"],
                                                  "d_failed.py": {**now["d_failed.py"], "returncode": 1},
                                                  "e_timed.py": now["e_timed.py"], "f_current.py": now["f_current.py"]}),
            records.Record("x-old", x, "2026-12-01", {"e_timed.py": stale["e_timed.py"]}),
            records.Record("y", {**MACHINE, "device": "GPU Y"}, "2026-12-04", {"a_plain.py": now["a_plain.py"]})]


def test_a_lent_gpu_runs_what_its_kind_never_showed_first_and_a_dry_run_says_so(tree, monkeypatch, capsys):
    """Never recorded on this device, then stale, failed, current; within each, the snippets
    that measure on the GPU (CUDA and a clock or memory counter) first. The dry run runs nothing."""
    monkeypatch.setattr(records, "load", lambda folder=records.RECORDS: gpu_x(tree))
    monkeypatch.setattr(snippets, "execute", lambda *args, **kwargs: pytest.fail("a dry run ran a snippet"))
    assert records.main(["--dry-run", "--device", "GPU X"]) == 0
    lines = [line.split(maxsplit=2)[1:] for line in capsys.readouterr().out.splitlines()]
    assert lines == [["b_timed.py", "never recorded on GPU X; measures on the GPU"],
                     ["a_plain.py", "never recorded on GPU X"], ["c_stale.py", "stale on GPU X"],
                     ["d_failed.py", "failed on GPU X"], ["e_timed.py", "current on GPU X; measures on the GPU"],
                     ["f_current.py", "current on GPU X"]]


def test_a_run_takes_the_planned_order_and_its_record_lists_snippets_by_path(tree, monkeypatch):
    monkeypatch.setattr(records, "load", lambda folder=records.RECORDS: gpu_x(tree))
    monkeypatch.setattr(snippets, "machine", lambda: {**MACHINE, "device": "GPU X"})
    written, _ = records.record(tree / "records")
    assert (tree / "order.txt").read_text().split() == ["b_timed.py", "a_plain.py", "c_stale.py", "d_failed.py",
                                                        "e_timed.py", "f_current.py"]
    assert list(json.loads(written.read_text(encoding="utf-8"))["snippets"]) == sorted(SCRIPTS)


def test_adding_keeps_the_best_run_of_each_snippet(tree, capsys):
    """Today's code over an earlier version's, whatever each printed; of the same code, a pass
    over a failure; otherwise the later run. What the added file loses is printed, with why."""
    kept = tree / "records"
    kept.mkdir()
    now = {name: entry(name, stdout=f"{name} first\n", root=tree) for name in SCRIPTS}
    old_code = {"sources": {"x.py": "0" * 64}}
    write(kept, record(**{"a_plain.py": now["a_plain.py"], "b_timed.py": {**now["b_timed.py"], **old_code},
                          "c_stale.py": {**now["c_stale.py"], "returncode": 1}, "d_failed.py": now["d_failed.py"],
                          "e_timed.py": {**now["e_timed.py"], **old_code}}))
    again = {name: entry(name, stdout=f"{name} again\n", root=tree) for name in SCRIPTS}
    records.add(write(tree, record(**{
        "a_plain.py": {**again["a_plain.py"], "returncode": 1},  # the same code failed: the pass stays
        "b_timed.py": {**again["b_timed.py"], "returncode": 1},  # today's code failed: over an earlier pass
        "c_stale.py": again["c_stale.py"],                       # the same code passed: over the failure
        "d_failed.py": {**again["d_failed.py"], **old_code},     # an earlier version: today's run stays
        "e_timed.py": {**again["e_timed.py"], **old_code},       # two runs of the same earlier code: the later
    }), name="lent"), kept)
    (rec,) = records.load(kept)
    assert {path: (e["stdout"].split()[1], e["returncode"]) for path, e in rec.snippets.items()} == {
        "a_plain.py": ("first", 0), "b_timed.py": ("again", 1), "c_stale.py": ("again", 0),
        "d_failed.py": ("first", 0), "e_timed.py": ("again", 0)}
    said = capsys.readouterr().out
    assert "a_plain.py: kept the entry already in nvidia-h200-2026-12-03.json: it passed, this run of the same " \
           "code failed (exit code 1)" in said
    assert "d_failed.py: kept the entry already in nvidia-h200-2026-12-03.json: it ran today's code" in said
