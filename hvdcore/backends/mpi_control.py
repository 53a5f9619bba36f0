"""The control plane over MPI: what the engines of a job say to each other.

Two private duplicates of the job's communicator keep engine traffic apart from user MPI calls
and from the data plane: one for point-to-point messages (announcements to the coordinator,
response lists back), one for the response cache's rounds (a non-blocking bitwise-or
allreduce, created only when the cache is on).
"""

from __future__ import annotations

from typing import Any

from mpi4py import MPI

from hvdcore.backends.base import spin_round

__all__ = ["MPIControlPlane"]


class MPIControlPlane:
    """:class:`~hvdcore.backends.base.ControlPlane` over duplicates of an mpi4py communicator."""

    #: How long a caller polls a round it posted (a few polls: the peers are usually
    #: microseconds behind, and an MPI round then takes about as long).
    round_wait_s = 30e-6

    def __init__(self, world: Any, rounds: bool) -> None:
        self.rank: int = world.Get_rank()
        self.size: int = world.Get_size()
        self._p2p = world.Dup()
        self._rounds = world.Dup() if rounds else None
        self._sends: list[tuple[Any, bytes]] = []
        self._status = MPI.Status()
        self._round_key: tuple[int, int] | None = None
        self._round_msgs: tuple[list[Any], list[Any]] | None = None

    def send(self, payload: bytes, dest: int, tag: int) -> None:
        """See :meth:`ControlPlane.send`."""
        self._sends.append((self._p2p.Isend([payload, MPI.BYTE], dest, tag), payload))

    def flush(self) -> bool:
        """See :meth:`ControlPlane.flush`."""
        if self._sends:
            self._sends = [s for s in self._sends if not s[0].Test()]
        return bool(self._sends)

    def receive(self, source: int | None, tag: int) -> tuple[int, bytes | bytearray] | None:
        """See :meth:`ControlPlane.receive`."""
        status = self._status
        msg = self._p2p.improbe(source=MPI.ANY_SOURCE if source is None else source, tag=tag,
                                status=status)
        if msg is None:
            return None
        buf = bytearray(status.Get_count(MPI.BYTE))
        msg.Recv([buf, MPI.BYTE])
        return status.Get_source(), buf

    def start_round(self, send: bytearray, recv: bytearray) -> Any:
        """See :meth:`ControlPlane.start_round`."""
        if self._rounds is None:
            raise RuntimeError("this control plane was made without cache rounds")
        key = (id(send), id(recv))
        if self._round_key != key:  # the engine reuses one pair of buffers
            self._round_key = key
            self._round_msgs = ([send, MPI.UINT64_T], [recv, MPI.UINT64_T])
        assert self._round_msgs is not None
        return self._rounds.Iallreduce(self._round_msgs[0], self._round_msgs[1], op=MPI.BOR)

    def wait_round(self, request: Any, timeout_s: float) -> bool:
        """See :meth:`ControlPlane.wait_round`: polls the MPI request."""
        return spin_round(request, timeout_s)

    def steady_calls(self, spin_s: float, compiled: bool) -> Any:
        """The round-then-data calls of the steady path on this plane's round communicator
        (:func:`hvdcore.backends.mpi_steady.make`), or None without cache rounds."""
        if self._rounds is None:
            return None
        from hvdcore.backends import mpi_steady

        return mpi_steady.make(self._rounds, spin_s, compiled)

    def split(self, parent: Any, member: bool, key: int) -> Any:
        """See :meth:`ControlPlane.split`."""
        comm = parent.Split(0 if member else MPI.UNDEFINED, key)
        return comm if member else None

    def free(self, comm: Any) -> None:
        """See :meth:`ControlPlane.free`."""
        comm.Free()

    def close(self) -> None:
        """See :meth:`ControlPlane.close`."""
        for comm in (self._p2p, self._rounds):
            if comm is not None:
                comm.Free()
        self._rounds = None

    def abort(self, code: int) -> None:
        """See :meth:`ControlPlane.abort` (MPI_Abort on the whole job, not just this group)."""
        MPI.COMM_WORLD.Abort(code)
