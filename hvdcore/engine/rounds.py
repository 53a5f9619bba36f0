"""The cache-round scheduler: response-cache hits, their rounds, and the one execution order.

Allreduces the ranks ran before are *hits* of the response cache: they skip the coordinator
and are agreed in non-blocking rounds (the protocol is described in
:mod:`hvdcore.engine.cache`). The scheduler also owns the queue of coordinator lists, because
lists and completed rounds must run in the one order every rank agrees on
(:meth:`RoundScheduler.drain`).

Every cached allreduce takes the same route: a round says it is ready on every rank, then its
(fused) cached response runs on its plane's executor. The engine cycle posts rounds for the
hits it collected (:meth:`RoundScheduler.advance`); a caller on an idle engine posts one for
its own tensors and, when every rank offered them at once, runs them itself (the routes of
:mod:`hvdcore.engine.pipeline` and :mod:`hvdcore.engine.steady_batch`). They share this
module's round primitives: :meth:`~RoundScheduler.idle` (the one rule for when a caller
may), :meth:`~RoundScheduler.post_alone` / :meth:`~RoundScheduler.steady_round` (post the
round), both returning a :class:`Stage`, and :meth:`~RoundScheduler.complete` (the one
bookkeeping after a round, whatever its route and outcome).

:class:`RoundChannel` is one rank's side of the rounds on the control plane: the two buffers of
the :class:`~hvdcore.engine.cache.RoundVector`, the round in flight, and the control plane's
steady calls bound to those buffers (a round and its data call as one call:
:mod:`hvdcore.backends.mpi_steady`).
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from hvdcore.backends import round_wire
from hvdcore.backends.round_wire import DONE, FLAG_JOINING, NOT_READY, Header
from hvdcore.engine.cache import HIT, STALE, ResponseCache, RoundVector
from hvdcore.engine.control import ControlChannel
from hvdcore.engine.dispatch import Dispatcher
from hvdcore.engine.hits import Hits
from hvdcore.engine.messages import ALLREDUCE, JOIN, SHUTDOWN, Request
from hvdcore.engine.progress import RunState

__all__ = ["RoundScheduler", "RoundChannel", "RoundResult", "Stage", "SKIPPED", "WAITING",
           "READY", "RAN"]

_NO_HEADER = Header()  # every rank but 0 posts it in every round: made once

RoundResult = tuple[Header, list[int], list[int]]
"""A reduced round: (its header, ready ids among this rank's hits, invalid ids)."""


class Stage(enum.IntEnum):
    """What the round stage of a cached allreduce did, on every route (a caller's blocking
    call, steady call, queued calls or batch, and the engine cycle): the one outcome that
    :meth:`RoundScheduler.post_alone` and :meth:`RoundScheduler.steady_round` return and
    :meth:`RoundScheduler.complete` takes. A data call that raises is not an outcome: it is
    an exception, handled by the one error policy
    (:meth:`~hvdcore.engine.dispatch.Dispatcher.data_failed`)."""

    SKIPPED = 0  #: nothing done: the route does not apply now (falsy: take the general path)
    WAITING = 1  #: the round is posted and does not let the data run now: its requests wait
    READY = 2  #: every rank offered the tensors: their data call runs next
    RAN = 3  #: round and data call ran (a round-only call: the round ran, data next)


SKIPPED, WAITING, READY, RAN = Stage.SKIPPED, Stage.WAITING, Stage.READY, Stage.RAN


class RoundChannel:
    """The round buffers, the outstanding round and the bound steady calls of one rank."""

    def __init__(self, capacity: int, plane: Any, hotpath: bool) -> None:
        self._vector = RoundVector(capacity)
        self._send = self._vector.buffer()
        self._recv = self._vector.buffer()
        self._plane = plane
        #: The ids this rank offered in the last round (a bound steady call offers its own:
        #: its caller sets this before making it).
        self.offered: list[int] = []
        self.request: Any = None  # the round in flight (an object with ``Test()``), or None
        #: The control plane's steady calls (compiled where they can be: HVDCORE_HOTPATH; the
        #: Gloo controller's in Python), or None where the plane has none.
        self._wait_s = plane.round_wait_s
        self.calls = plane.steady_calls(self._wait_s, hotpath)

    def post(self, header: Header, hits: list[int], invalid: Iterable[int]) -> None:
        """Post a round with ``header`` offering ``hits`` (and dropping ``invalid``)."""
        self.offered = hits
        self._vector.pack(self._send, header, hits, invalid)
        self.request = self._plane.start_round(self._send, self._recv)

    def test(self) -> RoundResult | None:
        """The outstanding round's result once it completed, else None. The peers are
        usually microseconds behind, and a non-blocking collective only advances inside MPI
        calls: the plane waits for it a moment (its ``wait_round`` for ``round_wait_s``)
        before giving up for now."""
        req = self.request
        if not req.Test() and not self._plane.wait_round(req, self._wait_s):
            return None
        self.request = None
        return self.result()

    def result(self) -> RoundResult:
        """The last completed round's result (for the ids this rank offered)."""
        return self._vector.unpack(self._recv, self.offered, self._send)

    def may_run(self, lists_done: int) -> bool:
        """Whether the last completed round lets the data of the ids this rank offered (and
        nothing else) run now: :func:`hvdcore.backends.round_wire.data_may_run`."""
        return round_wire.data_may_run(self._recv, self._send[round_wire.HEADER_BYTES:],
                                       lists_done)

    def bind_round(self, cids: list[int]) -> Callable[[int, int], Any] | None:
        """The round of a steady call alone, offering ``cids``, for a data call the caller
        makes itself (a data plane's tensor); None when the control plane has none."""
        calls = self.calls
        if calls is None:
            return None
        return calls.bind_round(self._send, self._recv, self._vector.tail(cids))

    def bind(self, cids: list[int], comm: Any, dtype: np.dtype, op: Any, batch: bool = False
             ) -> tuple[Callable[..., Any], Callable[..., Any] | None] | None:
        """The steady call offering ``cids`` with its data call on ``comm`` (and, for a batch,
        its data part alone); None when the control plane has none for this dtype."""
        calls = self.calls
        if calls is None:
            return None
        tail = self._vector.tail(cids)
        if not batch:
            call = calls.bind(self._send, self._recv, tail, comm, dtype, op)
            return None if call is None else (call, None)
        call = calls.bind_batch(self._send, self._recv, tail, comm, dtype, op)
        data = calls.bind_batch_data(comm, dtype, op)
        return None if call is None or data is None else (call, data)


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
        #: The round buffers, the round in flight and the steady calls (None: no cache).
        self.channel = RoundChannel(capacity, plane, cfg.hotpath) if capacity else None
        # Ordered execution: lists with their fences, completed rounds, how many of each ran
        self._lists: deque[tuple[int, list[Any]]] = deque()
        self._lists_executed = 0
        self._rounds_ready: deque[RoundResult] = deque()
        self._rounds_executed = 0
        self._last_fence = 0
        # fences of the lists rank 0 sent and no round has counted yet, run-length encoded
        # ([fence, lists]; fences never decrease): constant size while no round is posted
        self._sent_fences: deque[list[int]] = deque()
        self._lists_counted = 0
        self.hits = Hits()
        self._join_flag = False
        self._closing = False
        self.posted = 0  # rounds this rank has posted
        self.fast_count = 0  # rounds a caller ran itself (statistics for benchmarks)
        #: Called with the ready ids of the next completed round that carries anything, once
        #: (then reset): True when it executed them itself (a batch left pending by
        #: :mod:`hvdcore.engine.steady_batch`); its second argument: a clean round.
        self.ready_hook: Callable[[list[int], bool], bool] | None = None
        self._progress: Any = None
        self._timeline_of: Any = None
        self.tuner: Any = None  # rank 0 while autotuning: its Autotuner counts what runs

    def bind(self, progress: Any, host: Any) -> None:
        """The engine parts :meth:`idle` reads: who drives (``Progress``) and the host
        executor (whose timeline, when set, every call must go through)."""
        self._progress, self._timeline_of = progress, host

    # -- what the engine cycle calls --------------------------------------------------------

    def classify(self, req: Request, now: float) -> bool:
        """Look a new request up: True when it became a hit (then it is not announced)."""
        if self.channel is None:
            return False
        meta = req.meta
        if meta.kind == ALLREDUCE:
            state, cid = self.cache.lookup(meta)
            if state == HIT and cid not in self.hits.invalid:
                self.hits.add(cid, req, now)
                return True
            if state == STALE:
                self.hits.invalid.add(cid)  # every rank drops it after the next round
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

    def add_list(self, fence: int, responses: list[Any], sent: bool = False) -> None:
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
        return ((self.channel is not None and self.channel.request is not None)
                or bool(self._lists) or bool(self._rounds_ready))

    def advance(self) -> bool:
        """Collect a finished round, run what may run, post the next round; True if moved."""
        progressed = False
        ch = self.channel
        if ch is not None and ch.request is not None:
            progressed = self._test_round()
        if self._lists or self._rounds_ready:
            progressed |= self.drain()
        if ch is not None:
            if ch.request is None and not self._rounds_ready and not self.run.stopped:
                progressed |= self._maybe_post()
            if self.hits.waiting and not self.cfg.stall_check_disable:
                late = self.hits.late(time.perf_counter(),
                                      self.cfg.stall_check_time_seconds / 2)
                if late:  # (the coordinator's stall check names them)
                    self.control.report_waiting(late)
        return progressed

    def drop_hits(self) -> list[Request]:
        """Forget every waiting hit (for a fatal error); returns their requests."""
        self.ready_hook = None
        return self.hits.drop()

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
                if self.tuner is not None:  # (rank 0, while it tunes: counts what runs)
                    self.tuner = self.tuner.ran_list(responses)
                self.dispatcher.run_all(responses)
            elif self._rounds_ready and self._lists_executed >= self._rounds_ready[0][0].lists:
                # Counted before it runs, as a list is: when its data call raises (its
                # requests get the error, the engine goes on), the lists fenced after this
                # round must still run.
                self._rounds_executed += 1
                self._execute_round(*self._rounds_ready.popleft())
            else:
                break
            did = True
        return did

    def _maybe_post(self) -> bool:
        """Post the next round when this rank has hits to offer or a list needs one."""
        assert self.channel is not None
        hits = self.hits
        need = ((self._lists and self._lists[0][0] > self.posted) or self._join_flag
                or (not self._closing and (hits.waiting or hits.invalid)))
        if not need:
            return False
        m = self.posted + 1
        flags = FLAG_JOINING if self._join_flag else 0
        self._join_flag = False
        lists = self._lists_before(m)
        self.channel.post(Header(lists, flags) if lists or flags else _NO_HEADER,
                          list(hits.waiting), hits.invalid)
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
        result = self.channel.test()  # type: ignore[union-attr]
        if result is None:
            return False
        self._rounds_ready.append(result)
        return bool(result[0].flags or result[1] or result[2])

    def _execute_round(self, header: Header, ready: list[int], invalid: list[int]) -> None:
        flags = header.flags
        hook = self.ready_hook
        if hook is not None and (ready or invalid or flags):
            self.ready_hook = None
            if ready and hook(ready, not invalid and not flags):
                ready = []
        error: Exception | None = None
        if ready:
            responses = self.cache.responses(ready, self.cfg.fusion_threshold)
            self.complete(READY, ready, [n for r in responses for n in r.names], alone=False)
            # Every response of the round runs, as on the peers, even after one raised (the
            # first error is raised after the rest: Dispatcher.data_failed's policy).
            try:
                self.dispatcher.run_all(responses, cached=True)
            except Exception as exc:  # noqa: BLE001 - re-raised below, after the invalid ids
                error = exc
        for cid in invalid:
            self.cache.invalidate(cid)
            self.hits.invalid.discard(cid)
        if flags & FLAG_JOINING:
            self.cache.disable()
        demote = self.hits.demote(invalid, bool(flags & FLAG_JOINING))
        if demote:
            # Every rank drops these ids at this same point, so every rank that holds one
            # of them announces it now: the coordinator decides (and reports mismatches).
            self.control.announce([req.meta for req in demote])
        if error is not None:
            raise error

    # -- the round of a caller's own tensors (the shortcuts share these) -------------------

    def idle(self) -> bool:
        """The one rule for a caller's shortcut: True when it may post a round for its own
        cached tensors now. Nothing is queued, announced or waiting to run, no round is out,
        no join or shutdown is under way, no timeline is on (every call must then show its
        phases), no autotuned parameters wait to be sent, and the engine is healthy."""
        run = self.run
        return not (self.channel is None or self._progress.queue or self.dispatcher.inflight
                    or run.fatal is not None or run.stopped
                    or self._timeline_of.timeline is not None
                    or self.hits.waiting or self.hits.invalid or self.channel.request is not None
                    or self._rounds_ready or self._lists or self._join_flag or self._closing
                    or (self.coordinator and self.coordinator.params_due))

    def post_alone(self, cids: list[int]) -> Stage:
        """Post a round offering just ``cids`` (the engine is :meth:`idle`) and poll it
        briefly: READY when it completed with every id ready and nothing else to do
        (bookkeeping done: the caller runs their data); else WAITING (the caller makes its
        requests hits of it: :meth:`complete`)."""
        ch = self.channel
        assert ch is not None
        m = self.posted + 1
        lists = self._lists_before(m)
        ch.post(Header(lists) if lists else _NO_HEADER, cids, ())
        self.posted = m
        result = ch.test()
        if result is None:
            return WAITING
        if ch.may_run(self._lists_executed):  # (this rank's bits alone: no invalid id)
            self.complete(READY, cids,
                          [n for cid in cids if (n := self.cache.name_of(cid)) is not None])
            return READY
        self._rounds_ready.append(result)
        return WAITING

    def steady_round(self, cids: list[int], names: list[str], call: Callable[..., Any],
                     *args: Any) -> Stage:
        """A steady call (round and data as one: ``channel.bind``; or the round alone:
        ``channel.bind_round``) offering ``cids``, when the engine is :meth:`idle`: RAN when
        every rank offered them and the call ran (bookkeeping done); WAITING when the round
        did not let it run now (it completes in order: the caller makes its requests hits of
        it, :meth:`complete`); SKIPPED, nothing done, when the engine is not idle."""
        if not self.idle():
            return SKIPPED
        ch = self.channel
        assert ch is not None
        m = self.posted + 1
        lists = self._lists_before(m) if self.coordinator is not None else 0
        self.posted = m
        ch.offered = cids
        try:
            got = call(lists, self._lists_executed, *args)
        except BaseException:
            # Posted, and then an MPI call failed (the round's or the data's): counted as run,
            # so that the lists and rounds after it keep the order the peers keep.
            self.complete(RAN, cids, names)
            raise
        if got == DONE:
            self.complete(RAN, cids, names)
            return RAN
        if got == NOT_READY:  # completed: it runs in order, these ids then hits
            self._rounds_ready.append(ch.result())
        else:  # (PENDING, token): the round is in flight
            ch.request = ch.calls.pending(got[1])  # type: ignore[union-attr]
        return WAITING

    def complete(self, stage: Stage, cids: list[int], names: list[str],
                 reqs: list[Request] | None = None, alone: bool = True) -> None:
        """The one bookkeeping after the round stage of cached tensors ``cids`` (``names``),
        for every route. WAITING: ``reqs`` become ordinary hits of the round (in flight; it
        completes in order). READY or RAN of a caller's own round (``alone``): counted as
        executed (in order; also when its call raised). READY of a round the cycle collected:
        the hits of ``cids`` leave the table, and ``reqs``, when given (run by the caller),
        leave ``inflight``. Then (READY, RAN) the stall check no longer waits on ``names``,
        and the autotuner (rank 0, while it tunes) counts them."""
        if stage is WAITING:
            now = time.perf_counter()
            inflight, add = self.dispatcher.inflight, self.hits.add
            for cid, req in zip(cids, reqs, strict=True):  # type: ignore[arg-type]
                inflight[(0, req.meta.name)] = req
                add(cid, req, now)
            return
        if alone:
            self._rounds_executed += 1
            self.fast_count += 1
        else:
            self.hits.ready(cids)
            if reqs is not None:
                inflight = self.dispatcher.inflight
                for req in reqs:
                    inflight.pop((0, req.meta.name), None)
        coord = self.coordinator
        if coord is not None and coord.hit_waits:  # (checked here: the steady call's hot path)
            for name in names:
                coord.hit_done(name)
        if self.tuner is not None:
            self.tuner = self.tuner.ran(names, self.cache.nbytes(cids))
