"""The Gloo controller's control plane: messages through the TCPStore, rounds over Gloo.

Gloo's point-to-point receives cannot be polled (a posted receive completes only inside a
blocking wait), and the engine's :meth:`~hvdcore.backends.base.ControlPlane.receive` must never
block. So announcements and response lists go through the job's TCPStore, one queue per
(destination, tag): a sender takes the next slot number with the store's atomic ``add`` and
writes ``sender rank + payload`` there. On the receiving rank one thread per tag waits for its
next slot (``store.wait`` on a connection of its own) and hands each message to a local queue,
so the engine's poll costs no round trip. ``close`` wakes the threads by writing their next slot
itself. The response cache's rounds, the hot path, are a non-blocking bitwise-or allreduce on a
private Gloo group, polled with ``Work.is_completed()``.
"""

from __future__ import annotations

import collections
import datetime
import os
import struct
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["GlooComm", "GlooControlPlane"]

_SRC = struct.Struct("!i")
_CLOSE = b"\xff\xff\xff\xff"  # a slot written by close(): the waiter ends
_FOREVER = datetime.timedelta(days=365)


class GlooComm:
    """A process set's communicator on the Gloo controller: its Gloo group and ranks."""

    __slots__ = ("group", "ranks", "index")

    def __init__(self, group: Any, ranks: tuple[int, ...], index: int) -> None:
        self.group = group
        self.ranks = ranks
        self.index = index

    def Get_rank(self) -> int:  # noqa: N802 - the name SetState.index calls
        """This rank's index in the set."""
        return self.index

    def Get_size(self) -> int:  # noqa: N802
        """The set's size."""
        return len(self.ranks)


class _Round:
    """An outstanding round: mpi4py's ``Request.Test`` over a Gloo ``Work``."""

    __slots__ = ("_work",)

    def __init__(self, work: Any) -> None:
        self._work = work

    def Test(self) -> bool:  # noqa: N802 - RoundRequest's name
        """True once the round completed (raises the round's error, if any)."""
        if self._work.is_completed():
            self._work.wait()
            return True
        return False


class GlooControlPlane:
    """:class:`~hvdcore.backends.base.ControlPlane` over a TCPStore and Gloo groups."""

    def __init__(self, rank: int, size: int, store: Any, rounds: Any, sets: Any,
                 connect: Callable[[], Any]) -> None:
        self.rank = rank
        self.size = size
        self._store = store
        self._connect = connect  # a new connection to the store (for a waiter thread)
        self._rounds_group = rounds
        self._sets_group = sets
        self._inbox: dict[int, collections.deque[tuple[int, bytes]]] = {}
        self._waiters: dict[int, tuple[threading.Thread, list[int]]] = {}
        self._held: dict[int, list[tuple[int, bytes]]] = {}  # tag -> read, not yet asked for
        self._round_key: tuple[int, int] | None = None
        self._round_tensors: tuple[torch.Tensor, torch.Tensor] | None = None

    def send(self, payload: bytes, dest: int, tag: int) -> None:
        """See :meth:`ControlPlane.send` (done when it returns: the store holds it)."""
        slot = self._store.add(f"q/{dest}/{tag}", 1)
        self._store.set(f"q/{dest}/{tag}/{slot}", _SRC.pack(self.rank) + bytes(payload))

    def flush(self) -> bool:
        """See :meth:`ControlPlane.flush`: nothing is ever in flight."""
        return False

    def _wait_loop(self, tag: int, inbox: collections.deque, next_slot: list[int]) -> None:
        store = self._connect()
        while True:
            key = f"q/{self.rank}/{tag}/{next_slot[0]}"
            try:
                store.wait([key], _FOREVER)
                raw = store.get(key)
                store.delete_key(key)
            except Exception:  # noqa: BLE001 - the store is gone: the job is ending
                return
            if raw == _CLOSE:
                return
            next_slot[0] += 1
            inbox.append((_SRC.unpack_from(raw)[0], bytearray(raw[_SRC.size:])))

    def receive(self, source: int | None, tag: int) -> tuple[int, bytes] | None:
        """See :meth:`ControlPlane.receive` (a local queue: no round trip)."""
        held = self._held.get(tag)
        if held:
            for i, (src, body) in enumerate(held):
                if source is None or src == source:
                    del held[i]
                    return src, body
        inbox = self._inbox.get(tag)
        if inbox is None:
            inbox = self._inbox[tag] = collections.deque()
            slot = [1]
            thread = threading.Thread(target=self._wait_loop, args=(tag, inbox, slot),
                                      name=f"hvdcore-gloo-inbox-{tag}", daemon=True)
            self._waiters[tag] = (thread, slot)
            thread.start()
        while inbox:
            src, body = inbox.popleft()
            if source is None or src == source:
                return src, body
            self._held.setdefault(tag, []).append((src, body))
        return None

    def start_round(self, send: bytearray, recv: bytearray) -> _Round:
        """See :meth:`ControlPlane.start_round` (the uint64 words as int64: same bits)."""
        key = (id(send), id(recv))
        if self._round_key != key:  # the engine reuses one pair of buffers
            self._round_key = key
            self._round_tensors = (torch.frombuffer(send, dtype=torch.int64),
                                   torch.frombuffer(recv, dtype=torch.int64))
        assert self._round_tensors is not None
        src, dst = self._round_tensors
        dst.copy_(src)
        return _Round(dist.all_reduce(dst, op=dist.ReduceOp.BOR, group=self._rounds_group,
                                      async_op=True))

    def steady_calls(self, spin_s: float, compiled: bool) -> None:
        """None: the compiled round-and-data call is MPI's."""
        return None

    def split(self, parent: GlooComm, member: bool, key: int) -> GlooComm | None:
        """See :meth:`ControlPlane.split` (collective over the job, as ``new_group`` is)."""
        flags = [None] * self.size
        dist.all_gather_object(flags, bool(member), group=self._sets_group)
        ranks = tuple(r for r, f in enumerate(flags) if f)  # world ranks, as parent's
        group = dist.new_group(ranks=list(ranks), backend="gloo")
        return GlooComm(group, ranks, ranks.index(self.rank)) if member else None

    def free(self, comm: GlooComm) -> None:
        """See :meth:`ControlPlane.free`."""
        if comm.group is not None and comm.group is not dist.GroupMember.WORLD:
            try:
                dist.destroy_process_group(comm.group)
            except (ValueError, RuntimeError):  # already gone with the default group
                pass

    def close(self) -> None:
        """See :meth:`ControlPlane.close`: the waiters end (the groups go with the default
        group). Called after the engine stopped: no message is in flight any more."""
        for tag, (thread, slot) in self._waiters.items():
            self._store.set(f"q/{self.rank}/{tag}/{slot[0]}", _CLOSE)
            thread.join(timeout=10)
        self._waiters.clear()
        self._round_tensors = None
        self._round_key = None

    def abort(self, code: int) -> None:
        """See :meth:`ControlPlane.abort`: this process ends; the liveness watchdog and the
        launcher end the others (Gloo has no job-wide abort)."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
