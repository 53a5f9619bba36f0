"""``op=hvd.Adasum`` on the core's host plane, at any world size.

On 1, 2, 4, ... ranks:
- Horovod's CPU test (``test/parallel/test_adasum_tensorflow.py``): its NumPy tree reference,
  float16/32/64, within its tolerances; ``test_adasum_pytorch.py``'s orthogonal columns (Adasum
  is their sum) and multiples of one vector (their average), float32 and float16, within its
  tolerance (relative error / 100 < eps);
- the formula by hand at 2 ranks, a zero vector (the other's comes back as it is);
- every result bit for bit against ``adasum.tree_reduce`` (Horovod's tree and arithmetic, in one
  process) for float16/32/64, scalars and empty tensors, grouped, async (fused or not), with
  prescale/postscale and ``out=``; every rank holds the same bits.
On 3 ranks: every rank gets Horovod's NotImplementedError, and the runtime stays usable.
Everywhere: an integer tensor and a non-global process set are refused on every rank.
Prints ``ADASUM OK <checks>`` on success.
"""

from __future__ import annotations

import math

import numpy as np
from rank_checks import Checks

import hvdcore as hvd
from hvdcore.engine.adasum import tree_reduce

hvd.init()
R, N = hvd.rank(), hvd.size()
CHECKS = Checks(R)
ok = CHECKS.ok


def raises(exc: type[BaseException], needle: str, fn) -> None:
    try:
        fn()
    except exc as err:
        ok(needle in str(err), f"{needle!r} not in {err}")
    else:
        raise AssertionError(f"rank {R}: no {exc.__name__} ({needle})")
    # the runtime is healthy after the refusal
    ok(float(hvd.allreduce(np.ones(1), op=hvd.Sum)[0]) == N, "Sum after a refused Adasum")


if N & (N - 1):  # Horovod's limit: a power-of-two number of ranks
    raises(NotImplementedError, "power-of-two", lambda: hvd.allreduce(np.ones(3), op=hvd.Adasum))
    raises(NotImplementedError, "power-of-two",
           lambda: hvd.grouped_allreduce([np.ones(3)], op=hvd.Adasum))
    print(f"ADASUM OK {CHECKS.count}", flush=True)
    raise SystemExit(0)

# -- Horovod's checks --------------------------------------------------------------------------
def horovod_reference(per_rank: list) -> list:
    """The reference of Horovod's CPU Adasum test (``test/parallel/test_adasum_tensorflow.py``):
    NumPy float64, a coefficient of 1 only for a zero norm, pairs (2i, 2i+1) at each level."""
    def pair(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        dot, an, bn = float(np.dot(a.ravel(), b.ravel())), float(np.dot(a.ravel(), a.ravel())), \
            float(np.dot(b.ravel(), b.ravel()))
        return (1.0 - dot / an * 0.5 if an else 1.0) * a + (1.0 - dot / bn * 0.5 if bn else 1.0) * b

    level = [list(ts) for ts in per_rank]
    while len(level) > 1:
        level = [[pair(a, b) for a, b in zip(level[i], level[i + 1], strict=True)]
                 for i in range(0, len(level), 2)]
    return level[0]


# TensorFlow's assertAllCloseAccordingToType, which that test uses: rtol = atol = 1e-3 for
# float16, 1e-6 for float32 and float64
TOLERANCE = {np.float16: 1e-3, np.float32: 1e-6, np.float64: 1e-6}
rng = np.random.default_rng(2)
for trial in range(3):
    every = [[rng.random((2, 2)), rng.random((2, 2))] for _ in range(N)]
    answer = horovod_reference(every)
    for dtype, tol in TOLERANCE.items():
        for i, t in enumerate(every[R]):
            got = hvd.allreduce(t.astype(dtype), op=hvd.Adasum)
            ok(np.allclose(got, answer[i].astype(dtype), rtol=tol, atol=tol),
               f"Horovod's CPU test {trial} {np.dtype(dtype).name} #{i}: {got} vs {answer[i]}")


def close_as_horovod(dtype: type, want: np.ndarray, got: np.ndarray) -> bool:
    """The tolerance of Horovod's torch Adasum tests: |want - got| / |want| / 100 < eps."""
    diff = np.linalg.norm(want - got.astype(np.float64)) / np.linalg.norm(want) / 100.0
    return bool(diff < np.finfo(dtype).eps)


# test_adasum_pytorch.py's orthogonal (the sum: its denominator is 1 without NCCL) and parallel
# (the average) cases; its two stability cases expect the average of vectors whose norms fall
# below Adasum's 1e-8 cut-off, which holds only on its single-node NCCL path (a plain average
# inside a node): on the CPU path Horovod's own arithmetic gives another answer
for dtype in (np.float32, np.float16):
    for n in (N * 20 - 17, N * 2 + 1, N + 2, 2 ** 19):
        q = np.linalg.qr(rng.normal(0, 1, (n, N)))[0].astype(dtype)
        got = hvd.allreduce(q[:, R].copy(), op=hvd.Adasum)
        ok(close_as_horovod(dtype, q.astype(np.float64).sum(axis=1), got),
           f"orthogonal {np.dtype(dtype).name} {n}")
    for n in (N * 20 - 13, N * 2 + 1, N + 2, 2 ** 19):
        q = (rng.normal(0, 1, (n, 1)) @ rng.normal(0, 1, (N, 1)).T).astype(dtype)
        got = hvd.allreduce(q[:, R].copy(), op=hvd.Adasum)
        ok(close_as_horovod(dtype, q.astype(np.float64).sum(axis=1) / N, got),
           f"parallel {np.dtype(dtype).name} {n}")

# -- the formula by hand, zeros ----------------------------------------------------------------
if N == 2:  # a = [1, 0], b = [1, 1]: a.b = 1, |a|^2 = 1, |b|^2 = 2 -> 0.5 a + 0.75 b
    got = hvd.allreduce(np.array([1.0, 0.0]) if R == 0 else np.array([1.0, 1.0]), op=hvd.Adasum)
    ok(got.tolist() == [1.25, 0.75], f"by hand: {got}")
mine = np.arange(1.0, 6.0) if R == 0 else np.zeros(5)
ok(hvd.allreduce(mine, op=hvd.Adasum).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0], "zeros elsewhere")
ok(not hvd.allreduce(np.zeros(4, np.float32), op=hvd.Adasum).any(), "all zeros")


