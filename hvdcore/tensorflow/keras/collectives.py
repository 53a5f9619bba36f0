"""The collectives of ``horovod.tensorflow.keras`` in its argument order: the value, then
``name`` (``allreduce(value, name=None, average=None, prescale_factor=1.0,
postscale_factor=1.0, op=None, compression=Compression.none)``, ``allgather(value,
name=None)``, ``broadcast(value, root_rank, name=None)``, ``reducescatter(value, name=None,
op=Average)``).

As in Horovod, ``name`` only names the constant made from ``value``: the collective itself is
unnamed (ranks pair calls by their order), so a name that differs between ranks is harmless.
They run :mod:`hvdcore.tensorflow`'s collectives, whose other arguments (``process_set``,
``device_dense``, ...) are taken here by keyword only.

Example::

    import hvdcore.tensorflow.keras as hvd
    hvd.init()
    mean = hvd.allreduce([1.0, 2.0], "metric")   # name second, as in Horovod's Keras
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from hvdcore import Average, global_process_set
from hvdcore.tensorflow import broadcast_ops, gather_ops, reduce_ops
from hvdcore.tensorflow.compression import Compression, Compressor

__all__ = ["allreduce", "allgather", "broadcast", "reducescatter"]


def allreduce(value: Any, name: str | None = None, average: bool | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0, op: Any = None,
              compression: type[Compressor] = Compression.none, *, device_dense: str = "",
              device_sparse: str = "", process_set: Any = global_process_set) -> Any:
    """Reduce a tensor-compatible ``value`` over ranks (Average unless ``op``, or the
    deprecated ``average``, says otherwise)."""
    return reduce_ops.allreduce(value, average=average, device_dense=device_dense,
                                device_sparse=device_sparse, compression=compression, op=op,
                                prescale_factor=prescale_factor,
                                postscale_factor=postscale_factor, process_set=process_set)


def allgather(value: Any, name: str | None = None, *,
              process_set: Any = global_process_set) -> tf.Tensor:
    """Concatenate every rank's ``value`` along the first dimension."""
    return gather_ops.allgather(value, process_set=process_set)


def broadcast(value: Any, root_rank: int, name: str | None = None, *,
              process_set: Any = global_process_set) -> tf.Tensor:
    """``root_rank``'s ``value`` on every rank."""
    return broadcast_ops.broadcast(value, root_rank, process_set=process_set)


def reducescatter(value: Any, name: str | None = None, op: Any = Average, *,
                  device_dense: str = "", compression: type[Compressor] = Compression.none,
                  process_set: Any = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> tf.Tensor:
    """Reduce ``value`` over ranks (``op``, default Average) and return this rank's slice of
    the first dimension."""
    return reduce_ops.reducescatter(value, device_dense=device_dense, compression=compression,
                                    op=op, process_set=process_set,
                                    prescale_factor=prescale_factor,
                                    postscale_factor=postscale_factor)
