"""The JAX backend's collectives for Keras 3: gradients through the core's host plane.

Keras 3 on JAX runs ``model.fit``'s train step under ``jax.jit`` (unless ``run_eagerly`` or
``jit_compile=False``): the optimizer's ``apply`` is traced, its gradients are tracers, and JAX
arrays are immutable. :class:`JaxGradientReducer` therefore leaves the jitted program through
``jax.experimental.io_callback`` (ordered): the callback receives the step's gradients (in pieces
small enough that JAX copies them before the call, see :data:`PIECE_BYTES`), reduces them with one
:func:`hvdcore.grouped_allreduce` (MPI or Gloo, fused by the core, named so the response cache
serves later steps) and returns new arrays of the same shapes and dtypes. ``io_callback`` rather
than ``pure_callback``: a collective must run exactly once per step on every rank, and JAX may drop
or repeat a pure callback. The same code runs eagerly (the callback is then an ordinary call). fp16
compression casts inside the program, so the host sees (and sends) float16.

:func:`apply_accumulated` is ``backward_passes_per_step`` without Python control flow (the
step count is a traced value): the reduction sits in a ``lax.cond`` branch taken on the k-th
pass only, and the update is selected with ``where``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

import hvdcore
from hvdcore import Average, Sum, global_process_set
from hvdcore.controllers import elastic_env
from hvdcore.errors import UnsupportedError
from hvdcore.gradient_rule import reduces_gradients
from hvdcore.keras.backend import describe
from hvdcore.keras.reducing import GradientReducer

__all__ = ["Compression", "JaxGradientReducer", "apply_accumulated", "broadcast_variables",
           "sum_over_ranks"]


class NoneCompressor:
    """No compression: gradients are sent as they are."""

    @staticmethod
    def compress(array: Any) -> tuple[Any, Any]:
        """Return the array to send and what :meth:`decompress` needs."""
        return array, None

    @staticmethod
    def decompress(array: Any, ctx: Any) -> Any:
        """Undo :meth:`compress`."""
        return array


class FP16Compressor(NoneCompressor):
    """Send floating-point gradients as float16 (half the bytes); other dtypes unchanged."""

    @staticmethod
    def compress(array: Any) -> tuple[Any, Any]:
        """Cast a floating-point array to float16; the context is its dtype."""
        if jnp.issubdtype(array.dtype, jnp.floating) and array.dtype != jnp.float16:
            return array.astype(jnp.float16), array.dtype
        return array, None

    @staticmethod
    def decompress(array: Any, ctx: Any) -> Any:
        """Cast back to the original dtype."""
        return array if ctx is None else array.astype(ctx)


class Compression:
    """Gradient compressors on the JAX backend: ``Compression.none`` and ``.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor


def _jax_array(value: Any, what: str) -> Any:
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        return value
    inner = getattr(value, "value", None)  # a Keras variable on the JAX backend
    if isinstance(inner, jax.Array):
        return inner
    raise UnsupportedError(
        f"{what}: Keras' backend is 'jax', so hvdcore.keras reduces JAX arrays, but got a "
        f"{describe(value)} (a tensor of another framework mixed into a JAX-backend model)")


class JaxGradientReducer(GradientReducer):
    """Reduce a list of JAX gradients (None entries stay None) over a process set: one
    host :func:`hvdcore.grouped_allreduce` per call through an ordered ``io_callback``."""

    OPS = (Average, Sum)  # (Adasum through the jitted io_callback is not tested: refused)
    BACKEND = "jax"

    def __init__(self, op: Any = Average, compression: Any = Compression.none,
                 sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                 process_set: Any = global_process_set) -> None:
        super().__init__(op, compression, sparse_as_dense, gradient_predivide_factor,
                         process_set)

    def reduce(self, grads: Sequence[Any]) -> list[Any]:
        """The gradients reduced over the process set, in the same order (traceable)."""
        index = [i for i, g in enumerate(grads) if g is not None]
        if not index:
            return list(grads)
        arrays = [jnp.asarray(_jax_array(grads[i], "DistributedOptimizer gradient"))
                  for i in index]
        if not reduces_gradients(self.process_set):  # as computed (hvdcore.gradient_rule)
            return list(grads)
        sent, contexts = [], []
        for array in arrays:
            wire, ctx = self.compression.compress(array)
            sent.append(wire)
            contexts.append(ctx)
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in sent]
        signature = tuple((str(s.dtype), tuple(s.shape)) for s in specs)
        process_set = self.process_set
        pieces, counts = _pieces(sent)

        def host_allreduce(*flat: Any) -> list[np.ndarray]:
            arrays, start = [], 0
            for n, s in zip(counts, specs, strict=True):
                arrays.append(np.concatenate([np.asarray(p) for p in flat[start:start + n]])
                              .reshape(s.shape))
                start += n
            # the scales (and so the name) when the step runs, not when it was traced: an
            # elastic job may have changed size since, and every rank must name the call alike
            op, pre, post = self.scales()
            name = self.name_for(signature, op, pre, post)
            out = hvdcore.grouped_allreduce(
                arrays, name=name, op=op, prescale_factor=pre, postscale_factor=post,
                process_set=process_set)
            return [np.asarray(o, dtype=s.dtype).reshape(s.shape) for o, s in zip(out, specs,
                                                                                   strict=True)]

        reduced = io_callback(host_allreduce, specs, *pieces, ordered=True)
        out = list(grads)
        for i, r, ctx in zip(index, reduced, contexts, strict=True):
            out[i] = self.compression.decompress(r, ctx)
        return out

    def divided_by_size(self, grads: list[Any]) -> list[Any]:
        """Each gradient divided by the set's size, read when the jitted step runs in an
        elastic job (a constant where the size cannot change)."""
        if elastic_env.current() is None:
            return super().divided_by_size(grads)
        process_set = self.process_set
        n = io_callback(lambda: np.asarray(process_set.size(), np.int32),
                        jax.ShapeDtypeStruct((), jnp.int32), ordered=True)
        return [g / n.astype(g.dtype) for g in grads]


