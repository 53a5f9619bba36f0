"""EESSI-style discovery of installed hvdcore modules, to parametrize checks over them.

Environments with the feature ``hvdcore-modules`` are loaded one by one and ``module avail
hvdcore`` is asked for what it offers there; each module found becomes a check variant. An
environment with the feature ``hvdcore`` provides hvdcore itself (venv or explicit module): the
variant :data:`ENV_PROVIDED` runs in those.

Which framework a discovered module provides: the one its name says (EasyBuild's version
suffix, e.g. ``hvdcore/0.2.0-foss-2023a-TensorFlow-2.13.0`` -> ``tensorflow``), else the
frameworks the discovering environment declares in its ``features``.
"""

from __future__ import annotations

import re

__all__ = [
    "ENV_PROVIDED",
    "FRAMEWORK_NAMES",
    "hvdcore_modules",
    "module_environments",
    "module_frameworks",
    "module_partitions",
]

#: Parameter value meaning "the environment provides hvdcore".
ENV_PROVIDED = "env"

#: Framework (check parameter value) -> how EasyBuild/EESSI spell it in module names.
FRAMEWORK_NAMES = {"torch": "PyTorch", "tensorflow": "TensorFlow"}

_FOUND: dict[str, list[str]] = {}
#: ``"<partition>+<environment>"`` -> the environment's features (where discovery looked).
_FEATURES: dict[str, set[str]] = {}


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
            _FEATURES[f"{part.fullname}+{env.name}"] = set(env.features)
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


def module_frameworks(module: str) -> set[str]:
    """Frameworks a module's name says it is built for (empty: the name does not say)."""
    return {fw for fw, spelled in FRAMEWORK_NAMES.items()
            if re.search(rf"(^|[-/_]){spelled}([-/_]|$)", module, re.IGNORECASE)}


def module_environments(module: str, framework: str) -> tuple[list[str], list[str]]:
    """``(valid_systems, valid_prog_environs)`` where ``module`` was found and provides
    ``framework`` (by its name, or else by the discovering environment's features)."""
    named = module_frameworks(module)
    if named and framework not in named:
        return [], []
    pairs = [p for p in _FOUND.get(module, [])
             if named or framework in _FEATURES.get(p, set())]
    systems = sorted({p.split("+")[0] for p in pairs})
    environs = sorted({p.split("+")[1] for p in pairs})
    return systems, environs
