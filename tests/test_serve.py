"""`make serve` as a writer meets it (sitebuild/background.py): the site first, results later.

A copy of the project gets two new snippets, one that prints and one that fails, shown on
the tensors page in both languages. Every other snippet and lab is already in the
session's caches, so the copy's serve runs only those two. The served pages must say
"running…" / 「运行中…」 first, then, without any request from us, rebuild with the real
output and with the failure on the page; a prose edit must then be served too. That the
strict build still stops on a failing snippet is tests/test_bad_input.py's first fault.

A rebuild reuses what Python-Markdown made of each unchanged page (sitebuild/render_memo.py),
so the first test also shows that the background runs' results reach a page whose Markdown
did not change, and the last that one page's edit still reaches every page it shows on
(its title, in their navigation) and that a link from an unchanged page to an anchor the
edit removed still stops the strict rebuild.

Those tests share the session's caches, so they cannot see what a newcomer meets: at 7bdab8e
the first `make serve` of a fresh clone aborted, because a page linked a file its snippet had
not written yet. The first test here starts exactly the Makefile's command in a copy with no
.cache/, no site/, no generated file, no cache directory of the session and an empty Inductor
cache, and stops it with Ctrl+C, as a writer does.
"""

import json
import os
import re
import time
import uuid

import pytest
from sitebuild import background, snippets
from tests.conftest import ROOT
from tests.serving import Served, fresh_copy

PAGE = "docs/pytorch/tensors"
RUN = uuid.uuid4().hex  # in the sources: a result kept from an earlier session cannot answer
WORKS = f'print("served", 6 * 7)  # {RUN}\n'
FAILS = f'raise RuntimeError("injected fault 2718")  # {RUN}\n'


# The session's caches and its machine probe: a newcomer has none of them. MAKEFLAGS and
# MAKELEVEL: `make test` runs pytest, and a nested make would read them.
SESSION_ONLY = {"SNIPPET_CACHE_DIR", "LAB_CACHE_DIR", "SEARCH_CACHE_DIR", snippets.HANDED, "MAKEFLAGS", "MAKELEVEL", "MFLAGS"}


def test_a_fresh_clone_serves_at_once_with_no_warning_and_cleans_up(tmp_path):
    clone = fresh_copy((tmp_path / "clone"))
    assert not (clone / ".cache").exists() and not (clone / "site").exists()
    (clone / ".venv").symlink_to(ROOT / ".venv")  # make's stamp is newer than requirements.txt: no install
    temp, inductor = tmp_path / "tmp", tmp_path / "inductor"
    temp.mkdir(), inductor.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in SESSION_ONLY}
    env |= {"TMPDIR": str(temp), "TORCHINDUCTOR_CACHE_DIR": str(inductor),
            "PYTHONPATH": str(clone)}  # the clone's sitebuild, not the editable install's (hooks/snippet_runner.py)
    server = Served(clone, env, command=lambda address: ["make", "serve", f"ADDR={address}"])
    try:
        server.until("Serving on", limit=300)
        first = "".join(server.log)
        home, profiling = server.page(), server.page("performance/profiling/")
        trace = server.page("generated/performance/profiling/trace.json")  # the link that aborted at 7bdab8e
    finally:
        server.stop()
    assert "WARNING" not in first and "Aborted" not in first, first
    assert "PyTorch" in home and "running… snippets/performance/profiling.py" in profiling
    assert json.loads(trace) == "running… snippets/performance/profiling.py"
    assert not list(temp.glob("mkdocs_*")), "mkdocs serve left its temporary site behind"


@pytest.fixture(scope="module")
def project(tmp_path_factory, build):
    """The copy, once the session's build has filled the caches it shares."""
    folder = fresh_copy(tmp_path_factory.mktemp("serve"))
    (folder / "snippets" / "serve_demo").mkdir()
    (folder / "snippets" / "serve_demo" / "works.py").write_text(WORKS, encoding="utf-8")
    (folder / "snippets" / "serve_demo" / "fails.py").write_text(FAILS, encoding="utf-8")
    for page in (f"{PAGE}.md", f"{PAGE}.zh.md"):
        with open(folder / page, "a", encoding="utf-8") as text:
            text.write("\n<!-- output: snippets/serve_demo/works.py -->\n\n<!-- output: snippets/serve_demo/fails.py -->\n")
    return folder


@pytest.fixture(scope="module")
def served(project):
    server = Served(project, dict(os.environ))  # with the session's caches (conftest.py names them)
    server.until("Serving on", limit=300)
    yield server
    server.stop()


def test_pages_say_running_then_reload_with_the_output_and_the_failure(served):
    first_en, first_zh = served.page("pytorch/tensors/"), served.page("zh/pytorch/tensors/")
    assert "running… snippets/serve_demo/works.py" in first_en
    assert "运行中…snippets/serve_demo/works.py" in first_zh
    assert "served 42" not in first_en
    served.until(background.DONE, limit=300)
    log = "".join(served.log)  # progress as the results came, then the count (background.Progress)
    queued = int(re.search(r"(\d+) snippets run in the background", log).group(1))
    assert f"snippets: {queued}/{queued} done" in log, log
    assert f"snippets: {queued - 1} passed, 1 failed: snippets/serve_demo/fails.py" in log, log
    served.until("Reloading browsers", limit=300)
    for path in ("pytorch/tensors/", "zh/pytorch/tensors/"):
        page = served.page(path)
        assert "served 42" in page and "running…" not in page and "运行中…" not in page
        assert "snippets/serve_demo/fails.py exited with code 1" in page
        assert "RuntimeError: injected fault 2718" in page


def test_a_prose_edit_is_served(served, project):
    sentence = "A sentence the server must pick up."
    with open(project / "docs" / "index.md", "a", encoding="utf-8") as text:
        text.write(f"\n{sentence}\n")
    deadline = time.monotonic() + 120
    while sentence not in served.page():
        assert time.monotonic() < deadline, "the edit was not served within 120 s:\n" + "".join(served.log[-20:])
        time.sleep(0.5)


def test_an_edit_reaches_the_pages_it_shows_on_and_a_broken_anchor_still_stops_the_rebuild(served, project):
    page = project / "docs" / "pytorch" / "autograd.md"
    original = page.read_text(encoding="utf-8")
    title = f"Autograd {RUN[:8]}"
    page.write_text(original.replace("# Autograd {", f"# {title} {{", 1), encoding="utf-8")
    deadline = time.monotonic() + 120
    while title not in served.page("pytorch/tensors/"):  # the other page's navigation
        assert time.monotonic() < deadline, "the title is not in another page's navigation:\n" + "".join(served.log[-20:])
        time.sleep(0.5)
    try:  # pytorch/optim.md, unchanged, links autograd.md#accumulation
        page.write_text(original.replace("{ #accumulation }", "{ #accumulation-moved }", 1), encoding="utf-8")
        served.until("does not contain an anchor '#accumulation'", limit=120)
        assert "Doc file 'pytorch/optim.md'" in served.log[-1]
        served.until("An error happened during the rebuild", limit=120)
    finally:
        page.write_text(original, encoding="utf-8")
    served.until("Reloading browsers", limit=120)
    assert "Autograd" in served.page("pytorch/tensors/") and title not in served.page("pytorch/tensors/")
