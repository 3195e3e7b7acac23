"""The torch messages that pages quote verbatim are torch's own, for the torch installed.

They are kept once, in ``snippets/torch_messages.txt`` (its header explains the
format), and pages include them. Each ``check:`` fragment must be part of the quote
and be found in the installed wheel: its Python sources, its headers under
``torch/include``, or the strings of its shared libraries. A quote that no file of a
CPU wheel holds (it lives in libc10_cuda.so or libtorch_cuda.so) cannot be checked
here, so every page that shows it must name its source file and "torch 2.13" in the
paragraph after it.

Messages quoted inline, in backticks inside a sentence, are checked too: each is either
part of a message of the registry or an ``inline:`` entry of it, checked like the others
or, for an exception whose text no file spells out, raised here with the installed torch.
"""

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pytest
import torch
from tests.conftest import ROOT
from tests.pages import DOCS

REGISTRY = ROOT / "snippets" / "torch_messages.txt"
TORCH = Path(torch.__file__).parent
INCLUDE = re.compile(r'^--8<-- "snippets/torch_messages\.txt:([a-z-]+)"$')
SECTION = re.compile(r"^--8<-- \[(start|end):([a-z-]+)\]$")
# The first line of a quoted message: an exception or warning class, or a log prefix.
MESSAGE = re.compile(r"^(torch\.\w+Error|\w*Error|UserWarning|\[Rank \d+\]):? ")
FENCE = "```"


@dataclass
class Message:
    name: str
    sources: list[str] = field(default_factory=list)
    checks: list[tuple[str, str]] = field(default_factory=list)  # (glob under torch/, fragment)
    text: str = ""


def registry(path: Path = REGISTRY, inline: bool = False) -> dict[str, Message]:
    """The fenced messages by name or, with `inline`, the inline ones by their text."""
    found, quoted, pending, inside = {}, {}, Message(""), None
    for line in path.read_text(encoding="utf-8").splitlines():
        section = SECTION.match(line)
        if section and section[1] == "start":
            inside = pending
            inside.name = section[2]
        elif section:
            found[inside.name], pending, inside = inside, Message(""), None
        elif inside is not None:
            inside.text += line + "\n"
        elif line.startswith("from: "):
            pending.sources = re.findall(r"[\w/]+\.(?:cpp|py|h)", line)
        elif line.startswith("check: "):
            where, fragment = line[len("check: "):].split(": ", 1)
            pending.checks.append((where, fragment))
        elif line.startswith("inline: "):
            pending.name = pending.text = line[len("inline: "):]
            quoted[pending.text], pending = pending, Message("")
    return quoted if inline else found


@lru_cache(maxsize=None)
def contents(path: Path) -> bytes:
    return path.read_bytes()


def in_wheel(where: str, fragment: str) -> bool:
    """Whether a file of the installed torch matching `where` contains `fragment`."""
    return any(fragment.encode() in contents(path) for path in TORCH.glob(where) if path.is_file())


def includes() -> list[tuple[Path, int, str]]:
    """(page, line index, message name) for every include of the registry on a page."""
    return [(page, number, match[1]) for page in sorted(DOCS.rglob("*.md"))
            for number, line in enumerate(page.read_text(encoding="utf-8").splitlines())
            if (match := INCLUDE.match(line.strip()))]


MESSAGES = registry()
CHECKED = [(m.name, where, fragment) for m in MESSAGES.values() for where, fragment in m.checks]
INLINE = registry(inline=True)
INLINE_CHECKED = [(m.text, where, fragment) for m in INLINE.values() for where, fragment in m.checks]
# A code span: one to three backticks, text that may wrap onto the next line, the same backticks.
SPAN = re.compile(r"(?<!`)(`{1,3})(?!`)(.+?)(?<!`)\1(?!`)", re.S)
FENCED = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1[ \t]*$", re.M | re.S)
# Inline quotes that look like a message but are not torch's: numpy's, on the Numba page.
NOT_TORCH = {"AttributeError: module 'numpy' has no attribute 'row_stack'"}


def inline_quotes(page: Path) -> list[tuple[int, str]]:
    """(line number, text) of every code span of a page outside its fences, the text with
    its line breaks turned into spaces, as Markdown renders it."""
    text = page.read_text(encoding="utf-8")
    text = FENCED.sub(lambda m: "\n" * m[0].count("\n"), text)  # keep the line numbers
    return [(text.count("\n", 0, m.start()) + 1, " ".join(m[2].split()))
            for m in SPAN.finditer(text) if "\n\n" not in m[2]]


def in_a_fenced_message(quote: str) -> bool:
    """Whether the quote is part of a registered message; before a "…", its start is."""
    head = quote.split("…")[0].rstrip()
    return any(head in " ".join(message.text.split()) for message in MESSAGES.values())


def flight_recorder_with_a_gloo_pg_config() -> str:
    """The analyser's grouping step on what a gloo group's dump holds in torch 2.13: its
    pg_config keyed by "" while its entries name the group "0" (docs/multi_gpu/debugging.md)."""
    from torch.distributed.flight_recorder.components.builder import (
        build_collectives, build_groups_memberships)
    pg_config = {rank: {"": {"name": "", "desc": "default_pg", "ranks": "[0, 1]"}} for rank in (0, 1)}
    _, groups, _, memberships, pg_guids = build_groups_memberships(pg_config)
    entries = {rank: [{"process_group": ("0", "default_pg")}] for rank in (0, 1)}
    try:
        build_collectives(entries, groups, memberships, pg_guids, "2.10")
    except KeyError as error:
        return f"{type(error).__name__}: {error}"
    return "no exception"


