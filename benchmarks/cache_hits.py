"""How often blocking allreduces of cached tensors take the fast path (a figure, not a test).

Run under MPI with 2 (or more) ranks::

    hvdcorerun -np 2 python benchmarks/cache_hits.py
    HVDCORE_PROGRESS=caller mpirun -np 3 --oversubscribe python benchmarks/cache_hits.py

A blocking allreduce of a tensor the ranks reduced before takes the engine's fast path when
its round completes at once, i.e. when every peer is already there; otherwise it becomes an
ordinary pending hit of the posted round (same result, a little later). The share therefore
depends on scheduling: high when ranks have cores of their own, low when they are
oversubscribed. The tests (tests/test_core_cache.py) assert results only; this script reports
the share per rank, for calls back to back and for calls that each start after a raw MPI
barrier (peers arrive together).
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import hvdcore as hvd
from hvdcore import basics


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--calls", type=int, default=500, help="blocking calls per pattern")
    p.add_argument("--elements", type=int, default=1024, help="float32 elements per tensor")
    return p.parse_args()


def run(pattern: str, calls: int, x: np.ndarray, comm: MPI.Comm) -> tuple[int, int]:
    """(fast-path calls, rounds posted) over ``calls`` blocking allreduces of one name."""
    engine = basics.state().engine
    name = f"cache_hits.{pattern}"
    hvd.allreduce(x, op=hvd.Sum, name=name)  # negotiated once: cached from now on
    fast0, rounds0 = engine.fast_count, engine.rounds_posted
    for _ in range(calls):
        if pattern == "barrier":
            comm.Barrier()
        hvd.allreduce(x, op=hvd.Sum, name=name)
    return engine.fast_count - fast0, engine.rounds_posted - rounds0


def main() -> None:
    a = parse_args()
    hvd.init()
    comm = MPI.COMM_WORLD
    x = np.ones(a.elements, np.float32)
    mode = "caller" if basics.state().engine.caller_progress else "thread"
    rows = []
    for pattern in ("back-to-back", "barrier"):
        fast, rounds = run(pattern, a.calls, x, comm)
        per_rank = comm.gather((fast, rounds), root=0)
        if comm.rank == 0:
            for r, (f, n) in enumerate(per_rank):
                rows.append(f"| {pattern} | {r} | {a.calls} | {f} | {100.0 * f / a.calls:.0f} % "
                            f"| {n} |")
    if comm.rank == 0:
        print(f"ranks={comm.size} progress={mode} tensor={4 * a.elements} bytes")
        print("| pattern | rank | calls | fast path | share | rounds |")
        print("|---|---:|---:|---:|---:|---:|")
        print("\n".join(rows))
    hvd.shutdown()


if __name__ == "__main__":
    main()
