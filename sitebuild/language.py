"""Which language a page is rendered in: the one answer every part of the build uses.

static-i18n builds the site once per language and names the one it is building;
without it (another engine, a unit test) a page's language is its file's suffix,
``x.zh.md``, as in static-i18n's ``docs_structure: suffix``.
"""

from __future__ import annotations

DEFAULT = "en"
LANGUAGES = ("en", "zh")


def language(config=None, src_uri: str | None = None) -> str:
    """static-i18n's current build language, else the suffix of ``src_uri``, else English."""
    i18n = config.plugins.get("i18n") if config is not None else None
    if i18n is not None and i18n.current_language:
        return i18n.current_language
    if src_uri is not None:
        suffix = src_uri.rsplit("/", 1)[-1].split(".")[1:-1]
        if suffix and suffix[-1] in LANGUAGES:
            return suffix[-1]
    return DEFAULT


def prefix(lang: str) -> str:
    """Where a language's pages live: '' for the default, 'zh/' for Chinese."""
    return "" if lang == DEFAULT else f"{lang}/"
