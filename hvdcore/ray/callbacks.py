"""The driver's side of :mod:`hvdcore.ray.ray_logger`: a queue the ranks put dicts on and a
thread that hands each, in order, to every callback of a ``run``/``execute`` call."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["CallbackPump"]

log = logging.getLogger("hvdcore")

_POLL_S = 0.1


class CallbackPump:
    """Calls ``callbacks`` with what the ranks log, from a thread, until :meth:`close`
    (which first hands over what is still queued). Without callbacks it holds no queue."""

    def __init__(self, callbacks: list[Callable[..., Any]] | None) -> None:
        self.callbacks = list(callbacks or [])
        self.queue: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.callbacks:
            import ray
            from ray.util.queue import Queue
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            # on the driver's node: it lives as long as the driver, whatever nodes leave
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(),
                                                  soft=False)
            self.queue = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": here})
            self._thread = threading.Thread(target=self._loop, name="hvdcore-ray-callbacks",
                                            daemon=True)
            self._thread.start()

    def _deliver(self, item: Any) -> None:
        for callback in self.callbacks:
            try:
                callback(item)
            except Exception:  # a callback's bug must not end the training job
                log.exception("hvdcore.ray: callback %r raised on %r", callback, item)

    def _loop(self) -> None:
        from ray.util.queue import Empty

        while not self._stop.is_set():
            try:
                item = self.queue.get(timeout=_POLL_S)
            except Empty:
                continue
            except Exception:  # noqa: BLE001 - the queue's actor is gone: nothing more comes
                return
            self._deliver(item)

    def close(self) -> None:
        """Stop the thread, deliver what is left, free the queue."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=30)
        try:
            while not self.queue.empty():
                self._deliver(self.queue.get_nowait())
        except Exception:  # noqa: BLE001,S110 - the queue's actor is gone
            pass
        self.queue.shutdown()
