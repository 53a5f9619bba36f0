"""Who runs the engine's cycles, and when: the engine thread or a waiting caller.

One lock lets one thread at a time run cycles: either the background engine thread or a user
thread that waits for a result and *drives* the engine itself (:meth:`Progress.drive`, no
thread hand-off). With thread progress every submission wakes the engine thread (an idle one
sleeps on a condition variable, so a lone request starts at once); with caller progress
submissions only queue until someone waits, and the engine thread steps in only after
``_CALLER_GRACE_S`` without a driver (see ``HVDCORE_PROGRESS``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hvdcore import errors
from hvdcore.engine.handle import Handle

log = logging.getLogger("hvdcore")

_IDLE_WAIT_S = 0.05
_BUSY_S = 50e-6
_DRIVER_YIELD_S = 20e-3
_DRIVER_SLEEP_S = 100e-6
_SPIN_S = 250e-6
_MAX_BACKOFF_S = 1e-3
_CALLER_GRACE_S = 0.5


@dataclass(slots=True)
class RunState:
    """Whether the engine still runs; shared by its parts. Each field is set once."""

    stopped: bool = False  # a SHUTDOWN response ran: no more cycles
    fatal: BaseException | None = None  # the error every pending and later request gets


class Progress:
    """The submission queue, the engine thread, and the lock that lets a caller drive.

    ``step`` runs one engine cycle (True if anything moved), ``busy`` says whether work is
    outstanding, ``crashed`` handles an exception that escaped a cycle on the engine thread,
    and ``fatal_exit`` ends the job after a fatal error (it does not return normally).
    """

    def __init__(self, run: RunState, step: Callable[[], bool], busy: Callable[[], bool],
                 crashed: Callable[[BaseException], None], fatal_exit: Callable[[], None],
                 caller_progress: bool, rank: int) -> None:
        self.run = run
        self._step = step
        self._busy = busy
        self._crashed = crashed
        self._fatal_exit = fatal_exit
        self.caller_progress = caller_progress
        self.rank = rank
        self.queue: list[Any] = []  # requests submitted and not yet announced
        self._cv = threading.Condition()
        self._run_lock = threading.Lock()
        self._driver: int | None = None
        self._last_drive = time.perf_counter()
        self._thread = threading.Thread(target=self._main, name="hvdcore-engine", daemon=True)

    def start(self) -> None:
        """Start the engine thread."""
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the engine thread to end."""
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        """True while the engine thread runs."""
        return self._thread.is_alive()

    # -- the queue --------------------------------------------------------------------------

    def submit(self, reqs: list[Any], stamp: float) -> None:
        """Queue requests for the next cycle (raises if the engine has failed or stopped)."""
        run = self.run
        if run.fatal is not None:
            raise run.fatal
        if run.stopped:
            raise errors.ShutdownError(f"rank {self.rank}: hvdcore engine is shut down")
        for r in reqs:
            r.t_submit = stamp
        with self._cv:
            if run.fatal is not None:  # set while we stamped: fail_queued() may have run
                raise run.fatal
            self.queue.extend(reqs)
            if not self.caller_progress and self._driver != threading.get_ident():
                self._cv.notify()

    def take(self) -> list[Any]:
        """The queued requests, leaving the queue empty (engine cycles only)."""
        with self._cv:
            batch, self.queue = self.queue, []
        return batch

    def take_for(self, handle: Any) -> list[Any] | None:
        """The queued requests, leaving the queue empty, when one of them completes
        ``handle`` (for a driver that runs them itself); else None, the queue untouched."""
        with self._cv:
            queue = self.queue
            for r in queue:
                if r.handle is handle:
                    self.queue = []
                    return queue
        return None

    def requeue(self, reqs: list[Any]) -> None:
        """Put requests taken by the driver back at the head of the queue (in order)."""
        with self._cv:
            self.queue[:0] = reqs

    # -- driving from a caller's thread -------------------------------------------------------

    def begin_drive(self) -> bool:
        """Let the calling thread run engine cycles (for a blocking call); False if busy.

        A blocking call on an otherwise idle engine then needs no thread hand-off (each costs
        a futex wake-up plus a GIL transfer: tens of microseconds on small VMs). Requests the
        driver enqueues do not wake the engine thread. Pair with :meth:`end_drive`.
        """
        if self.run.fatal is not None or not self._run_lock.acquire(False):
            return False
        self._driver = threading.get_ident()
        return True

    def run_alone(self, stage: Callable[[Any, Any, Any], Any], block: bool, meta: Any,
                  arr: Any, out: Any) -> Any:
        """Run a caller's shortcut, ``stage(meta, arr, out)``, on this thread as the engine's
        driver when the engine is free; None when it is not (nothing done).

        The stage returns a result, None (it did nothing) or a :class:`Handle` (a pending
        request): this returns the result of a blocking call (``block``: the handle is driven
        here until done) or the handle itself. The engine is given back as the stage left it.
        """
        if not self.begin_drive():
            return None
        got = None
        try:
            got = stage(meta, arr, out)
            if type(got) is not Handle or not block:
                return got
            self.drive_until(got)
        finally:
            # (a result, or nothing done: the engine is as idle as it was)
            self.end_drive(type(got) is not Handle)
        return got.wait()

    def driving(self) -> bool:
        """True when the calling thread is a caller that drives the engine now."""
        return self._driver == threading.get_ident()

    def end_drive(self, settled: bool = False) -> None:
        """Give the engine back to its thread (and wake it: requests may still be pending).
        ``settled``: the driver found the engine idle and left it so (only a request queued
        meanwhile by another thread can need the engine thread now)."""
        self._driver = None
        self._last_drive = time.perf_counter()
        self._run_lock.release()
        if not self.caller_progress and (self.queue or (not settled and self._busy())):
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
        run, step = self.run, self._step
        last = time.perf_counter()
        while not handle.done() and not run.stopped and run.fatal is None:
            if step():
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

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Keep engine cycles from running while the caller changes the engine's parts."""
        if self._driver == threading.get_ident():
            yield
            return
        with self._run_lock:
            yield

    @contextlib.contextmanager
    def thread_held(self) -> Iterator[None]:
        """Keep the engine thread out of cycles while the calling thread runs (and drives)
        calls: the thread waits at its idle check until the block ends. For a walk or a
        profile of one call on one rank, which then sees the caller's route alone (an idle
        engine thread still runs a cycle every ``_IDLE_WAIT_S``, and a call that meets it
        queues to it instead of driving)."""
        with self._cv:  # the thread takes this before each cycle (re-entrant for the caller)
            with self._run_lock:
                # a thread past its idle check ends its cycle, or its wait for the run lock
                # times out, within this; then it waits for the condition's lock
                time.sleep(2 * _IDLE_WAIT_S + 0.05)  # (+ a margin for a loaded machine)
            yield

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
        run = self.run
        if self._driver == threading.get_ident():  # already driving (a call inside a call)
            self.drive_until(handle)
            return handle.wait()
        while not handle.done():
            if self.begin_drive():
                try:
                    self.drive_until(handle)
                finally:
                    self.end_drive()
                break
            if run.stopped or run.fatal is not None:
                break
            handle.wait_done(_MAX_BACKOFF_S)
        return handle.wait()

    # -- the engine thread ------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # any failure must surface on every waiting caller
            self._crashed(exc)
            self._fatal_exit()

    def _loop(self) -> None:
        run = self.run
        last_progress = time.perf_counter()
        while not run.stopped:
            with self._cv:
                # Idle: sleep until a request arrives. (Blocking calls drive the engine on
                # their own thread, so an idle engine thread need not spin for them.)
                if not self.queue and not self._busy():
                    self._cv.wait(_IDLE_WAIT_S)
                    if self.caller_progress and self.queue:
                        continue  # queued meanwhile: the caller grace below applies to it
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
            if run.fatal is not None:
                self._fatal_exit()
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

    def fail_queued(self) -> list[Any]:
        """Empty the queue for a fatal error; returns the requests that were in it."""
        with self._cv:
            queued, self.queue = self.queue, []
        return queued
