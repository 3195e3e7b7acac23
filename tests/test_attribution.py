"""Each line of a snippet's output, attributed to the named section that was running when it was
printed (sitebuild/attribution.py): by fresh runs, by forked runs (sitebuild/forkserver.py) and so
by the CPU profiles and the recorder, which run snippets through ``snippets.execute``; while the
output stays byte for byte what ``python snippet.py`` prints."""

import ast
import errno
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path

import pytest

from sitebuild import attribution, forkserver, results, snippets

# Prints from the main process, from a helper defined in another section, from two spawned ranks,
# from a subprocess and from C, with setup between sections and an ``if __name__`` block that holds
# two sections. The ranks import the file as __mp_main__: the module-level prints are the main's only.
# A helper's line counts for the main's statement that called it; a rank's for the section of the
# function that printed it (helpers), not for the mp.spawn that the main is in (ranks).
EVERYWHERE = textwrap.dedent('''\
    """Prints from everywhere."""
    import ctypes
    import os
    import subprocess
    import sys
    import time

    import torch.multiprocessing as mp

    MAIN = __name__ == "__main__"
    if MAIN:
        print("before any section")

    # --8<-- [start:helpers]
    def shout(word):
        print("helper:", word)


    def rank(i):
        if i == 1:  # rank 1 prints once rank 0 has printed
            while not os.path.exists(DONE):
                time.sleep(0.01)
        print(f"rank {i} of 2", flush=True)
        if i == 0:
            open(DONE, "w").close()


    if MAIN:
        print("helpers defined")
    # --8<-- [end:helpers]

    DONE = os.path.join(os.path.dirname(__file__), "rank0.done")
    if MAIN:
        print("between sections")

    # --8<-- [start:main]
    if MAIN:
        print("main process:", sys.argv[0] == __file__, sys.path[0], "é")
        shout("called from main")
        subprocess.run(["echo", "echo from outside Python"], check=True)
        libc = ctypes.CDLL(None)
        libc.printf(b"printf from C\\n")
        libc.fflush(None)
    # --8<-- [end:main]

    if __name__ == "__main__":
        # --8<-- [start:ranks]
        if os.path.exists(DONE):
            os.remove(DONE)
        mp.spawn(rank, nprocs=2)
        print("ranks joined")
        # --8<-- [end:ranks]

        # --8<-- [start:last]
        print("in the last section")
        # --8<-- [end:last]
        print("after the last section, in the __main__ block")
        sys.stdout.write("no line break at the end")
''')


def expected_everywhere(folder: Path) -> tuple[str, list[list]]:
    lines = ["before any section",
             "helpers defined", "between sections",
             f"main process: True {folder} é", "helper: called from main", "echo from outside Python",
             "printf from C",
             "rank 0 of 2", "rank 1 of 2", "ranks joined",
             "in the last section", "after the last section, in the __main__ block", "no line break at the end"]
    return "\n".join(lines), [[None, 1], ["helpers", 2], ["main", 4], ["helpers", 2], ["ranks", 1], ["last", 3]]


def run(path: Path, preloaded: bool = False) -> snippets.Result:
    """``snippets.execute`` in the snippet's own folder, which stands for the repository."""
    return snippets.execute(path, path.parent, root=path.parent, preloaded=preloaded)


