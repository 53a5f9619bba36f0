"""Sphinx directive that renders the ReFrame checks' reference from the checks themselves.

``{hvdcore-checks}`` loads every check file of ``checks/`` (``checks/*.py`` and the opt-in
``checks/faults/*.py``) with ReFrame's own loader, exactly as ``reframe -c`` does, and writes
one section per check class and per fixture class it uses: description, tags, maintainers,
valid systems and environments, ``parameter()`` values, ``variable()`` types, defaults and
``#:`` comments, and the performance variables with their units, default references and how
each is judged. Nothing is written by hand, so the page cannot drift from the code.

ReFrame needs a runtime to load checks (module discovery asks it for the system's
partitions): the directive starts one from ReFrame's built-in configuration (system
``generic``, no module system), so discovery finds no ``hvdcore`` modules and the
``hvdcore_module`` parameter shows ``env`` alone; the page says so.
"""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ROOT / "checks"

#: ReFrame attributes worth showing when a check sets them at class level.
JOB_ATTRS = ("num_tasks", "time_limit", "exclusive_access")


def _cell(text: object) -> str:
    """One Markdown table cell: pipes escaped, newlines folded."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(value: object) -> str:
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return f"`{_cell(text)}`"


def _fmt_num(x: float) -> str:
    return f"{x:.4g}"


@dataclass
class CheckDoc:
    """What the page says about one check or fixture class."""

    cls: type
    path: Path
    is_fixture: bool = False
    used_by: list[str] = field(default_factory=list)
    instances: list[Any] = field(default_factory=list)


def _ensure_runtime() -> None:
    import reframe.core.config as config
    import reframe.core.runtime as rt
    from reframe.core.exceptions import ReframeFatalError

    try:
        rt.runtime()
    except ReframeFatalError:
        site = config.load_config()  # ReFrame's built-in configuration: system "generic"
        site.select_subconfig("generic")
        rt.init_runtime(site)


def _check_files() -> list[Path]:
    return sorted(CHECKS.glob("*.py")) + sorted((CHECKS / "faults").glob("*.py"))


@functools.lru_cache(maxsize=1)
def load_checks() -> tuple[CheckDoc, ...]:
    """Every check class (with its loaded test instances) and the fixtures they use."""
    _ensure_runtime()
    from reframe.frontend.loader import RegressionCheckLoader

    files = _check_files()
    tests = RegressionCheckLoader([str(f) for f in files]).load_all()
    docs: dict[type, CheckDoc] = {}
    for t in tests:
        cls = type(t)
        doc = docs.get(cls)
        if doc is None:
            doc = docs[cls] = CheckDoc(cls, Path(inspect.getsourcefile(cls) or ""))
        doc.instances.append(t)
    out: list[CheckDoc] = []
    for cls, doc in docs.items():
        out.append(doc)
        for fname in cls.fixture_space.fixtures:
            fx = cls.fixture_space[fname]
            fcls = fx.cls
            if all(d.cls is not fcls for d in out):
                out.append(CheckDoc(fcls, Path(inspect.getsourcefile(fcls) or ""),
                                    is_fixture=True))
            for d in out:
                if d.cls is fcls:
                    d.used_by.append(f"`{cls.__name__}.{fname}` (scope `{fx.scope}`)")
    return tuple(out)


@functools.cache
def _attr_docs(path: Path) -> dict[tuple[str, str], list[str]]:
    from sphinx.pycode import ModuleAnalyzer

    return dict(ModuleAnalyzer.for_file(str(path), path.stem).find_attr_docs())


def _comment(cls: type, name: str) -> str:
    """The ``#:`` comment above ``name`` in the class that declares it (or a base)."""
    for klass in cls.__mro__:
        try:
            path = Path(inspect.getsourcefile(klass) or "")
        except TypeError:
            continue
        if not path.is_file() or CHECKS not in path.parents:
            continue
        lines = _attr_docs(path).get((klass.__name__, name))
        if lines:
            return " ".join(line.strip() for line in lines if line.strip())
    return ""


def _builtin_vars() -> set[str]:
    import reframe as rfm

    return set(rfm.RunOnlyRegressionTest.var_space.vars) | set(
        rfm.RegressionTest.var_space.vars)


def _type_name(var: Any) -> str:
    types = getattr(var.field, "_types", ()) or ()
    names = ["None" if t is type(None) else getattr(t, "__name__", str(t)) for t in types]
    return " or ".join(names) or "any"


def _references_module() -> Any:
    from hvdcore_checks import references

    return references


