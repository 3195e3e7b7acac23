"""Results of the expensive checks, kept by the hash of what each one reads.

`make test` sets ``CHECK_CACHE=1``: a check whose key is in ``.cache/checks/`` (the build
cache, never in git) is not run again. A key is the hash of

* what the check reads: a page's HTML and the files it loads for the browser checks,
  a snippet and the modules it imports for the CPU profiles, the files of the folders
  a marked test names;
* the machine (device, torch, Python, CPU, OS: sitebuild.snippets.machine);
* the check's own code, and requirements.txt (the versions of everything it runs).

Two kinds of check use it. The CPU-profile runs (per snippet) and the browser's page
checks (per page) keep their results. And a test marked ``@pytest.mark.reads(paths...)``
(tests/conftest.py says which) is skipped under `make test` while it passed on the same
files, with a reason that says so, never shown as passed: the section tests, whose
subject is the snippets' behaviour (``snippets/``), and the fault builds, the ProperDocs
build, the serve test and the fork-server tests, whose subject is the machinery (its code and
configuration, not the pages' prose: no sentence can make the build accept a broken anchor). So is a
browser test marked ``visits``, while the built pages it loads are unchanged (tests/test_browser.py).
A module all of whose tests are skipped starts none of its background jobs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from functools import lru_cache
from pathlib import Path

from sitebuild import snippets

ROOT = snippets.ROOT
CACHE = ROOT / ".cache" / "checks"
REQUIREMENTS = ROOT / "requirements.txt"


def enabled() -> bool:
    return os.environ.get("CHECK_CACHE") == "1"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key(check: str, inputs, code: list[Path]) -> str:
    """The key of one check: its name, what it reads, the machine, its code."""
    parts = [check, inputs, snippets.machine(), [digest(p.read_bytes()) for p in [*code, REQUIREMENTS]]]
    return digest(json.dumps(parts, sort_keys=True).encode())[:24]


@lru_cache(maxsize=None)  # once per session: every marked test asks, and nothing here changes them
def tree(*paths: str) -> dict[str, str]:
    """sha256 of every file under these paths (relative to the repository), by path."""
    found = {}
    for name in paths:
        top = ROOT / name
        for file in sorted([top] if top.is_file() else top.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                found[file.relative_to(ROOT).as_posix()] = digest(file.read_bytes())
    return found


LOADED = re.compile(r'(?:<link[^>]*\shref|\ssrc)="([^"#?:]+)')  # styles, scripts, images


def loaded(html: Path, text: str) -> dict[str, str]:
    """sha256 of each local file that the page ``text`` (found at ``html``) loads, by reference."""
    local = lambda ref: (html.parent / ref).resolve()
    return {ref: digest(local(ref).read_bytes()) if local(ref).is_file() else "missing"
            for ref in sorted(set(LOADED.findall(text)))}


def get(found: str):
    """The kept result of a passed check, or None (also whenever the cache is off)."""
    file = CACHE / found / "result.json"
    if not (enabled() and file.is_file()):
        return None
    return json.loads(file.read_text(encoding="utf-8"))


def put(found: str, result, files: tuple[Path, ...] = ()):
    """Keep a passed check's result under its key, with copies of the files it made."""
    if not enabled():
        return
    folder = CACHE / found
    folder.mkdir(parents=True, exist_ok=True)
    for made in files:
        shutil.copy2(made, folder / made.name)
    (folder / "result.json").write_text(json.dumps(result), encoding="utf-8")  # last: all there


def kept_file(found: str, name: str) -> Path:
    """A file that ``put`` kept with the result under this key."""
    return CACHE / found / name
