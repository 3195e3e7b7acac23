"""MkDocs adapter for the page actions from ``REPO_URL`` (sitebuild/page_actions.py says what and why).

Without ``REPO_URL`` nothing is rendered, and ``edit_uri`` is cleared: MkDocs would
otherwise warn on every page that ``edit/main/docs/<page>.md`` is not a URL, and the
strict build would fail.
"""

from mkdocs.exceptions import PluginError

from sitebuild import page_actions
from sitebuild.language import language


def on_config(config):
    if not config.repo_url:
        config.edit_uri = config.edit_uri_template = None
    if not config.plugins["i18n"].building:  # a new build, not one more language of this one:
        page_actions.forget_facts()  # its commit and date are read again (serve: another commit, day)
    return config


def on_post_page(output, page, config):
    if not config.repo_url:
        return output
    try:
        return page_actions.with_actions(output, config.repo_url, page.title or config.site_name,
                                         page.canonical_url, language(config, page.file.src_uri),
                                         page.file.src_uri)
    except ValueError as error:
        raise PluginError(str(error)) from None


def on_post_template(output_content, template_name, config):
    """404.html is rendered from a template, not as a page: it has the header link too."""
    return page_actions.without_source_mark(output_content) if config.repo_url else output_content
