"""Which data plane a torch tensor takes, and setting the planes up at ``hvdcore.torch.init()``.

Every torch collective goes through hvdcore's engine (negotiation, fusion, stall checks,
timeline); what differs is the transport that moves the bytes:

- **CPU tensors**: MPI on zero-copy NumPy views (default), or torch.distributed Gloo with
  ``HVDCORE_CPU_OPERATIONS=gloo`` (alias ``HOROVOD_CPU_OPERATIONS``).
- **CUDA/ROCm tensors**: torch.distributed NCCL/RCCL on the device when every rank can use it
  (``HVDCORE_GPU_OPERATIONS`` auto or nccl); otherwise, or with ``HVDCORE_GPU_OPERATIONS=mpi``,
  handed to MPI directly where every rank's MPI is CUDA-aware, else staged through host memory
  and reduced by MPI. ``nccl`` makes a missing NCCL an error (:func:`choose_gpu_path`).
- **Ranks that share a GPU** (more ranks than GPUs on a node): NCCL cannot take them. With the
  default (auto), ``init()`` still succeeds, so CPU work on a GPU node runs as it does under
  Horovod; the first device tensor any rank submits raises :class:`CapabilityError` naming the
  ranks and the GPU (every rank knows, from the same vote, so every rank raises). With
  ``HVDCORE_GPU_OPERATIONS=nccl`` the clash is an error at ``init()``.

The ranks decide together (a vote over MPI), create torch.distributed's process group through
:mod:`hvdcore.torch.rendezvous` (an address every rank can reach, a bounded timeout), and
register one :class:`~hvdcore.torch.backends.TorchBackend` per plane with the engine.
:func:`gpu_path` and :func:`cpu_path` say what is active and why (``hvd.gpu_operations()``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import hvdcore as _core
from hvdcore import basics as _basics
from hvdcore.backends import registry
from hvdcore.backends.base import DeviceBuffer
from hvdcore.errors import CapabilityError
from hvdcore.gpu_path import choose_gpu_path  # the one rule (the capability report's too)
from hvdcore.torch import rendezvous
from hvdcore.torch.backends import TORCH_DTYPES, CudaAwareMPIBackend, TorchBackend

__all__ = ["TorchPlanes", "KEY", "NO_PLANES", "current", "setup", "shutdown", "plane_for",
           "refuse_device_tensors", "wrap", "backend", "backend_for_device", "gpu_path",
           "cpu_path", "choose_gpu_path"]

_log = logging.getLogger("hvdcore")
_NP_DTYPES = {t: d for d, t in TORCH_DTYPES.items()}
KEY = "torch"
"""This binding's entry in ``Engine.bindings``."""


@dataclass
class TorchPlanes:
    """The torch binding's data planes of one engine (``Engine.bindings["torch"]``), decided
    by :func:`setup` on every rank together; a new engine (``shutdown()`` + ``init()``, an
    elastic reset) starts without any."""

    cpu: TorchBackend | None = None
    """The torch.distributed plane of CPU tensors (Gloo), or None when they take the host MPI
    plane."""
    gpu: TorchBackend | None = None
    gpu_why: str = "not initialised"
    cpu_why: str = "not initialised"
    cpu_name: str = "mpi"  # what :func:`cpu_path` calls the CPU tensors' path
    gpu_refused: str | None = None  # why device tensors are refused (ranks share a GPU)
    own_pg: bool = False  # hvdcore created torch.distributed's default group (destroy it)
    inplace_buffers: dict[str, tuple] = field(default_factory=dict)
    """Name -> the last in-place plane allreduce of that name: (a weak reference to the tensor,
    its dtype, data address and shape, its plane, the core's buffer for it); see
    :func:`hvdcore.torch.collectives.allreduce_inplace_impl`. Its planes are always these."""


NO_PLANES = TorchPlanes()
"""What every call sees before ``init()`` and after ``shutdown()``: no planes."""


def current() -> TorchPlanes:
    """The planes of the running engine (none before ``init()`` and after ``shutdown()``).
    Read on every call: one dictionary lookup on the engine."""
    st = _basics._state  # (not basics.current(): a function call less)
    return st.engine.bindings.get(KEY, NO_PLANES) if st is not None else NO_PLANES


def _gpu_local_status(setting: str) -> tuple[bool, str, bool]:
    """(NCCL usable, why not, MPI is CUDA-aware and a GPU is visible) on this rank."""
    gpu = torch.cuda.is_available()
    cuda_aware = False
    if gpu and setting != "nccl":
        from hvdcore.capability_probes import ompi_cuda_facts

        cuda_aware = bool(ompi_cuda_facts().get("cuda_aware"))
    if setting == "mpi":
        return False, "HVDCORE_GPU_OPERATIONS=mpi", cuda_aware
    if not gpu:
        return False, "no CUDA/ROCm device visible to torch", False
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        return False, "this torch build has no NCCL/RCCL backend", cuda_aware
    return True, "ok", cuda_aware


