"""The steady path (a cached blocking allreduce: round and data as one call) on real ranks.

Modes:
  exact   every dtype x op x output kind x size, blocking and asynchronous, the same names
          called again and again with new values each time, and two asynchronous calls the
          ranks start in different orders: results bit-identical to a reference computed
          here from every rank's inputs (integer-valued data, so any summation order gives the same bits).
          Prints ``rank R exact ok: N checks, hvdcore=<package dir>, steady=<SteadyCalls class>``.
  late    the same with one rank sleeping before some calls (the round is still in flight
          on the others, or completes without it: the hit then waits its turn).
          Prints ``rank R late ok: N checks``.
  direct  both SteadyCalls implementations on the plane's round communicator, called
          directly: all agree (data reduced), tails differ, a flag set, lists not yet
          executed, and a late peer (the round still pending: waited, then the data call).
          Prints ``rank R direct ok: <implementations>`` (and why the compiled one is not
          there, where it is not).
"""

from __future__ import annotations

import functools
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import hvdcore as hvd
from hvdcore import basics
from hvdcore.backends import mpi_steady
from hvdcore.backends.round_wire import HEADER_BYTES, Header
from hvdcore.engine.cache import RoundVector

hvd.init()
R, N = hvd.rank(), hvd.size()
HVDCORE = os.path.dirname(hvd.__file__)  # which install this run imported
modes = sys.argv[1:]  # several modes run one after the other (tests/steady_runs.py)

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.float16, np.bool_]
OPS = {hvd.Sum: "sum", hvd.Average: "average", hvd.Min: "min", hvd.Max: "max",
       hvd.Product: "product"}
SIZES = [0, 1, 1000, 300_001]  # the last is above the hierarchical plane's 1 MiB threshold


def inputs(rank: int, n: int, dtype: type, it: int, salt: int) -> np.ndarray:
    """Small integers, read-only (the core only reads its inputs)."""
    rng = np.random.default_rng(1000 * rank + 17 * it + salt)
    if dtype == np.bool_:
        arr = rng.integers(0, 2, n).astype(np.bool_)
    else:
        arr = rng.integers(0 if dtype == np.uint8 else -3, 4, n).astype(dtype)
    arr.flags.writeable = False
    return arr


def reference(op: object, ins: list[np.ndarray], dtype: type) -> np.ndarray:
    """What every rank must get: reduced exactly in a wide type; an average scaled the way
    the executor scales (in the dtype the MPI plane reduces in: float16 in float32)."""
    if dtype == np.bool_:
        stack = np.stack(ins)
        return stack.any(0) if op in (hvd.Sum, hvd.Max) else stack.all(0)
    if op == hvd.Product and np.dtype(dtype).kind != "f":
        return functools.reduce(np.multiply, ins)  # integer products wrap, as MPI's do
    stack = np.stack([a.astype(np.float64 if np.dtype(dtype).kind == "f" else np.int64)
                      for a in ins])
    res = {hvd.Sum: stack.sum(0), hvd.Average: stack.sum(0), hvd.Min: stack.min(0),
           hvd.Max: stack.max(0), hvd.Product: stack.prod(0)}[op]
    if op != hvd.Average:
        return res.astype(dtype)
    out = np.empty(res.shape, dtype)
    np.multiply(res.astype(np.float32 if dtype == np.float16 else dtype), 1.0 / N, out=out,
                casting="unsafe")
    return out


checks = 0


def check(got: np.ndarray, want: np.ndarray, what: str) -> None:
    global checks
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape)
    same = got.reshape(-1).view(np.uint8) == want.reshape(-1).view(np.uint8)
    assert same.all(), f"rank {R} {what}: got {got[:8]}, want {want[:8]}"
    checks += 1


def sweep(iterations: int, late: bool) -> None:
    for dtype in DTYPES:
        for op, opname in OPS.items():
            if dtype == np.bool_ and op in (hvd.Average, hvd.Product):
                continue
            for n in SIZES:
                if n > 1000 and op not in (hvd.Sum, hvd.Average):
                    continue  # the large size once per kind of result is enough
                tag = f"{np.dtype(dtype).name} {opname} {n}"
                other = np.empty(n, dtype)
                for it in range(iterations):
                    if late and R == N - 1 and it % 3 == 1:
                        time.sleep(0.002)
                    ins = [inputs(r, n, dtype, it, op.value) for r in range(N)]
                    want = reference(op, ins, dtype)
                    got = hvd.allreduce(ins[R], op=op, name=f"new {tag}")
                    check(got, want, f"new {tag} it {it}")
                    mine = ins[R].copy()
                    hvd.allreduce(mine, op=op, name=f"inplace {tag}", out=mine)
                    check(mine, want, f"in place {tag} it {it}")
                    hvd.allreduce(ins[R], op=op, name=f"out {tag}", out=other)
                    check(other, want, f"out= {tag} it {it}")
                    # asynchronous calls, each waited for before the next (with caller
                    # progress, the steady path then starts them: engine/lone.py)
                    h = hvd.allreduce_async(ins[R], op=op, name=f"async {tag}")
                    check(hvd.synchronize(h), want, f"async {tag} it {it}")
                    mine = ins[R].copy()
                    h = hvd.allreduce_async(mine, op=op, name=f"async_ {tag}", out=mine)
                    hvd.synchronize(h)
                    check(mine, want, f"async in place {tag} it {it}")
    crossed(12, late)


