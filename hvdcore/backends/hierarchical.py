"""Two-level MPI data plane: shared memory within a node, MPI between nodes.

``HVDCORE_HIERARCHICAL_ALLREDUCE`` / ``HVDCORE_HIERARCHICAL_ALLGATHER`` replace the flat
``MPI_Allreduce`` / ``MPI_Allgatherv`` of the global process set with:

allreduce (per segment of at most half the window / local size bytes)
    1. every rank copies its input into its slot of the node's MPI-3 shared window (except its
       own chunk, which it reads from its private buffer); node barrier;
    2. local rank ``j`` reduces chunk ``j`` of the segment over the slots in local-rank order
       into slot 0 (local rank 0 into slot 1, over the operand it has just read), then
       allreduces that chunk with the ranks of the same local rank on the other nodes
       (per-slice leaders; when nodes differ in size, local rank 0 reduces into slot 0 too,
       and after a node barrier it allreduces the whole segment with the other nodes'
       leaders); node barrier;
    3. every rank copies the reduced chunks into its result.
allgather
    every rank copies its bytes into the window (node-major layout); node barrier; node
    leaders exchange node blocks with an in-place ``Allgatherv`` and barrier again; every rank
    copies the window out in world-rank order.

Consecutive operations alternate between the two halves of the window, so a rank that starts
the next one cannot overwrite data a slower rank is still copying out. The window grows
(collectively over the node: every rank executes the same responses) when a larger buffer
arrives and is freed by :meth:`HierarchicalBackend.close`.

Results: integer reductions (sum and prod wrap, min, max) are associative and commutative,
so they are bit-identical to the flat path. Floating-point sums and products follow a fixed
order: within a node left to right in local-rank order (``((x0 + x1) + x2) + ...``), then MPI's
allreduce of the node partial results across nodes. With one node the result is exactly that
left fold; with two nodes it is ``node0 + node1`` (a two-operand IEEE operation is
commutative); every rank of a node gets the same bits. Min/max with NaN follow NumPy
(NaN propagates). Messages below :data:`MIN_BYTES_ONE_NODE` (one node) or
:data:`MIN_BYTES_NODES` (several), process sets other than the global one,
and jobs with one rank per node use the flat MPI call (:class:`MPIBackend`).

A node is the ranks that share memory (``COMM_TYPE_SHARED``) and have the same launcher node
id where one is set (``SLURM_NODEID``): on a real cluster both agree; on a localhost Slurm
whose fake nodes share one host, the node id separates them.
"""

from __future__ import annotations

import bisect
import logging
import time
import zlib
from dataclasses import replace
from typing import Any

import numpy as np
from mpi4py import MPI

from hvdcore.backends.mpi import MPIBackend

__all__ = ["HierarchicalBackend", "MIN_BYTES_ONE_NODE", "MIN_BYTES_NODES", "SEGMENT_BYTES",
           "PHASES", "node_color"]

log = logging.getLogger("hvdcore")

MIN_BYTES_ONE_NODE = 1 << 20
"""With one node, smaller messages take the flat MPI call: the shared-memory path costs two
node barriers and about ten NumPy calls (~4-7 us on a 2-core VM), and Open MPI's own
shared-memory allreduce is as fast up to ~1 MiB (measured: 0.5-0.6x of raw at 64 KiB,
0.7-0.9x at 256 KiB, 0.9-1.2x at 1 MiB); above, fewer copies and synchronisations win."""

MIN_BYTES_NODES = 64 << 10
"""With several nodes the two levels also send (local size - 1)/local size fewer bytes and
messages between nodes, which outweighs the same fixed cost sooner (not measurable on one
host: a judgement, tune here)."""

SEGMENT_BYTES = 1 << 20
"""Largest slot of one rank per allreduce segment: bounds the window at 2 x local size x this
for any message size (larger messages run in several segments). Small enough that the window
stays in the last-level cache: on the 2-core VM (L3 32 MiB), 2 ranks, 0.5-1 MiB segments took
0.94-1.01x raw's time at 1-16 MiB and 0.44-0.49x at 64 MiB; 4 MiB ones 0.92-1.28x and
0.53-0.56x (the 2 extra node barriers per segment cost less than the cache misses)."""