# Inline quotes of exceptions that no file spells out as printed: raised here instead.
REPRODUCED = {"KeyError: ('0', 0)": flight_recorder_with_a_gloo_pg_config}


def test_the_registry_has_sources_and_text():
    assert len(MESSAGES) >= 10
    for message in MESSAGES.values():
        assert message.sources and message.text.strip(), message.name


@pytest.mark.parametrize("name, where, fragment", CHECKED)
def test_fragment_is_quoted_and_in_the_installed_torch(name, where, fragment):
    assert fragment in MESSAGES[name].text, f"{name}: the fragment is not part of the quote"
    assert in_wheel(where, fragment), f"{name}: torch {torch.__version__} has no {fragment!r} in {where}"


def test_a_changed_fragment_is_not_found():
    """The check can fail: one changed character is enough."""
    assert in_wheel("cuda/__init__.py", "Torch not compiled with CUDA enabled")
    assert not in_wheel("cuda/__init__.py", "Torch not compiled with CUDA enabled!")
    assert not in_wheel("lib/libtorch_cpu.so", "No CUDA GPUs are availabel")


def test_every_message_is_shown_in_both_languages():
    shown = {(name, page.name.endswith(".zh.md")) for page, _, name in includes()}
    missing = [(name, lang) for name in MESSAGES for lang in ("en", "zh")
               if (name, lang == "zh") not in shown]
    assert not missing, f"messages in the registry that a language never shows: {missing}"


def test_unchecked_messages_name_their_source_and_torch_version():
    """After the fence, the next paragraph says where the quote was read."""
    unlabelled = []
    for page, number, name in includes():
        message = MESSAGES[name]
        if message.checks:
            continue
        lines = page.read_text(encoding="utf-8").splitlines()[number + 1:]
        after = "\n".join(lines[1:]).strip().split("\n\n")[0]  # past the closing fence
        if "2.13" not in after or not any(source in after for source in message.sources):
            unlabelled.append(f"{page.relative_to(ROOT)}:{number + 1} ({name})")
    assert not unlabelled, "quotes without 'torch 2.13' and their source file after them: " + ", ".join(unlabelled)


def test_no_page_quotes_a_torch_message_outside_the_registry():
    stray = []
    for page in sorted(DOCS.rglob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines[:-1]):
            if line.strip() == FENCE + "text" and MESSAGE.match(lines[number + 1].strip()):
                stray.append(f"{page.relative_to(ROOT)}:{number + 2}")
    assert not stray, "torch messages quoted by hand (include them from the registry): " + ", ".join(stray)


def test_inline_registry_entries_are_checked_or_reproduced():
    assert {"connectFullMesh failed", "KeyError: ('0', 0)"} <= INLINE.keys()
    for quote, message in INLINE.items():
        assert message.sources, quote
        assert message.checks or quote in REPRODUCED, f"{quote!r}: neither a check: line nor a reproduction"


@pytest.mark.parametrize("quote, where, fragment", INLINE_CHECKED)
def test_inline_fragment_is_quoted_and_in_the_installed_torch(quote, where, fragment):
    assert fragment in quote, f"{quote!r}: the fragment is not part of the quote"
    assert in_wheel(where, fragment), f"{quote!r}: torch {torch.__version__} has no {fragment!r} in {where}"


@pytest.mark.parametrize("quote", sorted(REPRODUCED))
def test_inline_exception_is_what_the_installed_torch_raises(quote):
    assert quote in INLINE, f"{quote!r} is reproduced but not in the registry"
    assert REPRODUCED[quote]() == quote


def test_every_inline_message_is_shown_in_both_languages():
    shown = {(text, page.name.endswith(".zh.md")) for page in DOCS.rglob("*.md")
             for _, text in inline_quotes(page)}
    missing = [(quote, lang) for quote in INLINE for lang in ("en", "zh") if (quote, lang == "zh") not in shown]
    assert not missing, f"inline messages in the registry that a language never shows: {missing}"


def test_no_page_quotes_a_torch_message_inline_outside_the_registry():
    stray = [f"{page.relative_to(ROOT)}:{number}: {text}" for page in sorted(DOCS.rglob("*.md"))
             for number, text in inline_quotes(page)
             if MESSAGE.match(text) and text not in INLINE and text not in NOT_TORCH
             and not in_a_fenced_message(text)]
    assert not stray, "torch messages quoted inline but not registered (snippets/torch_messages.txt): " + \
        "; ".join(stray)


def test_inline_quotes_are_found_across_line_breaks():
    """The span finder sees a quote that a page wraps onto two lines, and nothing inside fences."""
    page = ROOT / "docs" / "multi_gpu" / "debugging.md"
    assert "connectFullMesh\n  failed" in page.read_text(encoding="utf-8")  # wrapped there
    quotes = {text for _, text in inline_quotes(page)}
    assert "connectFullMesh failed" in quotes
    assert not any(text.startswith("--8<--") for text in quotes)
