"""The output blocks: a Python-Markdown extension, so that any engine that runs Python-Markdown
(MkDocs, ProperDocs, Zensical) renders a page's real outputs.

A page shows code with a pymdownx.snippets include inside a titled fence, and the
output of the whole script with one line of its own::

    ```python title="snippets/pytorch/tensors.py"
    --8<-- "snippets/pytorch/tensors.py:create"
    ```
    <!-- output: snippets/pytorch/tensors.py -->

That line becomes this build's output and provenance, followed by one tab per
hardware record (``records/*.json``, see sitebuild/records.py) whose entry for the
snippet is current or failed, and one for a device whose entries are all stale: its newest,
labelled as the run of an earlier version (``with_tabs``); ``<!-- snippet-provenance -->``
becomes the "Verified on" matrix.
The results come from ``sitebuild.results``: read from its disk cache, or run on
first use. A failed snippet stops the page with its stderr. Under `mkdocs serve`
(sitebuild/background.py) nothing runs here: a result still running is a placeholder,
"running…" in the page's language, and a failure is shown in place of the output.

Configured in mkdocs.yml under ``markdown_extensions`` as ``sitebuild.output_blocks``; its one
option, ``language`` (``en`` or ``zh``), names the language of the labels. Python-Markdown
tells an extension nothing about the page it renders, so the MkDocs adapter
(hooks/snippet_runner.py) sets it per page; an engine without that hook gets English labels.

**Nothing from a record or from a program's output reaches Markdown as markup.** Records
arrive by pull request (sitebuild/records.py bounds what they may hold), and a snippet may
print anything. This module writes Markdown that cannot be escaped from, rather than HTML:
that keeps Material's own tab markup and numbering (one counter per page, shared with the
prose's tabs), keeps today's pages byte for byte where nothing needed escaping, and works in
any Python-Markdown engine. Two rules:

- Output text stands in a backtick fence longer than its longest run of backticks
  (``records.fence``), so no line of it can close the fence; inside a fence, ``<!--``,
  ``{: ...}`` and links are text. Terminal colour codes are dropped.
- Machine fields, which become tab labels, provenance lines and table cells, go through
  ``inline()``: HTML's special characters, backticks and ``|`` become character references,
  and Markdown's other punctuation gets a backslash, which renders as the character itself.

The preprocessor runs after pymdownx.snippets (``PRIORITY``), so a ``--8<--`` line in an
output is text too, not an include.

Why not markdown-exec: static-i18n builds the site once per language, and markdown-exec
runs code in the build's process while each page renders, so every example would run
twice per build, share one interpreter's global state (torch threads, seeds,
multiprocessing), and run again on every prose-only rebuild.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

from markdown import Extension
from markdown.preprocessors import Preprocessor

from sitebuild import background, excerpts, records, results, snippets
from sitebuild.snippets import ROOT, Result

PROVENANCE_LINE = "<!-- snippet-provenance -->"
# After pymdownx.snippets (32), which would expand a `--8<--` line of an output; before
# SuperFences (25) and the HTML stash (20), which then see the fences written here.
PRIORITY = 31.5
EXCERPT_PRIORITY = 40  # before pymdownx.snippets, while the includes still name their sections
LABELS = {
    "en": {"output": "Output", "ran": "Ran in this build on", "no_output": "(no output)",
           "build": "This build", "recorded": "Recorded on", "failed": "Failed: exit code",
           "snippet": "Snippet", "current": "✓", "stale": "stale", "missing": "not in this record",
           "cut": "not run: time budget", "prefixes": {}, "earlier": "an earlier version of this script",
           "earlier_note": "A run of an earlier version of this script, on {day}. Changed since: {files}.",
           "changed": "changed since", "driver": "driver", "colon": ": ",
           "pending": "running…", "whole": "The whole output", "running": "running… {path} (this page reloads when it is done)",
           "broke": "{path} failed; `mkdocs build --strict` stops on it. The end of its stderr:"},
    "zh": {"output": "输出", "ran": "本次构建实际运行于", "no_output": "（无输出）",
           "build": "本次构建", "recorded": "记录于", "failed": "运行失败：退出码",
           "snippet": "示例", "current": "✓", "stale": "已过期", "missing": "不在此记录中",
           "cut": "未运行：时间预算用完", "prefixes": {"cpu: ": "CPU：", "mps: ": "MPS："}, "earlier": "本脚本的旧版本",
           "earlier_note": "这是本脚本旧版本的一次运行（{day}）。此后改动的文件：{files}。",
           "changed": "此后改动的文件", "driver": "驱动", "colon": "：",
           "pending": "运行中…", "whole": "完整输出", "running": "运行中…{path}（运行结束后本页会自动刷新）",
           "broke": "{path} 运行失败，`mkdocs build --strict` 会因此中止。其 stderr 的末尾："},
}


class SnippetError(RuntimeError):
    """An output line that names no snippet, or a snippet that failed."""


def records_now() -> list[records.Record]:
    """The committed records, read again only when a record file changed."""
    files = tuple((f.name, f.stat().st_mtime_ns) for f in sorted(records.RECORDS.glob("*.json")))
    return _records(files)


@lru_cache(maxsize=4)
def _records(files: tuple) -> list[records.Record]:
    return records.load()


def result(path: str) -> Result | None:
    """The snippet's result; in serve, None while it runs and a failure as it is."""
    file = ROOT / path
    if not (path.startswith("snippets/") and file.is_file()) or file.name.startswith("_"):
        raise SnippetError(f"no snippet '{path}' for its output line")
    if background.enabled():
        return results.known(file)
    found = results.run(file)
    if not found.ok:
        raise SnippetError(found.failure())
    return found


