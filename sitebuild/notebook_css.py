"""A lab page's CSS: mkdocs-jupyter's inline JupyterLab styles as one hashed file, slimmed.

mkdocs-jupyter (0.26.3 has no option for it) inlines JupyterLab's CSS, about 590 KB,
into every notebook page. ``external_css`` moves those ``<style>`` blocks, in order,
into ``assets/jupyter/<hash>.css`` and links it where the first block stood, leaving
out the rules no notebook page can match (see sitebuild/labs.py's docstring, "Weight").
``without_dead_loaders`` drops the mermaid and MathJax loaders no lab uses.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path

import tinycss2
from mkdocs.utils import get_relative_url

STYLE = re.compile(r"<style[^>]*>(.*?)</style>\s*", re.S)
MERMAID = re.compile(r'<script type="module">\s*document\.addEventListener\("DOMContentLoaded", '
                     r'async \(\) => \{\s*const diagrams = document\.querySelectorAll\("\.jp-Mermaid.*?</script>\s*',
                     re.S)
MATHJAX = re.compile(r'<!-- Load mathjax -->\s*<script src="">\s*</script>.*?<!-- End of mathjax configuration -->',
                     re.S)
CHARSET = '@charset "UTF-8";'


def external_css(html: str, page, config) -> str:
    """Move the notebook's inline CSS into one hashed file under assets/jupyter/."""
    blocks = [block.strip().replace(CHARSET, "") for block in STYLE.findall(html)]
    if not blocks:
        return html
    classes = frozenset(" ".join(CLASS_ATTRIBUTE.findall(html)).split())
    css = "\n".join([CHARSET] + [purge(block, classes & selector_classes(block)) for block in blocks])
    uri = f"assets/jupyter/{hashlib.sha256(css.encode()).hexdigest()[:12]}.css"
    target = Path(config.site_dir) / uri
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(css + "\n", encoding="utf-8")
    link = f'<link rel="stylesheet" href="{get_relative_url(uri, page.url)}">\n'
    first = STYLE.search(html).start()
    return html[:first] + link + STYLE.sub("", html[first:])


def without_dead_loaders(html: str) -> str:
    html = MATHJAX.sub("", html)
    return html if 'class="jp-Mermaid' in html else MERMAID.sub("", html)


# --- leaving out the rules no notebook page can match ---------------------------------

CLASS_ATTRIBUTE = re.compile(r'class="([^"]*)"')
SELECTOR_CLASS = re.compile(r"\.(-?[_a-zA-Z][\w-]*)")
NEGATION = re.compile(r":(?:not|is|where|has)\(")
WORD = re.compile(r"[A-Za-z_][\w-]*")
ROOT_INSIDE = re.compile(r"[\s>+~]\s*:root\b")  # `.a :root`: the root element has no ancestor


@lru_cache(maxsize=1)
def vocabulary() -> frozenset[str]:
    """Every word of the templates and filters that write a notebook page, and Pygments' classes."""
    import material
    import mkdocs_jupyter
    import nbconvert
    from pygments.token import STANDARD_TYPES

    sources = [Path(nbconvert.__file__).parent / "filters", Path(mkdocs_jupyter.__file__).parent,
               Path(material.__file__).parent / "templates"]
    words = set(STANDARD_TYPES.values())
    for folder in sources:
        for path in folder.rglob("*"):
            if path.suffix in (".py", ".j2", ".html"):
                words.update(WORD.findall(path.read_text(encoding="utf-8", errors="ignore")))
    for folder in nbconvert_templates():
        for path in folder.rglob("*.j2"):
            words.update(WORD.findall(path.read_text(encoding="utf-8", errors="ignore")))
    return frozenset(words)


def nbconvert_templates() -> list[Path]:
    from jupyter_core.paths import jupyter_path

    return [Path(p) for p in jupyter_path("nbconvert", "templates") if Path(p).is_dir()]


def without_negations(selector: str) -> str:
    """'.a:not(.b) .c' -> '.a .c': a class inside :not() need not be present."""
    while match := NEGATION.search(selector):
        end, depth = match.end(), 1
        while depth and end < len(selector):
            depth += {"(": 1, ")": -1}.get(selector[end], 0)
            end += 1
        selector = selector[:match.start()] + selector[end:]
    return selector


@lru_cache(maxsize=16)
def selector_classes(css: str) -> frozenset[str]:
    """Every class the CSS mentions (a superset): only those of a page's classes matter."""
    return frozenset(SELECTOR_CLASS.findall(css))


def can_match(prelude, known: frozenset[str]) -> bool:
    return any(all(c in known for c in SELECTOR_CLASS.findall(without_negations(selector)))
               and not ROOT_INSIDE.search(selector)
               for selector in tinycss2.serialize(prelude).split(","))


def purged_rules(rules, known: frozenset[str]) -> list[str]:
    kept = []
    for rule in rules:
        if rule.type == "qualified-rule":
            if can_match(rule.prelude, known):
                kept.append(tinycss2.serialize([rule]))
        elif rule.type == "at-rule" and rule.lower_at_keyword in ("media", "supports") and rule.content:
            inner = purged_rules(tinycss2.parse_rule_list(rule.content, skip_comments=True,
                                                          skip_whitespace=True), known)
            if inner:
                kept.append(f"@{rule.at_keyword}{tinycss2.serialize(rule.prelude)}{{{''.join(inner)}}}")
        elif rule.type == "at-rule" and rule.lower_at_keyword != "charset":
            kept.append(tinycss2.serialize([rule]))
    return kept


@lru_cache(maxsize=16)  # the labs share their CSS: parse each block once per build
def parsed(css: str) -> list:
    return tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True)


@lru_cache(maxsize=16)  # and, nearly always, their classes
def purge(css: str, classes: frozenset[str]) -> str:
    kept = purged_rules(parsed(css), vocabulary() | classes)
    last = {rule: i for i, rule in enumerate(kept)}
    return "\n".join(rule for i, rule in enumerate(kept) if last[rule] == i)