# -- bit for bit against the tree --------------------------------------------------------------
def data(rank: int, shape: tuple, dtype: type, salt: int) -> np.ndarray:
    gen = np.random.default_rng(100 * rank + salt)
    return (gen.standard_normal(shape) * (rank + 1) + 0.5 * salt).astype(dtype)


def want(shapes: list, dtype: type, salt: int, pre: float = 1.0, post: float = 1.0) -> list:
    """Every rank's tensors, scaled as the core scales, reduced by the tree, split back."""
    def scaled(x: np.ndarray, factor: float) -> np.ndarray:
        if factor == 1.0:
            return x
        wide = np.float32 if x.dtype == np.float16 else x.dtype.type
        return (x.astype(wide) * wide(factor)).astype(x.dtype)

    vecs = [np.concatenate([scaled(data(r, s, dtype, salt + i), pre).reshape(-1)
                            for i, s in enumerate(shapes)]) for r in range(N)]
    counts = [math.prod(s) for s in shapes]
    flat = scaled(tree_reduce(vecs, counts), post)
    out, off = [], 0
    for s, c in zip(shapes, counts, strict=True):
        out.append(flat[off:off + c].reshape(s))
        off += c
    return out


def same(got: np.ndarray, ref: np.ndarray, what: str) -> None:
    ok(got.dtype == ref.dtype and got.shape == ref.shape and np.array_equal(got, ref),
       f"{what}: {got} != {ref}")
    every = hvd.allgather(np.ascontiguousarray(got).reshape(1, -1).view(np.uint8))
    ok(all(np.array_equal(every[0], row) for row in every), f"{what}: ranks differ")


for dtype in (np.float16, np.float32, np.float64):
    dn = np.dtype(dtype).name
    for salt, shape in enumerate([(), (0,), (7,), (3, 5), (1000,)]):
        same(hvd.allreduce(data(R, shape, dtype, salt), op=hvd.Adasum, name=f"one.{dn}.{salt}"),
             want([shape], dtype, salt)[0], f"{dn} {shape}")
    shapes = [(4,), (), (2, 3), (0,), (9,)]
    got = hvd.grouped_allreduce([data(R, s, dtype, 20 + i) for i, s in enumerate(shapes)],
                                op=hvd.Adasum, name=f"group.{dn}")
    for i, (g, w) in enumerate(zip(got, want(shapes, dtype, 20), strict=True)):
        same(g, w, f"grouped {dn} #{i}")
    handles = [hvd.allreduce_async(data(R, (5 + i,), dtype, 40 + i), op=hvd.Adasum,
                                   name=f"async.{dn}.{i}") for i in range(6)]
    for i, h in enumerate(handles):
        same(hvd.synchronize(h), want([(5 + i,)], dtype, 40 + i)[0], f"async {dn} #{i}")
    got = hvd.allreduce(data(R, (11,), dtype, 60), op=hvd.Adasum, prescale_factor=0.5,
                        postscale_factor=4.0)
    same(got, want([(11,)], dtype, 60, 0.5, 4.0)[0], f"scaled {dn}")
    out = np.empty(6, dtype)
    got = hvd.allreduce(data(R, (6,), dtype, 70), op=hvd.Adasum, out=out)
    ok(got is out, "out= returned")
    same(out, want([(6,)], dtype, 70)[0], f"out= {dn}")
for step in range(3):  # a training loop's repeated named call (the cached route)
    same(hvd.allreduce(data(R, (8,), np.float32, 80 + step), op=hvd.Adasum, name="loop"),
         want([(8,)], np.float32, 80 + step)[0], f"loop step {step}")

# -- refusals on every rank --------------------------------------------------------------------
raises(ValueError, "float16, float32 or float64",
       lambda: hvd.allreduce(np.ones(3, np.int32), op=hvd.Adasum))
if N > 1:
    evens = hvd.add_process_set(list(range(0, N, 2)))
    if R % 2 == 0:
        raises(NotImplementedError, "global process set",
               lambda: hvd.allreduce(np.ones(3), op=hvd.Adasum, process_set=evens))
    else:
        ok(float(hvd.allreduce(np.ones(1), op=hvd.Sum)[0]) == N, "odd ranks: Sum")
    raises(hvd.MismatchError, "mismatched op",
           lambda: hvd.allreduce(np.ones(3), op=hvd.Adasum if R == 0 else hvd.Sum))
print(f"ADASUM OK {CHECKS.count}", flush=True)
