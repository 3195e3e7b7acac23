"""MkDocs adapter for the print pages and PDF links (sitebuild/print_pages.py).

static-i18n runs each further language's build inside the default one's
on_post_build, so every language's pages are collected before the last
on_post_build writes the print pages. `mkdocs serve` writes none: they are for
`make pdf`, and every edit would pay for them.
"""

from sitebuild import background, print_pages
from sitebuild.language import language


def on_nav(nav, config, files):
    print_pages.start(language(config), nav, config.site_name)
    return nav


def on_page_markdown(markdown, page, config, files):
    return print_pages.with_download(markdown, language(config, page.file.src_uri), page.url)


def on_page_context(context, page, config, nav):
    print_pages.add_page(language(config, page.file.src_uri), page.url, page.title or "", page.content or "")
    return context


def on_post_page(output, page, config):
    print_pages.add_head(language(config, page.file.src_uri), page.url, output)
    return output


def on_post_build(config):
    if not background.enabled():
        print_pages.write_all(config)
