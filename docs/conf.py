"""Sphinx configuration: Markdown pages (MyST) and an API reference generated from the
docstrings (autodoc + napoleon, numpy style).

Build as .ci/run does: ``python -m sphinx -W --keep-going -b html docs docs/_build/html``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the seqattrib of this checkout

import seqattrib  # noqa: E402

project = "seqattrib"
author = "the seqattrib developers"
copyright = "the seqattrib developers"
release = seqattrib.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/_*.md"]  # _name.md: a section included in a page

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

autodoc_typehints = "none"  # the numpy docstrings give every type, with shapes
autodoc_member_order = "bysource"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

html_theme = "furo"
html_title = f"seqattrib {release}"
pygments_style = "sphinx"
