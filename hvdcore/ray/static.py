"""A fixed-size :class:`~hvdcore.ray.RayExecutor` job: its ranks' actors live from ``start()``
to ``shutdown()``.

The job reserves its ranks in a placement group (:mod:`hvdcore.ray.placement`), starts one
actor per rank (:mod:`hvdcore.ray.worker`), hosts the job's rendezvous (a torch.distributed
``TCPStore`` in an actor on rank 0's node: :mod:`hvdcore.ray.rendezvous`) and gives every
actor the variables of its rank, so that ``hvd.init()`` inside a function it runs forms the job
on the Gloo controller. Functions then run on every rank at once (``run``, ``execute``), or on
rank 0 (``execute_single``). A function that raises on one rank stops the job: the other ranks
may be waiting for it in a collective, so every actor is ended and the error names the rank
(``start()`` again to go on), where Horovod leaves the others waiting.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

from hvdcore.errors import LaunchError, RankFailedError
from hvdcore.ray.placement import Placed, Shape, number_ranks, place_workers, shared_devices
from hvdcore.ray.rendezvous import host_store
from hvdcore.ray.settings import RaySettings
from hvdcore.ray.worker import RankWorker

__all__ = ["StaticRayJob"]

log = logging.getLogger("hvdcore")


class StaticRayJob:
    """``num_workers`` ranks (``shape``) that keep their actors between calls."""

    def __init__(self, settings: RaySettings, shape: Shape) -> None:
        self.settings, self.shape = settings, shape
        self._placed: Placed | None = None
        self._store: Any = None
        self._warned_callbacks = False

    @property
    def num_workers(self) -> int:
        """The job's number of ranks."""
        return self.shape.size

    @property
    def workers(self) -> list[Any]:
        """The rank actors, in rank order (empty before :meth:`start`)."""
        return [] if self._placed is None else list(self._placed.workers)

    # -- the job ----------------------------------------------------------------------------

    def start(self, executable_cls: type | None = None,
              executable_args: list[Any] | None = None,
              executable_kwargs: dict[str, Any] | None = None,
              extra_env_vars: dict[str, str] | None = None) -> None:
        """Start the ranks' actors (``ray.init()`` first, or attach to a cluster), give each
        its rank's variables and ``extra_env_vars``, and build ``executable_cls(*args,
        **kwargs)`` in each (what :meth:`execute` passes its function)."""
        import ray

        if self._placed is not None:
            raise LaunchError("RayExecutor.start(): already started (shutdown() first)")
        if not ray.is_initialized():
            ray.init()
        actor = ray.remote(RankWorker)
        self._placed = place_workers(actor, self.shape, self.settings.placement_group_timeout_s)
        try:
            common = self._rendezvous()
            common.update({k: str(v) for k, v in (extra_env_vars or {}).items()})
            ranks = number_ranks(self._placed.places)
            if self.shape.gpus_per_worker:
                gpus = ray.get([w.gpu_ids.remote() for w in self._placed.workers])
                for mine, devices in zip(ranks, shared_devices(self._placed.places, gpus),
                                         strict=True):
                    mine["CUDA_VISIBLE_DEVICES"] = devices
            ray.get([w.set_env.remote({**common, **mine})
                     for w, mine in zip(self._placed.workers, ranks, strict=True)])
            self._gather("start()", [w.start_executable.remote(
                executable_cls, list(executable_args or []), dict(executable_kwargs or {}))
                for w in self._placed.workers])
        except BaseException:
            self.shutdown()
            raise
        log.info("hvdcore.ray: %d ranks on %d node(s), rendezvous at %s:%s",
                 len(self._placed.workers), len({p[0] for p in self._placed.places}),
                 common["HOROVOD_GLOO_RENDEZVOUS_ADDR"], common["HOROVOD_GLOO_RENDEZVOUS_PORT"])

    def _rendezvous(self) -> dict[str, str]:
        """Host the job's store on rank 0's node; the variables every rank shares."""
        assert self._placed is not None
        ifaces = ",".join(sorted(self.settings.nics)) if self.settings.nics else None
        self._store, (addr, port) = host_store(self._placed.places[0][0],
                                               len(self._placed.workers),
                                               self.settings.timeout_s, ifaces)
        env = {"GLOO_SOCKET_IFNAME": ifaces} if ifaces else {}
        env.update({"HOROVOD_GLOO_RENDEZVOUS_ADDR": addr,
                    "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
                    "HOROVOD_CONTROLLER": "gloo", "HVDCORE_CONTROLLER": "gloo",
                    "HVDCORE_RENDEZVOUS_TIMEOUT": f"{self.settings.timeout_s:g}"})
        return env

    def run(self, fn: Callable[..., Any], args: list[Any] | None = None,
            kwargs: dict[str, Any] | None = None,
            callbacks: list[Callable[..., Any]] | None = None) -> list[Any]:
        """``fn(*args, **kwargs)`` on every rank at once; the values it returned, by rank."""
        self._note_callbacks(callbacks)
        return self._gather("run()", self.run_remote(fn, args, kwargs))

    def run_remote(self, fn: Callable[..., Any], args: list[Any] | None = None,
                   kwargs: dict[str, Any] | None = None) -> list[Any]:
        """:meth:`run` without waiting: one Ray ``ObjectRef`` per rank (``ray.get`` them)."""
        a, kw = list(args or []), dict(kwargs or {})
        return [w.execute.remote(lambda _w: fn(*a, **kw)) for w in self._started()]

    def execute(self, fn: Callable[[Any], Any],
                callbacks: list[Callable[..., Any]] | None = None) -> list[Any]:
        """``fn(executable)`` on every rank at once (the object :meth:`start` built there);
        the values it returned, by rank."""
        self._note_callbacks(callbacks)
        return self._gather("execute()", [w.execute.remote(fn) for w in self._started()])

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` on rank 0 alone (it must not need the other ranks)."""
        return self._gather("execute_single()", [self._started()[0].execute.remote(fn)])[0]

    def shutdown(self) -> None:
        """End the ranks' actors and free their placement group and the rendezvous store."""
        import ray
        from ray.util.placement_group import remove_placement_group

        placed, store, self._placed, self._store = self._placed, self._store, None, None
        if store is not None:
            ray.kill(store, no_restart=True)
        if placed is None:
            return
        for w in placed.workers:
            ray.kill(w, no_restart=True)
        if placed.group is not None:
            remove_placement_group(placed.group)

    # -- helpers ----------------------------------------------------------------------------

    def _started(self) -> list[Any]:
        if self._placed is None:
            raise LaunchError("RayExecutor: call start() first (or again after a rank failed)")
        return self._placed.workers

    def _gather(self, what: str, refs: list[Any]) -> list[Any]:
        """The values of ``refs`` (one per rank, in rank order); the first rank that raised
        ends the job (see the module docstring) and its error is raised as RankFailedError."""
        import ray

        index = {ref: rank for rank, ref in enumerate(refs)}
        values: list[Any] = [None] * len(refs)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            rank = index[done[0]]
            try:
                values[rank] = ray.get(done[0])
            except Exception as exc:  # noqa: BLE001 - re-raised below with the rank
                cause = getattr(exc, "cause", None) or exc
                self.shutdown()
                raise RankFailedError(
                    f"hvdcore.ray: {what} failed on rank {rank}: {type(cause).__name__}: "
                    f"{cause}; every rank was stopped (start() again to go on)") from exc
        return values

    def _note_callbacks(self, callbacks: list[Callable[..., Any]] | None) -> None:
        if callbacks and not self._warned_callbacks:
            self._warned_callbacks = True
            warnings.warn("RayExecutor: callbacks receive what the ranks of an elastic Ray "
                          "job log (Horovod calls them for elastic jobs only); this job is "
                          "not elastic, so they are never called", UserWarning, stacklevel=3)
