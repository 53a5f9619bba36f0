"""The pipeline of a cached allreduce that a caller runs itself, and its routes (policies).

Every cached allreduce walks the same stages (the protocol: :mod:`hvdcore.engine.rounds`):

1. **match**: its requests' cache ids, by a cache lookup or from what the route kept about the
   tensor at its last call (a :class:`Plan`);
2. **round**: a round offering just them: posted alone and polled, or one steady call of the
   control plane that also makes the data call (:meth:`~RoundScheduler.post_alone`,
   :meth:`~RoundScheduler.steady_round`), a :class:`~hvdcore.engine.rounds.Stage`;
3. **data**: their (fused) responses on their planes;
4. **finish**: the result to the caller; or, when the round does not let the data run now, the
   requests become ordinary hits of it (the engine cycle completes them); or, when a data call
   raised, the one error policy (``Dispatcher.data_failed``: the requests get the error now,
   the engine goes on).

A :class:`Route` is a policy: which implementation of stages 2-3 runs on the caller's thread.
:meth:`Pipeline.walk` runs stages 2-4 for every route; the finish is written there once.

- ``blocking`` (``Engine.fast_allreduce``: a blocking call on an idle engine): match by a
  lookup; the round posted alone and polled; data: the plane's single call, which also keeps
  the tensor's steady constants for its next call;
- ``steady host`` (``steady_allreduce``, ``steady_start``: the API layer's same request
  again): match from what was kept; round and data as one steady call of the control plane
  (compiled where it can be: the round, then the direct allreduce); data: the scaling;
- ``steady plane`` (the same, for a data plane's tensor): match from what was kept; the steady
  call of the round alone; data: the plane's bound call;
- ``queued`` (``Engine.fast_queued``: ``synchronize`` of queued requests): match by lookups;
  the round posted alone and polled; data: each fused response on its plane;
- ``batch`` (``steady_batch``: a recurring batch of in-place arrays,
  :mod:`hvdcore.engine.steady_batch`): match from what was kept; round and fused data as one
  steady call; on a round that does not let it run, a hook runs its data when the cycle
  collects the round;
- the engine cycle (everything else): match by ``RoundScheduler.classify``, the round by
  ``advance``, data by ``Dispatcher.run_all``.

The engine cycle is the policy with no stage on the caller's thread (a waiting caller may run
the cycle itself: :mod:`hvdcore.engine.progress`); its bookkeeping after a round and its error
policy are the same functions (``RoundScheduler.complete``, ``Dispatcher.data_failed``, which
keeps the cycle's failed requests and raises after the round's other responses).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hvdcore.engine.cache import HIT, ResponseCache
from hvdcore.engine.executor import Executor
from hvdcore.engine.handle import one_request
from hvdcore.engine.messages import ALLREDUCE, Meta, Request, SetState
from hvdcore.engine.rounds import SKIPPED, WAITING, RoundScheduler, Stage

__all__ = ["Pipeline", "Route", "Plan"]

_KEPT = 4096  # cached tensors whose steady-call constants are kept
_INT32_MAX = (1 << 31) - 1

MakeRequests = Callable[[], list[Request]]
"""The requests of the call, made when a stage needs them (waiting, failed, general call)."""


@dataclass(slots=True)
class Plan:
    """What the match stage gives the others: the cache ids offered and their names."""

    cids: list[int]
    names: list[str]


@dataclass(slots=True)
class _Single(Plan):
    """A tensor the blocking route matched by a lookup this call."""

    meta: Meta
    executor: Executor  # its plane's
    resp: Any = None  # its cached response (the data stage reads it)


@dataclass(slots=True)
class _Queued(Plan):
    """Queued requests the queued route matched by lookups."""

    reqs: list[Request]


@dataclass(slots=True)
class _Kept(Plan):
    """What a steady route keeps about one cached tensor, whatever its plane."""

    cid: int
    meta: Meta  # the request the cache last matched (the API layer reuses it while it can)
    generation: int  # the cache's generation when this was made (a change voids it)


@dataclass(slots=True)
class _Steady(_Kept):
    """A host tensor's: round and data as one steady call."""

    routes: int  # the backend's ``routes`` when its direct call was asked (a change voids it)
    call: Callable[..., Any]  # the control plane's bound steady call
    dtype: np.dtype
    post: float  # postscale, divided by the set size for an average
    fresh: bool  # results are fresh arrays, not pooled memory (np.empty of the input's shape)


