"""The core collectives other than allreduce, and process-set registration, on NumPy arrays.

allgather, broadcast, alltoall, reducescatter (and their grouped/async forms), barrier, join,
add_process_set and remove_process_set, with Horovod's names, signatures and semantics. Like
:mod:`hvdcore.ops` (which re-exports them), each call checks its arguments on the calling rank
(:mod:`hvdcore.arguments`) and hands named requests to the engine through
:mod:`hvdcore.engine.requests`; blocking calls wait for their ``*_async`` call's handle.

Example::

    >>> import numpy as np, hvdcore as hvd
    >>> hvd.init()
    >>> rows = hvd.allgather(np.full((hvd.rank() + 1, 2), hvd.rank()))  # ragged dim 0
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import numpy as np

from hvdcore import basics, errors
from hvdcore.arguments import (
    alltoall_splits,
    as_array,
    broadcast_root,
    device_of,
    dtype_name,
    output_for,
    part_names,
    process_set_id,
    resolve_op,
    scale_factor,
)
from hvdcore.docstrings import PROCESS_SET_RAISES, documented
from hvdcore.engine import requests
from hvdcore.engine.handle import Handle
from hvdcore.engine.messages import (
    ADD_SET,
    ALLGATHER,
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

__all__ = [
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_async", "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter",
    "grouped_reducescatter_async", "barrier", "join", "add_process_set", "remove_process_set",
    "reject_call", "rejecting",
]

_Finalize = Callable[[list[Any]], Any]
_F = TypeVar("_F", bound=Callable[..., Any])


def _engine() -> Any:
    st = basics.current()
    return st.engine if st is not None else None


# -- allgather --------------------------------------------------------------------------------

def _allgather(tensors: Sequence[Any], name: str | None, process_set: Any,
               finalize: _Finalize, label: str) -> Handle:
    st = basics.state()
    sid = process_set_id(process_set, st.engine.sets, ALLGATHER, st.rank)
    base = st.request_name(ALLGATHER, sid, name)
    listed = isinstance(tensors, (list, tuple))
    names = part_names(base, len(tensors) if listed else 1)
    try:
        if not listed:
            raise errors.UnsupportedError(
                f"rank {st.rank}: {label} expects a list of arrays, got {type(tensors).__name__}")
        items = []
        for i, t in enumerate(tensors):
            arr = as_array(t, ALLGATHER, st.rank)
            shape = arr.shape if arr.ndim else (1,)
            items.append((Meta(sid, names[i], ALLGATHER, dtype_name(arr.dtype), shape,
                               device=device_of(arr)), arr, None))
    except Exception as exc:  # the peers' matching calls must fail too, not wait
        requests.reject(st.engine, sid, ALLGATHER, names, exc)
    return requests.submit(st.engine, items, finalize, f"{label} '{base}'")


@documented("allgather",
            returns=("A handle: ``synchronize(handle)`` returns one gathered array per input, in"
                     " order."))
def grouped_allgather_async(tensors: Sequence[np.ndarray], name: str | None = None,
                            process_set: ProcessSet = global_process_set) -> Handle:
    """Start allgathers of several tensors; the handle yields a list."""
    return _allgather(tensors, name, process_set, list, "grouped_allgather")


@documented("allgather", returns="A handle: ``synchronize(handle)`` returns the gathered array.")
def allgather_async(tensor: np.ndarray, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> Handle:
    """Start an allgather; ``synchronize`` returns the concatenation along dimension 0."""
    return _allgather([tensor], name, process_set, requests.first, "allgather")


@documented("allgather",
            returns=("A new array: every rank's ``tensor`` concatenated along the first "
                     "dimension, in rank order."))
def allgather(tensor: np.ndarray, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Concatenate every rank's tensor along the first dimension (sizes may differ).

    >>> hvd.allgather(np.full((hvd.rank() + 1, 2), hvd.rank()))   # ragged first dimension
    """
    return requests.blocking(_engine(), lambda: allgather_async(tensor, name, process_set))