PHASES = ("copy_in", "node_sync", "reduce", "cross_node", "copy_out")
"""The steps of a shared-memory allreduce that :attr:`HierarchicalBackend.phase_s` times."""

_ALIGN = 64
_MPI_OPS = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX, "prod": MPI.PROD}
_UFUNCS = {"sum": np.add, "min": np.minimum, "max": np.maximum, "prod": np.multiply}


def node_color(node_id: str | None) -> int:
    """The Split color of a launcher node id (``SLURM_NODEID``): itself when it is a number."""
    if not node_id:
        return 0
    text = node_id.strip()
    if text.isdigit():
        return int(text) % (1 << 30)
    return zlib.crc32(text.encode()) % (1 << 30)


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class _Pieces:
    """The concatenation of 1-d arrays of one dtype, read by element ranges without being
    built (a fused allreduce's tensors)."""

    __slots__ = ("arrays", "starts")

    def __init__(self, arrays: list[np.ndarray]) -> None:
        self.arrays = arrays
        starts = [0]
        for arr in arrays:
            starts.append(starts[-1] + arr.size)
        self.starts = starts

    def views(self, lo: int, hi: int) -> list[np.ndarray]:
        """Views of the pieces' parts that make up elements ``[lo, hi)``, in order."""
        if len(self.arrays) == 1:
            return [self.arrays[0][lo:hi]] if hi > lo else []
        i = bisect.bisect_right(self.starts, lo) - 1
        out = []
        while lo < hi:
            start = self.starts[i]
            end = min(hi, self.starts[i + 1])
            if end > lo:
                out.append(self.arrays[i][lo - start:end - start])
                lo = end
            i += 1
        return out

    def copy(self, lo: int, hi: int, dst: np.ndarray) -> None:
        """Elements ``[lo, hi)`` into ``dst`` (of that length)."""
        views = self.views(lo, hi)
        if len(views) == 1:
            dst[...] = views[0]
        elif views:
            np.concatenate(views, out=dst)


