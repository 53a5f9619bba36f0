"""Elastic training, framework-agnostic part (Horovod's ``horovod.common.elastic``).

The bindings build on it: :mod:`hvdcore.torch.elastic` (``TorchState``, ``ElasticSampler``).
"""

from hvdcore.elastic.run import run_fn
from hvdcore.elastic.state import ObjectState, State
from hvdcore.errors import HostsUpdatedInterrupt
from hvdcore.errors import HvdcoreError as HorovodInternalError

__all__ = ["State", "ObjectState", "run_fn", "HostsUpdatedInterrupt", "HorovodInternalError"]