def plain(path: Path, *command: str, record: Path | None = None) -> subprocess.CompletedProcess:
    """``command`` (default: ``python <path>``) in the environment ``snippets.execute`` gives a run,
    its stdout a regular file as in ours; with ``record``, the side channel there."""
    environ = dict(os.environ, SNIPPET_OUTPUT_DIR=str(path.parent), MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    environ.pop(snippets.HANDED, None)
    if record is not None:
        environ[attribution.VARIABLE] = str(record)
    out = path.parent / f"{path.stem}.out"
    with out.open("wb") as stdout:
        proc = subprocess.run(list(command) or [sys.executable, str(path)], cwd=path.parent, env=environ,
                              stdout=stdout, stderr=subprocess.PIPE, timeout=300)
    proc.stdout = out.read_bytes()
    return proc


@pytest.mark.reads("sitebuild")
@pytest.mark.skipif(not forkserver.AVAILABLE, reason=f"no fork server on {sys.platform}")
def test_fresh_and_forked_runs_attribute_every_line_alike_and_print_what_python_prints(tmp_path):
    snippet = tmp_path / "everywhere.py"
    snippet.write_text(EVERYWHERE, encoding="utf-8")
    text, sections = expected_everywhere(tmp_path)
    fresh, forked = run(snippet), run(snippet, preloaded=True)
    assert fresh.ok, fresh.failure()
    assert (fresh.stdout, fresh.sections) == (text, sections)
    assert (forked.returncode, forked.stdout, forked.sections) == (0, text, sections)
    python = plain(snippet)
    assert python.returncode == 0 and b"\r" not in python.stdout
    assert python.stdout == fresh.stdout.encode("utf-8")  # decoding lost nothing: the same bytes


# Two processes that write many lines at once, one spawned and one forked, each from a function of
# its own section through a helper outside every section (as ddp.py's in_rank_order), while the main
# waits in a third. Without torch, so that a spawned rank starts in milliseconds; what
# torch.multiprocessing.spawn starts is multiprocessing's spawn (EVERYWHERE).
CONCURRENT = textwrap.dedent('''\
    import multiprocessing
    import os
    import sys
    import time

    LINES = 400
    HERE = os.path.dirname(__file__)

    # --8<-- [start:spawned]
    def spawned():
        write("spawned")
    # --8<-- [end:spawned]

    # --8<-- [start:forked]
    def forked():
        write("forked")
    # --8<-- [end:forked]

    def write(who):
        open(os.path.join(HERE, who), "w").close()
        while not all(os.path.exists(os.path.join(HERE, name)) for name in ("spawned", "forked")):
            time.sleep(0.001)  # both start writing together
        for i in range(LINES):
            sys.stdout.write(f"{who} {i} " + "x" * (i % 97) + "\\n")
            time.sleep(0)  # the other one's turn, if it wants one

    # --8<-- [start:launch]
    if __name__ == "__main__":
        ranks = [multiprocessing.get_context("spawn").Process(target=spawned),
                 multiprocessing.get_context("fork").Process(target=forked)]
        for rank in ranks:
            rank.start()
        for rank in ranks:
            rank.join()
        print("joined", [rank.exitcode for rank in ranks])
    # --8<-- [end:launch]
''')


@pytest.mark.reads("sitebuild")
@pytest.mark.parametrize("preloaded", [False, True], ids=["fresh", "forked"])
def test_lines_that_ranks_write_at_once_stay_whole_each_under_the_section_that_wrote_it(tmp_path, preloaded):
    if preloaded and not forkserver.AVAILABLE:
        pytest.skip(f"no fork server on {sys.platform}")
    snippet = tmp_path / "at_once.py"
    snippet.write_text(CONCURRENT, encoding="utf-8")
    result = run(snippet, preloaded=preloaded)
    assert result.ok, result.failure()
    lines = result.stdout.splitlines()
    expected = [f"{who} {i} " + "x" * (i % 97) for who in ("spawned", "forked") for i in range(400)]
    assert sorted(lines) == sorted(expected + ["joined [0, 0]"])  # every line whole
    assert sum(count for _, count in result.sections) == len(lines)
    names = [name for name, count in result.sections for _ in range(count)]
    assert names == [line.split(" ")[0] if line[0] in "sf" else "launch" for line in lines]


EDGES = textwrap.dedent('''\
    """Doc."""
    from __future__ import annotations
    import os
    import sys

    print(__doc__, list(globals()), sys.path, sys.argv, __file__, __package__, __spec__, __cached__,
          type(__loader__).__name__, __loader__.name, __loader__.path)

    # --8<-- [start:one]
    os.write(1, b"crlf\\r\\n")
    print("begun in one, ", end="")
    # --8<-- [end:one]

    # --8<-- [start:two]
    print("ended in two")
    os.write(1, b"bad \\xff byte\\n")
    os.write(1, b"form\\x0cfeed\\n")
    # --8<-- [end:two]

    for i in range(2):
        # --8<-- [start:three]
        print("three", i)
        # --8<-- [end:three]
        # --8<-- [start:four]
        print("four", i, end="" if i else "\\n")
        # --8<-- [end:four]
''')


@pytest.mark.reads("sitebuild")
def test_lines_bytes_loops_and_a_last_line_without_a_break(tmp_path):
    """A line counts for the section in which its line break was written; ``\\r\\n``, an invalid
    byte and a form feed (which ``str.splitlines`` splits at) are counted as the output is read;
    a ``for`` loop whose body holds two sections goes back and forth between them. The bootstrap
    writes the same bytes as ``python``, ``__main__``'s globals and ``sys.path`` included."""
    snippet = tmp_path / "edges.py"
    snippet.write_text(EDGES, encoding="utf-8")
    python = plain(snippet)
    ours = plain(snippet, *attribution.command(snippet), record=tmp_path / "side")
    assert python.returncode == ours.returncode == 0
    assert ours.stdout == python.stdout and ours.stderr == python.stderr == b""
    assert (tmp_path / "side").read_text().count("\n") == 7  # one line per change of section
    result = run(snippet)
    assert result.ok, result.failure()
    assert result.stdout.splitlines()[1:] == ["crlf", "begun in one, ended in two", "bad \ufffd byte", "form", "feed",
                                              "three 0", "four 0", "three 1", "four 1"]
    assert not result.stdout.endswith("\n")
    assert result.sections == [[None, 1], ["one", 1], ["two", 4], ["three", 1], ["four", 1], ["three", 1], ["four", 1]]
    if forkserver.AVAILABLE:
        forked = run(snippet, preloaded=True)
        assert (forked.stdout, forked.sections) == (result.stdout, result.sections)


FAILS = {"raises": '# --8<-- [start:a]\nprint("printed first")\n\ndef f():\n    raise ValueError("as asked")\n\n'
                   'f()\n# --8<-- [end:a]\n',
         "syntax": 'print("never")\nif True\n    pass\n'}


@pytest.mark.parametrize("case", FAILS)
def test_a_failing_snippet_fails_as_under_python_and_keeps_what_it_printed(tmp_path, case):
    snippet = tmp_path / "fails.py"
    snippet.write_text(FAILS[case], encoding="utf-8")
    python = plain(snippet)
    result = run(snippet)
    assert result.returncode == python.returncode == 1
    assert result.stderr == python.stderr.decode() and result.stdout == python.stdout.decode()
    assert result.sections == ([["a", 1]] if case == "raises" else [])


def test_without_the_variable_nothing_is_recorded_and_the_code_is_pythons(tmp_path):
    snippet = tmp_path / "plain.py"
    snippet.write_text("# --8<-- [start:a]\nprint('a')\n# --8<-- [end:a]\n", encoding="utf-8")
    ours = plain(snippet, *attribution.command(snippet))
    assert (ours.returncode, ours.stdout) == (0, b"a\n") and {p.name for p in tmp_path.iterdir()} == {"plain.py", "plain.out"}
    source = snippet.read_bytes()
    unset = attribution.compile_main(source, str(snippet), None)
    assert unset.co_code == compile(source, str(snippet), "exec", dont_inherit=True).co_code
    assert attribution.compile_main(source, str(snippet), str(tmp_path / "side")).co_code != unset.co_code


def test_a_stdout_without_an_offset_gives_no_attribution_and_the_same_output(tmp_path):
    """A pipe has no file offset: the recorder says so once and the output is untouched."""
    snippet = tmp_path / "piped.py"
    snippet.write_text("# --8<-- [start:a]\nprint('a')\n# --8<-- [end:a]\nprint('b')\n", encoding="utf-8")
    proc = subprocess.run(attribution.command(snippet), capture_output=True, cwd=tmp_path,
                          env=dict(os.environ, **{attribution.VARIABLE: str(tmp_path / "side")}))
    assert (proc.returncode, proc.stdout) == (0, b"a\nb\n")
    assert (tmp_path / "side").read_text() == f"broken {errno.ESPIPE}\n"
    (tmp_path / "out").write_bytes(proc.stdout)
    assert attribution.read(tmp_path / "out", tmp_path / "side", snippet) == ("a\nb\n", [])


def test_offsets_that_do_not_fit_the_output_give_no_attribution():
    raw = b"one\ntwo\n"
    assert attribution.attribute(raw, "one\ntwo\n", [(4, "b")], "utf-8") == [[None, 1], ["b", 1]]
    assert attribution.attribute(raw, "one\ntwo\n", [(4, "b")], "utf-8", [(0, 4, "w")]) == [["w", 1], ["b", 1]]
    assert attribution.attribute(raw, "one\ntwo\n", [], "utf-8", [(2, 5, "w"), (0, 3, "v")]) == []  # writes overlap
    assert attribution.attribute(raw, "one\ntwo\n", [], "utf-8", [(4, 9, "w")]) == []  # past the end
    assert attribution.attribute(raw, "one\ntwo\n", [(9, "b")], "utf-8") == []  # past the end
    assert attribution.attribute(raw, "one\ntwo\n", [(4, "b"), (2, "c")], "utf-8") == []  # fd 1 moved back
    assert attribution.attribute(raw, "other\n", [(4, "b")], "utf-8") == []  # not this output


MAPPED = """\
import os                              # 1: before the first section
# --8<-- [start:outer]
a = 1                                  # 3: outer
# --8<-- [start:inner]
b = 2                                  # 5: inner, the innermost
# --8<-- [end:inner]
c = 3                                  # 7: outer again
# --8<-- [end:outer]
d = 4                                  # 9: outside: outer ended last before it
# --8<-- [start:second]
e = 5                                  # 11: second
# --8<-- [end:second]
# --8<-- [end:second]
f = 6                                  # 14: second (its later end marker is ignored, as pymdownx does)
# ;--8<-- [start:escaped]
g = 7                                  # 16: an escaped marker is no marker: still second
# --8<-- [end:never-started]
# --8<-- [start:never-started]
h = 8                                  # 19: an end before its start: no section, still second
# --8<-- [start:open]
i = 9                                  # 21: open, which runs to the end of the file
"""


def test_a_statement_maps_to_its_innermost_section_or_the_nearest_before_it():
    found = attribution.spans(MAPPED)
    assert [(s.name, s.start, s.end) for s in found] == [("outer", 2, 8), ("inner", 4, 6), ("second", 10, 12),
                                                         ("open", 20, 23)]
    expected = {1: None, 3: "outer", 5: "inner", 7: "outer", 9: "outer", 11: "second", 14: "second", 16: "second",
                19: "second", 21: "open"}
    assert {line: attribution.section_at(found, line) for line in expected} == expected
    # a rank's write, its frames' lines innermost first: the innermost inside a section, else none
    assert attribution.printed_by(found, [9, 5, 3, 1]) == 5 and attribution.printed_by(found, [9, 1]) is None


def test_statements_inside_top_level_blocks_are_marked_but_not_function_bodies():
    tree = ast.parse(textwrap.dedent('''\
        """Doc."""
        from __future__ import annotations
        @property
        def f():
            return 1
        class C:
            x = 1
        if True:
            for i in []:
                pass
            else:
                pass
        try:
            pass
        except Exception:
            pass
        finally:
            pass
        with open(__file__):
            pass
    '''))
    marked = attribution.instrument(tree)
    assert sorted(marked) == [3, 6, 8, 9, 10, 12, 13, 14, 16, 18, 19, 20]  # the decorator's line for the def
    compile(tree, "instrumented.py", "exec", dont_inherit=True)  # the docstring and the future import stay first
    assert ast.get_docstring(tree) == "Doc."


def test_a_cached_result_keeps_its_attribution_and_an_older_one_still_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("SNIPPET_CACHE_DIR", str(tmp_path))
    result = snippets.Result("snippets/x.py", 0, "a\nb\n", "", 1.0, 120, {"device": "cpu"},
                             sections=[["one", 1], [None, 1]])
    old = {key: value for key, value in asdict(result).items() if key != "sections"}
    for key, data in {"new": asdict(result), "old": old}.items():
        (tmp_path / key).mkdir()
        (tmp_path / key / "result.json").write_text(json.dumps(data), encoding="utf-8")
    assert results.stored("new").sections == [["one", 1], [None, 1]]
    assert results.stored("old").sections == [] and results.stored("old").stdout == "a\nb\n"
