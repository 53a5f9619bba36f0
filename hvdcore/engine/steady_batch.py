"""The batch route of the pipeline: a recurring batch of in-place host allreduces (a training
step's gradients) in one call.

A route of :mod:`hvdcore.engine.pipeline`: when every array is a cached tensor and together
they are one fused response of the cache, the round offering just them and the fused data call
(copies into the fusion buffer, the MPI allreduce, the copies back scaled as the executor
scales them) are one call of the control plane; the pipeline's walk does the rest (the
requests made when the round does not let them run, the error policy). Same round, same fused
response, same MPI calls and results as the queued route (the fusion buffer's gaps are zeroed
as the executor's are).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hvdcore.engine.cache import HIT, ResponseCache
from hvdcore.engine.executor import Executor
from hvdcore.engine.fusion import fused_layout
from hvdcore.engine.messages import Meta, Request, SetState
from hvdcore.engine.pipeline import Pipeline, Plan, Route
from hvdcore.engine.rounds import READY, RoundScheduler, Stage

__all__ = ["SteadyBatches"]

_KEPT = 4096  # batches whose constants are kept
_INT32_MAX = (1 << 31) - 1


@dataclass(slots=True)
class _Batch(Plan):
    """What the batch route keeps about one recurring batch of in-place allreduces (its
    ``cids``: the arrays' cache ids, in the API layer's order)."""

    metas: list[Meta]  # the API layer's checked requests, one per array, in its order
    generation: int  # the cache's generation when this was made
    threshold: int  # the fusion threshold then
    routes: int  # the backend's ``routes`` when its direct call was asked (a change voids it)
    call: Callable[..., Any]  # the control plane's bound batch call
    data: Callable[..., Any]  # its data part alone
    rdtype: np.dtype  # the fusion buffer's dtype
    total: int  # elements reduced
    places: np.ndarray  # (byte offset, byte length) of each array in the fusion buffer
    gaps: np.ndarray  # (byte offset, byte length) of the padding between them
    scale: int  # 0: results copied back; 1 / 2: multiplied by post as float32 / float64
    post: float


class SteadyBatches:
    """Batches of in-place host allreduces through one steady call."""

    def __init__(self, pipeline: Pipeline, rounds: RoundScheduler, cache: ResponseCache,
                 progress: Any, host: Executor, world: SetState) -> None:
        self.pipeline = pipeline
        self.route = Route("batch", self._round, _done, waiting=self._waiting)
        self.rounds = rounds
        self.cache = cache
        self.progress = progress
        self.host = host
        self.world = world
        self._batches: dict[int, _Batch | None] = {}  # by id() of the API layer's metas list
        self._tried: dict[int, tuple[list[Meta], int, int, int, int]] = {}
        # A batch whose round was still in flight when steady_batch returned: its arrays and
        # requests (pending hits), for the round's ready hook.
        self._wait: tuple[_Batch, list[Any], list[Request]] | None = None

    def steady_batch(self, metas: list[Meta], arrays: list[Any],
                     make_requests: Callable[[], list[Request]]) -> Any:
        """A batch of in-place host allreduces (``arrays[i]`` reduced into itself under
        ``metas[i]``, the API layer's checked requests, the same list object every step) on
        an idle engine. Returns True when done (the arrays hold the results); the handle of
        ``make_requests()``'s requests, now ordinary hits of the posted round, when a peer has
        not offered them yet (it never waits for one: drive the handle), or failed when the
        call raised (the pipeline's error policy); None, with nothing done, when the route
        does not apply."""
        ch = self.rounds.channel
        if ch is None or ch.calls is None:
            return None
        progress = self.progress
        if not progress.begin_drive():
            return None
        try:
            e = self._batches.get(id(metas))
            cache, host = self.cache, self.host
            if (e is None or e.metas is not metas or e.generation != cache.generation
                    or e.threshold != self.rounds.cfg.fusion_threshold or not cache.enabled
                    or e.routes != host.backend.routes):  # (hierarchical may take it now)
                e = self._make(metas)
                if e is None:
                    return None
            return self.pipeline.walk(self.route, e, arrays, None, make_requests)
        finally:
            progress.end_drive()

    def _round(self, e: _Batch, arrays: list[Any], out: Any) -> Stage:
        """Round and fused data as one steady call (RAN), or the round in flight (WAITING)."""
        return self.rounds.steady_round(
            e.cids, e.names, e.call, arrays, e.places, e.gaps,
            self.host.fusion_buffer(e.rdtype, e.total), e.total, e.scale, e.post)

    def _waiting(self, e: _Batch, arrays: list[Any], reqs: list[Request]) -> None:
        """The round did not let the batch run: its data runs when the cycle collects the
        round, if nothing changed (:meth:`_on_ready`)."""
        self._wait = (e, arrays, reqs)
        self.rounds.ready_hook = self._on_ready

    def _make(self, metas: list[Meta]) -> _Batch | None:
        """The constants for the batch of ``metas``; None (remembered until the cache changes)
        when the steady call cannot take it: a tensor not cached, not one fused response, a
        conversion or prescale, no direct MPI call for it, or a factor on an integer type."""
        cache, threshold = self.cache, self.rounds.cfg.fusion_threshold
        key = id(metas)
        tried = self._tried.get(key)
        state = (len(cache), cache.generation, threshold, self.host.backend.routes)
        if tried is not None and tried[0] is metas and tried[1:] == state:
            return None
        self._batches.pop(key, None)
        e = self._build(metas, threshold)
        if len(self._batches) >= _KEPT:
            self._batches.clear()
            self._tried.clear()
        if e is None:
            self._tried[key] = (metas, *state)
        else:
            self._batches[key] = e
        return e

    def _build(self, metas: list[Meta], threshold: int) -> _Batch | None:
        host, world, cache = self.host, self.world, self.cache
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
        if not host.backend.capabilities.direct_allreduce:
            return None
        plan = host.direct_plan(resp, world)
        if plan is None:
            return None
        direct = host.backend.direct_allreduce
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
        channel = self.rounds.channel
        if channel is None:
            return None
        bound = channel.bind(cids, comm, dtype, ops[op], batch=True)
        if bound is None:
            return None
        size = dtype.itemsize
        where = {name: j for j, name in enumerate(resp.names)}
        places = np.array([[layout.offsets[where[m.name]] * size,
                            layout.counts[where[m.name]] * size] for m in metas], np.int64)
        gaps = np.array([[(off + n) * size, gap * size] for off, n, gap
                         in zip(layout.offsets, layout.counts, layout.gaps, strict=True) if gap],
                        np.int64).reshape(-1, 2)
        return _Batch(cids, [m.name for m in metas], metas, cache.generation, threshold,
                      host.backend.routes, bound[0], bound[1], dtype,  # type: ignore[arg-type]
                      layout.total, places, gaps, scale, post)

    def _on_ready(self, ready: list[int], clean: bool) -> bool:
        """The round's ready hook while a batch waits: execute a completed round whose ready
        ids are exactly that batch through its data call (what executing the cache's fused
        response would do, in one call). False, nothing done, when anything changed."""
        wait, self._wait = self._wait, None
        if wait is None or not clean:
            return False
        e, arrays, reqs = wait
        if len(ready) != len(e.cids) or set(ready) != set(e.cids):
            return False
        waiting = self.rounds.hits.waiting
        for cid, req in zip(e.cids, reqs, strict=True):
            if waiting.get(cid) is not req:
                return False
        cache, host = self.cache, self.host
        if (not cache.enabled or e.generation != cache.generation
                or e.threshold != self.rounds.cfg.fusion_threshold or host.timeline is not None):
            return False
        if host.backend.routes != e.routes:
            return False
        rounds = self.rounds
        rounds.complete(READY, e.cids, e.names, reqs, alone=False)
        try:
            e.data(arrays, e.places, e.gaps, host.fusion_buffer(e.rdtype, e.total), e.total,
                   e.scale, e.post)
        except BaseException as exc:  # (the cycle runs this: its error policy)
            rounds.dispatcher.data_failed(reqs, exc, False)  # type: ignore[arg-type]
        for req in reqs:
            req.handle.set_part(req.part, req.tensor)
        return True


def _done(e: _Batch, arrays: list[Any], out: Any) -> bool:
    """The batch's data stage: nothing left (its data went with the round)."""
    return True
