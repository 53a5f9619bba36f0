"""Collectives on NumPy arrays, with Horovod's names, signatures and semantics.

Every call validates its arguments on the calling rank (clear ``HvdcoreError`` subclasses), then
hands a named request to the engine. Blocking calls are ``synchronize(<call>_async(...))``.

Example::

    >>> import numpy as np, hvdcore as hvd
    >>> hvd.init()
    >>> total = hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum)   # [size, size, ...]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hvdcore import basics, errors
from hvdcore.engine.executor import Request
from hvdcore.engine.handle import Handle
from hvdcore.engine.messages import (
    ADD_SET,
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BARRIER,
    BROADCAST,
    JOIN,
    REDUCESCATTER,
    REMOVE_SET,
    Meta,
    ReduceOp,
)
from hvdcore.process_sets import ProcessSet, global_process_set

Average = ReduceOp.AVERAGE
Sum = ReduceOp.SUM
Adasum = ReduceOp.ADASUM
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT

SUPPORTED_DTYPES = tuple(np.dtype(d) for d in (
    np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_))
_SUPPORTED_NAMES = ", ".join(d.name for d in SUPPORTED_DTYPES)
_DTYPE_NAMES = {d: d.name for d in SUPPORTED_DTYPES}


def _dtype_name(dtype: np.dtype) -> str:
    """``dtype.name`` without numpy's slow property on the hot path."""
    return _DTYPE_NAMES.get(dtype) or dtype.name


# -- argument checking ---------------------------------------------------------------------

def _array(tensor: Any, what: str, rank: int) -> np.ndarray:
    if isinstance(tensor, np.generic):
        tensor = np.asarray(tensor)
    if not isinstance(tensor, np.ndarray):
        raise errors.UnsupportedError(
            f"rank {rank}: {what} expects a NumPy array, got {type(tensor).__name__}; use the "
            "framework binding (hvdcore.torch / hvdcore.tensorflow) for framework tensors")
    native = tensor.dtype if tensor.dtype.isnative else tensor.dtype.newbyteorder("=")
    if native not in SUPPORTED_DTYPES:  # a byte-swapped float32 is still a float32
        raise errors.UnsupportedError(
            f"rank {rank}: {what} does not support dtype {tensor.dtype}; supported: "
            f"{_SUPPORTED_NAMES}")
    if not tensor.dtype.isnative:
        tensor = tensor.astype(native)
    return tensor if tensor.flags.c_contiguous else tensor.copy(order="C")


def _resolve_op(average: bool | None, op: Any, rank: int, what: str,
                default: ReduceOp = ReduceOp.AVERAGE) -> ReduceOp:
    if average is not None and op is not None:
        raise errors.UnsupportedError(
            f"rank {rank}: {what}: give either op= or the deprecated average=, not both")
    if op is None:
        op = default if average is None else (ReduceOp.AVERAGE if average else ReduceOp.SUM)
    try:
        if isinstance(op, bool) or not isinstance(op, (int, np.integer)):
            raise TypeError("not an integer")  # int(1.5) would silently pick Sum
        op = ReduceOp(int(op))
    except (TypeError, ValueError) as exc:
        raise errors.UnsupportedError(
            f"rank {rank}: {what}: unknown op {op!r}; use one of Average, Sum, Min, Max, "
            "Product") from exc
    if op == ReduceOp.ADASUM:
        raise errors.UnsupportedError(
            f"rank {rank}: {what}: Adasum is not supported by hvdcore yet; use op=Average "
            "(or Sum)")
    return op