def setup() -> None:
    """Decide the planes on every rank together, create the process group, register them.

    Collective (every rank calls it, from ``hvdcore.torch.init()``) the first time after the
    core's init; a local no-op afterwards (planes up or not), as Horovod's second ``init()`` is.
    """
    engine = _basics.state().engine
    # Horovod's init() on an initialised process is a local no-op: the vote below is a
    # collective, so it runs once per engine (one rank's stray second init() must not start it)
    if KEY in engine.bindings:
        return
    planes = engine.bindings[KEY] = TorchPlanes()
    from hvdcore.config import load

    cfg = load()
    import torch.distributed as dist

    gloo_ok = dist.is_available() and dist.is_gloo_available()
    want_gloo = cfg.cpu_operations == "gloo"
    if want_gloo and not gloo_ok:
        raise CapabilityError("HVDCORE_CPU_OPERATIONS=gloo but this torch build has no Gloo "
                              "backend; unset it to reduce CPU tensors with MPI")
    votes = _core.allgather_object(_gpu_local_status(cfg.gpu_operations))
    path, planes.gpu_why = choose_gpu_path(cfg.gpu_operations, votes)
    if path == "error":
        raise CapabilityError(
            f"HVDCORE_GPU_OPERATIONS=nccl but NCCL cannot be used ({planes.gpu_why}); unset it "
            "(auto) to stage device tensors through host memory, or fix those ranks")
    nccl = path == "nccl"
    # without MPI in the job the core's host plane is the Gloo controller's (gloo_host.py)
    on_gloo_controller = _basics.controller() == "gloo"
    planes.cpu_name = "gloo" if want_gloo or on_gloo_controller else "mpi"
    planes.cpu_why = ("HVDCORE_CPU_OPERATIONS=gloo" if want_gloo
                      else "default on the Gloo controller: its host plane, no MPI in this job"
                      if on_gloo_controller else "default (MPI)")
    if path == "mpi-cuda-aware":
        planes.gpu = registry.create("mpi-cuda", "mpi", _pick_device())
        engine.register_backend(planes.gpu.key, planes.gpu)
    device = None
    if nccl:
        device = _pick_device()
        clash = rendezvous.shared_devices_message(device)  # the same answer on every rank
        if clash is not None:
            if cfg.gpu_operations == "nccl":
                raise CapabilityError(clash)
            # auto: CPU work must still run (Horovod inits fine here); device tensors are
            # refused when submitted (plane_for), on every rank alike
            planes.gpu_refused = planes.gpu_why = clash
            nccl, device = False, None
    if not want_gloo and not nccl:
        return
    parts = (["cpu:gloo"] if want_gloo else []) + (["cuda:nccl"] if nccl else [])
    spec = parts[0].split(":")[1] if len(parts) == 1 else ",".join(parts)
    if dist.is_initialized():
        _adopt_user_group(dist, spec)
    else:
        rendezvous.init_process_group(spec)
        planes.own_pg = True
        if _core.rank() == 0:
            _log.info("%s", rendezvous.describe())
    # (FAULTS_DATA_PATH=...,plane=device slows the engine's view of a plane: tests only)
    from hvdcore.backends.degraded import wrap_from_env

    if want_gloo:
        planes.cpu = registry.create("gloo", "gloo", torch.device("cpu"), spec)
        engine.register_backend(planes.cpu.key,
                                wrap_from_env(planes.cpu, os.environ, _core.rank(), "device"))
    if nccl:
        name = "rccl" if torch.version.hip else "nccl"
        planes.gpu = registry.create(name, name, device, spec)
        engine.register_backend(planes.gpu.key,
                                wrap_from_env(planes.gpu, os.environ, _core.rank(), "device"))


def _pick_device() -> torch.device:
    """The GPU of this rank's device plane: the current device if the user chose one before
    init (anything but 0), else ``local_rank % visible GPUs``, the device Horovod scripts pick
    with ``torch.cuda.set_device(hvd.local_rank())`` right after ``init()``."""
    current = torch.cuda.current_device()
    index = current if current != 0 else _core.local_rank() % max(torch.cuda.device_count(), 1)
    return torch.device("cuda", index)


