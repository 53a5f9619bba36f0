"""Gradient reduction shared by DistributedGradientTape and the Keras DistributedOptimizer.

All gradients of one step go to the core in ONE call (one ``tf.numpy_function`` op in a graph):
dense gradients as one grouped allreduce (the core fuses them), ``tf.IndexedSlices`` as
allgathers of values and indices (Horovod's sparse path) unless ``sparse_as_dense``.

The grouped allreduce is named after what it reduces (op, scale factors, dtypes and shapes:
the same on every rank, and step after step), so from the second step on it takes the
response cache's one round instead of a full negotiation (an automatic name is new on every
call, and never cached).

Example::

    with tf.GradientTape() as tape:
        loss = loss_fn(model(x), y)
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)   # averaged over ranks

Sources registered with ``register_local_source`` (model-parallel variables, Horovod 0.28's
escape hatch) keep their local gradient: it is left out of the reduction and divided by the
process set's size when ``scale_local_gradients`` (Horovod's default), so that it is on the
same scale as the averaged ones (Horovod's pull 3719).
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import tensorflow as tf

import hvdcore as _core
from hvdcore import Adasum, Average, ReduceOp, Sum, global_process_set
from hvdcore.arguments import gradient_groups, resolve_op
from hvdcore.errors import ArgumentError, NotInitializedError, UnsupportedError
from hvdcore.gradient_rule import reduces_gradients
from hvdcore.tensorflow.bridge import check_dtype, run_numpy
from hvdcore.tensorflow.compression import Compression, Compressor
from hvdcore.tensorflow.scalar_ops import set_size

__all__ = ["GradientReducer", "LocalVariables", "reduce_with_local", "DistributedGradientTape",
           "PartialDistributedGradientTape"]


class GradientReducer:
    """Reduce a flat list of gradients (Tensor, IndexedSlices or None) across ranks.

    ``gradient_predivide_factor`` f (only with op Average) splits the averaging like Horovod:
    gradients are multiplied by 1/f before the sum and by f/size after it.
    """

    def __init__(self, op: Any = Average,
                 compression: type[Compressor] = Compression.none,
                 sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                 process_set: Any = global_process_set) -> None:
        self.op = resolve_op(None, op, "DistributedGradientTape")
        if gradient_predivide_factor != 1.0 and self.op != Average:
            raise ArgumentError(
                f"gradient_predivide_factor={gradient_predivide_factor} needs op=Average, "
                f"got op={self.op.name}"
            )
        if self.op not in (Average, Sum, Adasum):
            raise ArgumentError(f"gradients can be reduced with Average, Sum or Adasum, "
                                f"not {self.op.name}")
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.gradient_predivide_factor = float(gradient_predivide_factor)
        self.process_set = process_set
        self._names: dict[tuple, str] = {}

    def request_name(self, arrays: list[np.ndarray], op: ReduceOp, pre: float,
                     post: float) -> str:
        """The grouped allreduce's name for ``arrays``: equal wherever the call is (ranks,
        steps, reducers) and only there, barring a CRC-32 collision (which costs a
        renegotiation, never a wrong result: the cache checks shapes and dtypes)."""
        key = (int(op), pre, post, *((a.dtype.str, a.shape) for a in arrays))
        name = self._names.get(key)
        if name is None:
            if len(self._names) >= 64:  # (a program reduces a few gradient structures)
                self._names.clear()
            name = self._names[key] = f"gradients.{zlib.crc32(repr(key).encode()):08x}"
        return name

    def _scales(self) -> tuple[ReduceOp, float, float]:
        f = self.gradient_predivide_factor
        if self.op == Average and f != 1.0:
            return Sum, 1.0 / f, f / self.process_set.size()
        return self.op, 1.0, 1.0

    def reduce(self, grads: list[Any]) -> list[Any]:
        """Return the reduced gradients in the same order (None stays None); as they are
        where there is no other rank to reduce with (:mod:`hvdcore.gradient_rule`)."""
        if not reduces_gradients(self.process_set):  # (sparse_as_dense still applies, as
            return [tf.convert_to_tensor(g)  # Horovod converts before its _allreduce_cond)
                    if self.sparse_as_dense and isinstance(g, tf.IndexedSlices) else g
                    for g in grads]
        dense_idx: list[int] = []
        dense: list[tf.Tensor] = []
        ctxs: list[Any] = []
        sparse_idx: list[int] = []
        sparse_in: list[tf.Tensor] = []
        for i, g in enumerate(grads):
            if g is None:
                continue
            if isinstance(g, tf.IndexedSlices) and not self.sparse_as_dense:
                if self.op == Adasum:
                    raise ArgumentError("Adasum cannot reduce tf.IndexedSlices gradients; "
                                        "pass sparse_as_dense=True")
                sparse_idx.append(i)
                sparse_in += [g.values, tf.cast(g.indices, tf.int64)]
                continue
            t = tf.convert_to_tensor(g)
            c, ctx = self.compression.compress(t)
            check_dtype(c, "gradient allreduce")
            dense_idx.append(i)
            dense.append(c)
            ctxs.append(ctx)
        if not dense and not sparse_idx:
            return list(grads)
        n_dense = len(dense)
        process_set = self.process_set

        def fn(*arrays: np.ndarray) -> list[np.ndarray]:
            # The factors that depend on the set's size are taken when the step runs, not when
            # it was traced: an elastic job may have changed size since (and every rank must
            # name the call alike, whenever it traced its step).
            op, pre, post = self._scales()
            sparse_scale = pre * post / (process_set.size() if op == Average else 1.0)
            outs: list[np.ndarray] = []
            if n_dense:
                dense_in = list(arrays[:n_dense])
                outs += _core.grouped_allreduce(dense_in, op=op, prescale_factor=pre,
                                                postscale_factor=post, process_set=process_set,
                                                name=self.request_name(dense_in, op, pre, post))
            rest = arrays[n_dense:]
            for k in range(0, len(rest), 2):
                values, indices = _core.grouped_allgather([rest[k], rest[k + 1]],
                                                          process_set=process_set)
                if sparse_scale != 1.0:
                    values = values * np.asarray(sparse_scale, dtype=values.dtype)
                outs += [values, indices]
            return outs

        inputs = dense + sparse_in
        shapes = [t.shape for t in dense] + [
            tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else None
            for t in sparse_in
        ]
        outs = run_numpy(fn, inputs, [t.dtype for t in inputs], shapes, "gradients")
        result = list(grads)
        for k, i in enumerate(dense_idx):
            result[i] = self.compression.decompress(outs[k], ctxs[k])
        for k, i in enumerate(sparse_idx):
            values, indices = outs[n_dense + 2 * k], outs[n_dense + 2 * k + 1]
            result[i] = tf.IndexedSlices(values, tf.cast(indices, grads[i].indices.dtype),
                                         dense_shape=grads[i].dense_shape)
        return result


def _identities(var: Any) -> set[int]:
    ids = {id(var)}
    inner = getattr(var, "value", None)  # Keras 3 Variable -> its tf.Variable
    if isinstance(inner, tf.Variable):
        ids.add(id(inner))
    return ids


class LocalVariables:
    """Variables whose gradients stay local (``register_local_source``, Keras'
    ``register_local_var``); held, not tracked."""

    def __init__(self) -> None:
        self._vars: list[Any] = []  # keeps them alive, so their ids stay unique
        self._ids: set[int] = set()

    def add(self, var: Any) -> None:
        self._vars.append(var)
        self._ids |= _identities(var)

    def __contains__(self, var: Any) -> bool:
        return bool(self._ids & _identities(var))

    def __len__(self) -> int:
        return len(self._vars)


def reduce_with_local(reducer: GradientReducer, grads: list[Any], sources: list[Any],
                      local: LocalVariables | None, scale_local: bool) -> list[Any]:
    """``reducer.reduce(grads)``, except for the gradients of ``local`` sources: those are
    not reduced, and are divided by the process set's size when ``scale_local``."""
    if not local:
        return reducer.reduce(grads)
    is_local = [s in local for s in sources]
    reduced = reducer.reduce([None if m else g for g, m in zip(grads, is_local, strict=True)])
    sizes: dict[Any, Any] = {}  # one size read per dtype and step

    def size(dtype: Any) -> Any:
        if dtype not in sizes:
            sizes[dtype] = set_size(reducer.process_set, dtype)
        return sizes[dtype]

    out = []
    for g, r, m in zip(grads, reduced, is_local, strict=True):
        if not m:
            out.append(r)
        elif not scale_local or g is None:
            out.append(g)
        elif isinstance(g, tf.IndexedSlices):
            out.append(tf.IndexedSlices(g.values / size(g.values.dtype), g.indices,
                                        g.dense_shape))
        else:
            g = tf.convert_to_tensor(g)
            out.append(g / size(g.dtype))
    return out