#: The largest operand handed to the host callback, in bytes. JAX copies each operand of an
#: ``io_callback`` into a new CPU array before calling it; an operand of 100,000 bytes or more
#: (jaxlib 0.10) is copied asynchronously on XLA's CPU thread pool, and reading it in the
#: callback waits for that copy. While the callback waits for the other ranks, the pool's
#: threads can all be taken (the callback itself runs on one, nested in a parallel kernel's
#: wait), so the copy never runs, this rank never submits its allreduce and the job stalls
#: (issue 61: 3 stalls in 3 runs of the 2-rank MNIST example). Smaller operands are copied
#: before the call returns: the gradients travel in pieces below the threshold.
PIECE_BYTES = 65536


def _pieces(arrays: Sequence[Any]) -> tuple[list[Any], list[int]]:
    """Each array flattened and cut into pieces of at most :data:`PIECE_BYTES` (traceable);
    the pieces in order and how many each array gave."""
    pieces, counts = [], []
    for a in arrays:
        flat = jnp.ravel(a)
        step = max(1, PIECE_BYTES // flat.dtype.itemsize)
        parts = [flat[i:i + step] for i in range(0, flat.size, step)] or [flat]
        pieces.extend(parts)
        counts.append(len(parts))
    return pieces, counts


def sum_over_ranks(x: Any) -> Any:
    """``x`` summed over every rank of the job (traceable; differentiable: its gradient is the
    cotangents summed over the ranks, the gradient of Horovod's Sum allreduce)."""
    return _differentiable_sum(jnp.asarray(x))


def _host_sum(x: Any) -> Any:
    """One ordered host callback: the core's Sum allreduce of ``x`` (sent in pieces)."""
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    pieces, _ = _pieces([x])

    def host(*flat: Any) -> np.ndarray:
        whole = np.concatenate([np.asarray(p) for p in flat]).reshape(spec.shape)
        return np.asarray(hvdcore.allreduce(whole, op=Sum), dtype=spec.dtype).reshape(spec.shape)

    return io_callback(host, spec, *pieces, ordered=True)


@jax.custom_vjp
def _differentiable_sum(x: Any) -> Any:
    return _host_sum(x)


def _sum_forward(x: Any) -> tuple[Any, None]:
    return _host_sum(x), None


def _sum_backward(_: None, cotangent: Any) -> tuple[Any]:
    return (_host_sum(cotangent),)


_differentiable_sum.defvjp(_sum_forward, _sum_backward)


def apply_accumulated(opt: Any, grads: list[Any], variables: list[Any]) -> None:
    """``backward_passes_per_step`` k > 1 for a traced step: add ``grads`` to the accumulators;
    on the k-th pass reduce the sum (divided by k when averaging) and apply it with the wrapped
    optimizer, else leave the variables and the wrapped optimizer's state as they were, but
    for its ``iterations``, which counts every step (as Horovod's)."""
    state, inner = opt._hvd, opt.inner_optimizer
    accs = [state.accumulators[opt._var_key(v)] for v in variables]
    sums = [acc.value + jnp.asarray(g).astype(acc.dtype) for acc, g in zip(accs, grads,
                                                                           strict=True)]
    count = state.counter.value + 1
    ready = count >= state.passes
    to_reduce = [s / state.passes for s in sums] if state.average else sums
    reduced = jax.lax.cond(ready, lambda xs: opt._reduce(list(xs), variables),
                           lambda xs: [jnp.zeros_like(x) for x in xs], to_reduce)
    kept = list(variables) + list(inner.variables)
    before = [v.value for v in kept]
    inner.apply(reduced, variables)
    for var, old in zip(kept, before, strict=True):
        if var is inner.iterations:
            old = old + 1  # a step that only accumulates still counts
        var.assign(jnp.where(ready, var.value, old))
    for acc, s in zip(accs, sums, strict=True):
        acc.assign(jnp.where(ready, jnp.zeros_like(s), s))
    state.counter.assign(jnp.where(ready, jnp.zeros_like(count), count))


def broadcast_variables(variables: Sequence[Any], root_rank: int,
                        process_set: Any = global_process_set) -> None:
    """Assign ``root_rank``'s values to the Keras ``variables`` on every rank of the set."""
    handles, hosts = [], []
    for i, var in enumerate(variables):
        host = np.ascontiguousarray(np.asarray(_jax_array(var, "broadcast_variables")))
        hosts.append(host)
        # by position, not by Keras' variable path (per-process name counters differ)
        handles.append(hvdcore.broadcast_async(_bit_view(host), root_rank,
                                               name=f"keras.broadcast.{i}",
                                               process_set=process_set))
    for var, handle, host in zip(variables, handles, hosts, strict=True):
        got = np.ascontiguousarray(hvdcore.synchronize(handle)).view(host.dtype)
        var.assign(got.reshape(tuple(var.shape)))  # 0-d travels as 1-d


_SAME_BITS = {1: np.uint8, 2: np.float16, 4: np.int32, 8: np.int64}


def _bit_view(host: np.ndarray) -> np.ndarray:
    """``host`` as a dtype the core broadcasts, same bytes (a broadcast copies bits): JAX's
    seed generators hold uint32 state, bfloat16 weights are 2 bytes."""
    if host.dtype in (np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32,
                      np.float64, np.bool_):
        return host
    return host.view(_SAME_BITS[host.dtype.itemsize])
