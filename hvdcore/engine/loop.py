"""The engine of one rank: announce, negotiate, execute, complete.

User threads call :meth:`Engine.enqueue`; engine cycles (:meth:`Engine._step`) announce new
requests to the coordinator (world rank 0), which answers with an ordered list of responses that
every rank executes. One lock lets one thread at a time run cycles: either the background engine
thread or a user thread that waits for a result and *drives* the engine itself
(:meth:`Engine.drive`, no thread hand-off). With thread progress every submission wakes the
engine thread (an idle one sleeps on a condition variable, so a lone request starts at once);
with caller progress submissions only queue until someone waits, and the engine thread steps in
only after ``_CALLER_GRACE_S`` without a driver (see ``HVDCORE_PROGRESS``).
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from mpi4py import MPI

from hvdcore import errors
from hvdcore.engine.coordinator import Coordinator
from hvdcore.engine.executor import Executor, Request, SetState
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
    REDUCESCATTER,
    REMOVE_SET,
    SHUTDOWN,
    STALL_WARNING,
    Meta,
    Response,
)
from hvdcore.engine.timeline import Timeline

log = logging.getLogger("hvdcore")

TAG_ANNOUNCE = 11
TAG_RESPONSE = 12
_IDLE_WAIT_S = 0.05
_BUSY_S = 50e-6
_DRIVER_YIELD_S = 20e-3
_DRIVER_SLEEP_S = 100e-6
_SPIN_S = 250e-6
_MAX_BACKOFF_S = 1e-3
_CALLER_GRACE_S = 0.5
_FATAL_GRACE_S = 5.0


class Engine:
    """Background communication engine of one rank."""

    def __init__(self, comm: Any, cfg: Any, backend: Any, sets: dict[int, SetState],
                 caller_progress: bool = False) -> None:
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.cfg = cfg
        self.ctrl = comm.Dup()
        self.sets = sets
        self.executor = Executor(backend, self.rank)
        self.coordinator: Coordinator | None = None
        if self.rank == 0:
            self.coordinator = Coordinator(
                world_size=self.size,
                sets={sid: s.ranks for sid, s in sets.items()},
                fusion_threshold=cfg.fusion_threshold,
                cycle_time_s=cfg.cycle_time / 1000.0,
                stall_check_s=cfg.stall_check_time_seconds,
                stall_shutdown_s=cfg.stall_shutdown_time_seconds,
                stall_disabled=cfg.stall_check_disable,
            )
        self._cv = threading.Condition()
        self._run_lock = threading.Lock()
        self._driver: int | None = None
        # Caller progress: submissions do not wake the engine thread; the thread that waits
        # for a handle drives the engine, and the engine thread takes over only after
        # _CALLER_GRACE_S without a driver.
        self.caller_progress = caller_progress
        self._last_drive = time.perf_counter()
        self._queue: list[Request] = []
        self._inflight: dict[tuple[int, str], Request] = {}
        self._sends: list[Any] = []
        self._stop = False
        self.fatal: BaseException | None = None
        self.timeline: Timeline | None = None
        self.on_set_added: Callable[[int, tuple[int, ...], Any], None] | None = None
        self._thread = threading.Thread(target=self._main, name="hvdcore-engine", daemon=True)
        self._thread.start()

    # -- user-thread side ----------------------------------------------------------------

    def enqueue(self, reqs: list[Request]) -> None:
        """Hand requests to the engine thread (raises if the engine has failed or stopped)."""
        if self.fatal is not None:
            raise self.fatal
        if self._stop:
            raise errors.ShutdownError(f"rank {self.rank}: hvdcore engine is shut down")
        now = self.timeline.now_us() if self.timeline else 0.0
        for r in reqs:
            r.t_submit = now
        with self._cv:
            self._queue.extend(reqs)
            if not self.caller_progress and self._driver != threading.get_ident():
                self._cv.notify()

    def set_timeline(self, timeline: Timeline | None) -> Timeline | None:
        """Install (or remove, with None) the timeline; returns the previous one."""
        old, self.timeline = self.timeline, timeline
        self.executor.timeline = timeline
        return old

    def stop(self, timeout: float | None = None) -> None:
        """Wait for the engine thread to end (after a SHUTDOWN response or a fatal error)."""
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        """True while the engine thread runs."""
        return self._thread.is_alive()

    # -- engine thread -------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # any failure must surface on every waiting caller
            err = errors.RankFailedError(
                f"rank {self.rank}: hvdcore engine failed: {type(exc).__name__}: {exc}. "
                "The job cannot continue; it will be aborted."
            )
            err.__cause__ = exc
            log.error("%s", err, exc_info=exc)
            self._fail_everything(err)
            self._abort_after_grace()

    def _busy(self) -> bool:
        return bool(self._inflight) or bool(self.coordinator and self.coordinator.busy())

    def _step(self) -> bool:
        """One engine cycle (announce, negotiate/receive, execute); True if anything moved.

        Runs on the engine thread, or on a caller's thread that drives the engine while it
        waits for a blocking call (see :meth:`drive`); ``_run_lock`` keeps the two apart.
        """
        with self._cv:
            batch, self._queue = self._queue, []
        progressed = False
        if batch:
            self._announce(batch)
            progressed = True
        if self.coordinator is not None:
            progressed |= self._coordinate()
        else:
            progressed |= self._receive()
        if self._sends:
            self._sends = [s for s in self._sends if not s[0].Test()]
        return progressed

    def begin_drive(self) -> bool:
        """Let the calling thread run engine cycles (for a blocking call); False if busy.

        A blocking call on an otherwise idle engine then needs no thread hand-off (each costs
        a futex wake-up plus a GIL transfer: tens of microseconds on small VMs). Requests the
        driver enqueues do not wake the engine thread. Pair with :meth:`end_drive`.
        """
        if self.fatal is not None or not self._run_lock.acquire(False):
            return False
        self._driver = threading.get_ident()
        return True

    def end_drive(self) -> None:
        """Give the engine back to its thread (and wake it: requests may still be pending)."""
        self._driver = None
        self._last_drive = time.perf_counter()
        self._run_lock.release()
        if not self.caller_progress and (self._queue or self._busy()):
            with self._cv:
                self._cv.notify()

    def drive_until(self, handle: Any) -> None:
        """Run cycles on the driving thread until ``handle`` is done (or the engine stops).

        While nothing moves (a peer is late) the driver polls with ``sched_yield`` (other
        runnable threads go first), and after 20 ms sleeps 0.1 ms between polls: the
        response to a late peer is noticed within about 0.1 ms without burning a core on
        long waits. The coordinator's stall checks run on the driver too, so a stall
        still ends in a warning and a shutdown.
        """
        last = time.perf_counter()
        while not handle.done() and not self._stop and self.fatal is None:
            if self._step():
                last = time.perf_counter()
                continue
            waited = time.perf_counter() - last
            if waited < _BUSY_S:
                continue  # a peer microseconds away: a syscall would only add latency
            if waited < _DRIVER_YIELD_S:
                # This thread has nothing else to do: poll, but let any other runnable
                # thread (an oversubscribed peer rank) have the CPU first.
                os.sched_yield()
            else:
                time.sleep(_DRIVER_SLEEP_S)

    def step_once(self) -> None:
        """Run one engine cycle on the calling thread if the engine is free (for ``poll``)."""
        if self.begin_drive():
            try:
                self._step()
            finally:
                self.end_drive()

    def drive(self, handle: Any) -> Any:
        """Wait for ``handle`` and return its result, driving the engine whenever it is free
        (another thread may be driving it now: then wait a little and try again)."""
        while not handle.done():
            if self.begin_drive():
                try:
                    self.drive_until(handle)
                finally:
                    self.end_drive()
                break
            if self._stop or self.fatal is not None:
                break
            handle.wait_done(_MAX_BACKOFF_S)
        return handle.wait()

    def _loop(self) -> None:
        last_progress = time.perf_counter()
        while not self._stop:
            with self._cv:
                # Idle: sleep until a request arrives. (Blocking calls drive the engine on
                # their own thread, so an idle engine thread need not spin for them.)
                if not self._queue and not self._busy():
                    self._cv.wait(_IDLE_WAIT_S)
                elif self.caller_progress and (
                        self._driver is not None
                        or time.perf_counter() - self._last_drive < _CALLER_GRACE_S):
                    self._cv.wait(_IDLE_WAIT_S)  # a caller drives, or soon will
                    continue
            if not self._run_lock.acquire(timeout=_IDLE_WAIT_S):
                continue  # a caller is driving the engine
            try:
                progressed = self._step()
            finally:
                self._run_lock.release()
            if self.fatal is not None:
                self._abort_after_grace()
                return
            now = time.perf_counter()
            if progressed:
                last_progress = now
                continue
            # Yield the CPU while a peer is probably microseconds away; after that, sleep in
            # proportion to the wait so far (bounded relative delay, little CPU taken from the
            # training thread when a peer is slow).
            waited = now - last_progress
            if waited < _SPIN_S:
                os.sched_yield()
            else:
                time.sleep(min(waited * 0.1, _MAX_BACKOFF_S))

    def _announce(self, batch: list[Request]) -> None:
        metas: list[Meta] = []
        for req in batch:
            key = (req.meta.set_id, req.meta.name)
            if key in self._inflight:
                req.handle.fail(errors.MismatchError(
                    f"rank {self.rank}: a {req.meta.kind} named '{req.meta.name}' is already "
                    "pending; give concurrent collectives distinct names or synchronize the "
                    "first one before submitting the second"))
                continue
            self._inflight[key] = req
            metas.append(req.meta)
        if not metas:
            return
        if self.coordinator is not None:
            self.coordinator.add(0, metas)
        else:
            self._send(pickle.dumps([m.wire() for m in metas], 5), 0, TAG_ANNOUNCE)

    def _send(self, payload: bytes, dest: int, tag: int) -> None:
        # Keep the payload alive until the non-blocking send completes.
        self._sends.append((self.ctrl.Isend([payload, MPI.BYTE], dest, tag), payload))

    def _recv(self, msg: Any, status: Any) -> list:
        buf = bytearray(status.Get_count(MPI.BYTE))
        msg.Recv([buf, MPI.BYTE])
        return pickle.loads(buf)

    def _coordinate(self) -> bool:
        coord = self.coordinator
        assert coord is not None
        status = MPI.Status()
        got = False
        while True:
            msg = self.ctrl.improbe(source=MPI.ANY_SOURCE, tag=TAG_ANNOUNCE, status=status)
            if msg is None:
                break
            coord.add(status.Get_source(), [Meta(*t) for t in self._recv(msg, status)])
            got = True
        responses = coord.poll()
        if not responses:
            return got
        if self.timeline is not None and self.timeline.mark_cycles:
            self.timeline.mark("CYCLE", responses=len(responses))
        if self.size > 1:
            payload = pickle.dumps([r.wire() for r in responses], 5)
            for dest in range(1, self.size):
                self._send(payload, dest, TAG_RESPONSE)
        self._execute_all(responses)
        return True

    def _receive(self) -> bool:
        got = False
        status = MPI.Status()
        while not self._stop:
            msg = self.ctrl.improbe(source=0, tag=TAG_RESPONSE, status=status)
            if msg is None:
                break
            self._execute_all([Response(*t) for t in self._recv(msg, status)])
            got = True
        return got

    def _execute_all(self, responses: list[Response]) -> None:
        for resp in responses:
            self._execute(resp)
            if self._stop or self.fatal is not None:
                return

    def _take(self, resp: Response, name: str) -> Request | None:
        return self._inflight.pop((resp.set_id, name), None)

    def _execute(self, resp: Response) -> None:
        kind = resp.kind
        if kind == ERROR:
            req = self._take(resp, resp.names[0])
            if req is not None:
                cls = getattr(errors, resp.error_type, errors.HvdcoreError)
                req.handle.fail(cls(f"rank {self.rank}: {resp.message}"))
            return
        if kind == STALL_WARNING:
            mine = dict(resp.per_rank).get(self.rank)
            extra = (f"\n  This rank ({self.rank}) has not submitted: {', '.join(mine)}"
                     if mine else "")
            log.warning("%s%s", resp.message, extra)
            return
        if kind == ABORT:
            err = getattr(errors, resp.error_type, errors.HvdcoreError)(
                f"rank {self.rank}: {resp.message}")
            log.error("%s", err)
            self._fail_everything(err)
            return
        if kind == JOIN:
            req = self._take(resp, "join")
            if req is not None:
                req.handle.set_part(req.part, resp.value)
            return
        if kind == SHUTDOWN:
            req = self._take(resp, resp.names[0])
            self._stop = True
            leftover = errors.ShutdownError(
                f"rank {self.rank}: hvdcore was shut down while this request was pending")
            for other in self._inflight.values():
                other.handle.fail(leftover)
            self._inflight.clear()
            if req is not None:
                req.handle.set_part(req.part, None)
            return
        if kind == ADD_SET:
            req = self._take(resp, resp.names[0])
            ranks = tuple(resp.ranks or ())
            world = self.sets[0].comm
            member = self.rank in ranks
            comm = world.Split(0 if member else MPI.UNDEFINED, self.rank)
            self.sets[resp.value] = SetState(resp.value, ranks, comm if member else None)
            if req is not None:
                req.handle.set_part(req.part, resp.value)
            return
        if kind == REMOVE_SET:
            req = self._take(resp, resp.names[0])
            state = self.sets.pop(resp.value, None)
            if state is not None and state.comm is not None:
                state.comm.Free()
            if req is not None:
                req.handle.set_part(req.part, True)
            return
        pset = self.sets.get(resp.set_id)
        if pset is None or pset.comm is None:
            return  # a response for a set this rank is not in
        if kind == ALLREDUCE:
            reqs = [self._take(resp, n) for n in resp.names]
            self.executor.allreduce(resp, reqs, pset)
            return
        req = self._take(resp, resp.names[0])
        if req is None:
            return
        if kind == ALLGATHER:
            self.executor.allgather(resp, req, pset)
        elif kind == BROADCAST:
            self.executor.broadcast(resp, req, pset)
        elif kind == ALLTOALL:
            self.executor.alltoall(resp, req, pset)
        elif kind == REDUCESCATTER:
            self.executor.reducescatter(resp, req, pset)
        elif kind == BARRIER:
            self.executor.barrier(resp, req, pset)

    def _fail_everything(self, err: BaseException) -> None:
        self.fatal = err
        with self._cv:
            pending = list(self._inflight.values()) + self._queue
            self._inflight.clear()
            self._queue = []
        for req in pending:
            req.handle.fail(err)

    def _abort_after_grace(self) -> None:
        """Give the user thread time to raise (and abort with its traceback), then abort."""
        deadline = time.monotonic() + _FATAL_GRACE_S
        while time.monotonic() < deadline:
            if self._sends:
                self._sends = [s for s in self._sends if not s[0].Test()]
            time.sleep(0.05)
        log.error("rank %d: aborting the MPI job after a fatal hvdcore error: %s",
                  self.rank, self.fatal)
        try:
            if self.timeline is not None:
                self.timeline.close()
        finally:
            sys.stderr.flush()
            MPI.COMM_WORLD.Abort(1)
