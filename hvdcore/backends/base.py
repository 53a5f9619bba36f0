"""The two protocols below the engine.

:class:`Backend` is the data plane: the collectives that move tensor bytes, one implementation
per transport (MPI or Gloo for host memory; a binding registers more, such as torch.distributed
Gloo/NCCL). :class:`ControlPlane` is how the ranks' engines agree on what to run: MPI or Gloo,
whichever controller formed the job (:mod:`hvdcore.controllers`). The engine imports neither
mpi4py nor a framework: everything it does between ranks goes through these two.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from hvdcore.backends import round_wire

# What a steady-path call (:meth:`ControlPlane.steady_calls`) returns: the round's description,
# hvdcore.backends.round_wire, defines them for the Python and the compiled implementation.
STEADY_DONE = round_wire.DONE
"""A steady-path call made the round and the data call."""
STEADY_NOT_READY = round_wire.NOT_READY
"""A steady-path call's round completed but does not let the data run now."""
STEADY_PENDING = round_wire.PENDING
"""A steady-path call's round is still in flight (returned as ``(STEADY_PENDING, token)``)."""


class DeviceBuffer:
    """A framework tensor handed to the core for a registered data plane (not host NumPy).

    The core checks and negotiates it like an array: ``dtype`` (the NumPy dtype that stands
    for the tensor's), ``shape``; ``device`` names the data plane (``"gloo"``, ``"nccl"``)
    the engine hands ``tensor`` to, untouched. ``ptr`` (the data address) lets ``out=``
    recognise an in-place call. Bindings make these; users never see them.
    """

    __slots__ = ("tensor", "device", "dtype", "shape", "ptr")

    def __init__(self, tensor: Any, device: str, dtype: np.dtype, shape: tuple[int, ...],
                 ptr: int = 0) -> None:
        self.tensor = tensor
        self.device = device
        self.dtype = dtype
        self.shape = shape
        self.ptr = ptr

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def __repr__(self) -> str:
        return f"DeviceBuffer({self.device}, {self.dtype}, {list(self.shape)})"


@dataclass(frozen=True)
class PlaneCapabilities:
    """What a data plane declares beyond the :class:`Backend` protocol's collectives; the
    engine asks these, never ``getattr``.

    ``direct_allreduce``: the plane has ``direct_allreduce(pset, nbytes) -> (comm, ops) | None``
    (its allreduce of ``nbytes`` is one call, MPI's or Gloo's, that the control plane's steady
    calls may make themselves) and
    ``pooled(nbytes)`` (whether :meth:`Backend.result_block` of that size is pooled memory);
    its ``routes`` counter changes whenever the first answer may change.
    ``bound_allreduce``: the plane has ``bound_allreduce(pset, op, post, dtype, shape)``, the
    allreduce of one cached tensor bound once (``call(buf, out) -> result``, or None).
    ``two_levels``: the plane can run the global set's allreduce and allgather in two levels
    (within nodes, then across) and has the settable booleans ``enabled_allreduce`` and
    ``enabled_allgather`` that say whether it does (the autotuner switches them).
    """

    direct_allreduce: bool = False
    bound_allreduce: bool = False
    two_levels: bool = False


HOST_DIRECT = PlaneCapabilities(direct_allreduce=True)
"""A host plane's (MPI's, the Gloo controller's) whose allreduce is one call of the control
plane's transport: the steady path may make it itself."""
PLAIN = PlaneCapabilities()
"""A plane with the protocol's collectives only."""


