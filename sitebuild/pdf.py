"""`make pdf`: print each language's print page to a PDF, and refuse one with missing glyphs.

    python -m sitebuild.pdf [SITE_DIR]  # default: site (run `make build` first)

sitebuild/print_pages.py writes ``pdf/print.html`` and ``zh/pdf/print.html`` into every
build: the provenance page, the contents, then every page in nav order. This prints
them to ``pdf/pytorch-gpu-en.pdf`` and ``zh/pdf/pytorch-gpu-zh.pdf``.

Why Debian's Chromium, driven by Playwright (both already used by the browser tests):
the PDF shows each page as the site renders it, with Material's and the notebooks'
CSS, and no second layout engine to keep in step; Chromium embeds subset fonts; and
nothing is downloaded at install time. WeasyPrint (mkdocs-to-pdf) would bring its
own CSS engine, which lays out Material's CSS (grid, custom properties, notebook
CSS) differently; mkdocs-print-site-plugin prints only the default language under
static-i18n (its issue #70). Playwright adds what the command line lacks: page
numbers, a PDF outline (bookmarks) and a tagged PDF.

Missing fonts fail the build, before and after printing, because Chromium draws a
box for a character no font has and still writes the character into the text layer
(pdftotext reads it back; only the picture is wrong). Before Chromium starts:
fontconfig must know Noto Sans CJK SC, every character of the print page must be in
some installed font, and every Han character in Noto Sans CJK SC. After printing:
``pdffonts`` must list every font as embedded, and the Chinese PDF must embed Noto
Sans CJK SC. Chromium (Skia) embeds CFF-flavoured OpenType fonts such as Noto CJK as
Type 3 fonts, which pdffonts lists as ``[none]``, so their names are read from the
fonts' /FontDescriptor. A failed PDF is deleted, never left in place.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
LANGS = ("en", "zh")
CJK_FONT = "Noto Sans CJK SC"  # named by sitebuild/print_pages.py's print CSS
CJK_PDF_NAME = "NotoSansCJKsc-Regular"  # its PostScript name, as embedded
FOOTER = ('<div style="width:100%;font-size:8px;color:#555;text-align:center;">'
          '<span class="pageNumber"></span> / <span class="totalPages"></span></div>')


class PdfError(Exception):
    pass


def prefix(lang: str) -> str:
    return "" if lang == "en" else f"{lang}/"


def source(site: Path, lang: str) -> Path:
    return site / f"{prefix(lang)}pdf/print.html"


def target(site: Path, lang: str) -> Path:
    return site / f"{prefix(lang)}pdf/pytorch-gpu-{lang}.pdf"


def tool(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout
    except FileNotFoundError:
        raise PdfError(f"{cmd[0]} is missing: apt-get install fontconfig poppler-utils") from None
    except subprocess.CalledProcessError as error:
        raise PdfError(f"{' '.join(cmd)} failed: {error.stderr.strip()}") from None


def check_fonts() -> None:
    """Before printing: fontconfig knows the CJK face the print CSS asks for."""
    families = tool("fc-list", ":lang=zh", "family")
    if CJK_FONT not in families:
        raise PdfError(f"font '{CJK_FONT}' not found by fontconfig (fc-list :lang=zh lists: "
                       f"{', '.join(sorted(set(families.split()))) or 'nothing'}); the Chinese PDF "
                       f"would show boxes. Install it: apt-get install fonts-noto-cjk")


def ranges(charset: str) -> list[tuple[int, int]]:
    """fontconfig's '20-7e a0-17f 192' -> [(0x20, 0x7e), (0xa0, 0x17f), (0x192, 0x192)]."""
    spans = []
    for part in charset.split():
        low, _, high = part.partition("-")
        spans.append((int(low, 16), int(high or low, 16)))
    return spans


def covered(char: str, spans: list[tuple[int, int]]) -> bool:
    return any(low <= ord(char) <= high for low, high in spans)


HAN = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")


