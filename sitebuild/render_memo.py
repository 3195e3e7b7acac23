"""What one process remembers from build to build: highlighted code and compiled templates.

`mkdocs serve` rebuilds every page of both languages after each saved edit. Two costs
of a rebuild depend on nothing that a prose edit changes, and were paid anew each time
(profile of a one-sentence rebuild on a 2-core AMD EPYC, in the #23 closing note):

* Pygments, called by pymdownx.highlight for each of the ~500 code blocks: a third of
  the Markdown time. ``remember_highlighting`` keeps each block's HTML by its code, its
  lexer and its formatter's options, which is all the output depends on.
* Jinja compiling Material's templates, because each build makes a new environment.
  ``remember_templates`` gives every environment one in-memory bytecode cache, keyed
  by Jinja itself by template name and source checksum.

A build that runs once (`mkdocs build`) gets the same output and no saving.
"""

from __future__ import annotations

from collections import OrderedDict

import jinja2
from pymdownx import highlight

HIGHLIGHTED = 4096  # blocks kept; the site has about 500 per language


def remember_highlighting():
    """pymdownx.highlight's call of ``pygments.highlight``, memoised (once per process)."""
    if getattr(highlight.highlight, "remembered", False):
        return
    pygments_highlight = highlight.highlight
    kept: OrderedDict[tuple, str] = OrderedDict()

    def remembered(code, lexer, formatter, outfile=None):
        if outfile is not None:
            return pygments_highlight(code, lexer, formatter, outfile)
        key = (code, type(lexer), repr(sorted(lexer.options.items())),
               type(formatter), repr(sorted(formatter.options.items())))
        if key not in kept:
            kept[key] = pygments_highlight(code, lexer, formatter)
            if len(kept) > HIGHLIGHTED:
                kept.popitem(last=False)
        return kept[key]

    remembered.remembered = True
    highlight.highlight = remembered


class InMemoryBytecode(jinja2.BytecodeCache):
    def __init__(self):
        self.compiled: dict[str, bytes] = {}

    def load_bytecode(self, bucket):
        if bucket.key in self.compiled:
            bucket.bytecode_from_string(self.compiled[bucket.key])

    def dump_bytecode(self, bucket):
        self.compiled[bucket.key] = bucket.bytecode_to_string()


_bytecode = InMemoryBytecode()


def remember_templates(env: jinja2.Environment) -> jinja2.Environment:
    env.bytecode_cache = _bytecode
    return env
