"""The fewest built pages whose colour contrast, checked, covers every page's (tests/test_browser.py).

axe-core's color-contrast rule is its costliest, and what it measures (each text's colour,
background and size) comes from the CSS, which every page shares, applied to the page's
elements. Two pages whose text sits in the same kinds of element, in the same kinds of
container, give the rule nothing new to find on the second. So each page is summed up as
the set of its *styled contexts*: for every element, its tag and classes (and any inline
style), after those of its parent and of every ancestor that has a class (an admonition,
a tab, a notebook cell, the active navigation link). The rule runs on a greedy set cover:
a page that adds contexts no chosen page has, until none is left. An edit that brings a
new context into any page brings a page that has it into the cover.
"""

import html.parser
from pathlib import Path

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Contexts(html.parser.HTMLParser):
    """The styled contexts of one HTML page."""

    def __init__(self):
        super().__init__()
        self.open: list[tuple[str, str]] = [("", "")]  # (tag, token) of each open element
        self.found: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        token = ".".join([tag, *sorted((attrs.get("class") or "").split())])
        token += f"[{attrs['style']}]" if attrs.get("style") else ""
        classed = [t for _, t in self.open[:-1] if "." in t or "[" in t]
        self.found.add(">".join([*classed, self.open[-1][1], token]))
        if tag not in VOID:
            self.open.append((tag, token))

    def handle_endtag(self, tag):
        """Closes the innermost open element of that tag, and any left open inside it."""
        for depth in range(len(self.open) - 1, 0, -1):
            if self.open[depth][0] == tag:
                del self.open[depth:]
                return


def contexts(html_file: Path) -> set[str]:
    parser = Contexts()
    parser.feed(html_file.read_text(encoding="utf-8"))
    return parser.found


def cover(pages: dict[str, Path]) -> set[str]:
    """The pages (by path, in their given order of preference) on which to check contrast."""
    found = {path: contexts(file) for path, file in pages.items()}
    left, chosen = set().union(*found.values()), set()
    while left:
        best = max(found, key=lambda path: len(found[path] & left))  # the first of equals
        chosen.add(best)
        left -= found[best]
    return chosen
