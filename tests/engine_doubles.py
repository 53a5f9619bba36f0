"""In-process doubles of the two protocols below the engine (``hvdcore/backends/base.py``), for
the engine's unit tests (``tests/test_engine_*.py``): no MPI, no mpirun.

- :class:`FakeBackend`: a data plane on NumPy buffers. Its collectives compute, in this
  process, what the process set's ranks would get if every other rank held ``peer(buf)``
  (by default the same tensor as this rank): at one rank an allreduce is a copy. It records
  the collectives it was asked for (name, dtype, op) and can be told to fail the next ones.
- :class:`OneRankPlane`: the control plane of a one-rank job (rank 0 hosts the coordinator,
  so nothing is ever sent; a cache round is the or of one contribution: a copy).
- :class:`Wire` / :class:`WirePlane`: the control planes of an n-rank job whose ranks live in
  this process (one engine per rank, stepped by the test): messages go to mailboxes, and a
  cache round completes once every rank has posted it (the or of their contributions).
- :class:`FakeComm`: what a :class:`~hvdcore.engine.executor.SetState` needs of a
  communicator (``Get_rank``).
- :class:`SteadyPlane` / :class:`DirectBackend`: a one-rank plane whose steady calls are the
  real Python implementation (:mod:`hvdcore.backends.steady_python`) over these doubles, and
  a data plane with a direct call (the compiled ones in this process: ``steady_self.py``).

Only the engine is under test: these stand where MPI (or torch.distributed) would be.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hvdcore import config
from hvdcore.backends import steady_python
from hvdcore.backends.base import HOST_DIRECT, PLAIN, spin_round
from hvdcore.backends.steady_calls import BoundSteady, ObjectTransport
from hvdcore.engine.executor import SetState

_NP_OPS = {"sum": np.add, "min": np.minimum, "max": np.maximum, "prod": np.multiply}


class FakeComm:
    """A communicator of one process set, seen from the rank at ``index``."""

    def __init__(self, index: int = 0, size: int = 1) -> None:
        self.index = index
        self.size = size

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's name
        return self.index

    def Get_size(self) -> int:  # noqa: N802 - mpi4py's name
        return self.size


def world(size: int = 1, index: int = 0) -> SetState:
    """The global process set of ``size`` ranks, seen from the rank at ``index``."""
    return SetState(0, tuple(range(size)), FakeComm(index, size))


class FakeBackend:
    """A :class:`~hvdcore.backends.base.Backend` whose collectives run in this process.

    Every other rank of a set contributes ``peer(buf)`` (default: a copy of ``buf``), so a
    sum over a set of n ranks is n times this rank's tensor, and at one rank it is a copy.
    ``fail_next(n, exc)`` makes the next n collectives raise ``exc`` before touching ``out``.
    """

    capabilities = PLAIN
    routes = 0

    def __init__(self, name: str = "fake", reduces_float16: bool = False,
                 peer: Callable[[np.ndarray], np.ndarray] | None = None,
                 broadcast_value: Any = 0) -> None:
        self.name = name
        self.reduces_float16 = reduces_float16
        self.peer = peer
        self.broadcast_value = broadcast_value  # what a non-root receives from the root
        self.calls: list[tuple[str, str, str]] = []  # (collective, dtype, op)
        self.sets: list[tuple[str, int]] = []  # ("add" / "remove", set id), in order
        self._failures: list[BaseException] = []

    def fail_next(self, n: int, exc: BaseException) -> None:
        self._failures = [exc] * n

    def _call(self, what: str, dtype: Any, op: str = "") -> None:
        self.calls.append((what, str(np.dtype(dtype)), op))
        if self._failures:
            raise self._failures.pop()

    def _others(self, buf: np.ndarray) -> np.ndarray:
        return buf.copy() if self.peer is None else self.peer(buf)

    # -- collectives ------------------------------------------------------------------------

    def allreduce(self, pset: Any, buf: np.ndarray, out: np.ndarray, op: str) -> None:
        self._call("allreduce", buf.dtype, op)
        acc = np.array(buf, copy=True)
        other = self._others(buf) if len(pset.ranks) > 1 else None
        with np.errstate(over="ignore", invalid="ignore"):  # (as MPI: no warning)
            for _ in range(len(pset.ranks) - 1):
                _NP_OPS[op](acc, other, out=acc, casting="unsafe")
        np.copyto(out, acc.reshape(out.shape), casting="unsafe")

    def allreduce_pieces(self, pset: Any, srcs: list[np.ndarray], out: np.ndarray,
                         op: str) -> None:
        self.concat_into(srcs, out)
        self.allreduce(pset, out, out, op)

    def allgatherv(self, pset: Any, buf: np.ndarray, out: np.ndarray, counts: list[int]) -> None:
        self._call("allgatherv", buf.dtype)
        mine = buf.reshape(-1).view(np.uint8)
        flat = out.reshape(-1).view(np.uint8)
        start = 0
        for c in counts:  # (every rank sends this rank's bytes: the counts must match)
            flat[start:start + c] = mine[:c]
            start += c

    def broadcast(self, pset: Any, buf: np.ndarray, root: int) -> None:
        self._call("broadcast", buf.dtype)
        if pset.index != root:
            buf[...] = self.broadcast_value

    def alltoallv(self, pset: Any, buf: np.ndarray, send_bytes: list[int], out: np.ndarray,
                  recv_bytes: list[int]) -> None:
        self._call("alltoallv", buf.dtype)
        assert len(pset.ranks) == 1, "the fake alltoallv is a one-rank exchange"
        out.reshape(-1).view(np.uint8)[:] = buf.reshape(-1).view(np.uint8)[:recv_bytes[0]]

    def reduce_scatter(self, pset: Any, buf: np.ndarray, out: np.ndarray, counts: list[int],
                       op: str) -> None:
        full = np.empty_like(buf)
        self.allreduce(pset, buf, full, op)
        self.calls[-1] = ("reduce_scatter", *self.calls[-1][1:])
        start = sum(counts[:pset.index])
        out[...] = full.reshape(-1)[start:start + counts[pset.index]]

    def barrier(self, pset: Any) -> None:
        self._call("barrier", np.uint8)

    # -- buffers ----------------------------------------------------------------------------

    def empty(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def result_block(self, dtype: np.dtype, count: int, like: Any = None) -> np.ndarray:
        return np.empty(count, dtype=dtype)

    @staticmethod
    def scale_into(dst: np.ndarray, src: np.ndarray, factor: float) -> None:
        if factor == 1.0:
            np.copyto(dst, src, casting="unsafe")
        else:
            np.copyto(dst, np.multiply(src, factor, dtype=np.float64), casting="unsafe")

    @staticmethod
    def fill(dst: np.ndarray, value: Any) -> None:
        dst.fill(value)

    @staticmethod
    def concat_into(srcs: list[np.ndarray], dst: np.ndarray) -> None:
        np.concatenate(srcs, out=dst)

    @staticmethod
    def as_uint8(buf: np.ndarray) -> np.ndarray:
        return buf.view(np.uint8)

    def add_set(self, pset: Any) -> None:
        self.sets.append(("add", pset.set_id))

    def remove_set(self, pset: Any) -> None:
        self.sets.append(("remove", pset.set_id))


class _DoneRound:
    """A one-rank round: complete as soon as it is posted."""

    def Test(self) -> bool:  # noqa: N802 - mpi4py's name
        return True


class OneRankPlane:
    """The :class:`~hvdcore.backends.base.ControlPlane` of a one-rank job."""

    rank = 0
    size = 1
    round_wait_s = 30e-6

    def __init__(self) -> None:
        self.split_calls: list[tuple[bool, int]] = []
        self.freed: list[Any] = []
        self.aborted: int | None = None
        self.rounds = 0
        self.round_failures: list[BaseException] = []  # raised by the next posts, in turn

    def send(self, payload: bytes, dest: int, tag: int) -> None:
        raise AssertionError(f"a one-rank job sent a message to rank {dest} (tag {tag})")

    def flush(self) -> bool:
        return False

    def receive(self, source: int | None, tag: int) -> tuple[int, bytes] | None:
        return None

    def start_round(self, send: bytearray, recv: bytearray) -> _DoneRound:
        if self.round_failures:
            raise self.round_failures.pop(0)
        recv[:] = send  # the bitwise or of one contribution
        self.rounds += 1
        return _DoneRound()

    def wait_round(self, request: Any, timeout_s: float) -> bool:
        return spin_round(request, timeout_s)

    def steady_calls(self, spin_s: float, compiled: bool) -> None:
        return None  # no steady path: that is MPI's (tests/test_steady_path.py)

    def split(self, parent: Any, member: bool, key: int) -> FakeComm | None:
        self.split_calls.append((member, key))
        return FakeComm(0, 1) if member else None

    def free(self, comm: Any) -> None:
        self.freed.append(comm)

    def close(self) -> None:
        pass

    def abort(self, code: int) -> None:
        self.aborted = code


class Wire:
    """What the control planes of the ranks of one in-process job share."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.boxes: dict[int, list[tuple[int, int, bytes]]] = {r: [] for r in range(size)}
        self.sent: list[tuple[int, int, int]] = []  # (source, dest, tag)
        self.rounds: dict[int, list[bytes]] = {r: [] for r in range(size)}

    def plane(self, rank: int) -> WirePlane:
        return WirePlane(self, rank)


