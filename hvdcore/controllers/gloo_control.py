"""The Gloo controller's control plane: messages through the TCPStore, rounds over Gloo.

Gloo's point-to-point receives cannot be polled (a posted receive completes only inside a
blocking wait), and the engine's :meth:`~hvdcore.backends.base.ControlPlane.receive` must never
block. So announcements and response lists go through the job's TCPStore, one queue per
(destination, tag): a sender takes the next slot number with the store's atomic ``add`` and
writes ``sender rank + payload`` there. On the receiving rank one thread per tag waits for its
next slot (``store.wait`` on a connection of its own) and hands each message to a local queue,
so the engine's poll costs no round trip. ``close`` wakes the threads by writing their next slot
itself. The response cache's rounds, the hot path, go over connections of their own
(:mod:`hvdcore.controllers.round_mesh`: a Gloo collective costs several times a TCP round
trip); a steady call makes its round there and its data call on the set's Gloo group
(:class:`GlooSteady`, the Python steady calls of :mod:`hvdcore.backends.steady_python`).
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

from hvdcore.backends import steady_python
from hvdcore.backends.steady_calls import BoundSteady, ObjectTransport
from hvdcore.controllers.mesh_data import mesh_allreduce, mesh_fits
from hvdcore.controllers.round_mesh import RoundMesh

__all__ = ["GlooComm", "GlooControlPlane", "GlooData", "GlooSteady"]

_SRC = struct.Struct("!i")
_NP_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.MIN: "min", dist.ReduceOp.MAX: "max",
           dist.ReduceOp.PRODUCT: "prod"}
_CLOSE = b"\xff\xff\xff\xff"  # a slot written by close(): the waiter ends
_FOREVER = datetime.timedelta(days=365)


class GlooComm:
    """A process set's communicator on the Gloo controller: its Gloo group and ranks."""

    __slots__ = ("group", "ranks", "index", "mesh")

    def __init__(self, group: Any, ranks: tuple[int, ...], index: int,
                 mesh: RoundMesh | None = None) -> None:
        self.group = group
        self.ranks = ranks
        self.index = index
        self.mesh = mesh  # the job's round connections (the global set's only): small data

    def Get_rank(self) -> int:  # noqa: N802 - the name SetState.index calls
        """This rank's index in the set."""
        return self.index

    def Get_size(self) -> int:  # noqa: N802
        """The set's size."""
        return len(self.ranks)


class GlooData:
    """The steady path's data call on a set's Gloo group (``data`` of
    :mod:`~hvdcore.backends.steady_python`)."""

    __slots__ = ("group", "mesh", "_opts")

    def __init__(self, comm: GlooComm) -> None:
        self.group = comm.group
        self.mesh = comm.mesh
        self._opts: dict[Any, Any] = {}

    def allreduce(self, src: Any, dst: Any, op: Any) -> None:
        """Allreduce ``src`` into ``dst`` (NumPy arrays; in place when they are one array)
        with the ``torch.distributed`` op ``op``: the process group's call, as
        ``dist.all_reduce`` makes it once its per-call checks pass (the engine checked the
        tensor when it cached it)."""
        if self.mesh is not None and mesh_fits(self.mesh, dst):
            mesh_allreduce(self.mesh, src, dst, _NP_OPS[op])
            return
        if src is not dst:
            dst[...] = src
        flat = dst.reshape(-1)
        opts = self._opts.get(op)
        if opts is None:
            opts = self._opts[op] = dist.AllreduceOptions()
            opts.reduceOp = op
        tensor = torch.from_numpy(flat.view("uint8") if flat.dtype == bool else flat)
        self.group.allreduce([tensor], opts).wait()


class GlooSteady(BoundSteady):
    """The Gloo controller's steady calls: round on the mesh, data on a Gloo group."""

    def __init__(self, rounds: Any, spin_s: float) -> None:
        super().__init__(steady_python, ObjectTransport(rounds, GlooData), spin_s)


class GlooControlPlane:
    """:class:`~hvdcore.backends.base.ControlPlane` over a TCPStore and Gloo groups."""

    #: How long a caller polls a round it posted before the engine cycle takes it over: a
    #: round here is a TCP round trip per step (tens of microseconds, more on a loaded host).
    round_wait_s = 2e-3

    def __init__(self, rank: int, size: int, store: Any, mesh: RoundMesh, sets: Any,
                 connect: Callable[[], Any]) -> None:
        self.rank = rank
        self.size = size
        self._store = store
        self._connect = connect  # a new connection to the store (for a waiter thread)
        self._mesh = mesh
        self._sets_group = sets
        self._inbox: dict[int, collections.deque[tuple[int, bytes]]] = {}
        self._waiters: dict[int, tuple[threading.Thread, list[int]]] = {}
        self._held: dict[int, list[tuple[int, bytes]]] = {}  # tag -> read, not yet asked for

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

    def receive(self, source: int | None, tag: int) -> tuple[int, bytes | bytearray] | None:
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

    def start_round(self, send: bytearray, recv: bytearray) -> Any:
        """See :meth:`ControlPlane.start_round` (on the round mesh)."""
        return self._mesh.start(send, recv)

    def wait_round(self, request: Any, timeout_s: float) -> bool:
        """See :meth:`ControlPlane.wait_round`: asleep until the round's next message."""
        return request.wait(timeout_s)

    def steady_calls(self, spin_s: float, compiled: bool) -> GlooSteady:
        """See :meth:`ControlPlane.steady_calls` (Python: the compiled call is MPI's)."""
        return GlooSteady(self, spin_s)

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
        self._mesh.close()

    def abort(self, code: int) -> None:
        """See :meth:`ControlPlane.abort`: this process ends; the liveness watchdog and the
        launcher end the others (Gloo has no job-wide abort)."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