class DistributedGradientTape:
    """Wrap a ``tf.GradientTape`` so that ``gradient()`` returns gradients reduced over ranks.

    Composition, not a subclass: everything except ``gradient`` is delegated to the wrapped
    tape, so ``isinstance(tape, tf.GradientTape)`` is False (Horovod builds a subclass at run
    time instead). Use it after the ``with tf.GradientTape() as tape:`` block, or as the
    context manager itself: ``with hvd.DistributedGradientTape(tf.GradientTape()) as tape:``.

    ``device_dense``, ``device_sparse``, ``num_groups`` and ``groups`` are accepted for Horovod
    compatibility; grouping is left to the core, which fuses all gradients of a step.
    ``groups`` is checked as Horovod checks it (a positive int or a list, else ValueError);
    ``num_groups`` is deprecated (a warning).
    ``register_local_source(var)`` keeps ``var``'s gradient local (see the module docstring).
    """

    def __init__(self, gradtape: tf.GradientTape, device_dense: str = "",
                 device_sparse: str = "", compression: type[Compressor] = Compression.none,
                 sparse_as_dense: bool = False, op: Any = Average,
                 gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                 groups: Any = None, process_set: Any = global_process_set,
                 scale_local_gradients: bool = True) -> None:
        if not isinstance(gradtape, tf.GradientTape):
            raise UnsupportedError(f"DistributedGradientTape wraps a tf.GradientTape, got "
                                   f"{type(gradtape).__name__}")
        gradient_groups(groups, num_groups, "DistributedGradientTape")
        self._tape = gradtape
        self._reducer = GradientReducer(op, compression, sparse_as_dense,
                                        gradient_predivide_factor, process_set)
        self._local = LocalVariables()
        self.scale_local_gradients = bool(scale_local_gradients)

    def register_local_source(self, source: Any) -> None:
        """Keep ``source``'s gradient local: ``gradient()`` does not reduce it over ranks and
        (with ``scale_local_gradients``) divides it by the process set's size."""
        if not hasattr(source, "dtype") or not hasattr(source, "shape"):
            raise ArgumentError(f"register_local_source takes a variable or tensor, got "
                                f"{type(source).__name__}")
        self._local.add(source)

    def __enter__(self) -> DistributedGradientTape:
        self._tape.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._tape.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_tape"], name)

    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 unconnected_gradients: Any = tf.UnconnectedGradients.NONE,
                 use_generic_names: bool = False) -> Any:
        """Like ``tf.GradientTape.gradient``, then reduced over the process set's ranks (the
        gradients of registered local sources excepted). ``use_generic_names`` is accepted
        for Horovod compatibility: hvdcore names a step's reduction after its contents."""
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients,
                                    unconnected_gradients=unconnected_gradients)
        flat = tf.nest.flatten(grads, expand_composites=False)
        if not _core.is_initialized():
            raise NotInitializedError("DistributedGradientTape.gradient called before "
                                      "hvdcore.tensorflow.init()")
        flat_sources = tf.nest.flatten(sources, expand_composites=False)
        reduced = reduce_with_local(self._reducer, flat, flat_sources, self._local,
                                    self.scale_local_gradients)
        return tf.nest.pack_sequence_as(grads, reduced, expand_composites=False)

    def get_local_and_global_gradients(self, target: Any, sources: Any,
                                       output_gradients: Any = None,
                                       use_generic_names: bool = False
                                       ) -> tuple[list[tuple[Any, Any]], list[tuple[Any, Any]]]:
        """``gradient()``'s result split as Horovod does: ``(local, global)``, two lists of
        ``(source, gradient)`` pairs in the order of ``sources`` (e.g. for a gradient norm
        computed separately over the local and the reduced gradients)."""
        grads = self.gradient(target, sources, output_gradients,
                              use_generic_names=use_generic_names)
        local: list[tuple[Any, Any]] = []
        shared: list[tuple[Any, Any]] = []
        for s, g in zip(tf.nest.flatten(sources), tf.nest.flatten(grads), strict=True):
            (local if s in self._local else shared).append((s, g))
        return local, shared


def PartialDistributedGradientTape(gradtape: tf.GradientTape, device_dense: str = "",
                                   device_sparse: str = "",
                                   compression: type[Compressor] = Compression.none,
                                   sparse_as_dense: bool = False, op: Any = Average,
                                   gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                                   groups: Any = None, process_set: Any = global_process_set,
                                   local_layers: Any = None,
                                   scale_local_gradients: bool = True) -> DistributedGradientTape:
    """A :class:`DistributedGradientTape` whose ``local_layers`` (a Keras layer or a list)
    keep local gradients: each of their trainable weights is a registered local source.

    Example::

        tape = hvd.PartialDistributedGradientTape(tape, local_layers=[model.layers[0]])
    """
    if local_layers is None:
        layers: list[Any] = []
    elif isinstance(local_layers, (list, tuple, set)):
        layers = list(local_layers)
    else:
        layers = [local_layers]
    for layer in layers:
        if not hasattr(layer, "trainable_weights"):
            raise ArgumentError(f"local_layers must be Keras layers, got {type(layer).__name__}")
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for layer in layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
