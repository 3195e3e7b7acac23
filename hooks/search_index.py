"""MkDocs adapter for the per-language search indexes and the query cut (sitebuild/search_index.py says why)."""

from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

from sitebuild import search_index
from sitebuild.language import prefix


def on_config(config):
    """After Material's on_config (hooks follow the plugins), which makes a new index per build."""
    search_index.remember_entries(config.plugins["material/search"].search_index)


_order: list[str] = []  # every language's pages, in the order of its navigation


def on_nav(nav, config, files):
    if not config.plugins["i18n"].building:  # the first language's build: a new build
        _order.clear()
    _order.extend(page.url for page in nav.pages)
    return nav


def on_post_page(output, page, config):
    """A ``<locale>/`` page's base is its language's root, where its index lies."""
    i18n = config.plugins["i18n"]
    if i18n.is_default_language_build:
        return output
    return search_index.rebased(output, prefix(i18n.current_language), page.url)


@event_priority(-200)  # after static-i18n's on_post_build (-100) has merged the languages
def on_post_build(config):
    i18n = config.plugins["i18n"]
    if not i18n.building:  # not a nested build of one more language
        search_index.split(Path(config.site_dir), i18n.default_language, list(i18n.build_languages), _order)
        try:  # the worker both languages share: glossary terms whole in a Chinese query
            search_index.patch_worker(Path(config.site_dir), config.theme.dirs)
        except search_index.SearchError as error:
            raise PluginError(str(error)) from None
