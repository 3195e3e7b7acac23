"""The torch messages that pages quote verbatim are torch's own, for the torch installed.

They are kept once, in ``snippets/torch_messages.txt`` (its header explains the
format), and pages include them. Each ``check:`` fragment must be part of the quote
and be found in the installed wheel: its Python sources, its headers under
``torch/include``, or the strings of its shared libraries. A quote that no file of a
CPU wheel holds (it lives in libc10_cuda.so or libtorch_cuda.so) cannot be checked
here, so every page that shows it must name its source file and "torch 2.13" in the
paragraph after it.
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


def registry(path: Path = REGISTRY) -> dict[str, Message]:
    found, pending, inside = {}, Message(""), None
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
    return found


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
