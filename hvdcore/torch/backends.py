"""torch.distributed as engine data planes: Gloo for CPU tensors, NCCL/RCCL for device tensors.

:class:`TorchBackend` implements :class:`hvdcore.backends.base.Backend` on torch tensors, so the
engine negotiates, fuses (fusion buffers on the tensors' device), orders, stall-checks and
times device collectives exactly as it does host ones; only the transport differs. One
torch.distributed group per hvdcore process set (the default group for the global set), made
when the engine registers the set, on every rank in the same order.

Streams (CUDA/ROCm): every operation of the backend runs on one side stream of its device. A
submission makes that stream wait for the caller's current stream (:meth:`TorchBackend.prepare`),
so the collective reads what the caller's kernels wrote; delivering a result makes the caller's
current stream wait for the side stream (:meth:`TorchBackend.deliver`). Neither blocks the host,
and ``record_stream`` keeps the caching allocator from reusing memory a stream still uses.

Example (what ``hvdcore.torch.init()`` does with ``HVDCORE_CPU_OPERATIONS=gloo``)::

    backend = TorchBackend("gloo", torch.device("cpu"))
    engine.register_backend("gloo", backend)
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hvdcore.backends.base import PLAIN, PlaneCapabilities, displacements
from hvdcore.backends.pool import ResultPool

__all__ = ["TorchBackend", "CudaAwareMPIBackend", "TORCH_DTYPES"]

TORCH_DTYPES: dict[np.dtype, torch.dtype] = {
    np.dtype(np.uint8): torch.uint8, np.dtype(np.int8): torch.int8,
    np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64,
    np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64, np.dtype(np.bool_): torch.bool,
}
"""The core's dtypes and the torch dtype each stands for on the device path."""

_OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
        "prod": dist.ReduceOp.PRODUCT}

