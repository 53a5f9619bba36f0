"""Execution of data responses on one rank: fusion-buffer packing, backend call, unpacking.

dtype handling: float16 is reduced in a float32 buffer (MPI has no half type); bool is reduced
as uint8 with MAX (Sum/Max: logical or) or MIN (Min/Product: logical and). Averages and scale
factors on integer tensors are computed in floating point and truncated back to the dtype.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from hvdcore.engine.messages import ReduceOp, Response
from hvdcore.engine.timeline import Timeline

_POOL_MIN_BYTES = 32 << 10
_POOL_MAX_BYTES = 16 << 20
_POOL_BLOCKS = 4


@dataclass(slots=True)
class Request:
    """A submitted request on its rank: the meta, the input, where the result goes."""

    meta: Any  # hvdcore.engine.messages.Meta
    tensor: Any  # np.ndarray for data requests, None for control requests
    out: np.ndarray | None
    handle: Any  # hvdcore.engine.handle.Handle
    part: int
    t_submit: float = 0.0


@dataclass(slots=True)
class SetState:
    """A process set as seen by this rank."""

    set_id: int
    ranks: tuple[int, ...]
    comm: Any  # None when this rank is not a member

    @property
    def index(self) -> int:
        """This rank's position in the set (valid for members only)."""
        return self.comm.Get_rank()


@dataclass(slots=True, frozen=True)
class ReducePlan:
    """How allreduces of one (dtype, op) run, worked out once per pair."""

    dtype: np.dtype  # the tensors' dtype
    rdtype: np.dtype  # the dtype the reduction runs in (see reduce_dtype)
    op: str  # the backend's reduction
    is_bool: bool  # bool tensors: no scaling, logical reductions on uint8
    same: bool  # rdtype == dtype: results need no conversion

    @classmethod
    def build(cls, dtype_name: str, op: int) -> ReducePlan:
        """The plan for tensors of ``dtype_name`` reduced with ReduceOp ``op``."""
        dtype = np.dtype(dtype_name)
        rdtype = reduce_dtype(dtype)
        return cls(dtype, rdtype, backend_op(op, dtype), dtype == np.bool_, rdtype == dtype)


