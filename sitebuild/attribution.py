"""Which named section of a snippet was running when each line of its output was printed.

A page shows a snippet as named sections (``# --8<-- [start:create]`` ... ``[end:create]``)
and puts each section's output below it. The snippet still runs as one real script, the
way ``python snippets/x.py`` runs it: one process, one ``__main__`` module, its statements in
their order, its stdout byte for byte what that command prints. Running sections one by one,
as notebooks run cells, would give another program; so the run itself notes, on the side,
where its output came from, and the parent maps that to sections afterwards.

How. Before the snippet runs, its module is compiled with a call to a recorder in front of
each statement that the module's own frame executes: every top-level statement, and every
statement in the bodies of top-level ``if``/``for``/``while``/``with``/``try``/``match``
(so an ``if __name__ == "__main__":`` block whose body holds section markers is followed
into its sections); not in function or class bodies, which run in frames of their own. A
call passes the statement's first line, whose section (``section_at``) is known before the
run; when it differs from the last one seen, the recorder flushes ``sys.stdout``, reads the
offset of file descriptor 1 (``os.lseek(1, 0, SEEK_CUR)``) and appends ``<offset> <line>``
to the side channel, a file named by ``$SNIPPET_ATTRIBUTION`` (or passed by the fork server).
Nothing goes to stdout or stderr, and the variable is removed before the snippet starts, so
its environment is a reader's. Without the variable the module is compiled as Python compiles
it, and nothing is recorded.

Why the file offset. The run's stdout is a regular file, not a pipe. Its offset lives in the
open file description that fork and exec share: a rank started by ``torch.multiprocessing``,
a ``subprocess.run(["echo", ...])``, a C++ ``printf`` all write through the same description
and move the same offset, while the statement that started them is still the one running.
So the offset at a statement boundary says exactly how many bytes were written before it, by
whom ever, with no clock, no parsing of the output and no wrapper around any stream: a print
inside a helper counts for the top-level statement that called it, a spawned rank's line for
the ``mp.spawn(...)`` that started it. Bytes are then cut at those offsets, decoded as the
whole output is (``read``), and each line goes to the section running when its last character
(its line break) was written.

What it cannot see. C and C++ code writes through stdio, which buffers in full when stdout is
not a terminal (a file here, a pipe before, alike): such bytes reach the file, and count, when
stdio flushes them, as they reach a reader's pipe. A compound statement's header that runs again
after its body began (a loop's next item, a ``with``'s exit) counts for the statement that ran
last. A stdout without an offset (a pipe, a terminal) gives no attribution at all.

The cost. Only the module's own code gets the calls; every other frame runs untouched, so
what a snippet times (benchmark.py, dp_vs_ddp.py) is timed as before. On a shared 2-core AMD EPYC
(issue 37, measured under load): a call costs about 0.3 microseconds (a few hundred calls per snippet),
a section change one ``lseek`` and one ``write``, the bootstrap 9 ms of CPU at start-up
(``ast``, ``re``), and compiling through the AST 4 to 23 ms more than a plain compile: under
0.5 % of the slowest snippets' 8 to 21 s of CPU, less than the runs' own spread. A line tracer
was measured first: under Python 3.11, ``sys.settrace`` puts every frame of the process in
tracing mode even where only the module frame has a local tracer; a recursive Python function
ran 3.8 times slower with a C-level global trace function, 4.5 times with a Python one. (3.12's
``sys.monitoring`` could watch the module's code object alone; the inserted calls work on every
version alike, so the build, the CPU profiles and a recorder on another machine attribute in
the same way.)

The bootstrap (``command``) runs the snippet as ``python x.py`` would: ``sys.argv``,
``sys.path[0]`` (the script's real folder), an absolute ``__file__``, a ``__main__`` module
that lives until the interpreter exits (``mp.spawn`` finds the script through it), a traceback
that starts at the snippet's frame, and the interpreter's usual exit. The fork server's child
(sitebuild/forkserver.py) uses the same ``become`` and ``run``. Standard library only.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import codecs
import io
import os
import re
import sys
import types
from collections import namedtuple
from importlib.machinery import SourceFileLoader

VARIABLE = "SNIPPET_ATTRIBUTION"  # the side channel's path, for a fresh run
# pymdownx.snippets' section marker; ``;`` before it escapes it.
MARKER = re.compile(r"(?i)(;*)-+8<-+[ \t]+\[[ \t]*(start|end)[ \t]*:[ \t]*([a-z][-_0-9a-z]*)[ \t]*\]")
# A constant in the compiled module that is then replaced by the recorder (see ``compile_main``).
PLACEHOLDER = "\0sitebuild.attribution: the recorder\0"
# The package comes from the installed project (.venv) or, for the bare recorder, from the
# working folder, the repository root, which `python -c` puts first on sys.path until
# ``become`` puts the snippet's folder there, as `python x.py` would.
BOOTSTRAP = "import sitebuild.attribution; sitebuild.attribution.main()"


# A section: its name, the line of its start marker (1-based), the line of its end marker or the
# number of lines + 1 where there is none; its lines lie between. (No dataclass, no pathlib: the
# bootstrap imports little before the snippet, which pays for it.)
Span = namedtuple("Span", "name start end")


def spans(source: str) -> list[Span]:
    """Each section of ``source`` as pymdownx.snippets cuts it: from a name's first start marker
    to the first end marker after it (to the end of the file without one). Later markers of that
    name are ignored, and a name whose end comes before its start has no section."""
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    found, opened, done = [], {}, set()
    for number, line in enumerate(lines, 1):
        match = MARKER.search(line)
        if match is None or match.group(1):
            continue
        kind, name = match.group(2).lower(), match.group(3)
        if name in done:
            continue
        if kind == "start" and name not in opened:
            opened[name] = number
        elif kind == "end":
            done.add(name)
            if name in opened:
                found.append(Span(name, opened.pop(name), number))
    found += [Span(name, start, len(lines) + 1) for name, start in opened.items()]
    return sorted(found, key=lambda s: (s.start, s.end))


def section_at(found: list[Span], line: int) -> str | None:
    """The section of a statement whose first line is ``line``: the innermost section that holds
    it; outside every section, the one that ended last before it; before the first one, None."""
    inside = [s for s in found if s.start < line < s.end]
    if inside:
        return max(inside, key=lambda s: (s.start, -s.end)).name
    before = [s for s in found if s.end <= line]
    return max(before, key=lambda s: (s.end, s.start)).name if before else None


# The run: ``python -c BOOTSTRAP x.py`` (fresh) or the fork server's child.

def command(path) -> list[str]:
    """The command of a fresh run of ``path`` that records its attribution where $SNIPPET_ATTRIBUTION says."""
    return [sys.executable, "-c", BOOTSTRAP, str(path)]


def main():
    """The bootstrap's entry: ``sys.argv[1]`` is the snippet."""
    path = sys.argv[1]
    record = os.environ.pop(VARIABLE, None)
    become(path)
    run(path, record)


