"""The collectives of the Keras backend in use: the one place that picks them by backend.

``gradient_reducer``, ``broadcast_variables`` and ``sum_over_ranks`` dispatch on
:func:`hvdcore.keras.backend.backend` (read once) to the backend's module
(:mod:`hvdcore.keras.torch_ops` for torch, :mod:`hvdcore.keras.jax_ops` for JAX); a backend
hvdcore.keras does not train on is an :class:`~hvdcore.errors.UnsupportedError` naming it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hvdcore import Average, global_process_set
from hvdcore.keras.backend import check_unchanged, unsupported

__all__ = ["gradient_reducer", "broadcast_variables", "sum_over_ranks", "to_numpy"]


def gradient_reducer(op: Any = Average, compression: Any = None, sparse_as_dense: bool = False,
                     gradient_predivide_factor: float = 1.0,
                     process_set: Any = global_process_set) -> Any:
    """The backend's gradient reducer (``reduce(grads) -> grads``, ``process_set``)."""
    name = check_unchanged()
    if name == "torch":
        from hvdcore.keras.torch_ops import TorchGradientReducer
        from hvdcore.torch.compression import Compression

        return TorchGradientReducer(op, compression or Compression.none, sparse_as_dense,
                                    gradient_predivide_factor, process_set)
    if name == "jax":
        from hvdcore.keras.jax_ops import Compression as JaxCompression
        from hvdcore.keras.jax_ops import JaxGradientReducer

        return JaxGradientReducer(op, compression or JaxCompression.none, sparse_as_dense,
                                  gradient_predivide_factor, process_set)
    raise unsupported("DistributedOptimizer", name)


def broadcast_variables(variables: Sequence[Any], root_rank: int,
                        process_set: Any = global_process_set) -> None:
    """Assign ``root_rank``'s values to the Keras ``variables`` on every rank."""
    name = check_unchanged()
    if name == "torch":
        from hvdcore.keras.torch_ops import broadcast_variables as torch_broadcast

        torch_broadcast(variables, root_rank, process_set)
        return
    if name == "jax":
        from hvdcore.keras.jax_ops import broadcast_variables as jax_broadcast

        jax_broadcast(variables, root_rank, process_set)
        return
    raise unsupported("broadcast_variables", name)


def sum_over_ranks(x: Any) -> Any:
    """The backend tensor ``x`` summed over every rank of the job, differentiable (the
    gradient is the cotangents summed over the ranks)."""
    name = check_unchanged()
    if name == "torch":
        from hvdcore import Sum
        from hvdcore.torch import allreduce

        return allreduce(x, op=Sum)
    if name == "jax":
        from hvdcore.keras.jax_ops import sum_over_ranks as jax_sum

        return jax_sum(x)
    raise unsupported("SyncBatchNormalization", name)


def to_numpy(value: Any) -> Any:
    """A host NumPy copy of a backend tensor or Keras variable."""
    import keras

    return keras.ops.convert_to_numpy(value)
