"""Imports between hvdcore's modules only go downwards, without circles.

The layers and these rules are described in docs/design/architecture.md ("Layers").

Edges are read from the source with ``ast``: every ``import`` / ``from ... import`` of an
hvdcore module, at module level or inside a function (a lazy import is still a dependency).
``from hvdcore.x import name`` is an edge to ``hvdcore.x.name`` when that is a module, else to
``hvdcore.x``; importing a submodule's parent packages first is Python's doing and not counted.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hvdcore"

# What the engine and the backends must never import: the API layer above them (the package
# root ``hvdcore`` itself re-exports it), the bindings and the launcher.
API_AND_ABOVE = ("hvdcore.ops", "hvdcore.collectives", "hvdcore.objects",
                 "hvdcore.arguments", "hvdcore.basics", "hvdcore.torch", "hvdcore.tensorflow",
                 "hvdcore.keras", "hvdcore.runner")
# What ``import hvdcore.runner.cli`` (hvdcorerun --help, --check-build) must not load.
NOT_IN_LAUNCHER = ("numpy", "hvdcore.engine", "hvdcore.backends", "hvdcore.ops",
                   "hvdcore.collectives", "hvdcore.objects", "hvdcore.basics", "hvdcore.torch",
                   "hvdcore.tensorflow", "hvdcore.keras", "torch", "tensorflow", "mpi4py.MPI")


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(base: str, name: str) -> str:
    """``from base import name``: the submodule when there is one, else ``base`` itself."""
    return f"{base}.{name}" if f"{base}.{name}" in MODULES else base


def imports(module: str) -> set[str]:
    """The hvdcore modules ``module`` imports anywhere in its source."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "hvdcore")
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x / from ..y import z
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] != "hvdcore":
                continue
            found.update(_resolve(base, a.name) for a in node.names)
    found.discard(module)
    return {m for m in found if m in MODULES}


