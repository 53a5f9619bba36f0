"""Sphinx configuration of the hvdcore manual (build: ``scripts/docs.sh``, or
``sphinx-build -W -b html docs docs/_build/html``). Everything is built offline: no
intersphinx, no remote images, the theme's assets come from its wheel."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "_ext"))  # the project's own directives (knobs, options, checks)
sys.path.insert(0, str(ROOT))  # hvdcore itself, for autodoc, when it is not installed

import hvdcore  # noqa: E402

project = "hvdcore"
author = "the hvdcore team"
copyright = "2026, the hvdcore team"  # noqa: A001 - Sphinx's name for it
release = hvdcore.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "hvdcore_docs",
    "hvdcore_checks_docs",
]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "README.md"]
root_doc = "index"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Sphinx treats an option set to False as set: leave undoc-members/show-inheritance out.
autodoc_default_options = {"members": True}
autodoc_preserve_defaults = True  # process_set=global_process_set, not its repr
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"hvdcore {release}"
html_static_path = ["_static"]
html_last_updated_fmt = "%Y-%m-%d"
# Nothing from the network: furo's fonts are system fonts already; no analytics, no CDN.
html_theme_options = {"navigation_with_keys": True}
