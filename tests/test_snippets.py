"""Every snippet runs to the end and its asserts pass: one test per snippet."""

import json
import os
import subprocess
import sys

import pytest

from sitebuild import results, snippets

SNIPPETS = snippets.discover()


def test_snippets_exist():
    assert SNIPPETS, "no snippet found under snippets/"


@pytest.mark.parametrize("path", SNIPPETS, ids=snippets.relative)
def test_snippet_runs(path, snippet_results):
    result = snippet_results[snippets.relative(path)]
    assert result.ok, result.failure()
    assert result.stdout.strip(), f"{result.path} printed nothing for its page"


def test_cache_key_follows_content(tmp_path, patch_snippets):
    """A changed snippet or a changed local import gets a new key; nothing else does."""
    patch_snippets.setattr(snippets, "SNIPPETS", tmp_path)
    patch_snippets.setattr(snippets, "ROOT", tmp_path)
    helper = tmp_path / "_helper.py"
    helper.write_text("X = 1\n")
    snippet = tmp_path / "demo.py"
    snippet.write_text("import _helper\nprint(_helper.X)\n")
    first = results.cache_key(snippet)
    assert results.cache_key(snippet) == first
    helper.write_text("X = 2\n")
    second = results.cache_key(snippet)
    snippet.write_text("import _helper\nprint(_helper.X + 1)\n")
    assert len({first, second, results.cache_key(snippet)}) == 3


def test_cache_key_follows_the_variables_that_pick_kernels():
    """A build under a CPU profile (make bench) runs its snippets, never taking the native results.
    Worked out in child processes: a variable set in this one would reach the builds that
    background jobs start meanwhile."""
    snippet = snippets.SNIPPETS / "pytorch" / "tensors.py"
    native = {k: v for k, v in os.environ.items() if k not in snippets.KERNEL_VARIABLES}

    def key(env):
        code = f"from pathlib import Path; from sitebuild import results; print(results.cache_key(Path({str(snippet)!r})))"
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True, timeout=120).stdout
    assert key(native) == key(native) != key(native | snippets.CPU_PROFILES["old-laptop"])


def test_options_are_read(tmp_path):
    snippet = tmp_path / "slow.py"
    snippet.write_text('"""Doc."""\n# snippet: timeout=7 serial\nprint(1)\n')
    assert snippets.options(snippet) == (7, True) and not snippets.cpu_independent(snippet)
    snippet.write_text("# snippet: cpu-independent\nprint(1)\n")
    assert snippets.options(snippet) == (snippets.DEFAULT_TIMEOUT, False) and snippets.cpu_independent(snippet)


def test_each_cpu_capability_gets_its_own_inductor_cache(tmp_path, patch_snippets):
    """Inductor's FX graph cache would hand code built for one ISA to a run under another
    (snippets.inductor_cache), the folder torch itself put in os.environ included."""
    patch_snippets.setattr(snippets, "ROOT", tmp_path)
    snippet = tmp_path / "where.py"
    snippet.write_text('import os\nprint(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))\n')

    def cache_dir(env):
        result = snippets.execute(snippet, tmp_path, env=env)
        assert result.ok, result.failure()
        return result.stdout.strip()

    avx2, default = (cache_dir(snippets.CPU_PROFILES[name]) for name in ("avx2", "old-laptop"))
    assert avx2 != default and avx2.endswith("_avx2") and default.endswith("_default")
    assert cache_dir({"ATEN_CPU_CAPABILITY": "avx2", "TORCHINDUCTOR_CACHE_DIR": "mine"}) == "mine_avx2"
    assert cache_dir({"TORCHINDUCTOR_CACHE_DIR": "mine"}) == "mine"


