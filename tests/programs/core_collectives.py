"""Every core collective against a NumPy reference computed locally; runs at any world size.

Each rank builds every rank's input deterministically (seeded by rank), so the reference is
computed in this one process. Prints 'CHECKS <n>' and a digest of all results on success;
any mismatch raises (and, with hvdcore's exception hook, aborts the job with a non-zero code).
"""

from __future__ import annotations

import hashlib
import os
import sys

import numpy as np

import hvdcore as hvd
from hvdcore import config
from hvdcore.engine.fusion import ALIGNMENT, fused_layout, slot_bytes

DTYPES = [np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_]
OPS = {hvd.Sum: "sum", hvd.Average: "avg", hvd.Min: "min", hvd.Max: "max", hvd.Product: "prod"}
SHAPES = [(), (0,), (7,), (3, 5), (2, 3, 4)]

hvd.init()
R, N = hvd.rank(), hvd.size()
digest = hashlib.sha256()
checks = 0


def data(rank: int, shape: tuple, dtype: type, salt: int = 0) -> np.ndarray:
    """Rank ``rank``'s input, read-only: the core must never write into an input (the
    TensorFlow binding hands it read-only views of tensors' own buffers); a write raises."""
    rng = np.random.default_rng(1000 * rank + salt)
    if dtype == np.bool_:
        arr = rng.integers(0, 2, size=shape).astype(bool)
    elif np.dtype(dtype).kind in "iu":
        arr = rng.integers(0 if dtype == np.uint8 else -3, 4, size=shape).astype(dtype)
    else:
        arr = (rng.standard_normal(size=shape) * 2).astype(dtype)
    if isinstance(arr, np.ndarray):  # (shape () gives a NumPy scalar, immutable anyway)
        arr.flags.writeable = False
    return arr


