"""Sphinx configuration of the hvdcore manual (build: ``scripts/docs.sh``, or
``sphinx-build -W -b html docs docs/_build/html``). Everything is built offline: no
intersphinx, no remote images, the theme's assets come from its wheel."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import hvdcore  # installed (scripts/setup.sh installs it editable), as autodoc needs it

HERE = Path(__file__).resolve().parent
#: The project's own directives (knobs, hvdcorerun's options, the checks), loaded from their
#: files by :func:`setup` below rather than through an edited ``sys.path``.
LOCAL_EXTENSIONS = ("hvdcore_docs", "hvdcore_checks_docs")

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
# A docs host installs `.[docs]` alone: the frameworks the bindings import are stood in for where
# they are missing (the binding modules only subclass and decorate with them at import time).
# tests/test_docs.py's docs-only venv builds the manual so and compares the API page with the
# full build's.
autodoc_mock_imports = [m for m in ("torch", "tensorflow", "keras", "tf_keras", "ray",
                                              "pyspark")
                        if importlib.util.find_spec(m) is None]
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"hvdcore {release}"
html_static_path = ["_static"]
html_css_files = ["hvdcore.css"]  # wide tables: a scrolling frame with the first column fixed
html_last_updated_fmt = "%Y-%m-%d"
# Nothing from the network: furo's fonts are system fonts already; no analytics, no CDN.
html_theme_options = {"navigation_with_keys": True}


def _load_local(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, HERE / "_ext" / f"{name}.py")
    assert spec and spec.loader, name
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling of the environment look it up here
    spec.loader.exec_module(module)
    return module


def setup(app):  # type: ignore[no-untyped-def]
    """conf.py's own extension hook: register the local directives."""
    for name in LOCAL_EXTENSIONS:
        _load_local(name).setup(app)
