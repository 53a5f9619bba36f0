"""The steady path of a batch (a step's gradients reduced in place as one fused allreduce:
round and data as one call) on real ranks.

Modes:
  engine  batches through ``hvdcore.ops.allreduce_batch_async`` with the same names tuple
          step after step and new values every step: float32/float64 (the path's dtypes),
          int32 and float16 (the general path's), Sum/Average/Min/Max, a postscale and a
          prescale factor, tensors with gaps between them in the fusion buffer, empty ones,
          and a batch of two dtypes; between steps, a blocking allreduce of another name and
          a changed shape (the cache drops the id, then takes the new shape). With ``late``,
          the last rank sleeps before some steps (the others' rounds are then still in flight:
          the batch waits as ordinary hits, and its data call runs when the round completes).
          Results bit-identical to a reference computed here from every rank's inputs
          (integer-valued data, so any summation order gives the same bits). Prints
          ``rank R engine ok: N checks, hvdcore=<package dir>, steady=<SteadyCalls class>``.
  direct  both SteadyCalls implementations' batch calls on a round communicator of their
          own, called directly: every rank offers the batch (the data runs, with gaps and
          scaling), a tail that differs (nothing touched), and the data call alone.
          Prints ``rank R direct-batch ok: <implementations>`` (and why the compiled one is not
          there, where it is not).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import hvdcore as hvd
from hvdcore import basics
from hvdcore import ops as hops
from hvdcore.backends import mpi_steady
from hvdcore.engine.cache import RoundVector

hvd.init()
R, N = hvd.rank(), hvd.size()
HVDCORE = os.path.dirname(hvd.__file__)  # which install this run imported
# several modes run one after the other (tests/steady_runs.py); "late" applies to "engine"
modes = [m for m in sys.argv[1:] if m != "late"]
late = "late" in sys.argv[1:]

SHAPES = [(3,), (5, 7), (1,), (0,), (1000,), (2, 3, 4)]  # odd sizes: gaps between them
checks = 0


def inputs(rank: int, shape: tuple[int, ...], dtype: type, it: int, salt: int) -> np.ndarray:
    rng = np.random.default_rng(10_000 * rank + 31 * it + salt)
    return rng.integers(-3, 4, shape).astype(dtype)


def reference(ins: list[np.ndarray], op: object, pre: float, post: float) -> np.ndarray:
    """What the executor computes: inputs scaled by ``pre`` in their dtype (float16 is
    reduced in float32), reduced exactly, then multiplied by ``post`` (divided by the set
    size for an average) in the reduction dtype."""
    dtype = ins[0].dtype
    rdtype = np.dtype(np.float32) if dtype == np.float16 else dtype
    scaled = [a.astype(rdtype) if pre == 1.0 else np.multiply(a.astype(rdtype), pre,
                                                                  casting="unsafe")
              for a in ins]
    wide = np.stack([a.astype(np.float64 if rdtype.kind == "f" else np.int64) for a in scaled])
    res = {hvd.Sum: wide.sum(0), hvd.Average: wide.sum(0), hvd.Min: wide.min(0),
           hvd.Max: wide.max(0)}[op].astype(rdtype)
    factor = post / N if op == hvd.Average else post
    out = np.empty(res.shape, dtype)
    if factor == 1.0:
        np.copyto(out, res, casting="unsafe")
    else:
        np.multiply(res, factor, out=out, casting="unsafe")
    return out


def check(got: np.ndarray, want: np.ndarray, what: str) -> None:
    global checks
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape)
    same = got.reshape(-1).view(np.uint8) == want.reshape(-1).view(np.uint8)
    assert same.all(), f"rank {R} {what}: got {got.reshape(-1)[:8]}, want {want.reshape(-1)[:8]}"
    checks += 1


def batch_steps(tag: str, dtypes: list[type], op: object, pre: float, post: float,
                steps: int) -> None:
    """``steps`` steps of one batch (one names tuple), in place, checked every step."""
    names = tuple(f"{tag}.{i}" for i in range(len(SHAPES)))
    for it in range(steps):
        if late and R == N - 1 and it % 3 == 1:
            time.sleep(0.003)
        ins = [[inputs(r, s, dtypes[i % len(dtypes)], it, i) for i, s in enumerate(SHAPES)]
               for r in range(N)]
        mine = [a.copy() for a in ins[R]]
        h = hops.allreduce_batch_async(mine, names, op, pre, post)
        got = hvd.synchronize(h)
        assert len(got) == len(mine) and all(g is m for g, m in zip(got, mine, strict=True)), tag
        for i in range(len(SHAPES)):
            check(mine[i], reference([ins[r][i] for r in range(N)], op, pre, post),
                  f"{tag} step {it} tensor {i}")
        if it % 4 == 2:  # something else between two steps
            x = np.full(4, float(R + it), np.float32)
            check(hvd.allreduce(x, op=hvd.Sum, name=f"{tag}.between"),
                  np.full(4, float(sum(r + it for r in range(N))), np.float32),
                  f"{tag} between {it}")


def changed_shape(steps: int) -> None:
    """One tensor of a recurring batch changes shape for a step and then changes back."""
    names = ("shape.a", "shape.b")
    for it in range(steps):
        n = 7 if it in (3, 4) else 5
        ins = [[np.full(n, r + it, np.float32), np.full(3, 2 * r, np.float32)]
               for r in range(N)]
        mine = [a.copy() for a in ins[R]]
        hvd.synchronize(hops.allreduce_batch_async(mine, names, hvd.Average))
        for i in range(2):
            check(mine[i], reference([ins[r][i] for r in range(N)], hvd.Average, 1.0, 1.0),
                  f"shape step {it} tensor {i}")


def engine() -> str:
    for dtype in (np.float32, np.float64):
        for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max):
            batch_steps(f"{np.dtype(dtype).name}.{op.name}", [dtype], op, 1.0, 1.0, 8)
        batch_steps(f"{np.dtype(dtype).name}.post", [dtype], hvd.Sum, 1.0, 2.0, 6)
        batch_steps(f"{np.dtype(dtype).name}.avgpost", [dtype], hvd.Average, 1.0, 0.5, 6)
        batch_steps(f"{np.dtype(dtype).name}.pre", [dtype], hvd.Sum, 2.0, 1.0, 6)
    batch_steps("int32.Sum", [np.int32], hvd.Sum, 1.0, 1.0, 6)
    batch_steps("int32.Average", [np.int32], hvd.Average, 1.0, 1.0, 6)
    batch_steps("float16.Average", [np.float16], hvd.Average, 1.0, 1.0, 6)
    batch_steps("mixed.Average", [np.float32, np.float64], hvd.Average, 1.0, 1.0, 6)
    changed_shape(8)
    return type(basics.state().engine.rounds.channel.calls).__name__


def direct() -> list[str]:
    """Both implementations' batch calls, called directly."""
    rounds = MPI.COMM_WORLD.Dup()
    module, why = mpi_steady.compiled_module()
    impls: list[mpi_steady.SteadyCalls] = [mpi_steady.PythonSteady(rounds, 60.0)]
    if module is not None:
        impls.append(mpi_steady.CompiledSteady(rounds, 60.0, module))
    comm = MPI.COMM_WORLD.Dup()
    rv = RoundVector(128)
    shapes = [(3,), (5,), (16,)]
    for calls in impls:
        name = type(calls).__name__
        for dtype, scale in ((np.float32, 1), (np.float64, 2), (np.int64, 0)):
            dt = np.dtype(dtype)
            send, recv = rv.buffer(), rv.buffer()
            unit = 64 // dt.itemsize  # each tensor starts on a 64-byte boundary
            offsets = [0, unit, 2 * unit]
            total = 2 * unit + 16
            places = np.array([[o * dt.itemsize, int(np.prod(s)) * dt.itemsize]
                               for o, s in zip(offsets, shapes, strict=True)], np.int64)
            gaps = np.array([[3 * dt.itemsize, (unit - 3) * dt.itemsize],
                             [(unit + 5) * dt.itemsize, (unit - 5) * dt.itemsize]], np.int64)
            buf = np.full(total + 5, 99, dt)  # garbage in the gaps and past the end
            post = 0.25 if scale else 1.0
            ins = [[np.arange(int(np.prod(s)), dtype=dt) + r + i for i, s in enumerate(shapes)]
                   for r in range(N)]
            want = [reference([ins[r][i] for r in range(N)], hvd.Sum, 1.0, post)
                    for i in range(len(shapes))]
            tail = rv.tail([2, 7])
            call = calls.bind_batch(send, recv, tail, comm, dt, MPI.SUM)
            assert call is not None, name
            mine = [a.copy() for a in ins[R]]
            got = call(0, 0, mine, places, gaps, buf, total, scale, post)
            assert got == mpi_steady.DONE, (name, got)
            for i in range(len(shapes)):
                check(mine[i], want[i], f"{name} {dt} done {i}")
            assert (buf[total:] == 99).all(), (name, "wrote past count")
            assert not buf[3:unit].any(), (name, "gap not zeroed")
            if N > 1:  # the last rank offers another set: nothing may be touched
                mine = [a.copy() for a in ins[R]]
                other = rv.tail([2, 8]) if R == N - 1 else tail
                call = calls.bind_batch(send, recv, other, comm, dt, MPI.SUM)
                got = call(0, 0, mine, places, gaps, buf, total, scale, post)
                assert got == mpi_steady.NOT_READY, (name, got)
                for i in range(len(shapes)):
                    check(mine[i], ins[R][i], f"{name} {dt} untouched {i}")
            data = calls.bind_batch_data(comm, dt, MPI.SUM)
            assert data is not None, name
            mine = [a.copy() for a in ins[R]]
            data(mine, places, gaps, buf, total, scale, post)
            for i in range(len(shapes)):
                check(mine[i], want[i], f"{name} {dt} data {i}")
        # an array that does not fit its place is an error before any MPI call
        if module is not None and isinstance(calls, mpi_steady.CompiledSteady):
            data = calls.bind_batch_data(comm, np.dtype(np.float32), MPI.SUM)
            try:
                data([np.zeros(4, np.float32)], np.array([[0, 8]], np.int64),
                     np.zeros((0, 2), np.int64), np.zeros(8, np.float32), 8, 0, 1.0)
            except ValueError as exc:
                assert "does not fit its place" in str(exc), exc
            else:
                raise AssertionError("a mismatched place was accepted")
        comm.Barrier()
    comm.Free()
    rounds.Free()
    return [type(c).__name__ for c in impls] + ([] if module else [f"(compiled: {why})"])


for mode in modes:
    if mode == "engine":
        steady = engine()
        print(f"rank {R} engine ok: {checks} checks, hvdcore={HVDCORE}, steady={steady}",
              flush=True)
    elif mode == "direct":
        # (not "direct ok": steady_path.py's direct mode prints that in the same launch)
        print(f"rank {R} direct-batch ok: {' '.join(direct())}", flush=True)
    else:
        raise SystemExit(f"unknown mode {mode}")
hvd.shutdown()
