"""One print page per language: the source of that language's PDF (``make pdf``).

hooks/print_page.py collects the rendered pages from MkDocs' events; this module
writes the print page from them.

Each build writes ``pdf/print.html`` (English) and ``zh/pdf/print.html`` (Chinese):
a first page with the build's provenance (commit, device, torch, Python, date), a
table of contents, then every page of that language in nav order, as rendered, with
its outputs, figures and notebook cells. sitebuild/pdf.py prints it with Debian's
Chromium to ``pdf/pytorch-gpu-<lang>.pdf`` next to it. The line ``<!-- pdf-download -->``
on each home page becomes the link to that PDF only in a build told that the PDF will
exist, ``SITE_PDF=1`` (``make pdf`` and so the Pages workflow set it). Any other build,
``make serve``'s and ``make build``'s included, has no PDF: there the line becomes a note,
in the page's language, that ``make pdf`` makes one.

Inside the print page, links between pages become links inside the document, every
``id`` gets its page's prefix (``page-pytorch-autograd--grad``) so that ids stay
unique, images and stylesheets are re-pointed at the print page's folder, and links
to other files (notebooks, snippets) go to the published site (``site_url``).
Nothing here runs a browser, so the normal build stays as fast as it was.
"""

from __future__ import annotations

import html as html_lib
import os
import posixpath
import re
from pathlib import Path
from urllib.parse import urlsplit

from mkdocs.structure.nav import Section
from mkdocs.structure.pages import Page
from mkdocs.utils import get_relative_url

from sitebuild import snippets
from sitebuild.build_info import built, commit
from sitebuild.language import prefix

MARKER = "<!-- pdf-download -->"
PDF_ENV = "SITE_PDF"  # "1": this build's PDFs will be printed (make pdf)
BUILT = "%Y-%m-%d %H:%M UTC"  # when the cover says the site was built; BUILT_AT finds it again
BUILT_AT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")
LABELS = {
    "en": {"download": "Download this site as a PDF", "contents": "Contents",
           "no_pdf": "This build of the site comes without its PDF: <code>make pdf</code> "
                     "prints one per language.",
           "subtitle": "How PyTorch computes on GPUs. Every output in this document was produced "
                       "by the build described below.",
           "commit": "Commit", "dirty": " (with uncommitted changes)", "date": "Built on",
           "device": "Examples ran on", "torch": "torch", "python": "Python", "site": "Online edition"},
    "zh": {"download": "下载全站 PDF", "contents": "目录",
           "no_pdf": "本次构建没有附带全站 PDF；运行 <code>make pdf</code> 即可为每种语言各生成一份。",
           "subtitle": "PyTorch 如何在 GPU 上计算。本文档中的每段输出都由下面这次构建实际运行得到。",
           "commit": "提交", "dirty": "（含未提交的改动）", "date": "构建日期",
           "device": "示例运行于", "torch": "torch", "python": "Python", "site": "在线版"},
}

# Print layout. Chinese text is set in Noto Sans CJK SC by name, so that Chromium
# cannot fall back to a Japanese or Traditional face; sitebuild/pdf.py checks it is there.
PRINT_CSS = """
@page { size: A4; margin: 14mm 13mm 16mm; }
html { font-size: 100%; }
body { margin: 0; background: #fff; }
:root { --md-text-font: "Liberation Sans", "Noto Sans CJK SC"; --md-code-font: "DejaVu Sans Mono", "Noto Sans Mono CJK SC"; }
html:lang(zh) { --md-text-font: "Noto Sans CJK SC"; }
body .jupyter-wrapper { --jp-code-font-family: var(--md-code-font); --jp-content-font-family: var(--md-text-font);
                   --jp-ui-font-family: var(--md-text-font); }
.md-typeset { font-size: 0.72rem; }
.print-page { break-before: page; }
.md-typeset .headerlink, .md-typeset .md-button[href$=".pdf"], .md-typeset .pdf-note,
.jupyter-wrapper .zeroclipboard-container { display: none; }
.md-typeset pre > code, .jupyter-wrapper pre { white-space: pre-wrap; overflow-wrap: anywhere; }
.md-typeset img { max-width: 100%; height: auto; }
.md-typeset .snippet-provenance { margin-top: 0.3em; }
.md-typeset table:not([class]) { display: table; }
.print-cover { min-height: 240mm; display: flex; flex-direction: column; justify-content: center; }
.print-cover h1 { font-size: 2.2rem; margin-bottom: 0.4em; }
.print-cover dl { margin-top: 3em; }
.print-cover dt { font-weight: 700; margin-top: 0.6em; }
.print-cover dd { margin-left: 0; word-break: break-all; }
.print-toc { break-before: page; }
.print-toc ul { list-style: none; padding-left: 1.2em; }
.print-toc > ul { padding-left: 0; }
.print-toc a { text-decoration: none; color: inherit; }
"""

_nav: dict[str, object] = {}  # lang -> nav; filled by the functions at the end
_pages: dict[str, dict[str, tuple[str, str]]] = {}  # lang -> page url -> (title, html)
_head: dict[str, tuple[list[str], str]] = {}  # lang -> (stylesheet site paths, <body> tag)
_name: dict[str, str] = {}  # lang -> site_name (static-i18n sets it per language)


def pdf_uri(lang: str) -> str:
    return f"{prefix(lang)}pdf/pytorch-gpu-{lang}.pdf"


def print_uri(lang: str) -> str:
    return f"{prefix(lang)}pdf/print.html"


def key(url: str) -> str:
    """'pytorch/autograd/', 'pytorch/autograd/index.html' -> 'pytorch/autograd'; home -> ''."""
    url = posixpath.normpath(url or ".")
    url = "" if url == "." else url
    return url.removesuffix("/index.html").removesuffix("index.html").rstrip("/")