def _factor(value: Any, which: str, rank: int, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise errors.UnsupportedError(
            f"rank {rank}: {what}: {which} must be a number, got {value!r}")
    return float(value)


def _pset(process_set: Any, st: Any, what: str) -> tuple[ProcessSet, int]:
    if not isinstance(process_set, ProcessSet):
        raise errors.UnsupportedError(
            f"rank {st.rank}: {what}: process_set must be a ProcessSet, got "
            f"{type(process_set).__name__}")
    sid = process_set.process_set_id
    if sid is None or sid not in st.engine.sets:
        raise errors.UnsupportedError(
            f"rank {st.rank}: {what}: {process_set!r} is not registered; call "
            "hvd.add_process_set(...) on every rank first")
    if st.rank not in process_set.ranks:
        raise errors.UnsupportedError(
            f"rank {st.rank}: {what}: this rank is not a member of process set {sid} "
            f"(ranks {process_set.ranks}); only members may call collectives on it")
    return process_set, sid


def _name(st: Any, kind: str, set_id: int, name: str | None) -> str:
    if name is not None:
        if not isinstance(name, str):
            raise errors.UnsupportedError(
                f"rank {st.rank}: name must be a str or None, got {type(name).__name__}")
        return name
    key = (kind, set_id)
    n = st.counters.get(key, 0) + 1
    st.counters[key] = n
    return f"{kind}.noname.{n}"


def _out(out: np.ndarray | None, like: np.ndarray, rank: int, what: str) -> np.ndarray | None:
    if out is None:
        return None
    if (not isinstance(out, np.ndarray) or out.shape != like.shape or out.dtype != like.dtype
            or not out.flags.c_contiguous or not out.flags.writeable):
        raise errors.UnsupportedError(
            f"rank {rank}: {what}: out= must be a writeable C-contiguous array of shape "
            f"{like.shape} and dtype {like.dtype}")
    return out


def _same_buffer(a: np.ndarray, b: np.ndarray) -> bool:
    """True if two C-contiguous arrays of one shape and dtype are views of the same memory
    (e.g. two ``Tensor.numpy()`` views of one torch tensor): then the reduction is in place."""
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.shape == b.shape and a.dtype == b.dtype)


def _first(values: list[Any]) -> Any:
    return values[0]


def _submit(st: Any, items: Sequence[tuple[Meta, Any, np.ndarray | None]],
            finalize: Any, description: str) -> Handle:
    handle = Handle(len(items), finalize, description)
    reqs = [Request(meta, t, o, handle, i) for i, (meta, t, o) in enumerate(items)]
    if reqs:
        st.engine.enqueue(reqs)
    return handle


def _submit_control(kind: str, name: str, set_id: int = 0, **kw: Any) -> Handle:
    st = basics.state()
    return _submit(st, [(Meta(set_id, name, kind, **kw), None, None)], _first, kind)


# -- public API -------------------------------------------------------------------------------

def poll(handle: Handle) -> bool:
    """True when the asynchronous operation behind ``handle`` has finished."""
    if not isinstance(handle, Handle):
        raise errors.UnsupportedError(f"poll() expects a handle, got {type(handle).__name__}")
    if not handle.done():
        st = basics._state
        if st is not None:
            st.engine.step_once()  # with caller progress, nobody else may be moving it
    return handle.done()


def synchronize(handle: Handle) -> Any:
    """Wait for ``handle`` and return its result (raises the operation's error)."""
    if not isinstance(handle, Handle):
        raise errors.UnsupportedError(
            f"synchronize() expects a handle, got {type(handle).__name__}")
    return _wait(handle)


def _wait(handle: Handle) -> Any:
    st = basics._state
    return handle.wait() if st is None else st.engine.drive(handle)


def _blocking(start: Any) -> Any:
    """Run ``start()`` (an ``*_async`` call) and wait for it, driving the engine on this
    thread when it is idle so that a blocking call needs no thread hand-off."""
    st = basics._state
    if st is None:
        return start().wait()
    if not st.engine.begin_drive():
        return st.engine.drive(start())
    try:
        handle = start()
        st.engine.drive_until(handle)
    finally:
        st.engine.end_drive()
    return handle.wait()


