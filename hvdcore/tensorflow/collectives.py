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

The collectives live by family: :mod:`~hvdcore.tensorflow.reduce_ops` (allreduce,
reducescatter and their grouped forms), :mod:`~hvdcore.tensorflow.gather_ops` (allgather,
grouped_allgather, alltoall, allgather_object), :mod:`~hvdcore.tensorflow.broadcast_ops`
(broadcast, broadcast_, broadcast_object, broadcast_object_fn) and
:mod:`~hvdcore.tensorflow.scalar_ops` (barrier, join and the ``*_op`` scalars, among them
``process_set_included_op``); what they share while their ops are built (names, static
shapes, scale factors) is :mod:`~hvdcore.tensorflow.op_building`. This module gathers them.
"""

from __future__ import annotations

from hvdcore.tensorflow.broadcast_ops import (
    broadcast,
    broadcast_,
    broadcast_object,
    broadcast_object_fn,
)
from hvdcore.tensorflow.gather_ops import allgather, allgather_object, alltoall, grouped_allgather
from hvdcore.tensorflow.op_building import build_name, op_factor  # noqa: F401 (public here before)
from hvdcore.tensorflow.reduce_ops import (
    allreduce,
    grouped_allreduce,
    grouped_reducescatter,
    reducescatter,
)
from hvdcore.tensorflow.scalar_ops import (
    barrier,
    join,
    local_rank_op,
    local_size_op,
    process_set_included_op,
    rank_op,
    size_op,
)

__all__ = [
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
    "broadcast_", "alltoall", "reducescatter", "grouped_reducescatter", "barrier", "join",
    "broadcast_object", "broadcast_object_fn", "allgather_object", "size_op",
    "process_set_included_op", "rank_op", "local_size_op", "local_rank_op",
]
