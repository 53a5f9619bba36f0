"""``hvdcore.ray``: Horovod's ``horovod.ray``, an hvdcore job run by Ray actors.

``from hvdcore.ray import RayExecutor`` in place of ``from horovod.ray import RayExecutor``::

    ray.init()                      # or ray.init(address="auto") on a Ray cluster
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=4)
    executor.start()
    ranks = executor.run(train)     # train() calls hvd.init(), trains, returns something
    executor.shutdown()

The ranks form their job on the Gloo controller (as Horovod's Ray integration does), so torch
must be installed where they run; Ray itself is ``pip install ray``. Elastic jobs
(``RayExecutor(min_workers=...)``, functions that train with ``hvd.elastic.run``) follow the
cluster's nodes; their ranks send values to the driver's callbacks with :mod:`ray_logger`.
"""

from __future__ import annotations

try:
    import ray  # noqa: F401 - fail here, with what to install, not at start()
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("hvdcore.ray needs Ray: pip install ray") from exc

from hvdcore.ray import ray_logger
from hvdcore.ray.discovery import RayHostDiscovery
from hvdcore.ray.executor import RayExecutor, RaySettings
from hvdcore.ray.legacy import ElasticRayExecutor

__all__ = ["ElasticRayExecutor", "RayExecutor", "RayHostDiscovery", "RaySettings", "ray_logger"]
