"""What ranks tell the coordinator (:class:`Meta`), what it answers (:class:`Response`), and the
two records every engine stage shares: a submitted :class:`Request` and a :class:`SetState`."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hvdcore import errors


class ReduceOp(enum.IntEnum):
    """Reduction operations, numbered as Horovod numbers them."""

    AVERAGE = 0
    SUM = 1
    ADASUM = 2
    MIN = 3
    MAX = 4
    PRODUCT = 5


_ITEMSIZE: dict[str, int] = {}


def itemsize(dtype: str) -> int:
    """Bytes per element of the dtype called ``dtype`` (cached: on the hot path)."""
    size = _ITEMSIZE.get(dtype)
    if size is None:
        size = _ITEMSIZE[dtype] = np.dtype(dtype).itemsize
    return size


# Request kinds.
ALLREDUCE = "allreduce"
ALLGATHER = "allgather"
BROADCAST = "broadcast"
ALLTOALL = "alltoall"
REDUCESCATTER = "reducescatter"
BARRIER = "barrier"
JOIN = "join"
SHUTDOWN = "shutdown"
ADD_SET = "add_process_set"
REMOVE_SET = "remove_process_set"

DATA_KINDS = (ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER)

# Response-only kinds.
ERROR = "error"
STALL_WARNING = "stall_warning"
ABORT = "abort"
PARAMS = "params"  # the autotuner's parameters: per_rank = TunedParams.to_wire()


@dataclass(slots=True)
class Meta:
    """One rank's description of one named request, sent to the coordinator."""

    set_id: int
    name: str
    kind: str
    dtype: str = ""
    shape: tuple[int, ...] = ()
    op: int = -1
    root: int = -1
    prescale: float = 1.0
    postscale: float = 1.0
    splits: tuple[int, ...] | None = None
    ranks: tuple[int, ...] | None = None  # add_process_set
    # Set when the call failed its checks on this rank: the coordinator then fails the
    # request on every rank with this reason instead of leaving the peers waiting.
    error: str = ""
    error_type: str = ""
    # The data plane the buffer belongs to ("" = host memory through the default backend,
    # else a registered backend such as "gloo" or "nccl"): ranks must agree on it, and only
    # requests of one device are fused together.
    device: str = ""

    def wire(self) -> tuple:
        """Plain tuple for the control channel (pickles ~3x faster than the dataclass)."""
        if not self.error and not self.device:
            return (self.set_id, self.name, self.kind, self.dtype, self.shape, self.op,
                    self.root, self.prescale, self.postscale, self.splits, self.ranks)
        return (self.set_id, self.name, self.kind, self.dtype, self.shape, self.op, self.root,
                self.prescale, self.postscale, self.splits, self.ranks, self.error,
                self.error_type, self.device)


@dataclass(slots=True)
class Response:
    """The coordinator's decision for one or more requests; executed in order on every rank.

    For fused allreduces ``names``/``shapes`` list every tensor in the fusion buffer.
    ``per_rank`` carries what ranks need about each other: first dimensions for allgather,
    the split matrix for alltoall.
    """

    kind: str
    set_id: int
    names: list[str]
    dtype: str = ""
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    op: int = -1
    root: int = -1
    prescale: float = 1.0
    postscale: float = 1.0
    per_rank: list = field(default_factory=list)
    joined: tuple[int, ...] = ()
    message: str = ""
    error_type: str = ""
    value: int = -1  # join: last rank to join; add_process_set: the new set id
    ranks: tuple[int, ...] | None = None
    device: str = ""  # the data plane that runs it (see Meta.device)
    # Not sent: the executor's fused layout (hvdcore.engine.fusion.FusedLayout, and what it
    # concatenates), worked out on first use (a cached response runs again every step).
    layout: Any = None

    def wire(self) -> tuple:
        """Plain tuple for the control channel; ``Response(*t)`` rebuilds it."""
        return (self.kind, self.set_id, self.names, self.dtype, self.shapes, self.op, self.root,
                self.prescale, self.postscale, self.per_rank, self.joined, self.message,
                self.error_type, self.value, self.ranks, self.device)


def response_bytes(resp: Response) -> int:
    """Bytes of this rank's tensors in ``resp`` (0 for a response without data)."""
    if not resp.dtype:
        return 0
    return sum(math.prod(shape) for shape in resp.shapes) * itemsize(resp.dtype)


@dataclass(slots=True)
class Request:
    """A submitted request on its rank: the meta, the input, where the result goes."""

    meta: Meta
    tensor: Any  # np.ndarray (or a plane's tensor) for data requests, None for control ones
    out: Any  # the caller's output buffer, or None
    handle: Any  # hvdcore.engine.handle.Handle
    part: int
    t_submit: float = 0.0


@dataclass(slots=True)
class SetState:
    """A process set as seen by this rank."""

    set_id: int
    ranks: tuple[int, ...]
    comm: Any  # None when this rank is not a member

    @property
    def index(self) -> int:
        """This rank's position in the set (valid for members only)."""
        return self.comm.Get_rank()


def duplicate_name_error(rank: int, meta: Meta, holder: str) -> errors.ArgumentError:
    """The error of a request whose name this rank still uses for ``holder`` (the pending
    request's description): an ArgumentError (a ValueError), as Horovod raises at submission.
    The one text and class of this mistake, wherever it is found."""
    where = "" if meta.set_id == 0 else f" in process set {meta.set_id}"
    return errors.ArgumentError(
        f"rank {rank}: {meta.kind} '{meta.name}'{where}: a tensor with the same name is still "
        f"being processed ({holder}); give concurrent collectives distinct names, or "
        "synchronize the first before submitting the second")
