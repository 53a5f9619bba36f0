"""Submitting requests to an engine and waiting for them: the entry the API layer calls.

The API layer (:mod:`hvdcore.ops`, :mod:`hvdcore.collectives`, :mod:`hvdcore.basics`) checks a
call's arguments and builds its :class:`~hvdcore.engine.messages.Meta`; everything from there
on lives here and takes the engine as an argument: turning metas and buffers into requests
with one handle, enqueuing them, and waiting for the handle. A thread that waits drives the
engine itself when the engine is free, so a blocking call needs no thread hand-off.

Example (what ``hvdcore.barrier()`` does)::

    handle = requests.submit_control(engine, BARRIER, "barrier#1", set_id)
    requests.wait(engine, handle)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from hvdcore import errors
from hvdcore.engine.handle import Handle, first, one_request
from hvdcore.engine.messages import DATA_KINDS, Meta, Request, duplicate_name_error

__all__ = ["first", "submit", "submit_control", "single", "allreduce", "batch_steady", "wait",
           "blocking", "poll", "check_names", "duplicate_name_error", "reject"]

Item = tuple[Meta, Any, "np.ndarray | None"]
"""(meta, input buffer or None for control requests, caller's output array or None)."""


def _pending(names: dict, key: tuple[int, str]) -> Handle | None:
    """The unfinished handle that holds ``key`` in an engine's name table, if any (the table
    keeps weak references: a finished result must not stay alive there)."""
    ref = names.get(key)
    h = ref() if ref is not None else None
    return h if h is not None and not h.done() else None


def check_names(engine: Any, metas: Sequence[Meta]) -> None:
    """Raise :func:`duplicate_name_error` if a data request of this rank still being
    processed has one of ``metas``' explicit names, or if two of ``metas`` share one (Horovod
    raises at submission too).

    Automatic names are unique by construction and are not tracked.
    """
    names = engine.names
    seen: set[tuple[int, str]] | None = set() if len(metas) > 1 else None
    for meta in metas:
        name = meta.name
        if "#" in name:
            continue
        key = (meta.set_id, name)
        h = _pending(names, key)
        if h is not None:
            raise duplicate_name_error(engine.rank, meta, h.description)
        if seen is not None:
            if key in seen and meta.kind in DATA_KINDS:
                raise duplicate_name_error(engine.rank, meta, "an earlier tensor of this call")
            seen.add(key)


def _claim_names(engine: Any, reqs: list[Request], handle: Handle) -> None:
    check_names(engine, [r.meta for r in reqs])
    names = engine.names
    ref = weakref.ref(handle)
    for r in reqs:
        meta = r.meta
        if meta.kind in DATA_KINDS and "#" not in meta.name:
            names[(meta.set_id, meta.name)] = ref


def submit(engine: Any, items: Sequence[Item], finalize: Callable[[list[Any]], Any],
           description: str) -> Handle:
    """Enqueue one request per item, all completing one handle (``finalize`` maps the list
    of per-item results to what ``synchronize`` returns). Raises ArgumentError, before
    enqueuing anything, if an explicit name is still in use by this rank."""
    handle = Handle(len(items), finalize, description)
    reqs = [Request(meta, t, o, handle, i) if not meta.device else
            # a binding's DeviceBuffer: the backend gets the framework tensor itself
            Request(meta, t.tensor, None if o is None else o.tensor,  # type: ignore[attr-defined]
                    handle, i)
            for i, (meta, t, o) in enumerate(items)]
    if reqs:
        _claim_names(engine, reqs, handle)
        engine.enqueue(reqs)
    return handle


def _error_type(exc: BaseException) -> str:
    """The :mod:`hvdcore.errors` class the peers raise for ``exc``."""
    if isinstance(exc, errors.HvdcoreError):
        return type(exc).__name__ if hasattr(errors, type(exc).__name__) else "HvdcoreError"
    if isinstance(exc, ValueError):
        return "ArgumentError"
    if isinstance(exc, TypeError):
        return "UnsupportedError"
    return "HvdcoreError"


def reject(engine: Any, set_id: int, kind: str, names: Sequence[str],
           exc: BaseException) -> NoReturn:
    """This rank's call named ``names`` failed its checks with ``exc``: announce the
    rejection so that the coordinator fails the matching calls of the other ranks with the
    reason (instead of leaving them waiting for this rank), wait for that, and raise ``exc``.

    A name this rank still uses raises the duplicate-name error instead: the pending request
    owns the name. If the job fails while waiting (stall, dead rank), that error is raised.
    """
    metas = [Meta(set_id, n, kind, error=str(exc), error_type=_error_type(exc)) for n in names]
    handle = submit(  # (raises the duplicate-name error, as any submission)
        engine, [(m, None, None) for m in metas], first, f"rejected {kind}")
    try:
        wait(engine, handle)
    except (errors.StallError, errors.RankFailedError, errors.ShutdownError) as fatal:
        raise fatal from exc
    except Exception:  # noqa: BLE001 - the expected outcome: the rejection reached every rank
        pass
    raise exc


def submit_control(engine: Any, kind: str, name: str, set_id: int = 0, **meta: Any) -> Handle:
    """Enqueue a control request (barrier, join, shutdown, process-set changes)."""
    return submit(engine, [(Meta(set_id, name, kind, **meta), None, None)], first, kind)


def single(engine: Any, meta: Meta, arr: np.ndarray, out: np.ndarray | None,
           enqueue: bool = True) -> Request:
    """The request of one allreduce (enqueued unless ``enqueue`` is False; its name checked
    (:func:`check_names`) and held while it is pending)."""
    if enqueue:
        _check_name(engine, meta)
        return _enqueued(engine, meta, arr, out)
    return _request(meta, arr, out)


def _request(meta: Meta, arr: Any, out: Any) -> Request:
    if meta.device:  # a binding's DeviceBuffer: the backend gets the framework tensor itself
        arr, out = arr.tensor, (None if out is None else out.tensor)
    return one_request(meta, arr, out)


def _check_name(engine: Any, meta: Meta) -> None:
    """:func:`check_names` for one request (the common case, a free name, without a call)."""
    names = engine.names
    if names and "#" not in meta.name:
        h = _pending(names, (meta.set_id, meta.name))
        if h is not None:
            raise duplicate_name_error(engine.rank, meta, h.description)


def _enqueued(engine: Any, meta: Meta, arr: Any, out: Any) -> Request:
    """Enqueue the request of an allreduce whose name was checked; it holds the name."""
    req = _request(meta, arr, out)
    _track_name(engine, meta, req.handle)
    engine.enqueue([req])
    return req


def allreduce(engine: Any, meta: Meta, arr: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """A blocking allreduce: driven on this thread, through the engine's fast path when the
    ranks reduced this tensor before (see ``HVDCORE_CACHE_CAPACITY``); when its last call took
    that path with the same request, through the engine's steady path (``HVDCORE_HOTPATH``).
    Its name is checked once (a name this rank still uses raises ArgumentError); the steady
    path needs no check (it runs only on an idle engine, where no name is in use)."""
    got = engine.steady_allreduce(meta, arr, out)
    if got is not None:
        return got
    _check_name(engine, meta)
    if not engine.begin_drive():
        return engine.drive(_enqueued(engine, meta, arr, out).handle)
    try:
        # (held before the submission: with thread progress the engine thread is not woken)
        if meta.device:  # a binding's DeviceBuffer: the plane gets the framework tensor
            dev: Any = arr  # (typed as the arrays they stand in for)
            dev_out: Any = out
            got = engine.fast_allreduce(meta, dev.tensor, None if out is None else dev_out.tensor,
                                        lambda: [_request(meta, arr, out)])
        else:
            got = engine.fast_allreduce(meta, arr, out, lambda: [_request(meta, arr, out)])
        if got is None:
            handle = _enqueued(engine, meta, arr, out).handle
        elif isinstance(got, Handle):
            handle = got  # a pending hit of the round: it holds the name too
            _track_name(engine, meta, handle)
        else:
            return got
        engine.drive_until(handle)
    finally:
        engine.end_drive()
    return handle.wait()


def batch_steady(engine: Any, metas: list[Meta], arrays: Sequence[Any],
                 description: str) -> Handle | None:
    """A batch of in-place allreduces (``arrays[i]`` under ``metas[i]``, the API layer's
    remembered checks) through the engine's steady path for batches
    (:meth:`~hvdcore.engine.rounds.RoundScheduler.steady_batch`): a finished handle (the
    arrays hold the results); or the handle of its requests, pending hits of the round, when a
    peer has not offered them yet; or None, nothing done (submit them as usual). Its
    ``synchronize`` returns the list of arrays, as :func:`submit`'s with ``list`` does."""

    def make() -> list[Request]:
        handle = Handle(len(metas), list, description)
        return [Request(meta, arr, arr, handle, i)
                for i, (meta, arr) in enumerate(zip(metas, arrays, strict=True))]

    got = engine.steady_batch(metas, arrays, make)
    if got is None:
        return None
    if got is True:
        return Handle.finished(list(arrays), description)
    names, ref = engine.names, weakref.ref(got)
    for meta in metas:  # (the engine was idle: none of these names was in use)
        if "#" not in meta.name:
            names[(meta.set_id, meta.name)] = ref
    return got


def allreduce_async(engine: Any, meta: Meta, arr: np.ndarray, out: np.ndarray | None) -> Handle:
    """Start an allreduce. When the calls before it were each waited for before the next
    (:class:`~hvdcore.engine.lone.LoneCalls`: queued calls get fused) and it is no larger
    than ``engine.inline_async_bytes`` (any size with caller progress, where no engine thread
    runs requests before a caller drives the engine; HVDCORE_ASYNC_INLINE_BYTES with thread
    progress, where waking the engine thread costs more than a small call), a tensor whose
    blocking call would take the steady path takes it now, if every rank offers it at once:
    the handle is then already done; or its request is a pending hit of the round, which
    ``synchronize`` (or the engine thread) drives. It never waits for a peer. Otherwise the
    request is enqueued."""
    if not meta.device:
        lone = engine.lone  # (every host call counts for the pattern, whatever its size)
        got = (engine.steady_start(meta, arr, out)
               if lone.submitting() and arr.nbytes <= engine.inline_async_bytes else None)
        if type(got) is Handle:
            _track_name(engine, meta, got)
        elif got is not None:
            got = Handle.finished(got, f"allreduce '{meta.name}'")
        else:
            got = single(engine, meta, arr, out).handle
        lone.submitted(got)
        return got
    return single(engine, meta, arr, out).handle


def _track_name(engine: Any, meta: Meta, handle: Handle) -> None:
    """Hold ``meta``'s explicit name while ``handle`` is pending (a reuse raises)."""
    if "#" not in meta.name:
        engine.names[(meta.set_id, meta.name)] = weakref.ref(handle)


def wait(engine: Any | None, handle: Handle) -> Any:
    """Wait for ``handle`` (driving ``engine`` when free) and return its result.

    When the queue holds ``handle``'s cached host allreduces and nothing else is pending
    (``allreduce_async`` then ``synchronize``; a step's gradients), they skip the engine
    cycle (:meth:`~hvdcore.engine.loop.Engine.fast_queued`)."""
    if engine is None:
        return handle.wait()
    engine.lone.waiting(handle)
    if handle.done():
        return handle.wait()
    if not engine.progress.queue or not engine.begin_drive():
        return engine.drive(handle)
    try:
        engine.fast_queued(handle)
        engine.drive_until(handle)
    finally:
        engine.end_drive()
    return handle.wait()


def blocking(engine: Any | None, start: Callable[[], Handle]) -> Any:
    """Run ``start()`` (an ``*_async`` call) and wait for its handle, holding the engine from
    before the submission so that this thread, not the engine thread, executes it."""
    if engine is None:
        return start().wait()
    if not engine.begin_drive():
        return engine.drive(start())
    try:
        handle = start()
        engine.fast_queued(handle)
        engine.drive_until(handle)
    finally:
        engine.end_drive()
    return handle.wait()


def poll(engine: Any | None, handle: Handle) -> bool:
    """True when ``handle`` is done; else run one engine cycle first (with caller progress
    nobody else may be moving the engine)."""
    if not handle.done() and engine is not None:
        engine.step_once()
    return handle.done()