def _adopt_user_group(dist: Any, spec: str) -> None:
    """Use a default group the user created, if it matches hvdcore's world and backends."""
    have = str(dist.get_backend()).lower()
    missing = [b for b in ("gloo", "nccl") if b in spec and b not in have]
    if dist.get_world_size() != _core.size() or dist.get_rank() != _core.rank() or missing:
        raise CapabilityError(
            f"torch.distributed is already initialised (backend {have}, rank "
            f"{dist.get_rank()} of {dist.get_world_size()}); hvdcore needs rank "
            f"{_core.rank()} of {_core.size()} with {spec}. Initialise it that way, or leave "
            "it to hvdcore.torch.init(), or unset HVDCORE_CPU_OPERATIONS=gloo / set "
            "HVDCORE_GPU_OPERATIONS=mpi")


def shutdown(planes: TorchPlanes | None = None) -> None:
    """Forget ``planes`` (default: the running engine's; hand them over when the engine is
    already shut down) and destroy the group hvdcore created for them."""
    planes = planes if planes is not None else current()
    if planes is NO_PLANES:
        return
    planes.cpu = planes.gpu = planes.gpu_refused = None
    planes.inplace_buffers.clear()
    if planes.own_pg:
        planes.own_pg = False
        rendezvous.destroy()


def cpu_plane() -> TorchBackend | None:
    """The torch.distributed plane of CPU tensors, or None when they take the host (MPI) path."""
    return current().cpu


def plane_for(tensor: torch.Tensor) -> TorchBackend | None:
    """The torch.distributed plane ``tensor`` goes to, or None for the host (MPI) path."""
    if tensor.layout != torch.strided:
        return None
    planes = current()
    if tensor.is_cpu:  # (is_cpu is ~10x cheaper than building tensor.device)
        return planes.cpu
    gpu = planes.gpu
    if gpu is not None:
        if tensor.device == gpu.device:
            return gpu
        _warn_other_device(tensor.device, gpu)
    elif planes.gpu_refused is not None and tensor.is_cuda:
        refuse_device_tensors(str(tensor.device))
    return None


def refuse_device_tensors(device: str) -> None:
    """Raise CapabilityError for a tensor on ``device`` when init found ranks sharing a GPU
    (HVDCORE_GPU_OPERATIONS auto); return otherwise."""
    refused = current().gpu_refused
    if refused is not None:
        raise CapabilityError(f"rank {_core.rank()}: cannot take a tensor on {device}: "
                              f"{refused}")


_WARNED: set[str] = set()


def _warn_other_device(device: torch.device, gpu: TorchBackend) -> None:
    if str(device) not in _WARNED:
        _WARNED.add(str(device))
        _log.warning(
            "rank %d: a tensor on %s, but this rank's %s plane drives %s (chosen at init: "
            "torch.cuda.set_device before hvd.init(), else local_rank %% GPUs); tensors on "
            "%s are staged through host memory", _core.rank(), device, gpu.name, gpu.device,
            device)


def wrap(plane: TorchBackend, work: torch.Tensor) -> DeviceBuffer:
    """``work`` (contiguous, a core dtype) as the core's buffer for ``plane``, made ready for
    the plane's stream."""
    plane.prepare(work)
    return DeviceBuffer(work, plane.key, _NP_DTYPES[work.dtype], tuple(work.shape),
                        work.data_ptr())


def backend(name: str) -> TorchBackend | None:
    """The registered plane called ``name`` ("gloo", "nccl", "rccl", "mpi-cuda"), or None."""
    planes = current()
    for plane in (planes.cpu, planes.gpu):
        if plane is not None and plane.key == name:
            return plane
    return None


def backend_for_device(kind: str) -> TorchBackend | None:
    """The plane of tensors on device type ``kind`` ("cpu" or "cuda"), or None (host path)."""
    planes = current()
    return planes.cpu if kind == "cpu" else planes.gpu


def gpu_path() -> str:
    """Which path device tensors take: ``nccl``, ``rccl``, ``mpi-cuda-aware (<why>)``,
    ``mpi-host-staging (<why>)``, or ``refused (<why>)`` when ranks share a GPU."""
    planes = current()
    if planes.gpu_refused is not None:
        return f"refused ({planes.gpu_refused})"
    if isinstance(planes.gpu, CudaAwareMPIBackend):
        return f"mpi-cuda-aware ({planes.gpu_why})"
    if planes.gpu is not None:
        return planes.gpu.name
    return f"mpi-host-staging ({planes.gpu_why})"


def cpu_path() -> str:
    """Which path CPU tensors take: ``gloo`` or ``mpi``, with why."""
    planes = current()
    return f"{planes.cpu_name} ({planes.cpu_why})"


def dtype_of(tensor: torch.Tensor) -> np.dtype:
    """The core dtype standing for ``tensor``'s (KeyError for dtypes the core lacks)."""
    return _NP_DTYPES[tensor.dtype]