def grouped_allreduce_async(
    tensors: Sequence[np.ndarray], average: bool | None = None, name: str | None = None,
    op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set, out: Sequence[np.ndarray] | None = None,
) -> Handle:
    """Start allreduces of several tensors as one group; the handle yields a list."""
    st = basics.state()
    what = "allreduce"
    ps, sid = _pset(process_set, st, what)
    rop = _resolve_op(average, op, st.rank, what)
    if isinstance(tensors, np.ndarray) or not isinstance(tensors, (list, tuple)):
        raise errors.UnsupportedError(
            f"rank {st.rank}: grouped_allreduce expects a list of arrays, got "
            f"{type(tensors).__name__}")
    pre = _factor(prescale_factor, "prescale_factor", st.rank, what)
    post = _factor(postscale_factor, "postscale_factor", st.rank, what)
    base = _name(st, ALLREDUCE, sid, name)
    items = []
    for i, t in enumerate(tensors):
        arr = _array(t, what, st.rank)
        if arr.dtype == np.bool_ and rop == ReduceOp.AVERAGE:
            raise errors.UnsupportedError(
                f"rank {st.rank}: Average of a bool tensor is undefined; use op=Sum (logical "
                "or), Min/Product (logical and) or Max")
        o = _out(out[i] if out is not None else None, arr, st.rank, what)
        if o is not None:
            if o is t or _same_buffer(o, arr):
                arr = o  # in place: MPI_IN_PLACE
            elif np.may_share_memory(o, arr):
                arr = arr.copy()
        nm = base if len(tensors) == 1 else f"{base}.{i}"
        items.append((Meta(sid, nm, ALLREDUCE, _dtype_name(arr.dtype), arr.shape,
                           int(rop), -1, pre, post),
                      arr, o))
    return _submit(st, items, list, f"grouped_allreduce '{base}'")


def _allreduce_request(
    tensor: np.ndarray, average: bool | None, name: str | None, op: Any,
    prescale_factor: float, postscale_factor: float, process_set: ProcessSet,
    out: np.ndarray | None,
) -> tuple[Any, Meta, np.ndarray, np.ndarray | None]:
    """Check an allreduce's arguments: (state, meta, input array, output array or None)."""
    st = basics.state()
    what = "allreduce"
    ps, sid = _pset(process_set, st, what)
    rop = _resolve_op(average, op, st.rank, what)
    pre = prescale_factor if type(prescale_factor) is float else _factor(
        prescale_factor, "prescale_factor", st.rank, what)
    post = postscale_factor if type(postscale_factor) is float else _factor(
        postscale_factor, "postscale_factor", st.rank, what)
    nm = _name(st, ALLREDUCE, sid, name)
    arr = _array(tensor, what, st.rank)
    if rop == ReduceOp.AVERAGE and arr.dtype == np.bool_:
        raise errors.UnsupportedError(
            f"rank {st.rank}: Average of a bool tensor is undefined; use op=Sum (logical "
            "or), Min/Product (logical and) or Max")
    if out is not None:
        checked = _out(out, arr, st.rank, what)
        assert checked is not None
        out = checked
        if out is tensor or _same_buffer(out, arr):
            arr = out  # in place: MPI_IN_PLACE
        elif np.may_share_memory(out, arr):
            arr = arr.copy()
    meta = Meta(sid, nm, ALLREDUCE, _dtype_name(arr.dtype), arr.shape, int(rop), -1, pre, post)
    return st, meta, arr, out


def _allreduce_submit(st: Any, meta: Meta, arr: np.ndarray, out: np.ndarray | None,
                      enqueue: bool = True) -> Request:
    handle = Handle(1, _first, f"allreduce '{meta.name}'")
    req = Request(meta, arr, out, handle, 0)
    if enqueue:
        st.engine.enqueue([req])
    return req


def allreduce_async(
    tensor: np.ndarray, average: bool | None = None, name: str | None = None, op: Any = None,
    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set, out: np.ndarray | None = None,
) -> Handle:
    """Start an allreduce of ``tensor``; ``synchronize(handle)`` returns the reduced array.

    ``op``: Average (default), Sum, Min, Max, Product. Average of integers truncates.
    ``out``: optional array that receives the result (may be ``tensor`` itself: in place).
    """
    st, meta, arr, out = _allreduce_request(tensor, average, name, op, prescale_factor,
                                            postscale_factor, process_set, out)
    return _allreduce_submit(st, meta, arr, out).handle