def become(path: str):
    """``sys.argv``, ``sys.orig_argv`` and ``sys.path[0]`` as ``python <path>`` sets them."""
    sys.argv = [path]
    sys.orig_argv = [*sys.orig_argv[:1], path]
    if not sys.flags.safe_path:  # -P / PYTHONSAFEPATH: no script folder, as python x.py would add none
        sys.path[0] = os.path.dirname(os.path.realpath(path))


def run(path: str, record: str | None = None):
    """Run ``path`` as ``__main__``, then exit as the interpreter does (never returns). With
    ``record``, the side channel's path, each change of section is noted there."""
    filename = os.path.abspath(path)  # Python makes the script's __file__ absolute (3.9+)
    try:
        with open(filename, "rb") as file:
            source = file.read()
    except OSError as error:
        sys.stderr.write(f"{sys.executable}: can't open file {filename!r}: [Errno {error.errno}] {error.strerror}\n")
        raise SystemExit(2) from None
    module = types.ModuleType("__main__")  # its globals, in the order Python gives a script's
    module.__dict__.update(__loader__=SourceFileLoader("__main__", filename), __annotations__={},
                           __builtins__=builtins, __file__=filename, __cached__=None)
    try:
        code = compile_main(source, filename, record)
        sys.modules["__main__"] = module  # kept until exit, like a script's module
        exec(code, module.__dict__)
    except SystemExit:
        raise
    except BaseException as error:  # printed as Python prints it, from the snippet's frame on
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != filename:
            tb = tb.tb_next
        sys.excepthook(type(error), error.with_traceback(tb), tb)
        raise SystemExit(1) from None
    raise SystemExit(0)


def compile_main(source: bytes, filename: str, record: str | None) -> types.CodeType:
    """The module's code: as Python compiles it, or, with ``record``, with the recorder's calls."""
    if record is None:
        return compile(source, filename, "exec", dont_inherit=True)
    tree = ast.parse(source, filename)
    lines = instrument(tree)
    text = source.decode("utf-8", errors="replace")
    found = spans(text)
    mark = recorder(record, {line: section_at(found, line) for line in lines})
    code = compile(tree, filename, "exec", dont_inherit=True)
    consts = tuple(types.SimpleNamespace(mark=mark) if type(c) is str and c == PLACEHOLDER else c
                   for c in code.co_consts)
    return code.replace(co_consts=consts)


def instrument(tree: ast.Module) -> list[int]:
    """Put ``PLACEHOLDER.mark(<first line>)`` before each statement that the module's frame runs
    (after the docstring and ``__future__`` imports, which must stay first); the lines marked.

    The call is an attribute of a constant, not a name: nothing appears in the module's globals
    or in builtins, and the constant becomes the recorder once compiled."""
    marked = []

    def block(body: list[ast.stmt], top: bool = False) -> list[ast.stmt]:
        new = []
        for i, stmt in enumerate(body):
            if top and len(new) == i and (i == 0 and docstring(stmt) or future(stmt)):
                new.append(stmt)
                continue
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for name in ("body", "orelse", "finalbody"):
                    if getattr(stmt, name, None):
                        setattr(stmt, name, block(getattr(stmt, name)))
                for part in [*getattr(stmt, "handlers", []), *getattr(stmt, "cases", [])]:
                    part.body = block(part.body)
            line = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
            marked.append(line)
            new += [call(line, stmt), stmt]
        return new

    tree.body = block(tree.body, top=True)
    return marked


def docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def future(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"


def call(line: int, where: ast.stmt) -> ast.stmt:
    """``PLACEHOLDER.mark(line)``, at the position of the statement it precedes."""
    position = {name: getattr(where, name) for name in ("lineno", "col_offset", "end_lineno", "end_col_offset")}
    recorder_ = ast.Constant(PLACEHOLDER, **position)
    method = ast.Attribute(recorder_, "mark", ast.Load(), **position)
    return ast.Expr(ast.Call(method, [ast.Constant(line, **position)], [], **position), **position)


def recorder(record: str, sections: dict[int, str | None]):
    """The function the inserted calls reach: on each change of section, ``<offset> <line>``.

    Only this process records: a copy that ``os.fork`` made and that runs module code would
    write offsets of the same file in another order. If fd 1 has no offset (a pipe, a
    terminal), ``broken`` is written once and nothing after: that run has no attribution."""
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # not inherited by exec (PEP 446)
    pid = os.getpid()
    current: object = object()  # no section yet
    broken = False

    def mark(line: int):
        nonlocal current, broken
        section = sections[line]
        if section == current or broken or os.getpid() != pid:
            return
        current = section
        for stream in (sys.stdout, sys.__stdout__):  # a no-op under PYTHONUNBUFFERED=1, which every run sets
            try:
                if stream is not None:
                    stream.flush()
            except Exception:  # closed, or replaced by something odd: what reached fd 1 is counted
                pass
        try:
            os.write(fd, b"%d %d\n" % (os.lseek(1, 0, os.SEEK_CUR), line))
        except OSError as error:
            broken = True
            try:
                os.write(fd, b"broken %d\n" % error.errno)
            except OSError:
                pass

    return mark


# The parent: what the run printed, and which section printed each line.

def read(stdout, record, path) -> tuple[str, list[list]]:
    """The run's stdout (a file) as ``Path.read_text(errors="replace")`` reads it (the locale's
    encoding, universal newlines), and its attribution from the side channel ``record`` and the
    snippet ``path``: runs ``[[section or None, lines], ...]`` in the order printed.

    The runs cover ``text.splitlines()`` exactly: their counts add up to its length, a final line
    without a line break included. A line counts for the section that was running when its last
    character was written: its line break, or for a final line without one, its last character.
    None: a line printed before the first section (by statements above it), where no section
    can take it. An empty list: no attribution (no side channel, a broken or inconsistent one,
    or no output at all)."""
    with open(stdout, "rb") as file:
        raw = file.read()
    wrapper = io.TextIOWrapper(io.BytesIO(raw), errors="replace")
    text = wrapper.read()
    try:
        with open(record, encoding="ascii") as file:
            changes = parse(file.read())
        with open(path, encoding="utf-8", errors="replace") as file:
            found = spans(file.read())
    except (OSError, ValueError):
        return text, []
    return text, attribute(raw, text, [(offset, section_at(found, line)) for offset, line in changes],
                           wrapper.encoding)


def parse(record: str) -> list[tuple[int, int]]:
    """The side channel's ``<offset> <line>`` lines; ValueError where it is broken or garbled."""
    changes = []
    for entry in record.splitlines():
        offset, line = entry.split(" ")
        changes.append((int(offset), int(line)))
    return changes


def attribute(raw: bytes, text: str, changes: list[tuple[int, str | None]], encoding: str) -> list[list]:
    """Runs of sections over ``text`` (``raw`` decoded), from byte offsets where a section began."""
    offsets = [0] + [offset for offset, _ in changes]
    if any(b < a for a, b in zip(offsets, offsets[1:])) or offsets[-1] > len(raw):
        return []  # fd 1 was moved or truncated: the offsets say nothing about these bytes
    names = [None] + [name for _, name in changes]
    decoder = io.IncrementalNewlineDecoder(codecs.getincrementaldecoder(encoding)(errors="replace"), translate=True)
    bounds, pieces, at = [], [], 0  # each byte range's first character in ``text``
    for i, (start, end) in enumerate(zip(offsets, offsets[1:] + [len(raw)])):
        piece = decoder.decode(raw[start:end], final=i == len(offsets) - 1)
        bounds.append(at)
        pieces.append(piece)
        at += len(piece)
    if "".join(pieces) != text:
        return []
    runs: list[list] = []
    end = 0
    for line in text.splitlines(keepends=True):
        end += len(line)
        name = names[bisect.bisect_right(bounds, end - 1) - 1]
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    return runs


if __name__ == "__main__":  # python -m sitebuild.attribution x.py: with $SNIPPET_ATTRIBUTION set, records
    main()
