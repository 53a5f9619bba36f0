"""Sphinx directives that render hvdcore's own tables from the code, so the manual cannot drift.

- ``{hvdcore-knobs}``: every knob of :data:`hvdcore.config.KNOBS`, as a definition list
  (variable; meaning; type, default, Horovod alias, ``hvdcorerun`` flag).
- ``{hvdcore-runner-options}``: every option of ``hvdcorerun``'s argparse parser, group by group.
- the source pages' ``[docs]`` links fixed where viewcode gets their module wrong;
- autodoc hooks that make a build with mocked frameworks render the API as the full build does.

Both generate Markdown and hand it to the page's own parser (MyST), so the result is styled like
any hand-written list or table.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _cell(text: str) -> str:
    """One Markdown table cell: pipes escaped, newlines folded."""
    return " ".join(str(text).split()).replace("|", "\\|")


def knob_rows(include_internal: bool = False) -> list[str]:
    """Markdown definition list of the knobs (internal ones only when asked): the variable as
    the term, then its meaning, then one line of facts (alias, flag, type, default). A list,
    not a six-column table, so that it reads in the content column of any screen."""
    from hvdcore.config import KNOBS

    rows: list[str] = []
    for k in KNOBS:
        if k.internal and not include_internal:
            continue
        default = repr(k.default) if k.default != "" else "(unset)"
        kind = k.kind + (f": {'/'.join(k.choices)}" if k.choices else "")
        facts = [f"Type: {_cell(kind)}", f"default: `{_cell(default)}`"]
        if k.alias:
            facts.append(f"Horovod alias: `{k.alias}`")
        if k.cli_flag:
            facts.append(f"`hvdcorerun` flag: `{k.cli_flag}`")
        rows += [f"`{k.env}`", f": {_cell(k.help)}", "", "  " + "; ".join(facts) + ".", ""]
    return rows


def runner_rows() -> list[str]:
    """Markdown tables of ``hvdcorerun``'s options, one per argparse group."""
    from hvdcore.runner.cli import build_parser

    parser = build_parser()
    out: list[str] = []
    for group in parser._action_groups:  # argparse keeps its groups only here
        actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        out += [f"**{group.title}**", "", "| Option | Meaning | Default |", "|---|---|---|"]
        for a in actions:
            names = ", ".join(f"`{s}`" for s in a.option_strings) or f"`{a.dest}` (positional)"
            if a.metavar and a.option_strings:
                names += f" *{_cell(a.metavar)}*"
            choices = f" (one of {', '.join(map(str, a.choices))})" if a.choices else ""
            default = a.default
            shown = "—" if default in (None, "", False, argparse.SUPPRESS) else f"`{default}`"
            out.append(f"| {names} | {_cell((a.help or '') + choices)} | {shown} |")
        out.append("")
    return out


class _MarkdownTable(SphinxDirective):
    has_content = False
    option_spec: dict[str, Any] = {}

    def lines(self) -> list[str]:  # pragma: no cover - overridden
        raise TypeError("subclass must give lines")

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(self.lines(), source=self.get_source_info()[0]),
                                self.content_offset, container)
        return container.children


class KnobsDirective(_MarkdownTable):
    """The knob list (``:internal:`` adds the launcher's and tests' own knobs)."""

    option_spec = {"internal": lambda arg: True}

    def lines(self) -> list[str]:
        return knob_rows("internal" in self.options)


class RunnerOptionsDirective(_MarkdownTable):
    """``hvdcorerun``'s options."""

    def lines(self) -> list[str]:
        return runner_rows()


def fix_source_backlinks(app: Sphinx, pagename: str, templatename: str,
                         context: dict[str, Any], doctree: Any) -> None:
    """Point a source page's ``[docs]`` links at the objects as documented.

    ``sphinx.ext.viewcode`` prefixes every backlink of a module's source page with the first
    module name an object of that module was documented under: ``hvdcore`` for
    ``hvdcore/capabilities.py`` (its ``mpi_built`` is documented as ``hvdcore.mpi_built``), which
    makes ``api.html#hvdcore.Capability`` of ``hvdcore.capabilities.Capability``, an anchor that
    does not exist. A backlink whose target is not a documented object, where the module's own
    name gives one, gets that name."""
    if not pagename.startswith("_modules/") or "body" not in context:
        return
    modname = pagename.removeprefix("_modules/").replace("/", ".")
    entry = getattr(app.env, "_viewcode_modules", {}).get(modname)
    if not entry or entry[3] == modname:
        return
    refname, objects = entry[3], app.env.get_domain("py").objects

    def fix(m: re.Match[str]) -> str:
        name = m.group(2)
        if f"{refname}.{name}" in objects or f"{modname}.{name}" not in objects:
            return m.group(0)
        return f'href="{m.group(1)}#{modname}.{name}"'

    context["body"] = re.sub(rf'href="([^"#]*)#{re.escape(refname)}\.([\w.]+)"', fix,
                             context["body"])


def own_init_signature(app: Sphinx, what: str, name: str, obj: Any, options: Any,
                       signature: str | None, return_annotation: str | None) -> Any:
    """A class whose base autodoc stands in for (``autodoc_mock_imports``: TensorFlow on a docs
    host without it) shows ``(*args, **kwargs)``, the stand-in's own ``__new__``; give it the
    signature of the ``__init__`` it would take with the real base (its own, or a mixin's before
    the stand-in in its MRO), defaults as written."""
    if what != "class" or signature != "(*args, **kwargs)":
        return None
    # the first class that defines __init__; the stand-in's own (Sphinx's) has nothing to say
    owner = next((c for c in obj.__mro__ if "__init__" in vars(c)), object)
    init = vars(owner)["__init__"]
    if owner is object or getattr(init, "__module__", "").startswith("sphinx."):
        return None
    from sphinx.util.inspect import signature as sphinx_signature
    from sphinx.util.inspect import stringify_signature

    if app.config.autodoc_preserve_defaults:
        from sphinx.ext.autodoc.preserve_defaults import update_defvalue

        update_defvalue(app, init, False)
    sig = sphinx_signature(init, bound_method=True)
    return stringify_signature(sig, show_annotation=False), return_annotation


def skip_borrowed_docstrings(app: Sphinx, what: str, name: str, obj: Any, skip: bool,
                             options: Any) -> bool | None:
    """Leave out a method that has no docstring of its own: autodoc would show its framework
    base's text (Keras's "Subclasses should override ..."), which is not hvdcore's, and which a
    build without that framework cannot show at all."""
    if what == "class" and callable(obj) and getattr(obj, "__doc__", "") is None:
        return True
    return None


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directives, the source pages' backlink fix and the autodoc hooks."""
    app.connect("autodoc-process-signature", own_init_signature)
    app.connect("autodoc-skip-member", skip_borrowed_docstrings)
    app.add_directive("hvdcore-knobs", KnobsDirective)
    app.add_directive("hvdcore-runner-options", RunnerOptionsDirective)
    app.connect("html-page-context", fix_source_backlinks)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
