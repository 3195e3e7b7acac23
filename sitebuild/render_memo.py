"""What one process remembers from build to build: pages' HTML, highlighted code and compiled templates.

`mkdocs serve` rebuilds every page of both languages after each saved edit. Three costs
of a rebuild depend on nothing that a prose edit changes, and were paid anew each time
(profiles of a one-sentence rebuild on a 2-core AMD EPYC, in the #23 and #36 closing notes):

* Python-Markdown converting all 64 pages when one changed: 44 % of the rebuild's CPU
  time (0.97 of 2.2 s), all of which but the edited page's this saves.
  ``remember_pages`` (serve only) keeps what ``Page.render`` made of each page (HTML, table
  of contents, title, anchors) and hands it back while all that the render reads is as it
  was: the page's Markdown after the ``on_page_markdown`` hooks, its address, the Markdown
  extensions and their options (the output blocks' language among them), the address of
  every file of the site (links resolve against them), and, by size and modification
  time, what pages take from outside ``docs/`` (``inputs``): ``mkdocs.yml``, ``snippets/``
  (pages include code from there only), ``records/`` and the file a background run writes
  when its results are in. A render that logged a warning is not kept, so a strict
  rebuild stops on it every time; a kept page's links to other pages' anchors are checked
  again against those pages as they are now. All that follows the conversion runs as
  before: the ``on_page_content`` hooks, the templates, the search entries. The labs are
  converted by mkdocs-jupyter, from its own cache, and are not kept here.
* Pygments, called by pymdownx.highlight for each of the ~500 code blocks: a third of
  the Markdown time. ``remember_highlighting`` keeps each block's HTML by its code, its
  lexer and its formatter's options, which is all the output depends on.
* Jinja compiling Material's templates, because each build makes a new environment.
  ``remember_templates`` gives every environment one in-memory bytecode cache, keyed
  by Jinja itself by template name and source checksum.

A build that runs once (`mkdocs build`) gets the same output and no saving.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from collections import OrderedDict
from pathlib import Path

import jinja2
from mkdocs.structure.pages import Page
from pymdownx import highlight

HIGHLIGHTED = 4096  # blocks kept; the site has about 500 per language


def remember_highlighting():
    """pymdownx.highlight's call of ``pygments.highlight``, memoised (once per process)."""
    if getattr(highlight.highlight, "remembered", False):
        return
    pygments_highlight = highlight.highlight
    kept: OrderedDict[tuple, str] = OrderedDict()

    def remembered(code, lexer, formatter, outfile=None):
        if outfile is not None:
            return pygments_highlight(code, lexer, formatter, outfile)
        key = (code, type(lexer), repr(sorted(lexer.options.items())),
               type(formatter), repr(sorted(formatter.options.items())))
        if key not in kept:
            kept[key] = pygments_highlight(code, lexer, formatter)
            if len(kept) > HIGHLIGHTED:
                kept.popitem(last=False)
        return kept[key]

    remembered.remembered = True
    highlight.highlight = remembered


class InMemoryBytecode(jinja2.BytecodeCache):
    def __init__(self):
        self.compiled: dict[str, bytes] = {}

    def load_bytecode(self, bucket):
        if bucket.key in self.compiled:
            bucket.bytecode_from_string(self.compiled[bucket.key])

    def dump_bytecode(self, bucket):
        self.compiled[bucket.key] = bucket.bytecode_to_string()


_bytecode = InMemoryBytecode()


def remember_templates(env: jinja2.Environment) -> jinja2.Environment:
    env.bytecode_cache = _bytecode
    return env


PAGES = 512  # renders kept; the site has about 32 pages per language


class _Warned(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record):
        self.count += 1


def _stamp(paths: list[Path]) -> tuple:
    """Name, size and modification time of every file under ``paths``."""
    found = []
    for path in paths:
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file():
                stat = file.stat()
                found.append((str(file), stat.st_size, stat.st_mtime_ns))
    return tuple(found)


def _settings(config) -> str:
    """The Markdown extensions and their options (a path placeholder as its path)."""
    return json.dumps([config.markdown_extensions, config.mdx_configs], sort_keys=True,
                      default=lambda value: os.fspath(value) if isinstance(value, os.PathLike) else repr(value))


def remember_pages(inputs: list[Path]):
    """``Page.render`` memoised by all it reads (see the module's docstring); once per process."""
    if getattr(Page.render, "remembered", False):
        return
    render = Page.render
    kept: OrderedDict[tuple, tuple] = OrderedDict()
    site: list = [None, None]  # the Files of the build in progress, and its key

    def remembered(page, config, files):
        if site[0] is not files:  # once per build and language
            site[:] = [files, (tuple((f.src_uri, f.url) for f in files), _stamp(inputs))]
        key = (page.file.src_uri, page.file.url, page.markdown, _settings(config), site[1])
        if key in kept:
            kept.move_to_end(key)
            content, toc, title, anchors, links = kept[key]
            page.content, page.toc, page._title_from_render = content, copy.deepcopy(toc), title
            page.present_anchor_ids = set(anchors)
            if links is not None:
                page.links_to_anchors = {files.get_file_from_path(uri): dict(found) for uri, found in links.items()}
            return
        warned = _Warned()
        logging.getLogger("mkdocs").addHandler(warned)
        try:
            render(page, config, files)
        finally:
            logging.getLogger("mkdocs").removeHandler(warned)
        if warned.count:
            return
        links = page.links_to_anchors
        kept[key] = (page.content, copy.deepcopy(page.toc), page._title_from_render, set(page.present_anchor_ids),
                     None if links is None else {f.src_uri: dict(found) for f, found in links.items()})
        if len(kept) > PAGES:
            kept.popitem(last=False)

    remembered.remembered = True
    Page.render = remembered