class _WireRound:
    def __init__(self, wire: Wire, k: int, recv: bytearray) -> None:
        self.wire, self.k, self.recv = wire, k, recv

    def Test(self) -> bool:  # noqa: N802 - mpi4py's name
        posted = [self.wire.rounds[r] for r in range(self.wire.size)]
        if any(len(p) <= self.k for p in posted):
            return False
        acc = 0
        for p in posted:
            acc |= int.from_bytes(p[self.k], "little")
        self.recv[:] = acc.to_bytes(len(self.recv), "little")
        return True


class WirePlane(OneRankPlane):
    """The control plane of rank ``rank`` of an in-process job (see :class:`Wire`)."""

    def __init__(self, wire: Wire, rank: int) -> None:
        super().__init__()
        self.wire, self.rank, self.size = wire, rank, wire.size

    def send(self, payload: bytes, dest: int, tag: int) -> None:
        self.wire.boxes[dest].append((self.rank, tag, bytes(payload)))
        self.wire.sent.append((self.rank, dest, tag))

    def receive(self, source: int | None, tag: int) -> tuple[int, bytes] | None:
        box = self.wire.boxes[self.rank]
        for i, (src, t, payload) in enumerate(box):
            if t == tag and (source is None or src == source):
                del box[i]
                return src, bytearray(payload)
        return None

    def start_round(self, send: bytearray, recv: bytearray) -> _WireRound:
        mine = self.wire.rounds[self.rank]
        mine.append(bytes(send))
        self.rounds += 1
        return _WireRound(self.wire, len(mine) - 1, recv)

    def split(self, parent: Any, member: bool, key: int) -> FakeComm | None:
        raise AssertionError("process sets are not part of the in-process job")


