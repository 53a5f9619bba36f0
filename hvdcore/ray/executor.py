"""``RayExecutor``: Horovod's ``horovod.ray.RayExecutor``, an hvdcore job of Ray actors.

Two kinds of job behind one class, as in Horovod: a fixed-size one (``num_workers`` or
``num_hosts``: :mod:`hvdcore.ray.static`), whose actors live from ``start()`` to
``shutdown()``, and an elastic one (``min_workers``/``max_workers``: :mod:`hvdcore.ray.elastic`),
whose workers come and go with the cluster's nodes during each ``run()``. Both form the job on
the Gloo controller; both implement :class:`RayJob`.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable
from typing import Any, Protocol

from hvdcore.errors import ArgumentError
from hvdcore.ray.placement import Shape
from hvdcore.ray.settings import RaySettings

__all__ = ["RayExecutor", "RaySettings", "RayJob"]

log = logging.getLogger("hvdcore")


class RayJob(Protocol):
    """What a :class:`RayExecutor` runs: one kind of job, its calls Horovod's."""

    @property
    def num_workers(self) -> int:
        """The job's number of ranks."""

    @property
    def workers(self) -> list[Any]:
        """The live rank actors, in rank order."""

    def start(self, executable_cls: type | None, executable_args: list[Any] | None,
              executable_kwargs: dict[str, Any] | None,
              extra_env_vars: dict[str, str] | None) -> None:
        """Get ready to run functions."""

    def run(self, fn: Callable[..., Any], args: list[Any] | None,
            kwargs: dict[str, Any] | None, callbacks: list[Callable[..., Any]] | None
            ) -> list[Any]:
        """``fn(*args, **kwargs)`` on every rank; the values, by rank."""

    def run_remote(self, fn: Callable[..., Any], args: list[Any] | None,
                   kwargs: dict[str, Any] | None) -> list[Any]:
        """:meth:`run` without waiting: Ray ``ObjectRef``s."""

    def execute(self, fn: Callable[[Any], Any],
                callbacks: list[Callable[..., Any]] | None) -> list[Any]:
        """``fn(executable)`` on every rank; the values, by rank."""

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` on rank 0."""

    def shutdown(self) -> None:
        """Free what the job holds."""


class RayExecutor:
    """An hvdcore job of Ray actors, each reserving ``cpus_per_worker`` CPUs and, with
    ``use_gpu``, ``gpus_per_worker`` GPUs. Fixed-size: ``num_workers`` ranks, or ``num_hosts``
    nodes of ``num_workers_per_host``. Elastic: ``min_workers`` (and ``max_workers``,
    ``reset_limit``, ``cooldown_range``, ``elastic_timeout``), a worker on every slot the
    cluster's nodes hold, up to ``max_workers``, for functions that train with
    ``hvd.elastic.run``. ``settings``: from :meth:`create_settings` (None: its defaults)."""

    @classmethod
    def create_settings(cls, timeout_s: float = 30, ssh_identity_file: str | None = None,
                        ssh_str: str | None = None, placement_group_timeout_s: float = 100,
                        nics: set[str] | None = None, **extra: Any) -> RaySettings:
        """The executor's settings (Horovod's arguments). ``ssh_str`` is written to
        ``ssh_identity_file`` (mode 0600) when that file does not exist yet; Ray, not ssh,
        starts the ranks, so neither is needed by hvdcore. ``discovery=`` (in ``extra``):
        an elastic job's hosts with ``override_discovery=False`` (a
        :class:`~hvdcore.ray.RayHostDiscovery`, often a subclass)."""
        if ssh_str and ssh_identity_file and not os.path.exists(ssh_identity_file):
            fd = os.open(ssh_identity_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(ssh_str)
        return RaySettings(timeout_s, placement_group_timeout_s, set(nics) if nics else None,
                           ssh_identity_file, int(extra.pop("verbose", 1)), extra)

    def __init__(self, settings: RaySettings | None = None, num_workers: int | None = None,
                 num_hosts: int | None = None, num_workers_per_host: int = 1,
                 cpus_per_worker: float = 1, use_gpu: bool = False,
                 gpus_per_worker: float | None = None, use_current_placement_group: bool = True,
                 min_workers: int | None = None, max_workers: int | None = None,
                 reset_limit: int | None = None, cooldown_range: list[int] | None = None,
                 elastic_timeout: int = 600, override_discovery: bool = True,
                 num_slots: int | None = None, cpus_per_slot: float | None = None,
                 gpus_per_slot: float | None = None) -> None:
        if num_slots is not None or cpus_per_slot is not None or gpus_per_slot is not None:
            warnings.warn("RayExecutor: num_slots, cpus_per_slot and gpus_per_slot are "
                          "deprecated; spell them num_workers_per_host, cpus_per_worker and "
                          "gpus_per_worker", DeprecationWarning, stacklevel=2)
            num_workers_per_host = num_slots or num_workers_per_host
            cpus_per_worker = cpus_per_slot or cpus_per_worker
            gpus_per_worker = gpus_per_slot or gpus_per_worker
        if cpus_per_worker < 0:
            raise ArgumentError(f"RayExecutor: cpus_per_worker must be >= 0, got "
                                f"{cpus_per_worker}")
        if gpus_per_worker and not use_gpu:
            raise ArgumentError("RayExecutor: gpus_per_worker is set but use_gpu is False")
        if use_gpu and gpus_per_worker is not None and gpus_per_worker <= 0:
            raise ArgumentError(f"RayExecutor: gpus_per_worker must be > 0, got "
                                f"{gpus_per_worker}")
        self.settings = settings if settings is not None else self.create_settings()
        gpus = (gpus_per_worker or 1) if use_gpu else 0
        self._job: RayJob
        if min_workers is not None or max_workers is not None:
            from hvdcore.ray.elastic import Elasticity, ElasticRayJob

            if num_workers is not None or num_hosts is not None:
                raise ArgumentError(
                    "RayExecutor: give num_workers/num_hosts (a fixed-size job) or "
                    "min_workers/max_workers (an elastic one), not both")
            self._job = ElasticRayJob(self.settings, Elasticity(
                1 if min_workers is None else min_workers, max_workers, reset_limit,
                cooldown_range, elastic_timeout, override_discovery), cpus_per_worker, gpus)
            return
        from hvdcore.ray.static import StaticRayJob

        if bool(num_workers) == bool(num_hosts):
            raise ArgumentError("RayExecutor: give exactly one of num_workers and num_hosts "
                                f"(got num_workers={num_workers}, num_hosts={num_hosts}), "
                                "or min_workers for an elastic job")
        for name, value in (("num_workers", num_workers), ("num_hosts", num_hosts),
                            ("num_workers_per_host", num_workers_per_host)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ArgumentError(f"RayExecutor: {name} must be an integer >= 1, got "
                                    f"{value!r}")
        self._job = StaticRayJob(self.settings, Shape(
            num_workers, num_hosts, num_workers_per_host, cpus_per_worker, gpus,
            use_current_placement_group))

    @property
    def num_workers(self) -> int:
        """The job's number of ranks (``min_workers`` in an elastic job)."""
        return self._job.num_workers

    @property
    def workers(self) -> list[Any]:
        """The rank actors, in rank order (empty before :meth:`start`, and in an elastic job,
        whose workers live during a call only)."""
        return self._job.workers

    def start(self, executable_cls: type | None = None,
              executable_args: list[Any] | None = None,
              executable_kwargs: dict[str, Any] | None = None,
              extra_env_vars: dict[str, str] | None = None) -> None:
        """Get the job ready (``ray.init()`` first when Ray is not initialized yet).
        Fixed-size: start the ranks' actors, give each its rank's variables and
        ``extra_env_vars``, and build ``executable_cls(*args, **kwargs)`` in each (what
        :meth:`execute` passes its function). Elastic: every worker a call starts gets them."""
        self._job.start(executable_cls, executable_args, executable_kwargs, extra_env_vars)

    def run(self, fn: Callable[..., Any], args: list[Any] | None = None,
            kwargs: dict[str, Any] | None = None,
            callbacks: list[Callable[..., Any]] | None = None) -> list[Any]:
        """``fn(*args, **kwargs)`` on every rank at once; the values it returned, by rank
        (elastic: of the workers that finished, by their rank in the last generation).
        ``callbacks`` (elastic) get every dict the ranks send with
        :func:`hvdcore.ray.ray_logger.log`."""
        return self._job.run(fn, args, kwargs, callbacks)

    def run_remote(self, fn: Callable[..., Any], args: list[Any] | None = None,
                   kwargs: dict[str, Any] | None = None) -> list[Any]:
        """:meth:`run` without waiting: one Ray ``ObjectRef`` per rank (``ray.get`` them);
        fixed-size jobs only."""
        return self._job.run_remote(fn, args, kwargs)

    def execute(self, fn: Callable[[Any], Any],
                callbacks: list[Callable[..., Any]] | None = None) -> list[Any]:
        """``fn(executable)`` on every rank at once (the object :meth:`start` built there);
        the values it returned, by rank."""
        return self._job.execute(fn, callbacks)

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` on rank 0 alone (it must not need the other ranks);
        fixed-size jobs only."""
        return self._job.execute_single(fn)

    def shutdown(self) -> None:
        """End the ranks' actors and free what the job holds."""
        self._job.shutdown()
