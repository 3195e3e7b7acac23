"""Translations that cannot drift silently: each ``*.zh.md`` records the English prose it translates.

    make translations                      # stale, missing or unknown stamps, with the English diff
    make translated PAGE=docs/x/y.zh.md    # after updating the translation: record the English it follows
    python -m sitebuild.translations check  # the list only (tests/test_translations.py runs the same check)

Every Chinese page carries, in its YAML front matter, two keys::

    translated_from: "1a2b3c4d5e6f"                               # prose_hash() of docs/x/y.md
    translated_from_blob: "<git blob id of docs/x/y.md at that time>"  # to show what changed since

A lab (jupytext markdown, ``jupyter:`` front matter) keeps them under ``jupyter:``:
jupytext turns any other top-level key into a raw cell, which would show on the page
and in the ``.ipynb`` download; under ``jupyter:`` they become notebook metadata.

**What counts.** ``prose()`` is what a reader reads of the English page: the text minus
its front matter, fenced code blocks (labs' code cells included) and HTML comments
(``<!-- output: ... -->`` lines, jupytext cell markers). Code, includes, outputs,
figures and anchors are shared by both languages and kept identical by
tests/test_parity.py, so a change there cannot leave the Chinese page behind; the
prose is what a translator has to follow. ``prose_hash()`` is the first 12 hex digits
of the sha256 of that prose with every run of whitespace (line breaks and blank lines
included) turned into one space: re-wrapping or re-indenting the English changes
nothing, a changed word does.

**Why a git blob.** The hash says *that* the English changed; the blob says *from
what*. ``git hash-object -w`` gives the English file's blob id before anything is
committed and stores the blob in the local repository, so the diff works at once;
once the English page is committed in that state, every full clone has it
(``git log --find-object=<blob>`` names the commit). A shallow clone (CI's default)
may lack it: the check still works, only the diff is then replaced by a note.

**Never the hash alone.** ``stamp`` refuses a page whose Chinese prose is the same as
at ``HEAD``: the stamp moves only with a change to the translation itself.
``stamp --initial`` stamps pages that have never carried a stamp (neither in the
working tree nor at HEAD), once, when the scheme is introduced.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
KEY = "translated_from"
BLOB_KEY = "translated_from_blob"
HASH = re.compile(r"[0-9a-f]{12}")
# The front matter as MkDocs reads it (mkdocs.utils.meta).
FRONT_MATTER = re.compile(r"\A-{3}[ \t]*\n(.*?\n)(?:\.{3}|-{3})[ \t]*(?:\n|\Z)", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})")
STAMP_LINE = re.compile(rf"^[ \t]*(?:{KEY}|{BLOB_KEY})[ \t]*:.*\n", re.M)


# --- the English prose and its hash -------------------------------------------

def split_front_matter(text: str) -> tuple[dict, str, str]:
    """(parsed front matter, its raw block including the ``---`` lines, the rest)."""
    match = FRONT_MATTER.match(text)
    if not match:
        return {}, "", text
    data = yaml.safe_load(match.group(1))
    return (data if isinstance(data, dict) else {}), match.group(0), text[match.end():]


def without_fences(text: str) -> str:
    """Drop fenced blocks (``` or ~~~, indented ones too: admonitions, tabs)."""
    kept, fence = [], None
    for line in text.splitlines():
        if fence is None:
            opened = FENCE_OPEN.match(line)
            if opened:
                fence = opened.group(1)
            else:
                kept.append(line)
        elif re.fullmatch(rf"[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*", line):
            fence = None
    return "\n".join(kept)


def prose(text: str) -> str:
    """The prose of a page, one non-blank line per source line, inner whitespace collapsed."""
    body = COMMENT.sub("", without_fences(split_front_matter(text)[2]))
    return "\n".join(" ".join(line.split()) for line in body.splitlines() if line.strip())


def prose_hash(text: str) -> str:
    return hashlib.sha256(" ".join(prose(text).split()).encode("utf-8")).hexdigest()[:12]


# --- the stamp in a Chinese page's front matter -------------------------------

def stamp_home(data: dict) -> dict:
    """Where the stamp lives: under ``jupyter:`` in a lab, at the top elsewhere."""
    return data["jupyter"] if isinstance(data.get("jupyter"), dict) else data


def read_stamp(text: str) -> tuple[str | None, str | None]:
    home = stamp_home(split_front_matter(text)[0])
    digest, blob = home.get(KEY), home.get(BLOB_KEY)
    return (None if digest is None else str(digest)), (None if blob is None else str(blob))


def without_stamp(text: str) -> str:
    _, block, rest = split_front_matter(text)
    if not block:
        return text
    inner = STAMP_LINE.sub("", block)
    if not "".join(inner.splitlines()[1:-1]).strip():  # nothing but the stamp: drop the block
        return rest.lstrip("\n")
    return inner + rest


def with_stamp(text: str, digest: str, blob: str) -> str:
    """The page with its stamp set; the rest of the file is left byte for byte."""
    text = without_stamp(text)
    data, block, rest = split_front_matter(text)
    if not block:
        return f'---\n{KEY}: "{digest}"\n{BLOB_KEY}: "{blob}"\n---\n\n{text}'
    lines = block.splitlines(keepends=True)
    at, indent = 1, ""
    if isinstance(data.get("jupyter"), dict):
        at = next(i for i, line in enumerate(lines) if re.match(r"jupyter[ \t]*:", line)) + 1
        indent = re.match(r"[ \t]*", lines[at]).group(0) or "  "
    lines[at:at] = [f'{indent}{KEY}: "{digest}"\n', f'{indent}{BLOB_KEY}: "{blob}"\n']
    return "".join(lines) + rest


# --- git -----------------------------------------------------------------------

def git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def blob_text(root: Path, blob: str | None) -> str | None:
    """The content of a git blob, or None when this clone does not have it."""
    if not blob:
        return None
    try:
        out = git(root, "cat-file", "blob", blob)
    except FileNotFoundError:
        return None
    return out.stdout if out.returncode == 0 else None


def head_text(root: Path, path: Path) -> str | None:
    out = git(root, "show", f"HEAD:{path.relative_to(root).as_posix()}")
    return out.stdout if out.returncode == 0 else None


def store_blob(root: Path, path: Path) -> str:
    out = git(root, "hash-object", "-w", "--", str(path))
    if out.returncode != 0:
        raise StampError(f"git hash-object failed: {out.stderr.strip()}")
    return out.stdout.strip()


# --- the check -----------------------------------------------------------------

def english(zh: Path) -> Path:
    return zh.with_name(zh.name.removesuffix(".zh.md") + ".md")


def missing_twins(docs: Path, root: Path | None = None) -> list[str]:
    """One line per page whose twin in the other language is missing, saying how to make it.

    static-i18n (``fallback_to_default``) would serve an English page without its twin
    under ``zh/`` as it is, inside ``<html lang="zh">``, and the build would pass: the
    strict build stops on these lines instead (hooks/translations.py). A new page's
    stamp is its first one: ``stamp`` takes a page that is not at HEAD yet.
    """
    root = docs.parent if root is None else root
    name = lambda path: path.relative_to(root).as_posix()
    lines = []
    for page in sorted(docs.rglob("*.md")):
        if page.name.endswith(".zh.md"):
            en = english(page)
            if not en.is_file():
                lines.append(f"{name(page)} has no English twin {name(en)}: write the English page it"
                             f" translates, then run make translated PAGE={name(page)}")
        elif not (zh := page.with_suffix(".zh.md")).is_file():
            lines.append(f"{name(page)} has no Chinese twin {name(zh)}: copy it, translate it,"
                         f" then run make translated PAGE={name(zh)}")
    return lines


@dataclass
class Problem:
    kind: str  # "missing", "unknown", "stale" or "orphan"
    page: str  # the Chinese page, relative to the repository root
    detail: str
    old: str | None = field(default=None, repr=False)  # the English page as it was translated, when this clone has it

    def __str__(self) -> str:
        return f"{self.page}: {self.kind}: {self.detail}"


def fix(page: str) -> str:
    """What a stale page's line says to do, with the page's own path."""
    return f"update the translation, then run: make translated PAGE={page}"


def check(root: Path = ROOT) -> list[Problem]:
    """Every Chinese page whose stamp is missing, malformed, unknown, or older than its English page."""
    problems = []
    for zh in sorted((root / "docs").rglob("*.zh.md")):
        name, en = zh.relative_to(root).as_posix(), english(zh)
        if not en.is_file():
            problems.append(Problem("orphan", name, f"no English page {en.relative_to(root).as_posix()}"))
            continue
        try:
            digest, blob = read_stamp(zh.read_text(encoding="utf-8"))
        except yaml.YAMLError as error:
            problems.append(Problem("unknown", name, f"front matter is not YAML: {error}"))
            continue
        current = prose_hash(en.read_text(encoding="utf-8"))
        if digest is None:
            where = " under jupyter:" if "jupyter" in split_front_matter(zh.read_text(encoding="utf-8"))[0] else ""
            problems.append(Problem("missing", name, f"no {KEY}{where} in its front matter"
                                    f" (run: make translated PAGE={name})"))
        elif not HASH.fullmatch(digest):
            problems.append(Problem("unknown", name, f"{KEY} {digest!r} is not 12 hex digits"))
        elif digest != current:
            old = blob_text(root, blob)
            if old is not None and prose_hash(old) == digest:
                problems.append(Problem("stale", name, f"{en.relative_to(root).as_posix()} changed since"
                                        f" {KEY} {digest} (now {current}); {fix(name)}", old))
            elif old is not None or blob is None:
                problems.append(Problem("unknown", name, f"{KEY} {digest} is the hash of nothing known: neither"
                                        f" the English page now ({current}) nor its recorded version"
                                        f" ({BLOB_KEY} {blob or 'absent'})"))
            else:
                problems.append(Problem("stale", name, f"{en.relative_to(root).as_posix()} changed since"
                                        f" {KEY} {digest} (now {current}); its recorded version {blob[:12]}"
                                        f" is not in this clone (shallow or never committed); {fix(name)}"))
    return problems


def english_diff(problem: Problem, root: Path = ROOT) -> str:
    """The English prose then (as translated) and now, as a unified diff."""
    en = english(root / problem.page)
    if problem.old is None:
        return "    (no recorded English version in this clone: `git fetch --unshallow`, or read the English page)\n"
    name = en.relative_to(root).as_posix()
    lines = difflib.unified_diff(prose(problem.old).splitlines(), prose(en.read_text(encoding="utf-8")).splitlines(),
                                 f"{name} (as translated)", f"{name} (now)", n=1, lineterm="")
    return "".join(f"    {line}\n" for line in lines)


def report(root: Path = ROOT) -> tuple[str, int]:
    problems = check(root)
    if not problems:
        return "Every Chinese page is stamped with the English prose it translates, and it is current.\n", 0
    out = []
    for problem in problems:
        out.append(f"{problem}\n")
        if problem.kind == "stale":
            out.append(english_diff(problem, root))
    stale = [p.page for p in problems if p.kind == "stale"]
    out.append(f"\n{len(problems)} page(s) to look at, {len(stale)} stale.\n")
    if stale:
        out.append("Update each stale translation from the diff above, then stamp it:\n"
                   + "".join(f"    make translated PAGE={page}\n" for page in stale))
    return "".join(out), 1


# --- stamping ------------------------------------------------------------------

class StampError(Exception):
    pass


def stamp(zh: Path, root: Path = ROOT, initial: bool = False) -> str:
    """Record, in ``zh``'s front matter, the English prose it now translates."""
    root, zh = root.resolve(), zh.resolve()
    name, en = zh.relative_to(root).as_posix(), english(zh)
    if not zh.name.endswith(".zh.md") or not zh.is_file():
        raise StampError(f"{name}: not a Chinese page (docs/<section>/<page>.zh.md)")
    if not en.is_file():
        raise StampError(f"{name}: no English page {en.relative_to(root).as_posix()}")
    text, head = zh.read_text(encoding="utf-8"), head_text(root, zh)
    if initial:
        if read_stamp(text)[0] is not None or (head is not None and read_stamp(head)[0] is not None):
            raise StampError(f"{name}: already stamped; --initial is only for a page that never was."
                             f" Update the translation, then run: make translated PAGE={name}")
    elif head is not None and " ".join(prose(without_stamp(head)).split()) == " ".join(prose(without_stamp(text)).split()):
        raise StampError(f"{name}: its prose is the same as at HEAD. Update the translation first:"
                         " the stamp never moves alone (see `make translations` for what changed)")
    digest = prose_hash(en.read_text(encoding="utf-8"))
    zh.write_text(with_stamp(text, digest, store_blob(root, en)), encoding="utf-8")
    return f"{name}: {KEY} {digest}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="list stale, missing and unknown stamps")
    sub.add_parser("report", help="the same, with a diff of the English prose since each stale stamp")
    stamping = sub.add_parser("stamp", help="record the English prose a Chinese page now translates")
    stamping.add_argument("pages", nargs="*", type=Path)
    stamping.add_argument("--initial", action="store_true",
                          help="first stamp of pages that never had one (all such pages when none is named)")
    args = parser.parse_args(argv)
    if args.command == "check":
        problems = check()
        print("".join(f"{p}\n" for p in problems) or "ok", end="" if problems else "\n")
        return 1 if problems else 0
    if args.command == "report":
        text, code = report()
        print(text, end="")
        return code
    pages = args.pages
    if not pages:
        if not args.initial:
            parser.error("name the pages: make translated PAGE=docs/<section>/<page>.zh.md")
        pages = [p for p in sorted((ROOT / "docs").rglob("*.zh.md"))
                 if read_stamp(p.read_text(encoding="utf-8"))[0] is None]
    failed = 0
    for page in pages:
        try:
            print(stamp(page, initial=args.initial))
        except StampError as error:
            print(f"refused: {error}", file=sys.stderr)
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
