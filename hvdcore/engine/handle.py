"""Handles returned by the asynchronous calls: ``poll(handle)`` and ``synchronize(handle)``."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

_SPIN_S = 0.0


class Handle:
    """Completion of one (possibly grouped) request. Results are set by the engine thread.

    ``finalize`` turns the list of per-part results into what ``synchronize`` returns.
    """

    __slots__ = ("_event", "_parts", "_values", "_left", "_error", "_result", "_finalize",
                 "description")

    def __init__(self, parts: int, finalize: Callable[[list[Any]], Any], description: str) -> None:
        self._event = threading.Event()
        self._parts = parts
        self._values: list[Any] = [None] * parts
        self._left = parts
        self._error: BaseException | None = None
        self._result: Any = None
        self._finalize = finalize
        self.description = description
        if parts == 0:
            self._result = finalize([])
            self._event.set()

    def set_part(self, index: int, value: Any) -> None:
        """Engine: part ``index`` finished with ``value``."""
        if self._event.is_set():
            return
        self._values[index] = value
        self._left -= 1
        if self._left == 0:
            try:
                self._result = self._finalize(self._values)
            except BaseException as exc:  # surfaced to the waiting user thread
                self._error = exc
            self._values = []
            self._event.set()

    def fail(self, error: BaseException) -> None:
        """Engine: the request failed; ``synchronize`` raises ``error``."""
        if self._event.is_set():
            return
        self._error = error
        self._event.set()

    def done(self) -> bool:
        """True when the result (or error) is available."""
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until done and return the result, or raise the request's error."""
        if not self._event.is_set():
            # A short yield-spin catches the common case (result within microseconds) without
            # paying for a thread wake-up; then block.
            deadline = time.perf_counter() + _SPIN_S
            while not self._event.is_set() and time.perf_counter() < deadline:
                os.sched_yield()
        if not self._event.wait(timeout):
            raise TimeoutError(f"{self.description} did not complete within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<hvdcore Handle {self.description} {state}>"
