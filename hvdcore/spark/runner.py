"""``hvdcore.spark.run``: Horovod's ``horovod.spark.run``, a function run as an hvdcore job
whose ranks are Spark tasks.

The driver (this process) starts a Spark job of ``num_proc`` tasks in a thread of its own,
hosts the job's rendezvous (a torch.distributed ``TCPStore``) and the tasks' check-in
(:mod:`hvdcore.spark.coordinator`), waits up to ``start_timeout`` for every task to start,
numbers the ranks, and each task runs its rank in a process of its own
(:mod:`hvdcore.spark.task`) on the Gloo controller: no MPI is started. The ranks' lines come
to ``stdout``/``stderr`` tagged ``[rank]<stdout>:``; the values the function returned come back
as a list by rank. A rank that fails stops the others and the call raises, naming it.
"""

from __future__ import annotations

import datetime
import logging
import os
import pickle
import re
import secrets
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from hvdcore.errors import ArgumentError, LaunchError, RankFailedError, UnsupportedError
from hvdcore.runner.gloo_launch import RankPlace, iface_address
from hvdcore.spark.coordinator import Coordinator
from hvdcore.spark.task import TaskPlan, make_mapper

__all__ = ["run"]

log = logging.getLogger("hvdcore")

_ids = iter(range(1, 1 << 62))
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): ")


def _start_timeout(start_timeout: float | None) -> float:
    if start_timeout is None:
        raw = os.environ.get("HOROVOD_SPARK_START_TIMEOUT", "600")
        try:
            start_timeout = float(raw)
        except ValueError:
            raise ArgumentError(f"hvdcore.spark.run: HOROVOD_SPARK_START_TIMEOUT={raw!r} is "
                                "not a number of seconds") from None
    if isinstance(start_timeout, bool) or not isinstance(start_timeout, int | float) \
            or not start_timeout > 0:
        raise ArgumentError(f"hvdcore.spark.run: start_timeout must be a number of seconds > 0, "
                            f"got {start_timeout!r}")
    return float(start_timeout)


def _check(fn: Any, num_proc: Any, use_mpi: Any, extra_mpi_args: Any, nics: Any) -> None:
    if not callable(fn):
        raise UnsupportedError(f"hvdcore.spark.run: fn must be callable, got "
                               f"{type(fn).__name__}")
    if num_proc is not None and (isinstance(num_proc, bool) or not isinstance(num_proc, int)
                                 or num_proc < 1):
        raise ArgumentError(f"hvdcore.spark.run: num_proc must be an integer >= 1, got "
                            f"{num_proc!r}")
    if use_mpi:
        raise UnsupportedError("hvdcore.spark.run: use_mpi=True: hvdcore runs a Spark job's "
                               "ranks on the Gloo controller (no mpirun inside Spark tasks); "
                               "leave use_mpi unset")
    if extra_mpi_args:
        warnings.warn("hvdcore.spark.run: extra_mpi_args has no effect: the ranks run on the "
                      "Gloo controller, no mpirun is started", UserWarning, stacklevel=3)
    if nics is not None and (isinstance(nics, str) or not all(isinstance(n, str) for n in nics)):
        raise ArgumentError(f"hvdcore.spark.run: nics must be a list or set of interface "
                            f"names, got {nics!r}")


