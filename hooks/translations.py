"""MkDocs adapter for sitebuild/translations.py: every page comes in both languages.

static-i18n (``fallback_to_default``) serves an English page that has no Chinese twin
under ``zh/`` as it is, inside ``<html lang="zh">``, and the build passes. The strict
build stops instead, with one line per missing twin that says how to make it.
"""

from pathlib import Path

from mkdocs.exceptions import PluginError

from sitebuild import translations


def on_config(config):
    missing = translations.missing_twins(Path(config.docs_dir), Path(config.config_file_path).parent)
    if missing:
        raise PluginError("\n".join(missing))
    return config
