"""Collectives on tf.Tensor / tf.Variable, eager and inside ``tf.function``.

Each function has Horovod's ``horovod.tensorflow`` signature; arguments only meaningful for
Horovod's C++ ops (``device_dense``, ``device_sparse``, ``ignore_name_scope``) are accepted and
have no effect (hvdcore moves host buffers; see the README of this package). Results keep static
shapes where they are known (allreduce, broadcast); gathered/scattered first dimensions are
unknown (``None``) in graph mode. Gradients are Horovod's (horovod/tensorflow/mpi_ops.py):
allreduce -> the same allreduce of the gradient; allgather -> Average-allreduce of the gradient,
then this rank's rows; broadcast -> Average-allreduce on the root, zeros elsewhere;
reducescatter -> allgather of the gradient (times the set size for Sum); alltoall -> alltoall
of the gradient back with the received splits. Grouped forms do the same per tensor.
Errors are Horovod's TensorFlow types: ``tf.errors.FailedPreconditionError`` when ranks
disagree, ``tf.errors.InvalidArgumentError`` (also a ``ValueError``) for a bad argument.

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
from hvdcore import Adasum, Average, ReduceOp, Sum, global_process_set
from hvdcore.arguments import resolve_op
from hvdcore.errors import UnimplementedError
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


def _in_session_graph() -> bool:
    """True while a TF1-style graph (``tf.compat.v1``, run by a Session) is being built."""
    return not tf.executing_eagerly() and not tf.inside_function()


def build_name(kind: str, name: str | None) -> str | None:
    """``name``; in a TF1-style graph, when it is None, a name fixed now, while the graph is
    built (unique in the graph, the same on every rank that builds the same graph).

    A Session runs independent ops in its own order on each rank, so names given when the
    ops run (the core's automatic ``kind#N``) would pair different collectives across ranks;
    Horovod names each op after its graph node for the same reason. Eager code and
    ``tf.function`` (whose automatic control dependencies keep program order) keep the core's
    run-time names.
    """
    if name is not None or not _in_session_graph():
        return name
    return tf.compat.v1.get_default_graph().unique_name(f"hvdcore.{kind}", mark_as_used=True)


def _grad_name(kind: str, name: str | None) -> str | None:
    """The name of a gradient's collective: fixed at build time in a TF1-style graph (each
    ``tf.gradients`` call builds its own ops), else derived from the forward op's name."""
    if _in_session_graph():
        return build_name(f"{kind}.grad", None)
    return f"{name}.grad" if name else None


