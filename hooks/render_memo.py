"""MkDocs adapter for sitebuild/render_memo.py: pages' HTML (serve), highlighting and templates kept across rebuilds."""

from sitebuild import background, records, render_memo, snippets


def on_startup(command, dirty):
    if command == "serve":  # what pages read outside docs/: a change there renders every page anew
        render_memo.remember_pages([snippets.ROOT / "mkdocs.yml", snippets.SNIPPETS, records.RECORDS, background.READY])


def on_config(config):
    render_memo.remember_highlighting()


def on_env(env, config, files):
    return render_memo.remember_templates(env)
