"""Hierarchical allreduce/allgather (run with HVDCORE_HIERARCHICAL_ALLREDUCE=1 and
HVDCORE_HIERARCHICAL_ALLGATHER=1) against references computed in this one process.

Every dtype x op at odd sizes on both sides of the shared-memory threshold and at ~5 MiB,
in place and not, fused grouped allreduces, scale factors and Average, ragged allgathers, a
process set (flat fallback). Inputs of the broad matrix are small integers, so every
reduction order gives the same bits and results are compared exactly. Random floats check the
documented order: within a node a left fold in rank order, then across nodes (at most two
here) one more operation, compared bit for bit.

``fake-nodes=K`` (argument): set ``SLURM_NODEID`` to the world rank mod K before init, as a
launcher would, so that one host holds K nodes (round-robin placement).

Prints ``rank R: HIER nodes=.. local_size=.. shm_calls=.. leader_calls=.. flat_calls=..
CHECKS n`` on success; any mismatch raises (the exception hook aborts the job).
"""

from __future__ import annotations

import functools
import os
import sys

import numpy as np

for arg in sys.argv[1:]:
    if arg.startswith("fake-nodes="):
        os.environ["SLURM_NODEID"] = str(int(os.environ["OMPI_COMM_WORLD_RANK"])
                                         % int(arg.split("=", 1)[1]))

import hvdcore as hvd  # noqa: E402 - SLURM_NODEID must be set first
from hvdcore import basics  # noqa: E402
from hvdcore.backends.hierarchical import PHASES  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
plane = basics.state().host_plane
assert plane is not None and hasattr(plane, "stats"), f"not the hierarchical plane: {plane!r}"
LAYOUT = plane.stats()["layout"]
checks = 0

DTYPES = [np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_]
OPS = {hvd.Sum: "sum", hvd.Average: "avg", hvd.Min: "min", hvd.Max: "max", hvd.Product: "prod"}
BIG = 5 << 20


def frozen(arr: np.ndarray) -> np.ndarray:
    """``arr``, read-only: inputs are only read (the TensorFlow binding hands the core
    read-only views of tensors' own buffers); a write into one raises."""
    arr.flags.writeable = False
    return arr


def ints(rank: int, n: int, dtype: type, salt: int = 0) -> np.ndarray:
    rng = np.random.default_rng(7919 * rank + salt)
    if dtype == np.bool_:
        return frozen(rng.integers(0, 2, size=n).astype(bool))
    low = 0 if dtype == np.uint8 else -3
    return frozen(rng.integers(low, 4, size=n).astype(dtype))


def normal(rank: int, n: int, dtype: type, salt: int = 0) -> np.ndarray:
    return frozen(np.random.default_rng(104729 * rank + salt).standard_normal(n).astype(dtype))


def reference(op: int, arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    if dtype == np.bool_:
        stack = np.stack(arrays)
        return stack.any(0) if op in (hvd.Sum, hvd.Max) else stack.all(0)
    wide = np.float64 if np.dtype(dtype).kind == "f" else np.int64
    stack = np.stack([a.astype(wide) for a in arrays])
    if op in (hvd.Sum, hvd.Average):
        res = stack.sum(0)
    elif op == hvd.Min:
        res = stack.min(0)
    elif op == hvd.Max:
        res = stack.max(0)
    else:
        # integer products wrap in the tensor's dtype, as MPI's do
        res = functools.reduce(np.multiply, [a for a in arrays]) if np.dtype(dtype).kind != "f" \
            else stack.prod(0)
    if op == hvd.Average:
        return executor_scaled(res.astype(reduced(dtype)), 1.0 / N, dtype)
    return res.astype(dtype)


def reduced(dtype: type) -> np.dtype:
    """The dtype the MPI plane reduces ``dtype`` in (float16 in float32)."""
    return np.dtype(np.float32 if dtype == np.float16 else dtype)


def executor_scaled(values: np.ndarray, factor: float, dtype: type) -> np.ndarray:
    """``values * factor`` into ``dtype`` the way the executor scales (integers truncate)."""
    out = np.empty(values.shape, dtype)
    np.multiply(values, factor, out=out, casting="unsafe")
    return out


def fixed_order(ufunc: np.ufunc, arrays: list[np.ndarray]) -> np.ndarray:
    """The documented order: left fold within each node (rank order), then across nodes."""
    assert len(LAYOUT) <= 2, "only one or two nodes have an exact cross-node order"
    parts = [functools.reduce(ufunc, [arrays[r] for r in node]) for node in LAYOUT]
    return functools.reduce(ufunc, parts)


def check(got: np.ndarray, want: np.ndarray, what: str, exact: bool = True) -> None:
    global checks
    want = np.asarray(want)
    assert got.shape == want.shape, f"rank {R} {what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"rank {R} {what}: dtype {got.dtype} != {want.dtype}"
    if exact:
        bad = np.flatnonzero(got.reshape(-1).view(np.uint8) != want.reshape(-1).view(np.uint8))
        assert bad.size == 0, (f"rank {R} {what}: {bad.size} bytes differ, first at byte "
                               f"{bad[0]}: got {got.reshape(-1)[bad[0] // got.itemsize]}, want "
                               f"{want.reshape(-1)[bad[0] // want.itemsize]}")
    else:
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5), f"rank {R} {what}"
    checks += 1


