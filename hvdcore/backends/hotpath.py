"""Whether the compiled hot path (``hvdcore/backends/_hotpath.c``) can run: one decision for
the runtime (:func:`hvdcore.backends.mpi_steady.compiled_module`) and the capability report
(``hvdcorerun --check-build``).

Importing this module imports neither mpi4py nor NumPy, and the decision initialises no MPI:
the caller passes the MPI library version mpi4py reports (the runtime asks ``mpi4py.MPI``;
the report asks :func:`hvdcore.capability_probes.mpi_facts`, which loads the library in a
subprocess).
"""

from __future__ import annotations

from types import ModuleType

from hvdcore.backends import round_wire

__all__ = ["decide"]


def _load() -> tuple[ModuleType | None, str]:
    try:
        from hvdcore.backends import _hotpath  # type: ignore[attr-defined]  # C, no stub
    except ImportError as exc:
        return None, f"not built ({exc})"
    return _hotpath, ""


def decide(library_version: str, need_initialized: bool = True,
           module: ModuleType | None = None) -> tuple[ModuleType | None, str]:
    """``(module, "in use")`` when the compiled module is installed, speaks this hvdcore's round
    protocol (:data:`hvdcore.backends.round_wire.PROTOCOL`), was linked with the MPI library
    whose version string is ``library_version`` (mpi4py's ``MPI.Get_library_version()``) and,
    with ``need_initialized``, finds MPI initialised there; else ``(None, why not)``.
    ``module``: another build to judge instead of the installed one."""
    if module is None:
        module, why = _load()
        if module is None:
            return None, why
    built = getattr(module, "PROTOCOL", None)
    if built != round_wire.PROTOCOL:
        return None, (f"built for another round protocol ({built!r}, this hvdcore speaks "
                      f"{round_wire.PROTOCOL!r}): reinstall hvdcore")
    initialized, version = module.usable()
    ours = library_version.rstrip("\x00").strip()
    if version.strip() != ours:
        return None, (f"built against another MPI library ({version.strip()[:60]!r}, mpi4py "
                      f"uses {ours[:60]!r})")
    if need_initialized and not initialized:
        return None, "MPI is not initialised in the library it was linked with"
    return module, "in use"