def _payload(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> bytes:
    """The function and its arguments in :mod:`hvdcore.runner.func_task`'s format (no script
    to load first: cloudpickle carries a function of the caller's script by value)."""
    from pyspark import cloudpickle

    return pickle.dumps(None) + cloudpickle.dumps((fn, tuple(args), dict(kwargs)))


def run(fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
        num_proc: int | None = None, start_timeout: float | None = None,
        use_mpi: bool | None = None, use_gloo: bool | None = None,
        extra_mpi_args: str | None = None, env: Mapping[str, str] | None = None,
        stdout: TextIO | None = None, stderr: TextIO | None = None, verbose: int = 1,
        nics: Sequence[str] | set[str] | None = None,
        prefix_output_with_timestamp: bool = False,
        executable: str | None = None) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``num_proc`` ranks, each a task of the active Spark
    context; the values it returned, by rank (Horovod's ``horovod.spark.run``).

    ``num_proc`` defaults to ``spark.default.parallelism``; ``start_timeout`` (default
    ``HOROVOD_SPARK_START_TIMEOUT``, else 600 s) bounds the wait for every task to start.
    ``env`` (default: this process's environment) goes to every rank on top of its executor's;
    ``stdout``/``stderr`` (default ``sys.stdout``/``sys.stderr``) receive the ranks' lines;
    ``nics``: the interfaces the ranks' Gloo traffic and the rendezvous use; ``executable``:
    the ranks' Python (default ``sys.executable``). The ranks run on the Gloo controller:
    ``use_mpi=True`` is refused and ``extra_mpi_args`` has no effect.
    """
    import pyspark

    _check(fn, num_proc, use_mpi, extra_mpi_args, nics)
    timeout = _start_timeout(start_timeout)
    sc = pyspark.SparkContext._active_spark_context
    if sc is None:
        raise LaunchError("hvdcore.spark.run: no active SparkContext: start one first "
                          "(SparkSession.builder.getOrCreate(), or run inside pyspark)")
    size = int(num_proc if num_proc is not None else sc.defaultParallelism)
    if verbose >= 1:
        log.info("hvdcore.spark: running %d processes%s", size,
                 "" if num_proc is not None else " (spark.default.parallelism)")
    ifaces = ",".join(sorted(nics)) if nics else None
    # where the tasks reach the driver: Spark's own address for it, or the address of nics
    address = iface_address(ifaces) if ifaces else str(sc.getConf().get("spark.driver.host"))
    caller = {str(k): str(v) for k, v in (os.environ if env is None else env).items()}
    return _SparkJob(sc, size, timeout, address, ifaces).run(
        _payload(fn, args, kwargs or {}), caller, stdout or sys.stdout, stderr or sys.stderr,
        prefix_output_with_timestamp, executable or sys.executable, verbose)


class _SparkJob:
    """One call of :func:`run`: the Spark job in a thread, the store and the coordinator."""

    def __init__(self, sc: Any, size: int, timeout: float, address: str,
                 ifaces: str | None) -> None:
        self.sc, self.size, self.timeout = sc, size, timeout
        self.address, self.ifaces = address, ifaces
        self.group = f"hvdcore.spark.run.{next(_ids)}"
        self.results: list[tuple[Any, ...]] | None = None
        self.error: BaseException | None = None

    def _rank_env(self, caller: dict[str, str], port: int) -> Callable[[RankPlace],
                                                                         dict[str, str]]:
        common = {"HOROVOD_CONTROLLER": "gloo", "HVDCORE_CONTROLLER": "gloo",
                  "HOROVOD_GLOO_RENDEZVOUS_ADDR": self.address,
                  "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
                  "HVDCORE_RENDEZVOUS_TIMEOUT": f"{self.timeout:g}"}
        if self.ifaces:
            common["GLOO_SOCKET_IFNAME"] = self.ifaces
        base = {"PYTHONUNBUFFERED": "1", **caller}
        return lambda place: {**base, **place.horovod_env(self.size), **common}

    def _spark(self, plan: TaskPlan) -> None:
        try:
            self.sc.setJobGroup(self.group, "hvdcore.spark.run", interruptOnCancel=True)
            rdd = self.sc.parallelize(range(self.size), self.size)
            self.results = rdd.mapPartitionsWithIndex(make_mapper(plan)).collect()
        except BaseException as exc:  # noqa: BLE001 - raised by run() in the caller's thread
            self.error = exc

    def run(self, payload: bytes, caller: dict[str, str], stdout: TextIO, stderr: TextIO,
            timestamps: bool, executable: str, verbose: int) -> list[Any]:
        import torch.distributed as dist

        store = dist.TCPStore("0.0.0.0", 0, self.size, True,
                              datetime.timedelta(seconds=self.timeout), wait_for_workers=False)
        token = secrets.token_hex(16)
        coord = Coordinator(self.size, token, self._rank_env(caller, store.port), stdout,
                            stderr, timestamps)
        plan = TaskPlan(address=self.address, port=coord.port, token=token, payload=payload,
                        executable=executable)
        thread = threading.Thread(target=self._spark, args=(plan,), name=self.group,
                                  daemon=True)
        thread.start()
        try:
            came = coord.wait_checked_in(self.timeout, lambda: not thread.is_alive())
            if came < self.size:
                if not thread.is_alive():
                    raise self._spark_failed()
                raise LaunchError(
                    f"hvdcore.spark.run: {came} of {self.size} Spark tasks started within "
                    f"start_timeout {self.timeout:g} s. Each rank runs in a Spark task: the "
                    f"cluster needs {self.size} task slots free at once (its default "
                    f"parallelism is {self.sc.defaultParallelism}); give a larger "
                    f"start_timeout where executors are allocated on demand")
            places = coord.assign()
            if verbose >= 2:
                log.info("hvdcore.spark: ranks on %s", ", ".join(
                    f"{p.rank}:{p.host}" for p in places))
            thread.join()
        except BaseException:
            coord.stop_all()
            self.sc.cancelJobGroup(self.group)
            raise
        finally:
            coord.close()
        return self._values(coord)

    def _spark_failed(self) -> LaunchError:
        """The Spark job's error in one line: the last Python exception its text names (a
        task's error comes wrapped in Java's), else its first line."""
        lines = [line.strip() for line in str(self.error).splitlines() if line.strip()]
        named = [line for line in lines if _EXCEPTION_LINE.match(line)]
        said = named[-1] if named else (lines[0] if lines else type(self.error).__name__)
        return LaunchError(f"hvdcore.spark.run: the Spark job failed: {said}")

    def _values(self, coord: Coordinator) -> list[Any]:
        if coord.failure is not None:
            f = coord.failure
            tail = "\n".join(f.tail)
            how = (f"exited with code {f.code}" if f.code is not None else
                   "was lost: its Spark task ended without its exit code (a lost executor?)")
            said = f" Its last lines on stderr:\n{tail}" if tail else " It wrote nothing on stderr."
            raise RankFailedError(
                f"hvdcore.spark.run: rank {f.rank} (Spark task {f.index} on {f.host}) {how}; "
                f"the other ranks were stopped.{said}")
        if self.error is not None or self.results is None:
            raise self._spark_failed()
        values: dict[int, Any] = {}
        for _index, rank, code, value in self.results:
            if rank is None or code != 0 or value is None:
                raise LaunchError(f"hvdcore.spark.run: rank {rank} ended with code {code} "
                                  "and no value")
            values[rank] = pickle.loads(value)
        return [values[r] for r in range(self.size)]