GRAPH = {m: imports(m) for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read() -> None:
    """Guard against a silently empty graph (the checks below would then pass vacuously)."""
    assert "hvdcore.basics" in GRAPH["hvdcore.ops"]
    assert "hvdcore.engine.requests" in GRAPH["hvdcore.basics"]
    assert "hvdcore.engine.handle" in GRAPH["hvdcore.engine.requests"]


def _cycle_report(cycles: list[list[str]]) -> str:
    return "\n".join(
        " <-> ".join(c) + "\n    " + "\n    ".join(
            f"{m} imports {sorted(GRAPH[m] & set(c))}" for m in c) for c in cycles)


def test_no_import_cycles() -> None:
    cycles = [c for c in _cycles(GRAPH) if not all(_within(m, ("hvdcore.runner",)) for m in c)]
    assert not cycles, f"import cycles among hvdcore modules:\n{_cycle_report(cycles)}"


def test_no_import_cycles_in_the_runner() -> None:
    cycles = [c for c in _cycles(GRAPH) if all(_within(m, ("hvdcore.runner",)) for m in c)]
    assert not cycles, f"import cycles in the runner:\n{_cycle_report(cycles)}"


@pytest.mark.parametrize("layer", ["hvdcore.engine", "hvdcore.backends"])
def test_engine_and_backends_import_nothing_above_them(layer: str) -> None:
    upward = {
        f"{m} imports {t}"
        for m, targets in GRAPH.items() if _within(m, (layer,))
        for t in targets
        if (t == "hvdcore" or _within(t, API_AND_ABOVE)) and not _within(t, (layer,))
    }
    assert not upward, "upward imports:\n" + "\n".join(sorted(upward))


def test_the_backends_never_import_the_engine() -> None:
    """The engine sits above its backends (it drives them through ``backends.base``): no
    backend module imports an engine module, not even lazily."""
    assert GRAPH["hvdcore.engine.cache"] & {m for m in MODULES if _within(m, ("hvdcore.backends",))}
    upward = sorted(f"{m} imports {t}" for m, targets in GRAPH.items()
                    if _within(m, ("hvdcore.backends",))
                    for t in targets if _within(t, ("hvdcore.engine",)))
    assert not upward, "backends import the engine:\n" + "\n".join(upward)


def test_the_compiled_module_sits_beside_its_backend() -> None:
    """C modules are not in the import graph: the only one is the steady path's, built from
    ``hvdcore/backends/`` (so it belongs to the backends' layer), and none is in the engine."""
    sources = sorted(str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.c"))
    assert sources == ["hvdcore/backends/_hotpath.c"], sources
    setup_py = (ROOT / "setup.py").read_text()
    assert '"hvdcore.backends._hotpath", ["hvdcore/backends/_hotpath.c"]' in setup_py
    assert "hvdcore.engine._hotpath" not in setup_py
    assert "hvdcore.engine" not in (ROOT / "hvdcore/backends/_hotpath.c").read_text()


BINDINGS_AND_LAUNCHER = ("hvdcore.torch", "hvdcore.tensorflow", "hvdcore.keras", "hvdcore.runner")


def test_the_core_imports_no_binding_and_no_launcher() -> None:
    core = [m for m in GRAPH if m.count(".") == 1 and not _within(m, BINDINGS_AND_LAUNCHER)
            and m != "hvdcore.tools"]
    assert "hvdcore.ops" in core and "hvdcore.basics" in core
    upward = sorted(f"{m} imports {t}" for m in core for t in GRAPH[m]
                    if _within(t, BINDINGS_AND_LAUNCHER))
    assert not upward, "the core imports a binding or the launcher:\n" + "\n".join(upward)


def test_the_runner_imports_only_config_errors_and_capabilities() -> None:
    # netaddr: the interfaces of this machine, standard library only (hvdcorerun --gloo's
    # --network-interfaces address)
    allowed = ("hvdcore.runner", "hvdcore.config", "hvdcore.errors", "hvdcore.capabilities",
               "hvdcore.netaddr", "hvdcore.elastic_wire")
    extra = sorted(f"{m} imports {t}" for m in GRAPH if _within(m, ("hvdcore.runner",))
                   for t in GRAPH[m] if not _within(t, allowed))
    assert not extra, "the launcher imports the runtime:\n" + "\n".join(extra)


def test_the_launcher_loads_no_runtime() -> None:
    """``hvdcorerun`` (hvdcore.runner.cli) must start without numpy, MPI, the engine or a binding."""
    code = ("import sys, hvdcore.runner.cli; "
            "print('\\n'.join(sorted(sys.modules)))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    bad = sorted(m for m in loaded if _within(m, NOT_IN_LAUNCHER))
    assert not bad, f"import hvdcore.runner.cli loads {len(bad)} runtime modules: {bad[:20]}"


def _third_party(module: str) -> set[str]:
    """Top-level names of the non-hvdcore modules ``module`` imports anywhere."""
    path = MODULES[module]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found - {"hvdcore"}


def test_the_engine_talks_to_other_ranks_only_through_backends() -> None:
    """No engine module imports MPI or a framework: all traffic goes through backends.base."""
    engine = [m for m in MODULES if _within(m, ("hvdcore.engine",))]
    assert "hvdcore.engine.loop" in engine
    offenders = {m: sorted(_third_party(m) & {"mpi4py", "torch", "tensorflow", "keras"})
                 for m in engine}
    assert not {m: bad for m, bad in offenders.items() if bad}


@pytest.mark.parametrize("module", ["hvdcore", "hvdcore.torch", "hvdcore.torch.backends",
                                    "hvdcore.torch.dataplanes", "hvdcore.torch.rendezvous",
                                    "hvdcore.tensorflow", "hvdcore.keras"])
def test_importing_a_binding_does_not_start_mpi(module: str) -> None:
    """Importing must not load mpi4py.MPI: its import calls MPI_Init, whose singleton puts
    OMPI_*/PMIX_* variables in the process environment, and then an ``mpirun`` started by that
    process (or by its children) exits 1 without a word. MPI starts in ``init()``."""
    code = f"import sys, {module}; print('mpi4py.MPI' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "False", f"import {module} loads mpi4py.MPI"
