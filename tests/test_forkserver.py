"""A snippet forked from a server that has imported torch prints what ``python snippet.py`` prints
(sitebuild/forkserver.py): the build and the CPU profiles run every snippet that way on Linux.
So do the ranks that ``mp.spawn`` starts in such a run (sitebuild/forked_spawn.py)."""

import re
import sys
import textwrap

import pytest

from sitebuild import forkserver, snippets

pytestmark = pytest.mark.skipif(not forkserver.AVAILABLE, reason=f"no fork server on {sys.platform}: fresh runs only")

DEMO = textwrap.dedent("""
    import os, sys
    import torch
    print(__name__, sys.argv[0] == __file__, sys.path[0], os.getcwd(), os.environ.get("HOME"))
    print("capability", torch.backends.cpu.get_cpu_capability())
    print("a line to stderr", file=sys.stderr)

    def fail():
        raise ValueError("as asked")

""")
# Each case's last lines. Cases that share an environment share a server (sitebuild/forkserver.py).
PROFILE = {"ATEN_CPU_CAPABILITY": "default"}
CASES = {"exit-0": ("", {}), "exit-3": ("sys.exit(3)\n", {}), "traceback": ("fail()\n", {}), "profile": ("", PROFILE)}


def run(path, **options) -> snippets.Result:
    """A run of ``path`` in its own folder, which stands for the repository."""
    return snippets.execute(path, path.parent, root=path.parent, **options)


def both(path, env, timeout=None) -> tuple[snippets.Result, snippets.Result]:
    return run(path, env=env, timeout=timeout), run(path, env=env, timeout=timeout, preloaded=True)


@pytest.mark.parametrize("case", CASES)
def test_a_forked_run_prints_what_a_fresh_process_prints(tmp_path, case):
    ending, env = CASES[case]
    (tmp_path / "demo").mkdir()
    demo = tmp_path / "demo" / "demo.py"
    demo.write_text(DEMO + ending, encoding="utf-8")
    fresh, forked = both(demo, env)
    assert fresh.returncode == {"exit-3": 3, "traceback": 1}.get(case, 0)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.sections == fresh.sections == [[None, len(fresh.stdout.splitlines())]]  # no sections: none placed


def test_the_forked_run_really_starts_with_torch_and_dynamo_imported(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import sys\nprint('torch' in sys.modules, 'torch._dynamo' in sys.modules)\n", encoding="utf-8")
    fresh, forked = both(probe, {})
    assert (fresh.stdout, forked.stdout) == ("False False\n", "True True\n")


SETS_BEFORE_IMPORT = textwrap.dedent("""
    import os
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "7"  # read as torch._inductor.config is imported
    import torch._inductor.config
    print("compile threads", torch._inductor.config.compile_threads)
""")


@pytest.mark.parametrize("where", ["snippet", "rank"])
def test_a_run_that_sets_what_the_preloaded_imports_read_is_done_fresh(tmp_path, where):
    """The server imported Inductor's config already, with the caller's environment: only a
    fresh run sees the 7 (sitebuild/import_env.py). A rank that sets it stops, so its snippet
    is done fresh too (one rank: each costs a fresh interpreter in both fresh runs)."""
    demo = tmp_path / "demo.py"
    if where == "snippet":
        demo.write_text(SETS_BEFORE_IMPORT, encoding="utf-8")
    else:
        rank = textwrap.indent(SETS_BEFORE_IMPORT, "    ")
        demo.write_text(f"import torch.multiprocessing as mp\n\ndef rank(i):{rank}\n"
                        "if __name__ == '__main__':\n    mp.spawn(rank, nprocs=1)\n", encoding="utf-8")
    fresh, forked = both(demo, {})
    assert fresh.returncode == 0 and fresh.stdout == "compile threads 7\n"
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout)


def test_a_variable_that_inductor_sets_for_its_own_kernels_stops_no_forked_run(tmp_path):
    """Named like what C code reads, but read only by the CPU kernels Inductor loads in the same
    process, after setting it (sitebuild/import_env.py): a lab that compiles stays forked."""
    demo = tmp_path / "demo.py"
    demo.write_text('import os, sys\nos.environ["_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"] = "1"\n'
                    'print("torch" in sys.modules)\n', encoding="utf-8")
    assert run(demo, preloaded=True).stdout == "True\n"


def test_a_forked_run_is_killed_at_its_timeout_and_the_server_goes_on(tmp_path):
    hang = tmp_path / "hang.py"
    hang.write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n", encoding="utf-8")
    result = run(hang, timeout=3, preloaded=True)
    assert result.returncode is None and result.stdout == "started\n" and result.seconds < 60
    quick = tmp_path / "quick.py"
    quick.write_text("print('next')\n", encoding="utf-8")
    assert run(quick, preloaded=True).stdout == "next\n"