def sizes_for(dtype: type) -> list[int]:
    item = np.dtype(dtype).itemsize
    # empty, tiny (flat), just above the threshold and odd, ~5 MiB and odd (several segments)
    return [0, 7, (plane.min_bytes // item) + 3 * N + 1, BIG // item + 2 * N + 1]


# every dtype x op, out of place and in place
for dtype in DTYPES:
    for op, opname in OPS.items():
        if dtype == np.bool_ and op == hvd.Average:
            continue
        for n in sizes_for(dtype):
            if n * np.dtype(dtype).itemsize >= BIG and op not in (hvd.Sum, hvd.Min, hvd.Product):
                continue  # the big size once per kind of reduction is enough
            tag = f"{np.dtype(dtype).name} {opname} n={n}"
            ins = [ints(r, n, dtype, salt=op) for r in range(N)]
            want = reference(op, ins, dtype)
            got = hvd.allreduce(ins[R], op=op, name=f"ar {tag}")  # (a read-only input)
            check(got, want, f"allreduce {tag}")
            mine = ins[R].copy()
            hvd.allreduce(mine, op=op, name=f"ar inplace {tag}", out=mine)
            check(mine, want, f"allreduce in place {tag}")

# random floats: bit for bit the documented order (sum and product; min/max are exact anyway)
for dtype in (np.float32, np.float64):
    for op, ufunc in ((hvd.Sum, np.add), (hvd.Product, np.multiply), (hvd.Min, np.minimum)):
        for n in (300_001, BIG // np.dtype(dtype).itemsize + 5):
            ins = [normal(r, n, dtype, salt=n) for r in range(N)]
            got = hvd.allreduce(ins[R], op=op, name=f"order {dtype.__name__} {op} {n}")
            check(got, fixed_order(ufunc, ins), f"fixed order {dtype.__name__} {OPS[op]} n={n}")
            check(got, reference(op, ins, dtype), "fixed order vs float64", exact=False)

# fused grouped allreduce: many tensors of odd sizes, one fusion buffer through shared memory
for dtype in (np.float32, np.int32, np.float16, np.bool_):
    shapes = [(k * 997 + 1,) if k % 3 else (k + 1, 33) for k in range(40)]
    ins = [[ints(r, int(np.prod(s)), dtype, salt=k).reshape(s) for k, s in enumerate(shapes)]
           for r in range(N)]
    got = hvd.grouped_allreduce(ins[R], op=hvd.Sum, name=f"grouped {np.dtype(dtype).name}")
    for k, g in enumerate(got):
        check(g, reference(hvd.Sum, [ins[r][k] for r in range(N)], dtype),
              f"grouped {np.dtype(dtype).name} part {k}")
shapes = [(k * 1009 + 3,) for k in range(30)]
ins = [[normal(r, s[0], np.float32, salt=k) for k, s in enumerate(shapes)] for r in range(N)]
got = hvd.grouped_allreduce(ins[R], op=hvd.Sum, name="grouped normal")
for k, g in enumerate(got):
    check(g, fixed_order(np.add, [ins[r][k] for r in range(N)]), f"grouped fixed order {k}")


# scale factors and Average (the executor scales around the backend's reduction)
def scaled_reference(op: int, inputs: list[np.ndarray], dtype: type, pre: float,
                     post: float) -> np.ndarray:
    """Prescale each input in its dtype, sum (exact here), postscale (and / N for Average)."""
    total = functools.reduce(np.add, [executor_scaled(x, pre, dtype) for x in inputs])
    return executor_scaled(total, post / N if op == hvd.Average else post, dtype)


for dtype in (np.int32, np.int64, np.float32, np.float64):
    n = 200_003
    for op in (hvd.Sum, hvd.Average):
        for pre, post in ((1.0, 1.0), (0.5, 4.0), (4.0, 0.25)):
            ins = [ints(r, n, dtype, salt=3) for r in range(N)]
            want = scaled_reference(op, ins, dtype, pre, post)
            kw = dict(op=op, prescale_factor=pre, postscale_factor=post)
            tag = f"{np.dtype(dtype).name} {OPS[op]} pre={pre} post={post}"
            check(hvd.allreduce(ins[R], name=f"scaled {tag}", **kw), want, f"scaled {tag}")
            g = hvd.grouped_allreduce([ins[R], ins[R][:1001]], name=f"gscaled {tag}", **kw)
            check(g[0], want, f"grouped scaled {tag}")
            check(g[1], want[:1001], f"grouped scaled (part 2) {tag}")

# ragged allgather: every dtype, rank r gives a different row count (one rank gives none)
for dtype in DTYPES:
    for per_row, rows_base in ((3, 5), (8, 5_000), (64, 2_000)):
        rows = [(rows_base * (r + 1)) % (rows_base * 3) + r for r in range(N)]
        rows[N // 2] = 0 if N > 1 else rows[0]
        ins = [ints(r, rows[r] * per_row, dtype, salt=9).reshape(rows[r], per_row)
               for r in range(N)]
        got = hvd.allgather(ins[R], name=f"ag {np.dtype(dtype).name} {per_row}")
        check(got, np.concatenate(ins), f"allgather {np.dtype(dtype).name} rows={rows}")
# 0-d input and an allgather where every rank gives nothing
check(hvd.allgather(np.float32(R + 0.5)), np.arange(N, dtype=np.float32) + 0.5, "allgather 0-d")
check(hvd.allgather(np.empty((0, 4), np.int64)), np.empty((0, 4), np.int64), "allgather empty")

# a process set other than the global one: the flat path, still right
if N > 1:
    flat_before = plane.counters["flat_calls"]
    evens = hvd.add_process_set([r for r in range(N) if r % 2 == 0])
    if R % 2 == 0:
        members = [r for r in range(N) if r % 2 == 0]
        n = 100_001
        ins = [ints(r, n, np.int64, salt=11) for r in range(N)]
        got = hvd.allreduce(ins[R], op=hvd.Sum, process_set=evens, name="set sum")
        check(got, sum(ins[r] for r in members), "process set allreduce")
        got = hvd.allgather(ins[R].reshape(-1, 1), process_set=evens, name="set gather")
        check(got, np.concatenate([ins[r].reshape(-1, 1) for r in members]), "process set allgather")
        assert plane.counters["flat_calls"] >= flat_before + 2, "a process set took the shm path"
    hvd.remove_process_set(evens)

s = plane.stats()
# The step timers: every step named, none negative, and time recorded once the node's
# shared-memory path ran (copies of at least MIN_BYTES each).
assert tuple(s["phase_s"]) == PHASES, s["phase_s"]
assert all(v >= 0.0 for v in s["phase_s"].values()), s["phase_s"]
if s["shm_calls"] and s["local_size"] > 1:
    assert s["phase_s"]["copy_out"] > 0.0 and s["phase_s"]["reduce"] > 0.0, s["phase_s"]
print(f"rank {R}: HIER nodes={s['nodes']} local_size={s['local_size']} "
      f"shm_calls={s['shm_calls']} leader_calls={s['leader_calls']} "
      f"flat_calls={s['flat_calls']} window_bytes={s['window_bytes']} layout={s['layout']} "
      f"CHECKS {checks}", flush=True)
hvd.shutdown()
assert plane.closed