def reduce_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a tensor of ``dtype`` is reduced in."""
    if dtype == np.float16:
        return np.dtype(np.float32)
    if dtype == np.bool_:
        return np.dtype(np.uint8)
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


def _scale_into(dst: np.ndarray, src: np.ndarray, factor: float) -> None:
    """dst[...] = src * factor, converting dtype (truncating for integers)."""
    if factor == 1.0:
        np.copyto(dst, src, casting="unsafe")
    else:
        np.multiply(src, factor, out=dst, casting="unsafe")


class Executor:
    """Runs data responses on this rank with a backend; owns the fusion buffers."""

    def __init__(self, backend: Any, rank: int) -> None:
        self.backend = backend
        self.rank = rank
        self._fusion: dict[str, np.ndarray] = {}
        self._plans: dict[tuple[str, int], ReducePlan] = {}
        self._pool: dict[str, list[np.ndarray]] = {}
        self.timeline: Timeline | None = None

    def _buffer(self, dtype: np.dtype, count: int) -> np.ndarray:
        buf = self._fusion.get(dtype.str)
        if buf is None or buf.size < count:
            buf = np.empty(max(count, 1024), dtype=dtype)
            self._fusion[dtype.str] = buf
        return buf[:count]

    def _result_block(self, dtype: np.dtype, count: int) -> np.ndarray:
        """A fresh-looking 1-d array of ``count`` elements for results handed to the caller.

        Blocks of at least ``_POOL_MIN_BYTES`` are pooled: a block is reused once no result
        view of it is alive any more (its reference count shows that). Fresh memory is
        page-faulted in on first touch, which on a VM costs more than reducing it.
        """
        nbytes = count * dtype.itemsize
        if nbytes < _POOL_MIN_BYTES or nbytes > _POOL_MAX_BYTES:
            return np.empty(count, dtype=dtype)
        pool = self._pool.setdefault(dtype.str, [])
        for blk in pool:
            # references: the pool's list, the loop variable, getrefcount's argument
            if blk.size >= count and sys.getrefcount(blk) <= 3:
                return blk[:count]
        blk = np.empty(count, dtype=dtype)
        if len(pool) < _POOL_BLOCKS:
            pool.append(blk)
        return blk[:count]

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

    def allreduce_single(self, resp: Response, arr: np.ndarray, out: np.ndarray | None,
                         pset: SetState) -> np.ndarray | None:
        """One tensor's allreduce with nothing to convert, straight to the result array;
        None (nothing done) when the tensor needs the general path (float16, bool, prescale,
        joined ranks, a timeline)."""
        if resp.prescale != 1.0 or resp.joined or self.timeline is not None:
            return None
        plan = self._plans.get((resp.dtype, resp.op))
        if plan is None or plan.is_bool or not plan.same:
            return None  # (the first call of a dtype/op builds its plan on the general path)
        if out is None:
            out = self._result_block(plan.dtype, arr.size).reshape(arr.shape)
        self.backend.allreduce(pset.comm, arr, out, plan.op)
        post = resp.postscale
        if resp.op == ReduceOp.AVERAGE:
            post /= len(pset.ranks)
        if post != 1.0:
            np.multiply(out, post, out=out, casting="unsafe")
        return out

    def allreduce(self, resp: Response, reqs: list[Request | None], pset: SetState) -> None:
        """Execute a (possibly fused) allreduce; ``None`` entries are joined-rank neutrals."""
        if self.timeline is not None:
            self._negotiated(reqs, resp.names)
        key = (resp.dtype, resp.op)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = ReducePlan.build(resp.dtype, resp.op)
        dtype, rdtype, op, is_bool, same = (plan.dtype, plan.rdtype, plan.op, plan.is_bool,
                                            plan.same)
        if is_bool:
            pre = post = 1.0
        else:
            pre = resp.prescale
            post = resp.postscale
            if resp.op == ReduceOp.AVERAGE:
                # Horovod: joined ranks contribute zeros and still count (divide by set size)
                post /= len(pset.ranks)
        tl = self.timeline
        r0 = reqs[0]
        if len(reqs) == 1 and r0 is not None and same and pre == 1.0:
            src = r0.tensor
            out = r0.out if r0.out is not None else self._result_block(
                dtype, src.size).reshape(src.shape)
            if tl is None:
                self.backend.allreduce(pset.comm, src, out, op)
            else:
                t0 = tl.now_us()
                self.backend.allreduce(pset.comm, src, out, op)
                self._span(reqs, resp.names, "MPI_ALLREDUCE", t0, bytes=src.nbytes)
            if post != 1.0:
                np.multiply(out, post, out=out, casting="unsafe")
            r0.handle.set_part(r0.part, out)
            return
        sizes = [math.prod(s) for s in resp.shapes]
        total = sum(sizes)
        t0 = tl.now_us() if tl else 0.0
        # Results that need no conversion and go to no caller-given array are handed out as
        # views of a buffer of their own: one allocation instead of one per tensor (each of
        # those page-faults its fresh memory in; that cost more than the whole reduction).
        views = same and all(r is None or r.out is None for r in reqs)
        buf = self._result_block(rdtype, total) if views else self._buffer(rdtype, total)
        packing: list[Request | None] = reqs
        if same and pre == 1.0 and dtype != np.bool_ and None not in reqs:
            # One C-level copy of every tensor instead of a NumPy call per tensor.
            np.concatenate([r.tensor.reshape(-1) for r in reqs if r is not None], out=buf)
            packing = []
        off = 0
        for req, n in zip(packing, sizes, strict=False):
            dst = buf[off:off + n]
            if req is None:
                dst.fill(neutral(resp.op, dtype))
            else:
                src = req.tensor.reshape(-1)
                if dtype == np.bool_:
                    src = src.view(np.uint8)
                _scale_into(dst, src, pre)
            off += n
        if len(reqs) > 1 or rdtype != dtype or pre != 1.0:
            self._span(reqs, resp.names, "FUSE", t0, bytes=buf.nbytes)
        t1 = tl.now_us() if tl else 0.0
        self.backend.allreduce(pset.comm, buf, buf, op)
        self._span(reqs, resp.names, "MPI_ALLREDUCE", t1, bytes=buf.nbytes,
                   tensors=len(reqs))
        t2 = tl.now_us() if tl else 0.0
        off = 0
        if views:
            if post != 1.0:
                _scale_into(buf, buf, post)
            for req, n, shape in zip(reqs, sizes, resp.shapes, strict=True):
                if req is not None:
                    req.handle.set_part(req.part, buf[off:off + n].reshape(shape))
                off += n
            self._span(reqs, resp.names, "UNFUSE", t2, bytes=0)
            return
        for req, n, shape in zip(reqs, sizes, resp.shapes, strict=True):
            if req is not None:
                out = req.out if req.out is not None else np.empty(shape, dtype=dtype)
                flat = out.reshape(-1)
                if dtype == np.bool_:
                    flat = flat.view(np.uint8)
                _scale_into(flat, buf[off:off + n], post)
                req.handle.set_part(req.part, out)
            off += n
        self._span(reqs, resp.names, "UNFUSE", t2, bytes=buf.nbytes)

    # -- other collectives -------------------------------------------------------------------

    def allgather(self, resp: Response, req: Request, pset: SetState) -> None:
        """Concatenate every member's tensor along the first dimension."""
        self._negotiated([req], resp.names)
        dtype = np.dtype(resp.dtype)
        shape = resp.shapes[0]
        tail = tuple(shape[1:])
        row = int(np.prod(tail, dtype=np.int64)) * dtype.itemsize
        rows = resp.per_rank[0]
        out = np.empty((sum(rows), *tail), dtype=dtype)
        # explicit row count: reshape(-1, ...) is ambiguous (an error) when a trailing dim is 0
        src = (req.tensor.reshape((req.tensor.shape[0], *tail)) if req.tensor.ndim
               else req.tensor.reshape(1))
        t0 = self.timeline.now_us() if self.timeline else 0.0
        self.backend.allgatherv(pset.comm, src, out, [r * row for r in rows])
        self._span([req], resp.names, "MPI_ALLGATHER", t0, bytes=out.nbytes)
        req.handle.set_part(req.part, out)

    def broadcast(self, resp: Response, req: Request, pset: SetState) -> None:
        """Copy the root's tensor to every member (the root's input is never modified)."""
        self._negotiated([req], resp.names)
        root = pset.ranks.index(resp.root)
        src = req.tensor
        t0 = self.timeline.now_us() if self.timeline else 0.0
        if pset.index == root:
            self.backend.broadcast(pset.comm, src, root)
            if req.out is None:
                out = src.copy()
            else:
                out = req.out
                if out is not src:
                    np.copyto(out, src)
        else:
            out = req.out if req.out is not None else np.empty_like(src)
            self.backend.broadcast(pset.comm, out, root)
        self._span([req], resp.names, "MPI_BCAST", t0, bytes=src.nbytes)
        req.handle.set_part(req.part, out)

    def alltoall(self, resp: Response, req: Request, pset: SetState) -> None:
        """Scatter slices of the first dimension to every member; returns (out, recv_splits)."""
        self._negotiated([req], resp.names)
        dtype = np.dtype(resp.dtype)
        tail = tuple(req.tensor.shape[1:])
        row = int(np.prod(tail, dtype=np.int64)) * dtype.itemsize
        matrix = resp.per_rank[0]
        me = pset.index
        send_rows = matrix[me]
        recv_rows = [matrix[i][me] for i in range(len(matrix))]
        out = np.empty((sum(recv_rows), *tail), dtype=dtype)
        t0 = self.timeline.now_us() if self.timeline else 0.0
        self.backend.alltoallv(pset.comm, req.tensor, [r * row for r in send_rows], out,
                               [r * row for r in recv_rows])
        self._span([req], resp.names, "MPI_ALLTOALL", t0, bytes=out.nbytes)
        req.handle.set_part(req.part, (out, np.asarray(recv_rows, dtype=np.int32)))

    def reducescatter(self, resp: Response, req: Request, pset: SetState) -> None:
        """Reduce across members; member i receives its block of the first dimension."""
        self._negotiated([req], resp.names)
        dtype = np.dtype(resp.dtype)
        rdtype = reduce_dtype(dtype)
        shape = resp.shapes[0]
        n = len(pset.ranks)
        base, extra = divmod(shape[0], n)
        rows = [base + (1 if i < extra else 0) for i in range(n)]
        tail = tuple(shape[1:])
        per_row = int(np.prod(tail, dtype=np.int64))
        counts = [r * per_row for r in rows]
        op = backend_op(resp.op, dtype)
        post = resp.postscale / n if resp.op == ReduceOp.AVERAGE else resp.postscale
        pre = resp.prescale
        if dtype == np.bool_:
            pre = post = 1.0
        t0 = self.timeline.now_us() if self.timeline else 0.0
        src = req.tensor.reshape(-1)
        if dtype == np.bool_:
            src = src.view(np.uint8)
        if rdtype != dtype or pre != 1.0:
            tmp = np.empty(src.size, dtype=rdtype)
            _scale_into(tmp, src, pre)
            src = tmp
        recv = np.empty(counts[pset.index], dtype=rdtype)
        self.backend.reduce_scatter(pset.comm, src, recv, counts, op)
        out = np.empty((rows[pset.index], *tail), dtype=dtype)
        flat = out.reshape(-1)
        if dtype == np.bool_:
            flat = flat.view(np.uint8)
        _scale_into(flat, recv, post)
        self._span([req], resp.names, "MPI_REDUCESCATTER", t0, bytes=req.tensor.nbytes)
        req.handle.set_part(req.part, out)

    def barrier(self, resp: Response, req: Request, pset: SetState) -> None:
        """Wait for every member."""
        self._negotiated([req], resp.names)
        self.backend.barrier(pset.comm)
        req.handle.set_part(req.part, None)
