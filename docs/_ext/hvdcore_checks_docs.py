"""Sphinx directives that render the ReFrame checks' parameters and variables (being written)."""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directives."""
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
