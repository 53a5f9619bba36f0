"""hvdcore.keras on Keras 3's torch backend (``KERAS_BACKEND=torch``).

Every name of :mod:`hvdcore.torch` (init, rank, allreduce of torch tensors, Compression, ...)
plus the Keras API of :mod:`hvdcore.keras.portable`, whose ``DistributedOptimizer`` replaces
torch's; the gradients are reduced by :func:`hvdcore.torch.grouped_allreduce`, so they take
the torch planes (MPI or Gloo on the host, NCCL for CUDA tensors). TensorFlow is not imported.
"""

from __future__ import annotations

from hvdcore.keras import portable as _portable
from hvdcore.torch import *  # noqa: F403
from hvdcore.torch import __all__ as _torch_all

# the Keras names win over torch's (DistributedOptimizer), whatever order imports are sorted in
globals().update({name: getattr(_portable, name) for name in _portable.__all__})

__all__ = [*(n for n in _torch_all if n not in _portable.__all__
             and n not in ("broadcast_parameters", "broadcast_optimizer_state",
                           "SyncBatchNorm")), *_portable.__all__]