def visible_text(page: str) -> str:
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def check_glyphs(text: str) -> None:
    """Every character has a font: some installed one, and Noto Sans CJK SC for Han."""
    table = tool("fc-list", "--format", "%{family[0]}|%{charset}\n")
    fonts = [line.partition("|") for line in table.splitlines()]
    anywhere = sorted(span for _, _, charset in fonts for span in ranges(charset))
    cjk = [span for family, _, charset in fonts if family == CJK_FONT for span in ranges(charset)]
    chars = {c for c in text if c.isprintable() and not c.isspace()}
    missing = sorted(c for c in chars if not covered(c, anywhere))
    if missing:
        raise PdfError(f"no installed font has {', '.join(f'{c!r} U+{ord(c):04X}' for c in missing[:20])}: "
                       f"they would print as boxes")
    outside = sorted(c for c in chars if HAN.match(c) and not covered(c, cjk))
    if outside:
        raise PdfError(f"{CJK_FONT} lacks {''.join(outside[:40])}: they would print in another face or as boxes")


def embedded_names(pdf: Path) -> set[str]:
    """Every font's name, Type 3 included: /BaseFont, and /FontName of the descriptors."""
    data = pdf.read_bytes()
    return {name.decode("latin-1").split("+")[-1]
            for name in re.findall(rb"/(?:BaseFont|FontName)\s*/([^\s/<>\[\]()]+)", data)}


def fonts(pdf: Path) -> list[dict]:
    """pdffonts' table: name, type, embedded, subset, unicode map."""
    lines = tool("pdffonts", str(pdf)).splitlines()
    columns = [match.span() for match in re.finditer(r"-+", lines[1])]
    rows = [[line[a:b].strip() for a, b in columns[:-1]] + [line[columns[-1][0]:].strip()] for line in lines[2:]]
    return [{"name": r[0], "type": r[1], "emb": r[3], "sub": r[4], "uni": r[5]} for r in rows]


def check_pdf(pdf: Path, lang: str) -> list[dict]:
    """After printing: every font embedded; the Chinese PDF uses a Noto CJK font."""
    found = fonts(pdf)
    if not found:
        raise PdfError(f"{pdf}: pdffonts lists no font")
    loose = [f["name"] for f in found if f["emb"] != "yes"]
    if loose:
        raise PdfError(f"{pdf}: fonts not embedded: {loose}")
    names = embedded_names(pdf)
    if lang == "zh" and CJK_PDF_NAME not in names:
        raise PdfError(f"{pdf}: {CJK_FONT} is not embedded, so its Chinese text is in another face "
                       f"or boxes: {sorted(names)}")
    return found


def pages(pdf: Path) -> int:
    return int(re.search(r"^Pages:\s+(\d+)", tool("pdfinfo", str(pdf)), re.M).group(1))


def render(site: Path, langs=LANGS) -> dict[str, Path]:
    """Print the print page of each language; return the PDFs' paths."""
    from playwright.sync_api import sync_playwright

    check_fonts()
    missing = [str(source(site, lang)) for lang in langs if not source(site, lang).is_file()]
    if missing:
        raise PdfError(f"no print page {missing}: build the site first (make build)")
    for lang in langs:
        check_glyphs(visible_text(source(site, lang).read_text(encoding="utf-8")))
    if not Path(CHROMIUM).is_file():
        raise PdfError(f"{CHROMIUM} missing: apt-get install chromium fonts-noto-cjk")
    written = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            for lang in langs:
                tab = browser.new_page()
                tab.goto(source(site, lang).resolve().as_uri(), wait_until="load")
                tab.emulate_media(media="print")
                out = target(site, lang)
                partial = out.with_suffix(".partial.pdf")
                tab.pdf(path=str(partial), format="A4", print_background=True, outline=True, tagged=True,
                        display_header_footer=True, header_template="<span></span>", footer_template=FOOTER,
                        margin={"top": "14mm", "bottom": "16mm", "left": "13mm", "right": "13mm"})
                tab.close()
                try:
                    check_pdf(partial, lang)
                except PdfError:
                    partial.unlink()
                    raise
                partial.replace(out)
                written[lang] = out
        finally:
            browser.close()
    return written


def main(argv: list[str]) -> int:
    site = Path(argv[1]) if len(argv) > 1 else ROOT / "site"
    start = time.perf_counter()
    try:
        written = render(site)
        for lang, pdf in written.items():
            check_pdf(pdf, lang)
            print(f"{pdf.relative_to(site)}: {pages(pdf)} pages, {pdf.stat().st_size // 1024} KB, "
                  f"fonts (all embedded): {', '.join(sorted(embedded_names(pdf)))}")
    except PdfError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"PDFs written in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