# torch 2.13 renamed the tensor-to-tensor collectives; older releases have the old names only
_ALLGATHER_INTO = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class TorchBackend:
    """A :class:`~hvdcore.backends.base.Backend` over torch.distributed for tensors on
    ``device`` (``name``: "gloo", "nccl" or "rccl", which names the timeline spans).

    ``calls`` counts the collectives issued, by kind (tests use it to see fusion at work).
    """

    reduces_float16 = True
    capabilities = PlaneCapabilities(bound_allreduce=True)
    routes = 0

    def __init__(self, name: str, device: torch.device, group_backend: str | None = None
                 ) -> None:
        self.name = name
        self.key = name  # the engine's name for this data plane (Meta.device)
        self.device = device
        self.group_backend = group_backend
        self.calls: Counter[str] = Counter()
        self._groups: dict[int, Any] = {}
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._pool = ResultPool() if device.type == "cpu" else None

    # -- streams (no-ops on CPU) -----------------------------------------------------------

    def _on_stream(self) -> Any:
        if self.stream is None:
            return contextlib.nullcontext()
        return torch.cuda.stream(self.stream)

    def prepare(self, tensor: torch.Tensor) -> None:
        """At submission, on the caller's thread: the backend's stream waits for the caller's
        current stream, and ``tensor``'s memory is kept until the backend is done with it."""
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            tensor.record_stream(self.stream)

    def deliver(self, tensor: torch.Tensor) -> torch.Tensor:
        """On the caller's thread, before a result is handed over: the caller's current stream
        waits for the backend's work; returns ``tensor``."""
        if self.stream is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self.stream)
            tensor.record_stream(current)
        return tensor

    # -- process sets ----------------------------------------------------------------------

    def add_set(self, pset: Any) -> None:
        """Make the set's group (collective over the default group: every rank calls it)."""
        if pset.set_id == 0:
            self._groups[0] = None  # the default group
            return
        self._groups[pset.set_id] = dist.new_group(ranks=list(pset.ranks),
                                                   backend=self.group_backend)

    def remove_set(self, pset: Any) -> None:
        """Forget (and destroy, where this rank is a member) the set's group."""
        group = self._groups.pop(pset.set_id, None)
        if group is not None and pset.comm is not None:
            dist.destroy_process_group(group)

    def _group(self, pset: Any) -> Any:
        return self._groups[pset.set_id]

    # -- collectives -----------------------------------------------------------------------

    def allreduce(self, pset: Any, buf: torch.Tensor, out: torch.Tensor, op: str) -> None:
        """See :meth:`Backend.allreduce`."""
        self.calls["allreduce"] += 1
        with self._on_stream():
            if out is not buf:
                out.copy_(buf)
            dist.all_reduce(out, op=_OPS[op], group=self._group(pset))

    def bound_allreduce(self, pset: Any, op: str, post: float, dtype: np.dtype,
                        shape: tuple[int, ...]
                        ) -> Callable[[torch.Tensor, Any], torch.Tensor] | None:
        """:meth:`allreduce` of one cached tensor bound once, for the engine's steady call:
        ``call(buf, out) -> out`` (``out`` None: a new result block; ``out is buf``: in
        place), scaled by ``post``. It calls the set's process group as ``dist.all_reduce``
        does once its per-call checks pass (the engine checked this tensor when it cached it,
        and the binding reuses that check only for the same tensor)."""
        group = self._group(pset)
        if group is None:
            group = dist.group.WORLD
        opts = dist.AllreduceOptions()
        opts.reduceOp = _OPS[op]  # type: ignore[assignment]  # (as dist.all_reduce sets it)
        calls, stream, count = self.calls, self.stream, math.prod(shape)
        result_block, scale_into = self.result_block, self.scale_into
        # (a result the pool would not keep anyway is the input's clone: one torch call)
        pooled = self._pool is not None and self._pool.keeps(count * dtype.itemsize)

        def call(buf: torch.Tensor, out: Any) -> torch.Tensor:
            calls["allreduce"] += 1
            with contextlib.nullcontext() if stream is None else torch.cuda.stream(stream):
                if out is None and not pooled:
                    out = buf.clone()
                elif out is not buf:
                    if out is None:
                        out = result_block(dtype, count, buf).reshape(shape)
                    out.copy_(buf)
                group.allreduce([out], opts).wait()
            if post != 1.0:
                scale_into(out, out, post)
            return out

        return call

    def allgatherv(self, pset: Any, buf: torch.Tensor, out: torch.Tensor,
                   counts: list[int]) -> None:
        """See :meth:`Backend.allgatherv`: one allgather; uneven sizes are padded to the
        largest and compacted afterwards."""
        self.calls["allgather"] += 1
        src = buf.reshape(-1).view(torch.uint8)
        dst = out.reshape(-1).view(torch.uint8)
        longest = max(counts)
        with self._on_stream():
            if all(c == longest for c in counts):
                _ALLGATHER_INTO(dst, src, group=self._group(pset))
                return
            padded = torch.zeros(longest, dtype=torch.uint8, device=src.device)
            padded[: src.numel()] = src
            gathered = torch.empty(longest * len(counts), dtype=torch.uint8, device=src.device)
            _ALLGATHER_INTO(gathered, padded, group=self._group(pset))
            off = 0
            for i, c in enumerate(counts):
                dst[off:off + c] = gathered[i * longest: i * longest + c]
                off += c

    def broadcast(self, pset: Any, buf: torch.Tensor, root: int) -> None:
        """See :meth:`Backend.broadcast` (``root`` indexes the set's ranks)."""
        self.calls["broadcast"] += 1
        with self._on_stream():
            dist.broadcast(buf, src=pset.ranks[root], group=self._group(pset))

    def alltoallv(self, pset: Any, buf: torch.Tensor, send_bytes: list[int],
                  out: torch.Tensor, recv_bytes: list[int]) -> None:
        """See :meth:`Backend.alltoallv`."""
        self.calls["alltoall"] += 1
        with self._on_stream():
            dist.all_to_all_single(out.reshape(-1).view(torch.uint8),
                                   buf.reshape(-1).view(torch.uint8),
                                   output_split_sizes=recv_bytes, input_split_sizes=send_bytes,
                                   group=self._group(pset))

    def reduce_scatter(self, pset: Any, buf: torch.Tensor, out: torch.Tensor,
                       counts: list[int], op: str) -> None:
        """See :meth:`Backend.reduce_scatter`: one reduce-scatter (Horovod's uneven split:
        blocks are padded to the largest, so no rank receives more than it keeps)."""
        self.calls["reducescatter"] += 1
        group, rop = self._group(pset), _OPS[op]
        longest = max(counts)
        me = pset.index
        with self._on_stream():
            if all(c == longest for c in counts):
                _REDUCE_SCATTER(out.reshape(-1), buf.reshape(-1), op=rop, group=group)
                return
            padded = torch.zeros(longest * len(counts), dtype=buf.dtype, device=buf.device)
            flat, off = buf.reshape(-1), 0
            for i, c in enumerate(counts):
                padded[i * longest: i * longest + c] = flat[off:off + c]
                off += c
            block = torch.empty(longest, dtype=buf.dtype, device=buf.device)
            _REDUCE_SCATTER(block, padded, op=rop, group=group)
            out.reshape(-1).copy_(block[: counts[me]])

    def barrier(self, pset: Any) -> None:
        """See :meth:`Backend.barrier`."""
        self.calls["barrier"] += 1
        with self._on_stream():
            dist.barrier(group=self._group(pset))

    # -- buffers on this device ------------------------------------------------------------

    def empty(self, dtype: np.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        """See :meth:`Backend.empty`."""
        with self._on_stream():
            return torch.empty(shape, dtype=TORCH_DTYPES[dtype], device=self.device)

    def result_block(self, dtype: np.dtype, count: int, like: Any = None) -> torch.Tensor:
        """See :meth:`Backend.result_block`: torch's caching allocator pools device memory;
        host memory comes from a :class:`~hvdcore.backends.pool.ResultPool`."""
        if self._pool is not None and dtype != np.bool_:
            return torch.from_numpy(self._pool.take(dtype, count))
        return self.empty(dtype, (count,))

    def scale_into(self, dst: torch.Tensor, src: torch.Tensor, factor: float) -> None:
        """See :meth:`Backend.scale_into`."""
        with self._on_stream(), torch.no_grad():
            if factor == 1.0:
                if dst is not src:
                    dst.copy_(src)
            elif torch.float16 in (dst.dtype, src.dtype):
                half = src if src.dtype == torch.float16 else src.to(torch.float16)
                if half.is_cuda:  # Horovod's GPU kernels: float16 * float16(factor)
                    scaled = half * float(np.float16(factor))
                else:  # Horovod on CPU: in float32, rounded once to float16
                    scaled = half.to(torch.float32) * float(np.float32(factor))
                dst.copy_(scaled if dst.dtype == torch.float16 else scaled.to(torch.float16))
            elif dst.is_floating_point():
                if dst.dtype == src.dtype:
                    torch.mul(src, factor, out=dst)
                else:
                    dst.copy_(src.to(dst.dtype) * factor)
            else:  # integers: scale in float64, truncate toward zero (as the host path does)
                dst.copy_(src.to(torch.float64) * factor)

    def fill(self, dst: torch.Tensor, value: Any) -> None:
        """See :meth:`Backend.fill`."""
        with self._on_stream():
            dst.fill_(value.item() if isinstance(value, np.generic) else value)

    def concat_into(self, srcs: list[torch.Tensor], dst: torch.Tensor) -> None:
        """See :meth:`Backend.concat_into`."""
        with self._on_stream(), torch.no_grad():
            torch.cat(srcs, out=dst)

    def allreduce_pieces(self, pset: Any, srcs: list[torch.Tensor], out: torch.Tensor,
                         op: str) -> None:
        """See :meth:`Backend.allreduce_pieces`."""
        self.concat_into(srcs, out)
        self.allreduce(pset, out, out, op)

    @staticmethod
    def as_uint8(buf: torch.Tensor) -> torch.Tensor:
        """See :meth:`Backend.as_uint8`."""
        return buf.view(torch.uint8)


class CudaAwareMPIBackend(TorchBackend):
    """Device tensors handed straight to a CUDA-aware MPI (no host staging).

    mpi4py reads torch CUDA tensors through ``__cuda_array_interface__`` (CPU tensors through
    their NumPy views, which is how this class runs where no GPU exists). MPI does not know
    CUDA streams, so the backend's stream is synchronised before each MPI call: the host
    waits, which NCCL avoids; this plane is for sites whose MPI is CUDA-aware and NCCL is not
    wanted (``HVDCORE_GPU_OPERATIONS=mpi``) or missing. Buffer operations are
    :class:`TorchBackend`'s (on the device).
    """

    reduces_float16 = False  # MPI has no half type: float16 is reduced in float32
    capabilities = PLAIN  # its allreduce is MPI's: no process-group call to bind

    def __init__(self, name: str, device: torch.device) -> None:
        super().__init__(name, device)
        self.key = f"{name}-{device.type}"
        from mpi4py import MPI

        self._mpi = MPI
        self._ops = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX, "prod": MPI.PROD}

    def add_set(self, pset: Any) -> None:
        """Nothing to make: the set's MPI communicator is the engine's (``pset.comm``)."""

    def remove_set(self, pset: Any) -> None:
        """Nothing to free: the engine frees the set's communicator."""

    def _ready(self) -> None:
        if self.stream is not None:
            self.stream.synchronize()

    @staticmethod
    def _buf(t: torch.Tensor) -> Any:
        return t.numpy() if t.device.type == "cpu" else t

    def _bytes(self, t: torch.Tensor) -> Any:
        return self._buf(t.reshape(-1).view(torch.uint8))

    def allreduce(self, pset: Any, buf: torch.Tensor, out: torch.Tensor, op: str) -> None:
        """See :meth:`Backend.allreduce`."""
        self.calls["allreduce"] += 1
        self._ready()
        if out is buf:
            pset.comm.Allreduce(self._mpi.IN_PLACE, self._buf(out), op=self._ops[op])
        else:
            pset.comm.Allreduce(self._buf(buf), self._buf(out), op=self._ops[op])

    def allgatherv(self, pset: Any, buf: torch.Tensor, out: torch.Tensor,
                   counts: list[int]) -> None:
        """See :meth:`Backend.allgatherv` (byte counts: a real MPI_Allgatherv)."""
        self.calls["allgather"] += 1
        self._ready()
        byte = self._mpi.BYTE
        pset.comm.Allgatherv([self._bytes(buf), byte],
                             [self._bytes(out), (counts, displacements(counts)), byte])

    def broadcast(self, pset: Any, buf: torch.Tensor, root: int) -> None:
        """See :meth:`Backend.broadcast`."""
        self.calls["broadcast"] += 1
        self._ready()
        pset.comm.Bcast([self._bytes(buf), self._mpi.BYTE], root=root)

    def alltoallv(self, pset: Any, buf: torch.Tensor, send_bytes: list[int],
                  out: torch.Tensor, recv_bytes: list[int]) -> None:
        """See :meth:`Backend.alltoallv`."""
        self.calls["alltoall"] += 1
        self._ready()
        byte = self._mpi.BYTE
        pset.comm.Alltoallv([self._bytes(buf), (send_bytes, displacements(send_bytes)), byte],
                            [self._bytes(out), (recv_bytes, displacements(recv_bytes)), byte])

    def reduce_scatter(self, pset: Any, buf: torch.Tensor, out: torch.Tensor,
                       counts: list[int], op: str) -> None:
        """See :meth:`Backend.reduce_scatter` (a real MPI_Reduce_scatter, uneven counts)."""
        self.calls["reducescatter"] += 1
        self._ready()
        pset.comm.Reduce_scatter(self._buf(buf.reshape(-1)), self._buf(out.reshape(-1)),
                                 recvcounts=counts, op=self._ops[op])

    def barrier(self, pset: Any) -> None:
        """See :meth:`Backend.barrier`."""
        self.calls["barrier"] += 1
        pset.comm.Barrier()
