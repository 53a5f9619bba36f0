"""Collectives on tf.Tensor / tf.Variable, eager and inside ``tf.function``.

Each function has Horovod's ``horovod.tensorflow`` signature; arguments only meaningful for
Horovod's C++ ops (``device_dense``, ``device_sparse``, ``ignore_name_scope``) are accepted and
have no effect (hvdcore moves host buffers; see the README of this package). Results keep static
shapes where they are known (allreduce, broadcast); gathered/scattered first dimensions are
unknown (``None``) in graph mode. Gradients are defined for allreduce (Sum/Average), allgather
and broadcast, so these ops can sit inside a differentiated computation.

Example::

    import hvdcore.tensorflow as hvd
    hvd.init()
    total = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

import hvdcore as _core
from hvdcore import Average, ReduceOp, Sum, global_process_set
from hvdcore.arguments import resolve_op
from hvdcore.errors import ArgumentError
from hvdcore.tensorflow.bridge import check_dtype, run_numpy, to_tensor
from hvdcore.tensorflow.compression import Compression, Compressor

__all__ = [
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
    "broadcast_", "alltoall", "reducescatter", "grouped_reducescatter", "barrier", "join",
    "broadcast_object", "allgather_object", "size_op", "rank_op", "local_size_op",
    "local_rank_op",
]


def _shape(t: tf.Tensor) -> tf.TensorShape:
    return t.shape


def _first_dim_unknown(t: tf.Tensor) -> tf.TensorShape:
    if t.shape.rank is None:
        return tf.TensorShape(None)
    if t.shape.rank == 0:
        return tf.TensorShape([None])
    return tf.TensorShape([None]).concatenate(t.shape[1:])


def _label(kind: str, name: str | None) -> str:
    return f"{kind}.{name}" if name else kind


def _dense_allreduce(tensor: tf.Tensor, op: ReduceOp, prescale: float, postscale: float,
                     name: str | None, process_set: Any) -> tf.Tensor:
    check_dtype(tensor, "allreduce")

    def fn(a: np.ndarray) -> list[np.ndarray]:
        return [_core.allreduce(a, name=name, op=op, prescale_factor=prescale,
                                postscale_factor=postscale, process_set=process_set)]

    return run_numpy(fn, [tensor], [tensor.dtype], [_shape(tensor)], _label("allreduce", name))[0]


def _allreduce_with_grad(tensor: tf.Tensor, op: ReduceOp, prescale: float, postscale: float,
                         name: str | None, process_set: Any) -> tf.Tensor:
    if not tensor.dtype.is_floating or op not in (Sum, Average):
        return _dense_allreduce(tensor, op, prescale, postscale, name, process_set)

    @tf.custom_gradient
    def reduce(x: tf.Tensor) -> Any:
        y = _dense_allreduce(x, op, prescale, postscale, name, process_set)

        def grad(dy: tf.Tensor) -> tf.Tensor:
            grad_name = f"{name}.grad" if name else None
            return _dense_allreduce(dy, op, prescale, postscale, grad_name, process_set)

        return y, grad

    return reduce(tensor)


def allreduce(tensor: Any, average: bool | None = None, device_dense: str = "",
              device_sparse: str = "", compression: type[Compressor] = Compression.none,
              op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              name: str | None = None, process_set: Any = global_process_set,
              ignore_name_scope: bool = False) -> Any:
    """Reduce ``tensor`` over the ranks of ``process_set`` (default op: Average).

    A ``tf.IndexedSlices`` is reduced like Horovod does: values and indices are allgathered
    (Average divides the values by the set size); only Sum and Average are allowed then.

    Example: ``hvd.allreduce(tf.ones([3]), op=hvd.Sum)`` is ``[size(), size(), size()]``.
    """
    reduce_op = resolve_op(average, op)
    if isinstance(tensor, tf.IndexedSlices):
        if reduce_op not in (Sum, Average):
            raise ArgumentError(
                f"allreduce of tf.IndexedSlices supports op Sum or Average, not {reduce_op.name}; "
                "densify it first (tf.convert_to_tensor) for other ops"
            )
        factor = prescale_factor * postscale_factor
        if reduce_op == Average:
            factor /= process_set.size()
        values = allgather(tensor.values, name=f"{name}.values" if name else None,
                           process_set=process_set)
        indices = allgather(tensor.indices, name=f"{name}.indices" if name else None,
                            process_set=process_set)
        if factor != 1.0:
            values = values * tf.cast(factor, values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    t = to_tensor(tensor)
    compressed, ctx = compression.compress(t)
    out = _allreduce_with_grad(compressed, reduce_op, prescale_factor, postscale_factor, name,
                               process_set)
    return compression.decompress(out, ctx)


def grouped_allreduce(tensors: list[Any], average: bool | None = None, device_dense: str = "",
                      device_sparse: str = "", compression: type[Compressor] = Compression.none,
                      op: Any = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: Any = global_process_set) -> list[tf.Tensor]:
    """Allreduce a list of dense tensors as one fused request.

    Example: ``a, b = hvd.grouped_allreduce([tf.ones([2]), tf.zeros([3, 3])])``.
    """
    reduce_op = resolve_op(average, op, "grouped_allreduce")
    if not tensors:
        return []
    ts = [to_tensor(t) for t in tensors]
    packed = [compression.compress(t) for t in ts]
    sent = [p[0] for p in packed]
    for t in sent:
        check_dtype(t, "grouped_allreduce")

    def fn(*arrays: np.ndarray) -> list[np.ndarray]:
        return _core.grouped_allreduce(list(arrays), op=reduce_op,
                                       prescale_factor=prescale_factor,
                                       postscale_factor=postscale_factor,
                                       process_set=process_set)

    outs = run_numpy(fn, sent, [t.dtype for t in sent], [t.shape for t in sent],
                     "grouped_allreduce")
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, packed, strict=False)]


def _raw_allgather(t: tf.Tensor, name: str | None, process_set: Any) -> tf.Tensor:
    check_dtype(t, "allgather")

    def fn(a: np.ndarray) -> list[np.ndarray]:
        return [_core.allgather(a, name=name, process_set=process_set)]

    return run_numpy(fn, [t], [t.dtype], [_first_dim_unknown(t)], _label("allgather", name))[0]


def allgather(tensor: Any, name: str | None = None, ignore_name_scope: bool = False,
              process_set: Any = global_process_set) -> tf.Tensor:
    """Concatenate every rank's ``tensor`` along the first dimension (sizes may differ).

    Example: with 2 ranks, ``hvd.allgather(tf.fill([1], hvd.rank()))`` is ``[0, 1]``.
    """
    t = to_tensor(tensor)
    if not t.dtype.is_floating:
        return _raw_allgather(t, name, process_set)

    @tf.custom_gradient
    def gather(x: tf.Tensor) -> Any:
        y = _raw_allgather(x, name, process_set)

        def grad(dy: tf.Tensor) -> tf.Tensor:
            grad_name = f"{name}.grad" if name else None
            rows = tf.shape(x, out_type=tf.int64)[:1]

            def fn(g: np.ndarray, n: np.ndarray) -> list[np.ndarray]:
                summed = _core.allreduce(g, name=grad_name, op=Sum,
                                         process_set=process_set)
                counts = _core.allgather(np.asarray(n, dtype=np.int64), process_set=process_set)
                start = int(counts[: process_set.rank()].sum())
                return [summed[start:start + int(n[0])]]

            return run_numpy(fn, [dy, rows], [dy.dtype], [x.shape], "allgather_grad")[0]

        return y, grad

    return gather(t)


def grouped_allgather(tensors: list[Any], name: str | None = None,
                      process_set: Any = global_process_set) -> list[tf.Tensor]:
    """Allgather several tensors in one request (no gradient)."""
    ts = [to_tensor(t) for t in tensors]
    if not ts:
        return []
    for t in ts:
        check_dtype(t, "grouped_allgather")

    def fn(*arrays: np.ndarray) -> list[np.ndarray]:
        return _core.grouped_allgather(list(arrays), name=name, process_set=process_set)

    return run_numpy(fn, ts, [t.dtype for t in ts], [_first_dim_unknown(t) for t in ts],
                     _label("grouped_allgather", name))


def _raw_broadcast(t: tf.Tensor, root_rank: int, name: str | None, process_set: Any) -> tf.Tensor:
    check_dtype(t, "broadcast")

    def fn(a: np.ndarray) -> list[np.ndarray]:
        return [_core.broadcast(a, root_rank, name=name, process_set=process_set)]

    return run_numpy(fn, [t], [t.dtype], [t.shape], _label("broadcast", name))[0]


def broadcast(tensor: Any, root_rank: int, name: str | None = None,
              ignore_name_scope: bool = False,
              process_set: Any = global_process_set) -> tf.Tensor:
    """Every rank receives ``root_rank``'s ``tensor`` (same shape and dtype on every rank).

    Example: ``w = hvd.broadcast(w, root_rank=0)``.
    """
    t = to_tensor(tensor)
    if not t.dtype.is_floating:
        return _raw_broadcast(t, root_rank, name, process_set)

    @tf.custom_gradient
    def bcast(x: tf.Tensor) -> Any:
        y = _raw_broadcast(x, root_rank, name, process_set)

        def grad(dy: tf.Tensor) -> tf.Tensor:
            grad_name = f"{name}.grad" if name else None
            summed = _dense_allreduce(dy, Sum, 1.0, 1.0, grad_name, process_set)
            if _core.rank() == root_rank:
                return summed
            return tf.zeros_like(summed)

        return y, grad

    return bcast(t)


def broadcast_(variables: Any, root_rank: int, name: str | None = None,
               process_set: Any = global_process_set) -> Any:
    """In-place broadcast: assign ``root_rank``'s values to ``variables`` (one or a list).

    Example: ``hvd.broadcast_(model.variables, root_rank=0)``.
    """
    from hvdcore.tensorflow.variables import broadcast_variables

    single = not isinstance(variables, (list, tuple))
    var_list = [variables] if single else list(variables)
    broadcast_variables(var_list, root_rank, process_set=process_set)
    return variables


def alltoall(tensor: Any, splits: Any = None, name: str | None = None,
             ignore_name_scope: bool = False,
             process_set: Any = global_process_set) -> tuple[tf.Tensor, tf.Tensor]:
    """Send ``splits[i]`` first-dim rows to rank i; return (received rows, received splits).

    Without ``splits`` the first dimension is divided evenly.
    Example: ``out, got = hvd.alltoall(x, splits=[1, 2])``.
    """
    t = to_tensor(tensor)
    check_dtype(t, "alltoall")
    inputs = [t]
    if splits is not None:
        inputs.append(tf.cast(to_tensor(splits), tf.int64))

    def fn(a: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
        sp = rest[0].tolist() if rest else None
        out, received = _core.alltoall(a, splits=sp, name=name, process_set=process_set)
        return [out, np.asarray(received, dtype=np.int64)]

    n = process_set.size() if _core.is_initialized() else None
    out, received = run_numpy(fn, inputs, [t.dtype, tf.int64],
                              [_first_dim_unknown(t), tf.TensorShape([n])],
                              _label("alltoall", name))
    return out, tf.cast(received, tf.int32)


def reducescatter(tensor: Any, device_dense: str = "",
                  compression: type[Compressor] = Compression.none, op: Any = Average,
                  name: str | None = None, process_set: Any = global_process_set,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> tf.Tensor:
    """Reduce over ranks, then give rank i its slice of the first dimension.

    With ``d0 % n`` left over, the first ``d0 % n`` ranks get one extra row.
    Example: with 2 ranks, ``hvd.reducescatter(tf.ones([4]), op=hvd.Sum)`` is ``[2, 2]``.
    """
    t = to_tensor(tensor)
    compressed, ctx = compression.compress(t)
    check_dtype(compressed, "reducescatter")
    reduce_op = resolve_op(None, op, "reducescatter")

    def fn(a: np.ndarray) -> list[np.ndarray]:
        return [_core.reducescatter(a, name=name, op=reduce_op, process_set=process_set,
                                    prescale_factor=prescale_factor,
                                    postscale_factor=postscale_factor)]

    out = run_numpy(fn, [compressed], [compressed.dtype], [_first_dim_unknown(compressed)],
                    _label("reducescatter", name))[0]
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors: list[Any], device_dense: str = "",
                          compression: type[Compressor] = Compression.none,
                          op: Any = Average, process_set: Any = global_process_set,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[tf.Tensor]:
    """Reducescatter several tensors in one request."""
    ts = [to_tensor(t) for t in tensors]
    if not ts:
        return []
    packed = [compression.compress(t) for t in ts]
    sent = [p[0] for p in packed]
    for t in sent:
        check_dtype(t, "grouped_reducescatter")
    reduce_op = resolve_op(None, op, "grouped_reducescatter")

    def fn(*arrays: np.ndarray) -> list[np.ndarray]:
        return _core.grouped_reducescatter(list(arrays), op=reduce_op, process_set=process_set,
                                           prescale_factor=prescale_factor,
                                           postscale_factor=postscale_factor)

    outs = run_numpy(fn, sent, [t.dtype for t in sent], [_first_dim_unknown(t) for t in sent],
                     "grouped_reducescatter")
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, packed, strict=False)]


def _scalar_op(fn: Any, label: str) -> tf.Tensor:
    def call() -> list[np.ndarray]:
        return [np.asarray(fn(), dtype=np.int32)]

    return run_numpy(call, [], [tf.int32], [tf.TensorShape([])], label)[0]


def barrier(process_set: Any = global_process_set) -> None:
    """Block until every rank of ``process_set`` reaches the barrier (eager or graph)."""
    if tf.executing_eagerly():
        _core.barrier(process_set=process_set)
        return None

    def fn() -> int:
        _core.barrier(process_set=process_set)
        return 0

    return _scalar_op(fn, "barrier")


def join(device: str = "") -> tf.Tensor:
    """Signal that this rank has no more data; returns the last rank to join (int32 tensor)."""
    return _scalar_op(_core.join, "join")


def broadcast_object(obj: Any, root_rank: int = 0, session: Any = None, name: str | None = None,
                     process_set: Any = global_process_set) -> Any:
    """Pickle ``obj`` on ``root_rank`` and return it on every rank (eager only)."""
    return _core.broadcast_object(obj, root_rank=root_rank, name=name, process_set=process_set)


def allgather_object(obj: Any, session: Any = None, name: str | None = None,
                     process_set: Any = global_process_set) -> list[Any]:
    """Return the list of every rank's ``obj``, in rank order (eager only)."""
    return _core.allgather_object(obj, name=name, process_set=process_set)


def size_op(name: str | None = None) -> tf.Tensor:
    """``size()`` as an int32 tensor, evaluated when the op runs."""
    return _scalar_op(_core.size, "size")


def rank_op(name: str | None = None) -> tf.Tensor:
    """``rank()`` as an int32 tensor, evaluated when the op runs."""
    return _scalar_op(_core.rank, "rank")


def local_size_op(name: str | None = None) -> tf.Tensor:
    """``local_size()`` as an int32 tensor, evaluated when the op runs."""
    return _scalar_op(_core.local_size, "local_size")


def local_rank_op(name: str | None = None) -> tf.Tensor:
    """``local_rank()`` as an int32 tensor, evaluated when the op runs."""
    return _scalar_op(_core.local_rank, "local_rank")
