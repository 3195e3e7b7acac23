"""MkDocs adapter for sitebuild/render_memo.py: highlighting and templates kept across rebuilds."""

from sitebuild import render_memo


def on_config(config):
    render_memo.remember_highlighting()


def on_env(env, config, files):
    return render_memo.remember_templates(env)
