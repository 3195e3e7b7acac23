"""One chart per language for the pages: ``<stem>.svg`` for English, ``<stem>.zh.svg`` for Chinese.

Imported by snippets, not run (its name starts with ``_``). Text stays text in the SVG
(``svg.fonttype = none``), so the reader's browser draws it, Chinese included, and no font is
embedded; matplotlib still measures the Chinese labels for the layout, with a CJK font where
one is installed. Without matplotlib nothing is drawn and one line says so; so too under
``SNIPPET_FIGURES=off``, which the CPU profiles set (tests/test_cpu_profiles.py): they vary
torch's kernels, and a chart is drawn the same way on every CPU.
"""

import os
import warnings
from pathlib import Path

OUT = Path(os.environ.get("SNIPPET_OUTPUT_DIR", "."))
CJK = ("Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei")


def draw_both(stem, labels, draw, figsize=(6.4, 3.6)):
    """Call ``draw(fig, labels[lang])`` for "en" and "zh" on a fresh figure and save both files.

    Returns False, after printing why, where matplotlib is missing or figures are off."""
    if os.environ.get("SNIPPET_FIGURES") == "off":
        print(f"{stem}.svg, {stem}.zh.svg: not drawn (SNIPPET_FIGURES=off)")
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import font_manager
    except ImportError:
        print(f"{stem}.svg, {stem}.zh.svg: not drawn, matplotlib is not installed here")
        return False
    installed = {font.name for font in font_manager.fontManager.ttflist}
    cjk = [name for name in CJK if name in installed][:1]
    if not cjk:  # still drawn: the browser has a Chinese font, only the layout is rougher
        warnings.filterwarnings("ignore", "Glyph .* missing from font")
        print(f"{stem}.zh.svg: matplotlib found no Chinese font (Debian: apt install fonts-noto-cjk)")
    for lang, suffix in (("en", ".svg"), ("zh", ".zh.svg")):
        fonts = cjk if lang == "zh" else []
        with plt.rc_context({"svg.fonttype": "none", "font.sans-serif": fonts + plt.rcParams["font.sans-serif"]}):
            fig = plt.figure(figsize=figsize)
            draw(fig, labels[lang])
            fig.savefig(OUT / f"{stem}{suffix}", bbox_inches="tight")
            plt.close(fig)
    print(f"saved {stem}.svg, {stem}.zh.svg")
    return True
