"""EESSI-style discovery of installed hvdcore modules, to parametrize checks over them.

Environments with the feature ``hvdcore-modules`` are loaded one by one and ``module avail
hvdcore`` is asked for what it offers there; each module found becomes a check variant. An
environment with the feature ``hvdcore`` provides hvdcore itself (venv or explicit module): the
variant :data:`ENV_PROVIDED` runs in those.
"""

from __future__ import annotations

__all__ = ["ENV_PROVIDED", "hvdcore_modules", "module_partitions"]

#: Parameter value meaning "the environment provides hvdcore".
ENV_PROVIDED = "env"

_FOUND: dict[str, list[str]] = {}


def _discover(substr: str) -> dict[str, list[str]]:
    import reframe.core.runtime as rt
    from reframe.core.exceptions import ReframeError

    found: dict[str, list[str]] = {}
    try:
        runtime = rt.runtime()
    except ReframeError:
        return found
    snapshot = rt.snapshot()
    for part in runtime.system.partitions:
        for env in part.environs:
            if "hvdcore-modules" not in env.features:
                continue
            try:
                rt.loadenv(part.local_env, env)
                mods = runtime.modules_system.available_modules(substr)
            except (ReframeError, OSError):
                mods = []  # prerequisites missing on this host: nothing to find here
            finally:
                snapshot.restore()
            for mod in mods:
                found.setdefault(mod, []).append(f"{part.fullname}+{env.name}")
    return found


def hvdcore_modules(substr: str = "hvdcore") -> list[str]:
    """``[ENV_PROVIDED, <module>, ...]``: values for a ``parameter`` of the checks."""
    if not _FOUND:
        _FOUND.update(_discover(substr))
    return [ENV_PROVIDED, *sorted(_FOUND)]


def module_partitions(module: str) -> tuple[list[str], list[str]]:
    """``(valid_systems, valid_prog_environs)`` where ``module`` was found."""
    pairs = _FOUND.get(module, [])
    systems = sorted({p.split("+")[0] for p in pairs})
    environs = sorted({p.split("+")[1] for p in pairs})
    return systems, environs