def reference(op: int, arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    if dtype == np.bool_:
        stack = np.stack(arrays)
        return stack.any(0) if op in (hvd.Sum, hvd.Max) else stack.all(0)
    acc_t = np.float64 if np.dtype(dtype).kind == "f" else np.int64
    stack = np.stack([a.astype(acc_t) for a in arrays])
    if op == hvd.Sum:
        res = stack.sum(0)
    elif op == hvd.Average:
        res = stack.sum(0) / len(arrays)
    elif op == hvd.Min:
        res = stack.min(0)
    elif op == hvd.Max:
        res = stack.max(0)
    else:
        res = stack.prod(0)
    return res.astype(dtype) if np.dtype(dtype).kind != "f" else res


def check(got: np.ndarray, want: np.ndarray, what: str, dtype: type) -> None:
    global checks
    tol = {np.float16: 2e-2, np.float32: 1e-5, np.float64: 1e-12}.get(dtype)
    assert got.shape == np.shape(want), f"{what}: shape {got.shape} != {np.shape(want)}"
    assert got.dtype == np.dtype(dtype), f"{what}: dtype {got.dtype} != {np.dtype(dtype)}"
    if tol is None:
        assert np.array_equal(got, want), f"{what}: {got} != {want}"
    else:
        assert np.allclose(got.astype(np.float64), want, rtol=tol, atol=tol), \
            f"{what}: {got} != {want}"
    digest.update(np.ascontiguousarray(got).tobytes())
    checks += 1


# allreduce: every dtype x op x shape, plus scale factors
for dtype in DTYPES:
    for op in OPS:
        if dtype == np.bool_ and op == hvd.Average:
            continue
        if op == hvd.Product and np.dtype(dtype).kind in "iuf" and dtype != np.bool_:
            pass
        for shape in SHAPES:
            mine = data(R, shape, dtype)
            want = reference(op, [data(r, shape, dtype) for r in range(N)], dtype)
            got = hvd.allreduce(mine, op=op, name=f"ar.{np.dtype(dtype).name}.{op}.{shape}")
            check(got, want, f"allreduce {np.dtype(dtype).name} {OPS[op]} {shape}", dtype)
            assert np.array_equal(mine, data(R, shape, dtype)), "allreduce modified its input"

for dtype in (np.float32, np.float64, np.int32):
    mine = data(R, (4, 3), dtype)
    got = hvd.allreduce(mine, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    ref = sum(data(r, (4, 3), dtype).astype(np.float64) * 0.5 for r in range(N)) * 3.0
    if np.dtype(dtype).kind != "f":
        ref = sum((data(r, (4, 3), dtype) * 0.5).astype(dtype).astype(np.float64)
                  for r in range(N)) * 3.0
        ref = ref.astype(dtype)
    check(got, ref, f"allreduce scaled {np.dtype(dtype).name}", dtype)

# Horovod's scale factors (issue 18): prescale each rank's input in its dtype (integers
# truncate), reduce, postscale, and for Average divide by the set size after the postscale;
# every dtype, through allreduce, a fused grouped allreduce, reducescatter (uneven rows) and
# grouped reducescatter
def scaled_reference(op, inputs, dtype, pre, post):
    ins = [(x.astype(np.float64) * pre) for x in inputs]
    if np.dtype(dtype).kind in "iu":
        ins = [np.trunc(v) for v in ins]
    if op in (hvd.Sum, hvd.Average):
        v = sum(ins)
    else:
        v = (np.minimum if op == hvd.Min else np.maximum).reduce(ins)
    v = v * post / (N if op == hvd.Average else 1)
    return (np.trunc(v) if np.dtype(dtype).kind in "iu" else v).astype(dtype)


def rows_of(total, index):
    base, extra = divmod(total, N)
    start = index * base + min(index, extra)
    return slice(start, start + base + (1 if index < extra else 0))


for dtype in (np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32, np.float64):
    for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max):
        for pre, post in ((0.5, 3.0), (3.0, 0.25)):
            tag = f"{np.dtype(dtype).name} {OPS[op]} pre={pre} post={post}"
            ins = [(np.arange(12).reshape(4, 3) % 5 + r).astype(dtype) for r in range(N)]
            want = scaled_reference(op, ins, dtype, pre, post)
            kw = dict(op=op, prescale_factor=pre, postscale_factor=post)
            check(hvd.allreduce(ins[R], **kw), want, f"allreduce scaled {tag}", dtype)
            g = hvd.grouped_allreduce([ins[R], ins[R][:1]], **kw)
            check(g[0], want, f"grouped allreduce scaled {tag}", dtype)
            check(g[1], want[:1], f"grouped allreduce scaled (part 2) {tag}", dtype)
            rows = 2 * N + 1
            rins = [(np.arange(rows * 2).reshape(rows, 2) % 5 + r).astype(dtype)
                    for r in range(N)]
            rwant = scaled_reference(op, rins, dtype, pre, post)[rows_of(rows, R)]
            check(hvd.reducescatter(rins[R], **kw), rwant, f"reducescatter scaled {tag}", dtype)
            gr = hvd.grouped_reducescatter([rins[R], rins[R]], **kw)
            check(gr[1], rwant, f"grouped reducescatter scaled {tag}", dtype)

# deprecated average= flag and in-place out=
x = np.full(5, float(R + 1))
y = hvd.allreduce(x, average=False)
check(y, np.full(5, float(sum(range(1, N + 1)))), "allreduce average=False", np.float64)
hvd.allreduce(x, op=hvd.Average, out=x)
check(x, np.full(5, (N + 1) / 2), "allreduce in place", np.float64)

# grouped allreduce (mixed dtypes) and async + poll
group = [data(R, (3,), np.float32, 1), data(R, (2, 2), np.int64, 2), data(R, (), np.float64, 3)]
outs = hvd.grouped_allreduce(group, op=hvd.Sum)
for i, (g, o) in enumerate(zip(group, outs, strict=True)):
    want = reference(hvd.Sum, [data(r, g.shape, g.dtype.type, i + 1) for r in range(N)],
                     g.dtype.type)
    check(o, want, f"grouped_allreduce[{i}]", g.dtype.type)
# A fused group: each result is a view of one pooled buffer, starting on a 64-byte boundary
# (what lets the TensorFlow binding hand results over without copies).
threshold = config.load().fusion_threshold
for dtype in (np.float32, np.float64, np.int8):
    shapes = [(10,), (5000,), (3, 7), (7001,), (33001,)]  # pooled: >= 32 KiB in all
    group = [data(R, s, dtype, 20 + i) for i, s in enumerate(shapes)]
    outs = hvd.grouped_allreduce(group, op=hvd.Sum)
    for i, (s, o) in enumerate(zip(shapes, outs, strict=True)):
        want = reference(hvd.Sum, [data(r, s, dtype, 20 + i) for r in range(N)], dtype)
        check(o, want, f"fused group {np.dtype(dtype).name}[{i}]", dtype)
    layout = fused_layout(shapes, np.dtype(dtype).itemsize)
    if threshold >= sum(slot_bytes(o.nbytes) for o in outs):  # (fused into one buffer)
        starts = [o.__array_interface__["data"][0] for o in outs]
        assert all(a % ALIGNMENT == 0 for a in starts), (dtype, [a % ALIGNMENT for a in starts])
        assert [a - starts[0] for a in starts] == [
            off * np.dtype(dtype).itemsize for off in layout.offsets], (dtype, starts)
handles = [hvd.allreduce_async(data(R, (64,), np.float32, 10 + i), op=hvd.Sum, name=f"async.{i}")
           for i in range(20)]
for i, h in enumerate(handles):
    out = hvd.synchronize(h)
    assert hvd.poll(h)
    want = reference(hvd.Sum, [data(r, (64,), np.float32, 10 + i) for r in range(N)], np.float32)
    check(out, want, f"allreduce_async {i}", np.float32)

# allgather: ragged first dimension, every dtype; 0-d inputs become one row each
for dtype in DTYPES:
    rows = lambda r: (r % 3) + (1 if dtype != np.int8 else 0)  # noqa: E731 - int8: some empty
    mine = data(R, (rows(R), 2), dtype)
    got = hvd.allgather(mine)
    want = np.concatenate([data(r, (rows(r), 2), dtype) for r in range(N)])
    check(got, want, f"allgather {np.dtype(dtype).name}", dtype)
got = hvd.allgather(np.array(R, np.int32))
check(got, np.arange(N, dtype=np.int32), "allgather 0-d", np.int32)
outs = hvd.grouped_allgather([np.full((R + 1,), R, np.int64), np.full((1, 2), R, np.float32)])
check(outs[0], np.concatenate([np.full((r + 1,), r, np.int64) for r in range(N)]),
      "grouped_allgather[0]", np.int64)
check(outs[1], np.concatenate([np.full((1, 2), r, np.float32) for r in range(N)]),
      "grouped_allgather[1]", np.float32)

# broadcast from every root, every dtype; input not modified
for root in range(N):
    for dtype in DTYPES:
        mine = data(R, (3, 2), dtype, 5)
        got = hvd.broadcast(mine, root_rank=root)
        check(got, data(root, (3, 2), dtype, 5), f"broadcast root {root}", dtype)
        assert np.array_equal(mine, data(R, (3, 2), dtype, 5)), "broadcast modified its input"
got = hvd.broadcast(np.array(float(R)), root_rank=N - 1)
check(got, np.array(float(N - 1)), "broadcast 0-d", np.float64)

# alltoall with uneven splits: rank r sends (r + d) % 3 rows to rank d
def splits_of(r: int) -> list[int]:
    return [(r + d) % 3 for d in range(N)]


for dtype in (np.float32, np.int64, np.bool_, np.float16):
    mine = data(R, (sum(splits_of(R)), 2), dtype, 7)
    out, recv = hvd.alltoall(mine, splits=splits_of(R))
    parts = []
    for r in range(N):
        src = data(r, (sum(splits_of(r)), 2), dtype, 7)
        off = sum(splits_of(r)[:R])
        parts.append(src[off:off + splits_of(r)[R]])
    check(out, np.concatenate(parts), f"alltoall {np.dtype(dtype).name}", dtype)
    check(recv, np.array([splits_of(r)[R] for r in range(N)], np.int32), "alltoall splits",
          np.int32)
out, recv = hvd.alltoall(np.arange(2 * N, dtype=np.int32) + 100 * R)
check(out, np.concatenate([np.arange(2 * R, 2 * R + 2, dtype=np.int32) + 100 * r
                           for r in range(N)]), "alltoall even", np.int32)

# reducescatter, uneven rows: first (rows % N) ranks get one extra row
for rows in (N * 2, N * 2 + 1, 1):
    for op in (hvd.Sum, hvd.Average, hvd.Max):
        for dtype in (np.float32, np.int32, np.float16):
            mine = data(R, (rows, 3), dtype, 9)
            got = hvd.reducescatter(mine, op=op)
            full = reference(op, [data(r, (rows, 3), dtype, 9) for r in range(N)], dtype)
            base, extra = divmod(rows, N)
            start = R * base + min(R, extra)
            stop = start + base + (1 if R < extra else 0)
            check(got, full[start:stop], f"reducescatter rows={rows} {OPS[op]}", dtype)
outs = hvd.grouped_reducescatter([np.ones((N, 2), np.float64) * R, np.ones(N, np.int64)],
                                 op=hvd.Sum)
check(outs[0], np.full((1, 2), float(sum(range(N)))), "grouped_reducescatter[0]", np.float64)
check(outs[1], np.full(1, N, np.int64), "grouped_reducescatter[1]", np.int64)

# objects
objs = hvd.allgather_object({"rank": R, "payload": list(range(R))})
assert objs == [{"rank": r, "payload": list(range(r))} for r in range(N)], objs
obj = hvd.broadcast_object({"cfg": [1, 2, 3]} if R == N - 1 else None, root_rank=N - 1)
assert obj == {"cfg": [1, 2, 3]}, obj
checks += 2

# process sets: evens and odds, collectives inside each
if N > 1:
    evens = hvd.add_process_set([r for r in range(N) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(N) if r % 2 == 1])
    mine_set = evens if R % 2 == 0 else odds
else:
    evens = odds = None
    mine_set = hvd.global_process_set
members = mine_set.ranks
got = hvd.allreduce(np.array([float(R)]), op=hvd.Sum, process_set=mine_set)
check(got, np.array([float(sum(members))]), "allreduce process set", np.float64)
got = hvd.allgather(np.array([R], np.int32), process_set=mine_set)
check(got, np.array(members, np.int32), "allgather process set", np.int32)
got = hvd.broadcast(np.array([R], np.int64), root_rank=members[-1], process_set=mine_set)
check(got, np.array([members[-1]], np.int64), "broadcast process set", np.int64)
assert mine_set.included() and mine_set.rank() == members.index(R)
hvd.barrier(process_set=mine_set)
# a global collective between set operations keeps working
got = hvd.allreduce(np.array([1.0]), op=hvd.Sum)
check(got, np.array([float(N)]), "allreduce after process sets", np.float64)
if N > 1:
    assert hvd.remove_process_set(odds) and hvd.remove_process_set(evens)
    assert not hvd.remove_process_set(evens), "removing twice must return False"
    ps = hvd.add_process_set(hvd.ProcessSet([N - 1]))
    if ps.included():
        check(hvd.allreduce(np.array([2], np.int32), op=hvd.Sum, process_set=ps),
              np.array([2], np.int32), "re-added set", np.int32)
    else:
        assert ps.rank() is None and ps.included() is False
    hvd.remove_process_set(ps)

# join: the last rank has one more batch; joined ranks contribute neutral values
if R == N - 1:
    got = hvd.allreduce(np.array([5.0]), op=hvd.Sum, name="join.extra")
    check(got, np.array([5.0]), "allreduce with joined ranks (sum)", np.float64)
    got = hvd.allreduce(np.array([7.0]), op=hvd.Average, name="join.extra.avg")
    # Horovod: joined ranks count in the average (they contribute zeros)
    check(got, np.array([7.0 / N]), "allreduce with joined ranks (avg over the set)",
          np.float64)
    got = hvd.allreduce(np.array([3], np.int32), op=hvd.Min, name="join.extra.min")
    check(got, np.array([3], np.int32), "allreduce with joined ranks (min)", np.int32)
last = hvd.join()
assert last == N - 1, f"join returned {last}, expected {N - 1}"
hvd.barrier()

# Horovod's test_horovod_join_allreduce: two fusable tensors, already cached, averaged while
# rank 0 has joined: every other rank gets tensor * (N - 1) / N (fused and unfused)
if N > 1:
    ta = np.arange(5.0) - 2.0
    tb = np.arange(17, dtype=np.float32)
    for _ in range(2):
        hvd.synchronize(hvd.allreduce_async(ta, name="join.a"))
        hvd.synchronize(hvd.allreduce_async(tb, name="join.b"))
    if R == 0:
        hvd.join()
    else:
        ha = hvd.allreduce_async(ta, name="join.a")
        hb = hvd.allreduce_async(tb, name="join.b")
        check(hvd.synchronize(ha), ta * (N - 1) / N, "joined average, cached (a)", np.float64)
        check(hvd.synchronize(hb), tb * (N - 1) / N, "joined average, cached (b)", np.float32)
        hvd.join()
    hvd.barrier()

progress = "caller" if hvd.basics.state().engine.caller_progress else "thread"
os.write(1, f"rank {R}: CHECKS {checks} DIGEST {digest.hexdigest()[:16]} PROGRESS {progress} CONTROLLER {hvd.basics.controller()}\n"
         .encode())
hvd.shutdown()
sys.exit(0)
