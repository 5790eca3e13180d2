"""Sphinx configuration of the fixedid documentation site (``python -m sphinx -W --keep-going -n docs docs/_build``).

Sphinx rather than MkDocs: the docstrings are reST with Sphinx roles (``:func:``, ``:class:``, ``:mod:``), which
autodoc renders and nitpicky mode checks as they are, and the CLI reference comes from the argument parsers
themselves (sphinx-argparse); pages are MyST Markdown and the notebooks render with their stored outputs (myst-nb).

Before the build, :mod:`docs._generate` writes ``docs/generated/``: one API page per module (every public name,
documented where it is defined), one page per package listing its exports, the notebooks, and the study's results
page from the committed results. Strictness: ``-W -n`` turns every warning into an error - a broken link, a
cross-reference to an object that is not documented, and (:func:`docs._generate.undocumented`) a public name without
a docstring.
"""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))
sys.path.insert(0, str(DOCS))

import _generate  # noqa: E402

from fixedid.version import __version__  # noqa: E402

_generate.generate(DOCS / "generated")

project = "fixedid"
author = "the fixedid developers"
copyright = "2026, the fixedid developers"
release = version = __version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode", "myst_nb", "sphinxarg.ext"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "README.md", "generated/cli-reference.md"]
html_theme = "furo"
html_title = f"fixedid {__version__}"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # notebooks render with the outputs they are stored with (the tests execute them)
nb_merge_streams = True

autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

nitpicky = True
# MyST tries every domain for a link it cannot place; sphinx-argparse's domain cannot answer that question
suppress_warnings = ["myst.domains"]
# Cross-references are checked for this project's own objects; third-party ones (torch, pandas, numpy, typing,
# transformer_lens...) have no inventory offline and are left as text.
nitpick_ignore_regex = [(r"py:.*", r"^(?!(fixedid|analysis)(\.|$)).*"),
                        (r"py:.*", r"^(fixedid|analysis)(\.[\w]+)*\.[A-Z]\w*\[.*")]


def source_pages_without_navigation(app, pagename, templatename, context, doctree):
    """The highlighted source pages of ``sphinx.ext.viewcode`` (``_modules/...``, 130 of the site's ~310 pages) show
    no site navigation: furo builds each page's navigation tree from the whole toctree, which took about half of
    the build's time, and a source page is reached from its object's [source] link, not from the sidebar."""
    if pagename.startswith("_modules/"):
        context.pop("toctree", None)


def setup(app):
    # before furo's own handler (priority 500), which reads ``toctree`` from the context
    app.connect("html-page-context", source_pages_without_navigation, priority=400)
    app.connect("autodoc-process-docstring", _generate.undocumented)
    app.connect("autodoc-skip-member", _generate.skip_foreign)
    app.connect("missing-reference", _generate.resolve_reexport)
