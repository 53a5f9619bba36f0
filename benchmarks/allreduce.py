"""Allreduce latency and bus bandwidth: hvdcore against the transports it drives, in one job.

Run under MPI with 2 (or more) ranks (1 rank is fine for the GPU overhead table)::

    hvdcorerun -np 2 python benchmarks/allreduce.py            # or: mpirun -np 2 python ...
    mpirun -np 2 python benchmarks/allreduce.py --sizes 4KiB,1MiB --max-reps 20   # seconds
    mpirun -np 2 python benchmarks/allreduce.py --json results.json

Every peer runs in the same job, interleaved repetition by repetition (in a new random order
each time), so a noisy machine slows all of them alike. float32, op Sum everywhere (raw
transports have no Average). busbw = 2(n-1)/n x bytes / time (nccl-tests' bus bandwidth; 0 at
1 rank, shown "-").
The header prints the load average: figures taken while other jobs share the cores are noise.

Tables (rank 0 prints them as each part finishes):

1. **host MPI plane** (hvdcore's default for NumPy arrays and torch CPU tensors): raw mpi4py
   ``Allreduce`` (into a preallocated array) vs what users call: ``hvd.allreduce(x)`` (returns a
   new array), the same with ``out=`` preallocated, and, when torch's CPU tensors take MPI (the
   default), the torch binding's ``hvd.allreduce(t)``, ``hvd.allreduce_(t)`` (in place) and
   ``hvd.allreduce_async`` + ``hvd.synchronize``. ``hier`` rows are hvdcore's hierarchical
   plane (``HVDCORE_HIERARCHICAL_ALLREDUCE``, which the script turns on unless
   ``--no-hierarchical``; it runs when a node has 2+ ranks): every hvdcore peer switches the
   plane's shared-memory path on or off before its call, so the other rows are exactly flat
   hvdcore. Each repetition is one call after an MPI barrier; ``vs mpi4py`` is the ratio of
   median times (1.00x = as fast as raw MPI, smaller is faster), ``busbw vs raw`` its inverse.
   The ``mpi4py again`` row is the raw call a second time, into its own memory: how far apart
   two identical calls land in this run, so a ratio within that spread is noise. The
   ``floor: round + data`` row is the two MPI calls a cached blocking hvdcore call cannot
   avoid (the response cache's round, a non-blocking bitwise-or allreduce of 272 bytes at
   the default cache capacity, polled to completion, then the data's ``Allreduce``), in raw
   mpi4py: no hvdcore path can beat it, and the ``floor at`` lines say how far above it the
   NumPy call lands. With the torch rows comes ``torch floor: NumPy call``,
   ``torch.from_numpy(hvd.allreduce(t.numpy()))``: the least a torch binding over the NumPy
   call does for a new tensor; the ``torch floor at`` lines read the torch calls against it
   (what the two views cost, and what the binding adds on top). Every peer that only reads
   its input reads the same array (the torch peers a tensor made from it with
   ``torch.from_numpy``): at sizes near the last-level cache a peer on an input of its own,
   touched by it alone, would find it evicted by the others and pay memory's speed where the
   rest read cache (1.3-1.5x raw's time at 1 MiB, for no reason in the call). In-place
   peers reduce an array of their own; the ``mpi4py in place`` row is the raw in-place call
   (``Allreduce(IN_PLACE, a)``), the peer to read ``allreduce_(t)`` against: an out-of-place
   allreduce also copies its input first.
   After each size's timings every peer runs once more and its result is compared with raw
   mpi4py's (:func:`check_results`): a mismatch is printed, and the script exits 1.
   Lines under the table check issue 16's targets: flat busbw >= 1.0x raw at >= 1 MiB,
   hierarchical >= 1.3x at >= 16 MiB, 4 KiB NumPy within 3x and torch within 4x of raw; each
   also quotes the control row's spread at the same sizes. Lines before and after the table
   and each size's ``hier steps`` line give the core-to-core handoff rate (:func:`handoff_rate`):
   on a VM it tells whether the two ranks' vCPUs shared a cache, which decides the hier rows
   (the host can move them within a run: a rate before and after each size brackets it).
2. **torch CPU tensors and Gloo**: raw ``torch.distributed.all_reduce`` on Gloo (DDP's CPU
   transport; the raw peer reuses hvdcore's group when it made one); with ``--cpu-operations
   gloo`` (``HVDCORE_CPU_OPERATIONS=gloo``, set before ``hvd.init()``) hvdcore's torch calls
   run on its Gloo plane and are compared here instead of in table 1.
   ``busbw vs raw`` = hvdcore busbw / the raw peer's busbw (1.00 = as fast, higher is faster):
   in-place calls against raw ``all_reduce(t)``, new-tensor calls against raw
   ``all_reduce(t.clone())`` (a raw user pays the new tensor's allocation too; fresh CPU
   memory is page-faulted in on first touch, which on a VM costs more than the reduction).
   A line under the table gives issue 14's target: >= 0.91x (within 1.1x) at >= 1 MiB.
3. **100 tensors x 64 KiB**: submitted together (100 async calls, or one grouped call;
   hvdcore fuses them into few transport calls) vs 100 separate calls, on MPI (NumPy, flat;
   plus the grouped call on the hierarchical plane when it is on) and on Gloo (torch);
   ``speed-up`` is relative to the 100 separate raw transport calls. The ``floor: concat + 1
   call`` row is what fusing into one buffer cannot avoid, in raw mpi4py: the 100 arrays
   copied into one 6.4 MB buffer and one in-place ``Allreduce`` of it (results left there as
   views, as hvdcore's are). Where it is not faster than the 100 raw calls, no fused call can
   be: the 64 KiB calls already run near the bandwidth the big call gets.
4. **GPU** (only when ``torch.cuda.is_available()`` and every rank has its own GPU; otherwise a
   line says why it was skipped): the NCCL/RCCL plane vs raw ``torch.distributed.all_reduce``
   on NCCL, nccl-tests style: each window issues ``--gpu-iters`` back-to-back calls between
   ``torch.cuda.synchronize()`` and an MPI barrier; time per call = window / iters, median over
   windows. (a) busbw at ``--gpu-sizes`` (1 MiB ... 1 GiB), raw peers as in table 2 (target
   line: >= 0.95x at >= 64 MiB, at 2+ ranks), (b) per-call time and hvdcore's overhead in us
   over raw at ``--overhead-sizes`` (4 KiB ... 64 MiB; at 1 rank this is the engine's cost
   alone), (c) 100 x 64 KiB fused vs 100 separate NCCL calls (issue 14: >= 5x with several
   GPUs).

Ranks on one host need distinct GPUs for NCCL: the script calls ``torch.cuda.set_device(local
rank)`` before ``hvd.init()``, and when a host has more ranks than GPUs it sets
``HVDCORE_GPU_OPERATIONS=mpi`` (unless set) and skips the GPU tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# What hvdcore.init() sets before MPI starts (Open MPI yields the CPU while it polls, so the
# engine thread does not spin on cores the ranks share); importing mpi4py.MPI below starts MPI,
# so every peer here, raw ones included, runs under the setting an hvdcore job has.
os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
# What hvdcorerun gives every rank (torch reads it when it starts: set before the import):
# huge pages for torch's CPU tensors of 2 MiB and more, as NumPy's large arrays have.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
from mpi4py import MPI  # noqa: E402

import hvdcore as hvd  # noqa: E402
from hvdcore import basics  # noqa: E402
from hvdcore.engine.cache import RoundVector  # noqa: E402

MIB = 1 << 20
RAW_AGAIN = "mpi4py again"
"""Table 1's control row: the raw call a second time, into its own output array."""
RAW_INPLACE = "mpi4py in place"
"""Table 1's raw in-place row: ``Allreduce(IN_PLACE, a)`` on an array of its own."""
FLOOR = "floor: round + data"
"""Table 1's floor row: the two MPI calls a cached blocking hvdcore call makes, in raw mpi4py
(a non-blocking bitwise-or allreduce of the cache round's vector, polled to completion, then
the data's ``Allreduce``), with none of hvdcore's Python around them."""
TORCH_FLOOR = "torch floor: NumPy call"
"""Table 1's torch floor row (when torch tensors take MPI): the least any torch binding over
hvdcore's NumPy call does for a new tensor, ``torch.from_numpy(hvd.allreduce(t.numpy()))``,
without the binding's checks, autograd test or handle: the torch rows read against it."""
TORCH_ROWS = ("torch allreduce(t)", "torch allreduce_(t)", "torch async+sync")
"""Table 1's rows of the torch binding's calls (when torch tensors take MPI)."""
CPU_SIZES = "4KiB,64KiB,1MiB,16MiB,64MiB"
GPU_SIZES = "1MiB,4MiB,16MiB,64MiB,256MiB,1GiB"
_UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": MIB, "GIB": 1 << 30}