def load_config(**knobs: Any) -> Any:
    """A real :class:`hvdcore.config.Config` from ``HVDCORE_<KNOB>`` values (others default)."""
    return config.load({f"HVDCORE_{k.upper()}": str(v) for k, v in knobs.items()})


class DirectBackend(FakeBackend):
    """A :class:`FakeBackend` whose allreduce is one "direct" call, as MPI's is, so that the
    engine's steady shortcuts take it (:class:`SteadyPlane` makes that call itself).
    ``direct = False`` (then ``routes += 1``) makes it say no, as the hierarchical plane does
    for a size it takes."""

    capabilities = HOST_DIRECT
    routes = 0

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.direct = True

    def direct_allreduce(self, pset: Any, nbytes: int) -> tuple[Any, dict[str, str]] | None:
        return (pset.comm, {op: op for op in _NP_OPS}) if self.direct else None

    def pooled(self, nbytes: int) -> bool:
        return False


class _DoubleData:
    """The data call of :mod:`hvdcore.backends.steady_python` on the backend double."""

    def __init__(self, backend: DirectBackend, pset: SetState) -> None:
        self.backend, self.pset = backend, pset

    def allreduce(self, src: np.ndarray, dst: np.ndarray, op: str) -> None:
        self.backend.allreduce(self.pset, src, dst, op)


class SteadyPlane(OneRankPlane):
    """A one-rank control plane with steady calls: the real Python implementation
    (:mod:`hvdcore.backends.steady_python`) over an ObjectTransport of the doubles."""

    def __init__(self, backend: DirectBackend) -> None:
        super().__init__()
        self.backend = backend

    def steady_calls(self, spin_s: float, compiled: bool) -> BoundSteady:  # type: ignore[override]
        data = _DoubleData(self.backend, world(1))
        return BoundSteady(steady_python, ObjectTransport(self, lambda comm: data), spin_s)
