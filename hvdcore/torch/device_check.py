"""Ranks that drive the same GPU: found over MPI and reported on every rank.

NCCL refuses two ranks of one communicator on one GPU, with an error that names neither the ranks
nor the fix. :func:`check_distinct_devices` gathers every rank's GPU (its uuid where torch reports
one, else its physical index after ``CUDA_VISIBLE_DEVICES``) and raises
:class:`~hvdcore.errors.CapabilityError` on every rank, naming the ranks, the host and the GPU, when
two ranks share one (:func:`shared_devices_message` gives that text without raising).
:func:`duplicate_devices` is the decision alone, testable without GPUs. Re-exported by
:mod:`hvdcore.torch.rendezvous`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

import hvdcore as _core
from hvdcore.errors import CapabilityError
from hvdcore.netaddr import local_host

__all__ = ["DeviceReport", "duplicate_devices", "shared_devices_message", "check_distinct_devices"]


@dataclass(frozen=True)
class DeviceReport:
    """The GPU one rank drives. ``gpu`` identifies it: ``GPU-<uuid>`` is unique across hosts;
    otherwise ``GPU <physical index>`` (after ``CUDA_VISIBLE_DEVICES``), meaningful on one host
    only. ``label`` is the rank's own name for it (``cuda:0``)."""

    rank: int
    host: str
    machine: str
    gpu: str
    label: str


def _device_report(device: torch.device | None) -> DeviceReport | None:
    if device is None or device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    host, machine = local_host()
    uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
    if uuid:
        gpu = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    else:
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
                   if v.strip()]
        gpu = f"GPU {visible[index] if index < len(visible) else index}"
    return DeviceReport(_core.rank(), host, machine, gpu, f"cuda:{index}")


def duplicate_devices(reports: Sequence[DeviceReport | None]) -> dict[str, list[int]]:
    """GPUs driven by more than one rank: ``{"<gpu> on <host(s)>": [ranks]}``, empty when all
    are distinct. Equal uuids clash wherever the ranks run (fake nodes on one machine see the
    same GPU); index-only GPUs clash only within one host. None (no GPU) is skipped.

    >>> a = DeviceReport(0, "n1", "", "GPU-1a2b", "cuda:0")
    >>> duplicate_devices([a, DeviceReport(1, "n1", "", "GPU-1a2b", "cuda:0"), None])
    {'GPU-1a2b on n1': [0, 1]}
    """
    groups: dict[tuple[str, ...], list[DeviceReport]] = {}
    for rep in reports:
        if rep is None:
            continue
        key = (rep.gpu,) if rep.gpu.startswith("GPU-") else (rep.host, rep.machine, rep.gpu)
        groups.setdefault(key, []).append(rep)
    return {f"{reps[0].gpu} on {', '.join(sorted({r.host for r in reps}))}": [r.rank for r in reps]
            for reps in groups.values() if len(reps) > 1}


def shared_devices_message(device: torch.device | None) -> str | None:
    """Collective: the error text naming the ranks that share a GPU, or None when every rank
    drives its own. ``device`` is the GPU this rank uses, or None without one."""
    dups = duplicate_devices(_core.allgather_object(_device_report(device)))
    if not dups:
        return None
    what = "; ".join(f"ranks {ranks} all drive {gpu}" for gpu, ranks in dups.items())
    return (f"{what}: NCCL needs one GPU per rank. Call torch.cuda.set_device(hvd.local_rank()) "
            "before using the GPU (with at least as many GPUs per node as ranks), or set "
            "HVDCORE_GPU_OPERATIONS=mpi to stage device tensors through host memory")


def check_distinct_devices(device: torch.device | None) -> None:
    """Collective: raise CapabilityError on every rank when two ranks drive the same GPU.

    ``device`` is the GPU this rank uses (``torch.device("cuda", i)``), or None without one.

    >>> check_distinct_devices(torch.device("cuda", hvd.local_rank()))  # doctest: +SKIP
    """
    msg = shared_devices_message(device)
    if msg:
        raise CapabilityError(msg)
