"""The engine of one rank: announce, negotiate, execute, complete.

User threads call :meth:`Engine.enqueue`; engine cycles (:meth:`Engine._step`) announce new
requests to the coordinator (world rank 0), which answers with an ordered list of responses that
every rank executes. One lock lets one thread at a time run cycles: either the background engine
thread or a user thread that waits for a result and *drives* the engine itself
(:meth:`Engine.drive`, no thread hand-off). With thread progress every submission wakes the
engine thread (an idle one sleeps on a condition variable, so a lone request starts at once);
with caller progress submissions only queue until someone waits, and the engine thread steps in
only after ``_CALLER_GRACE_S`` without a driver (see ``HVDCORE_PROGRESS``).

Allreduces the ranks ran before are *hits* of the response cache: they skip the coordinator and
are agreed in non-blocking rounds (:mod:`hvdcore.engine.cache`); :meth:`Engine._drain` runs
coordinator lists and completed rounds in the one order every rank agrees on.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from mpi4py import MPI

from hvdcore import errors
from hvdcore.engine.cache import FLAG_JOINING, HIT, STALE, ResponseCache, RoundVector
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
_ROUND_SPIN_S = 30e-6
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
        # Ordered execution (see hvdcore.engine.cache): coordinator response lists with their
        # fences, completed rounds, and how many of each this rank has executed.
        self._lists: deque[tuple[int, list[Response]]] = deque()
        self._lists_executed = 0
        self._rounds_ready: deque[tuple[int, int, list[int], list[int]]] = deque()
        self._rounds_executed = 0
        self._last_fence = 0
        # fences of the lists rank 0 sent and no round has counted yet, run-length encoded
        # ([fence, lists]; fences never decrease): constant size while no round is posted
        self._sent_fences: deque[list[int]] = deque()
        self._lists_counted = 0
        # Response cache and its rounds (only with more than one rank).
        capacity = cfg.cache_capacity if self.size > 1 else 0
        self.cache = ResponseCache(capacity)
        self._rv = RoundVector(capacity) if capacity else None
        self.round_comm = comm.Dup() if capacity else None
        self._hits: dict[int, Request] = {}
        self._hit_since: dict[int, float] = {}
        self._hit_reported: set[int] = set()
        self._last_hit_scan = 0.0
        self._invalid: set[int] = set()
        self._join_flag = False
        self._closing = False
        self._round_req: Any = None
        self._round_hits: list[int] = []
        self._posted = 0
        self.fast_count = 0  # blocking allreduces done by fast_allreduce (for tests)
        if self._rv is not None:
            self._round_send = self._rv.buffer()
            self._round_recv = self._rv.buffer()
            self._round_msgs = ([self._round_send, MPI.UINT64_T],
                                [self._round_recv, MPI.UINT64_T])
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
        return (bool(self._inflight) or bool(self.coordinator and self.coordinator.busy())
                or self._round_req is not None or bool(self._lists) or bool(self._rounds_ready))

    def _step(self) -> bool:
        """One engine cycle (announce, negotiate/receive, execute); True if anything moved.

        Runs on the engine thread, or on a caller's thread that drives the engine while it
        waits for a blocking call (see :meth:`drive`); ``_run_lock`` keeps the two apart.
        """
        progressed = False
        if self._queue:  # unlocked peek: only this cycle's thread empties the queue
            with self._cv:
                batch, self._queue = self._queue, []
            self._announce(batch)
            progressed = True
        if self.coordinator is not None:
            progressed |= self._coordinate()
        else:
            progressed |= self._receive()
        if self._rv is not None and self._round_req is not None:
            progressed |= self._test_round()
        if self._lists or self._rounds_ready:
            progressed |= self._drain()
        if self._rv is not None:
            if self._round_req is None and not self._rounds_ready and not self._stop:
                progressed |= self._maybe_post()
            if self._hits and not self.cfg.stall_check_disable:
                self._report_waiting_hits()
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
        now = time.perf_counter()
        lookup = self.cache.lookup if self._rv is not None else None
        for req in batch:
            key = (req.meta.set_id, req.meta.name)
            if key in self._inflight:
                req.handle.fail(errors.MismatchError(
                    f"rank {self.rank}: a {req.meta.kind} named '{req.meta.name}' is already "
                    "pending; give concurrent collectives distinct names or synchronize the "
                    "first one before submitting the second"))
                continue
            self._inflight[key] = req
            meta = req.meta
            if lookup is not None:
                if meta.kind == ALLREDUCE:
                    state, cid = lookup(meta)
                    if state == HIT and cid not in self._invalid:
                        self._hits[cid] = req
                        self._hit_since[cid] = now
                        continue
                    if state == STALE:
                        self._invalid.add(cid)  # every rank drops it after the next round
                elif meta.kind == JOIN:
                    meta.root = self._posted + 1  # the round that tells the others
                    self._join_flag = True
                elif meta.kind == SHUTDOWN:
                    meta.root = self._posted
                    self._closing = True
            metas.append(meta)
        if metas:
            self._announce_metas(metas)

    def _announce_metas(self, metas: list[Meta]) -> None:
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
            got_msg = self._recv(msg, status)
            if isinstance(got_msg, dict):  # cached allreduces a rank has long waited for
                for name, age in got_msg["waiting"]:
                    coord.note_waiting(status.Get_source(), name, age)
            else:
                coord.add(status.Get_source(), [Meta(*t) for t in got_msg])
            got = True
        responses = coord.poll()
        if not responses:
            return got
        if self.timeline is not None and self.timeline.mark_cycles:
            self.timeline.mark("CYCLE", responses=len(responses))
        # Stall warnings and aborts run at once; everything else in the fenced order.
        oob = [r for r in responses if r.kind == STALL_WARNING or r.kind == ABORT]
        ordered = [r for r in responses if r.kind != STALL_WARNING and r.kind != ABORT]
        fence = max(self._posted, coord.fence_floor, self._last_fence)
        if self.size > 1:
            payload = pickle.dumps(
                (fence, [r.wire() for r in ordered], [r.wire() for r in oob]), 5)
            for dest in range(1, self.size):
                self._send(payload, dest, TAG_RESPONSE)
        if ordered:
            self._last_fence = fence
            if self._sent_fences and self._sent_fences[-1][0] == fence:
                self._sent_fences[-1][1] += 1
            else:
                self._sent_fences.append([fence, 1])
            self._lists.append((fence, ordered))
        self._execute_all(oob)
        return True

    def _receive(self) -> bool:
        got = False
        status = MPI.Status()
        while not self._stop:
            msg = self.ctrl.improbe(source=0, tag=TAG_RESPONSE, status=status)
            if msg is None:
                break
            fence, ordered, oob = self._recv(msg, status)
            if ordered:
                self._lists.append((fence, [Response(*t) for t in ordered]))
            self._execute_all([Response(*t) for t in oob])
            got = True
        return got

    # -- ordered execution and cache rounds ----------------------------------------------

    def _drain(self) -> bool:
        """Execute queued lists and completed rounds in the order every rank agrees on.

        A list with fence ``f`` runs after round ``f`` and before round ``f + 1``; round
        ``m`` runs after the first ``lists`` lists (rank 0's count in the round's header).
        """
        did = False
        while not self._stop and self.fatal is None:
            if self._lists and self._lists[0][0] <= self._rounds_executed:
                _, responses = self._lists.popleft()
                self._lists_executed += 1
                self._execute_all(responses)
            elif self._rounds_ready and self._lists_executed >= self._rounds_ready[0][0]:
                self._execute_round(*self._rounds_ready.popleft())
                self._rounds_executed += 1
            else:
                break
            did = True
        return did

    def _maybe_post(self) -> bool:
        """Post the next round when this rank has hits to offer or a list needs one."""
        assert self._rv is not None and self.round_comm is not None
        need = ((self._lists and self._lists[0][0] > self._posted) or self._join_flag
                or (not self._closing and (self._hits or self._invalid)))
        if not need:
            return False
        m = self._posted + 1
        lists = self._lists_before(m)
        flags = FLAG_JOINING if self._join_flag else 0
        self._join_flag = False
        self._round_hits = list(self._hits)
        self._rv.pack(self._round_send, lists, flags, self._round_hits, self._invalid)
        self._round_req = self.round_comm.Iallreduce(self._round_msgs[0], self._round_msgs[1],
                                                     op=MPI.BOR)
        self._posted = m
        # A peer that posted first makes this round complete at once.
        did = self._test_round()
        if self._rounds_ready:
            did |= self._drain()
        return did

    def _lists_before(self, m: int) -> int:
        """Rank 0: how many lists it sent go before round ``m`` (0 on other ranks)."""
        if self.coordinator is None:
            return 0
        while self._sent_fences and self._sent_fences[0][0] < m:
            self._lists_counted += self._sent_fences.popleft()[1]
        return self._lists_counted

    def fast_allreduce(self, meta: Meta, arr: Any, out: Any,
                       make_request: Callable[[], Request]) -> Any:
        """A blocking allreduce of a cached tensor on an idle engine, without the queue.

        The caller drives the engine (:meth:`begin_drive`). Returns the result array; or a
        handle when the tensor became an ordinary pending hit (a peer is late, or the round
        must wait for something: drive it); or None when the fast path does not apply.
        """
        if (self._rv is None or self.timeline is not None or self._queue or self._inflight
                or self._hits or self._invalid or self._round_req is not None
                or self._rounds_ready or self._lists or self._join_flag or self._closing
                or self.fatal is not None or self._stop):
            return None
        state, cid = self.cache.lookup(meta)
        if state != HIT:
            return None
        m = self._posted + 1
        self._round_hits = [cid]
        self._rv.pack(self._round_send, self._lists_before(m), 0, self._round_hits, ())
        req = self.round_comm.Iallreduce(self._round_msgs[0], self._round_msgs[1], op=MPI.BOR)
        self._posted = m
        done = req.Test()
        if not done:
            t_end = time.perf_counter() + _ROUND_SPIN_S
            while not done and time.perf_counter() < t_end:
                done = req.Test()
        if done:
            result = self._rv.unpack(self._round_recv, self._round_hits, self._round_send)
            lists, flags, ready, invalid = result
            if ready and not flags and not invalid and self._lists_executed >= lists:
                self._rounds_executed += 1
                coord = self.coordinator
                if coord is not None and coord.hit_waits:
                    coord.hit_done(meta.name)
                resp = self.cache.responses(ready, 0)[0]
                pset = self.sets[0]
                value = self.executor.allreduce_single(resp, arr, out, pset)
                if value is not None:
                    self.fast_count += 1
                    return value
                request = make_request()
                self.executor.allreduce(resp, [request], pset)
                return request.handle
            self._rounds_ready.append(result)
        else:
            self._round_req = req
        # Not done at once: the request becomes an ordinary hit of the posted round.
        request = make_request()
        self._inflight[(0, meta.name)] = request
        self._hits[cid] = request
        self._hit_since[cid] = time.perf_counter()
        return request.handle

    def _test_round(self) -> bool:
        """Collect the outstanding round if it completed; True when it carries anything."""
        assert self._rv is not None
        req = self._round_req
        if not req.Test():
            # The peers are usually microseconds behind, and a non-blocking collective only
            # advances inside MPI calls: poll it in a tight loop for a moment before going
            # back to the (much slower) engine cycle.
            t_end = time.perf_counter() + _ROUND_SPIN_S
            while not req.Test():
                if time.perf_counter() > t_end:
                    return False
        self._round_req = None
        result = self._rv.unpack(self._round_recv, self._round_hits, self._round_send)
        self._rounds_ready.append(result)
        return bool(result[1] or result[2] or result[3])

    def _execute_round(self, _lists: int, flags: int, ready: list[int],
                       invalid: list[int]) -> None:
        if ready:
            coord = self.coordinator
            hits, since = self._hits, self._hit_since
            for cid in ready:
                del hits[cid]
                del since[cid]
            if self._hit_reported:
                self._hit_reported.difference_update(ready)
            for resp in self.cache.responses(ready, self.cfg.fusion_threshold):
                if coord is not None and coord.hit_waits:
                    for name in resp.names:
                        coord.hit_done(name)
                self._execute(resp, cached=True)
                if self._stop or self.fatal is not None:
                    return
        demote: list[Request] = []
        for cid in invalid:
            self.cache.invalidate(cid)
            self._invalid.discard(cid)
            req = self._hits.pop(cid, None)
            if req is not None:
                demote.append(req)
        if flags & FLAG_JOINING:
            self.cache.disable()
            demote.extend(self._hits.values())
            self._hits.clear()
        if demote:
            # Every rank drops these ids at this same point, so every rank that holds one
            # of them announces it now: the coordinator decides (and reports mismatches).
            self._hit_since = {c: t for c, t in self._hit_since.items() if c in self._hits}
            self._hit_reported &= set(self._hits)
            self._announce_metas([req.meta for req in demote])

    def _report_waiting_hits(self) -> None:
        """Tell the coordinator about cached allreduces waited on for half the stall time."""
        now = time.perf_counter()
        if now - self._last_hit_scan < 0.2:
            return
        self._last_hit_scan = now
        late = [(cid, now - t) for cid, t in self._hit_since.items()
                if now - t >= self.cfg.stall_check_time_seconds / 2
                and cid not in self._hit_reported]
        if not late:
            return
        waiting = [(self._hits[cid].meta.name, age) for cid, age in late]
        self._hit_reported.update(cid for cid, _ in late)
        if self.coordinator is not None:
            for name, age in waiting:
                self.coordinator.note_waiting(0, name, age)
        else:
            self._send(pickle.dumps({"waiting": waiting}, 5), 0, TAG_ANNOUNCE)

    def _execute_all(self, responses: list[Response]) -> None:
        for resp in responses:
            self._execute(resp)
            if self._stop or self.fatal is not None:
                return

    def _take(self, resp: Response, name: str) -> Request | None:
        return self._inflight.pop((resp.set_id, name), None)

    def _execute(self, resp: Response, cached: bool = False) -> None:
        kind = resp.kind
        if kind == ALLREDUCE:  # the common case first
            pset = self.sets.get(resp.set_id)
            if pset is None or pset.comm is None:
                return  # a response for a set this rank is not in
            inflight = self._inflight
            reqs = [inflight.pop((resp.set_id, n), None) for n in resp.names]
            self.executor.allreduce(resp, reqs, pset)
            if not cached:
                self.cache.insert(resp)
            return
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
            self.cache.enable()
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
            self._hits.clear()
            self._hit_since.clear()
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