# --- the blocks ---------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")  # terminal colours and cursor moves
# What starts inline markup mid-line (emphasis, links, footnotes, attribute lists), with a
# backslash, which renders as the character itself: plain text keeps its HTML byte for byte.
BACKSLASHED = set("\\*_{}[]")
REFERENCED = set("&<>\"'`|")  # HTML's, code spans' and tables': character references


def text_block(text: str, title: str) -> str:
    """Text shown as it is, in a fence that no line of it can close."""
    text = ANSI.sub("", text)
    fence = records.fence(text)
    return f'{fence}text title="{title}"\n{text}\n{fence}'


def inline(text: str) -> str:
    """Untrusted text (a machine field) for a Markdown line, a tab label or a table cell: text only."""
    return "".join(f"&#{ord(c)};" if c in REFERENCED else f"\\{c}" if c in BACKSLASHED else c
                   for c in text)


def device(name: str, labels: dict) -> str:
    """A device's name in the page's language ('cpu: X' is 'CPU：X' on a Chinese page), escaped."""
    for prefix, ours in labels["prefixes"].items():
        if name.startswith(prefix):
            return ours + inline(name.removeprefix(prefix))
    return inline(name)


def record_label(rec: records.Record, labels: dict = LABELS["en"]) -> str:
    return f"{device(rec.machine['device'], labels)} · {rec.recorded}"


def tab_label(rec: records.Record, path: str, labels: dict) -> str:
    """A record's tab label; a stale entry's says so in words, and in a style of its own
    (``.snippet-stale``, docs/assets/site.css), so that it never looks like a current tab."""
    if rec.status(path)[0] != "stale":
        return record_label(rec, labels)
    return f"*{record_label(rec, labels)} · {labels['earlier']}*{{: .snippet-stale }}"


def history(path: str, day: str) -> str:
    """``path`` as a Markdown code span; with a GitHub ``REPO_URL``, a link to the commits that
    changed it from ``day`` on (GitHub's commits view filters by ``since``). ``path`` passed the
    record's contract: a plain relative path, nothing that can break out of the link."""
    repo = os.environ.get("REPO_URL", "").rstrip("/")
    if not repo.startswith("https://github.com/"):
        return f"`{path}`"
    return f"[`{path}`]({repo}/commits/main/{path}?since={day})"


def earlier_note(rec: records.Record, path: str, labels: dict) -> str:
    """Above a stale entry's output: that it ran other code, and which files changed since."""
    files = ", ".join(history(f, rec.recorded) for f in rec.status(path)[1])
    return f"{labels['earlier_note'].format(day=rec.recorded, files=files)}\n{{: .snippet-stale-note }}"


def record_provenance(rec: records.Record, labels: dict) -> str:
    m = rec.machine
    return (f"{labels['recorded']} {device(m['device'], labels)} · torch {inline(m['torch'])} · "
            f"CUDA {inline(m['cuda'] or '—')} · {labels['driver']} {inline(m['driver'] or '—')} · {rec.recorded}")


