"""When an asynchronous allreduce may start at once: the caller's pattern of calls.

With caller progress, a cached allreduce's async call can take the steady path at once
(:func:`hvdcore.engine.requests.allreduce_async`), which saves the queue's bookkeeping for a
program that synchronizes each call before the next one, but runs every tensor alone: a
program that submits many tensors and then waits for them gets them fused when they stay
queued. So a call starts at once only when the two async calls before it were each waited
for before the next one was submitted.
"""

from __future__ import annotations

import weakref
from typing import Any


class LoneCalls:
    """The async allreduce pattern of one engine (its API-layer thread's calls)."""

    __slots__ = ("_last", "_waited", "_lone")

    def __init__(self) -> None:
        self._last: Any = None  # the last async call's handle, weakly (it holds the result)
        self._waited = False  # it was waited for (before any later async call)
        self._lone = False  # the call before it was waited for before it was submitted

    def submitting(self) -> bool:
        """An async call is being submitted: True when it may start at once."""
        lone = self._waited
        start = lone and self._lone
        self._lone, self._waited, self._last = lone, False, None
        return start

    def submitted(self, handle: Any) -> None:
        """Its handle (waiting for it marks the pattern)."""
        self._last = weakref.ref(handle)

    def waiting(self, handle: Any) -> None:
        """A handle is being waited for."""
        last = self._last
        if last is not None and last() is handle:
            self._waited = True