def allreduce(
    tensor: np.ndarray, average: bool | None = None, name: str | None = None, op: Any = None,
    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set, out: np.ndarray | None = None,
) -> np.ndarray:
    """Reduce ``tensor`` across the ranks of ``process_set`` and return the result.

    >>> hvd.allreduce(np.array([hvd.rank()], np.float64))      # mean of the ranks
    """
    st, meta, arr, out = _allreduce_request(tensor, average, name, op, prescale_factor,
                                            postscale_factor, process_set, out)
    engine = st.engine
    if not engine.begin_drive():
        return engine.drive(_allreduce_submit(st, meta, arr, out).handle)
    try:
        # A tensor the ranks reduced before skips the queue (see HVDCORE_CACHE_CAPACITY).
        got = engine.fast_allreduce(meta, arr, out,
                                    lambda: _allreduce_submit(st, meta, arr, out, False))
        if got is None:
            handle = _allreduce_submit(st, meta, arr, out).handle
        elif isinstance(got, Handle):
            handle = got
        else:
            return got
        engine.drive_until(handle)
    finally:
        engine.end_drive()
    return handle.wait()


def grouped_allreduce(
    tensors: Sequence[np.ndarray], average: bool | None = None, name: str | None = None,
    op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set, out: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Allreduce a list of tensors together (fused where possible); returns a list."""
    return _blocking(lambda: grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                   postscale_factor, process_set, out))


def _gather_items(st: Any, tensors: Sequence[np.ndarray], base: str, set_id: int,
                  what: str) -> list:
    items = []
    for i, t in enumerate(tensors):
        arr = _array(t, what, st.rank)
        nm = base if len(tensors) == 1 else f"{base}.{i}"
        shape = arr.shape if arr.ndim else (1,)
        items.append((Meta(set_id, nm, ALLGATHER, _dtype_name(arr.dtype), shape), arr, None))
    return items


def grouped_allgather_async(tensors: Sequence[np.ndarray], name: str | None = None,
                            process_set: ProcessSet = global_process_set) -> Handle:
    """Start allgathers of several tensors; the handle yields a list."""
    st = basics.state()
    ps, sid = _pset(process_set, st, "allgather")
    base = _name(st, ALLGATHER, sid, name)
    return _submit(st, _gather_items(st, list(tensors), base, sid, "allgather"),
                   list, f"grouped_allgather '{base}'")


def allgather_async(tensor: np.ndarray, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> Handle:
    """Start an allgather; ``synchronize`` returns the concatenation along dimension 0."""
    h = grouped_allgather_async([tensor], name, process_set)
    h._finalize = _first
    return h


def allgather(tensor: np.ndarray, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Concatenate every rank's tensor along the first dimension (sizes may differ).

    >>> hvd.allgather(np.full((hvd.rank() + 1, 2), hvd.rank()))   # ragged first dimension
    """
    return _blocking(lambda: allgather_async(tensor, name, process_set))


def grouped_allgather(tensors: Sequence[np.ndarray], name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list[np.ndarray]:
    """Allgather each tensor of a list; returns a list."""
    return _blocking(lambda: grouped_allgather_async(tensors, name, process_set))


def broadcast_async(tensor: np.ndarray, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set,
                    out: np.ndarray | None = None) -> Handle:
    """Start a broadcast from ``root_rank`` (a global rank that belongs to the set)."""
    st = basics.state()
    ps, sid = _pset(process_set, st, "broadcast")
    arr = _array(tensor, "broadcast", st.rank)
    if isinstance(root_rank, bool) or not isinstance(root_rank, (int, np.integer)) \
            or int(root_rank) not in ps.ranks:
        raise errors.UnsupportedError(
            f"rank {st.rank}: broadcast root_rank={root_rank!r} is not a rank of the process set "
            f"(ranks {ps.ranks})")
    o = _out(out, arr, st.rank, "broadcast")
    if o is not None and o is tensor:
        arr = o
    nm = _name(st, BROADCAST, sid, name)
    meta = Meta(sid, nm, BROADCAST, _dtype_name(arr.dtype), arr.shape, root=int(root_rank))
    return _submit(st, [(meta, arr, o)], _first, f"broadcast '{nm}'")


def broadcast(tensor: np.ndarray, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set,
              out: np.ndarray | None = None) -> np.ndarray:
    """Return root's ``tensor`` on every rank (the input is not modified unless out=tensor).

    >>> w = hvd.broadcast(np.random.rand(3), root_rank=0)   # identical everywhere
    """
    return _blocking(lambda: broadcast_async(tensor, root_rank, name, process_set, out))


def alltoall_async(tensor: np.ndarray, splits: Any = None, name: str | None = None,
                   process_set: ProcessSet = global_process_set) -> Handle:
    """Start an alltoall; ``synchronize`` returns ``(output, received_splits)``."""
    st = basics.state()
    ps, sid = _pset(process_set, st, "alltoall")
    arr = _array(tensor, "alltoall", st.rank)
    n = len(ps.ranks)
    if arr.ndim == 0:
        raise errors.UnsupportedError(f"rank {st.rank}: alltoall needs at least 1 dimension")
    if splits is None:
        if arr.shape[0] % n:
            raise errors.UnsupportedError(
                f"rank {st.rank}: alltoall without splits needs dim 0 ({arr.shape[0]}) "
                f"divisible by the set size ({n}); pass splits=")
        sp = [arr.shape[0] // n] * n
    else:
        try:
            sp = [int(s) for s in np.asarray(splits).reshape(-1)]
        except (TypeError, ValueError) as exc:
            raise errors.UnsupportedError(
                f"rank {st.rank}: alltoall splits must be integers, got {splits!r}") from exc
        if len(sp) != n or any(s < 0 for s in sp) or sum(sp) != arr.shape[0]:
            raise errors.UnsupportedError(
                f"rank {st.rank}: alltoall splits {sp} must have {n} non-negative entries "
                f"summing to dim 0 ({arr.shape[0]})")
    nm = _name(st, ALLTOALL, sid, name)
    meta = Meta(sid, nm, ALLTOALL, _dtype_name(arr.dtype), arr.shape, splits=tuple(sp))
    return _submit(st, [(meta, arr, None)], _first, f"alltoall '{nm}'")


def alltoall(tensor: np.ndarray, splits: Any = None, name: str | None = None,
             process_set: ProcessSet = global_process_set) -> tuple[np.ndarray, np.ndarray]:
    """Send ``splits[i]`` rows of ``tensor`` to rank i; returns (received rows, received splits).

    >>> out, got = hvd.alltoall(np.arange(hvd.size() * 2), splits=[2] * hvd.size())
    """
    return _blocking(lambda: alltoall_async(tensor, splits, name, process_set))


def _rs_items(st: Any, tensors: Sequence[np.ndarray], base: str, sid: int, rop: ReduceOp,
              pre: float, post: float) -> list:
    pre = _factor(pre, "prescale_factor", st.rank, "reducescatter")
    post = _factor(post, "postscale_factor", st.rank, "reducescatter")
    items = []
    for i, t in enumerate(tensors):
        arr = _array(t, "reducescatter", st.rank)
        if arr.ndim == 0:
            raise errors.UnsupportedError(
                f"rank {st.rank}: reducescatter needs at least 1 dimension")
        if arr.dtype == np.bool_ and rop == ReduceOp.AVERAGE:
            raise errors.UnsupportedError(
                f"rank {st.rank}: Average of a bool tensor is undefined; use op=Sum/Min/Max")
        nm = base if len(tensors) == 1 else f"{base}.{i}"
        items.append((Meta(sid, nm, REDUCESCATTER, _dtype_name(arr.dtype), arr.shape,
                           int(rop), -1, pre, post), arr, None))
    return items


def grouped_reducescatter_async(
    tensors: Sequence[np.ndarray], name: str | None = None, op: Any = Average,
    process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> Handle:
    """Start reducescatters of several tensors; the handle yields a list."""
    st = basics.state()
    ps, sid = _pset(process_set, st, "reducescatter")
    rop = _resolve_op(None, op, st.rank, "reducescatter")
    base = _name(st, REDUCESCATTER, sid, name)
    return _submit(st, _rs_items(st, list(tensors), base, sid, rop, prescale_factor,
                                 postscale_factor), list, f"grouped_reducescatter '{base}'")


def reducescatter_async(
    tensor: np.ndarray, name: str | None = None, op: Any = Average,
    process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> Handle:
    """Start a reducescatter; ``synchronize`` returns this rank's block."""
    h = grouped_reducescatter_async([tensor], name, op, process_set, prescale_factor,
                                    postscale_factor)
    h._finalize = _first
    return h


def reducescatter(
    tensor: np.ndarray, name: str | None = None, op: Any = Average,
    process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> np.ndarray:
    """Reduce across ranks and return this rank's block of dimension 0.

    With N rows and n ranks, the first N % n ranks get N // n + 1 rows, the others N // n.
    """
    return _blocking(lambda: reducescatter_async(tensor, name, op, process_set, prescale_factor,
                               postscale_factor))


def grouped_reducescatter(
    tensors: Sequence[np.ndarray], name: str | None = None, op: Any = Average,
    process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> list[np.ndarray]:
    """Reducescatter each tensor of a list; returns a list."""
    return _blocking(lambda: grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                       postscale_factor))


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Block until every rank of the set has called barrier()."""
    st = basics.state()
    ps, sid = _pset(process_set, st, "barrier")
    nm = _name(st, BARRIER, sid, None)
    _wait(_submit_control(BARRIER, nm, sid))


def join() -> int:
    """Declare that this rank has no more data; returns the last rank to join.

    Until every rank has joined, allreduces submitted by the others proceed with this rank
    contributing a neutral value (0 for Sum/Average, identity for Min/Max/Product); Average
    divides by the number of ranks that did not join (hvdcore's documented choice). Other
    collectives raise while a rank has joined.
    """
    basics.state()
    return _wait(_submit_control(JOIN, "join"))


def add_process_set(process_set: ProcessSet | Sequence[int]) -> ProcessSet:
    """Register a process set; collective over all ranks (same ranks everywhere)."""
    st = basics.state()
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise errors.UnsupportedError(f"{ps!r} is already registered")
    bad = [r for r in ps.ranks if not 0 <= r < st.size]
    if bad or not ps.ranks:
        raise errors.UnsupportedError(
            f"rank {st.rank}: process set ranks {ps.ranks} must be non-empty and within "
            f"0..{st.size - 1}")
    nm = _name(st, ADD_SET, 0, None)
    sid = _wait(_submit_control(ADD_SET, nm, ranks=tuple(ps.ranks)))
    ps._bind(sid, st.rank)
    st.sets[sid] = ps
    return ps


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister a process set (collective over all ranks); False if it was not registered."""
    st = basics.state()
    sid = getattr(process_set, "process_set_id", None)
    if sid is None or sid == 0 or sid not in st.sets:
        return False
    nm = _name(st, REMOVE_SET, 0, None)
    _wait(_submit_control(REMOVE_SET, nm, root=sid))
    st.sets.pop(sid, None)
    process_set.process_set_id = None
    return True


__all__ = [
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "SUPPORTED_DTYPES",
    "allreduce", "allreduce_async", "grouped_allreduce", "grouped_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_async", "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter",
    "grouped_reducescatter_async", "barrier", "join", "poll", "synchronize",
    "add_process_set", "remove_process_set",
]
