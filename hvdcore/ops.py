"""Allreduce on NumPy arrays with Horovod's names, signatures and semantics; poll/synchronize.

Every call checks its arguments on the calling rank (:mod:`hvdcore.arguments`), builds the
request's :class:`~hvdcore.engine.messages.Meta` and hands it to the engine through
:mod:`hvdcore.engine.requests`. The other collectives live in :mod:`hvdcore.collectives`; this
module re-exports them, so ``hvdcore.ops`` offers the whole core API.

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
from hvdcore.arguments import (
    SUPPORTED_DTYPES,
    as_array,
    check_adasum,
    device_of,
    dtype_name,
    output_for,
    part_names,
    process_set_id,
    resolve_op,
    scale_factor,
)
from hvdcore.collectives import (
    add_process_set,
    allgather,
    allgather_async,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_async,
    grouped_allgather,
    grouped_allgather_async,
    grouped_reducescatter,
    grouped_reducescatter_async,
    join,
    reducescatter,
    reducescatter_async,
    remove_process_set,
)
from hvdcore.docstrings import SYNC_RAISES, documented
from hvdcore.engine import requests
from hvdcore.engine.handle import Handle
from hvdcore.engine.messages import ALLREDUCE, Meta, ReduceOp
from hvdcore.process_sets import ProcessSet, global_process_set

Average = ReduceOp.AVERAGE
Sum = ReduceOp.SUM
Adasum = ReduceOp.ADASUM
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT


@documented(returns="True when the operation has finished (its result or error is ready).",
            raises=())
def poll(handle: Handle) -> bool:
    """True when the asynchronous operation behind ``handle`` has finished.

    >>> h = hvd.allreduce_async(np.ones(3))
    >>> while not hvd.poll(h): do_other_work()
    """
    if not isinstance(handle, Handle):
        raise errors.UnsupportedError(f"poll() expects a handle, got {type(handle).__name__}")
    st = basics.current()
    return requests.poll(st.engine if st is not None else None, handle)


@documented(returns="What the blocking form of the call returns.", raises=SYNC_RAISES)
def synchronize(handle: Handle) -> Any:
    """Wait for ``handle`` and return its result (raises the operation's error).

    >>> hvd.synchronize(hvd.allreduce_async(np.ones(3), op=hvd.Sum))   # [size, size, size]
    """
    if not isinstance(handle, Handle):
        raise errors.UnsupportedError(
            f"synchronize() expects a handle, got {type(handle).__name__}")
    st = basics.current()
    return requests.wait(st.engine if st is not None else None, handle)


def _allreduce_meta(
    tensor: Any, average: bool | None, name: str | None, op: Any, prescale_factor: Any,
    postscale_factor: Any, process_set: Any, out: Any,
) -> tuple[Any, Meta, np.ndarray, np.ndarray | None]:
    """Check one allreduce's arguments: (engine, meta, array to send, output array or None).

    A named call whose arguments are those of the name's last call (same op, scale factors
    and process set objects, an array of the same dtype and shape, no ``out=`` or in place)
    reuses that call's meta: a training loop repeats the same calls every step.
    """
    if average is None and type(name) is str:
        last = _checked.get(name)
        if (last is not None and last[0] is op
                and type(prescale_factor) is float and prescale_factor == last[1]
                and type(postscale_factor) is float and postscale_factor == last[2]
                and last[3] is process_set
                and ((type(tensor) is np.ndarray and last[7] is None and tensor.dtype is last[4]
                      and tensor.shape == last[5].shape and tensor.flags.c_contiguous
                      and (out is None or _plain_output(out, tensor)))
                     # a binding's buffer, the very object it checked (see DeviceBuffer)
                     or (tensor is last[7] is not None and (out is None or out is tensor)))):
            meta, engine = last[5], last[6]
            if process_set.process_set_id == meta.set_id and meta.set_id in engine.sets:
                _thread_names.named += 1  # the call reached the core (as request_name counts)
                return engine, meta, tensor, out
    st = basics.state()
    rank = st.rank
    sid = process_set_id(process_set, st.engine.sets, ALLREDUCE, rank)
    nm = st.request_name(ALLREDUCE, sid, name)
    try:
        if average is None and type(op) is ReduceOp:
            rop: ReduceOp = op  # a binding resolved it already (one check per call)
        else:
            rop = resolve_op(average, op, ALLREDUCE, rank)
        pre = scale_factor(prescale_factor, "prescale_factor", ALLREDUCE, rank)
        post = scale_factor(postscale_factor, "postscale_factor", ALLREDUCE, rank)
        arr = as_array(tensor, ALLREDUCE, rank, rop)
        if rop is ReduceOp.ADASUM:
            check_adasum(arr, sid, len(st.engine.sets[sid].ranks), ALLREDUCE, rank)
        if out is not None:
            arr = output_for(out, tensor, arr, ALLREDUCE, rank)
    except Exception as exc:  # the peers' matching calls must fail too, not wait
        requests.reject(st.engine, sid, ALLREDUCE, [nm], exc)
    meta = Meta(sid, nm, ALLREDUCE, dtype_name(arr.dtype), arr.shape, int(rop), -1, pre, post)
    device = type(arr) is not np.ndarray
    if device:
        meta.device = device_of(arr)
    if name is not None and average is None and arr is tensor and (
            (out is None or out is tensor) if device else
            (out is None or _plain_output(out, tensor))):
        if len(_checked) >= _CHECKED_NAMES:
            _checked.clear()
        # (a DeviceBuffer is remembered as the object itself: bindings reuse one per tensor)
        _checked[name] = (op, prescale_factor, postscale_factor, process_set, arr.dtype, meta,
                          st.engine, arr if device else None)
    return st.engine, meta, arr, out


_CHECKED_NAMES = 4096  # names whose last checked allreduce is remembered
_checked = basics.checked_allreduces  # (one dict for the process: emptied, never replaced)
_thread_names = basics.thread_names


def _plain_output(out: Any, tensor: np.ndarray) -> bool:
    """True when ``out=`` is ``tensor`` itself (in place, writeable) or an array like it that
    does not overlap it: then the array to send is ``tensor`` itself (see ``output_for``)."""
    if out is tensor:
        return bool(tensor.flags.writeable)
    return (type(out) is np.ndarray and out.dtype is tensor.dtype and out.shape == tensor.shape
            and out.flags.c_contiguous and out.flags.writeable
            and not np.may_share_memory(out, tensor))


@documented("allreduce",
            returns=("A handle: ``synchronize(handle)`` returns the reduced array (``out`` when "
                     "given)."))
def allreduce_async(
    tensor: np.ndarray, average: bool | None = None, name: str | None = None, op: Any = None,
    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set, out: np.ndarray | None = None,
) -> Handle:
    """Start an allreduce of ``tensor``; ``synchronize(handle)`` returns the reduced array.

    >>> h = hvd.allreduce_async(np.ones(3), name="ones")
    """
    engine, meta, arr, out = _allreduce_meta(tensor, average, name, op, prescale_factor,
                                             postscale_factor, process_set, out)
    return requests.allreduce_async(engine, meta, arr, out)


def allreduce_batch_async(
    arrays: Sequence[np.ndarray], names: Sequence[str], op: Any = None,
    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> Handle:
    """Start one in-place allreduce per array, each under its own name, behind one handle.

    The same requests as ``allreduce_async(a, name=n, op=op, ..., out=a)`` for each pair
    (negotiated, cached and fused alike), entering the engine in one step: what a framework
    binding submits for a training step's gradients. If an array fails its checks, the
    arrays before it are still submitted (the other ranks wait for them) and the error is
    raised, carrying their handle as ``exc.submitted``; ``synchronize(handle)`` returns the
    list of arrays.

    Passing the same ``names`` *tuple* object as an earlier batch, with the same op, scale
    factors and process set, reuses that batch's checked requests for every array of the
    dtype and shape it had (C-contiguous and writeable): one pass over the arrays instead of
    a per-name lookup (a step of a model with hundreds of gradients). With caller progress,
    when every array matched and the batch is one fused response of the response cache, the
    round and the fused data call are then made at once as one call (the engine's steady
    path, compiled where it can be: ``HVDCORE_HOTPATH``): the returned handle is already done,
    or, when a peer has not offered the batch yet, its requests wait in the round as usual.

    >>> hvd.synchronize(hvd.ops.allreduce_batch_async([w, b], ["grad.w", "grad.b"]))
    """
    st = basics.state()
    engine = st.engine
    if len(arrays) != len(names):
        raise errors.ArgumentError(
            f"rank {st.rank}: allreduce_batch_async got {len(arrays)} arrays and "
            f"{len(names)} names")
    items: list[requests.Item] = []
    memo = st.batches.get(id(names)) if type(names) is tuple else None
    if (memo is not None and memo[0] is names and memo[1] is op
            and type(prescale_factor) is float and prescale_factor == memo[2]
            and type(postscale_factor) is float and postscale_factor == memo[3]
            and memo[4] is process_set):
        metas = memo[5]
        sid = metas[0].set_id
        if process_set.process_set_id == sid and sid in engine.sets:
            st.request_name(ALLREDUCE, sid, names[0])  # (the call reached the core)
            for arr, meta, dtype in zip(arrays, metas, memo[6], strict=True):
                if not (type(arr) is np.ndarray and arr.dtype is dtype
                        and arr.shape == meta.shape and arr.flags.c_contiguous
                        and arr.flags.writeable):
                    break  # this one and the rest take the checks below
                items.append((meta, arr, arr))
            else:
                if engine.caller_progress:
                    got = requests.batch_steady(engine, metas, arrays,
                                                f"{len(arrays)} allreduces")
                    if got is not None:
                        return got
    done = len(items)
    try:
        for i in range(done, len(arrays)):
            arr = arrays[i]
            engine, meta, checked, out = _allreduce_meta(arr, None, names[i], op,
                                                         prescale_factor, postscale_factor,
                                                         process_set, arr)
            items.append((meta, checked, out))
    except BaseException as exc:
        if items:  # the peers wait for these: submit them, and let the caller wait for them
            exc.submitted = requests.submit(  # type: ignore[attr-defined]
                engine, items, list, f"{len(items)} allreduces")
        raise
    if (done < len(items) and type(names) is tuple and type(prescale_factor) is float
            and type(postscale_factor) is float and all(type(n) is str for n in names)
            and all(type(a) is np.ndarray and c is a and not m.device
                    for a, (m, c, _) in zip(arrays, items, strict=True))):
        # (a None name is an automatic one, fresh on every call: never remembered)
        batches = st.batches
        if len(batches) >= _CHECKED_BATCHES:
            batches.clear()
        batches[id(names)] = (names, op, prescale_factor, postscale_factor, process_set,
                              [m for m, _, _ in items], [a.dtype for a in arrays])
    return requests.submit(engine, items, list, f"{len(items)} allreduces")


_CHECKED_BATCHES = 64  # names tuples whose batch is remembered


@documented("allreduce", returns="The reduced array (``out`` when given).")
def allreduce(
    tensor: np.ndarray, average: bool | None = None, name: str | None = None, op: Any = None,
    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set, out: np.ndarray | None = None,
) -> np.ndarray:
    """Reduce ``tensor`` across the ranks of ``process_set`` and return the result.

    >>> hvd.allreduce(np.array([hvd.rank()], np.float64))      # mean of the ranks
    """
    engine, meta, arr, out = _allreduce_meta(tensor, average, name, op, prescale_factor,
                                             postscale_factor, process_set, out)
    return requests.allreduce(engine, meta, arr, out)


@documented("allreduce",
            returns="A handle: ``synchronize(handle)`` returns the list of reduced arrays.")
def grouped_allreduce_async(
    tensors: Sequence[np.ndarray], average: bool | None = None, name: str | None = None,
    op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set, out: Sequence[np.ndarray] | None = None,
) -> Handle:
    """Start allreduces of several tensors as one group; the handle yields a list.

    A named call whose arguments are those of the name's last call (same op, scale factors
    and process set objects, as many C-contiguous arrays of the same dtypes and shapes, no
    ``out=``) reuses that call's checked requests: a training step repeats the same group.

    >>> h = hvd.grouped_allreduce_async([np.ones(2), np.zeros(3)], op=hvd.Sum)
    """
    st = basics.state()
    if name is not None and average is None and out is None:
        items = _grouped_memo(st, tensors, name, op, prescale_factor, postscale_factor,
                              process_set)
        if items is not None:
            return requests.submit(st.engine, items, list, f"grouped_allreduce '{name}'")
    rank = st.rank
    sid = process_set_id(process_set, st.engine.sets, ALLREDUCE, rank)
    base = st.request_name(ALLREDUCE, sid, name)
    listed = isinstance(tensors, (list, tuple))
    names = part_names(base, len(tensors) if listed else 1)
    try:
        rop = resolve_op(average, op, ALLREDUCE, rank)
        if not listed:
            raise errors.UnsupportedError(
                f"rank {rank}: grouped_allreduce expects a list of arrays, got "
                f"{type(tensors).__name__}")
        pre = scale_factor(prescale_factor, "prescale_factor", ALLREDUCE, rank)
        post = scale_factor(postscale_factor, "postscale_factor", ALLREDUCE, rank)
        if out is not None and (not isinstance(out, (list, tuple)) or len(out) != len(tensors)):
            raise errors.ArgumentError(
                f"rank {rank}: grouped_allreduce out= must be a list of {len(tensors)} arrays")
        items = []
        for i, t in enumerate(tensors):
            arr = as_array(t, ALLREDUCE, rank, rop)
            if rop is ReduceOp.ADASUM:
                check_adasum(arr, sid, len(st.engine.sets[sid].ranks), ALLREDUCE, rank)
            o = out[i] if out is not None else None
            if o is not None:
                arr = output_for(o, t, arr, ALLREDUCE, rank)
            items.append((Meta(sid, names[i], ALLREDUCE, dtype_name(arr.dtype), arr.shape,
                               int(rop), -1, pre, post, device=device_of(arr)), arr, o))
    except Exception as exc:  # the peers' matching calls must fail too, not wait
        requests.reject(st.engine, sid, ALLREDUCE, names, exc)
    if (name is not None and average is None and out is None and items
            and type(prescale_factor) is float and type(postscale_factor) is float
            and all(a is t and type(a) is np.ndarray
                    for (_, a, _), t in zip(items, tensors, strict=True))):
        groups = st.groups
        if len(groups) >= _CHECKED_GROUPS:
            groups.clear()
        groups[name] = (op, prescale_factor, postscale_factor, process_set,
                        [m for m, _, _ in items], [a.dtype for _, a, _ in items])
    return requests.submit(st.engine, items, list, f"grouped_allreduce '{base}'")


_CHECKED_GROUPS = 256  # grouped allreduce names whose last checked call is remembered


def _grouped_memo(st: Any, tensors: Any, name: str, op: Any, prescale_factor: Any,
                  postscale_factor: Any, process_set: Any) -> list | None:
    """The submission items of a named grouped allreduce that repeats the name's last checked
    call (see ``grouped_allreduce_async``), or None when it does not: then the full checks."""
    memo = st.groups.get(name)
    if (memo is None or memo[0] is not op or type(prescale_factor) is not float
            or prescale_factor != memo[1] or type(postscale_factor) is not float
            or postscale_factor != memo[2] or memo[3] is not process_set
            or type(tensors) not in (list, tuple) or len(tensors) != len(memo[4])):
        return None
    metas, dtypes = memo[4], memo[5]
    sid = metas[0].set_id
    if process_set.process_set_id != sid or sid not in st.engine.sets:
        return None
    items = []
    for t, meta, dtype in zip(tensors, metas, dtypes, strict=True):
        if not (type(t) is np.ndarray and t.dtype is dtype and t.shape == meta.shape
                and t.flags.c_contiguous):
            return None
        items.append((meta, t, None))
    st.request_name(ALLREDUCE, sid, name)  # (the call reached the core)
    return items


@documented("allreduce", returns="The reduced arrays, in the order of ``tensors``.")
def grouped_allreduce(
    tensors: Sequence[np.ndarray], average: bool | None = None, name: str | None = None,
    op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set, out: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Allreduce a list of tensors together (fused where possible); returns a list.

    >>> a, b = hvd.grouped_allreduce([np.ones(2), np.zeros(3)])
    """
    st = basics.current()
    return requests.blocking(st.engine if st is not None else None,
                             lambda: grouped_allreduce_async(tensors, average, name, op,
                                                             prescale_factor, postscale_factor,
                                                             process_set, out))


__all__ = [
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "SUPPORTED_DTYPES",
    "allreduce", "allreduce_async", "grouped_allreduce", "grouped_allreduce_async",
    "allreduce_batch_async",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_async", "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter",
    "grouped_reducescatter_async", "barrier", "join", "poll", "synchronize",
    "add_process_set", "remove_process_set",
]
