"""Execution of data responses on one rank: fusion-buffer packing, backend call, unpacking.

One :class:`Executor` per data plane (the MPI backend for host buffers, and whatever a binding
registers, such as torch.distributed Gloo or NCCL): the executor does the same work for every
backend and touches buffers only through the backend's buffer operations, so fusion buffers
live on the backend's device and the engine never imports a framework.

dtype handling: the backend says which dtype a reduction runs in (MPI reduces float16 in a
float32 buffer: it has no half type); bool is reduced as uint8 with MAX (Sum/Max: logical or)
or MIN (Min/Product: logical and). Averages and scale factors on integer tensors are computed
in floating point and truncated back to the dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hvdcore.engine import adasum
from hvdcore.engine.fusion import ALIGNMENT, FusedLayout, fused_layout
from hvdcore.engine.handle import first, one_request
from hvdcore.engine.messages import ReduceOp, Request, Response, SetState
from hvdcore.engine.timeline import Timeline

# (Request, SetState, first and one_request are re-exported for code written against the
# engine before they moved to messages.py and handle.py.)
__all__ = ["Executor", "ReducePlan", "Request", "SetState", "first", "one_request", "postscale",
           "reduce_dtype", "backend_op", "neutral"]

_FUSED_PLANS_KEPT = 256  # distinct uncached fused shapes remembered (then forgotten at once)


def postscale(resp: Response, pset: SetState) -> float:
    """The factor an allreduce's result is multiplied by: the postscale factor, divided by
    the set size for an average (Horovod: joined ranks contribute zeros and still count)."""
    post = resp.postscale
    if resp.op == ReduceOp.AVERAGE:
        post /= len(pset.ranks)
    return post


@dataclass(slots=True, frozen=True)
class ReducePlan:
    """How allreduces of one (dtype, op) run, worked out once per pair."""

    dtype: np.dtype  # the tensors' dtype
    rdtype: np.dtype  # the dtype the reduction runs in (see reduce_dtype)
    op: str  # the backend's reduction
    is_bool: bool  # bool tensors: no scaling, logical reductions on uint8
    same: bool  # rdtype == dtype: results need no conversion

    @classmethod
    def build(cls, dtype_name: str, op: int, backend: Any) -> ReducePlan:
        """The plan for tensors of ``dtype_name`` reduced with ReduceOp ``op`` on ``backend``."""
        dtype = np.dtype(dtype_name)
        rdtype = reduce_dtype(dtype, backend)
        return cls(dtype, rdtype, backend_op(op, dtype), dtype == np.bool_, rdtype == dtype)


def reduce_dtype(dtype: np.dtype, backend: Any) -> np.dtype:
    """The dtype a tensor of ``dtype`` is reduced in on ``backend``."""
    if dtype == np.bool_:
        return np.dtype(np.uint8)
    if dtype == np.float16 and not backend.reduces_float16:
        return np.dtype(np.float32)
    return dtype


def backend_op(op: int, dtype: np.dtype) -> str:
    """The backend's reduction for a ReduceOp on ``dtype``."""
    if dtype == np.bool_:
        return "max" if op in (ReduceOp.SUM, ReduceOp.MAX) else "min"
    return {ReduceOp.AVERAGE: "sum", ReduceOp.SUM: "sum", ReduceOp.MIN: "min",
            ReduceOp.MAX: "max", ReduceOp.PRODUCT: "prod"}[ReduceOp(op)]


def neutral(op: int, dtype: np.dtype) -> Any:
    """The value a joined rank contributes so that it does not change the result."""
    if op in (ReduceOp.SUM, ReduceOp.AVERAGE):
        return 0
    if op == ReduceOp.PRODUCT:
        return 1
    if dtype.kind == "f":
        return np.inf if op == ReduceOp.MIN else -np.inf
    if dtype.kind == "b":
        return op == ReduceOp.MIN
    info = np.iinfo(dtype)
    return info.max if op == ReduceOp.MIN else info.min