class HierarchicalBackend(MPIBackend):
    """:class:`MPIBackend` whose global-set allreduce/allgather run through node shared memory.

    Collective over ``world`` (the hvdcore world communicator): every rank builds one.
    ``node_id``: the launcher's node id (``SLURM_NODEID``) or None. Counters for tests and
    benchmarks: :meth:`stats`.

    Example::

        >>> b = HierarchicalBackend(MPI.COMM_WORLD, allreduce=True, allgather=True)
        >>> b.stats()["nodes"]
        1
    """

    def __init__(self, world: Any, allreduce: bool = True, allgather: bool = True,
                 node_id: str | None = None, min_bytes: int | None = None,
                 segment_bytes: int = SEGMENT_BYTES) -> None:
        super().__init__()
        self.world_size = world.Get_size()
        self.segment_bytes = _align(segment_bytes)
        rank = world.Get_rank()
        shared = world.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        self.node = shared.Split(node_color(node_id), key=rank)
        shared.Free()
        self.local_rank, self.local_size = self.node.Get_rank(), self.node.Get_size()
        leader = self.node.bcast(rank, root=0)  # lowest world rank of the node
        leaders = world.allgather(leader)
        heads = sorted(set(leaders))
        self.nodes = [[r for r in range(self.world_size) if leaders[r] == h] for h in heads]
        self.node_index = heads.index(leader)
        sizes = {len(n) for n in self.nodes}
        self.per_slice = len(sizes) == 1
        # Ranks of equal local rank, in node order; local rank 0's is the leaders' communicator.
        self.cross = world.Split(self.local_rank, key=self.node_index)
        self._node_major = [r for n in self.nodes for r in n]
        # Two levels only pay off with several ranks on some node; declared as
        # ``capabilities.two_levels`` (the autotuner may switch enabled_allreduce/allgather).
        splits = max(sizes) > 1
        self.capabilities = replace(MPIBackend.capabilities, two_levels=splits)
        self._enabled_allreduce = allreduce and splits
        self.enabled_allgather = allgather and splits
        if min_bytes is None:
            min_bytes = MIN_BYTES_ONE_NODE if len(self.nodes) == 1 else MIN_BYTES_NODES
        self.min_bytes = min_bytes
        self.counters = {"shm_calls": 0, "leader_calls": 0, "flat_calls": 0, "window_allocs": 0}
        #: Seconds this rank spent in each step of its shared-memory allreduces, summed (the
        #: input is read in ``copy_in`` and ``reduce``; ``node_sync`` includes waiting for the
        #: slowest rank of the node): where a slow hierarchical allreduce loses its time.
        self.phase_s = dict.fromkeys(PHASES, 0.0)
        self._win: Any = None
        self._mem: np.ndarray = np.empty(0, np.uint8)
        self._parity = 0
        self.closed = False

    # -- layout --------------------------------------------------------------------------------

    def describe(self) -> str:
        """One line: the node layout and which steps run."""
        nodes = "; ".join(f"node {i}: ranks {n}" for i, n in enumerate(self.nodes))
        ops = [name for name, on in (("allreduce", self.enabled_allreduce),
                                     ("allgather", self.enabled_allgather)) if on]
        if not ops:
            why = "" if self.capabilities.two_levels else "one rank per node, "
            return (f"hierarchical collectives off ({why}flat MPI): "
                    f"{self.world_size} ranks on {len(self.nodes)} nodes")
        cross = ("none (one node)" if len(self.nodes) == 1 else
                 "per-slice communicators" if self.per_slice else "one leader per node")
        return (f"hierarchical {'+'.join(ops)}: {self.world_size} ranks on {len(self.nodes)} "
                f"nodes ({nodes}); cross-node step: {cross}; shared-memory path from "
                f"{self.min_bytes} bytes, allreduce segments of up to {self.segment_bytes} "
                "bytes per rank")

    def stats(self) -> dict[str, Any]:
        """Counters (calls by path), the layout (``nodes``, ``local_size``, ``window_bytes``)
        and ``phase_s`` (seconds per step of the shared-memory allreduces, summed)."""
        return {**self.counters, "nodes": len(self.nodes), "local_size": self.local_size,
                "layout": [list(n) for n in self.nodes], "window_bytes": int(self._mem.size),
                "phase_s": dict(self.phase_s)}

    def _covers(self, pset: Any) -> bool:
        return pset.set_id == 0 and len(pset.ranks) == self.world_size

    # -- window --------------------------------------------------------------------------------

    def _ensure(self, half: int) -> None:
        """Make each half of the window at least ``half`` bytes (collective over the node)."""
        if self._mem.size >= 2 * half:
            return
        # Geometric growth: sizes that creep up (allgathers) reallocate O(log) times.
        size = 2 * max(half, self._mem.size)
        self.node.Barrier()  # nobody still reads the old window
        self._free_window()
        win = MPI.Win.Allocate_shared(size if self.local_rank == 0 else 0, 1, comm=self.node)
        mem, _ = win.Shared_query(0)
        win.Lock_all(MPI.MODE_NOCHECK)
        self._win = win
        self._mem = np.frombuffer(mem, np.uint8, count=size)  # type: ignore[call-overload]
        self._parity = 0
        self.counters["window_allocs"] += 1

    def _free_window(self) -> None:
        if self._win is not None:
            self._mem = np.empty(0, np.uint8)
            self._win.Unlock_all()
            self._win.Free()
            self._win = None

    def _region(self) -> np.ndarray:
        """The half of the window this operation uses (the other one next time)."""
        half = self._mem.size // 2
        p, self._parity = self._parity, self._parity ^ 1
        return self._mem[p * half:(p + 1) * half]

    def _barrier(self) -> None:
        self._win.Sync()
        self.node.Barrier()
        self._win.Sync()

    def close(self, collective: bool = True) -> None:
        """Free the window and the communicators (``collective``: every rank of the node
        closes too; pass False after a failure, when peers may be gone: nothing is freed)."""
        if self.closed:
            return
        self.closed = True
        if not collective:
            return
        self._free_window()
        for comm in (self.cross, self.node):
            comm.Free()

    # -- collectives ---------------------------------------------------------------------------

    @property
    def enabled_allreduce(self) -> bool:
        """Whether allreduces from ``min_bytes`` on the global set take two levels."""
        return self._enabled_allreduce

    @enabled_allreduce.setter
    def enabled_allreduce(self, on: bool) -> None:
        # (a benchmark switches it between rows: the flat steady call must notice)
        self._enabled_allreduce = on
        self.routes += 1

    def direct_allreduce(self, pset: Any, nbytes: int) -> tuple[Any, Any] | None:
        """See :meth:`MPIBackend.direct_allreduce`: only where :meth:`allreduce` takes the
        flat call (such calls made by the steady path are not in ``counters``)."""
        if self.enabled_allreduce and nbytes >= self.min_bytes and self._covers(pset):
            return None
        return super().direct_allreduce(pset, nbytes)

    def _shm_allreduce(self, pset: Any, nbytes: int) -> bool:
        """True when an allreduce of ``nbytes`` on ``pset`` takes the shared-memory path
        (counted); False (counted as flat) when it takes the flat MPI call."""
        if not self.enabled_allreduce or nbytes < self.min_bytes or not self._covers(pset):
            self.counters["flat_calls"] += 1
            return False
        self.counters["shm_calls"] += 1
        return True

    def allreduce(self, pset: Any, buf: np.ndarray, out: np.ndarray, op: str) -> None:
        """See :meth:`Backend.allreduce`: two levels for the global set from MIN_BYTES."""
        if not self._shm_allreduce(pset, buf.nbytes):
            super().allreduce(pset, buf, out, op)
            return
        # The engine's buffers are C-contiguous; anything else goes through a copy, so that
        # every rank takes the same path.
        dst = out.reshape(-1) if out.flags.c_contiguous else np.empty(out.size, out.dtype)
        self._two_level(_Pieces([buf.reshape(-1)]), dst, op)
        if not out.flags.c_contiguous:
            out[...] = dst.reshape(out.shape)

    def allreduce_pieces(self, pset: Any, srcs: list[np.ndarray], out: np.ndarray,
                         op: str) -> None:
        """See :meth:`Backend.allreduce_pieces`: on the shared-memory path each rank copies
        the pieces straight into its slot of the window (no fusion-buffer copy first)."""
        if not self._shm_allreduce(pset, out.nbytes):
            super().concat_into(srcs, out)
            super().allreduce(pset, out, out, op)
            return
        self._two_level(_Pieces(srcs), out, op)

    def _two_level(self, src: _Pieces, dst: np.ndarray, op: str) -> None:
        """The shared-memory allreduce of ``src`` (1-d pieces) into ``dst`` (1-d)."""
        dtype, n = dst.dtype, dst.size
        L, me = self.local_size, self.local_rank
        # The segment length is the same on every node (the cross-node step pairs segments);
        # the slot size may differ where nodes differ in size.
        seg = min(n, self.segment_bytes // dtype.itemsize)
        slot = _align(seg * dtype.itemsize)
        self._ensure(L * slot)
        ufunc = _UFUNCS[op]
        leader = self.cross if (self.local_rank == 0 or self.per_slice) else None
        multi = len(self.nodes) > 1
        # Local rank 0 writes its chunk's result over local rank 1's copy of it (the operand
        # it has just read), not into slot 0, whose lines a peer's cache holds from the last
        # copy-out: measured 2x slower on the 2-core VM (64 MiB: 4.4 ms of reduce for rank
        # 0, 2.3 ms for rank 1, which waited). Not when one leader reduces slot 0 as a whole.
        moved = L > 1 and (not multi or self.per_slice)
        home = 1 if (moved and me == 0) else 0
        clock, spent = time.perf_counter, self.phase_s
        for a in range(0, n, seg):
            m = min(seg, n - a)
            region = self._region()
            slots = [region[k * slot:k * slot + m * dtype.itemsize].view(dtype) for k in range(L)]
            c0, c1 = m * me // L, m * (me + 1) // L
            mine = slots[me]
            t0 = clock()
            src.copy(a, a + c0, mine[:c0])
            src.copy(a + c1, a + m, mine[c1:m])
            t1 = clock()
            self._barrier()
            t2 = clock()
            # This rank's chunk is read from its own input, piece by piece: same order of
            # operands (local rank order) for every element as with one piece.
            at = c0
            for own in src.views(a + c0, a + c1):
                w = own.size
                res = slots[home][at:at + w]
                parts = [own if k == me else slots[k][at:at + w] for k in range(L)]
                if L == 1:
                    res[...] = parts[0]
                else:
                    ufunc(parts[0], parts[1], out=res)
                    for part in parts[2:]:
                        ufunc(res, part, out=res)
                at += w
            res = slots[home][c0:c1]
            t3 = clock()
            if multi and self.per_slice:
                self.cross.Allreduce(MPI.IN_PLACE, res, op=_MPI_OPS[op])
                self.counters["leader_calls"] += 1
            elif multi:
                self._barrier()
                if leader is not None:
                    leader.Allreduce(MPI.IN_PLACE, slots[0], op=_MPI_OPS[op])
                    self.counters["leader_calls"] += 1
            t4 = clock()
            self._barrier()
            t5 = clock()
            if moved:
                e0 = m // L  # the end of local rank 0's chunk
                dst[a:a + e0] = slots[1][:e0]
                dst[a + e0:a + m] = slots[0][e0:]
            else:
                dst[a:a + m] = slots[0]
            t6 = clock()
            spent["copy_in"] += t1 - t0
            spent["node_sync"] += t2 - t1 + t5 - t4
            spent["reduce"] += t3 - t2
            spent["cross_node"] += t4 - t3
            spent["copy_out"] += t6 - t5

    def allgatherv(self, pset: Any, buf: np.ndarray, out: np.ndarray, counts: list[int]) -> None:
        """See :meth:`Backend.allgatherv` (byte counts): two levels for the global set."""
        total = sum(counts)
        if not self.enabled_allgather or total < self.min_bytes or not self._covers(pset):
            self.counters["flat_calls"] += 1
            super().allgatherv(pset, buf, out, counts)
            return
        self.counters["shm_calls"] += 1
        self._ensure(_align(total))
        region = self._region()
        offs, acc = {}, 0
        for r in self._node_major:
            offs[r] = acc
            acc += counts[r]
        me = pset.index
        region[offs[me]:offs[me] + counts[me]] = buf.reshape(-1).view(np.uint8)
        self._barrier()
        if len(self.nodes) > 1:
            if self.local_rank == 0:
                node_bytes = [sum(counts[r] for r in n) for n in self.nodes]
                displs = [offs[n[0]] for n in self.nodes]
                self.cross.Allgatherv(MPI.IN_PLACE,
                                      [region[:total], (node_bytes, displs), MPI.BYTE])
                self.counters["leader_calls"] += 1
            self._barrier()
        flat = (out.reshape(-1).view(np.uint8) if out.flags.c_contiguous
                else np.empty(out.nbytes, np.uint8))
        # Copy out in runs that are contiguous in both layouts (one run for blocked placement).
        dst = 0
        run_src, run_dst, run_len = offs[0], 0, 0
        for r in range(self.world_size):
            if offs[r] == run_src + run_len:
                run_len += counts[r]
            else:
                flat[run_dst:run_dst + run_len] = region[run_src:run_src + run_len]
                run_src, run_dst, run_len = offs[r], dst, counts[r]
            dst += counts[r]
        flat[run_dst:run_dst + run_len] = region[run_src:run_src + run_len]
        if not out.flags.c_contiguous:
            out[...] = flat.view(out.dtype).reshape(out.shape)
