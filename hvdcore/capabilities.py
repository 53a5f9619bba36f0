"""What this hvdcore installation can do: the capability report and Horovod's ``*_built()`` calls.

Every item says whether it is **built** (the installed stack has it: the package imports, the
library loads, the framework was compiled with it) and **available** (usable on this node now:
e.g. a GPU is visible), its version, and the reason when either is false. Items:

======================  ==========================================================================
category                names
======================  ==========================================================================
``framework``           ``torch``, ``tensorflow``, ``keras``
``controller``          ``mpi`` (mpi4py + a loadable libmpi), ``gloo`` (torch.distributed Gloo)
``tensor_operation``    ``nccl``, ``mpi``, ``gloo``, ``ddl``, ``ccl``
``device``              ``cuda``, ``rocm``, ``cuda-aware-mpi``
======================  ==========================================================================

The report also says whether repeated blocking host allreduces take the compiled hot path
(``tensor_paths["host_hot_path"]``, ``HVDCORE_HOTPATH``; decided by the runtime's own
:func:`hvdcore.backends.hotpath.decide`), which path GPU tensors take (``nccl``,
``mpi-cuda-aware``, ``mpi-host-staging``, or ``none`` without a GPU; the torch binding's own
:func:`hvdcore.gpu_path.choose_gpu_path` on this node's facts), honouring
``HVDCORE_GPU_OPERATIONS``, and
(``tensor_paths``) which data plane torch CPU tensors (``HVDCORE_CPU_OPERATIONS``) and
TensorFlow tensors take.

Probes are guarded (a failure is recorded as the reason, never raised), lazy (asking about MPI
does not import torch; TensorFlow, ~6 s to import, is imported only for the items that need it)
and cached per process. Importing this module initializes nothing. (The probes themselves live
in :mod:`hvdcore.capability_probes`, the predicted paths in :mod:`hvdcore.capability_paths`;
this module keeps the report and Horovod's ``*_built()`` calls together because both read the
same cached items.)

Example::

    >>> import hvdcore.capabilities as caps
    >>> report = caps.capabilities(["mpi"])
    >>> report.item("controller", "mpi").built
    True
    >>> caps.mpi_built()
    True
"""

from __future__ import annotations

import os
import platform
import sys
import types
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from hvdcore import capability_paths as paths_of
from hvdcore import capability_probes as probes

__all__ = [
    "Capability",
    "CapabilityReport",
    "ITEM_NAMES",
    "capabilities",
    "mpi_built",
    "mpi_enabled",
    "gloo_built",
    "gloo_enabled",
    "nccl_built",
    "cuda_built",
    "rocm_built",
    "ddl_built",
    "ccl_built",
]

#: (category, name, label) of every item, in report order.
ITEMS: tuple[tuple[str, str, str], ...] = (
    ("framework", "tensorflow", "TensorFlow"),
    ("framework", "torch", "PyTorch"),
    ("framework", "keras", "Keras"),
    ("controller", "mpi", "MPI"),
    ("controller", "gloo", "Gloo"),
    ("tensor_operation", "nccl", "NCCL"),
    ("tensor_operation", "ddl", "DDL"),
    ("tensor_operation", "ccl", "CCL"),
    ("tensor_operation", "mpi", "MPI"),
    ("tensor_operation", "gloo", "Gloo"),
    ("device", "cuda", "CUDA"),
    ("device", "rocm", "ROCm"),
    ("device", "cuda-aware-mpi", "CUDA-aware MPI"),
)

#: Names accepted by :func:`capabilities` and ``hvdcorerun --check-build --require``.
ITEM_NAMES: tuple[str, ...] = tuple(dict.fromkeys(name for _, name, _ in ITEMS))