def parse_size(text: str) -> int:
    """``4KiB``, ``4 KiB``, ``1MiB``, ``1GiB`` or a plain byte count -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]iB|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 4KiB, 16MiB, 1GiB)")
    return int(m.group(1)) * _UNITS[(m.group(2) or "").upper()]


def size_list(text: str) -> list[int]:
    return [parse_size(s) for s in text.split(",") if s.strip()]


def label(nbytes: int) -> str:
    for unit, mult in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if nbytes >= mult and nbytes % mult == 0:
            return f"{nbytes // mult} {unit}"
    return f"{nbytes} B"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=size_list, default=size_list(CPU_SIZES),
                   help=f"message sizes of tables 1-2 (default {CPU_SIZES})")
    p.add_argument("--min-reps", type=int, default=10, help="repetitions at 64 MiB and above")
    p.add_argument("--max-reps", type=int, default=400,
                   help="repetitions at 4 KiB (log-interpolated between); also caps the "
                        "repetitions of the 100-tensor and GPU tables")
    p.add_argument("--cpu-operations", choices=["gloo", "mpi"], default=None,
                   help="plane for hvdcore's torch CPU tensors (sets HVDCORE_CPU_OPERATIONS "
                        "before init; default: the environment's value, else hvdcore's "
                        "default, mpi)")
    p.add_argument("--no-torch", action="store_true", help="NumPy/MPI table only")
    p.add_argument("--no-hierarchical", action="store_true",
                   help="leave HVDCORE_HIERARCHICAL_ALLREDUCE as the environment has it (the "
                        "script sets it to 1 otherwise) and time no hier rows")
    p.add_argument("--no-gpu", action="store_true", help="skip the GPU tables")
    p.add_argument("--gpu-sizes", type=size_list, default=size_list(GPU_SIZES),
                   help=f"busbw sizes on the GPU (default {GPU_SIZES}); sizes that do not fit "
                        "in free device memory three times over are skipped")
    p.add_argument("--overhead-sizes", type=size_list, default=size_list(CPU_SIZES),
                   help=f"per-call overhead sizes on the GPU (default {CPU_SIZES})")
    p.add_argument("--gpu-iters", type=int, default=20, help="calls per timed GPU window")
    p.add_argument("--torch-threads", type=int, default=0,
                   help="torch intra-op threads per rank (default: cores / ranks on the host)")
    p.add_argument("--json", help="also write the results to this JSON file (rank 0)")
    return p.parse_args()


def reps_for(args: argparse.Namespace, nbytes: int) -> int:
    frac = min(1.0, max(0.0, (np.log2(nbytes) - 12) / (np.log2(64 * MIB) - 12)))
    return max(args.min_reps, int(args.max_reps * (1 - frac) + args.min_reps * frac))


def output_for(buf: np.ndarray) -> np.ndarray:
    """A zeroed output array for ``buf`` that starts 64 bytes past ``buf``'s offset in a page.

    Arrays allocated one after another on the heap land 16 bytes past it, and Open MPI 4.1's
    allreduce runs 1.35x slower at 4 KiB and 2-2.8x at 64 KiB-16 MiB when its output starts
    4-28 bytes past its input's page offset (4 KiB aliasing between loads and stores): a peer
    must not be slow, or the raw-against-itself control row noisy, for that reason alone.
    hvdcore's pooled results are never there (they keep their input's offset from a 64-byte
    boundary, or start on one)."""
    block = np.zeros(buf.size + (4096 + 256) // buf.itemsize, buf.dtype)
    start = (buf.ctypes.data + 64 - block.ctypes.data) % 4096 // buf.itemsize
    return block[start:start + buf.size].reshape(buf.shape)


def time_interleaved(comm: MPI.Comm, peers: dict[str, Callable[[], object]], reps: int,
                     warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each peer; one call per repetition after an MPI barrier,
    peers interleaved in a new random order each repetition (seeded by the repetition, so the
    same on every rank): with a fixed cyclic order each peer would always follow the same
    other peer and inherit its after-effects (caches, a woken engine thread)."""
    for fn in peers.values():
        for _ in range(warmup):
            fn()
    keys = list(peers)
    samples: dict[str, list[float]] = {k: [] for k in keys}
    for i in range(reps):
        order = keys[:]
        random.Random(i).shuffle(order)
        for k in order:
            comm.Barrier()
            t0 = time.perf_counter()
            peers[k]()
            samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def busbw(n: int, nbytes: int, seconds: float) -> float:
    return 2 * (n - 1) / n * nbytes / seconds / 1e9


