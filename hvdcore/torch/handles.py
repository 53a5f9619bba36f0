"""Handles of asynchronous torch collectives: ``poll(handle)`` and ``synchronize(handle)``.

A handle wraps what is in flight (a core handle, or a ``torch.distributed`` work object on the
NCCL path) and a function that turns the finished buffers into the torch result. Unlike
Horovod, where a handle is an ``int``, it is a small object; code that only passes handles to
``poll``/``synchronize`` (the documented use) works unchanged. A handle is also callable
(``handle()`` waits and returns the result), which is how Horovod's
``sparse_allreduce_async`` handle is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hvdcore as _core
from hvdcore import basics
from hvdcore.docstrings import SYNC_RAISES, documented
from hvdcore.engine.handle import Handle as CoreHandle
from hvdcore.errors import UnsupportedError

__all__ = ["CoreResult", "Handle", "blocking", "poll", "synchronize"]

_PENDING = object()


class Handle:
    """An asynchronous collective in flight.

    Args:
        waitable: a core handle, a ``torch.distributed.Work``, another Handle, a list of
            these, or None for work that already finished.
        finish: called once with the waited-for results (a list for a list); returns the
            torch result.
        description: what the handle is for, used in error messages.
    """

    __slots__ = ("_waitable", "_finish", "_result", "description")

    def __init__(self, waitable: Any, finish: Callable[[Any], Any], description: str) -> None:
        self._waitable = waitable
        self._finish = finish
        self._result: Any = _PENDING
        self.description = description

    def poll(self) -> bool:
        """True when the collective has finished (``synchronize`` will not block)."""
        if self._result is not _PENDING or self._waitable is None:
            return True
        if isinstance(self._waitable, list):
            return all(_poll_one(w) for w in self._waitable)
        return _poll_one(self._waitable)

    def wait(self) -> Any:
        """Block until finished and return the torch result (idempotent)."""
        if self._result is _PENDING:
            waitable = self._waitable
            if isinstance(waitable, list):
                raw: Any = [_wait_one(w) for w in waitable]
            else:
                raw = None if waitable is None else _wait_one(waitable)
            self._result = self._finish(raw)
            self._waitable = None
        return self._result

    def __call__(self) -> Any:
        """Same as :meth:`wait` (Horovod's ``sparse_allreduce_async`` returns a callable)."""
        return self.wait()

    def __repr__(self) -> str:
        state = "done" if self._result is not _PENDING else "in flight"
        return f"<hvdcore.torch Handle {self.description} ({state})>"


class CoreResult(Handle):
    """A :class:`Handle` over one core handle (a host tensor's collective on the MPI plane):
    waits on it directly, with no dispatch on the waitable's kind."""

    __slots__ = ()

    def wait(self) -> Any:
        """Block until finished and return the torch result (idempotent)."""
        if self._result is _PENDING:
            self._result = self._finish(_core.synchronize(self._waitable))
            self._waitable = None
        return self._result


def _poll_one(w: Any) -> bool:
    if type(w) is CoreHandle:
        return bool(_core.poll(w))
    if isinstance(w, Handle):
        return w.poll()
    if hasattr(w, "is_completed"):  # torch.distributed Work
        return bool(w.is_completed())
    return bool(_core.poll(w))


def _wait_one(w: Any) -> Any:
    if type(w) is CoreHandle:  # the common case first (hasattr on it below is slow)
        return _core.synchronize(w)
    if isinstance(w, Handle):
        return w.wait()
    if hasattr(w, "is_completed"):
        w.wait()
        return None
    return _core.synchronize(w)


def blocking(start: Callable[[], Handle]) -> Any:
    """Run ``start()`` (an asynchronous collective) and return its result, holding the engine
    from before the submission so that this thread runs it: with thread progress a request
    handed to the engine thread costs a wake-up and GIL transfers (on a 2-core VM ~45 us of
    a ~180 us call on a torch.distributed plane at 1 rank). The blocking calls whose tensors
    do not take the core's blocking host call (device tensors, the Gloo plane, staging) go
    through here."""
    st = basics.current()
    engine = st.engine if st is not None else None
    if engine is None or not engine.begin_drive():
        return start().wait()
    try:
        handle = start()
        for w in _core_handles(handle):
            engine.fast_queued(w)  # (a grouped call of cached host tensors: no cycle)
            engine.drive_until(w)
    finally:
        engine.end_drive()
    return handle.wait()


def _core_handles(handle: Handle) -> list[CoreHandle]:
    """The core handles ``handle`` waits for (none for torch.distributed work)."""
    w = handle._waitable
    if type(w) is CoreHandle:
        return [w]
    if isinstance(w, Handle):
        return _core_handles(w)
    if isinstance(w, list):
        return [c for x in w for c in (_core_handles(x) if isinstance(x, Handle)
                                       else [x] if type(x) is CoreHandle else [])]
    return []


@documented(returns="True when the operation has finished (its result or error is ready).",
            raises=())
def poll(handle: Handle) -> bool:
    """Return True if the asynchronous operation behind ``handle`` has finished.

    Example::

        >>> h = hvd.allreduce_async(torch.ones(3))   # doctest: +SKIP
        >>> while not hvd.poll(h): do_other_work()    # doctest: +SKIP
    """
    if not isinstance(handle, Handle):
        raise UnsupportedError(
            f"poll() expects a handle returned by an *_async call, got {handle!r}")
    return handle.poll()


@documented(returns="What the blocking form of the call returns.", raises=SYNC_RAISES)
def synchronize(handle: Handle) -> Any:
    """Wait for an asynchronous operation and return its result (a tensor, or a tuple/list).

    Example::

        >>> h = hvd.allreduce_async(torch.ones(3), name="x")  # doctest: +SKIP
        >>> hvd.synchronize(h)                                # doctest: +SKIP
        tensor([1., 1., 1.])
    """
    if not isinstance(handle, Handle):
        raise UnsupportedError(
            f"synchronize() expects a handle returned by an *_async call, got {handle!r}"
        )
    return handle.wait()