def crossed(iterations: int, late: bool) -> None:
    """Two asynchronous calls that the ranks start in different orders (each rank's order
    changes every iteration), synchronized in the reverse order: no rank may wait in a call
    for a peer that is busy with another."""
    for it in range(iterations):
        if late and R == N - 1 and it % 3 == 1:
            time.sleep(0.002)
        mine = {"a": np.full(1000, R + it, np.float32), "b": np.full(3, 2 * R - it, np.int64)}
        want = {"a": np.full(1000, sum(r + it for r in range(N)), np.float32),
                "b": np.full(3, sum(2 * r - it for r in range(N)), np.int64)}
        order = ["a", "b"] if (R + it) % 2 == 0 else ["b", "a"]
        handles = {k: hvd.allreduce_async(mine[k], op=hvd.Sum, name=f"crossed {k}")
                   for k in order}
        for k in reversed(order):
            check(hvd.synchronize(handles[k]), want[k], f"crossed {k} it {it}")


def direct() -> list[str]:
    """Both implementations, called directly, in the situations the engine meets."""
    rounds = MPI.COMM_WORLD.Dup()  # a round communicator of this test's own
    module, why = mpi_steady.compiled_module()

    def make(spin_s: float) -> list[mpi_steady.SteadyCalls]:
        impls: list[mpi_steady.SteadyCalls] = [mpi_steady.PythonSteady(rounds, spin_s)]
        if module is not None:
            impls.append(mpi_steady.CompiledSteady(rounds, spin_s, module))
        return impls

    # A spin long enough for any peer to come: these calls complete whatever the scheduling.
    impls, brief = make(60.0), make(1e-3)
    comm = MPI.COMM_WORLD.Dup()
    rv = RoundVector(128)  # the engine's layout: header, miss bits, invalid bits
    for calls, calls_brief in zip(impls, brief, strict=True):
        name = type(calls).__name__
        send, recv = rv.buffer(), rv.buffer()
        src = np.arange(5, dtype=np.float64) + R
        want = sum(np.arange(5, dtype=np.float64) + r for r in range(N))
        tail = rv.tail([5])  # every rank offers cache id 5 alone
        f64 = np.dtype(np.float64)

        def one(tail: bytes, lists: int, lists_done: int, dst: np.ndarray,
                src: np.ndarray = src, calls: object = calls) -> object:
            call = calls.bind(send, recv, tail, comm, f64, MPI.SUM)  # type: ignore[attr-defined]
            return call(lists, lists_done, src, dst, src.size)

        # every rank offers the same tensor: the data call runs (out of place, then in place)
        dst = np.zeros(5)
        assert one(tail, 0, 0, dst) == mpi_steady.DONE and np.array_equal(dst, want), name
        assert bytes(send[:HEADER_BYTES]) == bytes(HEADER_BYTES), name
        assert bytes(send[HEADER_BYTES:]) == tail, name
        inplace = src.copy()
        got = one(tail, 0, 0, inplace, inplace)
        assert got == mpi_steady.DONE and np.array_equal(inplace, want), name
        # rank 0 counts lists the others have not executed yet
        dst = np.zeros(5)
        got = one(tail, 3 if R == 0 else 0, 2, dst)
        assert got == mpi_steady.NOT_READY, name
        assert Header.unpack_from(recv).lists == 3 and not dst.any(), name
        if N > 1:
            # the last rank offers another tensor: neither is ready, nobody runs the data
            mine = rv.tail([6]) if R == N - 1 else tail
            dst = np.zeros(5)
            assert one(mine, 0, 0, dst) == mpi_steady.NOT_READY and not dst.any(), name
            assert rv.unpack(recv, [5, 6])[1] == [], name  # (the or misses both)
            # rank 0's engine marks an id invalid and posts its round on the general path
            # (never the steady one): the others must not run the data, but that round first
            dst = np.zeros(5)
            if R == 0:
                bad = rv.buffer()
                rv.pack(bad, Header(), [5], [9])
                rounds.Iallreduce([bad, MPI.UINT64_T], [recv, MPI.UINT64_T], op=MPI.BOR).Wait()
            else:
                assert one(tail, 0, 0, dst) == mpi_steady.NOT_READY and not dst.any(), name
            assert rv.unpack(recv, [5])[1:] == ([5], [9]), name
            # a peer that comes 50 ms late to a round polled for 1 ms: the others usually get
            # the round's request back, wait for it and make the data call themselves (what
            # the engine's general path does); either way the data is reduced once
            comm.Barrier()
            if R == N - 1:
                time.sleep(0.05)
            dst = np.zeros(5)
            got = one(tail, 0, 0, dst, calls=calls_brief)
            if isinstance(got, tuple):
                assert got[0] == mpi_steady.PENDING, (name, got)
                calls_brief.pending(got[1]).Wait()
                assert bytes(recv[HEADER_BYTES:]) == tail, name
                comm.Allreduce(src, dst, op=MPI.SUM)
            else:
                assert got == mpi_steady.DONE, (name, got)
            assert np.array_equal(dst, want), name
        comm.Barrier()
    comm.Free()
    rounds.Free()
    return [type(c).__name__ for c in impls] + ([] if module else [f"(compiled: {why})"])


for mode in modes:
    if mode == "exact":
        sweep(4, late=False)
        steady = basics.state().engine.rounds.channel.calls
        print(f"rank {R} exact ok: {checks} checks, hvdcore={HVDCORE}, "
              f"steady={type(steady).__name__}", flush=True)
    elif mode == "late":
        sweep(4, late=True)
        print(f"rank {R} late ok: {checks} checks", flush=True)
    elif mode == "direct":
        print(f"rank {R} direct ok: {' '.join(direct())}", flush=True)
    else:
        raise SystemExit(f"unknown mode {mode}")
hvd.shutdown()
