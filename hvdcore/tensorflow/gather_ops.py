"""The collectives whose result's first dimension comes from the other ranks: ``allgather``,
``grouped_allgather`` and ``alltoall`` (with their gradients), and ``allgather_object``.

Part of :mod:`hvdcore.tensorflow.collectives` (its docstring has the rules they share).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

import hvdcore as _core
from hvdcore import Average, global_process_set
from hvdcore.controllers import elastic_env
from hvdcore.engine.messages import ALLGATHER, ALLTOALL
from hvdcore.tensorflow.bridge import check_dtype, run_numpy, to_tensor
from hvdcore.tensorflow.errors import ArgumentError
from hvdcore.tensorflow.op_building import _first_dim_unknown, _grad_name, _label, build_name
from hvdcore.tensorflow.rejection import announcing, plain

__all__ = ["allgather", "grouped_allgather", "alltoall", "allgather_object"]


def _raw_allgather(t: tf.Tensor, name: str | None, process_set: Any) -> tf.Tensor:
    check_dtype(t, "allgather")

    def fn(a: np.ndarray) -> list[np.ndarray]:
        return [_core.allgather(a, name=name, process_set=process_set)]

    return run_numpy(fn, [t], [t.dtype], [_first_dim_unknown(t)], _label("allgather", name),
                     plane_inputs=1)[0]


@announcing(plain(ALLGATHER))
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


@announcing(plain(ALLGATHER, grouped=True))
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


def _raw_alltoall(t: tf.Tensor, splits: tf.Tensor | None, name: str | None,
                  process_set: Any) -> tuple[tf.Tensor, tf.Tensor]:
    inputs = [t] if splits is None else [t, splits]

    def fn(a: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
        sp = rest[0].tolist() if rest else None
        out, received = _core.alltoall(a, splits=sp, name=name, process_set=process_set)
        return [out, np.asarray(received, dtype=np.int32)]

    # the received splits' length is the set's size, left unknown in an elastic job (a traced
    # step outlives a resize)
    n = (process_set.size() if _core.is_initialized() and elastic_env.current() is None
         else None)
    out, received = run_numpy(fn, inputs, [t.dtype, tf.int32],
                              [_first_dim_unknown(t), tf.TensorShape([n])],
                              _label("alltoall", name), plane_inputs=1)
    return out, received


def _splits_tensor(splits: Any) -> tf.Tensor:
    """``splits`` as int64; non-integer splits are refused while the op is built (a cast
    that fails when a graph runs would fail this rank's op alone)."""
    sp = to_tensor(splits)
    if not sp.dtype.is_integer and sp.shape.num_elements() != 0:
        raise ArgumentError(f"alltoall: splits must be integers, got dtype {sp.dtype.name}")
    return tf.cast(sp, tf.int64)


@announcing(plain(ALLTOALL))
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
    sp = None if splits is None else _splits_tensor(splits)
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


def allgather_object(obj: Any, session: Any = None, name: str | None = None,
                     process_set: Any = global_process_set) -> list[Any]:
    """Return the list of every rank's ``obj``, in rank order (eager only)."""
    return _core.allgather_object(obj, name=name, process_set=process_set)