def page_id(url: str) -> str:
    return "page-" + (re.sub(r"[^\w-]+", "-", key(url)) or "home")


def cover(lang: str, config) -> str:
    labels = LABELS[lang]
    sha, dirty = commit()
    env = snippets.machine()  # the probe the snippets ran under, cached
    rows = [
        (labels["commit"], f"<code>{html_lib.escape(sha)}</code>" + (labels["dirty"] if dirty else "")),
        (labels["date"], built().strftime(BUILT)),
        (labels["device"], html_lib.escape(env["device"])),
        (labels["torch"], html_lib.escape(env["torch"])),
        (labels["python"], html_lib.escape(env["python"])),
        (labels["site"], html_lib.escape(config.site_url + prefix(lang))),
    ]
    items = "".join(f"<dt>{dt}</dt><dd>{dd}</dd>" for dt, dd in rows)
    return (f'<section class="print-cover md-typeset"><h1>{html_lib.escape(_name[lang])}</h1>'
            f'<p>{labels["subtitle"]}</p><dl class="print-provenance">{items}</dl></section>')


# --- page rewriting ----------------------------------------------------------------------

ATTRIBUTE = re.compile(r'(?<=\s)(href|src|id|for)="([^"]*)"')
DETAILS = re.compile(r"<details(?![^>]*\sopen)")


def rewrite(content: str, url: str, ids: dict[str, str], lang: str, config) -> str:
    own = page_id(url)
    here = print_uri(lang)

    def attribute(match: re.Match) -> str:
        name, value = match.groups()
        if name in ("id", "for"):
            return f'{name}="{own}--{value}"'
        parts = urlsplit(html_lib.unescape(value))
        if parts.scheme or parts.netloc or value.startswith(("/", "data:")):
            return match.group(0)
        if not parts.path:
            return f'{name}="#{own}--{parts.fragment}"' if parts.fragment else match.group(0)
        target = posixpath.normpath(posixpath.join(url, parts.path))
        if name == "href" and key(target) in ids:
            anchor = ids[key(target)] + (f"--{parts.fragment}" if parts.fragment else "")
            return f'href="#{anchor}"'
        if name == "src" or target.endswith(".css"):
            return f'{name}="{html_lib.escape(get_relative_url(target, here))}"'
        return f'{name}="{html_lib.escape(config.site_url + target)}"'

    return DETAILS.sub("<details open", ATTRIBUTE.sub(attribute, content))


def toc(items, ids: dict[str, str]) -> str:
    lines = []
    for item in items:
        if isinstance(item, Section):
            lines.append(f"<li>{html_lib.escape(item.title)}{toc(item.children, ids)}</li>")
        elif isinstance(item, Page) and key(item.url) in ids:
            lines.append(f'<li><a href="#{ids[key(item.url)]}">{html_lib.escape(item.title or "")}</a></li>')
    return f"<ul>{''.join(lines)}</ul>"


def print_page(lang: str, config) -> str:
    nav = _nav[lang]
    pages = _pages[lang]
    order = [page.url for page in nav.pages if page.url in pages]
    ids = {key(url): page_id(url) for url in order}
    here = print_uri(lang)
    styles, body = _head[lang]
    links = "".join(f'<link rel="stylesheet" href="{get_relative_url(s, here)}">' for s in styles)
    sections = "".join(
        f'<section class="print-page" id="{ids[key(url)]}"><article class="md-content__inner md-typeset">'
        f"{rewrite(pages[url][1], url, ids, lang, config)}</article></section>"
        for url in order)
    return (f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8">'
            f'<meta name="robots" content="noindex"><title>{html_lib.escape(_name[lang])}</title>'
            f"{links}<style>{PRINT_CSS}</style></head>{body}"
            f"{cover(lang, config)}"
            f'<nav class="print-toc md-typeset"><h2>{LABELS[lang]["contents"]}</h2>{toc(nav.items, ids)}</nav>'
            f"{sections}</body></html>\n")


# --- what the build hands over, language by language --------------------------------

def start(lang: str, nav, site_name: str):
    """A language's build begins: its navigation and its site name."""
    _nav[lang] = nav
    _name[lang] = site_name
    _pages[lang] = {}
    _head.pop(lang, None)


def with_download(markdown: str, lang: str, page_url: str) -> str:
    """The home page's line: the link to its PDF, or, where none is made, how to make one."""
    if MARKER not in markdown:
        return markdown
    if os.environ.get(PDF_ENV) == "1":
        line = (f'<a class="md-button" href="{get_relative_url(pdf_uri(lang), page_url)}" download>'
                f'{LABELS[lang]["download"]}</a>')
    else:
        line = f'<p class="pdf-note">{LABELS[lang]["no_pdf"]}</p>'
    return markdown.replace(MARKER, line)


def add_page(lang: str, url: str, title: str, content: str):
    _pages[lang][url] = (title, content)


STYLESHEET = re.compile(r'<link rel="stylesheet" href="([^"]+)"')
BODY = re.compile(r"<body[^>]*>")


def add_head(lang: str, page_url: str, output: str):
    """The stylesheets and <body> tag of the language's first rendered page."""
    if lang in _head:
        return
    head, _, rest = output.partition("</head>")
    styles = [posixpath.normpath(posixpath.join(page_url, href.split("?")[0]))
              for href in STYLESHEET.findall(head)]
    body = BODY.search(rest)
    _head[lang] = (styles, body.group(0) if body else "<body>")


def write_all(config):
    """The print page of every language rendered so far."""
    for lang in list(_pages):
        if lang in _head and _pages[lang]:
            target = Path(config.site_dir) / print_uri(lang)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(print_page(lang, config), encoding="utf-8")
