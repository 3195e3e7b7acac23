"""MkDocs adapter for the labs (sitebuild/labs.py says what is done to them, and why).

* on_pre_build: one mkdocs-jupyter cache folder per language (static-i18n's builds
  would evict each other's entries), and its test for notebooks made cheap for pages
  that are no lab (sitebuild.labs.only_included).
* on_files: the English labs run once per build, in the first language's build;
  every language's ``.ipynb`` is served next to its page. Under `mkdocs serve`, a lab
  without a stored run is queued (sitebuild/background.py) and its page says so.
* on_pre_page: a lab page is rendered from its notebook with outputs, not from the .md.
* on_page_content: the lab page's HTML as sitebuild.labs.page_html leaves it.
"""

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

from sitebuild import background, labs
from sitebuild.language import language


def on_pre_build(config):
    plugin = config.plugins["mkdocs-jupyter"]
    plugin.config["cache_dir"] = str(labs.CACHE / language(config))
    labs.only_included(plugin)


def on_files(files, config):
    if not config.plugins["i18n"].building:  # the first language's build: once per build
        pending = labs.write_notebooks(wait=not background.enabled())
        if pending:
            background.submit({lab.name for lab in pending}, labs.run_all, pending, True)
    for lab in sorted(labs.LABS.glob("*.md")):
        files.append(File(labs.ipynb_uri(lab), str(labs.OUT), config.site_dir, config.use_directory_urls))
    return files


@event_priority(10)  # before mkdocs-jupyter's on_pre_page, which renders page.file.abs_src_path
def on_pre_page(page, config, files):
    if labs.is_lab(page.file.src_uri):
        page.file.abs_src_path = str(labs.OUT / labs.ipynb_uri(Path(page.file.src_uri)))
    return page


def on_page_content(html, page, config, files):
    if not labs.is_lab(page.file.src_uri):
        return html
    return labs.page_html(html, page, files, config, language(config, page.file.src_uri))