class Executor:
    """Runs data responses on this rank with a backend; owns the fusion buffers."""

    def __init__(self, backend: Any, rank: int) -> None:
        self.backend = backend
        self.rank = rank
        # timeline spans are named after the backend operation, as Horovod's are
        self.prefix = backend.name.upper()
        self._fusion: dict[str, Any] = {}
        self._sizes: dict[str, int] = {}
        self._plans: dict[tuple[str, int], ReducePlan] = {}
        self._zeros: dict[str, Any] = {}
        # Fused plans by (dtype, shapes), for responses that are not cached (unnamed grouped
        # calls get a new response every time, with the same shapes step after step).
        self._fused_plans: dict[tuple[str, tuple[tuple[int, ...], ...]], Any] = {}
        self.timeline: Timeline | None = None

    def fusion_buffer(self, dtype: np.dtype, count: int) -> Any:
        """The fusion buffer of ``dtype`` (on the backend's device), ``count`` elements long."""
        buf = self._fusion.get(dtype.str)
        if buf is None or self._sizes[dtype.str] < count:
            size = max(count, 1024)
            buf = self._fusion[dtype.str] = self.backend.empty(dtype, (size,))
            self._sizes[dtype.str] = size
        return buf[:count]

    def _fused_plan(self, shapes: list[tuple[int, ...]], rdtype: np.dtype
                    ) -> tuple[FusedLayout, list[Any] | None]:
        """The layout of a fused buffer of ``shapes`` in ``rdtype``, and when it has gaps the
        list to concatenate into it: a slot for each tensor (even places), and zeros of the
        backend for each gap after it (odd places; empty where there is none)."""
        layout = fused_layout(shapes, rdtype.itemsize)
        if not layout.padded:
            return layout, None
        zeros = self._zeros.get(rdtype.str)
        if zeros is None:  # (kept: longer than any gap, which is under ALIGNMENT elements)
            zeros = self._zeros[rdtype.str] = self.backend.empty(rdtype, (ALIGNMENT,))
            self.backend.fill(zeros, 0)
        pieces: list[Any] = []
        for gap in layout.gaps[:-1]:
            pieces += [None, zeros[:gap]]
        return layout, [*pieces, None]

    def _plan(self, dtype: str, op: int) -> ReducePlan:
        plan = self._plans.get((dtype, op))
        if plan is None:
            plan = self._plans[(dtype, op)] = ReducePlan.build(dtype, op, self.backend)
        return plan

    def _span(self, reqs: list[Request | None], names: list[str], phase: str, t0: float,
              **args: object) -> None:
        tl = self.timeline
        if tl is None:
            return
        t1 = tl.now_us()
        for name in names:
            tl.span(name, phase, t0, t1, **args)

    def _negotiated(self, reqs: list[Request | None], names: list[str]) -> None:
        tl = self.timeline
        if tl is None:
            return
        now = tl.now_us()
        for req, name in zip(reqs, names, strict=True):
            if req is not None:
                tl.span(name, "NEGOTIATE", req.t_submit, now)

    # -- allreduce ---------------------------------------------------------------------------

    def direct_plan(self, resp: Response, pset: SetState) -> tuple[np.dtype, str, float] | None:
        """``(dtype, op, postscale)`` of the backend's allreduce when ``resp``'s tensor goes to
        it as it is (no conversion, no prescale, no joined rank); else None. The plan exists
        once the general path ran this dtype and op (the first call of each builds it)."""
        if resp.prescale != 1.0 or resp.joined:
            return None
        plan = self._plans.get((resp.dtype, resp.op))
        if plan is None or plan.is_bool or not plan.same:
            return None
        return plan.dtype, plan.op, postscale(resp, pset)

    def allreduce_single(self, resp: Response, arr: Any, out: Any,
                         pset: SetState) -> Any:
        """One tensor's allreduce with nothing to convert, straight to the result buffer
        (this plane's: a NumPy array on the host plane, a framework tensor on a binding's);
        None (nothing done) when the tensor needs the general path (float16, bool, prescale,
        joined ranks, a timeline). A caller's shortcut for one cached tensor."""
        plan = self.direct_plan(resp, pset) if self.timeline is None else None
        if plan is None:
            return None
        dtype, op, post = plan
        b = self.backend
        if out is None:
            shape = resp.shapes[0]
            out = b.result_block(dtype, math.prod(shape), arr).reshape(shape)
        b.allreduce(pset, arr, out, op)
        if post != 1.0:
            b.scale_into(out, out, post)
        return out

    def allreduce(self, resp: Response, reqs: list[Request | None], pset: SetState) -> None:
        """Execute a (possibly fused) allreduce; ``None`` entries are joined-rank neutrals."""
        if self.timeline is not None:
            self._negotiated(reqs, resp.names)
        if resp.op == ReduceOp.ADASUM:  # (hvdcore/engine/adasum.py)
            return adasum.execute(self, resp, reqs, pset)
        key = (resp.dtype, resp.op)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(resp.dtype, resp.op)
        dtype, rdtype, op, is_bool, same = (plan.dtype, plan.rdtype, plan.op, plan.is_bool,
                                            plan.same)
        if is_bool:
            pre = post = 1.0
        else:
            pre = resp.prescale
            post = postscale(resp, pset)
        b = self.backend
        tl = self.timeline
        r0 = reqs[0]
        if len(reqs) == 1 and r0 is not None and same and pre == 1.0:
            src = r0.tensor
            out = r0.out if r0.out is not None else b.result_block(
                dtype, math.prod(src.shape), src).reshape(src.shape)
            if tl is None:
                b.allreduce(pset, src, out, op)
            else:
                t0 = tl.now_us()
                b.allreduce(pset, src, out, op)
                self._span(reqs, resp.names, f"{self.prefix}_ALLREDUCE", t0,
                           bytes=math.prod(src.shape) * dtype.itemsize)
            if post != 1.0:
                b.scale_into(out, out, post)
            r0.handle.set_part(r0.part, out)
            return
        planned = resp.layout
        if planned is None:  # (a cached response runs again every step: worked out once)
            plan_key = (rdtype.str, tuple(resp.shapes))
            planned = self._fused_plans.get(plan_key)
            if planned is None:
                if len(self._fused_plans) >= _FUSED_PLANS_KEPT:
                    self._fused_plans.clear()
                planned = self._fused_plans[plan_key] = self._fused_plan(resp.shapes, rdtype)
            resp.layout = planned
        layout, pieces = planned
        total = layout.total
        nbytes = total * rdtype.itemsize
        t0 = tl.now_us() if tl else 0.0
        # Results that need no conversion and go to no caller-given array are handed out as
        # views of a buffer of their own: one allocation instead of one per tensor (each of
        # those page-faults its fresh memory in; that cost more than the whole reduction).
        views = same and all(r is None or r.out is None for r in reqs)
        buf = b.result_block(rdtype, total) if views else self.fusion_buffer(rdtype, total)
        packing: list[Request | None] = reqs
        srcs: list[Any] | None = None
        if same and pre == 1.0 and dtype != np.bool_ and None not in reqs:
            # One fused call reading the tensors where they are (the backend copies them in,
            # all at once or, on the hierarchical plane, straight into shared memory).
            srcs = [r.tensor.reshape(-1) for r in reqs if r is not None]
            if pieces is not None:  # the tensors between the gaps' zeros
                gapped = pieces.copy()
                gapped[::2] = srcs
                srcs = gapped
            packing = []
        # (elsewhere the gaps keep whatever the buffer held: reduced, never read)
        for req, off, n in zip(packing, layout.offsets, layout.counts, strict=False):
            dst = buf[off:off + n]
            if req is None:
                b.fill(dst, neutral(resp.op, dtype))
            else:
                src = req.tensor.reshape(-1)
                if is_bool:
                    src = b.as_uint8(src)
                b.scale_into(dst, src, pre)
        if len(reqs) > 1 or rdtype != dtype or pre != 1.0:
            self._span(reqs, resp.names, "FUSE", t0, bytes=nbytes)
        t1 = tl.now_us() if tl else 0.0
        if srcs is None:
            b.allreduce(pset, buf, buf, op)
        else:  # (its span includes copying the tensors in)
            b.allreduce_pieces(pset, srcs, buf, op)
        self._span(reqs, resp.names, f"{self.prefix}_ALLREDUCE", t1, bytes=nbytes,
                   tensors=len(reqs))
        t2 = tl.now_us() if tl else 0.0
        parts = zip(reqs, layout.offsets, layout.counts, resp.shapes, strict=True)
        if views:
            if post != 1.0:
                b.scale_into(buf, buf, post)
            for req, off, n, shape in parts:
                if req is not None:
                    req.handle.set_part(req.part, buf[off:off + n].reshape(shape))
            self._span(reqs, resp.names, "UNFUSE", t2, bytes=0)
            return
        for req, off, n, shape in parts:
            if req is not None:
                out = req.out if req.out is not None else b.empty(dtype, shape)
                flat = out.reshape(-1)
                if is_bool:
                    flat = b.as_uint8(flat)
                b.scale_into(flat, buf[off:off + n], post)
                req.handle.set_part(req.part, out)
        self._span(reqs, resp.names, "UNFUSE", t2, bytes=nbytes)

    # -- other collectives -------------------------------------------------------------------

    def allgather(self, resp: Response, req: Request, pset: SetState) -> None:
        """Concatenate every member's tensor along the first dimension."""
        self._negotiated([req], resp.names)
        dtype = np.dtype(resp.dtype)
        shape = resp.shapes[0]
        tail = tuple(shape[1:])
        row = math.prod(tail) * dtype.itemsize
        rows = resp.per_rank[0]
        out = self.backend.empty(dtype, (sum(rows), *tail))
        # explicit row count: reshape(-1, ...) is ambiguous (an error) when a trailing dim is 0
        src = (req.tensor.reshape((req.tensor.shape[0], *tail)) if req.tensor.ndim
               else req.tensor.reshape(1))
        t0 = self.timeline.now_us() if self.timeline else 0.0
        self.backend.allgatherv(pset, src, out, [r * row for r in rows])
        self._span([req], resp.names, f"{self.prefix}_ALLGATHER", t0,
                   bytes=sum(rows) * row)
        req.handle.set_part(req.part, out)

    def broadcast(self, resp: Response, req: Request, pset: SetState) -> None:
        """Copy the root's tensor to every member (the root's input is never modified)."""
        self._negotiated([req], resp.names)
        b = self.backend
        root = pset.ranks.index(resp.root)
        src = req.tensor
        t0 = self.timeline.now_us() if self.timeline else 0.0
        if pset.index == root:
            b.broadcast(pset, src, root)
            out = req.out if req.out is not None else b.empty(np.dtype(resp.dtype), src.shape)
            if out is not src:
                b.scale_into(out, src, 1.0)
        else:
            out = req.out if req.out is not None else b.empty(np.dtype(resp.dtype), src.shape)
            b.broadcast(pset, out, root)
        self._span([req], resp.names, f"{self.prefix}_BCAST", t0,
                   bytes=math.prod(src.shape) * np.dtype(resp.dtype).itemsize)
        req.handle.set_part(req.part, out)

    def alltoall(self, resp: Response, req: Request, pset: SetState) -> None:
        """Scatter slices of the first dimension to every member; returns (out, recv_splits)."""
        self._negotiated([req], resp.names)
        dtype = np.dtype(resp.dtype)
        tail = tuple(req.tensor.shape[1:])
        row = math.prod(tail) * dtype.itemsize
        matrix = resp.per_rank[0]
        me = pset.index
        send_rows = matrix[me]
        recv_rows = [matrix[i][me] for i in range(len(matrix))]
        out = self.backend.empty(dtype, (sum(recv_rows), *tail))
        t0 = self.timeline.now_us() if self.timeline else 0.0
        self.backend.alltoallv(pset, req.tensor, [r * row for r in send_rows], out,
                               [r * row for r in recv_rows])
        self._span([req], resp.names, f"{self.prefix}_ALLTOALL", t0,
                   bytes=sum(recv_rows) * row)
        req.handle.set_part(req.part, (out, np.asarray(recv_rows, dtype=np.int32)))

    def reducescatter(self, resp: Response, req: Request, pset: SetState) -> None:
        """Reduce across members; member i receives its block of the first dimension."""
        self._negotiated([req], resp.names)
        b = self.backend
        plan = self._plan(resp.dtype, resp.op)
        dtype, rdtype, op = plan.dtype, plan.rdtype, plan.op
        shape = resp.shapes[0]
        n = len(pset.ranks)
        base, extra = divmod(shape[0], n)
        rows = [base + (1 if i < extra else 0) for i in range(n)]
        tail = tuple(shape[1:])
        per_row = math.prod(tail)
        counts = [r * per_row for r in rows]
        post = resp.postscale / n if resp.op == ReduceOp.AVERAGE else resp.postscale
        pre = resp.prescale
        if plan.is_bool:
            pre = post = 1.0
        t0 = self.timeline.now_us() if self.timeline else 0.0
        src = req.tensor.reshape(-1)
        if plan.is_bool:
            src = b.as_uint8(src)
        if rdtype != dtype or pre != 1.0:
            tmp = b.empty(rdtype, (math.prod(shape),))
            b.scale_into(tmp, src, pre)
            src = tmp
        recv = b.empty(rdtype, (counts[pset.index],))
        b.reduce_scatter(pset, src, recv, counts, op)
        out = b.empty(dtype, (rows[pset.index], *tail))
        flat = out.reshape(-1)
        if plan.is_bool:
            flat = b.as_uint8(flat)
        b.scale_into(flat, recv, post)
        self._span([req], resp.names, f"{self.prefix}_REDUCESCATTER", t0,
                   bytes=math.prod(shape) * dtype.itemsize)
        req.handle.set_part(req.part, out)

    def barrier(self, resp: Response, req: Request, pset: SetState) -> None:
        """Wait for every member."""
        self._negotiated([req], resp.names)
        self.backend.barrier(pset)
        req.handle.set_part(req.part, None)