@dataclass
class Capability:
    """One item of the report; ``reason`` explains a False ``built`` or ``available``."""

    category: str
    name: str
    label: str
    built: bool
    available: bool
    version: str | None = None
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of every field."""
        return asdict(self)


@dataclass
class CapabilityReport:
    """The whole report: ``items`` in Horovod's order plus the GPU tensor path and context."""

    items: list[Capability]
    gpu_tensors: dict[str, Any]
    context: dict[str, Any]
    tensor_paths: dict[str, Any] = field(default_factory=dict)

    def item(self, category: str, name: str) -> Capability:
        """The item ``name`` of ``category``; KeyError when it was not probed."""
        for it in self.items:
            if it.category == category and it.name == name:
                return it
        raise KeyError(f"{category}/{name} is not in this report")

    def named(self, name: str) -> list[Capability]:
        """Every item called ``name`` (``mpi`` and ``gloo`` are a controller and an operation)."""
        return [it for it in self.items if it.name == name]

    def missing(self, names: Iterable[str], need_available: bool = False) -> list[str]:
        """One line per name whose items are not built (or not available): name and reason."""
        lines = []
        for name in names:
            for it in self.named(name):
                ok = it.built and (it.available or not need_available)
                if not ok:
                    lines.append(f"{name}: {it.reason or 'not available'}")
                    break
        return lines

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict: ``items`` (list of dicts), ``gpu_tensors``, ``tensor_paths``,
        ``context``."""
        return {
            "items": [it.to_dict() for it in self.items],
            "gpu_tensors": dict(self.gpu_tensors),
            "tensor_paths": dict(self.tensor_paths),
            "context": dict(self.context),
        }


# ---------------------------------------------------------------------------------- item probes

def _binding_missing(module: str) -> str | None:
    """Why hvdcore's binding ``module`` is not installed, or None when it is."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError) as exc:
        return f"{module} cannot be located: {exc}"
    return None if found else (f"the framework is installed but hvdcore's binding {module} is "
                               "missing from this installation (reinstall hvdcore)")


def _framework(key: str, label: str, facts: dict, binding: str) -> Capability:
    reason = facts.get("error") or _binding_missing(binding)
    ok = reason is None
    return Capability("framework", key, label, ok, ok, facts.get("version"), reason,
                      {k: v for k, v in facts.items() if k != "error"})


def _framework_torch() -> Capability:
    return _framework("torch", "PyTorch", probes.torch_facts(), "hvdcore.torch")


def _framework_tensorflow() -> Capability:
    return _framework("tensorflow", "TensorFlow", probes.tensorflow_facts(), "hvdcore.tensorflow")


def _framework_keras() -> Capability:
    f = probes.keras_facts()
    version = f.get("keras_version") or f.get("tf_keras_version")
    ok = version is not None
    reason = None if ok else f.get("error", "neither keras nor tf_keras imports")
    backend = f.get("backend")
    usable = ok and (backend is None or backend in probes.KERAS_BACKENDS)
    if ok and not usable:
        reason = (f"Keras' backend {backend!r} (KERAS_BACKEND) is not one hvdcore.keras trains "
                  f"on ({', '.join(probes.KERAS_BACKENDS)})")
    trains_on = f.get("hvdcore_backends")
    # the label carries what hvdcore.keras trains on here (--check-build prints labels)
    label = f"Keras [hvdcore.keras: {', '.join(trains_on)}]" if trains_on else "Keras"
    return Capability("framework", "keras", label, ok, usable, version, reason, dict(f))


def _mpi(category: str) -> Capability:
    f = probes.mpi_facts()
    built = "library_version" in f
    version = None
    if built and f.get("vendor"):
        version = f"{f['vendor']} {f['vendor_version']}; mpi4py {f.get('mpi4py_version')}"
    reason = f.get("error")
    available = built
    if built and not f.get("initialized") and not f["launchers"] and not _inside_launched_job():
        available = False
        reason = ("no MPI launcher (mpirun, mpiexec or srun) on PATH: install openmpi-bin or "
                  "`module load OpenMPI`")
    return Capability(category, "mpi", "MPI", built, available, version, reason, dict(f))


def _inside_launched_job() -> bool:
    return any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


def _gloo(category: str) -> Capability:
    f = probes.torch_facts()
    if "error" in f:
        return Capability(category, "gloo", "Gloo", False, False, None,
                          f"Gloo comes with torch.distributed: {f['error']}", {})
    ok = bool(f.get("gloo"))
    reason = None if ok else (
        f"torch {f['version']}: torch.distributed.is_gloo_available() is False"
        + (f" ({f['distributed_error']})" if "distributed_error" in f else ""))
    version = f"torch.distributed, torch {f.get('version')}" if ok else None
    return Capability(category, "gloo", "Gloo", ok, ok, version, reason,
                      {"torch_version": f.get("version")})


def _nccl() -> Capability:
    f = probes.torch_facts()
    if "error" in f:
        return Capability("tensor_operation", "nccl", "NCCL", False, False, None,
                          f"NCCL is used through torch.distributed: {f['error']}", {})
    details = {k: f.get(k) for k in ("nccl_version", "nccl_version_code", "nccl_version_error",
                                     "cuda_version", "hip_version", "gpu_count")}
    if not f.get("nccl"):
        why = (f"torch {f['version']} was built without NCCL "
               "(torch.distributed.is_nccl_available() is False): install a CUDA or ROCm "
               "build of torch")
        return Capability("tensor_operation", "nccl", "NCCL", False, False, None, why, details)
    available = f.get("gpu_count", 0) > 0
    reason: str | None = None if available else (
        "built, but no GPU is visible (torch.cuda.device_count() == 0"
        + (f": {f['gpu_error']}" if "gpu_error" in f else "") + ")")
    return Capability("tensor_operation", "nccl", "NCCL", True, available, f.get("nccl_version"),
                      reason, details)


