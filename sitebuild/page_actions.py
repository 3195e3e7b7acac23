"""Page actions, all from the ``REPO_URL`` environment variable (mkdocs.yml: ``repo_url: !ENV REPO_URL``).

The Pages workflow sets ``REPO_URL`` to the repository (``https://github.com/<owner>/<repo>``).
Without it, no action is rendered and the build is the same as before.

* "View source" and "Edit this page" are Material's ``content.action.view`` and
  ``content.action.edit``, made from ``repo_url`` and ``edit_uri`` (``edit/main/docs/``).
  static-i18n 1.3.1 keeps each language's own file as the page's source, so a Chinese
  page's links open ``docs/<page>.zh.md``; tests/test_page_actions.py checks it.
  Without ``REPO_URL``, ``edit_uri`` is cleared (hooks/page_actions.py): MkDocs would otherwise warn on
  every page that ``edit/main/docs/<page>.md`` is not a URL, and the strict build fails.
* "Report a problem" is a plain link to ``<REPO_URL>/issues/new`` whose title (in the
  page's language) and body are filled in: the page's URL, its language, the commit the
  site was built from (``GITHUB_SHA``, else ``git rev-parse HEAD``, marked when the
  working tree has uncommitted changes) and the device, torch and date of the build.
  The device and torch come from the probe the snippets ran under
  (``snippets.machine()`` in sitebuild/snippets.py, cached, so no second torch start).
  Following the link is the reader's choice; the page itself makes no request.
* "Run this page on Colab", on each page that has a notebook (sitebuild/page_notebooks.py),
  only when ``REPO_URL`` is a GitHub repository: Colab opens
  ``colab.research.google.com/github/<owner>/<repo>/blob/main/notebooks/<lang>/<page>.ipynb``.
* The repository link in the header: Material's JavaScript asks ``api.github.com``
  for the stars and forks of any element marked ``data-md-component="source"``. The
  site makes no third-party request, so the mark is dropped and the link stays plain.

Why a hook and not a template override (``theme.custom_dir`` with a
``partials/actions.html``): the report link needs the commit and the machine, which
only Python knows, so a template would still need a hook to pass them in, plus a copy
of Material's partial to keep in step with each Material release; the header fix
needs the rendered HTML anyway. One hook does all three.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import quote, urlencode

import material

from sitebuild import build_info, page_notebooks, snippets

ARTICLE = '<article class="md-content__inner md-typeset">'
SOURCE_MARK = ' data-md-component="source"'
ICONS = Path(material.__file__).parent / "templates" / ".icons" / "material"
ICON = (ICONS / "bug-outline.svg").read_text(encoding="utf-8")
COLAB_ICON = (ICONS / "play-circle-outline.svg").read_text(encoding="utf-8")
GITHUB_REPO = re.compile(r"^https://github\.com/([\w.-]+/[\w.-]+?)/?$")
LABELS = {
    "en": {
        "link": "Report a problem with this page",
        "colab": "Run this page on Colab",
        "title": "Problem on the page “{title}”",
        "body": ("**Page:** {url}\n**Language:** English (en)\n**Built from commit:** {commit}\n"
                 "**Build:** {device} · torch {torch} · {date}\n\n**What is wrong:**\n\n"),
    },
    "zh": {
        "link": "报告本页的问题",
        "colab": "在 Colab 中运行本页",
        "title": "页面问题：{title}",
        "body": ("**页面**：{url}\n**语言**：中文（zh）\n**构建所用的提交**：{commit}\n"
                 "**构建环境**：{device} · torch {torch} · {date}\n\n**问题描述**：\n\n"),
    },
}

_facts: dict[str, str] = {}


def build_facts() -> dict[str, str]:
    """Commit, device, torch and date of this build, worked out once per build."""
    if not _facts:
        machine = snippets.machine()
        sha, dirty = build_info.commit()
        _facts.update(commit=sha + (" + uncommitted changes" if dirty else ""), device=machine["device"],
                      torch=machine["torch"], date=build_info.built().date().isoformat())
    return _facts


def report_url(repo_url: str, title: str, page_url: str, lang: str, facts: dict[str, str]) -> str:
    labels = LABELS[lang]
    query = {"title": labels["title"].format(title=title),
             "body": labels["body"].format(url=page_url, **facts)}
    return f"{repo_url.rstrip('/')}/issues/new?{urlencode(query, quote_via=quote)}"


def action_link(url: str, label: str, icon: str) -> str:
    """Styled like Material's edit and view buttons, which float beside it."""
    return (f'<a href="{html.escape(url)}" title="{label}" aria-label="{label}"'
            f' class="md-content__button md-icon" rel="nofollow">{icon}</a>')


def colab_url(repo_url: str, src_uri: str) -> str | None:
    """The page's notebook on Colab; None without a notebook or outside GitHub."""
    repo = GITHUB_REPO.match(repo_url)
    notebook = page_notebooks.target(page_notebooks.DOCS / src_uri)
    if repo is None or not notebook.is_file():
        return None
    return f"https://colab.research.google.com/github/{repo.group(1)}/blob/main/{notebook.relative_to(snippets.ROOT).as_posix()}"


def with_actions(output: str, repo_url: str, title: str, page_url: str, lang: str, where: str) -> str:
    """The page's HTML with the report link in its article and a plain repository link."""
    if ARTICLE not in output:
        raise ValueError(f"page_actions: no {ARTICLE} in {where}; Material's layout changed")
    links = action_link(report_url(repo_url, title, page_url, lang, build_facts()), LABELS[lang]["link"], ICON)
    colab = colab_url(repo_url, where)
    if colab:
        links += action_link(colab, LABELS[lang]["colab"], COLAB_ICON)
    return without_source_mark(output.replace(ARTICLE, ARTICLE + links, 1))


def without_source_mark(output: str) -> str:
    return output.replace(SOURCE_MARK, "")


def forget_facts():
    """A new build: its commit and its date (build_info.built) are read again."""
    _facts.clear()
    build_info.forget()
