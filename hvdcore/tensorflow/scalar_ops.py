"""The ops whose result is one int32 scalar, evaluated when the op runs: ``barrier`` (None when
eager), ``join``, ``size_op``, ``rank_op``, ``local_size_op`` and ``local_rank_op``.

Part of :mod:`hvdcore.tensorflow.collectives`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

import hvdcore as _core
from hvdcore import global_process_set
from hvdcore.tensorflow.bridge import run_numpy

__all__ = ["barrier", "join", "size_op", "rank_op", "local_size_op", "local_rank_op"]


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
