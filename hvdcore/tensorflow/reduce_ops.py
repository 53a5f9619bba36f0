"""The reducing collectives: ``allreduce`` and ``grouped_allreduce`` (dense tensors, and
``tf.IndexedSlices`` as Horovod reduces them: allgathered values and indices), and
``reducescatter`` and ``grouped_reducescatter``, with their gradients.

Part of :mod:`hvdcore.tensorflow.collectives` (its docstring has the rules they share).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

import hvdcore as _core
from hvdcore import Adasum, Average, ReduceOp, Sum, global_process_set
from hvdcore.arguments import part_names, resolve_op
from hvdcore.engine.messages import ALLGATHER, ALLREDUCE, REDUCESCATTER
from hvdcore.errors import UnimplementedError
from hvdcore.tensorflow.bridge import check_dtype, run_numpy, to_tensor
from hvdcore.tensorflow.compression import Compression, Compressor
from hvdcore.tensorflow.gather_ops import allgather, grouped_allgather
from hvdcore.tensorflow.op_building import (
    _first_dim_unknown,
    _grad_name,
    _label,
    _may_need_gradient,
    _shape,
    build_name,
    op_factor,
)
from hvdcore.tensorflow.rejection import Take, announcing, plain
from hvdcore.tensorflow.scalar_ops import set_size

__all__ = ["allreduce", "grouped_allreduce", "reducescatter", "grouped_reducescatter"]


def _check_sparse(op: ReduceOp, prescale: Any, postscale: Any) -> None:
    """Horovod's errors for what it cannot do with tf.IndexedSlices (``UnimplementedError``, a
    ``NotImplementedError`` as Horovod raises, before any collective starts, so every rank stays
    in step)."""
    if op == Adasum:
        raise UnimplementedError(
            "Adasum cannot reduce tf.IndexedSlices: densify them (sparse_as_dense=True in "
            "DistributedOptimizer / DistributedGradientTape, or tf.convert_to_tensor)")
    if op not in (Sum, Average):
        raise UnimplementedError(
            f"allreduce of tf.IndexedSlices supports op Sum or Average, not {op.name}; "
            "densify it first (tf.convert_to_tensor) for other ops")
    if prescale != 1.0 or postscale != 1.0:
        raise UnimplementedError(
            "prescale_factor / postscale_factor are not supported for tf.IndexedSlices; scale "
            "the values yourself or densify the slices (tf.convert_to_tensor)")


def _sparse_average(values: tf.Tensor, op: ReduceOp, process_set: Any) -> tf.Tensor:
    """Horovod's average of gathered slice values: ``values / size`` in TensorFlow's true
    division (integer values give float32 / float64, as there)."""
    if op != Average:
        return values
    return values / set_size(process_set, values.dtype)


def _dense_allreduce(tensor: tf.Tensor, op: ReduceOp, prescale: float, postscale: float,
                     name: str | None, process_set: Any) -> tf.Tensor:
    check_dtype(tensor, "allreduce")

    def fn(a: np.ndarray) -> list[np.ndarray]:
        return [_core.allreduce(a, name=name, op=op, prescale_factor=prescale,
                                postscale_factor=postscale, process_set=process_set)]

    return run_numpy(fn, [tensor], [tensor.dtype], [_shape(tensor)], _label("allreduce", name),
                     plane_inputs=1)[0]


def _allreduce_with_grad(tensor: tf.Tensor, op: ReduceOp, prescale: float, postscale: float,
                         name: str | None, process_set: Any) -> tf.Tensor:
    if not tensor.dtype.is_floating or op == Adasum or not _may_need_gradient([tensor]):
        return _dense_allreduce(tensor, op, prescale, postscale, name, process_set)

    @tf.custom_gradient
    def reduce(x: tf.Tensor) -> Any:
        y = _dense_allreduce(x, op, prescale, postscale, name, process_set)

        def grad(dy: tf.Tensor) -> tf.Tensor:
            return _dense_allreduce(dy, op, prescale, postscale, _grad_name("allreduce", name),
                                    process_set)

        return y, grad

    return reduce(tensor)


def _allreduce_plan(args: Mapping[str, Any], take: Take) -> tuple[str, list[str]]:
    """The other ranks' first request: the allreduce, or the allgather of slices' values."""
    name = args.get("name")
    if isinstance(args.get("tensor"), tf.IndexedSlices):
        return ALLGATHER, [take(ALLGATHER, f"{name}.values" if name else None)]
    return ALLREDUCE, [take(ALLREDUCE, name)]


def _grouped_allreduce_plan(args: Mapping[str, Any], take: Take) -> tuple[str, list[str]]:
    """As :func:`_allreduce_plan`: slices first (one grouped allgather of their values)."""
    name, items = args.get("name"), args.get("tensors")
    items = list(items) if isinstance(items, (list, tuple)) else [items]
    sparse = sum(isinstance(t, tf.IndexedSlices) for t in items)
    if sparse:
        return ALLGATHER, part_names(take(ALLGATHER, f"{name}.values" if name else None), sparse)
    return ALLREDUCE, part_names(take(ALLREDUCE, name), max(len(items), 1))


@announcing(_allreduce_plan)
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
        _check_sparse(reduce_op, prescale_factor, postscale_factor)
        name = build_name("allreduce", name)
        values = allgather(tensor.values, name=f"{name}.values" if name else None,
                           process_set=process_set)
        indices = allgather(tensor.indices, name=f"{name}.indices" if name else None,
                            process_set=process_set)
        return tf.IndexedSlices(_sparse_average(values, reduce_op, process_set), indices,
                                dense_shape=tensor.dense_shape)
    t = to_tensor(tensor)
    compressed, ctx = compression.compress(t)
    out = _allreduce_with_grad(compressed, reduce_op, op_factor(prescale_factor),
                               op_factor(postscale_factor), build_name("allreduce", name),
                               process_set)
    return compression.decompress(out, ctx)


@announcing(_grouped_allreduce_plan)
def grouped_allreduce(tensors: list[Any], average: bool | None = None, device_dense: str = "",
                      device_sparse: str = "", compression: type[Compressor] = Compression.none,
                      op: Any = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: Any = global_process_set, ignore_name_scope: bool = False,
                      name: str | None = None) -> list[Any]:
    """Allreduce a list of tensors as one fused request; ``tf.IndexedSlices`` among them are
    reduced as Horovod does (one grouped allgather of their values and one of their indices;
    Sum or Average only), each keeping its ``dense_shape`` (None included).

    Example: ``a, b = hvd.grouped_allreduce([tf.ones([2]), tf.zeros([3, 3])])``.
    """
    reduce_op = resolve_op(average, op, "grouped_allreduce")
    if not tensors:
        return []
    items = list(tensors)
    sparse = [i for i, t in enumerate(items) if isinstance(t, tf.IndexedSlices)]
    dense = [i for i, t in enumerate(items) if not isinstance(t, tf.IndexedSlices)]
    if sparse:
        _check_sparse(reduce_op, prescale_factor, postscale_factor)
    name = build_name("grouped_allreduce", name)
    results: list[Any] = [None] * len(items)
    if sparse:
        slices = [items[i] for i in sparse]
        values = grouped_allgather([s.values for s in slices],
                                   name=f"{name}.values" if name else None,
                                   process_set=process_set)
        indices = grouped_allgather([s.indices for s in slices],
                                    name=f"{name}.indices" if name else None,
                                    process_set=process_set)
        for i, s, v, ix in zip(sparse, slices, values, indices, strict=True):
            results[i] = tf.IndexedSlices(_sparse_average(v, reduce_op, process_set), ix,
                                          dense_shape=s.dense_shape)
    if dense:
        outs = _grouped_dense_allreduce([items[i] for i in dense], compression, reduce_op,
                                        op_factor(prescale_factor),
                                        op_factor(postscale_factor), process_set, name)
        for i, o in zip(dense, outs, strict=True):
            results[i] = o
    return results


def _grouped_dense_allreduce(tensors: list[Any], compression: type[Compressor],
                             reduce_op: ReduceOp, prescale_factor: float,
                             postscale_factor: float, process_set: Any,
                             name: str | None) -> list[tf.Tensor]:
    ts = [to_tensor(t) for t in tensors]
    packed = [compression.compress(t) for t in ts]
    sent = [p[0] for p in packed]
    for t in sent:
        check_dtype(t, "grouped_allreduce")

    def raw(ts: list[tf.Tensor], label: str, core_name: str | None) -> list[tf.Tensor]:
        def fn(*arrays: np.ndarray) -> list[np.ndarray]:
            return _core.grouped_allreduce(list(arrays), name=core_name, op=reduce_op,
                                           prescale_factor=prescale_factor,
                                           postscale_factor=postscale_factor,
                                           process_set=process_set)

        return run_numpy(fn, ts, [t.dtype for t in ts], [t.shape for t in ts], label,
                         plane_inputs=len(ts))

    if (all(t.dtype.is_floating for t in sent) and reduce_op != Adasum
            and _may_need_gradient(sent)):
        @tf.custom_gradient
        def reduce(*xs: tf.Tensor) -> Any:
            def grad(*dys: tf.Tensor) -> list[tf.Tensor]:
                return raw(list(dys), "grouped_allreduce_grad",
                           _grad_name("grouped_allreduce", name))

            return raw(list(xs), "grouped_allreduce", name), grad

        outs = list(reduce(*sent))
    else:
        outs = raw(sent, "grouped_allreduce", name)
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, packed, strict=False)]


@announcing(plain(REDUCESCATTER))
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
    name = build_name("reducescatter", name)
    prescale_factor = op_factor(prescale_factor)
    postscale_factor = op_factor(postscale_factor)

    def raw(x: tf.Tensor) -> tf.Tensor:
        def fn(a: np.ndarray) -> list[np.ndarray]:
            return [_core.reducescatter(a, name=name, op=reduce_op, process_set=process_set,
                                        prescale_factor=prescale_factor,
                                        postscale_factor=postscale_factor)]

        return run_numpy(fn, [x], [x.dtype], [_first_dim_unknown(x)],
                         _label("reducescatter", name), plane_inputs=1)[0]

    if not compressed.dtype.is_floating:
        return compression.decompress(raw(compressed), ctx)

    @tf.custom_gradient
    def scatter(x: tf.Tensor) -> Any:
        def grad(dy: tf.Tensor) -> tf.Tensor:
            return _reducescatter_grads([x], [dy], reduce_op, process_set,
                                        _grad_name("reducescatter", name))[0]

        return raw(x), grad

    return compression.decompress(scatter(compressed), ctx)


def _reducescatter_grads(xs: list[tf.Tensor], dys: list[tf.Tensor], op: ReduceOp,
                         process_set: Any, name: str | None = None) -> list[tf.Tensor]:
    """Horovod's reducescatter gradient: allgather ``dy`` (times the set size for Sum)."""
    def fn(*arrays: np.ndarray) -> list[np.ndarray]:
        scale = process_set.size() if op == Sum else 1
        return [_core.allgather(g * np.asarray(scale, dtype=g.dtype),
                                name=f"{name}.{i}" if name else None, process_set=process_set)
                for i, g in enumerate(arrays)]

    dys = [tf.convert_to_tensor(dy) for dy in dys]
    return run_numpy(fn, dys, [dy.dtype for dy in dys], [x.shape for x in xs],
                     "reducescatter_grad")


