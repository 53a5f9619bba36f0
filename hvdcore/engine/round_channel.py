"""One rank's side of the cache rounds on the control plane.

A round is one non-blocking bitwise-or allreduce of a :class:`~hvdcore.engine.cache.RoundVector`
(the wire form is described in :mod:`hvdcore.engine.cache`). :class:`RoundChannel` owns the two
buffers of that vector, the round in flight, and the control plane's steady calls bound to
those buffers (a round and the data call as one call: :mod:`hvdcore.backends.mpi_steady`).
What a round means, and in which order completed rounds run, is
:class:`~hvdcore.engine.rounds.RoundScheduler`'s business.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from hvdcore.engine.cache import RoundVector

__all__ = ["RoundChannel", "RoundResult"]

_ROUND_SPIN_S = 30e-6

RoundResult = tuple[int, int, list[int], list[int]]
"""A reduced round: (lists before it, flags, ready ids among this rank's hits, invalid ids)."""


class RoundChannel:
    """The round buffers, the outstanding round and the bound steady calls of one rank."""

    def __init__(self, capacity: int, plane: Any, hotpath: bool) -> None:
        self._vector = RoundVector(capacity)
        self._send = self._vector.buffer()
        self._recv = self._vector.buffer()
        self._plane = plane
        self._offered: list[int] = []  # the ids this rank offered in the last round
        self.request: Any = None  # the round in flight (an object with ``Test()``), or None
        make = getattr(plane, "steady_calls", None)
        #: The control plane's steady calls (compiled where they can be: HVDCORE_HOTPATH).
        self.calls = make(_ROUND_SPIN_S, hotpath) if make else None

    def post(self, lists: int, flags: int, hits: list[int], invalid: Iterable[int]) -> None:
        """Post a round offering ``hits`` (and dropping ``invalid``)."""
        self._offered = hits
        self._vector.pack(self._send, lists, flags, hits, invalid)
        self.request = self._plane.start_round(self._send, self._recv)

    def test(self) -> RoundResult | None:
        """The outstanding round's result once it completed, else None. The peers are
        usually microseconds behind, and a non-blocking collective only advances inside MPI
        calls: it is polled in a tight loop for a moment before giving up for now."""
        req = self.request
        if not req.Test():
            t_end = time.perf_counter() + _ROUND_SPIN_S
            while not req.Test():
                if time.perf_counter() > t_end:
                    return None
        self.request = None
        return self.result()

    def result(self) -> RoundResult:
        """The last completed round's result (for the ids this rank offered)."""
        return self._vector.unpack(self._recv, self._offered, self._send)

    def steady(self, call: Callable[..., Any], lists: int, lists_done: int, hits: list[int],
               args: tuple[Any, ...]) -> Any:
        """Make a bound steady call (:meth:`bind`) offering ``hits``; its outcome (DONE,
        NOT_READY, or (PENDING, token): the round is then :attr:`request`)."""
        self._offered = hits
        got = call(lists, lists_done, *args)
        if type(got) is tuple:
            self.request = self.calls.pending(got[1])  # type: ignore[union-attr]
        return got

    def bind(self, cids: list[int], comm: Any, dtype: np.dtype, op: Any, batch: bool = False
             ) -> tuple[Callable[..., Any], Callable[..., Any] | None] | None:
        """The steady call offering ``cids`` with its data call on ``comm`` (and, for a batch,
        its data part alone); None when the control plane has none for this dtype."""
        calls = self.calls
        if calls is None:
            return None
        tail = self._vector.tail(cids)
        if not batch:
            call = calls.bind(self._send, self._recv, tail, comm, dtype, op)
            return None if call is None else (call, None)
        call = calls.bind_batch(self._send, self._recv, tail, comm, dtype, op)
        data = calls.bind_batch_data(comm, dtype, op)
        return None if call is None or data is None else (call, data)