def fmt_bw(n: int, gbps: float) -> str:
    return f"{gbps:>11.3f}" if n > 1 else f"{'-':>11}"


class Report:
    """Rank 0's printing and the JSON document."""

    def __init__(self, comm: MPI.Comm) -> None:
        self.root = comm.rank == 0
        self.doc: dict[str, Any] = {"ranks": comm.size}

    def say(self, text: str = "") -> None:
        if self.root:
            print(text, flush=True)


# -- host tables ----------------------------------------------------------------------------


def host_table(args: argparse.Namespace, comm: MPI.Comm, rep: Report, torch_peers: Any,
               plane: Any) -> None:
    """Table 1: raw mpi4py vs hvdcore on NumPy (and torch tensors when they take MPI), flat
    and, when ``plane`` is the hierarchical host plane, hierarchical."""
    n, rows = comm.size, []
    rounds = comm.Dup()  # the floor row's round, apart from the data (as hvdcore keeps it)
    # The engine's round vector for this job's HVDCORE_CACHE_CAPACITY (with the cache off,
    # hvdcore makes no round: the row then times the smallest vector).
    nround = RoundVector(max(basics.state().cfg.cache_capacity, 1)).nbytes
    round_msgs = ([bytearray(nround), MPI.UINT64_T], [bytearray(nround), MPI.UINT64_T])

    def round_then(data: Callable[[], object]) -> Callable[[], object]:
        def call() -> object:
            req = rounds.Iallreduce(*round_msgs, op=MPI.BOR)
            while not req.Test():
                pass
            return data()
        return call

    rep.say(f"\n[1] allreduce on the host MPI plane, float32, {n} ranks")
    rep.say(f"{'size':>8} {'peer':>26} {'median us':>11} {'busbw GB/s':>11} {'vs mpi4py':>10}"
            f" {'busbw vs raw':>13}")

    def on(hier: bool, fn: Callable[[], object]) -> Callable[[], object]:
        if plane is None:
            return fn

        def call() -> object:
            plane.enabled_allreduce = hier
            return fn()
        return call

    for nbytes in args.sizes:
        size = label(nbytes)
        buf = np.random.default_rng(comm.rank).standard_normal(nbytes // 4).astype(np.float32)
        # Each peer writes into memory of its own (filled once, so no page is faulted in
        # while timed): at sizes near the last-level cache, a peer whose output another peer
        # had just written would find it cached and look faster than it is.
        raw_out, raw_out2, floor_out, out, hout, raw_inp = (output_for(buf) for _ in range(6))
        peers: dict[str, Callable[[], object]] = {
            "mpi4py": lambda: comm.Allreduce(buf, raw_out, op=MPI.SUM),
            # The same raw call again, into its own memory: how far two identical calls differ
            # in this run (the target lines quote it; a ratio inside it is noise).
            RAW_AGAIN: lambda: comm.Allreduce(buf, raw_out2, op=MPI.SUM),
            # (zeros, as the in-place torch tensor: repeated sums stay zero, never inf)
            RAW_INPLACE: lambda: comm.Allreduce(MPI.IN_PLACE, raw_inp, op=MPI.SUM),
            FLOOR: round_then(lambda: comm.Allreduce(buf, floor_out, op=MPI.SUM)),
            "hvdcore allreduce(x)": on(False, lambda: hvd.allreduce(
                buf, op=hvd.Sum, name=f"bench.new.{size}")),
            "hvdcore out=": on(False, lambda: hvd.allreduce(
                buf, op=hvd.Sum, name=f"bench.out.{size}", out=out)),
        }
        if plane is not None:
            peers["hier allreduce(x)"] = on(True, lambda: hvd.allreduce(
                buf, op=hvd.Sum, name=f"bench.hnew.{size}"))
            peers["hier out="] = on(True, lambda: hvd.allreduce(
                buf, op=hvd.Sum, name=f"bench.hout.{size}", out=hout))
        if torch_peers is not None:
            peers.update({k: on(False, fn) for k, fn in torch_peers(nbytes, size, buf).items()})
            peers[TORCH_FLOOR] = on(False, torch_floor(buf, size))
        reps = reps_for(args, nbytes)
        if plane is not None:  # the step split covers timed calls only, not first touches
            for fn in peers.values():
                fn()
        before = plane.stats() if plane is not None else None
        handoff = [handoff_rate(comm)] if plane is not None else []
        times = time_interleaved(comm, peers, reps)
        after = plane.stats() if plane is not None else None
        if plane is not None:
            handoff.append(handoff_rate(comm))
            rep.doc.setdefault("handoff_gbs_by_size", {})[size] = handoff
        for peer, t in times.items():
            row = {"size": size, "bytes": nbytes, "peer": peer, "median_us": t * 1e6,
                   "busbw_GBps": busbw(n, nbytes, t), "ratio_to_mpi4py": t / times["mpi4py"],
                   "busbw_ratio_to_raw": times["mpi4py"] / t, "reps": reps}
            rows.append(row)
            rep.say(f"{size:>8} {peer:>26} {t * 1e6:>11.1f} {fmt_bw(n, row['busbw_GBps'])} "
                    f"{row['ratio_to_mpi4py']:>9.2f}x {row['busbw_ratio_to_raw']:>12.2f}x")
        if before is not None and after is not None:
            hier_steps(rep, size, nbytes, before, after, handoff)
        written = {"mpi4py": raw_out, RAW_AGAIN: raw_out2, FLOOR: floor_out,
                   RAW_INPLACE: raw_inp}
        check_results(rep, size, peers, written, raw_out,
                      inplace={RAW_INPLACE, "torch allreduce_(t)"})
    rounds.Free()
    if plane is not None:
        plane.enabled_allreduce = False  # table 3 is flat (Horovod's default) but its hier row
    rep.doc["allreduce"] = rows
    host_targets(rep, rows, n)


def torch_floor(buf: np.ndarray, size: str) -> Callable[[], object]:
    """The :data:`TORCH_FLOOR` peer for one size: a view of ``buf`` (the raw peers' input) in,
    a new tensor out, through the NumPy call and the two views."""
    import torch

    t = torch.from_numpy(buf)
    return lambda: torch.from_numpy(hvd.allreduce(t.numpy(), op=hvd.Sum,
                                                  name=f"bench.tfloor.{size}"))


def check_results(rep: Report, size: str, peers: dict[str, Callable[[], object]],
                  written: dict[str, np.ndarray], reference: np.ndarray,
                  inplace: set[str]) -> None:
    """Call every peer of one size once more and compare what it computed with raw mpi4py's
    result (``reference``): out-of-place peers read the raw peers' input, the ``inplace``
    peers reduce zeros (so zeros come back). A peer whose call returns nothing is read from its
    array in ``written``. A mismatch is printed and recorded (``doc["results"]``), and makes
    the script exit non-zero: a figure for a call that computes something else means
    nothing."""
    zeros = np.zeros_like(reference)
    bad = []
    for peer, fn in peers.items():
        got = fn()
        got = np.asarray(written[peer] if got is None else got).reshape(reference.shape)
        want = zeros if peer in inplace else reference
        # (sums in another order on 3+ ranks: not bit-identical, close)
        if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
            bad.append(f"{peer} (max abs diff {float(np.max(np.abs(got - want))):.3g})")
    rep.doc.setdefault("results", {})[size] = {"peers": len(peers), "mismatched": bad}
    if bad:
        rep.say(f"{'':>8} RESULTS DIFFER from raw mpi4py's at {size}: " + ", ".join(bad))


def torch_huge_pages(torch: Any) -> dict[str, Any]:
    """How much of a new 4 MiB torch CPU tensor (filled) sits on transparent huge pages
    (``AnonHugePages`` of its mapping in ``/proc/self/smaps``; -1 where that is unreadable),
    with torch's switch and the kernel's THP mode: MPI moves 4 KiB-paged memory slower."""
    t = torch.ones(1 << 20)
    addr = t.data_ptr()
    try:
        mode = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
        kernel = re.search(r"\[(\w+)\]", mode).group(1)  # type: ignore[union-attr]
    except (OSError, AttributeError):
        kernel = "unknown"
    huge, size = -1, t.numel() * 4 // 1024
    try:
        inside = False
        with open("/proc/self/smaps") as fh:
            for line in fh:
                head = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
                if head:
                    inside = int(head.group(1), 16) <= addr < int(head.group(2), 16)
                elif inside and line.startswith("AnonHugePages:"):
                    huge = int(line.split()[1])
                    break
    except OSError:
        pass
    return {"huge_kib": min(huge, size), "kib": size, "kernel": kernel,
            "switch": os.environ.get("THP_MEM_ALLOC_ENABLE", "unset")}


def hier_steps(rep: Report, size: str, nbytes: int, before: dict, after: dict,
               handoff: list[float | None]) -> None:
    """Where this rank's shared-memory allreduces of one size spent their time, per call
    (from the hierarchical plane's step timers): says whether a slow hier row lost its time
    reading the input, synchronising, or writing the result; and the core-to-core handoff
    rate just before and after the size's timings (:func:`handoff_rate`)."""
    calls = after["shm_calls"] - before["shm_calls"]
    if calls <= 0:
        return
    per = {k: (after["phase_s"][k] - before["phase_s"][k]) / calls for k in after["phase_s"]}
    read_s, out_s = per["copy_in"] + per["reduce"], per["copy_out"]
    steps = ", ".join(f"{k.replace('_', ' ')} {v * 1e3:.2f}" for k, v in per.items())
    rep.say(f"{'':>8} hier steps per call (this rank, ms): {steps}; input read at "
            f"{nbytes / read_s / 1e9 if read_s else 0:.1f} GB/s, result written at "
            f"{nbytes / out_s / 1e9 if out_s else 0:.1f} GB/s; core-to-core handoff before / "
            f"after: {' / '.join('-' if h is None else f'{h:.1f}' for h in handoff)} GB/s")
    rep.doc.setdefault("hier_steps", {})[size] = {"calls": calls, "per_call_s": per}


HANDOFF_BYTES = 512 << 10
"""The block of :func:`handoff_rate`: a segment slot of the hierarchical plane (cache-sized)."""


def handoff_rate(comm: MPI.Comm, reps: int = 101) -> float | None:
    """GB/s at which local rank 1 reads a 512 KiB block that local rank 0 has just written to
    node shared memory (median of ``reps``): the cache-to-cache traffic the hierarchical plane
    lives on. A VM's two vCPUs can sit on host cores that share a last-level cache or not, and
    the host may move them between runs: on the 2-core EPYC VM of issue 16, 32-43 GB/s in the
    first case, 17-21 GB/s in the second (there raw Open MPI is faster and the shared-memory
    plane slower). None with one rank on this node. Collective over ``comm``."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        if node.size < 2:
            return None
        win = MPI.Win.Allocate_shared(HANDOFF_BYTES if node.rank == 0 else 0, 1, comm=node)
        try:
            mem, _ = win.Shared_query(0)
            block = np.frombuffer(mem, np.uint8, count=HANDOFF_BYTES)
            mine = np.ones(HANDOFF_BYTES, np.uint8)
            times = []
            for _ in range(reps):
                if node.rank == 0:
                    np.copyto(block, mine)
                node.Barrier()
                t0 = time.perf_counter()
                if node.rank == 1:
                    np.copyto(mine, block)
                times.append(time.perf_counter() - t0)
                node.Barrier()
            rate = HANDOFF_BYTES / float(np.median(times)) / 1e9
        finally:
            win.Free()
        return node.bcast(rate, root=1)
    finally:
        node.Free()


def say_handoff(rep: Report, comm: MPI.Comm, when: str) -> None:
    """One line: the core-to-core handoff rate now (see :func:`handoff_rate`)."""
    rate = handoff_rate(comm)
    rep.doc.setdefault("handoff_gbs", {})[when] = rate
    if rate is not None:
        rep.say(f"core-to-core handoff at the {when} (512 KiB written by local rank 0 to shared "
                f"memory, read by local rank 1): {rate:.1f} GB/s")


def host_targets(rep: Report, rows: list[dict], n: int) -> None:
    """Issue 16's targets, one line each, from table 1's rows (met / NOT met / no rows)."""
    def worst(peers: tuple[str, ...], keep: Callable[[dict], bool], key: str) -> float | None:
        vals = [r[key] for r in rows if r["peer"] in peers and keep(r)]
        return (max(vals) if key == "ratio_to_mpi4py" else min(vals)) if vals else None

    flat = ("hvdcore allreduce(x)", "hvdcore out=")
    goals = [
        ("flat busbw >= 1.00x raw at >= 1 MiB", flat, lambda r: r["bytes"] >= MIB,
         "busbw_ratio_to_raw", 1.0),
        ("hierarchical busbw >= 1.30x raw at >= 16 MiB", ("hier allreduce(x)", "hier out="),
         lambda r: r["bytes"] >= 16 * MIB, "busbw_ratio_to_raw", 1.3),
        ("NumPy 4 KiB time <= 3x raw", flat, lambda r: r["bytes"] == 4 << 10,
         "ratio_to_mpi4py", 3.0),
        ("torch 4 KiB time <= 4x raw", TORCH_ROWS, lambda r: r["bytes"] == 4 << 10,
         "ratio_to_mpi4py", 4.0),
    ]
    if n < 2:
        return
    found = {}
    for text, peers, keep, key, goal in goals:
        w = worst(peers, keep, key)
        if w is None:
            continue
        ok = w >= goal if key == "busbw_ratio_to_raw" else w <= goal
        spread = max(max(r["ratio_to_mpi4py"], 1 / r["ratio_to_mpi4py"])
                     for r in rows if r["peer"] == RAW_AGAIN and keep(r))
        found[text] = {"worst": w, "met": ok, "raw_against_itself": spread}
        rep.say(f"issue 16 target, {text}: worst {w:.2f}x ({'met' if ok else 'NOT met'}; "
                f"raw against itself at these sizes: up to {spread:.2f}x apart)")
    rep.doc.setdefault("targets", {})["host"] = found
    floor_lines(rep, rows)


def floor_lines(rep: Report, rows: list[dict]) -> None:
    """Per size: the floor row's time against raw's, and the NumPy call's against the floor
    (what hvdcore's Python and scheduling add to the two MPI calls it cannot avoid)."""
    by = {(r["bytes"], r["peer"]): r["median_us"] for r in rows}
    found = {}
    for nbytes in sorted({r["bytes"] for r in rows}):
        floor, raw = by.get((nbytes, FLOOR)), by.get((nbytes, "mpi4py"))
        new = by.get((nbytes, "hvdcore allreduce(x)"))
        if floor is None or raw is None or new is None:
            continue
        found[label(nbytes)] = {"floor_vs_raw": floor / raw, "numpy_vs_floor": new / floor,
                                "numpy_minus_floor_us": new - floor}
        rep.say(f"floor at {label(nbytes)}: round + data take {floor / raw:.2f}x raw's time; "
                f"hvd.allreduce(x) takes {new / floor:.2f}x the floor ({new - floor:+.1f} us)")
        tfloor = by.get((nbytes, TORCH_FLOOR))
        calls = {p: by[(nbytes, p)] for p in TORCH_ROWS if (nbytes, p) in by}
        if tfloor is not None and calls:
            found[label(nbytes)].update(
                torch_floor_vs_raw=tfloor / raw, torch_floor_minus_numpy_us=tfloor - new,
                torch_vs_torch_floor={p: t / tfloor for p, t in calls.items()})
            spread = ", ".join(f"{p.removeprefix('torch ')} {t / tfloor:.2f}x"
                               for p, t in calls.items())
            rep.say(f"torch floor at {label(nbytes)}: the NumPy call with t.numpy() and "
                    f"torch.from_numpy takes {tfloor / raw:.2f}x raw's time "
                    f"({tfloor - new:+.1f} us over the NumPy call); the torch calls take "
                    f"{spread} of it")
    rep.doc.setdefault("targets", {})["floor"] = found


def torch_user_calls(hvt: Any, torch: Any, prefix: str) -> Callable[..., dict]:
    """The calls users make on a CPU torch tensor, as benchmark peers for one size:
    ``peers(nbytes, size, src=None)``. The calls that only read their input read ``src``
    (a float32 NumPy array, the raw peers' input) through ``torch.from_numpy`` when given,
    else a zero tensor of their own; the in-place call reduces a zero tensor of its own."""
    def peers(nbytes: int, size: str,
              src: np.ndarray | None = None) -> dict[str, Callable[[], object]]:
        t_new = torch.zeros(nbytes // 4) if src is None else torch.from_numpy(src)
        t_inp = torch.zeros(nbytes // 4)
        t_async = torch.zeros(nbytes // 4) if src is None else t_new

        def async_sync() -> Any:
            return hvt.synchronize(hvt.allreduce_async(t_async, op=hvt.Sum,
                                                       name=f"{prefix}as.{size}"))
        return {
            f"{prefix}allreduce(t)": lambda: hvt.allreduce(t_new, op=hvt.Sum,
                                                           name=f"{prefix}new.{size}"),
            f"{prefix}allreduce_(t)": lambda: hvt.allreduce_(t_inp, op=hvt.Sum,
                                                             name=f"{prefix}inp.{size}"),
            f"{prefix}async+sync": async_sync,
        }
    return peers


def gloo_table(args: argparse.Namespace, comm: MPI.Comm, rep: Report, hvt: Any, torch: Any,
               dist: Any, group: Any, on_gloo: bool) -> None:
    """Table 2: raw torch.distributed Gloo vs hvdcore's torch calls on the Gloo plane."""
    n, rows = comm.size, []
    what = ("vs hvdcore's torch calls on the Gloo plane" if on_gloo else
            "(hvdcore's torch calls take MPI here: table 1)")
    rep.say(f"\n[2] allreduce of torch CPU tensors, raw torch.distributed gloo {what}")
    rep.say(f"{'size':>8} {'peer':>22} {'median us':>11} {'busbw GB/s':>11} {'busbw vs raw':>13}"
            f"  {'raw peer'}")
    user = torch_user_calls(hvt, torch, "") if on_gloo else None
    for nbytes in args.sizes:
        size = label(nbytes)
        raw_t, raw_c = torch.zeros(nbytes // 4), torch.zeros(nbytes // 4)
        peers: dict[str, Callable[[], object]] = {
            "raw gloo": lambda: dist.all_reduce(raw_t, group=group),
            "raw gloo clone": lambda: dist.all_reduce(raw_c.clone(), group=group)}
        if user is not None:
            peers.update(user(nbytes, size, raw_c.numpy()))  # the clone peer's input
        reps = reps_for(args, nbytes)
        times = time_interleaved(comm, peers, reps)
        for peer, t in times.items():
            ref = raw_peer(peer, "raw gloo")
            ratio = times[ref] / t
            rows.append({"size": size, "bytes": nbytes, "peer": peer, "median_us": t * 1e6,
                         "busbw_GBps": busbw(n, nbytes, t), "busbw_ratio_to_raw": ratio,
                         "raw_peer": ref, "reps": reps})
            rep.say(f"{size:>8} {peer:>22} {t * 1e6:>11.1f} {fmt_bw(n, busbw(n, nbytes, t))} "
                    f"{ratio:>12.2f}x  {ref}")
    rep.doc["gloo"] = rows
    if on_gloo:
        target(rep, rows, "Gloo", 1 / 1.1, [b for b in args.sizes if b >= MIB])


def raw_peer(peer: str, raw: str) -> str:
    """The raw call a row is compared with: a new-tensor call with the raw call on a fresh
    clone (a new tensor costs an allocation, page faults included, for raw users too), the
    rest with the in-place raw call."""
    new_tensor = peer.endswith(("allreduce(t)", "async+sync")) or peer == f"{raw} clone"
    return f"{raw} clone" if new_tensor else raw


def target(rep: Report, rows: list[dict], plane: str, goal: float, sizes: list[int]) -> None:
    """One line: the worst busbw ratio of each hvdcore call over ``sizes``, against ``goal``."""
    mine = [r for r in rows if r["bytes"] in sizes and not r["peer"].startswith("raw")]
    if not mine:
        return
    worst: dict[str, float] = {}
    for r in mine:
        worst[r["peer"]] = min(worst.get(r["peer"], 9e9), r["busbw_ratio_to_raw"])
    lo = label(min(sizes))
    rep.say(f"issue 14 target, {plane} busbw >= {goal:.2f}x raw at >= {lo}: " + ", ".join(
        f"{k} worst {v:.3f}x ({'met' if v >= goal else 'NOT met'})" for k, v in worst.items()))
    rep.doc.setdefault("targets", {})[plane] = {"goal": goal, "from_bytes": min(sizes),
                                                "worst": worst}


def batch_tables(args: argparse.Namespace, comm: MPI.Comm, rep: Report, gloo: Any,
                 plane: Any = None) -> None:
    """Table 3: 100 x 64 KiB submitted together vs separately (MPI plane, flat, and the
    hierarchical grouped call when ``plane`` is the hierarchical host plane; Gloo plane)."""
    reps = min(15, args.max_reps)
    arrays = [np.full((64 << 10) // 4, float(i), np.float32) for i in range(100)]
    scratch = [a.copy() for a in arrays]
    flat = np.empty(sum(a.size for a in arrays), np.float32)

    def floor() -> None:  # what any one-buffer fusion pays: the copy in, one in-place call
        np.concatenate(arrays, out=flat)
        comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)

    def fused() -> None:
        hs = [hvd.allreduce_async(a, op=hvd.Sum, name=f"fused.{i}") for i, a in enumerate(arrays)]
        for h in hs:
            hvd.synchronize(h)

    variants: dict[str, Callable[[], object]] = {
        "mpi4py 100 blocking calls": lambda: [comm.Allreduce(MPI.IN_PLACE, s, op=MPI.SUM)
                                              for s in scratch],
        "floor: concat + 1 call": floor,
        "hvdcore fused (100 async)": fused,
        "hvdcore grouped (1 call)": lambda: hvd.grouped_allreduce(arrays, op=hvd.Sum,
                                                                  name="grouped"),
        "hvdcore 100 blocking calls": lambda: [hvd.allreduce(a, op=hvd.Sum, name=f"sep.{i}")
                                               for i, a in enumerate(arrays)],
    }
    if plane is not None:
        def hier_grouped() -> object:
            plane.enabled_allreduce = True
            try:
                return hvd.grouped_allreduce(arrays, op=hvd.Sum, name="hgrouped")
            finally:
                plane.enabled_allreduce = False
        variants["hier grouped (1 call)"] = hier_grouped
    base = "mpi4py 100 blocking calls"
    if gloo is not None:
        hvt, torch, dist, group = gloo
        tens = [torch.zeros((64 << 10) // 4) for _ in range(100)]

        def gloo_async() -> None:
            hs = [hvt.allreduce_async(t, op=hvt.Sum, name=f"gfused.{i}")
                  for i, t in enumerate(tens)]
            for h in hs:
                hvt.synchronize(h)
        variants.update({
            "raw gloo 100 calls": lambda: [dist.all_reduce(t, group=group) for t in tens],
            "hvdcore-gloo 100 async+sync": gloo_async,
            "hvdcore-gloo grouped (1 call)": lambda: hvt.grouped_allreduce(
                tens, op=hvt.Sum, name="ggrouped"),
            "hvdcore-gloo 100 blocking": lambda: [hvt.allreduce(t, op=hvt.Sum, name=f"gsep.{i}")
                                                  for i, t in enumerate(tens)],
        })
    times = time_interleaved(comm, variants, reps, warmup=2)
    rep.say("\n[3] 100 tensors x 64 KiB, float32 (speed-up vs the raw transport's 100 calls)")
    rep.say(f"{'variant':>30} {'median ms':>10} {'speed-up':>9}")
    for k, t in times.items():
        ref = times["raw gloo 100 calls"] if "gloo" in k else times[base]
        rep.say(f"{k:>30} {t * 1e3:>10.2f} {ref / t:>8.2f}x")
    rep.doc["batch_ms"] = {k: v * 1e3 for k, v in times.items()}
    best = min(times[k] for k in ("hvdcore fused (100 async)", "hvdcore grouped (1 call)",
                                  "hier grouped (1 call)") if k in times)
    fl = times["floor: concat + 1 call"]
    rep.say(f"issue 16 target, 100 x 64 KiB together faster than 100 raw calls: best "
            f"{times[base] / best:.2f}x ({'met' if best < times[base] else 'NOT met'}); "
            f"the floor (raw concat + one in-place call) {times[base] / fl:.2f}x; "
            f"hvdcore's best takes {best / fl:.2f}x the floor's time")
    rep.doc.setdefault("targets", {})["batch"] = {"best_speedup": times[base] / best,
                                                  "floor_speedup": times[base] / fl}


# -- GPU tables -----------------------------------------------------------------------------


def time_windows(comm: MPI.Comm, torch: Any, peers: dict[str, Callable[[], object]],
                 windows: int, iters: int) -> dict[str, float]:
    """nccl-tests style: median over windows of (window time / iters); each window starts after
    ``torch.cuda.synchronize()`` and an MPI barrier and ends with a synchronize."""
    for fn in peers.values():
        for _ in range(max(2, iters // 4)):
            fn()
    torch.cuda.synchronize()
    keys = list(peers)
    samples: dict[str, list[float]] = {k: [] for k in keys}
    for w in range(windows):
        for k in keys[w % len(keys):] + keys[:w % len(keys)]:
            fn = peers[k]
            torch.cuda.synchronize()
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
            samples[k].append((time.perf_counter() - t0) / iters)
    return {k: statistics.median(v) for k, v in samples.items()}


def gpu_tables(args: argparse.Namespace, comm: MPI.Comm, rep: Report, hvt: Any, torch: Any,
               dist: Any) -> None:
    """Tables 4a-c: the NCCL/RCCL plane vs raw torch.distributed on the same default group."""
    n, dev = comm.size, torch.device("cuda", torch.cuda.current_device())
    plane = hvt.gpu_operations()
    rep.say(f"\n[4] GPU: {torch.cuda.get_device_name(dev)}, hvdcore plane {plane}, "
            f"torch {torch.__version__}, NCCL {_nccl_version(torch)}")
    windows = max(3, min(args.max_reps, 10))
    free = torch.cuda.mem_get_info(dev)[0]
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(dev), "plane": plane}

    def peers_for(nbytes: int, size: str) -> dict[str, Callable[[], object]]:
        raw_t = torch.zeros(nbytes // 4, device=dev)
        raw_c = torch.zeros(nbytes // 4, device=dev)
        inp = torch.zeros(nbytes // 4, device=dev)
        new = torch.zeros(nbytes // 4, device=dev)
        return {"raw nccl": lambda: dist.all_reduce(raw_t),
                "raw nccl clone": lambda: dist.all_reduce(raw_c.clone()),
                "hvdcore allreduce_(t)": lambda: hvt.allreduce_(inp, op=hvt.Sum,
                                                                name=f"g.inp.{size}"),
                "hvdcore allreduce(t)": lambda: hvt.allreduce(new, op=hvt.Sum,
                                                              name=f"g.new.{size}")}

    rep.say(f"\n[4a] busbw, {args.gpu_iters} calls per window, median of {windows} windows")
    rep.say(f"{'size':>8} {'peer':>22} {'us/call':>10} {'busbw GB/s':>11} {'busbw vs raw':>13}"
            "  raw peer")
    rows = []
    for nbytes in args.gpu_sizes:
        size = label(nbytes)
        if 6 * nbytes > free:  # four buffers, a clone and a result per call
            rep.say(f"{size:>8} skipped: {free / MIB:.0f} MiB free on the device")
            continue
        times = time_windows(comm, torch, peers_for(nbytes, size), windows, args.gpu_iters)
        for peer, t in times.items():
            ref = raw_peer(peer, "raw nccl")
            ratio = times[ref] / t
            rows.append({"size": size, "bytes": nbytes, "peer": peer, "us_per_call": t * 1e6,
                         "busbw_GBps": busbw(n, nbytes, t), "busbw_ratio_to_raw": ratio,
                         "raw_peer": ref})
            rep.say(f"{size:>8} {peer:>22} {t * 1e6:>10.1f} {fmt_bw(n, busbw(n, nbytes, t))} "
                    f"{ratio:>12.2f}x  {ref}")
        torch.cuda.empty_cache()
    out["busbw"] = rows
    if n > 1:
        target(rep, rows, "NCCL", 0.95, [b for b in args.gpu_sizes if b >= 64 * MIB])

    rep.say(f"\n[4b] per-call time and hvdcore's overhead over raw torch.distributed ({n} "
            f"rank{'s' if n > 1 else ''})")
    rep.say("        in place: raw all_reduce(t) vs hvd.allreduce_(t); new tensor: raw "
            "all_reduce(t.clone()) vs hvd.allreduce(t)")
    rep.say(f"{'size':>8} {'raw us':>9} {'allreduce_ us':>14} {'overhead us':>12} "
            f"{'raw clone us':>13} {'allreduce us':>13} {'overhead us':>12}")
    rows = []
    for nbytes in args.overhead_sizes:
        size = label(nbytes)
        t = time_windows(comm, torch, peers_for(nbytes, size), windows, args.gpu_iters)
        raw, clone, inp, new = (t[k] * 1e6 for k in (
            "raw nccl", "raw nccl clone", "hvdcore allreduce_(t)", "hvdcore allreduce(t)"))
        rows.append({"size": size, "bytes": nbytes, "raw_us": raw, "inplace_us": inp,
                     "raw_clone_us": clone, "new_us": new, "inplace_overhead_us": inp - raw,
                     "new_overhead_us": new - clone})
        rep.say(f"{size:>8} {raw:>9.1f} {inp:>14.1f} {inp - raw:>12.1f} {clone:>13.1f} "
                f"{new:>13.1f} {new - clone:>12.1f}")
    out["overhead"] = rows

    tens = [torch.zeros((64 << 10) // 4, device=dev) for _ in range(100)]

    def fused() -> None:
        hs = [hvt.allreduce_async(t, op=hvt.Sum, name=f"gpu.fused.{i}")
              for i, t in enumerate(tens)]
        for h in hs:
            hvt.synchronize(h)
    variants: dict[str, Callable[[], object]] = {
        "raw nccl 100 calls": lambda: [dist.all_reduce(t) for t in tens],
        "hvdcore 100 async+sync": fused,
        "hvdcore grouped (1 call)": lambda: hvt.grouped_allreduce(tens, op=hvt.Sum,
                                                                  name="gpu.grouped"),
        "hvdcore 100 blocking": lambda: [hvt.allreduce(t, op=hvt.Sum, name=f"gpu.sep.{i}")
                                         for i, t in enumerate(tens)],
    }
    times = time_windows(comm, torch, variants, windows, 1)
    rep.say("\n[4c] 100 tensors x 64 KiB on the GPU (speed-up vs 100 raw NCCL calls)")
    rep.say(f"{'variant':>30} {'median ms':>10} {'speed-up':>9}")
    for k, t in times.items():
        rep.say(f"{k:>30} {t * 1e3:>10.2f} {times['raw nccl 100 calls'] / t:>8.2f}x")
    out["batch_ms"] = {k: v * 1e3 for k, v in times.items()}
    rep.doc["gpu"] = out


def _nccl_version(torch: Any) -> str:
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except (AttributeError, RuntimeError):
        return "unknown"


# -- set-up ---------------------------------------------------------------------------------


def prepare_devices(args: argparse.Namespace, torch: Any) -> str | None:
    """Before ``hvd.init()``: pin this rank's GPU, or say why the GPU tables are skipped."""
    if args.no_gpu:
        return "--no-gpu"
    if torch is None or not torch.cuda.is_available():
        return "no GPU visible to torch (torch.cuda.is_available() is False)"
    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, local_size = node.rank, node.size
    node.Free()
    count = torch.cuda.device_count()
    if local_size > count:
        os.environ.setdefault("HVDCORE_GPU_OPERATIONS", "mpi")
        return (f"{local_size} ranks on this host share {count} GPU(s); NCCL needs one GPU "
                "per rank (run one rank per GPU)")
    torch.cuda.set_device(local_rank)  # before init: hvdcore's NCCL plane takes this device
    return None


def raw_gloo_group(comm: MPI.Comm, dist: Any) -> Any:
    """The group raw Gloo calls use: hvdcore's default group when it has Gloo, else a new one."""
    if dist.is_initialized():
        return None if "gloo" in str(dist.get_backend()).lower() else dist.new_group(
            backend="gloo")
    port = comm.bcast(29500 + (os.getpid() % 1000) if comm.rank == 0 else None, root=0)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=comm.rank, world_size=comm.size)
    return None


def main() -> None:
    args = parse_args()
    torch = dist = hvt = None
    if not args.no_torch:
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            torch = None
    gloo_ok = torch is not None and dist.is_available() and dist.is_gloo_available()
    if gloo_ok and args.cpu_operations:
        os.environ["HVDCORE_CPU_OPERATIONS"] = args.cpu_operations  # read once, by init()
    if not args.no_hierarchical:
        os.environ["HVDCORE_HIERARCHICAL_ALLREDUCE"] = "1"
    gpu_skip = prepare_devices(args, torch)
    if torch is not None:
        import hvdcore.torch as hvt

        hvt.init()
        node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
        torch.set_num_threads(args.torch_threads or max(1, (os.cpu_count() or 1) // node.size))
        node.Free()
    else:
        hvd.init()
    comm = MPI.COMM_WORLD.Dup()
    rep = Report(comm)
    load = os.getloadavg()
    rep.doc.update(load_avg_start=load, host=platform.node(), cores=os.cpu_count(),
                   mpi=MPI.Get_library_version().splitlines()[0].strip())
    rep.say(f"allreduce benchmark: {comm.size} ranks on {platform.node()} ({os.cpu_count()} "
            f"cores), load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15 min)")
    rep.say(f"MPI: {rep.doc['mpi']}")
    if hvt is not None:
        rep.doc.update(torch=torch.__version__, cpu_operations=hvt.cpu_operations(),
                       gpu_operations=hvt.gpu_operations(), torch_threads=torch.get_num_threads())
        rep.say(f"torch {torch.__version__} ({torch.get_num_threads()} threads/rank); hvdcore "
                f"planes: CPU tensors {hvt.cpu_operations()}, device tensors "
                f"{hvt.gpu_operations()}")
        pages = torch_huge_pages(torch)
        rep.doc["torch_huge_pages"] = pages
        rep.say(f"torch CPU tensors of 4 MiB: {pages['huge_kib']} of {pages['kib']} KiB on huge "
                f"pages (THP_MEM_ALLOC_ENABLE={pages['switch']}, kernel THP mode "
                f"{pages['kernel']})")
    on_gloo = hvt is not None and hvt.cpu_operations().startswith("gloo")
    torch_on_mpi = hvt is not None and not on_gloo
    steady = basics.state().engine.rounds.channel.calls
    rep.doc["hot_path"] = ("none (no response cache)" if steady is None else
                           "compiled" if steady.compiled else "mpi4py")
    rep.say(f"repeated blocking host allreduces: {rep.doc['hot_path']} steady path "
            "(HVDCORE_HOTPATH; hvdcorerun --check-build says why)")
    plane = basics.state().host_plane
    plane = plane if getattr(plane, "enabled_allreduce", False) else None
    rep.say("host plane: " + ("hierarchical allreduce (hier rows)" if plane is not None else
                              "flat (no hier rows: --no-hierarchical, or 1 rank per node)"))
    say_handoff(rep, comm, "start")
    host_table(args, comm, rep,
               torch_user_calls(hvt, torch, "torch ") if torch_on_mpi else None, plane)
    say_handoff(rep, comm, "end of table 1")
    gloo = None
    if gloo_ok:
        group = raw_gloo_group(comm, dist)
        gloo_table(args, comm, rep, hvt, torch, dist, group, on_gloo)
        gloo = (hvt, torch, dist, group) if on_gloo else None
    else:
        rep.say("\n[2] skipped: " + ("--no-torch" if args.no_torch else
                                     "torch (with torch.distributed Gloo) is not installed"))
    batch_tables(args, comm, rep, gloo, plane)
    if gpu_skip is None and not hvt.gpu_operations().startswith(("nccl", "rccl")):
        gpu_skip = f"device tensors take {hvt.gpu_operations()}"
    if gpu_skip is None:
        gpu_tables(args, comm, rep, hvt, torch, dist)
    else:
        rep.say(f"\n[4] GPU tables skipped: {gpu_skip}")
        rep.doc["gpu"] = {"skipped": gpu_skip}
    load = os.getloadavg()
    rep.doc["load_avg_end"] = load
    wrong = {k: v["mismatched"] for k, v in rep.doc.get("results", {}).items() if v["mismatched"]}
    rep.say("results of table 1: " + (f"WRONG at {', '.join(wrong)}" if wrong else
                                      "every peer computed raw mpi4py's result, every size"))
    rep.say(f"\nload average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json and comm.rank == 0:
        with open(args.json, "w") as fh:
            json.dump(rep.doc, fh, indent=2)
    comm.Barrier()
    if torch is not None:
        hvt.shutdown()  # destroys the group hvdcore created
        if dist.is_initialized():
            dist.destroy_process_group()
    else:
        hvd.shutdown()
    if wrong:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
