"""The site's machinery: run every snippet once and put its real output on both language pages.

Where a page's output comes from: the line ``<!-- output: snippets/x/y.py -->`` is
rendered by ``sitebuild.output_blocks``, a Python-Markdown extension, from the result that
``sitebuild.results`` keeps on disk. The modules:

=========================  ==================================================================
``snippets``               find a snippet, run it as a reader would (standard library only)
``results``                the build's on-disk cache of snippet results (standard library only)
``attribution``            which section was running as each line of output was printed
``forkserver``             snippet runs forked from an interpreter that has imported torch
``forked_spawn``           in those runs, the ranks that spawn starts, forked from it as well
``forked_kernel``          the labs' Jupyter kernels, forked from it as well
``import_env``             the variables its imports read; a run that sets one is done fresh
``records``                hardware records, ``python3 -m sitebuild.records`` (standard library only)
``output_blocks``          the output blocks, record tabs and "Verified on" matrix (Markdown extension)
``excerpts``               where each excerpt's own output goes, and which lines are its
``background``             ``mkdocs serve`` at once: results run behind "running…" placeholders
``render_memo``            pages' HTML (serve), highlighting and compiled templates kept between rebuilds
``language``               which language a page is rendered in
``labs``                   lab notebooks: run once, both languages, .ipynb downloads
``notebook_css``           a lab page's JupyterLab CSS as one slimmed, shared file
``print_pages``            one print page per language, the source of its PDF
``pdf``                    ``python -m sitebuild.pdf``: print those pages with Chromium
``search_index``           one search index per language; glossary terms whole in Chinese
``page_actions``           view, edit and report links from ``REPO_URL``
``page_notebooks``         ``python -m sitebuild.page_notebooks``: a Colab notebook per page
``build_info``             the commit a build comes from
``glossary``               the Chinese glossary's terms
``translations``           ``python -m sitebuild.translations``: translations that cannot drift
=========================  ==================================================================

MkDocs reaches the package through the thin adapters in ``hooks/``; another engine
that runs Python-Markdown (ProperDocs, Zensical) gets the output blocks from
``markdown_extensions`` alone. Nothing here is imported at package import, so the
standard-library modules stay usable on a machine with only Python and torch.
"""
