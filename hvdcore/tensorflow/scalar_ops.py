"""The ops whose result is one int32 scalar, evaluated when the op runs: ``barrier`` (None when
eager), ``join``, ``size_op``, ``process_set_included_op``, ``rank_op``, ``local_size_op`` and
``local_rank_op``; and ``set_size``, a process set's size for arithmetic in a traced step.

Part of :mod:`hvdcore.tensorflow.collectives`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

import hvdcore as _core
from hvdcore import basics, global_process_set
from hvdcore.controllers import elastic_env
from hvdcore.tensorflow.bridge import run_numpy

__all__ = ["barrier", "join", "set_size", "size_op", "process_set_included_op", "rank_op",
           "local_size_op", "local_rank_op", "PROCESS_SET_ERROR_UNKNOWN_SET"]

PROCESS_SET_ERROR_UNKNOWN_SET = -3
"""What ``size_op`` and ``process_set_included_op`` return for an id no registered set has
(Horovod's ``HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET``)."""


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


def _registered(process_set_id: int) -> Any:
    return basics.state().sets.get(process_set_id)


def size_op(process_set_id: int = 0, name: str | None = None) -> tf.Tensor:
    """The size of the process set ``process_set_id`` (0: the job, i.e. ``size()``) as an int32
    tensor, evaluated when the op runs; ``PROCESS_SET_ERROR_UNKNOWN_SET`` for an unknown id."""
    set_id = int(process_set_id)

    def fn() -> int:
        if set_id == 0:
            return _core.size()
        ps = _registered(set_id)
        return PROCESS_SET_ERROR_UNKNOWN_SET if ps is None else len(ps.ranks)

    return _scalar_op(fn, "size")


def set_size(process_set: Any, dtype: Any) -> Any:
    """``process_set.size()`` as a ``dtype`` scalar for arithmetic: in a graph of an elastic
    job read when the op runs, so that a step traced before the job changed size divides by
    the size it runs at; a constant elsewhere (a size that cannot change)."""
    if tf.executing_eagerly() or elastic_env.current() is None:
        return tf.constant(process_set.size(), dtype)
    return tf.cast(_scalar_op(process_set.size, "set_size"), dtype)


def process_set_included_op(process_set_id: int = 0, name: str | None = None) -> tf.Tensor:
    """1 if this rank belongs to the process set ``process_set_id`` (always for 0, the global
    set), else 0, or ``PROCESS_SET_ERROR_UNKNOWN_SET`` for an unknown id: an int32 tensor,
    evaluated when the op runs.

    Example: ``tf.equal(hvd.process_set_included_op(evens.process_set_id), 1)``.
    """
    set_id = int(process_set_id)

    def fn() -> int:
        basics.state()  # not initialized: an error, as the other scalar ops
        if set_id == 0:
            return 1
        ps = _registered(set_id)
        return PROCESS_SET_ERROR_UNKNOWN_SET if ps is None else int(bool(ps.included()))

    return _scalar_op(fn, "process_set_included")


def rank_op(name: str | None = None) -> tf.Tensor:
    """``rank()`` as an int32 tensor, evaluated when the op runs."""
    return _scalar_op(_core.rank, "rank")


def local_size_op(name: str | None = None) -> tf.Tensor:
    """``local_size()`` as an int32 tensor, evaluated when the op runs."""
    return _scalar_op(_core.local_size, "local_size")


def local_rank_op(name: str | None = None) -> tf.Tensor:
    """``local_rank()`` as an int32 tensor, evaluated when the op runs."""
    return _scalar_op(_core.local_rank, "local_rank")