def build_provenance(found: Result, labels: dict) -> str:
    env = found.env
    return (f"{labels['ran']} {device(env['device'], labels)} · torch {inline(env['torch'])} · "
            f"Python {inline(env['python'])} · {found.ran_on}")


def with_provenance(body: str, line: str) -> str:
    """An output and, under it, the line that says where it ran."""
    return f"{body}\n\n{line}\n{{: .snippet-provenance }}"


def record_tab(rec: records.Record, path: str, labels: dict, text: str | None = None) -> str:
    """A record entry as tab content: its output (or ``text``, an excerpt's part of it), or its
    failure; a stale entry's under a note that it ran an earlier version."""
    entry = rec.snippets[path]
    if entry["returncode"] == 0:
        shown = entry["stdout"] if text is None else text
        body = text_block(shown.rstrip() or labels["no_output"], f"{labels['output']} · {path}")
    else:
        body = (f"**{labels['failed']} {entry['returncode']}**\n\n"
                + text_block(entry["stderr_tail"].rstrip() or "(empty)", f"stderr · {path}"))
    if rec.status(path)[0] == "stale":
        body = f"{earlier_note(rec, path, labels)}\n\n{body}"
    return with_provenance(body, record_provenance(rec, labels))


def with_tabs(path: str, recs: list[records.Record]) -> list[records.Record]:
    """The records that get a tab in the whole output: each current or failed entry; and, so
    that a page never loses what a machine showed, the newest stale entry of each device that
    has no current or failed one."""
    states = [(r, r.machine["device"], r.status(path)[0]) for r in recs]  # recs: newest first
    covered = {name for _, name, state in states if state in ("current", "failed")}
    shown = []
    for r, name, state in states:
        if state in ("current", "failed") or (state == "stale" and name not in covered):
            shown.append(r)
            covered.add(name)
    return shown


def output_block(path: str, found: Result | None, labels: dict, recs: list[records.Record]) -> str:
    """This build's output first; then one tab per record that ``with_tabs`` names."""
    ours = (not_yet(path, found, labels) if found is None or not found.ok else
            with_provenance(text_block(found.stdout.rstrip() or labels["no_output"], f"{labels['output']} · {found.path}"),
                            build_provenance(found, labels)))
    shown = [(tab_label(r, path, labels), record_tab(r, path, labels)) for r in with_tabs(path, recs)]
    return tabbed(ours, shown, labels)


def excerpt_block(path: str, part: list[str], found: Result | None, labels: dict,
                  recs: list[records.Record]) -> str:
    """The lines printed while these sections ran: this build's, then each current record's
    that carries an attribution. Empty where the build's run has none (the whole output is
    then shown once, at the output line) or where nobody's run printed anything here. A stale
    entry stays in the whole output: its sections are those of an earlier version, and its
    lines under today's code would say that this code printed them."""
    ours = excerpts.lines_of(found.stdout, found.sections, part) if found is not None and found.ok else None
    if ours is None:
        return ""
    theirs = [(r, text) for r in recs if r.status(path)[0] == "current"
              and (text := excerpts.lines_of(r.snippets[path]["stdout"], r.snippets[path].get("sections"), part))
              is not None]
    if not (ours or any(text for _, text in theirs)):
        return ""
    title = f"{labels['output']} · {path}:{','.join(part)}"
    block = with_provenance(text_block(ours or labels["no_output"], title), build_provenance(found, labels))
    return tabbed(block, [(record_label(r, labels), record_tab(r, path, labels, text)) for r, text in theirs], labels)


def tabbed(ours: str, shown: list[tuple[str, str]], labels: dict) -> str:
    """This build's block, and beside it a tab per (label, body) of ``shown``."""
    if not shown:
        return ours + "\n"
    tabs = [(labels["build"], ours)] + shown
    return "\n".join(f'=== "{label}"\n\n' + indent(body) + "\n" for label, body in tabs)


def collapsed(block: str, labels: dict) -> str:
    """The whole output, folded (pymdownx.details) below excerpts that show it piece by piece."""
    return f'??? abstract "{labels["whole"]}"\n\n' + indent(block) + "\n"


