"""Argument checks shared by the core (:mod:`hvdcore.ops`) and the torch and TensorFlow bindings.

Each check raises the one exception type :mod:`hvdcore.errors` lists for its mistake (the type
Horovod raises for it) and returns the normalised value. ``what`` names the call in messages;
``rank``, when given, prefixes them ("rank 1: allreduce: ..."). The checks run on every
collective, so the common case returns early (they sit on the blocking-allreduce hot path).

Example::

    >>> from hvdcore import arguments
    >>> arguments.resolve_op(None, None)               # Horovod's default
    <ReduceOp.AVERAGE: 0>
    >>> arguments.resolve_op(True, 1)                  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    hvdcore.errors.ArgumentError: allreduce: give either op= or the deprecated average=, not both
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hvdcore.backends.base import DeviceBuffer
from hvdcore.engine.messages import ReduceOp
from hvdcore.errors import ArgumentError, UnimplementedError, UnsupportedError
from hvdcore.process_sets import ProcessSet

__all__ = [
    "SUPPORTED_DTYPES", "dtype_name", "device_of", "resolve_op", "as_array", "scale_factor",
    "output_for",
    "process_set_id", "broadcast_root", "splits_vector", "alltoall_splits", "part_names",
    "gradient_groups", "keras_optimizer_op",
]

SUPPORTED_DTYPES = tuple(np.dtype(d) for d in (
    np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_))
"""NumPy dtypes the core reduces and moves."""
_SUPPORTED_NAMES = ", ".join(d.name for d in SUPPORTED_DTYPES)
_DTYPE_NAMES = {d: d.name for d in SUPPORTED_DTYPES}
_OP_NAMES = "Average, Sum, Adasum, Min, Max, Product"


def _where(what: str, rank: int | None) -> str:
    return what if rank is None else f"rank {rank}: {what}"


def dtype_name(dtype: np.dtype) -> str:
    """``dtype.name`` without numpy's slow property on the hot path."""
    return _DTYPE_NAMES.get(dtype) or dtype.name


def device_of(arr: Any) -> str:
    """The data plane of a checked array: "" for host NumPy, else the DeviceBuffer's."""
    return arr.device if type(arr) is DeviceBuffer else ""


def resolve_op(average: bool | None, op: Any, what: str = "allreduce",
               rank: int | None = None, allow_adasum: bool = True) -> ReduceOp:
    """Horovod's rule: ``op`` (default Average), or the deprecated ``average`` (True: Average,
    False: Sum), never both. ``allow_adasum=False`` (a collective without Adasum, as
    reducescatter): Adasum raises UnimplementedError."""
    if op is None:
        if average is None or average:
            return ReduceOp.AVERAGE
        return ReduceOp.SUM
    if average is not None:
        raise ArgumentError(
            f"{_where(what, rank)}: give either op= or the deprecated average=, not both")
    if type(op) is not ReduceOp:
        if isinstance(op, bool) or not isinstance(op, (int, np.integer)):
            # int(1.5) or int(True) would silently pick Sum
            raise UnsupportedError(
                f"{_where(what, rank)}: op must be one of {_OP_NAMES}, got {op!r}")
        try:
            op = ReduceOp(int(op))
        except ValueError as exc:
            raise ArgumentError(
                f"{_where(what, rank)}: unknown op {op!r}; use one of {_OP_NAMES}") from exc
    if op is ReduceOp.ADASUM and not allow_adasum:
        raise UnimplementedError(
            f"{_where(what, rank)}: Adasum is not supported for {what}; use op=Average "
            "(or Sum)")
    return op


ADASUM_DTYPES = ("float16", "float32", "float64")


def check_adasum_ranks(set_id: int, set_size: int, what: str, rank: int | None) -> None:
    """Horovod's limits of ``op=Adasum`` on the ranks: the global process set and a
    power-of-two number of ranks (both ``UnimplementedError``, a ``NotImplementedError``)."""
    where = _where(what, rank)
    if set_id != 0:
        raise UnimplementedError(
            f"{where}: Adasum runs on the global process set only (as Horovod's), not on "
            f"process set {set_id}; use op=Average (or Sum) there")
    if set_size & (set_size - 1):
        raise UnimplementedError(
            f"{where}: Adasum needs a power-of-two number of ranks (as Horovod's), this job "
            f"has {set_size}; launch 1, 2, 4, 8, ... ranks or use op=Average (or Sum)")


