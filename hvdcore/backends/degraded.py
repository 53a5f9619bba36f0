"""A deliberately slowed data plane, for proving that performance checks can fail.

Tests only. ``FAULTS_DATA_PATH`` (outside the ``HVDCORE_`` knob table on purpose: it is not a
tuning knob) wraps the real backend so that every collective does real extra work:

``repeat=N``
    every data collective runs N times: N-1 extra calls on a scratch copy of the input, then
    the real one (results unchanged, bandwidth divided by about N);
``delay_us=D``
    sleep D microseconds before every data collective (latency and training throughput);
``scale=F``
    every data collective takes F times as long (F >= 1): after the real call, sleep F-1 times
    what it took (a uniformly slower data path at every message size: ``scale=1.5`` is the
    nightly suite's "1.5x slower" degradation).

They may be combined: ``FAULTS_DATA_PATH="repeat=3,delay_us=2000"``. Two more parts say where
(issue 59: one real degradation of one collective on one plane):

``op=NAME``
    only that collective is slowed: ``allreduce``, ``allgather``, ``broadcast``, ``alltoall``
    or ``reducescatter`` (default: every data collective);
``plane=host|device``
    the plane slowed: ``host`` (the core's MPI data plane, the default, as before) or
    ``device`` (a framework's torch.distributed plane: NCCL/RCCL, or Gloo with
    ``HVDCORE_CPU_OPERATIONS=gloo``; ``delay_us`` and ``scale`` only).

The variable is read once, at ``init()``; a malformed value is a
:class:`~hvdcore.errors.ConfigError`.

    >>> parse("repeat=2,delay_us=50")
    DataPathFault(repeat=2, delay_s=4.9999999999999996e-05, scale=1.0, op=None, plane='host')
    >>> parse("scale=3,op=alltoall,plane=device").op
    'alltoall'
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hvdcore import errors
from hvdcore.backends.base import PLAIN, PlaneCapabilities

__all__ = ["ENV_VAR", "OPS", "PLANES", "DataPathFault", "DegradedBackend", "parse",
           "wrap_from_env"]

ENV_VAR = "FAULTS_DATA_PATH"
_log = logging.getLogger("hvdcore")
#: The collectives ``op=`` names, by the backend methods that carry them.
OPS = {"allreduce": "allreduce", "allgather": "allgatherv", "broadcast": "broadcast",
       "alltoall": "alltoallv", "reducescatter": "reduce_scatter"}
PLANES = ("host", "device")


@dataclass(frozen=True)
class DataPathFault:
    """How much slower the data path is made."""

    repeat: int = 1
    delay_s: float = 0.0
    scale: float = 1.0
    #: The one collective slowed (a key of :data:`OPS`), None: all of them.
    op: str | None = None
    #: The plane slowed (one of :data:`PLANES`).
    plane: str = "host"

    def slows(self, method: str) -> bool:
        """Whether the backend method ``method`` is slowed."""
        return self.op is None or OPS[self.op] == method


def parse(text: str) -> DataPathFault:
    """``"repeat=N,delay_us=D,scale=F,op=NAME,plane=P"`` (each part optional) ->
    :class:`DataPathFault`."""
    repeat, delay_s, scale = 1, 0.0, 1.0
    op: str | None = None
    plane = "host"
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = item.partition("=")
        try:
            if key == "op":
                op, ok = value, value in OPS
            elif key == "plane":
                plane, ok = value, value in PLANES
            elif key == "repeat":
                repeat = int(value)
                ok = repeat >= 1
            elif key == "delay_us":
                delay_s = float(value) * 1e-6
                ok = delay_s >= 0
            elif key == "scale":
                scale = float(value)
                ok = scale >= 1.0
            else:
                ok = False
        except ValueError:
            ok = False
        if not ok:
            raise errors.ConfigError(
                f"{ENV_VAR}={text!r}: expected comma-separated repeat=N (N >= 1), "
                f"delay_us=D (D >= 0), scale=F (F >= 1), op={'|'.join(OPS)} and/or "
                f"plane={'|'.join(PLANES)}, got {item!r}")
    if plane == "device" and repeat > 1:
        raise errors.ConfigError(f"{ENV_VAR}={text!r}: repeat=N slows the host plane only; "
                                 "use delay_us=D or scale=F with plane=device")
    return DataPathFault(repeat, delay_s, scale, op, plane)


def _pause(seconds: float) -> None:
    """Wait ``seconds``: spinning below 1 ms, where ``time.sleep`` oversleeps by ~50 us."""
    end = time.perf_counter() + seconds
    if seconds > 1e-3:
        time.sleep(seconds - 2e-4)
    while time.perf_counter() < end:
        pass


class DegradedBackend:
    """Wraps a :class:`~hvdcore.backends.base.Backend`; same results, more time."""

    def __init__(self, inner: Any, fault: DataPathFault) -> None:
        self.inner = inner
        self.fault = fault
        self.name = inner.name
        self._scratch: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._fastest: dict[tuple, float] = {}

    def _scratch_pair(self, buf: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Reused, so that the cost added is the extra collectives, not fresh-page faults.
        key = (buf.shape, buf.dtype.str, out.shape, out.dtype.str)
        pair = self._scratch.get(key)
        if pair is None:
            pair = self._scratch[key] = (np.empty_like(buf), np.empty_like(out))
        np.copyto(pair[0], buf)
        return pair

    def _waste(self, call: Any, *args: Any) -> None:
        if self.fault.delay_s:
            time.sleep(self.fault.delay_s)
        for _ in range(self.fault.repeat - 1):
            call(*args)

    def _real(self, call: Any, *args: Any) -> None:
        """The real call, then ``scale - 1`` times its cost asleep.

        The cost is the fastest this call (operation and buffer sizes) has been: one call's
        own time includes waiting for ranks still asleep after the last one, and scaling that
        would compound into a much larger slowdown than ``scale``.
        """
        if self.fault.scale == 1.0:
            call(*args)
            return
        # (NumPy arrays and torch tensors both have nbytes)
        key = (call.__name__, *(a.nbytes for a in args if hasattr(a, "nbytes")))
        t0 = time.perf_counter()
        call(*args)
        took = time.perf_counter() - t0
        cost = self._fastest[key] = min(took, self._fastest.get(key, took))
        _pause((self.fault.scale - 1.0) * cost)

    def allreduce(self, pset: Any, buf: np.ndarray, out: np.ndarray, op: str) -> None:
        """Extra allreduces of a scratch copy (in-place results must not be reduced twice)."""
        if not self.fault.slows("allreduce"):
            self.inner.allreduce(pset, buf, out, op)
            return
        src, dst = self._scratch_pair(buf, out) if self.fault.repeat > 1 else (buf, out)
        self._waste(self.inner.allreduce, pset, src, dst, op)
        self._real(self.inner.allreduce, pset, buf, out, op)

    def allreduce_pieces(self, pset: Any, srcs: list[np.ndarray], out: np.ndarray,
                         op: str) -> None:
        """The fused call through :meth:`allreduce` (so that it is slowed too)."""
        self.inner.concat_into(srcs, out)
        self.allreduce(pset, out, out, op)

    def allgatherv(self, pset: Any, buf: np.ndarray, out: np.ndarray, counts: list[int]) -> None:
        if not self.fault.slows("allgatherv"):
            self.inner.allgatherv(pset, buf, out, counts)
            return
        self._waste(self.inner.allgatherv, pset, buf, out, counts)
        self._real(self.inner.allgatherv, pset, buf, out, counts)

    def broadcast(self, pset: Any, buf: np.ndarray, root: int) -> None:
        if not self.fault.slows("broadcast"):
            self.inner.broadcast(pset, buf, root)
            return
        scratch = buf.copy() if self.fault.repeat > 1 else buf  # the root's data must survive
        self._waste(self.inner.broadcast, pset, scratch, root)
        self._real(self.inner.broadcast, pset, buf, root)

    def alltoallv(self, pset: Any, buf: np.ndarray, send_bytes: list[int], out: np.ndarray,
                  recv_bytes: list[int]) -> None:
        if not self.fault.slows("alltoallv"):
            self.inner.alltoallv(pset, buf, send_bytes, out, recv_bytes)
            return
        self._waste(self.inner.alltoallv, pset, buf, send_bytes, out, recv_bytes)
        self._real(self.inner.alltoallv, pset, buf, send_bytes, out, recv_bytes)

    def reduce_scatter(self, pset: Any, buf: np.ndarray, out: np.ndarray, counts: list[int],
                       op: str) -> None:
        if not self.fault.slows("reduce_scatter"):
            self.inner.reduce_scatter(pset, buf, out, counts, op)
            return
        self._waste(self.inner.reduce_scatter, pset, buf, out, counts, op)
        self._real(self.inner.reduce_scatter, pset, buf, out, counts, op)

    def barrier(self, pset: Any) -> None:
        self.inner.barrier(pset)

    @property
    def capabilities(self) -> PlaneCapabilities:
        """The wrapped plane's, but none while allreduce is slowed: this allreduce is then
        more than the wrapped one's call, so the steady path (which would make that call
        itself, or bind it) must go through :meth:`allreduce`. Never ``two_levels``: its
        switches are the wrapped plane's attributes, which this wrapper does not set."""
        if self.fault.slows("allreduce"):
            return PLAIN
        return replace(self.inner.capabilities, two_levels=False)

    def __getattr__(self, attr: str) -> Any:
        # buffer operations and the rest of the protocol are the wrapped backend's own
        return getattr(self.inner, attr)


def wrap_from_env(backend: Any, environ: Any, rank: int, plane: str = "host") -> Any:
    """``backend`` (a data plane of kind ``plane``: ``host`` or ``device``), wrapped in a
    :class:`DegradedBackend` when ``FAULTS_DATA_PATH`` is set and slows that plane."""
    text = environ.get(ENV_VAR, "")
    if not text:
        return backend
    fault = parse(text)
    if fault.plane != plane:
        return backend
    if rank == 0:
        _log.warning("%s=%s: the data path is deliberately slowed (fault injection)",
                     ENV_VAR, text)
    return DegradedBackend(backend, fault)
