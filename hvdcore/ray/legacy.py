"""``ElasticRayExecutor``: Horovod's first elastic Ray executor (deprecated there since 0.25, still
exported by 0.28.1), kept for scripts written against it. It runs on the same elastic job as
``RayExecutor(min_workers=...)`` (:mod:`hvdcore.ray.elastic`), which new code should use."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hvdcore.errors import ArgumentError
from hvdcore.ray.elastic import Elasticity, ElasticRayJob
from hvdcore.ray.settings import RaySettings

__all__ = ["ElasticRayExecutor", "ElasticRaySettings"]


@dataclass
class ElasticRaySettings:
    """What :meth:`ElasticRayExecutor.create_settings` makes (Horovod's ``ElasticSettings``);
    ``discovery`` is used with ``override_discovery=False``."""

    min_num_proc: int = 1
    max_num_proc: int | None = None
    reset_limit: int | None = None
    elastic_timeout: float = 600
    timeout_s: float = 30
    nics: set[str] | None = None
    discovery: Any = None
    verbose: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


class ElasticRayExecutor:
    """An elastic job on the Ray cluster's nodes: ``create_settings``, then ``start()`` and
    ``run(worker_fn)``, as in Horovod. Prefer ``RayExecutor(min_workers=...)``."""

    @staticmethod
    def create_settings(min_num_proc: int = 1, max_num_proc: int | None = None,
                        reset_limit: int | None = None, elastic_timeout: float = 600,
                        timeout_s: float = 30, ssh_identity_file: str | None = None,
                        nics: set[str] | None = None, min_np: int | None = None,
                        max_np: int | None = None, **kwargs: Any) -> ElasticRaySettings:
        """The job's bounds and timeouts (``min_np``/``max_np``: Horovod's deprecated
        spellings). Ray, not ssh, starts the workers: ``ssh_identity_file`` is not used."""
        if min_np is not None:
            warnings.warn("min_np is deprecated, use min_num_proc", DeprecationWarning,
                          stacklevel=2)
            min_num_proc = min_np if min_num_proc == 1 else min_num_proc
        if max_np is not None:
            warnings.warn("max_np is deprecated, use max_num_proc", DeprecationWarning,
                          stacklevel=2)
            max_num_proc = max_np if max_num_proc is None else max_num_proc
        return ElasticRaySettings(min_num_proc, max_num_proc, reset_limit, elastic_timeout,
                                  timeout_s, set(nics) if nics else None,
                                  kwargs.pop("discovery", None),
                                  int(kwargs.pop("verbose", 1)), kwargs)

    def __init__(self, settings: ElasticRaySettings, use_gpu: bool = False,
                 cpus_per_slot: float = 1, gpus_per_slot: float | None = None,
                 env_vars: dict[str, str] | None = None,
                 override_discovery: bool = True) -> None:
        warnings.warn("ElasticRayExecutor is deprecated (as in Horovod): use "
                      "RayExecutor(settings, min_workers=..., max_workers=...)",
                      DeprecationWarning, stacklevel=2)
        if gpus_per_slot and not use_gpu:
            raise ArgumentError("ElasticRayExecutor: gpus_per_slot is set but use_gpu is False")
        gpus = (gpus_per_slot or 1) if use_gpu else 0
        if use_gpu and gpus < 1:
            raise ArgumentError(f"ElasticRayExecutor: gpus_per_slot must be >= 1, got {gpus}")
        ray_settings = RaySettings(settings.timeout_s, settings.timeout_s, settings.nics,
                                   verbose=settings.verbose,
                                   extra={"discovery": settings.discovery})
        self.settings = settings
        self.env_vars = dict(env_vars or {})
        self._job = ElasticRayJob(ray_settings, Elasticity(
            settings.min_num_proc, settings.max_num_proc, settings.reset_limit, None,
            settings.elastic_timeout, override_discovery), cpus_per_slot, gpus)

    def start(self) -> None:
        """Get ready (``ray.init()`` first when Ray is not initialized yet)."""
        self._job.start(extra_env_vars=self.env_vars)

    def run(self, worker_fn: Callable[[], Any],
            callbacks: list[Callable[..., Any]] | None = None) -> list[Any]:
        """``worker_fn()`` on every worker, as an elastic job; the finished workers' values
        by their last rank. ``callbacks`` get what the ranks send with ``ray_logger.log``."""
        return self._job.run(worker_fn, None, None, callbacks)