def check_adasum(arr: Any, set_id: int, set_size: int, what: str, rank: int) -> None:
    """Horovod's limits of ``op=Adasum`` on the host (``horovod/torch/mpi_ops.py``): the global
    process set, a power-of-two number of ranks (both ``UnimplementedError``, a
    ``NotImplementedError`` as there), a float tensor (``ArgumentError``); and hvdcore's own:
    a host array (a data plane's tensor is ``UnimplementedError``)."""
    check_adasum_ranks(set_id, set_size, what, rank)
    where = _where(what, rank)
    device = device_of(arr)
    if device:
        raise UnimplementedError(
            f"{where}: hvdcore reduces with Adasum on the host only, and this tensor is on the "
            f"'{device}' plane; reduce a host copy (tensor.cpu()) or use op=Average (or Sum)")
    if dtype_name(arr.dtype) not in ADASUM_DTYPES:
        raise ArgumentError(
            f"{where}: Adasum combines float16, float32 or float64 tensors, got "
            f"{dtype_name(arr.dtype)}; cast it, or use op=Sum")


def keras_optimizer_op(op: Any, what: str = "DistributedOptimizer") -> ReduceOp:
    """Horovod's rule for a Keras DistributedOptimizer: ``op`` is Average or Sum, anything
    else (Adasum, Min, Max, Product) an :class:`ArgumentError` (a ValueError) when the
    optimizer is made."""
    resolved = resolve_op(None, op, what)
    if resolved in (ReduceOp.AVERAGE, ReduceOp.SUM):
        return resolved
    why = (" (Horovod's Keras optimizer does not support Adasum either)"
           if resolved is ReduceOp.ADASUM else " (as in Horovod's Keras)")
    raise ArgumentError(
        f"{what}: op must be Average or Sum, got {resolved.name.capitalize()}{why}")


def as_array(tensor: Any, what: str, rank: int | None = None,
             op: ReduceOp | None = None) -> np.ndarray:
    """``tensor`` as a native-byte-order C-contiguous array of a supported dtype (no copy when
    it already is one). With ``op``: also check that ``op`` is defined for the dtype."""
    if isinstance(tensor, np.generic):
        tensor = np.asarray(tensor)
    if not isinstance(tensor, np.ndarray):
        if type(tensor) is DeviceBuffer:
            # (stands in for an array: the engine reads its meta, the plane its tensor)
            return _device_buffer(tensor, what, rank, op)  # type: ignore[return-value]
        raise UnsupportedError(
            f"{_where(what, rank)} expects a NumPy array, got {type(tensor).__name__}; use the "
            "framework binding (hvdcore.torch / hvdcore.tensorflow) for framework tensors")
    dtype = tensor.dtype
    if not dtype.isnative:  # a byte-swapped float32 is still a float32
        dtype = dtype.newbyteorder("=")
        if dtype in SUPPORTED_DTYPES:
            tensor = tensor.astype(dtype)
    if dtype not in SUPPORTED_DTYPES:
        raise ArgumentError(
            f"{_where(what, rank)} does not support dtype {tensor.dtype}; supported: "
            f"{_SUPPORTED_NAMES}")
    if op is ReduceOp.AVERAGE and dtype == np.bool_:
        raise ArgumentError(
            f"{_where(what, rank)}: Average of a bool tensor is undefined; use op=Sum "
            "(logical or), Min/Product (logical and) or Max")
    return tensor if tensor.flags.c_contiguous else tensor.copy(order="C")


def _device_buffer(buf: DeviceBuffer, what: str, rank: int | None,
                   op: ReduceOp | None) -> DeviceBuffer:
    """The checks of :func:`as_array` for a binding's device buffer (contiguous by contract)."""
    if buf.dtype not in SUPPORTED_DTYPES:
        raise ArgumentError(
            f"{_where(what, rank)} does not support dtype {buf.dtype}; supported: "
            f"{_SUPPORTED_NAMES}")
    if op is ReduceOp.AVERAGE and buf.dtype == np.bool_:
        raise ArgumentError(
            f"{_where(what, rank)}: Average of a bool tensor is undefined; use op=Sum "
            "(logical or), Min/Product (logical and) or Max")
    return buf


def scale_factor(value: Any, which: str, what: str, rank: int | None = None) -> float:
    """A prescale/postscale factor as a float (a bool or a non-number raises)."""
    if type(value) is float:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise UnsupportedError(
            f"{_where(what, rank)}: {which} must be a number, got {value!r}")
    return float(value)


def _same_buffer(a: np.ndarray, b: np.ndarray) -> bool:
    """True if two C-contiguous arrays of one shape and dtype are views of the same memory
    (e.g. two ``Tensor.numpy()`` views of one torch tensor): then the operation is in place."""
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.shape == b.shape and a.dtype == b.dtype)