def test_where_torch_does_not_import_the_snippet_runs_fresh_and_says_why(tmp_path):
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no torch in this environment')\n", encoding="utf-8")
    needs_torch = tmp_path / "needs_torch.py"
    needs_torch.write_text("import torch\n", encoding="utf-8")
    fresh, forked = both(needs_torch, {"PYTHONPATH": str(tmp_path / "site")})
    assert forked.returncode == fresh.returncode == 1
    assert forked.stderr == fresh.stderr and "no torch in this environment" in forked.stderr


def test_runs_share_a_server_unless_a_variable_read_at_import_differs(tmp_path):
    """The server is a run's parent: one per environment, pytest's own per-test variable aside.
    (The two environments of the cases above: run after them, this test starts no server.)"""
    parent = tmp_path / "parent.py"
    parent.write_text("import os\nprint(os.getppid())\n", encoding="utf-8")

    def server(env):
        return run(parent, env=env, preloaded=True).stdout

    assert server({"PYTEST_CURRENT_TEST": "one"}) == server({"PYTEST_CURRENT_TEST": "two"})
    assert server({}) != server(PROFILE)


SPAWNS = textwrap.dedent("""
    import os, sys, time
    preloaded = "torch" in sys.modules  # read as the module is imported: in each rank too
    import torch.multiprocessing as mp

    def report(i):
        return os.path.join(os.path.dirname(__file__), f"rank{i}")

    def rank(i):
        with open(report(i) + ".part", "w") as part:
            print(__name__, i, "torch imported before this module:", preloaded, file=part)
        os.rename(report(i) + ".part", report(i))
        while not os.path.exists(report(0)):  # rank 1 ends only once rank 0 has reported
            time.sleep(0.01)
        if i == 1 and ENDING == "raise":
            raise ValueError("rank 1 as asked")
        if i == 1 and ENDING == "kill":
            os.kill(os.getpid(), 9)

    if __name__ == "__main__":
        for i in range(2):  # a report from the other run would let rank 1 end early
            if os.path.exists(report(i)):
                os.remove(report(i))
        try:
            mp.spawn(rank, nprocs=2)
        finally:
            for i in range(2):
                print(open(report(i)).read(), end="")
""")


def without_logs(stderr: str) -> str:
    """Without torch's log lines ("W1205 16:22:10.533000 20515 ... Terminating process 20518"):
    they carry the time and process ids, which differ from run to run."""
    return re.sub(r"(?m)^[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ .*\n", "", stderr)


@pytest.mark.parametrize("ending", ["raise", "kill"])  # rank 0 ends normally in both
def test_ranks_that_spawn_starts_are_forked_and_end_as_new_interpreters_would(tmp_path, ending):
    """mp.spawn in a forked run gets its ranks from a copy of the preloaded interpreter
    (sitebuild/forked_spawn.py): the same output, exit codes and signals as new interpreters."""
    demo = tmp_path / "spawns.py"
    demo.write_text(f"ENDING = {ending!r}\n" + SPAWNS, encoding="utf-8")
    fresh, forked = both(demo, {})
    assert fresh.returncode == 1
    assert "__mp_main__ 1 torch imported before this module: False" in fresh.stdout
    assert forked.stdout == fresh.stdout.replace("module: False", "module: True")
    assert forked.returncode == fresh.returncode
    assert without_logs(forked.stderr) == without_logs(fresh.stderr)
    if ending == "kill":
        assert "process 1 terminated with signal SIGKILL" in forked.stderr


HOLDS = textwrap.dedent("""
    import atexit, os, time
    import torch.multiprocessing as mp

    def check(rank, held):
        lost = sum(1 for fd in held if not os.path.exists(f"/proc/self/fd/{fd}"))
        print(f"rank {rank}: {lost} of {len(held)} descriptors closed behind its back", flush=True)

    def rank(r):
        time.sleep(0.3 * r)  # the earlier ranks still run: the spawn server waits on their stubs
        held = [os.open(os.devnull, os.O_RDONLY) for _ in range(8)]  # the lowest free numbers
        atexit.register(check, r, held)

    if __name__ == "__main__":
        mp.spawn(rank, nprocs=3, join=True)
""")


def test_a_forked_rank_keeps_its_descriptors_until_it_exits(tmp_path):
    """A rank closes only what it opened: the spawn server's sockets are closed as objects before
    the rank takes their numbers, so no finalizer closes them again at exit (gloo's abort, issue 44)."""
    demo = tmp_path / "holds.py"
    demo.write_text(HOLDS, encoding="utf-8")
    fresh, forked = both(demo, {})
    lines = sorted(forked.stdout.splitlines())
    assert lines == [f"rank {r}: 0 of 8 descriptors closed behind its back" for r in range(3)], forked.stdout
    assert sorted(fresh.stdout.splitlines()) == lines
