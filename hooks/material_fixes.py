"""Fixes to Material's rendered pages, applied to the HTML of every page and of 404.html.

1. Drop the per-page ``<link rel="alternate" hreflang>`` tags from the head.
   Material's JavaScript takes every ``link[rel=alternate]`` to be the root of a
   language and fetches ``sitemap.xml`` next to it. static-i18n points those links
   at the page's own translation instead (so that the language selector lands on
   the same page), so the browser asked for ``<page>/sitemap.xml`` on every page and
   got 404s. The selector keeps static-i18n's per-page links and needs no fetch; the
   hreflang alternates stay declared, per page, in the sitemap.xml static-i18n writes.
2. Name the search dialog (axe-core: aria-dialog-name, serious): Material renders
   ``role="dialog"`` without an accessible name. And give the headings' permalinks
   a title in the page's language: the toc extension has one title for every
   language, "Permanent link", and static-i18n cannot set extensions per language.
3. Keep one 404 page, the default language's. A server has one 404.html for every
   missing address, and static-i18n builds it once per language into the same file,
   so the last language's header and navigation won (static-i18n issues #284, #349).
   In every other language's build it renders empty, which mkdocs does not write.
   Its content, overrides/404.html, speaks both languages.
"""

import re

from sitebuild.language import language

HEAD_ALTERNATE = re.compile(r'\s*<link rel="alternate" href="[^"]*" hreflang="[^"]*">')
SEARCH_DIALOG = '<div class="md-search" data-md-component="search" role="dialog"'
SEARCH_LABEL = {"en": "Search", "zh": "搜索"}
PERMALINK = 'class="headerlink" href="([^"]*)" title="Permanent link"'
PERMALINK_TITLE = {"en": "Permanent link", "zh": "永久链接"}


def fixed(output: str, lang: str) -> str:
    head, sep, body = output.partition("</head>")
    body = body.replace(SEARCH_DIALOG, f'{SEARCH_DIALOG} aria-label="{SEARCH_LABEL[lang]}"', 1)
    return HEAD_ALTERNATE.sub("", head) + sep + body


def on_page_content(html, page, config, files):
    """The permalink titles, in the content itself: the print pages take it from there."""
    title = PERMALINK_TITLE[language(config, page.file.src_uri)]
    return re.sub(PERMALINK, rf'class="headerlink" href="\1" title="{title}"', html)


def on_post_page(output, page, config):
    return fixed(output, language(config, page.file.src_uri))


def on_post_template(output, template_name, config):
    if template_name != "404.html":
        return output
    i18n = config.plugins["i18n"]
    return fixed(output, language(config)) if i18n.is_default_language_build else ""