def output_for(out: Any, tensor: Any, arr: np.ndarray, what: str,
               rank: int | None = None) -> np.ndarray:
    """Check ``out=`` (an array like ``arr``) and return the array to send: ``out`` itself when
    it is the input's memory (in place), a private copy of ``arr`` when they only overlap,
    else ``arr``. ``tensor`` is what the caller passed, ``arr`` its checked array."""
    if type(arr) is DeviceBuffer:
        if (type(out) is not DeviceBuffer or out.device != arr.device or out.shape != arr.shape
                or out.dtype != arr.dtype):
            raise ArgumentError(
                f"{_where(what, rank)}: out= must be a buffer of the {arr.device} data plane "
                f"of shape {arr.shape} and dtype {arr.dtype}")
        return out if out.ptr == arr.ptr else arr
    if not isinstance(out, np.ndarray):
        raise UnsupportedError(
            f"{_where(what, rank)}: out= must be a NumPy array, got {type(out).__name__}")
    if (out.shape != arr.shape or out.dtype != arr.dtype or not out.flags.c_contiguous
            or not out.flags.writeable):
        raise ArgumentError(
            f"{_where(what, rank)}: out= must be a writeable C-contiguous array of shape "
            f"{arr.shape} and dtype {arr.dtype}")
    if out is tensor:
        return out  # in place: MPI_IN_PLACE
    # may_share_memory compares bounds only (cheap); the addresses are read just when it says yes
    if not np.may_share_memory(out, arr):
        return arr
    return out if _same_buffer(out, arr) else arr.copy()


def process_set_id(process_set: Any, sets: Mapping[int, Any], what: str, rank: int) -> int:
    """The id of a registered process set this rank belongs to (``sets``: the engine's)."""
    if not isinstance(process_set, ProcessSet):
        raise UnsupportedError(
            f"rank {rank}: {what}: process_set must be a ProcessSet, got "
            f"{type(process_set).__name__}")
    sid = process_set.process_set_id
    if sid is None or sid not in sets:
        raise ArgumentError(
            f"rank {rank}: {what}: {process_set!r} is not registered; call "
            "hvd.add_process_set(...) on every rank first")
    if rank not in process_set.ranks:
        raise ArgumentError(
            f"rank {rank}: {what}: this rank is not a member of process set {sid} "
            f"(ranks {process_set.ranks}); only members may call collectives on it")
    return sid


def broadcast_root(root: Any, ranks: list[int], rank: int | None = None,
                   what: str = "broadcast") -> int:
    """``root`` as an int that is one of ``ranks`` (global ranks of the process set)."""
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) \
            or int(root) not in ranks:
        raise ArgumentError(
            f"{_where(what, rank)} root_rank={root!r} is not a rank of the process set "
            f"(ranks {ranks})")
    return int(root)


def splits_vector(splits: Any, what: str = "alltoall") -> np.ndarray:
    """Horovod's form rule for a binding's ``splits``: a 1-D sequence of integers (as int32)."""
    arr = np.asarray(splits)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ArgumentError(f"{what} splits must be a 1-D integer sequence, got {splits!r}")
    return arr.astype(np.int32)


def alltoall_splits(splits: Any, rows: int, n: int, what: str = "alltoall",
                    rank: int | None = None) -> list[int]:
    """Rows of dimension 0 sent to each of the ``n`` members: ``splits`` (anything NumPy turns
    into integers) checked against ``rows``, or an even division when None."""
    if splits is None:
        if rows % n:
            raise ArgumentError(
                f"{_where(what, rank)} without splits needs dim 0 ({rows}) divisible by the "
                f"set size ({n}); pass splits=")
        return [rows // n] * n
    try:
        sp = [int(s) for s in np.asarray(splits).reshape(-1)]
    except (TypeError, ValueError) as exc:
        raise ArgumentError(
            f"{_where(what, rank)} splits must be integers, got {splits!r}") from exc
    if len(sp) != n or any(s < 0 for s in sp) or sum(sp) != rows:
        raise ArgumentError(
            f"{_where(what, rank)} splits {sp} must have {n} non-negative entries summing to "
            f"dim 0 ({rows})")
    return sp


def part_names(base: str, count: int) -> list[str]:
    """Request names of a grouped call's parts (the base name alone for one part)."""
    return [base] if count == 1 else [f"{base}.{i}" for i in range(count)]


def check_passes(backward_passes_per_step: Any) -> int:
    """Validate ``backward_passes_per_step`` (an int >= 1) and return it."""
    passes = int(backward_passes_per_step)
    if passes < 1:
        raise ArgumentError(
            f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
    return passes


def gradient_groups(groups: Any, num_groups: int, what: str) -> Any:
    """A DistributedOptimizer's ``groups`` as Horovod checks it: ``num_groups`` (deprecated,
    a warning) stands in when ``groups`` is None; then a positive int or a list (of lists of
    tensors), else ArgumentError."""
    if num_groups:
        import warnings

        warnings.warn(f"{what}: num_groups is deprecated (as in Horovod); use groups",
                      DeprecationWarning, stacklevel=3)
        if groups is None:
            groups = num_groups
    if groups is not None and not (isinstance(groups, list)
                                   or (isinstance(groups, int) and groups > 0)):
        raise ArgumentError(f"{what}: groups must be a positive int or a list of lists of "
                            f"tensors, got {groups!r}")
    return groups
