"""MkDocs adapter for the snippets (sitebuild.results, sitebuild.output_blocks).

What only MkDocs needs is here; the output blocks themselves are the Markdown
extension ``sitebuild.output_blocks``, which any Python-Markdown engine runs.

* on_startup: under `mkdocs serve`, results may be pending (sitebuild.background): pages
  show "running…" until their snippets have run in the background.
* on_config: a malformed record stops the strict build with its file name; so does
  a sitebuild package imported from another copy of the project than the one built
  (its paths are its own folder's).
* on_files: every snippet runs up front, in parallel (once for both languages),
  so pages never wait on one another; a failure stops the build with its stderr.
  In serve, the snippets without a result are queued instead, and the files of theirs that
  pages link (figures, traces) are placeholders until then; a failure shows on its page.
  Each snippet's source is served at ``snippets/...`` (pages offer it for download),
  and the files it wrote into ``$SNIPPET_OUTPUT_DIR`` at
  ``generated/<snippet path without .py>/<name>``, so pages link them like any image.
* on_page_markdown: tells the extension the page's language (Python-Markdown
  tells an extension nothing about the page it renders).
* on_serve: rebuilds when a snippet or a record changes, or when background runs end;
  starts those runs, now that the first build is served.
* on_shutdown: serve has stopped (Ctrl+C); the background runs going on are killed (each
  runs in a session of its own, which the terminal's signal does not reach).
"""

from __future__ import annotations

import json
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import get_plugin_logger
from mkdocs.structure.files import File

from sitebuild import background, records, results, snippets
from sitebuild.language import language

log = get_plugin_logger("snippets")
EXTENSION = "sitebuild.output_blocks"
_keys: dict[str, str] = {}  # the sources last run: a rebuild says what ran only after a change


def on_config(config):
    here = Path(config.config_file_path).resolve().parent
    if here != snippets.ROOT:
        raise PluginError(f"sitebuild is imported from {snippets.ROOT}, not from {here}, the project being built: "
                          f"run `pip install --no-deps --editable .` there (make does), or `python -m mkdocs` in it")
    try:
        records.load()
    except records.RecordError as error:
        raise PluginError(f"records/{error}") from None
    if EXTENSION not in config.markdown_extensions:
        raise PluginError(f"mkdocs.yml: markdown_extensions must list {EXTENSION} (the output blocks)")
    return config


def on_startup(command, dirty):
    if command == "serve":
        background.enable()


def on_files(files, config):
    paths = snippets.discover()
    found = queued(paths) if background.enabled() else ran(paths)
    linked = background.generated_links()
    for path, result in found.items():
        files.append(File(path, str(snippets.ROOT), config.site_dir, config.use_directory_urls))
        folder = path.removeprefix("snippets/").removesuffix(".py")
        if result is not None and result.ok:
            stored = results.cache_dir() / results.cache_key(snippets.ROOT / path)
            for name in result.figures:
                files.append(File(f"generated/{folder}/{name}", str(stored), config.site_dir, config.use_directory_urls))
            continue
        for name in linked.get(folder, ()):
            uri = f"generated/{folder}/{name}"
            background.placeholder(uri, "running" if result is None else "failed", path)
            files.append(File(uri, str(background.FIGURES), config.site_dir, config.use_directory_urls))
    return files


def ran(paths) -> dict:
    """Every result, run now where there is none; a failure stops the build."""
    keys = {snippets.relative(p): results.cache_key(p) for p in paths}
    found = results.run_all(paths)
    if keys != _keys:
        done = sum(not r.cached for r in found.values())
        log.info(f"{done} snippets ran, {len(found) - done} from cache")
        _keys.clear()
        _keys.update(keys)
    failed = [r.failure(snippets.pages_including(r.path)) for r in found.values() if not r.ok]
    if failed:
        raise PluginError("\n\n".join(failed))
    return found


def queued(paths) -> dict:
    """Serve: the results there are (None where pending); the others run in the background."""
    found = {snippets.relative(p): results.known(p) for p in paths}
    pending = [p for p in paths if found[snippets.relative(p)] is None]
    sources = {json.dumps(snippets.source_hashes(p)) for p in pending}  # what is run, as the key is
    if pending and background.submit(sources, results.run_all, pending, background.Progress(len(pending))):
        log.info(f"{len(pending)} snippets run in the background; their pages say 'running…' until then")
    return found


def on_page_markdown(markdown, page, config, files):
    config.mdx_configs.setdefault(EXTENSION, {})["language"] = language(config, page.file.src_uri)
    return markdown


def on_serve(server, config, builder):
    server.watch(str(snippets.SNIPPETS))
    server.watch(str(records.RECORDS))
    server.watch(str(background.READY))
    background.start()
    return server


def on_shutdown():
    if background.enabled():
        background.stop()