@documented("allgather", returns="One gathered array per input, in the order of ``tensors``.")
def grouped_allgather(tensors: Sequence[np.ndarray], name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list[np.ndarray]:
    """Allgather each tensor of a list; returns a list."""
    return requests.blocking(_engine(),
                             lambda: grouped_allgather_async(tensors, name, process_set))


# -- broadcast --------------------------------------------------------------------------------

@documented("broadcast",
            returns=("A handle: ``synchronize(handle)`` returns the root's array (``out`` when "
                     "given)."))
def broadcast_async(tensor: np.ndarray, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set,
                    out: np.ndarray | None = None) -> Handle:
    """Start a broadcast from ``root_rank`` (a global rank that belongs to the set)."""
    st = basics.state()
    sid = process_set_id(process_set, st.engine.sets, BROADCAST, st.rank)
    nm = st.request_name(BROADCAST, sid, name)
    try:
        arr = as_array(tensor, BROADCAST, st.rank)
        root = broadcast_root(root_rank, process_set.ranks, st.rank)
        if out is not None:
            arr = output_for(out, tensor, arr, BROADCAST, st.rank)
    except Exception as exc:  # the peers' matching calls must fail too, not wait
        requests.reject(st.engine, sid, BROADCAST, [nm], exc)
    meta = Meta(sid, nm, BROADCAST, dtype_name(arr.dtype), arr.shape, root=root,
                device=device_of(arr))
    return requests.submit(st.engine, [(meta, arr, out)], requests.first, f"broadcast '{nm}'")


@documented("broadcast", returns="The root's array on every rank (``out`` when given).")
def broadcast(tensor: np.ndarray, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set,
              out: np.ndarray | None = None) -> np.ndarray:
    """Return root's ``tensor`` on every rank (the input is not modified unless out=tensor).

    >>> w = hvd.broadcast(np.random.rand(3), root_rank=0)   # identical everywhere
    """
    return requests.blocking(
        _engine(), lambda: broadcast_async(tensor, root_rank, name, process_set, out))


# -- alltoall ---------------------------------------------------------------------------------

@documented("alltoall",
            returns="A handle: ``synchronize(handle)`` returns ``(output, received_splits)``.")
def alltoall_async(tensor: np.ndarray, splits: Any = None, name: str | None = None,
                   process_set: ProcessSet = global_process_set) -> Handle:
    """Start an alltoall; ``synchronize`` returns ``(output, received_splits)``."""
    st = basics.state()
    sid = process_set_id(process_set, st.engine.sets, ALLTOALL, st.rank)
    nm = st.request_name(ALLTOALL, sid, name)
    try:
        arr = as_array(tensor, ALLTOALL, st.rank)
        if arr.ndim == 0:
            raise errors.ArgumentError(f"rank {st.rank}: alltoall needs at least 1 dimension")
        sp = alltoall_splits(splits, arr.shape[0], len(process_set.ranks), ALLTOALL, st.rank)
    except Exception as exc:  # the peers' matching calls must fail too, not wait
        requests.reject(st.engine, sid, ALLTOALL, [nm], exc)
    meta = Meta(sid, nm, ALLTOALL, dtype_name(arr.dtype), arr.shape, splits=tuple(sp),
                device=device_of(arr))
    return requests.submit(st.engine, [(meta, arr, None)], requests.first, f"alltoall '{nm}'")


@documented("alltoall",
            returns=("``(output, received_splits)``: the slices every rank sent to this one, "
                     "concatenated in rank order, and how many came from each rank."))
def alltoall(tensor: np.ndarray, splits: Any = None, name: str | None = None,
             process_set: ProcessSet = global_process_set) -> tuple[np.ndarray, np.ndarray]:
    """Send ``splits[i]`` rows of ``tensor`` to rank i; returns (received rows, received splits).

    >>> out, got = hvd.alltoall(np.arange(hvd.size() * 2), splits=[2] * hvd.size())
    """
    return requests.blocking(_engine(),
                             lambda: alltoall_async(tensor, splits, name, process_set))


# -- reducescatter ----------------------------------------------------------------------------

def _reducescatter(tensors: Sequence[Any], name: str | None, op: Any, process_set: Any,
                   prescale_factor: Any, postscale_factor: Any, finalize: _Finalize,
                   label: str) -> Handle:
    st = basics.state()
    rank = st.rank
    sid = process_set_id(process_set, st.engine.sets, REDUCESCATTER, rank)
    base = st.request_name(REDUCESCATTER, sid, name)
    listed = isinstance(tensors, (list, tuple))
    names = part_names(base, len(tensors) if listed else 1)
    try:
        if not listed:
            raise errors.UnsupportedError(
                f"rank {rank}: {label} expects a list of arrays, got {type(tensors).__name__}")
        rop = resolve_op(None, op, REDUCESCATTER, rank, allow_adasum=False)
        pre = scale_factor(prescale_factor, "prescale_factor", REDUCESCATTER, rank)
        post = scale_factor(postscale_factor, "postscale_factor", REDUCESCATTER, rank)
        items = []
        for i, t in enumerate(tensors):
            arr = as_array(t, REDUCESCATTER, rank, rop)
            if arr.ndim == 0:
                raise errors.ArgumentError(
                    f"rank {rank}: reducescatter needs at least 1 dimension")
            items.append((Meta(sid, names[i], REDUCESCATTER, dtype_name(arr.dtype), arr.shape,
                               int(rop), -1, pre, post, device=device_of(arr)), arr, None))
    except Exception as exc:  # the peers' matching calls must fail too, not wait
        requests.reject(st.engine, sid, REDUCESCATTER, names, exc)
    return requests.submit(st.engine, items, finalize, f"{label} '{base}'")


@documented("reducescatter",
            returns="A handle: ``synchronize(handle)`` returns the list of this rank's blocks.")
def grouped_reducescatter_async(
    tensors: Sequence[np.ndarray], name: str | None = None, op: Any = ReduceOp.AVERAGE,
    process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> Handle:
    """Start reducescatters of several tensors; the handle yields a list."""
    return _reducescatter(tensors, name, op, process_set, prescale_factor, postscale_factor,
                          list, "grouped_reducescatter")


@documented("reducescatter",
            returns="A handle: ``synchronize(handle)`` returns this rank's block of the reduction.")
def reducescatter_async(
    tensor: np.ndarray, name: str | None = None, op: Any = ReduceOp.AVERAGE,
    process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> Handle:
    """Start a reducescatter; ``synchronize`` returns this rank's block."""
    return _reducescatter([tensor], name, op, process_set, prescale_factor, postscale_factor,
                          requests.first, "reducescatter")


@documented("reducescatter",
            returns="This rank's block of the reduction along the first dimension.")
def reducescatter(
    tensor: np.ndarray, name: str | None = None, op: Any = ReduceOp.AVERAGE,
    process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> np.ndarray:
    """Reduce across ranks and return this rank's block of dimension 0.

    With N rows and n ranks, the first N % n ranks get N // n + 1 rows, the others N // n.

    >>> part = hvd.reducescatter(np.ones((4, 2)), op=hvd.Sum)
    """
    return requests.blocking(_engine(), lambda: reducescatter_async(
        tensor, name, op, process_set, prescale_factor, postscale_factor))


@documented("reducescatter",
            returns="This rank's block of each reduction, in the order of ``tensors``.")
def grouped_reducescatter(
    tensors: Sequence[np.ndarray], name: str | None = None, op: Any = ReduceOp.AVERAGE,
    process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> list[np.ndarray]:
    """Reducescatter each tensor of a list; returns a list."""
    return requests.blocking(_engine(), lambda: grouped_reducescatter_async(
        tensors, name, op, process_set, prescale_factor, postscale_factor))


# -- barrier, join, process sets --------------------------------------------------------------

@documented()
def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Block until every rank of the set has called barrier()."""
    st = basics.state()
    sid = process_set_id(process_set, st.engine.sets, BARRIER, st.rank)
    nm = st.request_name(BARRIER, sid, None)
    requests.wait(st.engine, requests.submit_control(st.engine, BARRIER, nm, sid))


@documented(returns="The rank that joined last.")
def join() -> int:
    """Declare that this rank has no more data; returns the last rank to join.

    Until every rank has joined, allreduces submitted by the others proceed with this rank
    contributing a neutral value (0 for Sum/Average, identity for Min/Max/Product); Average
    divides by the set size, joined ranks included, as Horovod does. Other collectives raise
    while a rank has joined.
    """
    st = basics.state()
    return requests.wait(st.engine, requests.submit_control(st.engine, JOIN, "join"))


@documented(returns="The registered set (``process_set`` itself when it was a ProcessSet).",
            raises=PROCESS_SET_RAISES,
            process_set="A ``ProcessSet`` or a list of world ranks, the same on every rank.")
def add_process_set(process_set: ProcessSet | Sequence[int]) -> ProcessSet:
    """Register a process set; collective over all ranks (same ranks everywhere).

    >>> evens = hvd.add_process_set(range(0, hvd.size(), 2))
    """
    st = basics.state()
    nm = st.request_name(ADD_SET, 0, None)
    try:
        ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
        if ps.process_set_id is not None:
            raise errors.ArgumentError(f"rank {st.rank}: {ps!r} is already registered")
        bad = [r for r in ps.ranks if not 0 <= r < st.size]
        if bad or not ps.ranks:
            raise errors.ArgumentError(
                f"rank {st.rank}: process set ranks {ps.ranks} must be non-empty and within "
                f"0..{st.size - 1}")
    except Exception as exc:  # the other ranks' add_process_set must fail too, not wait
        requests.reject(st.engine, 0, ADD_SET, [nm], exc)
    sid = requests.wait(st.engine, requests.submit_control(st.engine, ADD_SET, nm,
                                                           ranks=tuple(ps.ranks)))
    ps.bind(sid, st.rank)
    st.sets[sid] = ps
    return ps


def reject_call(kind: str, exc: BaseException, name: str | None = None,
                process_set: ProcessSet = global_process_set, parts: int = 1) -> NoReturn:
    """For framework bindings: their own checks of a call failed with ``exc`` on this rank.

    Takes the call's request name(s) as the core call would have (so automatic names stay
    in step), makes the other ranks' matching calls fail with the reason instead of waiting
    for this rank, and raises ``exc``. ``parts``: the number of tensors of a grouped call.
    """
    st = basics.state()
    sid = process_set_id(process_set, st.engine.sets, kind, st.rank)
    base = st.request_name(kind, sid, name)
    requests.reject(st.engine, sid, kind, part_names(base, parts), exc)


def rejecting(kind: str, grouped: bool = False) -> Callable[[_F], _F]:
    """Decorator for a binding's collective: an exception raised before the call reached the
    core (the binding's own checks: tensor type, dtype, splits form) is turned into a rejected
    call (:func:`reject_call`), so the other ranks' matching calls fail with the reason
    instead of waiting. The call's ``name`` and ``process_set`` arguments are read from its
    signature; ``grouped``: the first argument is the list of tensors (one name per tensor).
    The success path costs one thread-local read: the wrapper is made with the function's
    own parameter list, since forwarding ``*args, **kwargs`` costs ~3 us right after an MPI
    call (the blocking collectives run every step).
    """
    def wrap(fn: _F) -> _F:
        params = list(inspect.signature(fn).parameters.values())
        plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        if not params or any(p.kind not in plain or p.name in ("before", "exc")
                             or p.name.startswith("_") for p in params):
            raise TypeError(f"rejecting: {fn.__name__} needs named parameters only, none "
                            "named before, exc or _*")
        env: dict[str, Any] = {"_fn": fn, "_names": basics.thread_names,
                               "_failed": functools.partial(_rejected, kind, grouped)}
        heads, passes, star = [], [], False
        for p in params:
            if p.kind is inspect.Parameter.KEYWORD_ONLY and not star:
                heads.append("*")
                star = True
            if p.default is inspect.Parameter.empty:
                heads.append(p.name)
            else:
                env[f"_d_{p.name}"] = p.default
                heads.append(f"{p.name}=_d_{p.name}")
            passes.append(f"{p.name}={p.name}" if star else p.name)
        bound = ", ".join(f"{p.name!r}: {p.name}" for p in params)
        src = (f"def {fn.__name__}({', '.join(heads)}):\n"
               f"    before = _names.named\n"
               f"    try:\n"
               f"        return _fn({', '.join(passes)})\n"
               f"    except Exception as exc:\n"
               f"        _failed(exc, before, {{{bound}}})\n"
               f"        raise\n")
        exec(compile(src, f"<rejecting {fn.__qualname__}>", "exec"), env)
        return functools.wraps(fn)(env[fn.__name__])  # type: ignore[return-value]
    return wrap


def _rejected(kind: str, grouped: bool, exc: BaseException, before: int,
              bound: dict[str, Any]) -> None:
    """The failure path of a :func:`rejecting` call: returns (the caller re-raises) when the
    call reached the core or hvdcore is not initialized; else rejects the call."""
    if basics.thread_names.named != before or basics.current() is None:
        return
    first = next(iter(bound.values()), None)
    parts = len(first) if grouped and isinstance(first, (list, tuple)) else 1
    reject_call(kind, exc, bound.get("name"), bound.get("process_set", global_process_set),
                parts)


@documented(returns="True when the set was registered and is now removed.",
            raises=PROCESS_SET_RAISES, process_set="A registered ``ProcessSet``.")
def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister a process set (collective over all ranks); False if it was not registered."""
    st = basics.state()
    sid = getattr(process_set, "process_set_id", None)
    if sid is None or sid == 0 or sid not in st.sets:
        return False
    nm = st.request_name(REMOVE_SET, 0, None)
    requests.wait(st.engine, requests.submit_control(st.engine, REMOVE_SET, nm, root=sid))
    st.sets.pop(sid, None)
    process_set.process_set_id = None
    return True