@dataclass(slots=True)
class _PlaneSteady(_Kept):
    """A data plane's tensor (torch on Gloo/NCCL): the round alone, then its plane's call."""

    round: Callable[..., Any]  # the control plane's bound round, alone
    executor: Executor  # the plane's
    resp: Any  # the cache's response for it
    call: Callable[[Any, Any], Any] | None  # its data call bound once (_bound_call)


@dataclass(frozen=True, slots=True)
class Route:
    """A policy of the pipeline: the implementation of each stage a caller's shortcut runs.

    ``round(plan, arr, out) -> Stage``; ``data(plan, arr, out)``: the result, or None when the
    plane declined its single call (the general call of the same response then runs: the plan
    has its ``executor`` and ``resp``); ``buffer(plan, arr)``: the result buffer when the
    caller gave none and the round's call writes it; ``waiting(plan, arr, requests)``: after
    the requests became hits of a round that did not let them run."""

    name: str
    round: Callable[[Any, Any, Any], Stage]
    data: Callable[[Any, Any, Any], Any]
    buffer: Callable[[Any, Any], Any] | None = None
    waiting: Callable[[Any, Any, list[Request]], None] | None = None


class Pipeline:
    """The caller-run pipeline of cached allreduces and its single-tensor and queued routes
    (the batch route: :mod:`hvdcore.engine.steady_batch`)."""

    def __init__(self, rounds: RoundScheduler, cache: ResponseCache,
                 executors: dict[str, Executor], world: SetState) -> None:
        self.rounds = rounds
        self.cache = cache
        self.dispatcher = rounds.dispatcher
        self.executors = executors  # by device ("" is the host plane; bindings add theirs)
        self.host = executors[""]
        self.world = world
        self._by_name: dict[str, _Steady] = {}
        self._planes: dict[str, _PlaneSteady] = {}
        self.blocking_route = Route("blocking", self._round_alone, self._single_data)
        self.host_route = Route("steady host", self._steady_round, self._scaled,
                                buffer=self._result_buffer)
        self.plane_route = Route("steady plane", self._plane_round, self._plane_data)
        self.queued_route = Route("queued", self._round_alone, self._fused_data)

    # -- stages 2-4, for every route ----------------------------------------------------------

    def walk(self, route: Route, plan: Plan, arr: Any, out: Any, make: MakeRequests) -> Any:
        """The round, data and finish stages of ``plan`` by ``route``. Returns the result; or
        the handle of ``make()``'s requests: ordinary hits of the round (it did not let their
        data run now: drive it), or failed by the error policy, or done by the general call;
        or None, nothing done, when the route does not apply now (SKIPPED)."""
        try:
            if out is None and route.buffer is not None:
                out = route.buffer(plan, arr)
            stage = route.round(plan, arr, out)
            if stage is SKIPPED:
                return None
            if stage is WAITING:
                reqs = make()
                self.rounds.complete(WAITING, plan.cids, plan.names, reqs)
                if route.waiting is not None:
                    route.waiting(plan, arr, reqs)
                return reqs[0].handle
            value = route.data(plan, arr, out)
        except Exception as exc:  # noqa: BLE001 - the requests' waiters get it
            # (a steady call's round already counted as run: RoundScheduler.steady_round)
            reqs = make()
            self.dispatcher.data_failed(reqs, exc, True)  # type: ignore[arg-type]
            return reqs[0].handle
        if value is None:  # the plane declined its single call: its general call, same data
            reqs = make()
            self._run(plan.executor, plan.resp, reqs)  # type: ignore[attr-defined,arg-type]
            return reqs[0].handle
        return value

    def _run(self, executor: Executor, resp: Any, reqs: list[Request | None]) -> None:
        """One response on ``executor``'s general call, under the caller's error policy (its
        requests get the error at once; the caller goes on)."""
        try:
            executor.allreduce(resp, reqs, self.world)
        except Exception as exc:  # noqa: BLE001 - each of its callers gets it
            self.dispatcher.data_failed(reqs, exc, True)

    # -- the entries: stage 1 (match), then walk ----------------------------------------------

    def steady(self, meta: Meta, arr: Any, out: Any) -> Any:
        """A repeated allreduce whose last call took a shortcut, again with the same request
        (``meta``, the object the API layer reuses), run by the caller as the engine's driver
        (:meth:`~hvdcore.engine.progress.Progress.run_alone`: the engine's
        ``steady_allreduce`` and ``steady_start``): the steady host or plane route (for a data
        plane's tensor, given as the binding's DeviceBuffer). Returns what :meth:`walk`
        returns; None, nothing done, when anything changed (take the general path)."""
        plane = meta.device
        e: Any = self._planes.get(meta.name) if plane else self._by_name.get(meta.name)
        if e is None or e.meta is not meta or e.generation != self.cache.generation:
            return None
        if plane:  # a binding's DeviceBuffers: the plane gets the framework tensors
            arr, out = arr.tensor, (None if out is None else out.tensor)
            return self.walk(self.plane_route, e, arr, out,
                             lambda: [one_request(meta, arr, out)])
        return self.walk(self.host_route, e, arr, out, lambda: [one_request(meta, arr, out)])

    def blocking(self, meta: Meta, arr: Any, out: Any, make: MakeRequests) -> Any:
        """A blocking allreduce of a cached tensor on an idle engine, without the queue (the
        caller drives the engine; ``arr``/``out``: its plane's buffers, a data plane's tensor
        as it is): a steady route when one kept this tensor, else the blocking route. Returns
        what :meth:`walk` returns; None when no route applies."""
        if meta.device:
            p = self._planes.get(meta.name)
            if p is not None and p.meta is meta and p.generation == self.cache.generation:
                got = self.walk(self.plane_route, p, arr, out, make)
                if got is not None:
                    return got
        if not self.rounds.idle():
            return None
        state, cid = self.cache.lookup(meta)
        if state != HIT:
            return None
        executor = self.executors.get(meta.device) if meta.device else self.host
        if executor is None:
            return None
        kept: Any = (self._planes if meta.device else self._by_name).get(meta.name)
        if kept is not None and kept.cid == cid:  # (a hit: its constants still hold)
            kept.meta, kept.generation = meta, self.cache.generation
            route = self.plane_route if meta.device else self.host_route
            got = self.walk(route, kept, arr, out, make)
            if got is not None:
                return got
        plan = _Single([cid], [meta.name], meta, executor)
        return self.walk(self.blocking_route, plan, arr, out, make)

    def queued(self, reqs: list[Request]) -> bool:
        """Queued allreduces of cached tensors on an idle engine, without the cycle: the
        queued route. False (nothing done) when it does not apply; True when the requests
        were executed, failed, or became ordinary hits of the round (drive them). A data call
        that raises fails its own requests; the other responses still run, as on the peers."""
        if not self.rounds.idle():
            return False
        cids: list[int] = []
        lookup, executors = self.cache.lookup, self.executors
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
        plan = _Queued(cids, [req.meta.name for req in reqs], reqs)
        self.walk(self.queued_route, plan, reqs, None, lambda: reqs)
        return True

    # -- the stages' implementations (the routes' policies) -----------------------------------

    def _round_alone(self, plan: Plan, arr: Any, out: Any) -> Stage:
        """A round offering just the plan's ids, posted and polled briefly (READY/WAITING)."""
        return self.rounds.post_alone(plan.cids)

    def _single_data(self, plan: _Single, arr: Any, out: Any) -> Any:
        """The tensor's single call on its plane; on success, the constants of its steady
        route are kept for the next call."""
        cid, ex = plan.cids[0], plan.executor
        resp = plan.resp = self.cache.responses(plan.cids, 0)[0]
        value = ex.allreduce_single(resp, arr, out, self.world)
        if value is not None:
            if ex is not self.host:
                self._remember_plane(cid, plan.meta, resp, ex)
            elif self.rounds.channel.calls is not None:  # type: ignore[union-attr]
                self._remember(cid, plan.meta, resp, arr)
        return value

    def _result_buffer(self, e: _Steady, arr: Any) -> Any:
        if e.fresh:
            return np.empty(arr.shape, e.dtype)
        out = self.host.backend.result_block(e.dtype, arr.size, arr)
        return out if out.shape == arr.shape else out.reshape(arr.shape)

    def _steady_round(self, e: _Steady, arr: Any, out: Any) -> Stage:
        """Round and data as one call (RAN), unless the host plane changed since ``e`` was
        made (the hierarchical plane may take this size now: SKIPPED, the general path)."""
        if self.host.backend.routes != e.routes:
            return SKIPPED
        return self.rounds.steady_round(e.cids, e.names, e.call, arr, out, arr.size)

    @staticmethod
    def _scaled(e: _Steady, arr: Any, out: Any) -> Any:
        if e.post != 1.0:
            np.multiply(out, e.post, out=out, casting="unsafe")
        return out

    def _plane_round(self, p: _PlaneSteady, arr: Any, out: Any) -> Stage:
        return self.rounds.steady_round(p.cids, p.names, p.round)

    def _plane_data(self, p: _PlaneSteady, arr: Any, out: Any) -> Any:
        call = p.call
        if call is not None:
            return call(arr, out)
        return p.executor.allreduce_single(p.resp, arr, out, self.world)

    def _fused_data(self, plan: _Queued, arr: Any, out: Any) -> bool:
        """Each fused response of the round on its plane's general call."""
        by_name = {req.meta.name: req for req in plan.reqs}
        executors, run = self.executors, self._run
        for resp in self.cache.responses(plan.cids, self.rounds.cfg.fusion_threshold):
            run(executors[resp.device], resp, [by_name[n] for n in resp.names])
        return True

    # -- what the steady routes keep (learned by the blocking route's data stage) -------------

    def _remember(self, cid: int, meta: Meta, resp: Any, arr: Any) -> None:
        """Keep what the steady call needs for ``cid``, when its data call is one direct MPI
        allreduce (the backend says; the executor's plan passes the tensor as it is)."""
        host = self.host
        if not host.backend.capabilities.direct_allreduce:
            return
        plan = host.direct_plan(resp, self.world)
        if plan is None or arr.size > _INT32_MAX:
            return
        got = host.backend.direct_allreduce(self.world, arr.nbytes)
        if got is None:
            return
        comm, ops = got
        dtype, op, post = plan
        bound = self.rounds.channel.bind([cid], comm, dtype, ops[op])  # type: ignore[union-attr]
        if bound is None:
            return
        if len(self._by_name) >= _KEPT:
            self._by_name.clear()
        self._by_name[meta.name] = _Steady([cid], [meta.name], cid, meta, self.cache.generation,
                                           host.backend.routes, bound[0], dtype, post,
                                           not host.backend.pooled(arr.nbytes))

    def _remember_plane(self, cid: int, meta: Meta, resp: Any, executor: Executor) -> None:
        """Keep what a data plane's tensor needs to skip the lookups: its id, response and
        executor, and the control plane's round for it alone (when there is one)."""
        call = self.rounds.channel.bind_round([cid])  # type: ignore[union-attr]
        if call is None:
            return
        if len(self._planes) >= _KEPT:
            self._planes.clear()
        self._planes[meta.name] = _PlaneSteady([cid], [meta.name], cid, meta,
                                               self.cache.generation, call, executor, resp,
                                               self._bound_call(executor, resp))

    def _bound_call(self, executor: Executor, resp: Any) -> Callable[[Any, Any], Any] | None:
        """``executor.allreduce_single`` for ``resp`` bound once where the plane's backend can
        bind its allreduce (``bound_allreduce``: torch.distributed's process-group call):
        ``call(tensor, out) -> result``, the same data call, scaling and result; else None.
        Valid while the engine is idle (no timeline), as the steady calls that use it are."""
        if not executor.backend.capabilities.bound_allreduce:
            return None
        plan = executor.direct_plan(resp, self.world)
        if plan is None:
            return None
        dtype, op, post = plan
        return executor.backend.bound_allreduce(self.world, op, post, dtype,
                                                tuple(resp.shapes[0]))
