"""Page actions, all from the ``REPO_URL`` environment variable (mkdocs.yml: ``repo_url: !ENV REPO_URL``).

The Pages workflow sets ``REPO_URL`` to the repository (``https://github.com/<owner>/<repo>``).
Without it, no action is rendered and the build is the same as before.

* "View source" and "Edit this page" are Material's ``content.action.view`` and
  ``content.action.edit``, made from ``repo_url`` and ``edit_uri`` (``edit/main/docs/``).
  static-i18n 1.3.1 keeps each language's own file as the page's source, so a Chinese
  page's links open ``docs/<page>.zh.md``; tests/test_page_actions.py checks it.
  Without ``REPO_URL``, ``edit_uri`` is cleared here: MkDocs would otherwise warn on
  every page that ``edit/main/docs/<page>.md`` is not a URL, and the strict build fails.
* "Report a problem" is a plain link to ``<REPO_URL>/issues/new`` whose title (in the
  page's language) and body are filled in: the page's URL, its language, the commit the
  site was built from (``GITHUB_SHA``, else ``git rev-parse HEAD``, marked when the
  working tree has uncommitted changes) and the device, torch and date of the build.
  The device and torch come from the probe the snippets ran under
  (``snippets.machine()`` in tools/snippets.py, cached, so no second torch start).
  Following the link is the reader's choice; the page itself makes no request.
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
import os
import subprocess
import sys
from datetime import date
from pathlib import Path
from urllib.parse import quote, urlencode

import material
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import snippets  # noqa: E402  (tools/snippets.py; the same module object snippet_runner uses)

ARTICLE = '<article class="md-content__inner md-typeset">'
SOURCE_MARK = ' data-md-component="source"'
ICON = (Path(material.__file__).parent / "templates" / ".icons" / "material" / "bug-outline.svg").read_text(
    encoding="utf-8")
LABELS = {
    "en": {
        "link": "Report a problem with this page",
        "title": "Problem on the page “{title}”",
        "body": ("**Page:** {url}\n**Language:** English (en)\n**Built from commit:** {commit}\n"
                 "**Build:** {device} · torch {torch} · {date}\n\n**What is wrong:**\n\n"),
    },
    "zh": {
        "link": "报告本页的问题",
        "title": "页面问题：{title}",
        "body": ("**页面**：{url}\n**语言**：中文（zh）\n**构建所用的提交**：{commit}\n"
                 "**构建环境**：{device} · torch {torch} · {date}\n\n**问题描述**：\n\n"),
    },
}

_facts: dict[str, str] = {}


def commit() -> str:
    """The commit the site is built from; 'unknown' outside a git checkout."""
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


def build_facts() -> dict[str, str]:
    """Commit, device, torch and date of this build, worked out once per build."""
    if not _facts:
        machine = snippets.machine()
        _facts.update(commit=commit(), device=machine["device"], torch=machine["torch"],
                      date=date.today().isoformat())
    return _facts


def report_url(repo_url: str, title: str, page_url: str, lang: str, facts: dict[str, str]) -> str:
    labels = LABELS[lang]
    query = {"title": labels["title"].format(title=title),
             "body": labels["body"].format(url=page_url, **facts)}
    return f"{repo_url.rstrip('/')}/issues/new?{urlencode(query, quote_via=quote)}"


def report_link(url: str, lang: str) -> str:
    """Styled like Material's edit and view buttons, which float beside it."""
    label = LABELS[lang]["link"]
    return (f'<a href="{html.escape(url)}" title="{label}" aria-label="{label}"'
            f' class="md-content__button md-icon" rel="nofollow">{ICON}</a>')


def on_config(config):
    if not config.repo_url:
        config.edit_uri = config.edit_uri_template = None
    _facts.clear()  # `mkdocs serve`: a rebuild may come from another commit
    return config


def on_post_page(output, page, config):
    if not config.repo_url:
        return output
    lang = getattr(page.file, "locale", None) or "en"
    url = report_url(config.repo_url, page.title or config.site_name, page.canonical_url, lang, build_facts())
    if ARTICLE not in output:
        raise PluginError(f"page_actions: no {ARTICLE} in {page.file.src_uri}; Material's layout changed")
    output = output.replace(ARTICLE, ARTICLE + report_link(url, lang), 1)
    return output.replace(SOURCE_MARK, "")


def on_post_template(output_content, template_name, config):
    """404.html is rendered from a template, not as a page: it has the header link too."""
    return output_content.replace(SOURCE_MARK, "") if config.repo_url else output_content
