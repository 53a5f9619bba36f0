"""Whether a framework's DistributedOptimizer or gradient tape reduces gradients at all.

Horovod reduces a gradient only where there is another rank to average with: its TensorFlow
and Keras wrappers take the allreduce only on a member of a process set of 2+ ranks
(``_allreduce_cond`` in horovod/tensorflow/__init__.py) and its torch optimizer registers
hooks only on a member in a job of 2+ ranks (horovod/torch/optimizer.py). Elsewhere the
gradients are used as computed: no compression, no scaling. An elastic job always reduces
(its size changes between generations).
"""

from __future__ import annotations

from typing import Any

from hvdcore.controllers import elastic_env

__all__ = ["reduces_gradients"]


def reduces_gradients(process_set: Any, others: int | None = None) -> bool:
    """True when gradients over ``process_set`` are reduced; ``others``: the size that must
    exceed 1 (default the set's; torch's rule takes the job's)."""
    if process_set.included() is False:
        return False
    if elastic_env.current() is not None:
        return True
    size = process_set.size() if others is None else others
    return size is None or size > 1  # (None: not registered; the call itself says so)
