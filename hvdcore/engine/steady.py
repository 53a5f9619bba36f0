"""Cached allreduces a caller runs itself on an idle engine: the shortcuts of the one route.

Every cached allreduce takes one route (:mod:`hvdcore.engine.rounds`): a round says it is
ready on every rank, its cached response runs on its plane's executor. When the engine is
idle (:meth:`~hvdcore.engine.rounds.RoundScheduler.idle`), the caller's thread walks that
route itself, without the queue and the engine cycle:

- :meth:`SteadyPath.fast_allreduce`: a blocking call: a round offering just this tensor,
  then its response on the executor (``Executor.allreduce_single`` for a host tensor);
- :meth:`SteadyPath.steady_stage` (the engine's ``steady_allreduce`` and ``steady_start``,
  run by :meth:`~hvdcore.engine.progress.Progress.run_alone`): the same call again with the
  request the API layer reuses. A host tensor whose data call is one direct MPI allreduce
  makes round and data as one call of the control plane (compiled where it can be,
  :mod:`hvdcore.backends.mpi_steady`); a data plane's tensor makes the round alone, then the
  plane's call bound once;
- :meth:`SteadyPath.fast_queued`: queued calls (a step's gradients, a grouped call, async
  then synchronize; a data plane's tensors too): one round, then their fused responses on
  their planes' executors.

When a peer has not offered the tensors yet, the requests become ordinary hits of the posted
round (the engine cycle, or the caller driving it, completes them): same round, same
responses, same data calls and results on every path. Batches of in-place arrays have their
own steady call (:mod:`hvdcore.engine.steady_batch`).
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
from hvdcore.engine.rounds import RAN, SKIPPED, WAITING, RoundScheduler

__all__ = ["SteadyPath"]

_KEPT = 4096  # cached tensors whose steady-call constants are kept
_INT32_MAX = (1 << 31) - 1


@dataclass(slots=True)
class _Kept:
    """What a shortcut keeps about one cached tensor, whatever its plane."""

    cid: int
    cids: list[int]
    names: list[str]
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


class SteadyPath:
    """The caller-run shortcuts for cached single tensors and queued requests."""

    def __init__(self, rounds: RoundScheduler, cache: ResponseCache, progress: Any,
                 executors: dict[str, Executor], world: SetState) -> None:
        self.rounds = rounds
        self.cache = cache
        self.progress = progress
        self.executors = executors  # by device ("" is the host plane; bindings add theirs)
        self.host = executors[""]
        self.world = world
        self._by_name: dict[str, _Steady] = {}
        self._planes: dict[str, _PlaneSteady] = {}

    # -- a blocking call ----------------------------------------------------------------------

    def fast_allreduce(self, meta: Meta, arr: Any, out: Any,
                       make_request: Callable[[], Request]) -> Any:
        """A blocking allreduce of a cached tensor on an idle engine, without the queue (the
        caller drives the engine): the round, then its response on the tensor's plane
        (``arr``/``out``: that plane's buffers, a data plane's tensor as it is). Returns the
        result; or a handle, done (the general executor ran it) or an ordinary pending hit (a
        peer is late, or the round must wait: drive it); or None when the shortcut does not
        apply."""
        rounds = self.rounds
        if meta.device:
            p = self._planes.get(meta.name)
            if p is not None and p.meta is meta and p.generation == self.cache.generation:
                got = self._plane_run(p, arr, out, make_request)
                if got is not None:
                    return got
        if not rounds.idle():
            return None
        state, cid = self.cache.lookup(meta)
        if state != HIT:
            return None
        executor = self.executors.get(meta.device) if meta.device else self.host
        if executor is None:
            return None
        if meta.device:
            p = self._planes.get(meta.name)
            if p is not None and p.cid == cid:  # (a hit: its constants still hold)
                p.meta, p.generation = meta, self.cache.generation
                got = self._plane_run(p, arr, out, make_request)
                if got is not None:
                    return got
        entry = None if meta.device else self._by_name.get(meta.name)
        if entry is not None and entry.cid == cid:  # (a hit: its constants still hold)
            entry.meta, entry.generation = meta, self.cache.generation
            got = self._steady_run(entry, arr, out, make_request)
            if got is not None:
                return got
        if rounds.post_alone([cid]) is WAITING:
            return self._wait([cid], [meta.name], make_request)
        resp = self.cache.responses([cid], 0)[0]
        value = executor.allreduce_single(resp, arr, out, self.world)
        if value is not None:
            if executor is not self.host:
                self._remember_plane(cid, meta, resp, executor)
            elif rounds.channel.calls is not None:  # type: ignore[union-attr]
                self._remember(cid, meta, resp, arr)
            return value
        return self._general(executor, resp, make_request)

    def steady_stage(self, meta: Meta, arr: Any, out: Any) -> Any:
        """A repeated allreduce whose last call took the fast path, again with the same
        request (``meta``, the object the API layer reuses), run by the caller as the
        engine's driver (:meth:`~hvdcore.engine.progress.Progress.run_alone`: the engine's
        ``steady_allreduce`` and ``steady_start``): the round and the data call as one call of
        the control plane (for a data plane's tensor, given as the binding's DeviceBuffer: the
        round alone, then the plane's bound call). Returns the result; or the handle of a
        request that became an ordinary pending hit (a peer has not offered it yet); or None,
        nothing done, when anything changed (the caller takes the general path). Same
        protocol, MPI calls and results as :meth:`fast_allreduce`."""
        plane = meta.device
        e: Any = self._planes.get(meta.name) if plane else self._by_name.get(meta.name)
        if e is None or e.meta is not meta or e.generation != self.cache.generation:
            return None
        if plane:  # a binding's DeviceBuffers: the plane gets the framework tensors
            arr, out = arr.tensor, (None if out is None else out.tensor)
            return self._plane_run(e, arr, out, lambda: one_request(meta, arr, out))
        return self._steady_run(e, arr, out, lambda: one_request(meta, arr, out))

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
        bound = self.rounds.channel.bind([cid], comm, dtype, ops[op])
        if bound is None:
            return
        if len(self._by_name) >= _KEPT:
            self._by_name.clear()
        self._by_name[meta.name] = _Steady(cid, [cid], [meta.name], meta,
                                           self.cache.generation, host.backend.routes,
                                           bound[0], dtype, post,
                                           not host.backend.pooled(arr.nbytes))

    def _remember_plane(self, cid: int, meta: Meta, resp: Any, executor: Executor) -> None:
        """Keep what a data plane's tensor needs to skip the lookups: its id, response and
        executor, and the control plane's round for it alone (when there is one)."""
        call = self.rounds.channel.bind_round([cid])  # type: ignore[union-attr]
        if call is None:
            return
        if len(self._planes) >= _KEPT:
            self._planes.clear()
        self._planes[meta.name] = _PlaneSteady(cid, [cid], [meta.name], meta,
                                               self.cache.generation, call, executor, resp,
                                               self._bound_call(executor, resp))

    def _bound_call(self, executor: Executor, resp: Any) -> Callable[[Any, Any], Any] | None:
        """``executor.allreduce_single`` for ``resp`` bound once where the plane's backend can
        bind its allreduce (``bound_allreduce``: torch.distributed's process-group call):
        ``call(tensor, out) -> result``, the same data call, scaling and result; else None.
        Valid while the engine is idle (no timeline), as the steady calls that use it are."""
        if not executor.backend.capabilities.bound_allreduce:
            return None
        bind = executor.backend.bound_allreduce
        plan = executor.direct_plan(resp, self.world)
        if plan is None:
            return None
        dtype, op, post = plan
        return bind(self.world, op, post, dtype, tuple(resp.shapes[0]))

    def _plane_run(self, p: _PlaneSteady, arr: Any, out: Any,
                   make_request: Callable[[], Request]) -> Any:
        """The round alone for ``p`` (one call of the control plane), then its plane's data
        call: the result; or a handle (a pending hit, or the general executor's request);
        or None, nothing done, when the engine is not idle."""
        rounds = self.rounds
        got = rounds.steady_round(p.cids, p.names, p.round)
        if got is RAN:
            call = p.call
            value = (call(arr, out) if call is not None
                     else p.executor.allreduce_single(p.resp, arr, out, self.world))
            if value is not None:
                return value
        elif got is SKIPPED:
            return None
        if got is WAITING:
            return self._wait(p.cids, p.names, make_request)
        return self._general(p.executor, p.resp, make_request)  # (the plan changed since)

    def _steady_run(self, e: _Steady, arr: Any, out: Any,
                    make_request: Callable[[], Request]) -> Any:
        """Round and data for ``e`` as one call. Returns the result; or the handle of a
        request that became an ordinary hit of the round (a peer is late, or the round must
        wait: drive it); or None, nothing done, when the engine is not idle or the data
        plane changed since ``e`` was made."""
        host = self.host
        if host.backend.routes != e.routes:
            return None  # (the hierarchical plane may take this size now: the general path)
        if out is None:
            if e.fresh:
                out = np.empty(arr.shape, e.dtype)
            else:
                out = host.backend.result_block(e.dtype, arr.size, arr)
                if out.shape != arr.shape:
                    out = out.reshape(arr.shape)
        got = self.rounds.steady_round(e.cids, e.names, e.call, arr, out, arr.size)
        if got is RAN:
            if e.post != 1.0:
                np.multiply(out, e.post, out=out, casting="unsafe")
            return out
        if got is SKIPPED:
            return None
        return self._wait(e.cids, e.names, make_request)

    # -- the stages after the round, once for the single-tensor routes ------------------------

    def _wait(self, cids: list[int], names: list[str],
              make_request: Callable[[], Request]) -> Any:
        """The round did not let the data run now (WAITING): the request becomes an ordinary
        hit of it (the engine cycle, or the caller driving it, completes it); its handle."""
        request = make_request()
        self.rounds.complete(WAITING, cids, names, [request])
        return request.handle

    def _general(self, executor: Executor, resp: Any,
                 make_request: Callable[[], Request]) -> Any:
        """The data stage on ``executor``'s general call (same data call and results as the
        single-tensor one, which declined), with the caller's error policy (its request
        gets the error at once); the request's handle."""
        request = make_request()
        try:
            executor.allreduce(resp, [request], self.world)
        except Exception as exc:  # noqa: BLE001 - the request's waiter gets it
            self.rounds.dispatcher.data_failed([request], exc, True)
        return request.handle

    # -- queued calls -------------------------------------------------------------------------

    def fast_queued(self, reqs: list[Request]) -> bool:
        """Queued allreduces of cached tensors on an idle engine, without the cycle: one
        round offering just them, then their fused responses, each on its plane's executor.
        False (nothing done) when the shortcut does not apply;
        True when the requests were executed or became ordinary hits of the round (drive
        them). A data call that raises fails its own requests; the other responses still
        run, as on the peers."""
        rounds, executors = self.rounds, self.executors
        if not rounds.idle():
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
        if rounds.post_alone(cids) is WAITING:
            rounds.complete(WAITING, cids, [req.meta.name for req in reqs], reqs)
            return True
        by_name = {req.meta.name: req for req in reqs}
        failed = rounds.dispatcher.data_failed
        for resp in self.cache.responses(cids, self.rounds.cfg.fusion_threshold):
            mine: list[Request | None] = [by_name[n] for n in resp.names]
            try:
                executors[resp.device].allreduce(resp, mine, self.world)
            except Exception as exc:  # noqa: BLE001 - each of its callers gets it
                failed(mine, exc, True)
        return True
