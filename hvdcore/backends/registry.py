"""Data planes by name: what each one moves, under which controller, and where it is.

Every data plane the engine runs is made here (:func:`create`), as every controller is made
through :mod:`hvdcore.controllers`: the controllers make their host plane, the torch binding
its Gloo and GPU planes (:mod:`hvdcore.torch.dataplanes`). What the engine itself asks of a
plane beyond the collectives is the class's :class:`~hvdcore.backends.base.PlaneCapabilities`;
this table holds what people and the capability report ask: the tensors and devices a plane
takes, the dtypes, whether it reduces in the caller's memory, how it reduces float16.

Adding a data plane: its module with a class that implements
:class:`~hvdcore.backends.base.Backend`, one entry in :data:`REGISTRY`, and the one place that
decides when to use it (a controller, or a binding's ``setup``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from hvdcore.errors import ConfigError

__all__ = ["CORE_DTYPES", "PlaneInfo", "REGISTRY", "create", "plane_class", "info"]

CORE_DTYPES = ("uint8", "int8", "int32", "int64", "float16", "float32", "float64", "bool")
"""The dtypes the core moves and reduces (a binding widens others before, e.g. bfloat16)."""


@dataclass(frozen=True)
class PlaneInfo:
    """One data plane's declaration."""

    target: str  # "module:Class", imported only when made or asked about
    takes: str  # the tensors it moves
    devices: tuple[str, ...]  # where they live: host (NumPy), cpu (torch), cuda, rocm
    controllers: tuple[str, ...]  # the controllers it runs under
    in_place: bool  # reduces in the caller's own memory (no copy in or out)
    float16: str  # "native" or "in float32" (summed wide, rounded once)
    dtypes: tuple[str, ...] = CORE_DTYPES


_HOST_ARRAYS = "NumPy arrays and host tensors (TensorFlow, torch CPU by default)"
REGISTRY: dict[str, PlaneInfo] = {
    "mpi": PlaneInfo("hvdcore.backends.mpi:MPIBackend", _HOST_ARRAYS, ("host", "cpu"),
                     ("mpi",), True, "in float32"),
    "mpi-hierarchical": PlaneInfo(
        "hvdcore.backends.hierarchical:HierarchicalBackend",
        _HOST_ARRAYS + "; within nodes, then across (HVDCORE_HIERARCHICAL_*)",
        ("host", "cpu"), ("mpi",), True, "in float32"),
    "gloo-host": PlaneInfo("hvdcore.controllers.gloo_host:GlooHostBackend", _HOST_ARRAYS,
                           ("host", "cpu"), ("gloo",), True, "in float32"),
    "gloo": PlaneInfo("hvdcore.torch.backends:TorchBackend",
                      "torch CPU tensors (HVDCORE_CPU_OPERATIONS=gloo)", ("cpu",),
                      ("mpi", "gloo"), True, "native"),
    "nccl": PlaneInfo("hvdcore.torch.backends:TorchBackend", "torch CUDA tensors", ("cuda",),
                      ("mpi", "gloo"), True, "native"),
    "rccl": PlaneInfo("hvdcore.torch.backends:TorchBackend", "torch ROCm tensors", ("rocm",),
                      ("mpi", "gloo"), True, "native"),
    "mpi-cuda": PlaneInfo("hvdcore.torch.backends:CudaAwareMPIBackend",
                          "torch CUDA tensors handed to a CUDA-aware MPI", ("cuda",), ("mpi",),
                          True, "in float32"),
}
"""Data plane name -> its declaration."""


def info(name: str) -> PlaneInfo:
    """The declaration of plane ``name`` (ConfigError naming the known ones otherwise)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ConfigError(f"no data plane called {name!r}; known: "
                          f"{', '.join(sorted(REGISTRY))}") from None


def plane_class(name: str) -> type:
    """The class that implements plane ``name`` (imported now)."""
    module, _, cls = info(name).target.partition(":")
    return getattr(importlib.import_module(module), cls)


def create(name: str, *args: Any, **kwargs: Any) -> Any:
    """A new plane ``name``, made with its class's arguments."""
    return plane_class(name)(*args, **kwargs)