class Backend(Protocol):
    """A data plane: collectives on contiguous buffers of one device kind, over the group of
    ranks of a process set, plus the buffer operations the engine's executor needs to build
    fusion buffers on that device.

    ``pset`` is the engine's :class:`~hvdcore.engine.executor.SetState` (``set_id``,
    ``ranks``, the MPI ``comm``); a backend keeps its own group per set (see :meth:`add_set`).
    Buffers are whatever the backend's device holds (NumPy arrays for MPI, torch tensors for
    the torch.distributed backends); the executor only slices, reshapes and reads ``shape`` /
    ``ndim`` of them, and does everything else through the methods below. Implementations:
    :class:`~hvdcore.backends.mpi.MPIBackend` (host memory) and the torch binding's
    ``hvdcore.torch.backends.TorchBackend`` (Gloo, NCCL/RCCL), registered at
    ``hvdcore.torch.init()``.
    """

    name: str
    """Names timeline spans (``MPI_ALLREDUCE``, ``GLOO_ALLREDUCE``, ``NCCL_ALLREDUCE``)."""
    reduces_float16: bool
    """False when float16 must be reduced in a float32 buffer (MPI has no half type)."""
    capabilities: PlaneCapabilities
    """What the plane offers beyond these methods (see :class:`PlaneCapabilities`)."""
    routes: int
    """Changes whenever what ``direct_allreduce`` answers may change (0 where it never does)."""

    def allreduce(self, pset: Any, buf: Any, out: Any, op: str) -> None:
        """Reduce ``buf`` element-wise across ranks into ``out`` (``out is buf``: in place).

        ``op`` is one of "sum", "min", "max", "prod". A plane whose
        :attr:`capabilities` declare ``bound_allreduce`` also offers this call for one cached
        tensor bound once (see ``hvdcore.torch.backends.TorchBackend.bound_allreduce``).
        """

    def allgatherv(self, pset: Any, buf: Any, out: Any, counts: list[int]) -> None:
        """Concatenate every rank's ``buf`` (``counts[r]`` bytes from rank r) into ``out``."""

    def broadcast(self, pset: Any, buf: Any, root: int) -> None:
        """Overwrite ``buf`` on every rank with root's ``buf`` (root: an index into the set)."""

    def alltoallv(
        self, pset: Any, buf: Any, send_bytes: list[int], out: Any, recv_bytes: list[int],
    ) -> None:
        """Send ``send_bytes[r]`` consecutive bytes of ``buf`` to rank r; receive into ``out``."""

    def reduce_scatter(self, pset: Any, buf: Any, out: Any, counts: list[int], op: str) -> None:
        """Reduce ``buf`` across ranks; rank r receives ``counts[r]`` elements into ``out``."""

    def barrier(self, pset: Any) -> None:
        """Wait until every rank of the set arrives."""

    def empty(self, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
        """An uninitialised buffer on this backend's device."""

    def result_block(self, dtype: np.dtype, count: int, like: Any = None) -> Any:
        """A 1-d buffer of ``count`` elements whose views are handed to callers as results;
        ``like``: the input it is the result of (a backend may match its alignment)."""

    def scale_into(self, dst: Any, src: Any, factor: float) -> None:
        """``dst[...] = src * factor``, in Horovod's arithmetic, rounded once into ``dst``.

        Integers scale in float64 and truncate toward zero; float32 and float64 in their own
        type; float16 in float32 on the host (in float16 with the factor rounded to float16
        on a GPU, as Horovod's kernels do). A float16 value held in a wider buffer (a
        float16 reduction run in float32) is rounded to float16 first: Horovod's reduction
        hands float16 results to the postscale, and a prescaled float16 tensor is float16.
        """

    def fill(self, dst: Any, value: Any) -> None:
        """Set every element of ``dst`` to ``value``."""

    def concat_into(self, srcs: list[Any], dst: Any) -> None:
        """Copy the 1-d buffers ``srcs`` one after the other into ``dst``."""

    def allreduce_pieces(self, pset: Any, srcs: list[Any], out: Any, op: str) -> None:
        """Allreduce the concatenation of the 1-d buffers ``srcs`` into ``out`` (1-d, their
        total length): a fused call. :meth:`concat_into` then an in-place :meth:`allreduce`,
        unless the backend can read the pieces where they are."""

    def as_uint8(self, buf: Any) -> Any:
        """``buf`` (bool) reinterpreted as uint8, sharing memory."""

    def add_set(self, pset: Any) -> None:
        """A process set was registered (called on every rank, in the same order)."""

    def remove_set(self, pset: Any) -> None:
        """A process set was removed (called on every rank, in the same order)."""


class RoundRequest(Protocol):
    """An outstanding cache round (mpi4py's ``Request`` has this shape)."""

    def Test(self) -> bool:  # noqa: N802 - the name mpi4py gives it
        """True once the round has completed (drives it forward)."""


class ControlPlane(Protocol):
    """How the engines of a job talk to each other (never the tensors themselves).

    Announcements to the coordinator, its ordered response lists, the response cache's
    rounds, communicators for new process sets, and ending the job. Implementations:
    :class:`~hvdcore.backends.mpi_control.MPIControlPlane` and the Gloo controller's
    :class:`~hvdcore.controllers.gloo_control.GlooControlPlane`.
    """

    rank: int
    size: int
    round_wait_s: float
    """How long a caller that posted a round waits for it (:meth:`wait_round`) before the
    engine cycle takes it over (what a round costs when every rank is there: a few MPI
    polls, a few TCP round trips)."""

    def send(self, payload: bytes, dest: int, tag: int) -> None:
        """Start sending ``payload`` to rank ``dest``; it is kept alive until delivered."""

    def flush(self) -> bool:
        """Complete the sends that have finished; True while some are still in flight."""

    def receive(self, source: int | None, tag: int) -> tuple[int, bytes | bytearray] | None:
        """``(sender, payload)`` of one waiting message with ``tag`` (from ``source``, or
        any rank for None), or None when none has arrived. Never blocks."""

    def start_round(self, send: bytearray, recv: bytearray) -> RoundRequest:
        """Start a bitwise-or allreduce of ``send`` (uint64 words) into ``recv``."""

    def wait_round(self, request: RoundRequest, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a round this plane started; True once it completed
        (MPI: polls ``Test()``, :func:`spin_round`; a plane whose round can be waited on
        without a core spinning waits so)."""

    def steady_calls(self, spin_s: float, compiled: bool) -> Any:
        """A round and a data allreduce as one call, for the steady path
        (:class:`hvdcore.backends.steady_calls.SteadyCalls`), or None. Data backends that let
        it make their allreduce say so with ``direct_allreduce`` (see
        :meth:`hvdcore.backends.mpi.MPIBackend.direct_allreduce`)."""

    def split(self, parent: Any, member: bool, key: int) -> Any:
        """Collective over ``parent``: a communicator of the members (None on the others)."""

    def free(self, comm: Any) -> None:
        """Release a communicator made by :meth:`split` (or by ``init``)."""

    def close(self) -> None:
        """Release the plane's own communicators (after the engine has stopped)."""

    def abort(self, code: int) -> None:
        """End every process of the job with exit status ``code``."""


def spin_round(request: RoundRequest, timeout_s: float) -> bool:
    """Poll ``request.Test()`` in a tight loop for up to ``timeout_s``: an MPI request only
    advances inside MPI calls, and the peers are usually microseconds behind."""
    end = time.perf_counter() + timeout_s
    while not request.Test():
        if time.perf_counter() > end:
            return False
    return True


def displacements(counts: list[int]) -> list[int]:
    """Start offsets of consecutive blocks of ``counts`` (MPI's displs)."""
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out
