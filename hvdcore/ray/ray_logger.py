"""Values a rank sends to the driver's callbacks (Horovod's ``horovod.ray.ray_logger``).

Inside a function an elastic :class:`~hvdcore.ray.RayExecutor` job runs, ``log({...})`` puts
the dict on the job's queue, and the driver calls every callback given to ``run``/``execute``
with it, in order. ``chief_only`` (the default) keeps to rank 0: the rank in the generation
the rank is in now, so that one rank logs however the job changed.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["configure", "log"]

_queue: Any = None
_configured = False  # inside an elastic job's worker (with callbacks or without)
_warned = False


def configure(queue: Any) -> None:
    """Send what :func:`log` gets to ``queue`` (a ``ray.util.queue.Queue``; None: the call
    has no callbacks, and what is logged is dropped)."""
    global _queue, _configured
    _queue, _configured = queue, True


def log(info_dict: dict[str, Any], chief_only: bool = True) -> None:
    """Send ``info_dict`` to the driver's callbacks; with ``chief_only``, from rank 0 only."""
    global _warned
    if chief_only:
        from hvdcore import basics

        state = basics.current()
        if state is None or state.rank != 0:
            return
    if _queue is not None:
        try:
            _queue.put(info_dict)
        except Exception as exc:  # noqa: BLE001 - logging must never end the training
            if not _warned:
                _warned = True
                warnings.warn(f"ray_logger.log: the driver's queue is gone ({exc}); what is "
                              "logged from now on is dropped", UserWarning, stacklevel=2)
    elif not _configured and not _warned:
        _warned = True
        warnings.warn("ray_logger.log: not inside a function an elastic RayExecutor job runs: "
                      "nothing receives this", UserWarning, stacklevel=2)
