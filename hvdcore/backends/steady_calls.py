"""A control plane's steady calls: one implementation of the steady functions bound to one
tensor's (or one batch's) constants.

The implementations are the compiled module (``hvdcore/backends/_hotpath.c``) and
:mod:`hvdcore.backends.steady_python`, with one signature; a :class:`Transport` says what the
transport arguments are for an implementation (MPI handles, or objects that post the round and
make the data call). :class:`BoundSteady` is the one :class:`SteadyCalls` over both.

A call returns :data:`~hvdcore.backends.round_wire.DONE`,
:data:`~hvdcore.backends.round_wire.NOT_READY` (the round completed, ``recv`` holds it, and it
does not let the data run now) or ``(PENDING, token)``: the round is still in flight, and
``pending(token)`` is its request (an object with ``Test()``). A failed transport call raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

__all__ = ["SteadyCalls", "Transport", "ObjectTransport", "BoundSteady"]


class SteadyCalls(Protocol):
    """Round then data for one cached allreduce (see the module docstring)."""

    compiled: bool
    spin_s: float

    def bind(self, send: bytearray, recv: bytearray, tail: bytes, comm: Any,
             dtype: np.dtype, op: Any) -> Callable[[int, int, Any, Any, int], Any] | None:
        """The call for one tensor: ``call(lists, lists_done, src, dst, count)`` writes the
        steady header and ``tail`` into ``send``, posts the round and polls it for ``spin_s``;
        when the round lets the data run
        (:func:`~hvdcore.backends.round_wire.data_may_run`), it allreduces ``count``
        elements of ``dtype`` from ``src`` into ``dst`` (in place if they are the same array)
        with ``op`` on ``comm``. It returns DONE, NOT_READY or ``(PENDING, token)``. None when
        this dtype has no direct call."""

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
        that the data may run now. None when there is none."""

    def bind_batch_data(self, comm: Any, dtype: np.dtype, op: Any
                        ) -> Callable[..., Any] | None:
        """The data part of :meth:`bind_batch`'s call, for a batch whose round completed
        later: ``call(arrays, places, gaps, buf, count, scale, post)``."""

    def pending(self, token: Any) -> Any:
        """The round request (an object with ``Test()``) of a call that returned
        ``(PENDING, token)``."""


class Transport(Protocol):
    """What one implementation takes for the transport: the round's argument, and the data
    call's (``comm``, ``dtype``, ``op``) from what the data plane's ``direct_allreduce`` gave;
    ``dtype`` is None when this dtype has no direct call."""

    rounds: Any

    def comm(self, comm: Any) -> Any: ...

    def dtype(self, dtype: np.dtype) -> Any: ...

    def op(self, op: Any) -> Any: ...

    def pending(self, token: Any) -> Any: ...


class ObjectTransport:
    """The :class:`Transport` of :mod:`hvdcore.backends.steady_python`: ``rounds`` (an object
    that posts a round and waits for it), the data call ``data(comm)`` made from the plane's
    communicator, and the dtype, op and pending round as they are."""

    def __init__(self, rounds: Any, data: Callable[[Any], Any]) -> None:
        self.rounds = rounds
        self._data = data

    def comm(self, comm: Any) -> Any:
        """The data call's object for ``comm`` (``allreduce(src, dst, op)``)."""
        return self._data(comm)

    @staticmethod
    def dtype(dtype: np.dtype) -> Any:
        """The dtype as it is: the arrays carry it."""
        return dtype

    @staticmethod
    def op(op: Any) -> Any:
        """The op as the plane's table gave it."""
        return op

    @staticmethod
    def pending(token: Any) -> Any:
        """The round request itself."""
        return token


class BoundSteady:
    """:class:`SteadyCalls` from an implementation of the steady functions (the compiled
    module or :mod:`hvdcore.backends.steady_python`: ``steady``, ``steady_batch``,
    ``round_only``, ``batch_data``) and its :class:`Transport`."""

    compiled = False

    def __init__(self, impl: Any, transport: Transport, spin_s: float) -> None:
        self.spin_s = spin_s
        self._impl = impl
        self._t = transport
        self._spin_ns = int(spin_s * 1e9)
        self.pending = transport.pending

    def _data(self, comm: Any, dtype: np.dtype, op: Any) -> tuple[Any, Any, Any] | None:
        t = self._t
        dt = t.dtype(dtype)
        return None if dt is None else (t.comm(comm), dt, t.op(op))

    def bind(self, send: bytearray, recv: bytearray, tail: bytes, comm: Any,
             dtype: np.dtype, op: Any) -> Callable[[int, int, Any, Any, int], Any] | None:
        """See :meth:`SteadyCalls.bind`: ``steady`` with this tensor's constants."""
        data = self._data(comm, dtype, op)
        if data is None:
            return None
        return functools.partial(self._impl.steady, self._t.rounds, send, recv, tail,
                                 self._spin_ns, *data)

    def bind_batch(self, send: bytearray, recv: bytearray, tail: bytes, comm: Any,
                   dtype: np.dtype, op: Any) -> Callable[..., Any] | None:
        """See :meth:`SteadyCalls.bind_batch`: ``steady_batch`` with the batch's constants."""
        data = self._data(comm, dtype, op)
        if data is None:
            return None
        return functools.partial(self._impl.steady_batch, self._t.rounds, send, recv, tail,
                                 self._spin_ns, *data)

    def bind_round(self, send: bytearray, recv: bytearray, tail: bytes
                   ) -> Callable[[int, int], Any] | None:
        """See :meth:`SteadyCalls.bind_round`: ``round_only``."""
        return functools.partial(self._impl.round_only, self._t.rounds, send, recv, tail,
                                 self._spin_ns)

    def bind_batch_data(self, comm: Any, dtype: np.dtype, op: Any
                        ) -> Callable[..., Any] | None:
        """See :meth:`SteadyCalls.bind_batch_data`: ``batch_data``."""
        data = self._data(comm, dtype, op)
        if data is None:
            return None
        return functools.partial(self._impl.batch_data, *data)