def op_factor(value: Any) -> Any:
    """A prescale/postscale factor as Horovod's TensorFlow ops hold it: a float32 op attribute
    (``horovod/tensorflow/mpi_ops.cc``, "Using float since TF does not support double OP
    attributes"), widened to float64 by the core. Non-numbers pass through to be rejected."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return value
    return float(np.float32(value))


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
    return values / tf.cast(process_set.size(), values.dtype)


def _dense_allreduce(tensor: tf.Tensor, op: ReduceOp, prescale: float, postscale: float,
                     name: str | None, process_set: Any) -> tf.Tensor:
    check_dtype(tensor, "allreduce")

    def fn(a: np.ndarray) -> list[np.ndarray]:
        return [_core.allreduce(a, name=name, op=op, prescale_factor=prescale,
                                postscale_factor=postscale, process_set=process_set)]

    return run_numpy(fn, [tensor], [tensor.dtype], [_shape(tensor)], _label("allreduce", name),
                     plane_inputs=1)[0]


try:  # TensorFlow's own test for "would any tape or forward accumulator record these?"
    from tensorflow.python import pywrap_tfe as _pywrap_tfe

    _possible_gradient_types = _pywrap_tfe.TFE_Py_TapeSetPossibleGradientTypes
except (ImportError, AttributeError):  # another TensorFlow layout: always record
    _possible_gradient_types = None


def _may_need_gradient(tensors: list[tf.Tensor]) -> bool:
    """False only in eager mode when no gradient tape or forward accumulator watches any of
    ``tensors``: the custom gradient can then be skipped (it costs ~70 us per eager call,
    more than the allreduce it wraps). Graph mode always keeps it (``tf.gradients`` needs
    no tape)."""
    if _possible_gradient_types is None or not tf.executing_eagerly():
        return True
    try:
        return bool(_possible_gradient_types(tensors))
    except Exception:  # noqa: BLE001 - unknown input types: keep the gradient
        return True


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


def _raw_allgather(t: tf.Tensor, name: str | None, process_set: Any) -> tf.Tensor:
    check_dtype(t, "allgather")

    def fn(a: np.ndarray) -> list[np.ndarray]:
        return [_core.allgather(a, name=name, process_set=process_set)]

    return run_numpy(fn, [t], [t.dtype], [_first_dim_unknown(t)], _label("allgather", name),
                     plane_inputs=1)[0]


def allgather(tensor: Any, name: str | None = None, ignore_name_scope: bool = False,
              process_set: Any = global_process_set) -> tf.Tensor:
    """Concatenate every rank's ``tensor`` along the first dimension (sizes may differ).

    Example: with 2 ranks, ``hvd.allgather(tf.fill([1], hvd.rank()))`` is ``[0, 1]``.
    """
    t = to_tensor(tensor)
    name = build_name("allgather", name)
    if not t.dtype.is_floating:
        return _raw_allgather(t, name, process_set)

    @tf.custom_gradient
    def gather(x: tf.Tensor) -> Any:
        y = _raw_allgather(x, name, process_set)

        def grad(dy: tf.Tensor) -> tf.Tensor:
            return _allgather_grads([x], [dy], _grad_name("allgather", name), process_set)[0]

        return y, grad

    return gather(t)


def _allgather_grads(xs: list[tf.Tensor], dys: list[tf.Tensor], name: str | None,
                     process_set: Any) -> list[tf.Tensor]:
    """Horovod's allgather gradient: Average-allreduce ``dy``, keep this rank's rows."""
    rows = [tf.shape(x, out_type=tf.int64)[:1] for x in xs]
    k = len(xs)

    def fn(*arrays: np.ndarray) -> list[np.ndarray]:
        gs, ns = arrays[:k], arrays[k:]
        averaged = [_core.allreduce(g, name=f"{name}.{i}" if name else None, op=Average,
                                    process_set=process_set) for i, g in enumerate(gs)]
        counts = _core.allgather(np.concatenate(ns).astype(np.int64).reshape(1, k),
                                 name=f"{name}.rows" if name else None,
                                 process_set=process_set)
        me = process_set.rank()
        outs = []
        for i, a in enumerate(averaged):
            start = int(counts[:me, i].sum())
            outs.append(a[start:start + int(counts[me, i])])
        return outs

    dys = [tf.convert_to_tensor(dy) for dy in dys]
    return run_numpy(fn, [*dys, *rows], [dy.dtype for dy in dys], [x.shape for x in xs],
                     "allgather_grad")


def grouped_allgather(tensors: list[Any], name: str | None = None,
                      process_set: Any = global_process_set) -> list[tf.Tensor]:
    """Allgather several tensors in one request.

    Example: ``a, b = hvd.grouped_allgather([tf.ones([1, 2]), tf.zeros([3])])``.
    """
    ts = [to_tensor(t) for t in tensors]
    if not ts:
        return []
    for t in ts:
        check_dtype(t, "grouped_allgather")
    name = build_name("grouped_allgather", name)

    def raw(xs: list[tf.Tensor]) -> list[tf.Tensor]:
        def fn(*arrays: np.ndarray) -> list[np.ndarray]:
            return _core.grouped_allgather(list(arrays), name=name, process_set=process_set)

        return run_numpy(fn, xs, [t.dtype for t in xs], [_first_dim_unknown(t) for t in xs],
                         _label("grouped_allgather", name), plane_inputs=len(xs))

    if not all(t.dtype.is_floating for t in ts):
        return raw(ts)

    @tf.custom_gradient
    def gather(*xs: tf.Tensor) -> Any:
        def grad(*dys: tf.Tensor) -> list[tf.Tensor]:
            return _allgather_grads(list(xs), list(dys), _grad_name("grouped_allgather", name),
                                    process_set)

        return raw(list(xs)), grad

    return list(gather(*ts))


def _raw_broadcast(t: tf.Tensor, root_rank: int, name: str | None, process_set: Any) -> tf.Tensor:
    check_dtype(t, "broadcast")

    def fn(a: np.ndarray) -> list[np.ndarray]:
        return [_core.broadcast(a, root_rank, name=name, process_set=process_set)]

    return run_numpy(fn, [t], [t.dtype], [t.shape], _label("broadcast", name),
                     plane_inputs=1)[0]


def broadcast(tensor: Any, root_rank: int, name: str | None = None,
              ignore_name_scope: bool = False,
              process_set: Any = global_process_set) -> tf.Tensor:
    """Every rank receives ``root_rank``'s ``tensor`` (same shape and dtype on every rank).

    Example: ``w = hvd.broadcast(w, root_rank=0)``.
    """
    t = to_tensor(tensor)
    name = build_name("broadcast", name)
    if not t.dtype.is_floating:
        return _raw_broadcast(t, root_rank, name, process_set)

    @tf.custom_gradient
    def bcast(x: tf.Tensor) -> Any:
        y = _raw_broadcast(x, root_rank, name, process_set)

        def grad(dy: tf.Tensor) -> tf.Tensor:
            averaged = _dense_allreduce(dy, Average, 1.0, 1.0, _grad_name("broadcast", name),
                                        process_set)
            if _core.rank() == root_rank:
                return averaged
            return tf.zeros_like(averaged)

        return y, grad

    return bcast(t)


def broadcast_(variables: Any, root_rank: int, name: str | None = None,
               process_set: Any = global_process_set) -> Any:
    """In-place broadcast: assign ``root_rank``'s values to ``variables`` (one or a list).

    Returns, as Horovod does, the variables' values read after the assignment (a list for a
    list, one tensor for one variable): in a TF1-style graph, running them runs the
    broadcast and the assignments.

    Example: ``hvd.broadcast_(model.variables, root_rank=0)``.
    """
    from hvdcore.tensorflow.variables import broadcast_variables

    single = not isinstance(variables, (list, tuple))
    var_list = [variables] if single else list(variables)
    assigned = broadcast_variables(var_list, root_rank, process_set=process_set,
                                   name=build_name("broadcast_", name))
    deps = [] if assigned is None else [assigned]
    with tf.control_dependencies(deps):
        values = [tf.identity(_read(v)) for v in var_list]
    return values[0] if single else values


def _read(variable: Any) -> tf.Tensor:
    """The current value of a tf.Variable (or a Keras variable's)."""
    inner = getattr(variable, "value", None)
    if not isinstance(variable, tf.Variable) and isinstance(inner, tf.Variable):
        variable = inner
    return variable.read_value() if isinstance(variable, tf.Variable) else tf.identity(variable)


def _raw_alltoall(t: tf.Tensor, splits: tf.Tensor | None, name: str | None,
                  process_set: Any) -> tuple[tf.Tensor, tf.Tensor]:
    inputs = [t] if splits is None else [t, splits]

    def fn(a: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
        sp = rest[0].tolist() if rest else None
        out, received = _core.alltoall(a, splits=sp, name=name, process_set=process_set)
        return [out, np.asarray(received, dtype=np.int32)]

    n = process_set.size() if _core.is_initialized() else None
    out, received = run_numpy(fn, inputs, [t.dtype, tf.int32],
                              [_first_dim_unknown(t), tf.TensorShape([n])],
                              _label("alltoall", name), plane_inputs=1)
    return out, received


def alltoall(tensor: Any, splits: Any = None, name: str | None = None,
             ignore_name_scope: bool = False,
             process_set: Any = global_process_set) -> Any:
    """Send ``splits[i]`` first-dim rows to rank i of ``process_set``; gather what others send.

    As Horovod: without ``splits`` the first dimension is divided evenly and only the received
    tensor is returned; with ``splits`` the result is ``(received, received_splits)`` (int32).
    Bad splits or an indivisible first dimension raise ``tf.errors.InvalidArgumentError`` (also
    a ``ValueError``) on every rank. The gradient sends the output gradient back (alltoall with
    the received splits).

    Example: ``out, got = hvd.alltoall(x, splits=[1, 2])``; ``out = hvd.alltoall(x)``.
    """
    t = to_tensor(tensor)
    check_dtype(t, "alltoall")
    name = build_name("alltoall", name)
    sp = None if splits is None else tf.cast(to_tensor(splits), tf.int64)
    if not t.dtype.is_floating:
        out, received = _raw_alltoall(t, sp, name, process_set)
    else:
        holder: list[tf.Tensor] = []

        @tf.custom_gradient
        def exchange(x: tf.Tensor) -> Any:
            y, got = _raw_alltoall(x, sp, name, process_set)
            holder.append(got)

            def grad(dy: tf.Tensor) -> tf.Tensor:
                back, _ = _raw_alltoall(tf.convert_to_tensor(dy), tf.cast(got, tf.int64),
                                        _grad_name("alltoall", name), process_set)
                return tf.ensure_shape(back, x.shape)

            return y, grad

        out = exchange(t)
        received = holder[0]
    return out if splits is None else (out, received)


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
