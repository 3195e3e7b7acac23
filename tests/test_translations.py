"""Every Chinese page records the English prose it translates, and that prose is current.

The failure cases run on a copy of two page pairs (a page and a lab) in a fresh git
repository under tmp_path, so the real tree is never touched. sitebuild/translations.py
defines what counts as prose and how the stamp is kept.
"""

import shutil
import subprocess
import sys

import jupytext
import pytest
from sitebuild import translations
from tests.conftest import ROOT


PAGE, LAB = "docs/pytorch/tensors.zh.md", "docs/labs/autograd.zh.md"
GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]


def test_every_translation_is_stamped_and_current():
    # A Chinese page without its English one: tests/test_parity.py reports it, with the fix.
    problems = [problem for problem in translations.check() if problem.kind != "orphan"]
    assert not problems, ("Chinese pages to update (`make translations` shows what changed in English;"
                          " each stale line ends with the command that stamps the page once updated):\n"
                          + "\n".join(map(str, problems)))


# --- on a copy ------------------------------------------------------------------

def commit(repo, message):
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True, capture_output=True)
    subprocess.run([*GIT, "commit", "-qm", message], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    """Two pairs, committed unstamped, then stamped with --initial and committed again."""
    if not shutil.which("git"):
        pytest.fail("git is needed to record the English version a translation follows")
    for zh in (PAGE, LAB):
        for rel in (zh, translations.english(ROOT / zh).relative_to(ROOT).as_posix()):
            target = tmp_path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(translations.without_stamp((ROOT / rel).read_text(encoding="utf-8")), encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    commit(tmp_path, "pages")
    for zh in (PAGE, LAB):
        translations.stamp(tmp_path / zh, tmp_path, initial=True)
    commit(tmp_path, "stamp")
    return tmp_path


def edit(path, old, new):
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def add_sentence(path, sentence):
    """A new paragraph right under the page's title (every page and lab has one)."""
    text = path.read_text(encoding="utf-8")
    title = next(line for line in text.splitlines(keepends=True) if line.startswith("# "))
    path.write_text(text.replace(title, f"{title}\n{sentence}\n", 1), encoding="utf-8")


def test_a_fresh_stamp_is_current(repo):
    assert translations.check(repo) == []


def test_an_edited_english_page_makes_its_translation_stale(repo):
    add_sentence(repo / "docs/pytorch/tensors.md", "A sentence the  translation\nlacks.")
    problems = translations.check(repo)
    assert [(p.kind, p.page) for p in problems] == [("stale", PAGE)], problems
    command = f"make translated PAGE={PAGE}"  # the fix, with the page's real path: no placeholder
    assert str(problems[0]).endswith(f"update the translation, then run: {command}"), problems[0]
    text, code = translations.report(repo)
    assert code == 1 and PAGE in text
    assert "\n    +A sentence the translation\n    +lacks.\n" in text, text
    assert text.endswith(f"then stamp it:\n    {command}\n") and "<" not in text.splitlines()[-1], text


def test_whitespace_and_code_changes_do_not_count(repo):
    en = repo / "docs/pytorch/tensors.md"
    edit(en, "```python\n", "```python\nimport os  # a code change\n")
    text = en.read_text(encoding="utf-8")
    changed = text.replace(". ", ".\n").replace(", ", ",   ").replace("\n\n", "\n\n\n").replace("\n", " \t\n")
    assert translations.prose(changed) != translations.prose(text), "the page has no sentence to re-wrap"
    edit(en, text, changed)
    assert translations.check(repo) == []
    lab = repo / "docs/labs/autograd.md"  # a code cell of a lab
    edit(lab, "```python\n", "```python\n# a comment in a code cell\n")
    assert translations.check(repo) == []


def test_a_new_page_without_its_twin_is_named_with_the_fix_and_the_fix_works(repo):
    """The line the build stops on (hooks/translations.py), in both directions; then the
    steps it names, for a page that has never been committed."""
    en, zh = repo / "docs/pytorch/new_page.md", repo / "docs/pytorch/new_page.zh.md"
    en.write_text("# A new page { #new }\n\nA sentence.\n", encoding="utf-8")
    assert translations.missing_twins(repo / "docs") == [
        "docs/pytorch/new_page.md has no Chinese twin docs/pytorch/new_page.zh.md: copy it, translate it,"
        " then run make translated PAGE=docs/pytorch/new_page.zh.md"]
    zh.write_text("# 新的一页 { #new }\n\n一句话。\n", encoding="utf-8")
    assert translations.missing_twins(repo / "docs") == []
    assert [(p.kind, p.page) for p in translations.check(repo)] == [("missing", "docs/pytorch/new_page.zh.md")]
    translations.stamp(zh, repo)
    assert translations.check(repo) == []
    en.unlink()
    assert translations.missing_twins(repo / "docs") == [
        "docs/pytorch/new_page.zh.md has no English twin docs/pytorch/new_page.md: write the English page it"
        " translates, then run make translated PAGE=docs/pytorch/new_page.zh.md"]


def test_a_page_without_a_stamp_fails_with_its_name(repo):
    zh = repo / PAGE
    zh.write_text(translations.without_stamp(zh.read_text(encoding="utf-8")), encoding="utf-8")
    problems = translations.check(repo)
    assert [(p.kind, p.page) for p in problems] == [("missing", PAGE)]
    assert PAGE in str(problems[0])


@pytest.mark.parametrize("blob", ["recorded", "absent"])
def test_a_hash_of_nothing_fails_with_its_name(repo, blob):
    zh = repo / LAB
    text = zh.read_text(encoding="utf-8")
    digest, recorded = translations.read_stamp(text)
    text = text.replace(digest, "0123456789ab")
    if blob == "absent":
        text = text.replace(f'  {translations.BLOB_KEY}: "{recorded}"\n', "")
    zh.write_text(text, encoding="utf-8")
    problems = translations.check(repo)
    assert [(p.kind, p.page) for p in problems] == [("unknown", LAB)], problems
    assert "0123456789ab" in str(problems[0])


def test_a_malformed_hash_fails_with_its_name(repo):
    zh = repo / PAGE
    edit(zh, translations.read_stamp(zh.read_text(encoding="utf-8"))[0], "not-a-hash")
    assert [(p.kind, p.page) for p in translations.check(repo)] == [("unknown", PAGE)]


def test_the_stamp_never_moves_alone(repo):
    add_sentence(repo / "docs/pytorch/tensors.md", "A sentence the translation lacks.")
    zh = repo / PAGE
    with pytest.raises(translations.StampError, match="same as at HEAD"):
        translations.stamp(zh, repo)
    edit(zh, "\n\n", "\n\n\n")  # whitespace is not a translation
    with pytest.raises(translations.StampError, match="same as at HEAD"):
        translations.stamp(zh, repo)
    with pytest.raises(translations.StampError, match="already stamped"):
        translations.stamp(zh, repo, initial=True)
    assert [p.kind for p in translations.check(repo)] == ["stale"]
    add_sentence(zh, "译文补上的一句。")
    translations.stamp(zh, repo)
    assert translations.check(repo) == []


def test_a_lab_keeps_its_stamp_in_the_notebook_metadata(repo):
    notebook = jupytext.read(repo / LAB)
    assert notebook.metadata[translations.KEY] == translations.read_stamp((repo / LAB).read_text(encoding="utf-8"))[0]
    assert notebook.cells[0].cell_type == "markdown", "a top-level key would have become a raw cell"
    en = jupytext.read(repo / "docs/labs/autograd.md")
    assert len(notebook.cells) == len(en.cells)
