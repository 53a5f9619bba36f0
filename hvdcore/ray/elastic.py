"""An elastic :class:`~hvdcore.ray.RayExecutor` job (``min_workers``/``max_workers``).

Each ``run()``/``execute()`` is one elastic job, driven by hvdcore's elastic launcher
(:class:`hvdcore.runner.elastic_driver.ElasticDriver`, the one behind ``hvdcorerun
--min-np``) with Ray in two places: the hosts are the cluster's live nodes
(:class:`~hvdcore.ray.discovery.RayHostDiscovery`) and each worker is a Ray actor on its node
(:class:`RayStarter`) that runs the function once. The job starts once ``min_workers`` slots
are there, with a worker on every slot up to ``max_workers``; a node that joins adds workers
at the next commit; a worker that fails (its function raised, or its node died) blacklists its
node, and the others roll back to the last commit and go on, as under ``hvdcorerun``. The
launcher's store (where generations are published) is in the driver's process, so the
driver must be reachable from the nodes (a driver on a cluster node is; a Ray Client driver
is where its machine is reachable); ``timeout_s`` bounds each worker's wait for it. The call
returns when the function has returned on every worker still in the job.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hvdcore.errors import ArgumentError, LaunchError, RankFailedError, UnsupportedError
from hvdcore.ray.discovery import RayHostDiscovery, node_of
from hvdcore.ray.worker import RankWorker
from hvdcore.runner.elastic_hosts import check_cooldown_range
from hvdcore.runner.elastic_workers import WorkerProcess
from hvdcore.runner.hosts import Host

__all__ = ["Elasticity", "ElasticRayJob", "RayStarter"]

log = logging.getLogger("hvdcore")


@dataclass(frozen=True)
class Elasticity:
    """An elastic job's bounds (Horovod's ``ElasticParams``)."""

    min_workers: int
    max_workers: int | None
    reset_limit: int | None
    cooldown_range: Any  # (low, high) seconds, or None
    elastic_timeout: float
    override_discovery: bool

    def check(self) -> None:
        """ArgumentError for bounds that cannot hold."""
        if not isinstance(self.min_workers, int) or self.min_workers < 1:
            raise ArgumentError(f"RayExecutor: min_workers must be an integer >= 1, got "
                                f"{self.min_workers!r}")
        if self.max_workers is not None and (not isinstance(self.max_workers, int)
                                             or self.max_workers < self.min_workers):
            raise ArgumentError(f"RayExecutor: max_workers must be an integer >= min_workers "
                                f"{self.min_workers}, got {self.max_workers!r}")
        if self.reset_limit is not None and self.reset_limit < 0:
            raise ArgumentError(f"RayExecutor: reset_limit must be >= 0, got "
                                f"{self.reset_limit}")
        if not self.elastic_timeout > 0:
            raise ArgumentError(f"RayExecutor: elastic_timeout must be > 0, got "
                                f"{self.elastic_timeout}")
        if self.cooldown_range is not None:
            try:
                lo, hi = self.cooldown_range
                check_cooldown_range(lo, hi)
            except (TypeError, ValueError) as exc:
                raise ArgumentError(f"RayExecutor: cooldown_range {self.cooldown_range!r}: "
                                    f"{exc}") from None


# the executor's names of hvdcorerun's elastic flags, in the launcher's messages
_TERMS = {"-np": "min_workers", "--min-np": "min_workers", "--reset-limit": "reset_limit",
          "--elastic-timeout": "elastic_timeout",
          "--blacklist-cooldown-range": "cooldown_range"}


class _ActorProc:
    """One worker's actor, watched as the launcher watches a process."""

    def __init__(self, actor: Any, ready: Any, done: Any, wid: str, host: str,
                 start_timeout: float) -> None:
        self.actor, self.ready, self.done = actor, ready, done
        self.wid, self.host, self.start_timeout = wid, host, start_timeout
        self.code: int | None = None
        self.value: Any = None
        self.error = ""
        self.killed = False

    def wait(self) -> int:
        import ray

        try:
            started, _ = ray.wait([self.ready], timeout=self.start_timeout)
            if not started:
                if not self.killed:
                    self.error = (f"Ray did not start its actor on node {self.host} within "
                                  f"{self.start_timeout:g} s (placement_group_timeout_s)")
                    print(f"hvdcore.ray: worker {self.wid}: {self.error}", file=sys.stderr,
                          flush=True)
                self.stop(signal.SIGKILL)
                ray.wait([self.done], timeout=10)
            else:
                code, self.value, self.error = ray.get(self.done)
                self.code = int(code)
                return self.code
        except Exception as exc:  # noqa: BLE001 - the actor died: its node left, or it was killed
            if not self.killed:
                self.error = f"its Ray actor died: {str(exc).strip().splitlines()[0][:300]}"
                print(f"hvdcore.ray: worker {self.wid}: {self.error}", file=sys.stderr,
                      flush=True)
        self.code = -int(signal.SIGKILL) if self.killed else 1
        return self.code

    def poll(self) -> int | None:
        return self.code

    def stop(self, sig: int) -> None:
        if self.code is None and not self.killed:
            self.release()

    def named(self, rank: int) -> None:
        """(Ray labels an actor's lines itself.)"""

    def release(self) -> None:
        """End the actor, finished or not (its resources go back to the cluster now, not
        when its handle is collected)."""
        import ray

        self.killed = True
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception:  # noqa: BLE001,S110 - already gone
            pass