def _not_in_hvdcore(name: str, label: str, what: str) -> Capability:
    return Capability("tensor_operation", name, label, False, False, None,
                      f"hvdcore has no {what} backend (CPU tensors use MPI; GPU tensors NCCL or "
                      "MPI)", {})


def _device(name: str, label: str) -> Capability:
    f = probes.torch_facts()
    tf_build = probes.tensorflow_build_facts()
    key = "cuda_version" if name == "cuda" else "hip_version"
    tf_key = "cuda_build" if name == "cuda" else "rocm_build"
    details = {"torch_" + key: f.get(key), "tensorflow_" + tf_key: tf_build.get(tf_key)}
    version = f.get(key)
    built = version is not None or bool(tf_build.get(tf_key))
    if not built:
        torch_part = (f"torch {f['version']} has torch.version.{key.split('_')[0]} = None"
                      if "error" not in f else f["error"])
        tf_part = ("" if not tf_build.get("installed") else
                   f"; TensorFlow {tf_build.get('version')} is not a {label} build")
        why = f"not built with {label}: {torch_part}{tf_part}"
        return Capability("device", name, label, False, False, None, why, details)
    # torch answers for both CUDA and ROCm (HIP reuses torch.cuda); TensorFlow is asked (and so
    # imported) only when it is itself a CUDA/ROCm build and torch saw no GPU
    count = f.get("gpu_count", 0) if version is not None else 0
    if count == 0 and tf_build.get(tf_key):
        count = probes.tensorflow_facts().get("gpu_count", 0)
    details["gpu_count"] = count
    details["gpu_names"] = f.get("gpu_names", [])
    reason: str | None = (
        None if count else f"built with {label}, but no {label} GPU is visible on this node")
    return Capability("device", name, label, True, count > 0, version, reason, details)


def _cuda_aware_mpi() -> Capability:
    f = probes.ompi_cuda_facts()
    built = bool(f.get("cuda_aware"))
    if not built:
        reason = f.get("error") or (
            f"the MPI library is not CUDA-aware ({f.get('source', 'unknown source')} says false)")
        return Capability("device", "cuda-aware-mpi", "CUDA-aware MPI", False, False, None,
                          reason, dict(f))
    cuda = _device("cuda", "CUDA")
    reason = None if cuda.available else f"CUDA-aware MPI, but {cuda.reason}"
    return Capability("device", "cuda-aware-mpi", "CUDA-aware MPI", True, cuda.available, None,
                      reason, dict(f))


_PROBES = {
    ("framework", "tensorflow"): _framework_tensorflow,
    ("framework", "torch"): _framework_torch,
    ("framework", "keras"): _framework_keras,
    ("controller", "mpi"): lambda: _mpi("controller"),
    ("controller", "gloo"): lambda: _gloo("controller"),
    ("tensor_operation", "nccl"): _nccl,
    ("tensor_operation", "ddl"): lambda: _not_in_hvdcore("ddl", "DDL", "IBM DDL"),
    ("tensor_operation", "ccl"): lambda: _not_in_hvdcore("ccl", "CCL", "Intel oneCCL"),
    ("tensor_operation", "mpi"): lambda: _mpi("tensor_operation"),
    ("tensor_operation", "gloo"): lambda: _gloo("tensor_operation"),
    ("device", "cuda"): lambda: _device("cuda", "CUDA"),
    ("device", "rocm"): lambda: _device("rocm", "ROCm"),
    ("device", "cuda-aware-mpi"): _cuda_aware_mpi,
}


def _context() -> dict[str, Any]:
    try:
        from importlib.metadata import version

        hv = version("hvdcore")
    except Exception:  # running from a source checkout: the package may say
        hv = str(getattr(sys.modules.get("hvdcore"), "__version__", "")) or "(source checkout)"
    return {"hvdcore": hv, "python": platform.python_version(), "executable": sys.executable,
            "host": platform.node(), "platform": platform.platform()}