def _bounds(ref: tuple[Any, ...]) -> str:
    value, lower, upper = ref[0], ref[1], ref[2]
    parts = []
    if lower is not None:
        parts.append(f"≥ {_fmt_num(value * (1 + lower))} ({lower:+.0%})")
    if upper is not None:
        parts.append(f"≤ {_fmt_num(value * (1 + upper))} ({upper:+.0%})")
    return ", ".join(parts) or "none (reported only)"


def _variant_params(instance: Any) -> dict[str, str]:
    return dict(re.findall(r"%([\w.]+)=(\S+)", instance.display_name))


def _where(having: list[Any], every: list[Any]) -> str:
    """Which variants report a variable, when not all do (``framework=torch``)."""
    if len(having) == len(every):
        return ""
    conds = []
    keys = {k for i in every for k in _variant_params(i)}
    for key in sorted(keys):
        all_vals = {_variant_params(i).get(key) for i in every}
        vals = {_variant_params(i).get(key) for i in having}
        if vals < all_vals:
            conds.append(f"`{key.rsplit('.', 1)[-1]}={'|'.join(sorted(v or '' for v in vals))}`")
    return "only where " + ", ".join(conds) if conds else f"{len(having)} of {len(every)} variants"


def check_lines(doc: CheckDoc) -> list[str]:
    """The Markdown body of one check's section."""
    cls = doc.cls
    refs_mod = _references_module()
    rel = doc.path.relative_to(ROOT)
    out: list[str] = []
    summary = (inspect.getdoc(cls) or "").split("\n\n")[0]
    out += [" ".join(summary.split()), ""]
    facts: list[str] = [f"File: `{rel}`"]
    if doc.is_fixture:
        facts.append("A fixture (not selected by itself): runs for " + ", ".join(doc.used_by))
    insts = doc.instances
    if insts:
        facts.append(f"Test cases at load time: {len(insts)}")
        common = set.intersection(*(set(i.tags) for i in insts))
        varying = set.union(*(set(i.tags) for i in insts)) - common
        tags = ", ".join(f"`{t}`" for t in sorted(common)) or "none"
        if varying:
            tags += "; per variant also its " + ", ".join(
                sorted({k.rsplit(".", 1)[-1] for i in insts for k in _variant_params(i)
                        if _variant_params(i)[k] in varying})) + " value"
        facts.append(f"Tags: {tags}")
        maint = sorted({m for i in insts for m in i.maintainers})
        facts.append("Maintainers: " + (", ".join(f"`{m}`" for m in maint) or "none"))
        descrs = sorted({i.descr for i in insts})
        if len(descrs) == 1:
            facts.append(f"Description: {_cell(descrs[0])}")
        envs = sorted({e for i in insts for e in i.valid_prog_environs})
        facts.append("Environments (`valid_prog_environs`): "
                     + (", ".join(f"`{e}`" for e in envs) or "none"))
    systems = cls.var_space.vars["valid_systems"]
    if systems.is_defined():
        vs = ", ".join(f"`{s}`" for s in systems.default_value) or "none"
        narrowed = insts and any(list(i.valid_systems) != list(systems.default_value)
                                 for i in insts)
        facts.append(f"Systems (`valid_systems`): {vs}"
                     + (" at class level; narrowed per variant when the test is created"
                        if narrowed else ""))
    job = []
    base = __import__("reframe").RunOnlyRegressionTest.var_space.vars
    for attr in JOB_ATTRS:
        var = cls.var_space.vars[attr]
        if not var.is_defined():
            continue
        value = var.default_value
        if base[attr].is_defined() and base[attr].default_value == value:
            continue
        if attr == "time_limit" and isinstance(value, (int, float)):
            value = f"{value / 60:g} min"
        job.append(f"`{attr}` {value}")
    if job:
        facts.append("Job: " + ", ".join(job))
    out += [f"- {f}" for f in facts] + [""]

    # parameters, own and of fixtures (as they appear in the display name)
    prow: list[str] = []
    for name in cls.param_space.params:
        prow.append(_param_row(cls, name, name))
    for fname in cls.fixture_space.fixtures:
        fcls = cls.fixture_space[fname].cls
        for name in fcls.param_space.params:
            prow.append(_param_row(fcls, name, f"{fname}.{name}"))
    if prow:
        out += ["**Parameters** (each value is a variant; select with `-n 'name=value'`)", "",
                "| Parameter | Values | Meaning |", "|---|---|---|", *prow, ""]

    # variables of the check itself (not ReFrame's own attributes)
    builtin = _builtin_vars()
    vrow = []
    for name, var in cls.var_space.vars.items():
        if name in builtin or name.startswith("_"):
            continue
        default = _code(var.default_value) if var.is_defined() else "(required)"
        vrow.append(f"| `{name}` | {_type_name(var)} | {default} | "
                    f"{_cell(_comment(cls, name))} |")
    if vrow:
        out += [f"**Variables** (set with `-S name=value`, or `-S {cls.__name__}.name=value` "
                "for this class alone)", "",
                "| Variable | Type | Default | Meaning |", "|---|---|---|---|", *vrow, ""]

    # performance variables
    perf_names = list(getattr(cls, "_rfm_perf_fns", {}))
    if perf_names:
        units = {n: _perf_unit(fn) for n, fn in cls._rfm_perf_fns.items()}
        for i in insts:
            for n, expr in i.perf_variables.items():
                units[n] = units.get(n) or getattr(expr, "unit", "")
        reference = cls.var_space.vars["reference"]
        default_refs = (reference.default_value if reference.is_defined() else {}) or {}
        own: dict[str, tuple[Any, ...]] = {}
        for key, ref in default_refs.items():  # ReFrame's ScopedDict: "scope:variable" keys
            if isinstance(ref, dict):
                own.update({var: tuple(r) for var, r in ref.items()})
            else:
                own[str(key).rpartition(":")[2]] = tuple(ref)
        rrow = []
        for name in perf_names:
            having = [i for i in insts if name in i.perf_variables]
            if insts and not having:
                continue
            unit = units.get(name, "")
            ref = own.get(name)
            direction = "lower" if name in refs_mod.LOWER_IS_BETTER else "higher"
            if name in refs_mod.INFORMATION_ONLY:
                judged = "information: shown, never judged (a recorded value is shown beside it)"
            elif ref is not None and (ref[1] is not None or ref[2] is not None):
                judged = "on every system, by the check's own reference"
            else:
                judged = ("against the partition's recorded reference; reported, not judged, "
                          "where none is recorded")
            refs_txt = f"`{_fmt_num(ref[0])}`" if ref is not None else "—"
            bounds = _bounds(ref) if ref is not None else "—"
            where = _where(having, insts) if insts else ""
            rrow.append(f"| `{name}` | {_cell(unit) or '—'} | {direction} | {refs_txt} | "
                        f"{_cell(bounds)} | {_cell(judged)} | {_cell(where) or 'every variant'} |")
        out += ["**Performance variables**", "",
                "| Variable | Unit | Better | Default reference | Bounds | Judged | Reported by |",
                "|---|---|---|---:|---|---|---|", *rrow, ""]
    return out


