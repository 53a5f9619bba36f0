"""The engine of one rank: one cycle = announce, negotiate, execute, complete.

:class:`Engine` puts the parts together and defines the cycle (:meth:`Engine._step`):

- :class:`~hvdcore.engine.progress.Progress`: the submission queue and who runs cycles (the
  engine thread, or a caller that waits for a result);
- :class:`~hvdcore.engine.control.ControlChannel`: announcements to the coordinator (world
  rank 0) and its ordered response lists back;
- :class:`~hvdcore.engine.rounds.RoundScheduler`: response-cache hits, their rounds, and the
  one order in which lists and rounds run;
- :class:`~hvdcore.engine.pipeline.Pipeline` and its routes (with
  :class:`~hvdcore.engine.steady_batch.SteadyBatches`, the batch route): the same stages for
  cached tensors, walked by a caller itself when the engine is idle;
- :class:`~hvdcore.engine.dispatch.Dispatcher`: each response to its handler; data responses
  to the :class:`~hvdcore.engine.executor.Executor`, which packs fusion buffers and calls the
  data-plane backend.

Everything between ranks goes through the two protocols of :mod:`hvdcore.backends.base`: the
engine itself imports neither MPI nor a framework.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from hvdcore import errors
from hvdcore.engine import autotune
from hvdcore.engine.cache import ResponseCache
from hvdcore.engine.control import ControlChannel
from hvdcore.engine.coordinator import Coordinator
from hvdcore.engine.dispatch import Dispatcher
from hvdcore.engine.executor import Executor
from hvdcore.engine.handle import Handle
from hvdcore.engine.lone import LoneCalls
from hvdcore.engine.messages import ABORT, STALL_WARNING, Meta, Request, SetState
from hvdcore.engine.pipeline import Pipeline
from hvdcore.engine.progress import Progress, RunState
from hvdcore.engine.rounds import RoundScheduler
from hvdcore.engine.steady_batch import SteadyBatches
from hvdcore.engine.timeline import Timeline

__all__ = ["Engine"]

log = logging.getLogger("hvdcore")

_FATAL_GRACE_S = 5.0


class Engine:
    """Background communication engine of one rank.

    ``plane``: the :class:`~hvdcore.backends.base.ControlPlane`; ``backend``: the data plane;
    ``sets``: the process sets known at init (set 0 is the world).
    """

    def __init__(self, plane: Any, cfg: Any, backend: Any, sets: dict[int, SetState],
                 caller_progress: bool = False, abort_on_fatal: bool = True) -> None:
        self.rank: int = plane.rank
        # False in an elastic job: a fatal error ends this engine, not the process (the
        # elastic layer re-forms the job; see hvdcore.elastic)
        self.abort_on_fatal = abort_on_fatal
        # explicit names of this rank's data requests -> a weak reference to their handle
        # (duplicate check; weak, so that a finished request's result is not kept alive here:
        # that pinned the result pool's blocks, and every later result was fresh memory)
        self.names: dict[tuple[int, str], Any] = {}
        self.size: int = plane.size
        self.cfg = cfg
        self.plane = plane
        self.sets = sets
        self.run = RunState()
        # what a framework binding keeps for this engine's life (the torch binding's data
        # planes, by the binding's name): gone with the engine, so a new init() starts clean
        self.bindings: dict[str, Any] = {}
        self.timeline: Timeline | None = None
        coordinator = None
        if self.rank == 0:
            coordinator = Coordinator(
                world_size=self.size,
                sets={sid: s.ranks for sid, s in sets.items()},
                fusion_threshold=cfg.fusion_threshold,
                cycle_time_s=cfg.cycle_time / 1000.0,
                stall_check_s=cfg.stall_check_time_seconds,
                stall_shutdown_s=cfg.stall_shutdown_time_seconds,
                stall_disabled=cfg.stall_check_disable,
            )
        self.coordinator = coordinator
        capacity = cfg.cache_capacity
        self.cache = ResponseCache(capacity)
        self.executor = Executor(backend, self.rank)
        self.control = ControlChannel(plane, coordinator)
        self.dispatcher = Dispatcher(self.rank, self.executor, sets, self.cache, plane,
                                     self.run, self._fail_everything)
        self.rounds = RoundScheduler(capacity, cfg, plane, self.control, self.dispatcher,
                                     self.cache, self.run)
        self.progress = Progress(self.run, self._step, self._busy, self._crashed,
                                 functools.partial(_abort_after_grace, self), caller_progress,
                                 self.rank)
        self.rounds.bind(self.progress, self.executor)
        autotune.install(cfg, coordinator, self.rounds, self.dispatcher, backend)
        self.pipeline = Pipeline(self.rounds, self.cache, self.dispatcher.executors, sets[0])
        self.batches = SteadyBatches(self.pipeline, self.rounds, self.cache, self.progress,
                                     self.executor, sets[0])
        #: A repeated blocking allreduce of a cached tensor on an idle engine, in one call
        #: (:meth:`Pipeline.steady`, the steady routes, run by :meth:`Progress.run_alone`:
        #: this thread drives the engine for it): the result, or None when it does not apply
        #: (then take :meth:`fast_allreduce` or the queue). Bound here so that a call enters
        #: each module once.
        self.steady_allreduce: Callable[[Meta, Any, Any], Any] = functools.partial(
            self.progress.run_alone, self.pipeline.steady, True)
        #: The same for an asynchronous call (a pending hit's handle is returned, not
        #: driven), for tensors of at most ``inline_async_bytes`` (HVDCORE_ASYNC_INLINE_BYTES;
        #: any size with caller progress, where no engine thread would run it sooner).
        self.steady_start: Callable[[Meta, Any, Any], Any] = functools.partial(
            self.progress.run_alone, self.pipeline.steady, False)
        self.inline_async_bytes: int = (sys.maxsize if caller_progress
                                        else cfg.async_inline_bytes)
        #: A recurring batch of in-place host allreduces (a training step's gradients) in one
        #: call (:meth:`SteadyBatches.steady_batch`; see :func:`requests.batch_steady`).
        self.steady_batch: Callable[..., Any] = self.batches.steady_batch
        #: A blocking allreduce of a cached tensor (any data plane) on an idle engine, without
        #: the queue (:meth:`Pipeline.blocking`; the caller drives the engine).
        self.fast_allreduce: Callable[..., Any] = self.pipeline.blocking
        self.lone = LoneCalls()  # when an async call may take it (requests.allreduce_async)
        # The blocking-call entry points are the Progress methods themselves (no extra call
        # layer on the hot path); see Progress for what each does.
        self.begin_drive: Callable[[], bool] = self.progress.begin_drive
        self.end_drive: Callable[[], None] = self.progress.end_drive
        self.drive_until: Callable[[Any], None] = self.progress.drive_until
        self.drive: Callable[[Any], Any] = self.progress.drive
        self.step_once: Callable[[], None] = self.progress.step_once
        self.progress.start()

    # -- user-thread side ----------------------------------------------------------------

    def enqueue(self, reqs: list[Request]) -> None:
        """Hand requests to the engine (raises if the engine has failed or stopped)."""
        self.progress.submit(reqs, self.timeline.now_us() if self.timeline else 0.0)

    def fast_queued(self, handle: Any) -> bool:
        """Run the queue through a fast path when it holds ``handle``'s requests and nothing
        else is pending: a lone cached allreduce (``allreduce_async`` + ``synchronize``) then
        costs what the blocking call does, and several cached host allreduces (a step's
        gradients, a grouped call) skip the cycle's bookkeeping. The caller drives the
        engine (:meth:`begin_drive`).

        True when the requests left the queue (done, or now ordinary pending hits: drive
        them); False when nothing changed.
        """
        progress = self.progress
        if not progress.queue or self.timeline is not None:
            return False
        reqs = progress.take_for(handle)
        if reqs is None:
            return False
        if len(reqs) == 1:
            req = reqs[0]
            # With the queue empty, the route's own checks decide (idle engine, a hit); a data
            # call that raises fails the request (the pipeline's error policy).
            got = self.pipeline.blocking(req.meta, req.tensor, req.out, lambda: reqs)
            if got is not None:
                if not isinstance(got, Handle):
                    req.handle.set_part(0, got)
                return True
        elif self.pipeline.queued(reqs):  # (each response on its plane)
            return True
        progress.requeue(reqs)
        return False

    def register_backend(self, device: str, backend: Any) -> None:
        """Add a data plane: requests whose ``Meta.device`` is ``device`` run on ``backend``.

        Collective: every rank registers the same devices in the same order, before any
        request for them is submitted (a binding does it in its ``init()``).
        """
        if not device or device in self.dispatcher.executors:
            raise errors.ArgumentError(f"data plane {device!r} is already registered")
        ex = Executor(backend, self.rank)
        ex.timeline = self.timeline
        with self.progress.hold():
            self.dispatcher.add_executor(device, ex)

    def unregister_backend(self, device: str) -> None:
        """Remove a data plane added by :meth:`register_backend` (its pending requests fail
        when they are executed)."""
        with self.progress.hold():
            ex = self.dispatcher.executors.pop(device, None)
        if ex is not None:
            for sid in sorted(self.sets):
                ex.backend.remove_set(self.sets[sid])

    @property
    def devices(self) -> list[str]:
        """The registered data planes ("" is the host one)."""
        return list(self.dispatcher.executors)

    def set_timeline(self, timeline: Timeline | None) -> Timeline | None:
        """Install (or remove, with None) the timeline; returns the previous one."""
        old, self.timeline = self.timeline, timeline
        for ex in self.dispatcher.executors.values():
            ex.timeline = timeline
        return old

    def stop(self, timeout: float | None = None) -> None:
        """Wait for the engine thread to end (after a SHUTDOWN response or a fatal error)."""
        self.progress.join(timeout)

    def close(self) -> None:
        """Release the communicators of the process sets and of the control plane."""
        for comm in [*(s.comm for s in self.sets.values() if s.comm is not None)]:
            try:
                self.plane.free(comm)
            except Exception as exc:  # noqa: BLE001 - freeing during teardown is best effort
                log.debug("freeing a communicator failed: %s", exc)
        try:
            self.plane.close()
        except Exception as exc:  # noqa: BLE001 - as above
            log.debug("closing the control plane failed: %s", exc)

    @property
    def alive(self) -> bool:
        """True while the engine thread runs."""
        return self.progress.alive

    @property
    def fatal(self) -> BaseException | None:
        """The error that ended the engine, if one did."""
        return self.run.fatal

    @property
    def caller_progress(self) -> bool:
        """True when waiting callers, not the engine thread, run cycles (HVDCORE_PROGRESS)."""
        return self.progress.caller_progress

    @property
    def rounds_posted(self) -> int:
        """Cache rounds this rank has posted (statistics for tests and benchmarks)."""
        return self.rounds.posted

    @property
    def fast_count(self) -> int:
        """Blocking allreduces completed by the fast path (statistics)."""
        return self.rounds.fast_count

    # -- one cycle ----------------------------------------------------------------------------

    def _busy(self) -> bool:
        return (bool(self.dispatcher.inflight) or self.rounds.busy()
                or bool(self.coordinator and self.coordinator.busy()))

    def _step(self) -> bool:
        """One engine cycle (announce, negotiate/receive, execute); True if anything moved.

        Runs on the engine thread, or on a caller's thread that drives the engine while it
        waits for a blocking call; :class:`Progress` keeps the two apart.
        """
        progressed = False
        try:
            if self.progress.queue:  # unlocked peek: only this cycle's thread empties it
                self._announce(self.progress.take())
                progressed = True
            if self.coordinator is not None:
                progressed |= self._coordinate()
            else:
                progressed |= self._receive()
            progressed |= self.rounds.advance()
            self.control.flush()
        except BaseException as exc:
            # A data call's error goes to its requests and the engine goes on, on any thread
            # (Horovod's PerformOperation); others reach the caller, or are fatal.
            if not self.dispatcher.fail_interrupted(exc) or not isinstance(exc, Exception):
                raise
            return True
        return progressed

    def _announce(self, batch: list[Request]) -> None:
        metas: list[Meta] = []
        now = time.perf_counter()
        claim, classify = self.dispatcher.claim, self.rounds.classify
        for req in batch:
            if claim(req) and not classify(req, now):
                metas.append(req.meta)
        if metas:
            self.control.announce(metas)

    def _coordinate(self) -> bool:
        """Rank 0: collect announcements, decide, and send the decisions to every rank."""
        coord = self.coordinator
        assert coord is not None
        got = self.control.collect()
        responses = coord.poll()
        if not responses:
            return got
        if self.timeline is not None and self.timeline.mark_cycles:
            self.timeline.mark("CYCLE", responses=len(responses))
        # Stall warnings and aborts run at once; everything else in the fenced order.
        oob = [r for r in responses if r.kind == STALL_WARNING or r.kind == ABORT]
        ordered = [r for r in responses if r.kind != STALL_WARNING and r.kind != ABORT]
        fence = self.rounds.fence(coord.fence_floor)
        self.control.publish(fence, ordered, oob)
        if ordered:
            self.rounds.add_list(fence, ordered, sent=True)
        self.dispatcher.run_all(oob)
        return True

    def _receive(self) -> bool:
        """Ranks other than 0: queue the lists rank 0 sent; run their urgent parts at once."""
        got = False
        run = self.run
        while not run.stopped:
            delivery = self.control.receive()
            if delivery is None:
                break
            fence, ordered, oob = delivery
            if ordered:
                self.rounds.add_list(fence, ordered)
            self.dispatcher.run_all(oob)
            got = True
        return got

    # -- failure ------------------------------------------------------------------------------

    def _fail_everything(self, err: BaseException) -> None:
        self.run.fatal = err
        pending = self.progress.fail_queued() + self.dispatcher.take_all()
        self.rounds.drop_hits()  # (their requests are in flight: failed above)
        for req in pending:
            req.handle.fail(err)

    def _crashed(self, exc: BaseException) -> None:
        err = errors.RankFailedError(
            f"rank {self.rank}: hvdcore engine failed: {type(exc).__name__}: {exc}. "
            "The job cannot continue; it will be aborted.")
        err.__cause__ = exc
        if self.abort_on_fatal or self.run.fatal is None:
            # (in an elastic job that already ended this generation, the transport's error
            # is the expected echo of the failure: no traceback)
            log.error("%s", err, exc_info=exc if self.abort_on_fatal else None)
        self._fail_everything(err)

    def fail(self, err: BaseException) -> None:
        """End this engine from outside its cycles (a peer's death seen by the liveness
        watchdog in an elastic job): every pending and later request raises ``err``."""
        if self.run.fatal is None:
            self._fail_everything(err)


def _abort_after_grace(engine: Engine) -> None:
    """Give the user thread time to raise (and abort with its traceback), then abort (not in
    an elastic job: there the engine ends and the process goes on)."""
    if not engine.abort_on_fatal:
        return
    deadline = time.monotonic() + _FATAL_GRACE_S
    while time.monotonic() < deadline:
        engine.control.flush()
        time.sleep(0.05)
    log.error("rank %d: aborting the MPI job after a fatal hvdcore error: %s",
              engine.rank, engine.run.fatal)
    try:
        if engine.timeline is not None:
            engine.timeline.close()
    finally:
        sys.stderr.flush()
        engine.plane.abort(1)
