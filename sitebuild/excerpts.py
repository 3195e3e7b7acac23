"""Each excerpt's own output, right below it: where the excerpts are, and which lines are theirs.

A page shows a snippet in excerpts, fences that include named sections of it, and its whole
output once, at its output line::

    ```python title="snippets/pytorch/tensors.py"
    --8<-- "snippets/pytorch/tensors.py:create"
    ```
    ...
    <!-- output: snippets/pytorch/tensors.py -->

``marked()`` runs before pymdownx.snippets expands the includes, while they still say which
sections a fence shows. After each fence that includes sections of a snippet whose output
line is on the same page, it adds a line ``<!-- excerpt-output: snippets/x.py:create,dtype -->``,
which sitebuild/output_blocks.py renders as that excerpt's output: the lines the run printed
while those sections ran (``lines_of``), this build's and each current record's. The
attribution comes from the run itself (sitebuild/attribution.py): ``[[section, lines], ...]``.
Where a run has none, or one that does not add up to its output, ``lines_of`` gives None and
the page shows the whole output once, as before: never a blank block, never lines out of order.
"""

from __future__ import annotations

import re

EXCERPT_LINE = "<!-- excerpt-output: "
# The two lines by which a page shows a snippet, as every module and test reads them (re.M, so
# findall reads a whole page): its output, and an include of a file or of one named section.
OUTPUT = re.compile(r"^[ \t]*<!-- output: (\S+) -->[ \t]*$", re.M)
INCLUDE = re.compile(r'^[ \t]*--8<-- "([^":]+)(?::([\w-]+))?"[ \t]*$', re.M)
FENCE = re.compile(r"^(`{3,}|~{3,})")


def marked(lines: list[str]) -> list[str]:
    """The page's lines, with an excerpt line after each fence that shows sections of a
    snippet whose output this page shows."""
    shown = {m.group(1) for line in lines if (m := OUTPUT.match(line))}
    out, fence, included = [], None, {}
    for line in lines:
        out.append(line)
        if fence is None:
            opened = FENCE.match(line.strip())
            fence, included = (opened.group(1), {}) if opened else (None, {})
        elif line.strip() == fence:
            fence = None
            out += [f"{EXCERPT_LINE}{path}:{','.join(names)} -->" for path, names in included.items()
                    if path in shown]
        elif (found := INCLUDE.match(line)) and found.group(2) and found.group(1).startswith("snippets/"):
            included.setdefault(found.group(1), []).append(found.group(2))
    return out


def excerpt(line: str) -> tuple[str, list[str]] | None:
    """``(path, sections)`` of an excerpt line, or None."""
    stripped = line.strip()
    if not (stripped.startswith(EXCERPT_LINE) and stripped.endswith("-->")):
        return None
    path, _, names = stripped.removeprefix(EXCERPT_LINE).removesuffix("-->").strip().partition(":")
    return path, names.split(",")


def attributed(stdout: str, sections) -> bool:
    """Whether ``sections`` is an attribution of ``stdout``: runs of [name or None, count]
    whose counts add up to its lines."""
    return (isinstance(sections, list) and bool(sections)
            and all(isinstance(run, list) and len(run) == 2 and (run[0] is None or isinstance(run[0], str))
                    and isinstance(run[1], int) and not isinstance(run[1], bool) and run[1] >= 0
                    for run in sections)
            and sum(run[1] for run in sections) == len(stdout.splitlines()))


def lines_of(stdout: str, sections, wanted: list[str]) -> str | None:
    """The lines printed while one of ``wanted`` ran, in order, without the blank lines at either
    end (a print's leading ``\\n`` that parts it from the section before, in the whole output);
    None without an attribution."""
    if not attributed(stdout, sections):
        return None
    lines, kept, start = stdout.splitlines(), [], 0
    for name, count in sections:
        if name in wanted:
            kept += lines[start:start + count]
        start += count
    return "\n".join(kept).strip("\n")
