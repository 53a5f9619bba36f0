"""The cache-round scheduler: response-cache hits, their rounds, and the one execution order.

Allreduces the ranks ran before are *hits* of the response cache: they skip the coordinator
and are agreed in non-blocking rounds (the protocol is described in
:mod:`hvdcore.engine.cache`). The scheduler also owns the queue of coordinator lists, because
lists and completed rounds must run in the one order every rank agrees on
(:meth:`RoundScheduler.drain`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hvdcore.backends.base import STEADY_DONE, STEADY_NOT_READY
from hvdcore.engine.cache import FLAG_JOINING, HIT, STALE, ResponseCache, RoundVector
from hvdcore.engine.control import ControlChannel
from hvdcore.engine.dispatch import Dispatcher
from hvdcore.engine.executor import Executor, Request, SetState, one_request
from hvdcore.engine.fusion import fused_layout
from hvdcore.engine.handle import Handle
from hvdcore.engine.messages import ALLREDUCE, JOIN, SHUTDOWN, Meta, Response
from hvdcore.engine.progress import RunState

_ROUND_SPIN_S = 30e-6
_STEADY_MAX = 4096  # cached tensors whose steady-path constants are kept
_INT32_MAX = (1 << 31) - 1


@dataclass(slots=True)
class _Steady:
    """What the steady path keeps about one cached tensor (see :meth:`steady_allreduce`)."""

    cid: int
    cids: list[int]
    meta: Meta  # the request the cache last matched (the API layer reuses it while it can)
    resp: Response  # the cache's response when this was made (a new one voids it)
    comm: Any  # the data communicator (the backend's direct call must still be on it)
    call: Callable[[int, int, Any, Any, int], Any]  # SteadyCalls.bind's call
    dtype: np.dtype
    post: float  # postscale, divided by the set size for an average
    fresh: bool  # results are fresh arrays, not pooled memory (np.empty of the input's shape)


@dataclass(slots=True)
class _Batch:
    """What the steady path keeps about one recurring batch of in-place allreduces (see
    :meth:`RoundScheduler.steady_batch`)."""

    metas: list[Meta]  # the API layer's checked requests, one per array, in its order
    cids: list[int]  # their cache ids, in the same order
    names: list[str]
    generation: int  # the cache's generation when this was made
    threshold: int  # the fusion threshold then
    comm: Any  # the data communicator (the backend's direct call must still be on it)
    call: Callable[..., Any]  # SteadyCalls.bind_batch's call
    data: Callable[..., Any]  # its data part (SteadyCalls.bind_batch_data)
    rdtype: np.dtype  # the fusion buffer's dtype
    total: int  # elements reduced
    places: np.ndarray  # (byte offset, byte length) of each array in the fusion buffer
    gaps: np.ndarray  # (byte offset, byte length) of the padding between them
    scale: int  # 0: results copied back; 1 / 2: multiplied by post as float32 / float64
    post: float


class RoundScheduler:
    """Hits, rounds and the ordered execution of lists and rounds on one rank."""

    def __init__(self, capacity: int, cfg: Any, plane: Any, control: ControlChannel,
                 dispatcher: Dispatcher, cache: ResponseCache, run: RunState) -> None:
        self.cfg = cfg
        self.plane = plane
        self.control = control
        self.coordinator = control.coordinator
        self.dispatcher = dispatcher
        self.cache = cache
        self.run = run
        self.enabled = capacity > 0
        self._rv = RoundVector(capacity) if capacity else None
        # Ordered execution: coordinator lists with their fences, completed rounds, and how
        # many of each this rank has executed.
        self._lists: deque[tuple[int, list[Response]]] = deque()
        self._lists_executed = 0
        self._rounds_ready: deque[tuple[int, int, list[int], list[int]]] = deque()
        self._rounds_executed = 0
        self._last_fence = 0
        # fences of the lists rank 0 sent and no round has counted yet, run-length encoded
        # ([fence, lists]; fences never decrease): constant size while no round is posted
        self._sent_fences: deque[list[int]] = deque()
        self._lists_counted = 0
        # Hits waiting for their round, and ids every rank must drop.
        self._hits: dict[int, Request] = {}
        self._hit_since: dict[int, float] = {}
        self._hit_reported: set[int] = set()
        self._last_hit_scan = 0.0
        self._invalid: set[int] = set()
        self._join_flag = False
        self._closing = False
        self._round_req: Any = None
        self._round_hits: list[int] = []
        self.posted = 0  # rounds this rank has posted
        self.fast_count = 0  # blocking allreduces done by fast_allreduce (for tests)
        if self._rv is not None:
            self._round_send = self._rv.buffer()
            self._round_recv = self._rv.buffer()
        # The steady path: the round and the data call of a cached blocking allreduce as one
        # call of the control plane (compiled where it can be: HVDCORE_HOTPATH).
        calls = getattr(plane, "steady_calls", None) if self._rv is not None else None
        self.steady = calls(_ROUND_SPIN_S, getattr(cfg, "hotpath", True)) if calls else None
        self._steady: dict[int, _Steady] = {}
        self._steady_names: dict[str, _Steady] = {}
        self._batches: dict[int, _Batch | None] = {}  # by id() of the API layer's metas list
        self._batch_tried: dict[int, tuple[list[Meta], int, int, int]] = {}
        # A batch whose round was still in flight when steady_batch returned: its arrays
        # and requests (pending hits), for _execute_round's data call.
        self._batch_wait: tuple[_Batch, list[Any], list[Request]] | None = None
        self._progress: Any = None
        self._host: Executor | None = None
        self._world: SetState | None = None

    def bind_steady(self, progress: Any, host: Executor, world: SetState) -> None:
        """The engine's parts :meth:`steady_allreduce` reads: who drives (``Progress``), the
        host executor and the global process set."""
        self._progress, self._host, self._world = progress, host, world

    # -- what the engine cycle calls --------------------------------------------------------

    def classify(self, req: Request, now: float) -> bool:
        """Look a new request up: True when it became a hit (then it is not announced)."""
        if self._rv is None:
            return False
        meta = req.meta
        if meta.kind == ALLREDUCE:
            state, cid = self.cache.lookup(meta)
            if state == HIT and cid not in self._invalid:
                self._hits[cid] = req
                self._hit_since[cid] = now
                return True
            if state == STALE:
                self._invalid.add(cid)  # every rank drops it after the next round
        elif meta.kind == JOIN:
            meta.root = self.posted + 1  # the round that tells the others
            self._join_flag = True
        elif meta.kind == SHUTDOWN:
            meta.root = self.posted
            self._closing = True
        return False

    def fence(self, floor: int) -> int:
        """Rank 0: the fence of the list it is about to send."""
        return max(self.posted, floor, self._last_fence)

    def add_list(self, fence: int, responses: list[Response], sent: bool = False) -> None:
        """Queue a coordinator list (``sent``: rank 0's own copy of a list it sent)."""
        if sent:
            self._last_fence = fence
            if self._sent_fences and self._sent_fences[-1][0] == fence:
                self._sent_fences[-1][1] += 1
            else:
                self._sent_fences.append([fence, 1])
        self._lists.append((fence, responses))

    def busy(self) -> bool:
        """True while a round is outstanding or lists/rounds wait to run."""
        return self._round_req is not None or bool(self._lists) or bool(self._rounds_ready)

    def advance(self) -> bool:
        """Collect a finished round, run what may run, post the next round; True if moved."""
        progressed = False
        rounds = self._rv is not None
        if rounds and self._round_req is not None:
            progressed = self._test_round()
        if self._lists or self._rounds_ready:
            progressed |= self.drain()
        if rounds:
            if self._round_req is None and not self._rounds_ready and not self.run.stopped:
                progressed |= self._maybe_post()
            if self._hits and not self.cfg.stall_check_disable:
                self._report_waiting_hits()
        return progressed

    def drop_hits(self) -> list[Request]:
        """Forget every waiting hit (for a fatal error); returns their requests."""
        pending = list(self._hits.values())
        self._batch_wait = None
        self._hits.clear()
        self._hit_since.clear()
        return pending

    # -- ordered execution ------------------------------------------------------------------

    def drain(self) -> bool:
        """Execute queued lists and completed rounds in the order every rank agrees on.

        A list with fence ``f`` runs after round ``f`` and before round ``f + 1``; round
        ``m`` runs after the first ``lists`` lists (rank 0's count in the round's header).
        """
        did = False
        run = self.run
        while not run.stopped and run.fatal is None:
            if self._lists and self._lists[0][0] <= self._rounds_executed:
                _, responses = self._lists.popleft()
                self._lists_executed += 1
                self.dispatcher.run_all(responses)
            elif self._rounds_ready and self._lists_executed >= self._rounds_ready[0][0]:
                # Counted before it runs, as a list is: when its data call raises on a
                # caller's thread (the caller gets the error, the engine goes on), the lists
                # fenced after this round must still run.
                self._rounds_executed += 1
                self._execute_round(*self._rounds_ready.popleft())
            else:
                break
            did = True
        return did

    def _maybe_post(self) -> bool:
        """Post the next round when this rank has hits to offer or a list needs one."""
        assert self._rv is not None
        need = ((self._lists and self._lists[0][0] > self.posted) or self._join_flag
                or (not self._closing and (self._hits or self._invalid)))
        if not need:
            return False
        m = self.posted + 1
        flags = FLAG_JOINING if self._join_flag else 0
        self._join_flag = False
        self._round_hits = list(self._hits)
        self._rv.pack(self._round_send, self._lists_before(m), flags, self._round_hits,
                      self._invalid)
        self._round_req = self.plane.start_round(self._round_send, self._round_recv)
        self.posted = m
        # A peer that posted first makes this round complete at once.
        did = self._test_round()
        if self._rounds_ready:
            did |= self.drain()
        return did

    def _lists_before(self, m: int) -> int:
        """Rank 0: how many lists it sent go before round ``m`` (0 on other ranks)."""
        if self.coordinator is None:
            return 0
        while self._sent_fences and self._sent_fences[0][0] < m:
            self._lists_counted += self._sent_fences.popleft()[1]
        return self._lists_counted

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
        wait = self._batch_wait
        if wait is not None and (ready or invalid or flags):
            self._batch_wait = None
            if ready and not invalid and not flags and self._batch_data(*wait, ready):
                ready = []
        if ready:
            coord = self.coordinator
            hits, since = self._hits, self._hit_since
            for cid in ready:
                del hits[cid]
                del since[cid]
            if self._hit_reported:
                self._hit_reported.difference_update(ready)
            run = self.run
            for resp in self.cache.responses(ready, self.cfg.fusion_threshold):
                if coord is not None and coord.hit_waits:
                    for name in resp.names:
                        coord.hit_done(name)
                self.dispatcher.run_one(resp, cached=True)
                if run.stopped or run.fatal is not None:
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
            self.control.announce([req.meta for req in demote])

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
        self._hit_reported.update(cid for cid, _ in late)
        self.control.report_waiting([(self._hits[cid].meta.name, age) for cid, age in late])

    # -- the fast paths -----------------------------------------------------------------------

    def _can_skip_queue(self, idle: bool) -> bool:
        """True when a round may be posted for a caller's hits alone, right now."""
        return not (self._rv is None or not idle or self._hits or self._invalid
                    or self._round_req is not None or self._rounds_ready or self._lists
                    or self._join_flag or self._closing)

    def _round_alone(self, cids: list[int]) -> tuple[int, int, list[int], list[int]] | None:
        """Post a round offering just ``cids`` and poll it briefly: its result when it
        completed with every id ready and nothing else to do (the caller executes them);
        else None, and the caller registers its requests as ordinary hits of the round."""
        assert self._rv is not None
        m = self.posted + 1
        self._round_hits = cids
        self._rv.pack(self._round_send, self._lists_before(m), 0, cids, ())
        req = self.plane.start_round(self._round_send, self._round_recv)
        self.posted = m
        done = req.Test()
        if not done:
            t_end = time.perf_counter() + _ROUND_SPIN_S
            while not done and time.perf_counter() < t_end:
                done = req.Test()
        if not done:
            self._round_req = req
            return None
        result = self._rv.unpack(self._round_recv, cids, self._round_send)
        lists, flags, ready, invalid = result
        if (len(ready) == len(cids) and not flags and not invalid
                and self._lists_executed >= lists):
            self._rounds_executed += 1
            coord = self.coordinator
            if coord is not None and coord.hit_waits:
                for cid in cids:
                    coord.hit_done(self.cache.name_of(cid))
            return result
        self._rounds_ready.append(result)
        return None

    def _pending_hit(self, cid: int, request: Request, now: float) -> None:
        """Register a request whose round did not let it run at once as an ordinary hit."""
        self.dispatcher.inflight[(0, request.meta.name)] = request
        self._hits[cid] = request
        self._hit_since[cid] = now

    def fast_allreduce(self, meta: Meta, arr: Any, out: Any, idle: bool,
                       make_request: Callable[[], Request], executor: Executor,
                       world: SetState) -> Any:
        """A blocking allreduce of a cached tensor on an idle engine, without the queue.

        ``idle``: nothing is queued or pending elsewhere in the engine. Returns the result
        array; or a handle when the tensor became an ordinary pending hit (a peer is late,
        or the round must wait for something: drive it); or None when the fast path does
        not apply.
        """
        if not self._can_skip_queue(idle):
            return None
        state, cid = self.cache.lookup(meta)
        if state != HIT:
            return None
        entry = self._steady.get(cid)
        if entry is not None and executor is self._host:
            entry.meta = meta
            got = self._steady_run(entry, arr, out, make_request)
            if got is not None:
                return got
        if self._round_alone([cid]) is not None:
            resp = self.cache.responses([cid], 0)[0]
            value = executor.allreduce_single(resp, arr, out, world)
            if value is not None:
                self.fast_count += 1
                if self.steady is not None and executor is self._host:
                    self._remember_steady(cid, meta, resp, arr)
                return value
            request = make_request()
            executor.allreduce(resp, [request], world)
            return request.handle
        # Not done at once: the request becomes an ordinary hit of the posted round.
        request = make_request()
        self._pending_hit(cid, request, time.perf_counter())
        return request.handle

    def steady_allreduce(self, meta: Meta, arr: Any, out: Any) -> Any:
        """A blocking allreduce whose last call took the fast path, again with the same
        request (``meta``, the object the API layer reuses), on an idle engine: drive the
        engine, make the round and the data call as one call of the control plane
        (``self.steady``; compiled where it can be), and return the result. None, with
        nothing done, when anything changed (the caller takes the general path). Same
        protocol, same MPI calls, same results as :meth:`fast_allreduce`."""
        return self._steady_call(meta, arr, out, True)

    def steady_start(self, meta: Meta, arr: Any, out: Any) -> Any:
        """:meth:`steady_allreduce` for an asynchronous call: the result array; or the
        handle of the request, an ordinary pending hit, when a peer has not offered it yet
        (it never waits for one); or None, nothing done (the caller enqueues it)."""
        return self._steady_call(meta, arr, out, False)

    def _steady_call(self, meta: Meta, arr: Any, out: Any, block: bool) -> Any:
        e = self._steady_names.get(meta.name)
        if e is None or e.meta is not meta:
            return None
        progress = self._progress
        if not progress.begin_drive():
            return None
        try:
            run = self.run
            idle = (not progress.queue and not self.dispatcher.inflight and run.fatal is None
                    and not run.stopped and self._host.timeline is None)  # type: ignore[union-attr]
            if not self._can_skip_queue(idle):
                return None
            got = self._steady_run(e, arr, out, lambda: one_request(meta, arr, out))
            if type(got) is not Handle or not block:
                return got
            progress.drive_until(got)
        finally:
            progress.end_drive()
        return got.wait()

    def _remember_steady(self, cid: int, meta: Meta, resp: Response, arr: Any) -> None:
        """Keep what the steady path needs for ``cid``, when its data call is one direct MPI
        allreduce (the backend says; the executor's plan passes the tensor as it is)."""
        host, world = self._host, self._world
        assert self.steady is not None and self._rv is not None and host and world
        direct = getattr(host.backend, "direct_allreduce", None)
        plan = host.direct_plan(resp, world)
        if direct is None or plan is None or arr.size > _INT32_MAX:
            return
        got = direct(world, arr.nbytes)
        if got is None:
            return
        comm, ops = got
        dtype, op, post = plan
        call = self.steady.bind(self._round_send, self._round_recv, self._rv.tail([cid]), comm,
                                dtype, ops[op])
        if call is None:
            return
        if len(self._steady) >= _STEADY_MAX:
            self._steady.clear()
            self._steady_names.clear()
        e = _Steady(cid, [cid], meta, resp, comm, call, dtype, post,
                    not host.backend.pooled(arr.nbytes))
        self._steady[cid] = self._steady_names[meta.name] = e

    def _steady_run(self, e: _Steady, arr: Any, out: Any,
                    make_request: Callable[[], Request]) -> Any:
        """Round and data for ``e`` as one call (the engine is idle and driven by this
        thread). Returns the result; or the handle of a request that became an ordinary hit
        of the round (a peer is late, or the round must wait: drive it); or None, nothing
        done, when the cache or the data plane changed since ``e`` was made."""
        cid = e.cid
        if not self.cache.current(cid, e.meta, e.resp) or e.resp.joined:
            return None
        host = self._host
        direct = host.backend.direct_allreduce(self._world, arr.nbytes)  # type: ignore[union-attr]
        if direct is None or direct[0] is not e.comm:
            return None  # (the hierarchical plane takes this size now: the general path)
        if out is None:
            if e.fresh:
                out = np.empty(arr.shape, e.dtype)
            else:
                out = host.backend.result_block(e.dtype, arr.size, arr)  # type: ignore[union-attr]
                if out.shape != arr.shape:
                    out = out.reshape(arr.shape)
        m = self.posted + 1
        self._round_hits = e.cids
        got = e.call(self._lists_before(m) if self.coordinator is not None else 0,
                     self._lists_executed, arr, out, arr.size)
        self.posted = m
        if got == STEADY_DONE:  # every rank offered it, and the data call ran
            self._rounds_executed += 1
            coord = self.coordinator
            if coord is not None and coord.hit_waits:
                coord.hit_done(e.meta.name)
            if e.post != 1.0:
                np.multiply(out, e.post, out=out, casting="unsafe")
            self.fast_count += 1
            return out
        if got == STEADY_NOT_READY:  # the completed round runs in order, this tensor a hit
            assert self._rv is not None
            self._rounds_ready.append(self._rv.unpack(self._round_recv, e.cids,
                                                      self._round_send))
        else:  # (STEADY_PENDING, token): the round is still in flight
            self._round_req = self.steady.pending(got[1])  # type: ignore[union-attr]
        request = make_request()
        self._pending_hit(cid, request, time.perf_counter())
        return request.handle

    def fast_queued(self, reqs: list[Request], idle: bool, executors: dict[str, Executor],
                    world: SetState) -> bool:
        """Queued allreduces of cached tensors on an idle engine (a step's gradients, a
        grouped call, async calls then synchronize; a data plane's tensors too: torch on
        NCCL or Gloo), without the cycle: one round offering just them, then their fused
        responses, each on its plane's executor (``executors``, by device). False (nothing
        done) when the path does not apply; True when the requests were executed or became
        ordinary hits of the round (drive them)."""
        if not self._can_skip_queue(idle):
            return False
        cids: list[int] = []
        lookup = self.cache.lookup
        for req in reqs:
            meta = req.meta
            if meta.kind != ALLREDUCE or (meta.device and meta.device not in executors):
                return False
            state, cid = lookup(meta)
            if state != HIT:
                return False
            cids.append(cid)
        if len(set(cids)) != len(cids):
            return False
        if self._round_alone(cids) is None:
            now = time.perf_counter()
            for cid, req in zip(cids, reqs, strict=True):
                self._pending_hit(cid, req, now)
            return True
        by_name = {req.meta.name: req for req in reqs}
        for resp in self.cache.responses(cids, self.cfg.fusion_threshold):
            executors[resp.device].allreduce(resp, [by_name[n] for n in resp.names], world)
        return True

    # -- the steady path of a batch ---------------------------------------------------------

    def steady_batch(self, metas: list[Meta], arrays: list[Any],
                     make_requests: Callable[[], list[Request]]) -> Any:
        """A batch of in-place host allreduces (``arrays[i]`` reduced into itself under
        ``metas[i]``, the API layer's checked requests, the same list object every step) on
        an idle engine, when every one is a cached tensor and together they are one fused
        response of the cache: the round offering just them and the fused data call as one
        call of the control plane (compiled where it can be), the arrays then holding the
        results. Returns True when done; the handle of ``make_requests()``'s requests, now
        ordinary hits of the posted round, when a peer has not offered them yet (it never
        waits for one: drive the handle); None, with nothing done, when the path does not
        apply. Same round, same fused response, same MPI calls and results as
        :meth:`fast_queued` (the fusion buffer's gaps are zeroed as the executor's are)."""
        if self.steady is None:
            return None
        progress = self._progress
        if not progress.begin_drive():
            return None
        try:
            run = self.run
            host = self._host
            idle = (not progress.queue and not self.dispatcher.inflight and run.fatal is None
                    and not run.stopped and host.timeline is None)  # type: ignore[union-attr]
            if not self._can_skip_queue(idle):
                return None
            e = self._batches.get(id(metas))
            cache = self.cache
            if (e is None or e.metas is not metas or e.generation != cache.generation
                    or e.threshold != self.cfg.fusion_threshold or not cache.enabled):
                e = self._make_batch(metas)
                if e is None:
                    return None
            direct = host.backend.direct_allreduce(  # type: ignore[union-attr]
                self._world, e.total * e.rdtype.itemsize)
            if direct is None or direct[0] is not e.comm:
                return None  # (the hierarchical plane takes this size now: the general path)
            buf = host._buffer(e.rdtype, e.total)  # type: ignore[union-attr]
            m = self.posted + 1
            self._round_hits = e.cids
            got = e.call(self._lists_before(m) if self.coordinator is not None else 0,
                         self._lists_executed, arrays, e.places, e.gaps, buf, e.total,
                         e.scale, e.post)
            self.posted = m
            if got == STEADY_DONE:  # every rank offered them, and the data call ran
                self._rounds_executed += 1
                coord = self.coordinator
                if coord is not None and coord.hit_waits:
                    for name in e.names:
                        coord.hit_done(name)
                self.fast_count += 1
                return True
            if got == STEADY_NOT_READY:  # the completed round runs in order, these hits
                assert self._rv is not None
                self._rounds_ready.append(self._rv.unpack(self._round_recv, e.cids,
                                                          self._round_send))
            else:  # (STEADY_PENDING, token): the round is still in flight
                self._round_req = self.steady.pending(got[1])
            reqs = make_requests()
            now = time.perf_counter()
            for cid, req in zip(e.cids, reqs, strict=True):
                self._pending_hit(cid, req, now)
            self._batch_wait = (e, arrays, reqs)
            return reqs[0].handle
        finally:
            progress.end_drive()

    def _make_batch(self, metas: list[Meta]) -> _Batch | None:
        """The steady path's constants for the batch of ``metas``; None (remembered until the
        cache changes) when it cannot take it: a tensor not cached, not one fused response,
        a conversion or prescale, no direct MPI call for it, or a factor on an integer type."""
        cache, threshold = self.cache, self.cfg.fusion_threshold
        key = id(metas)
        tried = self._batch_tried.get(key)
        state = (len(cache), cache.generation, threshold)
        if tried is not None and tried[0] is metas and tried[1:] == state:
            return None
        self._batches.pop(key, None)
        e = self._build_batch(metas, threshold)
        if len(self._batches) >= _STEADY_MAX:
            self._batches.clear()
            self._batch_tried.clear()
        if e is None:
            self._batch_tried[key] = (metas, *state)
        else:
            self._batches[key] = e
        return e

    def _build_batch(self, metas: list[Meta], threshold: int) -> _Batch | None:
        host, world, cache = self._host, self._world, self.cache
        assert self.steady is not None and self._rv is not None and host and world
        if len(metas) < 2 or not cache.enabled:
            return None
        cids: list[int] = []
        for meta in metas:
            state, cid = cache.lookup(meta)
            if state != HIT or meta.device:
                return None
            cids.append(cid)
        if len(set(cids)) != len(cids):
            return None
        resps = cache.responses(cids, threshold)
        if len(resps) != 1:
            return None
        resp = resps[0]
        plan = host.direct_plan(resp, world)
        direct = getattr(host.backend, "direct_allreduce", None)
        if plan is None or direct is None:
            return None
        dtype, op, post = plan
        scale = (0 if post == 1.0 else 1 if dtype == np.float32 else 2 if dtype == np.float64
                 else -1)
        if scale < 0:
            return None
        layout = fused_layout(resp.shapes, dtype.itemsize)
        if layout.total > _INT32_MAX:
            return None
        got = direct(world, layout.total * dtype.itemsize)
        if got is None:
            return None
        comm, ops = got
        call = self.steady.bind_batch(self._round_send, self._round_recv, self._rv.tail(cids),
                                      comm, dtype, ops[op])
        data = self.steady.bind_batch_data(comm, dtype, ops[op])
        if call is None or data is None:
            return None
        size = dtype.itemsize
        where = {name: j for j, name in enumerate(resp.names)}
        places = np.array([[layout.offsets[where[m.name]] * size,
                            layout.counts[where[m.name]] * size] for m in metas], np.int64)
        gaps = np.array([[(off + n) * size, gap * size] for off, n, gap
                         in zip(layout.offsets, layout.counts, layout.gaps, strict=True) if gap],
                        np.int64).reshape(-1, 2)
        return _Batch(metas, cids, [m.name for m in metas], cache.generation, threshold, comm,
                      call, data, dtype, layout.total, places, gaps, scale, post)

    def _batch_data(self, e: _Batch, arrays: list[Any], reqs: list[Request],
                    ready: list[int]) -> bool:
        """Execute a completed round whose ready ids are exactly the batch ``e`` that
        steady_batch left pending, through its data call (what executing the cache's fused
        response would do, in one call). False, nothing done, when anything changed."""
        if len(ready) != len(e.cids) or set(ready) != set(e.cids):
            return False
        hits = self._hits
        for cid, req in zip(e.cids, reqs, strict=True):
            if hits.get(cid) is not req:
                return False
        cache, host = self.cache, self._host
        assert host is not None
        if (not cache.enabled or e.generation != cache.generation
                or e.threshold != self.cfg.fusion_threshold or host.timeline is not None):
            return False
        direct = host.backend.direct_allreduce(self._world, e.total * e.rdtype.itemsize)
        if direct is None or direct[0] is not e.comm:
            return False
        since, inflight = self._hit_since, self.dispatcher.inflight
        for cid, name in zip(e.cids, e.names, strict=True):
            del hits[cid]
            del since[cid]
            inflight.pop((0, name), None)
        if self._hit_reported:
            self._hit_reported.difference_update(ready)
        coord = self.coordinator
        if coord is not None and coord.hit_waits:
            for name in e.names:
                coord.hit_done(name)
        try:
            e.data(arrays, e.places, e.gaps, host._buffer(e.rdtype, e.total), e.total,
                   e.scale, e.post)
        except BaseException:
            self.dispatcher.interrupted(reqs)
            raise
        for req in reqs:
            req.handle.set_part(req.part, req.tensor)
        return True