def test_a_process_takes_the_probe_its_parent_handed_down_unless_it_sees_other_devices(tmp_path):
    """The builds a test session starts take its machine probe (snippets.HANDED) instead of
    importing torch for one of their own, but not where other GPUs are visible. A snippet's
    environment is left without it, as a reader's would be."""
    handed = {"asker": snippets.asker(), "machine": {"device": "handed down"}}
    ask = "from sitebuild import snippets; print(snippets.machine()['device'])"

    def device(**env):
        environ = {**os.environ, snippets.HANDED: json.dumps(handed), **env}
        return subprocess.run([sys.executable, "-c", ask], env=environ, capture_output=True, text=True,
                              check=True).stdout.strip()
    assert device() == "handed down"
    other = "" if os.environ.get("CUDA_VISIBLE_DEVICES") != "" else "0"
    assert device(CUDA_VISIBLE_DEVICES=other) != "handed down"
    shows = tmp_path / "shows.py"
    shows.write_text(f"import os\nprint(os.environ.get({snippets.HANDED!r}))\n", encoding="utf-8")
    assert snippets.execute(shows, tmp_path, env={snippets.HANDED: "set"}, root=tmp_path).stdout == "None\n"


def test_a_failure_names_its_pages_then_introduces_its_stderr(tmp_path):
    """The build's error names the pages to look at (an output line, or an include of the code,
    in either language), and its stderr comes after a line that reads as a header."""
    (tmp_path / "docs" / "x").mkdir(parents=True)
    (tmp_path / "docs" / "x" / "page.md").write_text("<!-- output: snippets/x/demo.py -->\n", encoding="utf-8")
    (tmp_path / "docs" / "x" / "page.zh.md").write_text('```python\n--8<-- "snippets/x/demo.py:part"\n```\n',
                                                         encoding="utf-8")
    (tmp_path / "docs" / "other.md").write_text('--8<-- "snippets/x/demo_two.py"\n', encoding="utf-8")
    pages = snippets.pages_including("snippets/x/demo.py", tmp_path)
    assert pages == ["docs/x/page.md", "docs/x/page.zh.md"]
    assert snippets.pages_including("snippets/x/nowhere.py", tmp_path) == []
    result = snippets.Result("snippets/x/demo.py", 1, "", "Traceback (most recent call last):\nValueError: 7\n",
                             1.0, 120, {})
    assert result.failure(pages).splitlines() == [
        "snippet snippets/x/demo.py exited with code 1",
        "pages that include it: docs/x/page.md, docs/x/page.zh.md",
        f"--- its stderr (the last {snippets.STDERR_TAIL} lines at most) follows ---",
        "Traceback (most recent call last):", "ValueError: 7"]
    assert result.failure([]).splitlines()[1] == "no page includes it"
    assert "pages" not in result.failure()  # on the snippet's own page, which needs no pointer to itself
    result.stderr = ""
    assert result.failure().splitlines()[-1] == "--- its stderr was empty ---"


def test_serve_reports_progress_as_results_arrive(tmp_path, patch_snippets, monkeypatch):
    """`make serve`'s background runs say how far they are, then how many passed and failed."""
    from sitebuild import background

    patch_snippets.setattr(snippets, "ROOT", tmp_path)
    patch_snippets.setattr(snippets, "SNIPPETS", tmp_path)
    monkeypatch.setenv("SNIPPET_CACHE_DIR", str(tmp_path / "cache"))
    said = []
    monkeypatch.setattr(background, "progress", type("Log", (), {"info": staticmethod(said.append)}))
    paths = []
    for name, code in (("a_works.py", "print(1)\n"), ("b_fails.py", "raise SystemExit(3)\n"),
                       ("c_works.py", "# snippet: serial\nprint(2)\n")):
        paths.append(tmp_path / name)
        paths[-1].write_text(code, encoding="utf-8")
    found = results.run_all(paths, background.Progress(len(paths)))
    assert [r.ok for r in found.values()] == [True, False, True]
    counts = sorted(line.split(" (")[0] for line in said[:3])  # the two parallel ones may log in either order
    assert counts == ["1/3 done", "2/3 done", "3/3 done"], said  # logged as "snippets: 1/3 done"
    assert sum(line.endswith("done (b_fails.py failed)") for line in said[:3]) == 1, said
    assert said[3:] == ["2 passed, 1 failed: b_fails.py (each page shows why)"]
