"""Two fixes to Material's rendered pages, applied to the HTML of every page.

1. Drop the per-page ``<link rel="alternate" hreflang>`` tags from the head.
   Material's JavaScript takes every ``link[rel=alternate]`` to be the root of a
   language and fetches ``sitemap.xml`` next to it. static-i18n points those links
   at the page's own translation instead (so that the language selector lands on
   the same page), so the browser asked for ``<page>/sitemap.xml`` on every page and
   got 404s. The selector keeps static-i18n's per-page links and needs no fetch; the
   hreflang alternates stay declared, per page, in the sitemap.xml static-i18n writes.
2. Name the search dialog (axe-core: aria-dialog-name, serious): Material renders
   ``role="dialog"`` without an accessible name.
"""

import re

HEAD_ALTERNATE = re.compile(r'\s*<link rel="alternate" href="[^"]*" hreflang="[^"]*">')
SEARCH_DIALOG = '<div class="md-search" data-md-component="search" role="dialog"'
SEARCH_LABEL = {"en": "Search", "zh": "搜索"}


def on_post_page(output, page, config):
    head, sep, body = output.partition("</head>")
    lang = getattr(page.file, "locale", None) or "en"
    body = body.replace(SEARCH_DIALOG, f'{SEARCH_DIALOG} aria-label="{SEARCH_LABEL[lang]}"', 1)
    return HEAD_ALTERNATE.sub("", head) + sep + body
