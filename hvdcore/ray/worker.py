"""The process behind one rank of a :class:`~hvdcore.ray.RayExecutor` job: a Ray actor.

The executor creates one :class:`RankWorker` actor per rank, asks each where it runs, gives it
its rank's variables (the ones ``hvdcorerun --gloo`` gives a rank: :mod:`hvdcore.controllers.
gloo_env` reads them when the function calls ``hvd.init()``), optionally builds the user's
class in it (the *executable*), and then runs functions in it. The actor keeps its process
between calls, so a model built in one call is there in the next.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["RankWorker"]


class RankWorker:
    """One rank's process (made a Ray actor class by the executor)."""

    def __init__(self) -> None:
        self.executable: Any = None

    def place(self) -> tuple[str, str, str]:
        """(Ray node id, node IP address, host name) of this process."""
        import ray

        ctx = ray.get_runtime_context()
        return ctx.get_node_id(), ray.util.get_node_ip_address(), socket.gethostname()

    def gpu_ids(self) -> list[str]:
        """The GPUs Ray gave this actor (its ids on the node)."""
        import ray

        return [str(i) for i in ray.get_gpu_ids()]

    def set_env(self, env: Mapping[str, str]) -> None:
        """Export ``env`` in this process (before any ``hvd.init()`` reads it)."""
        os.environ.update({k: str(v) for k, v in env.items()})

    def start_executable(self, cls: type | None, args: list[Any], kwargs: dict[str, Any]
                         ) -> None:
        """Build ``cls(*args, **kwargs)`` here (None: no executable)."""
        self.executable = None if cls is None else cls(*args, **kwargs)

    def execute(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` here; its return value goes back to the driver."""
        return fn(self.executable)

    def run_elastic(self, fn: Callable[[Any], Any], queue: Any,
                    executable: tuple[type | None, list[Any], dict[str, Any]]
                    ) -> tuple[int, Any, str]:
        """An elastic job's worker: build the executable (``(cls, args, kwargs)``), then
        ``fn(executable)`` here, as a process would run it; (exit status, its value, the
        error that ended it). ``hvd.elastic.run`` ends a worker whose host left with
        ``SystemExit(0)``; any other exception is status 1."""
        from hvdcore.ray import ray_logger

        ray_logger.configure(queue)
        try:
            self.start_executable(*executable)
            return 0, fn(self.executable), ""
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            return code, None, "" if code == 0 else f"SystemExit({exc.code!r})"
        except BaseException as exc:  # noqa: BLE001 - the driver gets the status, as of a process
            traceback.print_exc()
            sys.stderr.flush()
            return 1, None, f"{type(exc).__name__}: {exc}"
