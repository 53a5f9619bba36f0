"""Interim rendezvous (replaced by the full module): torch.distributed's default group over
a TCPStore that rank 0 opens, its port sent over MPI."""

from __future__ import annotations

import datetime
import os
from typing import Any

import hvdcore as _core

_OWN = False


def init_process_group(backend: str, timeout_s: float | None = None) -> None:
    """Collective: torch.distributed's default group with hvdcore's ranks."""
    global _OWN
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s or 120)
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    store = None
    port = 0
    if _core.rank() == 0:
        store = dist.TCPStore(host, 0, _core.size(), True, timeout=timeout,
                              wait_for_workers=False)
        port = store.port
    port = _core.broadcast_object(port, root_rank=0)
    if store is None:
        store = dist.TCPStore(host, port, _core.size(), False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=_core.rank(),
                            world_size=_core.size(), timeout=timeout)
    _OWN = True


def check_distinct_devices(device: Any) -> None:
    """Collective: two ranks of one host on one GPU is an error (interim: no check)."""


def destroy() -> None:
    """Destroy the default group made by :func:`init_process_group`."""
    global _OWN
    if _OWN:
        import torch.distributed as dist

        dist.destroy_process_group()
        _OWN = False