def capabilities(names: Iterable[str] | None = None, refresh: bool = False) -> CapabilityReport:
    """Probe and return the :class:`CapabilityReport`.

    ``names`` restricts the report to those items (see :data:`ITEM_NAMES`), so that e.g.
    ``capabilities(["mpi", "torch"])`` never imports TensorFlow. ``refresh`` re-runs the probes
    instead of using this process's cached results. Unknown names raise ``ValueError``.

    Example::

        >>> r = capabilities(["mpi", "nccl"])
        >>> [(i.name, i.built) for i in r.items]  # doctest: +SKIP
        [('mpi', True), ('nccl', False), ('mpi', True)]
    """
    if refresh:
        probes.clear_cache()
    wanted = set(ITEM_NAMES if names is None else names)
    unknown = sorted(wanted - set(ITEM_NAMES))
    if unknown:
        raise ValueError(f"unknown capability name(s) {', '.join(unknown)}; accepted: "
                         f"{', '.join(ITEM_NAMES)}")
    items = [_PROBES[(cat, name)]() for cat, name, _ in ITEMS if name in wanted]
    gpu: dict[str, Any] = {"path": "not probed", "reason": "report restricted to " +
                           ", ".join(sorted(wanted))}
    by_name = {it.name: it for it in items}
    if {"cuda", "rocm", "nccl", "cuda-aware-mpi"} <= wanted:
        gpu = paths_of.gpu_tensor_path(by_name)
    paths = paths_of.tensor_paths(by_name, gpu) if {"gloo", "torch", "tensorflow"} <= wanted else {}
    if "mpi" in wanted and by_name["mpi"].built:
        paths["host_hot_path"] = paths_of.host_hot_path()
    if {"mpi", "gloo"} <= wanted:
        paths["controller"] = paths_of.controller()
    return CapabilityReport(items, gpu, _context(), paths)


# ----------------------------------------------------------------- Horovod's boolean functions

def mpi_built() -> bool:
    """True if MPI support is there: mpi4py imports and the MPI library loads (Horovod: built
    with MPI). Does not initialize MPI."""
    return _mpi("controller").built


def _controller_in_use() -> str | None:
    """The running job's controller (None before ``init()``, after ``shutdown()``)."""
    try:
        from hvdcore import basics
    except ImportError:  # hvdcore's core is not importable: nothing can be enabled
        return None
    st = basics.current()
    return None if st is None or st.formed is None else st.formed.controller


def mpi_enabled() -> bool:
    """True if this job runs on the MPI controller (Horovod's "MPI mode is enabled at run
    time"): ``hvdcore.init()`` chose MPI and MPI is initialized; False before ``init()``."""
    if _controller_in_use() != "mpi":
        return False
    mod = sys.modules.get("mpi4py.MPI")
    if mod is None:
        return False
    try:
        return bool(mod.Is_initialized() and not mod.Is_finalized())
    except Exception:  # a broken MPI module means MPI is not usable: not enabled
        return False


def gloo_built() -> bool:
    """True if torch.distributed with Gloo is installed (hvdcore's Gloo path; imports torch)."""
    return _gloo("controller").built


def gloo_enabled() -> bool:
    """True if this job runs on the Gloo controller (Horovod's "Gloo mode is enabled at run
    time"); False before ``init()``, on the MPI controller (even with Gloo as a data plane,
    ``HVDCORE_CPU_OPERATIONS=gloo``) and after ``shutdown()``. Never imports torch."""
    return _controller_in_use() == "gloo"


def nccl_built() -> int:
    """Like Horovod: NCCL_VERSION_CODE (e.g. 21803 for 2.18.3) when torch.distributed has NCCL,
    0 otherwise. With NCCL present but its version unreadable, 1 (true, version unknown)."""
    f = probes.torch_facts()
    if "error" in f or not f.get("nccl"):
        return 0
    return int(f.get("nccl_version_code") or 1)


def cuda_built() -> bool:
    """True if an installed framework (torch, or TensorFlow by its build_info) was built with
    CUDA. Does not need a GPU."""
    return _device("cuda", "CUDA").built


def rocm_built() -> bool:
    """True if an installed framework (torch, or TensorFlow) was built with ROCm."""
    return _device("rocm", "ROCm").built


def ddl_built() -> bool:
    """Always False: hvdcore has no IBM DDL backend (as Horovod without DDL)."""
    return False


def ccl_built() -> bool:
    """Always False: hvdcore has no Intel oneCCL backend."""
    return False


class _CallableModule(types.ModuleType):
    """Lets ``hvdcore.capabilities()`` return the report while ``hvdcore.capabilities`` stays
    this module (so ``import hvdcore.capabilities as caps`` keeps working)."""

    def __call__(self, names: Iterable[str] | None = None,
                 refresh: bool = False) -> CapabilityReport:
        return capabilities(names, refresh)


sys.modules[__name__].__class__ = _CallableModule
