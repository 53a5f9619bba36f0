"""Running responses on this rank: a table from response kind to handler.

The dispatcher owns the requests this rank has announced and not yet seen answered
(``inflight``, keyed by process set and name). Data responses go to the
:class:`~hvdcore.engine.executor.Executor` of their data plane (``Response.device``: "" is the
host/MPI one, others are registered by bindings); control responses (errors, stall warnings, aborts,
join, shutdown, process-set changes) are handled here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hvdcore import errors
from hvdcore.engine.autotune import TunedParams
from hvdcore.engine.cache import ResponseCache
from hvdcore.engine.executor import Executor
from hvdcore.engine.messages import (
    ABORT,
    ADD_SET,
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BARRIER,
    BROADCAST,
    ERROR,
    JOIN,
    PARAMS,
    REDUCESCATTER,
    REMOVE_SET,
    SHUTDOWN,
    STALL_WARNING,
    Request,
    Response,
    SetState,
    duplicate_name_error,
)
from hvdcore.engine.progress import RunState
from hvdcore.engine.thread_stacks import where_threads_are

log = logging.getLogger("hvdcore")


class Dispatcher:
    """Executes responses in the order the engine hands them over."""

    def __init__(self, rank: int, executor: Executor, sets: dict[int, SetState],
                 cache: ResponseCache, plane: Any, run: RunState,
                 abort: Callable[[BaseException], None]) -> None:
        self.rank = rank
        self.executor = executor
        # data plane name -> its executor ("" = the host data plane the engine started with)
        self.executors: dict[str, Executor] = {"": executor}
        self.sets = sets
        self.cache = cache
        self.plane = plane
        self.run = run
        self._abort = abort
        #: Applies the autotuner's parameters on this rank (see autotune.install).
        self.use_params: Callable[[TunedParams], None] | None = None
        self.inflight: dict[tuple[int, str], Request] = {}
        # Requests whose data call raised after they left ``inflight`` (see interrupted)
        self._interrupted: list[Request] = []
        self._handlers: dict[str, Callable[[Response, bool], None]] = {
            ALLREDUCE: self._allreduce, ERROR: self._error, STALL_WARNING: self._stall_warning,
            ABORT: self._abort_job, JOIN: self._join, SHUTDOWN: self._shutdown,
            ADD_SET: self._add_set, REMOVE_SET: self._remove_set, PARAMS: self._params,
        }
        data = {ALLGATHER: Executor.allgather, BROADCAST: Executor.broadcast,
                ALLTOALL: Executor.alltoall, REDUCESCATTER: Executor.reducescatter,
                BARRIER: Executor.barrier}
        for kind, run_one in data.items():
            self._handlers[kind] = self._data(run_one)

    def add_executor(self, device: str, executor: Executor) -> None:
        """Run responses whose ``device`` is ``device`` on ``executor``; its backend gets a
        group for every process set known now (collective: every rank calls this in the
        same order)."""
        for sid in sorted(self.sets):
            executor.backend.add_set(self.sets[sid])
        self.executors[device] = executor

    # -- the requests awaiting a response ------------------------------------------------------

    def claim(self, req: Request) -> bool:
        """Record an announced request; False (and the request failed) if its name is taken."""
        key = (req.meta.set_id, req.meta.name)
        held = self.inflight.get(key)
        if held is not None:  # (submission checks names; this catches what it cannot see)
            req.handle.fail(duplicate_name_error(self.rank, req.meta, held.handle.description))
            return False
        self.inflight[key] = req
        return True

    def take_all(self) -> list[Request]:
        """Forget every pending request (for a fatal error); returns them."""
        pending = [*self._interrupted, *self.inflight.values()]
        self._interrupted = []
        self.inflight.clear()
        return pending

    def data_failed(self, reqs: list[Request | None], exc: BaseException, now: bool) -> None:
        """The one error policy after a data call that raised (its requests ``reqs`` already
        left ``inflight``), for every route. ``now``: the caller's thread made the call
        outside the engine cycle (a route of :mod:`hvdcore.engine.pipeline`): its requests
        get ``exc`` at once and the caller goes on with its other responses. Otherwise (the
        cycle, or an exception that is not an ``Exception``): they are kept
        (:meth:`interrupted`) and ``exc`` is raised again, for whoever runs the responses to
        raise after the rest (:meth:`run_all`) and the engine's step to fail them
        (:meth:`fail_interrupted`, ``Engine._step``). Either way the engine goes on."""
        if now and isinstance(exc, Exception):
            for req in reqs:
                if req is not None:
                    req.handle.fail(exc)
            return
        self.interrupted(reqs)
        raise exc

    def interrupted(self, reqs: list[Request | None]) -> None:
        """Keep the requests of a data call that raised (they already left ``inflight``),
        for whoever handles the error to fail them (:meth:`fail_interrupted`,
        :meth:`take_all`): otherwise their callers would get no error at all."""
        self._interrupted.extend(r for r in reqs if r is not None)

    def fail_interrupted(self, exc: BaseException) -> bool:
        """Fail the requests kept by :meth:`interrupted` with ``exc`` (their data call's
        error), forgotten here; False when there were none (``exc`` is not a data call's)."""
        reqs, self._interrupted = self._interrupted, []
        if reqs and isinstance(exc, Exception):
            log.warning("rank %d: the data call of %s failed (%s: %s); its requests get the "
                        "error", self.rank, ", ".join(repr(r.meta.name) for r in reqs),
                        type(exc).__name__, exc)
        for req in reqs:
            req.handle.fail(exc)
        return bool(reqs)

    def _take(self, resp: Response, name: str) -> Request | None:
        return self.inflight.pop((resp.set_id, name), None)

    # -- execution --------------------------------------------------------------------------

    def run_one(self, resp: Response, cached: bool = False) -> None:
        """Execute one response (``cached``: it came from the response cache)."""
        handler = self._handlers.get(resp.kind)
        if handler is None:
            log.warning("rank %d: ignoring a response of unknown kind %r", self.rank, resp.kind)
            return
        handler(resp, cached)

    def run_all(self, responses: list[Response], cached: bool = False) -> None:
        """Execute responses in order (``cached``: a round's, from the response cache),
        stopping early once the engine stops or fails. Every response runs, as on the peers,
        even after one raised: the first error is raised after the rest (the requests of the
        call that raised are kept: :meth:`data_failed`)."""
        run = self.run
        error: Exception | None = None
        for resp in responses:
            try:
                self.run_one(resp, cached)
            except Exception as exc:  # noqa: BLE001 - re-raised below
                error = error or exc
            if run.stopped or run.fatal is not None:
                break
        if error is not None:
            raise error

    def _allreduce(self, resp: Response, cached: bool) -> None:
        pset = self.sets.get(resp.set_id)
        if pset is None or pset.comm is None:
            return  # a response for a set this rank is not in
        inflight = self.inflight
        reqs = [inflight.pop((resp.set_id, n), None) for n in resp.names]
        ex = self.executor if not resp.device else self.executors[resp.device]
        try:
            ex.allreduce(resp, reqs, pset)
        except BaseException as exc:
            self.data_failed(reqs, exc, False)
        if not cached:
            self.cache.insert(resp)

    def _data(self, run_one: Callable[[Executor, Response, Request, SetState], None]
              ) -> Callable[[Response, bool], None]:
        def handle(resp: Response, _cached: bool) -> None:
            pset = self.sets.get(resp.set_id)
            if pset is None or pset.comm is None:
                return  # a response for a set this rank is not in
            req = self._take(resp, resp.names[0])
            if req is not None:
                try:
                    run_one(self.executors[resp.device], resp, req, pset)
                except BaseException as exc:
                    self.data_failed([req], exc, False)
        return handle

    def _error(self, resp: Response, _cached: bool) -> None:
        req = self._take(resp, resp.names[0])
        if req is not None:
            cls = getattr(errors, resp.error_type, errors.HvdcoreError)
            req.handle.fail(cls(f"rank {self.rank}: {resp.message}"))

    def _stall_warning(self, resp: Response, _cached: bool) -> None:
        mine = dict(resp.per_rank).get(self.rank)
        extra = ""
        if mine:
            extra = f"\n  This rank ({self.rank}) has not submitted: {', '.join(mine)}"
            where = where_threads_are("  ")
            if where:
                extra += f"\n  Where this rank's threads are instead:\n{where}"
        log.warning("%s%s", resp.message, extra)

    def _abort_job(self, resp: Response, _cached: bool) -> None:
        err = getattr(errors, resp.error_type, errors.HvdcoreError)(
            f"rank {self.rank}: {resp.message}")
        log.error("%s", err)
        self._abort(err)

    def _params(self, resp: Response, _cached: bool) -> None:
        if self.use_params is not None:
            self.use_params(TunedParams.from_wire(resp.per_rank))

    def _join(self, resp: Response, _cached: bool) -> None:
        req = self._take(resp, "join")
        self.cache.enable()
        if req is not None:
            req.handle.set_part(req.part, resp.value)

    def _shutdown(self, resp: Response, _cached: bool) -> None:
        req = self._take(resp, resp.names[0])
        self.run.stopped = True
        leftover = errors.ShutdownError(
            f"rank {self.rank}: hvdcore was shut down while this request was pending")
        for other in self.inflight.values():
            other.handle.fail(leftover)
        self.inflight.clear()
        if req is not None:
            req.handle.set_part(req.part, None)

    def _add_set(self, resp: Response, _cached: bool) -> None:
        req = self._take(resp, resp.names[0])
        ranks = tuple(resp.ranks or ())
        comm = self.plane.split(self.sets[0].comm, self.rank in ranks, self.rank)
        state = self.sets[resp.value] = SetState(resp.value, ranks, comm)
        for ex in self.executors.values():
            ex.backend.add_set(state)
        if req is not None:
            req.handle.set_part(req.part, resp.value)

    def _remove_set(self, resp: Response, _cached: bool) -> None:
        req = self._take(resp, resp.names[0])
        state = self.sets.pop(resp.value, None)
        if state is not None:
            for ex in self.executors.values():
                ex.backend.remove_set(state)
            if state.comm is not None:
                self.plane.free(state.comm)
        if req is not None:
            req.handle.set_part(req.part, True)