@announcing(plain(REDUCESCATTER, grouped=True))
def grouped_reducescatter(tensors: list[Any], device_dense: str = "",
                          compression: type[Compressor] = Compression.none,
                          op: Any = Average, process_set: Any = global_process_set,
                          prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                          name: str | None = None) -> list[tf.Tensor]:
    """Reducescatter several tensors in one request."""
    ts = [to_tensor(t) for t in tensors]
    if not ts:
        return []
    packed = [compression.compress(t) for t in ts]
    sent = [p[0] for p in packed]
    for t in sent:
        check_dtype(t, "grouped_reducescatter")
    reduce_op = resolve_op(None, op, "grouped_reducescatter")
    name = build_name("grouped_reducescatter", name)
    prescale_factor = op_factor(prescale_factor)
    postscale_factor = op_factor(postscale_factor)

    def raw(xs: list[tf.Tensor]) -> list[tf.Tensor]:
        def fn(*arrays: np.ndarray) -> list[np.ndarray]:
            return _core.grouped_reducescatter(list(arrays), name=name, op=reduce_op,
                                               process_set=process_set,
                                               prescale_factor=prescale_factor,
                                               postscale_factor=postscale_factor)

        return run_numpy(fn, xs, [t.dtype for t in xs], [_first_dim_unknown(t) for t in xs],
                         "grouped_reducescatter", plane_inputs=len(xs))

    if all(t.dtype.is_floating for t in sent):
        @tf.custom_gradient
        def scatter(*xs: tf.Tensor) -> Any:
            def grad(*dys: tf.Tensor) -> list[tf.Tensor]:
                return _reducescatter_grads(list(xs), list(dys), reduce_op, process_set,
                                            _grad_name("grouped_reducescatter", name))

            return raw(list(xs)), grad

        outs = list(scatter(*sent))
    else:
        outs = raw(sent)
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, packed, strict=False)]
