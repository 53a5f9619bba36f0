"""The steady path's two MPI calls, the cache round and the data allreduce, made as one.

:class:`~hvdcore.engine.steady.SteadyPath` runs a blocking allreduce of a cached host
tensor on an idle engine through a :class:`SteadyCalls`:
post the round with this rank's bits, poll it briefly, and when every rank offered the same
tensor, allreduce the data. :class:`CompiledSteady` makes all of it in one C call without the
GIL (``hvdcore/backends/_hotpath.c``, built when the package is installed where ``mpicc`` is);
:class:`PythonSteady` makes the same MPI calls through mpi4py. Both follow the round's one
description, :mod:`hvdcore.backends.round_wire` (the C module through the header generated
from it). They return the same results (the same two MPI calls on the same buffers); the C
one costs less at small sizes.

``bind_batch`` does the same for a fused allreduce of several tensors reduced in place (a
training step's gradients, :meth:`~hvdcore.engine.steady_batch.SteadyBatches.steady_batch`): after
the round, the copies into the fusion buffer, the data call and the copies back, scaled as
the executor scales them.

A call returns :data:`DONE`, :data:`NOT_READY` (the round completed, ``recv`` holds it, and it
does not let the data run now) or ``(PENDING, token)``: the round is still in flight, and
``pending(token)`` is its request (an object with ``Test()``). An MPI error raises (mpi4py's
``MPI.Exception``, or the compiled module's ``MPIError``, a RuntimeError naming the call).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from mpi4py import MPI

from hvdcore.backends import hotpath, round_wire
from hvdcore.backends.round_wire import DONE, NOT_READY, PENDING

__all__ = ["DONE", "NOT_READY", "PENDING", "SteadyCalls", "CompiledSteady", "PythonSteady", "make",
           "compiled_module"]

log = logging.getLogger("hvdcore")

_HEADER_BYTES = round_wire.HEADER_BYTES
_HEAD = round_wire.HEADER
_may_run = round_wire.data_may_run


def compiled_module() -> tuple[Any | None, str]:
    """The compiled hot path if it can run in this process, and why not otherwise
    (:func:`hvdcore.backends.hotpath.decide` with mpi4py's MPI library)."""
    return hotpath.decide(MPI.Get_library_version())


class SteadyCalls(Protocol):
    """Round then data for one cached allreduce (see the module docstring)."""

    compiled: bool
    spin_s: float

    def bind(self, send: bytearray, recv: bytearray, tail: bytes, comm: Any,
             dtype: np.dtype, op: Any) -> Callable[[int, int, Any, Any, int], Any] | None:
        """The call for one tensor: ``call(lists, lists_done, src, dst, count)`` writes the
        header ``[lists, 0]`` and ``tail`` into ``send``, posts the round on the plane's round
        communicator and polls it for ``spin_s``; when the round lets the data run
        (:func:`~hvdcore.backends.round_wire.data_may_run`), it allreduces ``count``
        elements of ``dtype`` from ``src`` into ``dst`` (in place if they are the same array)
        with ``op`` (an mpi4py Op) on ``comm``. It returns DONE, NOT_READY or ``(PENDING,
        token)``, where :meth:`pending` turns ``token`` into the round's request. None when
        this dtype has no direct MPI call."""

    def bind_batch(self, send: bytearray, recv: bytearray, tail: bytes, comm: Any,
                   dtype: np.dtype, op: Any) -> Callable[..., Any] | None:
        """The call for a fused in-place batch: ``call(lists, lists_done, arrays, places,
        gaps, buf, count, scale, post)`` makes the round as :meth:`bind`'s call does; when it
        lets the data run, copies each array into ``buf`` at its place (``places``: an int64
        array of (byte offset, byte length) rows, one per array), zeroes the ``gaps`` (rows
        of byte offset and length), allreduces ``count`` elements of ``buf`` in place and
        copies each array's part back, multiplied by ``post`` unless ``scale`` is 0 (1:
        float32, 2: float64). Same returns; the arrays are untouched unless DONE."""

    def bind_round(self, send: bytearray, recv: bytearray, tail: bytes
                   ) -> Callable[[int, int], Any] | None:
        """The round of :meth:`bind`'s call alone, ``call(lists, lists_done)``, for a data
        call the caller makes itself (a data plane's tensor): the same returns, DONE meaning
        that the data may run now. None when there is none (a compiled module built
        before it had one)."""

    def bind_batch_data(self, comm: Any, dtype: np.dtype, op: Any
                        ) -> Callable[..., Any] | None:
        """The data part of :meth:`bind_batch`'s call, for a batch whose round completed
        later: ``call(arrays, places, gaps, buf, count, scale, post)``."""

    def pending(self, token: Any) -> Any:
        """The round request (an object with ``Test()``) of a call that returned
        ``(PENDING, token)``."""


class CompiledSteady:
    """:class:`SteadyCalls` in C (``hvdcore.backends._hotpath.steady``): one call, no GIL."""

    compiled = True

    def __init__(self, rounds: Any, spin_s: float, module: Any) -> None:
        self.spin_s = spin_s
        self._steady = module.steady
        self._batch = module.steady_batch
        self._batch_data = module.batch_data
        self._round_only = getattr(module, "round_only", None)
        self._rounds_handle = rounds.handle
        self._spin_ns = int(spin_s * 1e9)

    def bind(self, send: bytearray, recv: bytearray, tail: bytes, comm: Any,
             dtype: np.dtype, op: Any) -> Callable[[int, int, Any, Any, int], Any] | None:
        """See :meth:`SteadyCalls.bind`: the C function with this tensor's constants."""
        try:
            mtype = MPI.Datatype.fromcode(dtype.char)
        except (KeyError, ValueError):
            return None
        return functools.partial(self._steady, self._rounds_handle, send, recv, tail,
                                 self._spin_ns, comm.handle, mtype.handle, op.handle)

    def bind_batch(self, send: bytearray, recv: bytearray, tail: bytes, comm: Any,
                   dtype: np.dtype, op: Any) -> Callable[..., Any] | None:
        """See :meth:`SteadyCalls.bind_batch`: ``_hotpath.steady_batch`` with the batch's
        constants."""
        try:
            mtype = MPI.Datatype.fromcode(dtype.char)
        except (KeyError, ValueError):
            return None
        return functools.partial(self._batch, self._rounds_handle, send, recv, tail,
                                 self._spin_ns, comm.handle, mtype.handle, op.handle)

    def bind_round(self, send: bytearray, recv: bytearray, tail: bytes
                   ) -> Callable[[int, int], Any] | None:
        """See :meth:`SteadyCalls.bind_round`: ``_hotpath.round_only``."""
        if self._round_only is None:
            return None
        return functools.partial(self._round_only, self._rounds_handle, send, recv, tail,
                                 self._spin_ns)

    def bind_batch_data(self, comm: Any, dtype: np.dtype, op: Any
                        ) -> Callable[..., Any] | None:
        """See :meth:`SteadyCalls.bind_batch_data`: ``_hotpath.batch_data``."""
        try:
            mtype = MPI.Datatype.fromcode(dtype.char)
        except (KeyError, ValueError):
            return None
        return functools.partial(self._batch_data, comm.handle, mtype.handle, op.handle)

    def pending(self, token: Any) -> Any:
        """See :meth:`SteadyCalls.pending`: ``token`` is the MPI request handle."""
        return MPI.Request.fromhandle(token)


class PythonSteady:
    """:class:`SteadyCalls` through mpi4py (when the compiled module is not there)."""

    compiled = False

    def __init__(self, rounds: Any, spin_s: float) -> None:
        self.rounds = rounds
        self.spin_s = spin_s

    def bind(self, send: bytearray, recv: bytearray, tail: bytes, comm: Any,
             dtype: np.dtype, op: Any) -> Callable[[int, int, Any, Any, int], Any] | None:
        """See :meth:`SteadyCalls.bind`."""
        return functools.partial(self._call, [send, MPI.UINT64_T], [recv, MPI.UINT64_T], tail,
                                 comm, op)

    def bind_batch(self, send: bytearray, recv: bytearray, tail: bytes, comm: Any,
                   dtype: np.dtype, op: Any) -> Callable[..., Any] | None:
        """See :meth:`SteadyCalls.bind_batch`."""
        return functools.partial(self._batch, [send, MPI.UINT64_T], [recv, MPI.UINT64_T],
                                 tail, comm, op)

    def bind_round(self, send: bytearray, recv: bytearray, tail: bytes
                   ) -> Callable[[int, int], Any] | None:
        """See :meth:`SteadyCalls.bind_round`."""
        return functools.partial(self._round, [send, MPI.UINT64_T], [recv, MPI.UINT64_T], tail)

    def bind_batch_data(self, comm: Any, dtype: np.dtype, op: Any
                        ) -> Callable[..., Any] | None:
        """See :meth:`SteadyCalls.bind_batch_data`."""
        return functools.partial(self._batch_data, comm, op)

    def pending(self, token: Any) -> Any:
        """See :meth:`SteadyCalls.pending`: ``token`` is the mpi4py request itself."""
        return token

    def _batch(self, send_msg: list[Any], recv_msg: list[Any], tail: bytes, comm: Any,
               op: Any, lists: int, lists_done: int, arrays: Any, places: np.ndarray,
               gaps: np.ndarray, buf: np.ndarray, count: int, scale: int, post: float) -> Any:
        got = self._round(send_msg, recv_msg, tail, lists, lists_done)
        if got != DONE:
            return got
        self._batch_data(comm, op, arrays, places, gaps, buf, count, scale, post)
        return DONE

    @staticmethod
    def _batch_data(comm: Any, op: Any, arrays: Any, places: np.ndarray, gaps: np.ndarray,
                    buf: np.ndarray, count: int, scale: int, post: float) -> None:
        size = buf.itemsize
        flat = buf[:count]
        slots = [flat[off // size:(off + nbytes) // size] for off, nbytes in places.tolist()]
        for arr, slot in zip(arrays, slots, strict=True):
            np.copyto(slot, arr.reshape(-1))
        for off, nbytes in gaps.tolist():
            flat[off // size:(off + nbytes) // size] = 0
        comm.Allreduce(MPI.IN_PLACE, flat, op=op)
        for arr, slot in zip(arrays, slots, strict=True):
            if scale:  # as the executor's unpacking does it
                np.multiply(slot, post, out=arr.reshape(-1), casting="unsafe")
            else:
                np.copyto(arr.reshape(-1), slot)

    def _call(self, send_msg: list[Any], recv_msg: list[Any], tail: bytes, comm: Any, op: Any,
              lists: int, lists_done: int, src: np.ndarray, dst: np.ndarray, count: int) -> Any:
        got = self._round(send_msg, recv_msg, tail, lists, lists_done)
        if got != DONE:
            return got
        comm.Allreduce(MPI.IN_PLACE if src is dst else src, dst, op=op)
        return DONE

    def _round(self, send_msg: list[Any], recv_msg: list[Any], tail: bytes, lists: int,
               lists_done: int) -> Any:
        send, recv = send_msg[0], recv_msg[0]
        _HEAD.pack_into(send, 0, lists, 0)
        if not send.endswith(tail):
            send[_HEADER_BYTES:] = tail
        req = self.rounds.Iallreduce(send_msg, recv_msg, op=MPI.BOR)
        if not req.Test():
            t_end = time.perf_counter() + self.spin_s
            while not req.Test():
                if time.perf_counter() > t_end:
                    return PENDING, req
        return DONE if _may_run(recv, tail, lists_done) else NOT_READY


def make(rounds: Any, spin_s: float, compiled: bool) -> SteadyCalls:
    """The :class:`SteadyCalls` for cache rounds on ``rounds``: the compiled one when
    ``compiled`` is asked for (``HVDCORE_HOTPATH``) and can run here, else mpi4py's."""
    if compiled:
        module, why = compiled_module()
        if module is not None:
            return CompiledSteady(rounds, spin_s, module)
        log.debug("hvdcore: compiled hot path not used: %s", why)
    return PythonSteady(rounds, spin_s)