def not_yet(path: str, found: Result | None, labels: dict) -> str:
    """Serve only: a placeholder while the snippet runs, or its failure."""
    if found is None:
        return text_block(labels["running"].format(path=path), f"{labels['output']} · {path}")
    return (f"**{labels['broke'].format(path=path)}**\n\n"
            + text_block(found.failure(), f"stderr · {path}"))


def indent(text: str) -> str:
    return "\n".join(("    " + line) if line else "" for line in text.split("\n"))


def matrix_cell(rec: records.Record, path: str, labels: dict) -> str:
    state, changed = rec.status(path)
    if state == "stale":
        files = ", ".join(f"`{f}`" for f in changed)
        return f"{labels['stale']} ({rec.recorded}; {labels['changed']}{labels['colon']}{files})"
    if state == "failed":
        return f"✗ ({rec.snippets[path]['returncode']})"
    return labels["current"] if state == "current" else labels[state]


def build_cell(found: Result | None, labels: dict) -> str:
    if found is None:
        return labels["pending"]
    return f"✓ {found.seconds:.1f} s" if found.ok else f"✗ ({found.why()})"


def provenance_table(found: dict[str, Result | None], labels: dict, recs: list[records.Record]) -> str:
    """Rows are snippets; columns are this build and each record."""
    head = [labels["snippet"], labels["build"]] + [record_label(r, labels) for r in recs]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for path in sorted(found):
        cells = [f"`{path}`", build_cell(found[path], labels)] + [matrix_cell(rec, path, labels) for rec in recs]
        rows.append("| " + " | ".join(cells) + " |")
    env = next((r.env for r in found.values() if r is not None), None) or snippets.machine()
    build = (f"{labels['build']}{labels['colon']}{device(env['device'], labels)} · torch {inline(env['torch'])} · "
             f"Python {inline(env['python'])}")
    lines = [f"- {build}"] + [f"- {record_provenance(rec, labels)} (`records/{rec.name}.json`)" for rec in recs]
    return "\n".join(lines) + "\n\n" + "\n".join(rows)


def rendered(markdown: str, lang: str) -> str:
    """The page's Markdown with every excerpt, output and matrix line filled in."""
    labels = LABELS[lang]
    lines, split = [], set()  # split: the snippets whose output the excerpts above have shown
    for line in markdown.split("\n"):
        stripped = line.strip()
        if part := excerpts.excerpt(line):
            path, sections = part
            block = excerpt_block(path, sections, result(path), labels, records_now())
            split.update([path] if block else [])
            lines.append(f"\n{block}\n" if block else "")
        elif found := excerpts.OUTPUT.match(line):
            path = found.group(1)
            block = output_block(path, result(path), labels, records_now())
            lines.append(collapsed(block, labels) if path in split else block)
        elif stripped == PROVENANCE_LINE:
            found = {snippets.relative(p): result(snippets.relative(p)) for p in snippets.discover()}
            lines.append(provenance_table(found, labels, records_now()))
        else:
            lines.append(line)
    return "\n".join(lines)


# --- Python-Markdown ----------------------------------------------------------------------

class OutputPreprocessor(Preprocessor):
    def __init__(self, md, lang: str):
        super().__init__(md)
        self.lang = lang

    def run(self, lines: list[str]) -> list[str]:
        return rendered("\n".join(lines), self.lang).split("\n")


class ExcerptPreprocessor(Preprocessor):
    """Marks each excerpt while its includes still name their sections (sitebuild/excerpts.py)."""

    def run(self, lines: list[str]) -> list[str]:
        return excerpts.marked(lines)


class OutputExtension(Extension):
    def __init__(self, **kwargs):
        self.config = {"language": ["en", "the labels' language: " + " or ".join(LABELS)]}
        super().__init__(**kwargs)

    def extendMarkdown(self, md):
        lang = self.getConfig("language")
        if lang not in LABELS:
            raise SnippetError(f"sitebuild.output_blocks: language '{lang}' is not one of {', '.join(LABELS)}")
        md.preprocessors.register(ExcerptPreprocessor(md), "snippet_excerpts", EXCERPT_PRIORITY)
        md.preprocessors.register(OutputPreprocessor(md, lang), "snippet_outputs", PRIORITY)


def makeExtension(**kwargs):
    return OutputExtension(**kwargs)