def _perf_unit(fn: Any) -> str:
    """The unit given to ``@performance_function(unit)`` (kept in the wrapper's closure)."""
    try:
        unit = inspect.getclosurevars(fn).nonlocals.get("unit", "")
    except (TypeError, ValueError):
        return ""
    return unit if isinstance(unit, str) else ""


#: What a parameter means, where its declaration has no ``#:`` comment.
PARAMETER_MEANINGS = {
    "scale": "EESSI-style scale (`checks/hvdcore_checks/scales.py`): `N_ranks` on one node, "
             "`N_node(s)` full nodes; only the scales a partition offers become test cases "
             "(sub-node scales below its `ranks_per_node`, node scales up to its `max_nodes`); "
             "also a tag",
    "framework": "the framework trained or probed (`torch`, `tensorflow`); a variant runs only "
                 "in environments with that feature (for a discovered module: the framework "
                 "its name says); also a tag",
}


def _param_row(cls: type, name: str, shown: str) -> str:
    values = ", ".join(f"`{v}`" for v in cls.param_space[name])
    meaning = _comment(cls, name) or PARAMETER_MEANINGS.get(name, "")
    if name == "hvdcore_module":
        meaning = (meaning + " " if meaning else "") + (
            "`env`: the environment provides hvdcore; at run time, also one value per "
            "`hvdcore` module that discovery finds in environments with the feature "
            "`hvdcore-modules` (this page was built without a module system)")
    return f"| `{shown}` | {values} | {_cell(meaning) or '—'} |"


class ChecksDirective(SphinxDirective):
    """One section per check and fixture class of ``checks/``."""

    has_content = False
    option_spec: dict[str, Any] = {}

    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for doc in load_checks():
            self.env.note_dependency(str(doc.path))
            name = doc.cls.__name__
            section = nodes.section(ids=[nodes.make_id(f"check-{name}")], names=[name.lower()])
            title = name + (" (fixture)" if doc.is_fixture else "")
            section += nodes.title(title, "", nodes.literal(title, title))
            self.state.document.note_implicit_target(section)
            self.state.nested_parse(StringList(check_lines(doc), source=str(doc.path)),
                                    self.content_offset, section)
            out.append(section)
        return out


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directives."""
    app.add_directive("hvdcore-checks", ChecksDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
