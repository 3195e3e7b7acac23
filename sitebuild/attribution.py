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
whom ever, with no clock, no parsing of the output and no wrapper around the main's streams: a
print inside a helper counts for the top-level statement that called it, as a notebook cell
that calls a helper shows its output. Bytes are then cut at those offsets, decoded as the
whole output is (``read``), and each line goes to the section running when its last character
(its line break) was written.

The other processes (ranks). A rank that ``mp.spawn`` started runs no top-level statement: it
imports the file as ``__mp_main__`` and calls a function, while the main waits in the
``mp.spawn(...)`` of a section that pages rarely show. Its lines count instead for the section
of the code that printed them (``printed_by``): of its frames in the snippet's file, the
innermost that lies inside a section. Each process other than the main (spawned through
multiprocessing's spawn, in a fresh run or by the forked spawn server, or forked) writes its
stdout through ``Written``, which appends ``<start> <end> <lines>`` for each write, under a lock
that keeps the offsets exact while ranks write at once; ``follow`` gets it into those processes
with nothing in their environment. The parent lays those byte ranges over the main's sections
(``timeline``): a line counts for the process that wrote its line break, so a line is never
split between sections. What a rank writes otherwise (C code, a subprocess, another stream
than ``sys.stdout``, code outside every section) counts for the main's statement, as before.

What it cannot see. C and C++ code writes through stdio, which buffers in full when stdout is
not a terminal (a file here, a pipe before, alike): such bytes reach the file, and count, when
stdio flushes them, as they reach a reader's pipe. A compound statement's header that runs again
after its body began (a loop's next item, a ``with``'s exit) counts for the statement that ran
last. A stdout without an offset (a pipe, a terminal) gives no attribution at all. Ranks started
by multiprocessing's forkserver method (not torch's ``mp.spawn``) count for the main's statement.

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
the same way.) The other processes (issue 47, same machine, load average 9 to 11): a recorded
write costs a walk up the stack, a lock, two ``lseek`` and a record, about 25 microseconds
against 4 for a plain one (``print("line", i)``, two writes: 56 against 8; 108 with 30 of the
snippet's own frames on the stack), which a rank pays on each print and nowhere else; a spawned
rank imports this module first, 8 ms of CPU; and the bootstrap imports ``multiprocessing.spawn``
to wrap it, 20 ms that any snippet importing torch pays anyway.

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
import contextlib
import io
import os
import re
import sys
import types
from collections import namedtuple
from importlib.machinery import SourceFileLoader

try:  # imported here, not in a forked child whose import machinery another thread may have held
    import fcntl
except ImportError:  # Windows: no fork, and spawned processes do not record (``follow``)
    fcntl = None

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


def become(path: str, as_module: bool = False):
    """``sys.argv``, ``sys.orig_argv`` and ``sys.path[0]`` as ``python <path>`` sets them; ``as_module``,
    ``sys.path[0]`` as ``python -m`` sets it for the module in that file: the working directory."""
    sys.argv = [path]
    sys.orig_argv = [*sys.orig_argv[:1], path]
    if not sys.flags.safe_path:  # -P / PYTHONSAFEPATH: no script folder, as python x.py would add none
        sys.path[0] = os.getcwd() if as_module else os.path.dirname(os.path.realpath(path))


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
        if record is not None:
            follow(record, filename)
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

    Only this process records changes: a copy that ``os.fork`` made and that runs module code
    notes its writes instead (``rank``). If fd 1 has no offset (a pipe, a
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


# The other processes of the run: ranks started by spawn, children forked from the main.

# Where the ``sitebuild`` package lies, for a spawned process to import this module from.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_following = _recording = False  # in this process; a forked child inherits them


def follow(record: str, filename: str):
    """Make each process that this one starts from now on record its writes (``rank``).

    spawn's: its ``-c`` program (``multiprocessing.spawn.get_command_line``) gets a first line
    that imports this module and calls ``rank``, whether a new interpreter runs it (a fresh
    run) or a process of the forked spawn server (sitebuild/forked_spawn.py). fork's: at-fork
    handlers. Nothing is set in the environment, which stays a reader's; what a curious snippet
    could see is that ``get_command_line`` is a wrapper, and that line in a rank's
    ``sys.orig_argv``. Processes of multiprocessing's forkserver method do not record: their
    lines count for the main's statement, as a subprocess's do."""
    global _following
    if _following or fcntl is None:
        return
    _following = True
    from multiprocessing import spawn

    plain = spawn.get_command_line

    def get_command_line(**kwds):
        command = plain(**kwds)
        if "-c" in command:
            at = command.index("-c") + 1
            command[at] = (f"import sys; sys.path.insert(0, {PACKAGE_ROOT!r}); import sitebuild.attribution; "
                           f"del sys.path[0]; sitebuild.attribution.rank({record!r}, {filename!r})\n" + command[at])
        return command

    spawn.get_command_line = get_command_line
    os.register_at_fork(after_in_child=lambda: rank(record, filename))


def rank(record: str, filename: str):
    """In a process of the run other than the main: from now on each write to ``sys.stdout`` is
    noted (``Written``), and the processes this one starts record too.

    Where fd 1 has no offset (the main then says ``broken``), ``sys.stdout`` is not fd 1's text
    stream, or the side channel cannot be locked, nothing is noted, and nothing raised: this
    may run in an at-fork handler."""
    global _recording
    if _recording:
        return
    _recording = True
    old = sys.stdout
    try:
        if not (isinstance(old, io.TextIOWrapper) and old.fileno() == 1):
            return
        raw = Written(record, filename)
    except (OSError, ValueError):
        return
    buffered = not isinstance(old.buffer, io.FileIO)  # as without PYTHONUNBUFFERED=1
    new = io.TextIOWrapper(io.BufferedWriter(raw) if buffered else raw, encoding=old.encoding, errors=old.errors,
                           newline="\n", line_buffering=old.line_buffering, write_through=old.write_through)
    if sys.__stdout__ is old:
        sys.__stdout__ = new
    sys.stdout = new
    follow(record, filename)


class Written(io.FileIO):
    """fd 1 of a process other than the main: each write noted as ``<start> <end> <lines>``: the
    bytes it wrote, and the current lines of the frames running the snippet's file, innermost
    first (``printed_by`` picks one in the parent, which knows the sections).

    Why per write, under a lock. Ranks write at the same time, through the same file
    description: the kernel keeps each write(2) whole, but an offset read before it may be
    another rank's by the time it writes. So each write takes a POSIX lock on the side channel
    (``lockf``: one per process, across all the run's processes) around reading the offset,
    writing and reading it again; where the offset moved by more than this write (the main, a
    subprocess, C code or another thread of this process wrote meanwhile), the write is not
    noted and its bytes count for the main's statement. ``print("a", "b")`` is several writes,
    and two ranks' words can mix on one line, as they would under ``python x.py``; the line
    still counts, whole, for the process that wrote its line break."""

    def __init__(self, record: str, filename: str):
        super().__init__(1, "w", closefd=False)
        self.record = os.open(record, os.O_WRONLY | os.O_APPEND)  # not inherited by exec (PEP 446)
        self.filename = filename
        self.lock()  # OSError where the file system has no locks
        self.unlock()

    def lock(self):
        fcntl.lockf(self.record, fcntl.LOCK_EX)

    def unlock(self):
        fcntl.lockf(self.record, fcntl.LOCK_UN)

    def write(self, data):
        lines = snippet_lines(self.filename)
        if not lines:
            return super().write(data)
        self.lock()
        try:
            start = offset()
            written = super().write(data)
            if written and start is not None and offset() == start + written:
                with contextlib.suppress(OSError):  # a full disk: the line counts for the main's statement
                    os.write(self.record, b"%d %d %s\n" % (start, start + written, lines))
            return written
        finally:
            self.unlock()


def snippet_lines(filename: str) -> bytes:
    """``95,40,12``: the current lines of the frames running the snippet's code, innermost first."""
    lines, frame = [], sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == filename:
            lines.append(b"%d" % frame.f_lineno)
        frame = frame.f_back
    return b",".join(lines)


def offset() -> int | None:
    """fd 1's offset; None where it has none (a pipe, a terminal)."""
    try:
        return os.lseek(1, 0, os.SEEK_CUR)
    except OSError:
        return None


# The parent: what the run printed, and which section printed each line.

def read(stdout, record, path) -> tuple[str, list[list]]:
    """The run's stdout (a file) as ``Path.read_text(errors="replace")`` reads it (the locale's
    encoding, universal newlines), and its attribution from the side channel ``record`` and the
    snippet ``path``: runs ``[[section or None, lines], ...]`` in the order printed.

    The runs cover ``text.splitlines()`` exactly: their counts add up to its length, a final line
    without a line break included. A line counts for the section that was running when its last
    character was written: its line break, or for a final line without one, its last character;
    where another process wrote that character, for the code that printed it (``printed_by``).
    None: a line printed before the first section (by statements above it), where no section
    can take it. An empty list: no attribution (no side channel, a broken or inconsistent one,
    or no output at all)."""
    with open(stdout, "rb") as file:
        raw = file.read()
    wrapper = io.TextIOWrapper(io.BytesIO(raw), errors="replace")
    text = wrapper.read()
    try:
        with open(record, encoding="ascii") as file:
            changes, writes = parse(file.read())
        with open(path, encoding="utf-8", errors="replace") as file:
            found = spans(file.read())
    except (OSError, ValueError):
        return text, []
    shown = [(start, end, line) for start, end, lines in writes if (line := printed_by(found, lines)) is not None]
    return text, attribute(raw, text, [(offset, section_at(found, line)) for offset, line in changes],
                           wrapper.encoding, [(start, end, section_at(found, line)) for start, end, line in shown])


def parse(record: str) -> tuple[list[tuple[int, int]], list[tuple[int, int, list[int]]]]:
    """The side channel's ``<offset> <line>`` lines (the main's changes of section) and
    ``<start> <end> <line>,<line>...`` lines (the other processes' writes); ValueError where it
    is broken or garbled."""
    changes, writes = [], []
    for entry in record.splitlines():
        words = entry.split(" ")
        if len(words) == 2:
            changes.append((int(words[0]), int(words[1])))
        elif len(words) == 3:
            writes.append((int(words[0]), int(words[1]), [int(w) for w in words[2].split(",")]))
        else:
            raise ValueError(f"garbled: {entry!r}")
    return changes, writes


def attribute(raw: bytes, text: str, changes: list[tuple[int, str | None]], encoding: str,
              writes: list[tuple[int, int, str | None]] = ()) -> list[list]:
    """Runs of sections over ``text`` (``raw`` decoded), from byte offsets where the main's section
    changed and the byte ranges that other processes wrote."""
    points = timeline(changes, sorted(writes), len(raw))
    if points is None:
        return []
    offsets, names = [offset for offset, _ in points], [name for _, name in points]
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


def timeline(changes, writes, size) -> list[tuple[int, str | None]] | None:
    """(offset, section) at each byte offset where the output's section changes: the main's
    sections, with the other processes' writes (sorted) laid over them. None where these
    offsets cannot be this output's: fd 1 moved back or truncated, writes that overlap."""
    offsets, names = [0] + [offset for offset, _ in changes], [None] + [name for _, name in changes]
    ends = [0] + [write[1] for write in writes]
    if (any(b < a for a, b in zip(offsets, offsets[1:])) or offsets[-1] > size
            or any(write[0] < end for write, end in zip(writes, ends)) or ends[-1] > size):
        return None
    starts, points = [write[0] for write in writes], []
    for at in sorted({*offsets, *starts, *ends[1:]}):
        i = bisect.bisect_right(starts, at) - 1
        written = i >= 0 and at < writes[i][1]
        points.append((at, writes[i][2] if written else names[bisect.bisect_right(offsets, at) - 1]))
    return points


def printed_by(found: list[Span], lines: list[int]) -> int | None:
    """Which line a write of another process counts for, of the lines of its frames in the
    snippet's file (innermost first): the innermost that lies inside a section. None where none
    does: the write then counts for the main's statement, like bytes that no frame wrote.

    The main counts a line for its top-level statement, the cell a reader runs. A rank has none:
    ``mp.spawn`` called a function. Code outside every section is on no page: the glue that
    ``mp.spawn`` calls, or a helper that prints on its caller's behalf (``in_rank_order`` in
    ddp.py and tensor_parallel.py). The innermost frame in a section is the code on the page
    that printed the line: ``check_training`` in fsdp.py's ``check``, ``train`` in ddp.py's
    ``train`` while its ``in_rank_order`` prints. A child forked from a main statement keeps a
    copy of the main's frames outermost: its own function comes first when it lies in a section."""
    return next((line for line in lines if any(s.start < line < s.end for s in found)), None)


if __name__ == "__main__":  # python -m sitebuild.attribution x.py: with $SNIPPET_ATTRIBUTION set, records
    main()
