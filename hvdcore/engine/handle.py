"""Handles returned by the asynchronous calls: ``poll(handle)`` and ``synchronize(handle)``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from hvdcore.engine.messages import Request

_EVENT_LOCK = threading.Lock()


class Handle:
    """Completion of one (possibly grouped) request. Results are set by the engine thread.

    ``finalize`` turns the list of per-part results into what ``synchronize`` returns.
    The wake-up event is created only when a thread really has to block: most handles are
    completed by the thread that waits for them (it drives the engine), and an Event per
    request costs more than the rest of a small allreduce's bookkeeping.
    """

    __slots__ = ("_event", "_done", "_values", "_left", "_error", "_result", "_finalize",
                 "description", "__weakref__")

    def __init__(self, parts: int, finalize: Callable[[list[Any]], Any], description: str) -> None:
        self._event: threading.Event | None = None
        self._done = False
        self._values: list[Any] = [None] * parts
        self._left = parts
        self._error: BaseException | None = None
        self._result: Any = None
        self._finalize = finalize
        self.description = description
        if parts == 0:
            self._result = finalize([])
            self._done = True

    @classmethod
    def finished(cls, value: Any, description: str) -> Handle:
        """A handle already done with ``value`` (what ``synchronize`` returns)."""
        h = cls.__new__(cls)
        h._event = h._error = None
        h._finalize = None  # type: ignore[assignment]  # (done: never finalized)
        h._values = []
        h._left = 0
        h._result = value
        h._done = True
        h.description = description
        return h

    def _complete(self) -> None:
        # Order matters (the GIL makes it sequentially consistent): publish _done, then read
        # _event. A waiter publishes _event, then re-reads _done, so one of them sees the other.
        self._done = True
        ev = self._event
        if ev is not None:
            ev.set()

    def set_part(self, index: int, value: Any) -> None:
        """Engine: part ``index`` finished with ``value``."""
        if self._done:
            return
        self._values[index] = value
        self._left -= 1
        if self._left == 0:
            try:
                self._result = self._finalize(self._values)
            except BaseException as exc:  # surfaced to the waiting user thread
                self._error = exc
            self._values = []
            self._complete()

    def fail(self, error: BaseException) -> None:
        """Engine: the request failed; ``synchronize`` raises ``error``."""
        if self._done:
            return
        self._error = error
        self._complete()

    def done(self) -> bool:
        """True when the result (or error) is available."""
        return self._done

    def wait_done(self, timeout: float | None = None) -> bool:
        """Block until done or ``timeout`` seconds pass; True if done (never raises)."""
        if self._done:
            return True
        with _EVENT_LOCK:  # two waiters must share one event
            ev = self._event
            if ev is None:
                ev = self._event = threading.Event()
        return self._done or ev.wait(timeout)

    def wait(self, timeout: float | None = None) -> Any:
        """Block until done and return the result, or raise the request's error."""
        if not self.wait_done(timeout):
            raise TimeoutError(f"{self.description} did not complete within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result

    def __repr__(self) -> str:
        state = "done" if self._done else "pending"
        return f"<hvdcore Handle {self.description} {state}>"


def first(values: list[Any]) -> Any:
    """Finalize of a one-part request: its only result."""
    return values[0]


def one_request(meta: Any, arr: Any, out: Any) -> Any:
    """The :class:`~hvdcore.engine.messages.Request` of one allreduce of ``meta``, with a
    handle of its own (not enqueued)."""
    return Request(meta, arr, out, Handle(1, first, f"allreduce '{meta.name}'"), 0)