class RayStarter:
    """Starts each worker as a Ray actor on its host's node, reserving ``cpus``/``gpus``,
    that runs ``fn(executable)`` once (:meth:`RankWorker.run_elastic`)."""

    def __init__(self, discovery: Any, fn: Callable[[Any], Any],
                 executable: tuple[type | None, list[Any], dict[str, Any]],
                 cpus: float, gpus: float, queue: Any, start_timeout: float) -> None:
        import ray

        self.discovery, self.fn, self.executable = discovery, fn, executable
        self.cpus, self.gpus, self.queue = cpus, gpus, queue
        self.start_timeout = start_timeout
        self.actor_cls: Any = ray.remote(RankWorker)
        self.started: list[_ActorProc] = []

    def start(self, host: str, slot: int, wid: str, env: Mapping[str, str]) -> WorkerProcess:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = node_of(self.discovery, host)
        env = {**env, "PYTHONUNBUFFERED": "1"}
        if self.gpus:
            # each worker sees its node's GPUs (Horovod's elastic Ray jobs show the first
            # local_size): torch.cuda.set_device(hvd.local_rank()) picks one per local rank
            count = int(getattr(self.discovery, "gpus", {}).get(host, 0))
            if count:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(count))
        actor = self.actor_cls.options(
            num_cpus=self.cpus, num_gpus=self.gpus, max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        ready = actor.set_env.remote(env)
        done = actor.run_elastic.remote(self.fn, self.queue, self.executable)
        proc = _ActorProc(actor, ready, done, wid, host, self.start_timeout)
        self.started.append(proc)
        return proc


class ElasticRayJob:
    """Elastic calls of a :class:`~hvdcore.ray.RayExecutor` (see the module docstring)."""

    def __init__(self, settings: Any, bounds: Elasticity, cpus_per_worker: float,
                 gpus_per_worker: float) -> None:
        bounds.check()
        if not cpus_per_worker and not gpus_per_worker:
            raise ArgumentError("RayExecutor: an elastic job counts a node's workers by "
                                "cpus_per_worker (or gpus_per_worker with use_gpu); both are 0")
        self.settings, self.bounds = settings, bounds
        self.cpus, self.gpus = cpus_per_worker, gpus_per_worker
        if bounds.override_discovery:
            self.discovery: Any = RayHostDiscovery(bool(gpus_per_worker), cpus_per_worker,
                                                   gpus_per_worker or 1)
        else:
            self.discovery = settings.extra.get("discovery")
            if not hasattr(self.discovery, "find_available_hosts_and_slots"):
                raise ArgumentError(
                    "RayExecutor: override_discovery=False needs create_settings(discovery="
                    "...), a RayHostDiscovery (or a subclass of it)")
        self._started = False
        self._executable: tuple[type | None, list[Any], dict[str, Any]] = (None, [], {})
        self._env: dict[str, str] = {}

    @property
    def num_workers(self) -> int:
        """``min_workers`` (Horovod's)."""
        return self.bounds.min_workers

    @property
    def workers(self) -> list[Any]:
        """Always empty: an elastic job's workers live during a call only."""
        return []

    def start(self, executable_cls: type | None = None,
              executable_args: list[Any] | None = None,
              executable_kwargs: dict[str, Any] | None = None,
              extra_env_vars: dict[str, str] | None = None) -> None:
        import ray

        if not ray.is_initialized():
            ray.init()
        self._executable = (executable_cls, list(executable_args or []),
                            dict(executable_kwargs or {}))
        self._env = {k: str(v) for k, v in (extra_env_vars or {}).items()}
        self._started = True

    def run(self, fn: Callable[..., Any], args: list[Any] | None = None,
            kwargs: dict[str, Any] | None = None,
            callbacks: list[Callable[..., Any]] | None = None) -> list[Any]:
        a, kw = list(args or []), dict(kwargs or {})
        return self._run(lambda _executable: fn(*a, **kw), callbacks)

    def execute(self, fn: Callable[[Any], Any],
                callbacks: list[Callable[..., Any]] | None = None) -> list[Any]:
        return self._run(fn, callbacks)

    def run_remote(self, fn: Callable[..., Any], args: list[Any] | None = None,
                   kwargs: dict[str, Any] | None = None) -> list[Any]:
        raise UnsupportedError("RayExecutor.run_remote: an elastic job's workers come and go "
                               "during the call, so there is no fixed set of ObjectRefs to "
                               "return; use run()")

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        raise UnsupportedError("RayExecutor.execute_single: an elastic job has no lasting "
                               "rank 0 between calls; use execute() and keep rank 0's value")

    def shutdown(self) -> None:
        self._started = False

    def _run(self, fn: Callable[[Any], Any], callbacks: list[Callable[..., Any]] | None
             ) -> list[Any]:
        from hvdcore.ray.callbacks import CallbackPump
        from hvdcore.runner.elastic_driver import ElasticDriver

        if not self._started:
            raise LaunchError("RayExecutor: call start() first")
        pump = CallbackPump(callbacks)
        starter = RayStarter(self.discovery, fn, self._executable, self.cpus, self.gpus,
                             pump.queue, self.settings.placement_group_timeout_s)
        # the workers' own waits (reaching the store, forming each generation) get timeout_s
        env = {"HVDCORE_RENDEZVOUS_TIMEOUT": f"{self.settings.timeout_s:g}", **self._env}
        driver = ElasticDriver(self._settings(), starter, {}, env)
        try:
            code = driver.run()
        finally:
            for proc in starter.started:
                proc.release()
            pump.close()
        if code != 0:
            failed = [p for p in starter.started if p.error and p.code not in (None, 0)]
            first = f"; first worker error: {failed[0].wid}: {failed[0].error}" if failed else ""
            raise RankFailedError(f"hvdcore.ray: the elastic job failed: "
                                  f"{driver.reason or 'a worker failed'}{first}")
        done = sorted((w for w in driver.workers if w.state == "done"), key=lambda w: w.rank)
        return [w.proc.value for w in done]  # type: ignore[attr-defined]

    def _settings(self) -> Any:
        import ray

        from hvdcore.runner.elastic_driver import ElasticSettings

        b, nics = self.bounds, self.settings.nics
        found = self.discovery.find_available_hosts_and_slots

        def discover() -> list[Host]:
            return [Host(name, slots) for name, slots in found().items()]

        return ElasticSettings(
            b.min_workers, b.max_workers, None, discover, b.elastic_timeout, b.reset_limit,
            tuple(b.cooldown_range) if b.cooldown_range is not None else None,
            self.settings.timeout_s, iface=",".join(sorted(nics)) if nics else None,
            address=None if nics else ray.util.get_node_ip_address(),
            who="hvdcore.ray", terms=_TERMS)
